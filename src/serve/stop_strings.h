// Stop strings over streamed text: generation ends where the text first contains one
// of them, and the client never sees the stop string nor anything after it. While the
// text ends in a prefix of a stop string that prefix is held back, since the next
// token may complete it (OpenAI's and llama-server's behaviour).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace moeflow::serve {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends `text`; returns what may be sent now. After a stop string is found,
  // stopped() is true and further pushes return nothing.
  std::string push(std::string_view text);
  // At the end of generation: what was held back (nothing once stopped).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace moeflow::serve
