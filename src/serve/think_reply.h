// Replies that think first, between <think> and </think> (Qwen3, DeepSeek-R1 and
// V3.1, GLM-4.5), split into the reasoning and the answer, as llama.cpp's
// `--reasoning-format deepseek` and vLLM's reasoning parsers return them
// (`reasoning_content` beside `content`).
//
// A reply thinks when it opens with <think> (after white space), or when the prompt
// already opened the block (DeepSeek-R1's template ends its generation prompt with
// "<think>\n"); the thinking ends at </think>, or with the reply. White space right
// after either tag (and before the opening one) is dropped. A reply that does not think
// is all answer, as written.
#pragma once
#include <string>

namespace moeflow::serve {

class ThinkStream {
 public:
  struct Delta {
    std::string reasoning, content;
  };
  explicit ThinkStream(bool prompt_opened_thinking = false)
      : mode_(prompt_opened_thinking ? Mode::think : Mode::start), skip_space_(prompt_opened_thinking) {}
  // The next piece of the reply; what can go out now on each side.
  Delta push(const std::string& text);
  // What is still held, at the end of the reply.
  Delta finish();

 private:
  enum class Mode { start, think, content };
  Mode mode_;
  bool skip_space_;         // white space right after a tag is dropped
  std::string held_;        // a tail that may begin the tag that ends this part
};

// Whether a rendered prompt leaves the reply inside a <think> block.
bool prompt_opens_thinking(const std::string& prompt);

ThinkStream::Delta split_thinking(const std::string& reply, bool prompt_opened_thinking);

}  // namespace moeflow::serve
