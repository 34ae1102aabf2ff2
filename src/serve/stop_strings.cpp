#include "serve/stop_strings.h"

#include "serve/partial_match.h"

namespace moeflow::serve {

std::string StopStrings::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // The earliest complete stop string ends the text there.
  const size_t cut = find_first_marker(held_, stops_);
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Keep the longest suffix that begins some stop string.
  const size_t keep = partial_marker_tail(held_, stops_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStrings::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace moeflow::serve
