#include "serve/think_reply.h"

#include <array>
#include <string_view>

#include "serve/partial_match.h"

namespace moeflow::serve {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

ThinkStream::Delta ThinkStream::push(const std::string& text) {
  Delta d;
  held_ += text;
  for (;;) {
    if (skip_space_) {
      size_t n = 0;
      while (n < held_.size() && space(held_[n])) ++n;
      held_.erase(0, n);
      if (held_.empty()) return d;
      skip_space_ = false;
    }
    if (mode_ == Mode::start) {
      // White space before <think> goes with it; before anything else it is answer.
      size_t n = 0;
      while (n < held_.size() && space(held_[n])) ++n;
      const std::string_view rest = std::string_view(held_).substr(n);
      if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return d;  // undecided
      if (rest.substr(0, kOpen.size()) == kOpen) {
        held_.erase(0, n + kOpen.size());
        mode_ = Mode::think;
        skip_space_ = true;
        continue;
      }
      mode_ = Mode::content;
    }
    if (mode_ == Mode::content) {
      d.content += held_;
      held_.clear();
      return d;
    }
    const size_t close = held_.find(kClose);
    if (close == std::string::npos) {
      const size_t keep = partial_marker_tail(held_, std::array{kClose});
      d.reasoning += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return d;
    }
    d.reasoning += held_.substr(0, close);
    held_.erase(0, close + kClose.size());
    mode_ = Mode::content;
    skip_space_ = true;
  }
}

ThinkStream::Delta ThinkStream::finish() {
  Delta d;
  if (mode_ == Mode::think) d.reasoning = std::move(held_);
  else d.content = std::move(held_);  // a reply too short to say is answer
  held_.clear();
  return d;
}

bool prompt_opens_thinking(const std::string& prompt) {
  size_t e = prompt.size();
  while (e > 0 && space(prompt[e - 1])) --e;
  return e >= kOpen.size() && std::string_view(prompt).substr(e - kOpen.size(), kOpen.size()) == kOpen;
}

ThinkStream::Delta split_thinking(const std::string& reply, bool prompt_opened_thinking) {
  ThinkStream s(prompt_opened_thinking);
  ThinkStream::Delta d = s.push(reply);
  const ThinkStream::Delta rest = s.finish();
  d.reasoning += rest.reasoning;
  d.content += rest.content;
  return d;
}

}  // namespace moeflow::serve
