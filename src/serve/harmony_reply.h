// gpt-oss's replies, written in OpenAI's Harmony format, read into what the chat API
// returns. A reply is a run of messages, each a header and a body:
//
//   <|channel|>analysis<|message|>REASONING<|end|>
//   <|start|>assistant<|channel|>final<|message|>ANSWER              (then <|return|>)
//   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS
//                                                                    (then <|call|>)
//
// (the prompt ends with "<|start|>assistant", so the first header starts at its
// channel). The analysis channel is the reasoning (`reasoning_content`, as llama.cpp and
// vLLM return it), a message to `functions.NAME` is a call of NAME, and every other
// message (final, commentary without a recipient: a preamble meant for the user) is
// content. A reply with no Harmony header at its start is content whole.
#pragma once
#include <string>
#include <vector>

#include "serve/tool_calls.h"

namespace moeflow::serve {

struct HarmonyReply {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;  // messages to functions.NAME, NAME one of the request's functions
};

// A reply read as it arrives: push() returns what can go out at once on each side;
// a call's arguments are held until finish().
class HarmonyStream {
 public:
  struct Delta {
    std::string reasoning, content;
  };
  Delta push(const std::string& text);
  // The rest: the last message's held tail and the calls. A call of a function the
  // request does not have, or with arguments that are not a JSON object, is content as
  // written (its body).
  HarmonyReply finish(const std::vector<ToolFunction>& tools);

 private:
  enum class Mode { start, header, body, plain };
  void emit(const std::string& text, Delta& d);
  void end_message();
  Mode mode_ = Mode::start;
  std::string buf_;
  size_t pos_ = 0;          // buf_[0, pos_) is read
  std::string channel_, recipient_;
  std::string call_args_;   // the current message's body, when it is a call
  struct PendingCall {
    std::string recipient, args;
  };
  std::vector<PendingCall> pending_;
};

HarmonyReply parse_harmony_reply(const std::string& text, const std::vector<ToolFunction>& tools);

}  // namespace moeflow::serve
