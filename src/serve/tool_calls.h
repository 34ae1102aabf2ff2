// Function calling (the OpenAI API's `tools`): what a request's functions turn into on
// the way in (the prompt) and what the model's text turns into on the way out
// (`message.tool_calls`).
//
// On the way in, a chat template that renders `tools` itself (Qwen, DeepSeek, Llama 3,
// gpt-oss, ...) gets them as the template variable and the history's tool calls and tool
// results as message fields, the way Hugging Face passes them. A template that knows
// nothing of tools (Mixtral's, the built-in model's) gets them written into the
// conversation instead, in the Hermes format most open models are tuned on: the
// functions in a <tools> block of the system message, earlier calls as <tool_call>
// blocks of the assistant's text, results as <tool_response> blocks of a user turn.
//
// On the way out the text is read in the formats open models write: Hermes blocks
// (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, Qwen2.5/Qwen3 and the
// prompt above; inside them GLM-4.5's `NAME<arg_key>K</arg_key><arg_value>V</arg_value>`
// and Qwen3-Coder's `<function=NAME><parameter=K>V</parameter></function>` too),
// DeepSeek's (`<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` and fenced JSON
// arguments, V3 and R1, or `NAME<｜tool▁sep｜>ARGS`, V3.1), Kimi-K2's
// (`<|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>ARGS`), or a text that is one JSON call or an array of them (Llama 3's
// `"parameters"`, Mistral's array after its [TOOL_CALLS] token, and what `tool_choice`
// "required" or a named function constrains the output to: tool_call_schema()). A call
// must name one of the request's functions and carry an object of arguments; anything
// else stays in the content, as written.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/chat_template.h"

namespace moeflow::serve {

struct ToolFunction {
  std::string name;
  std::string description;                 // empty: none
  nlohmann::ordered_json parameters;       // a JSON schema object; null: none given
};

enum class ToolChoice {
  none,      // the functions are not offered; the text is never read as calls
  automatic, // the model may call (OpenAI's "auto", the default with tools)
  required,  // the output is one call of any of the functions
  named,     // the output is one call of `tool_choice_name`
};

// A call read out of a reply: id "call_" and 24 random letters and digits, arguments a
// JSON object as text.
using ToolCall = ChatToolCall;

// The function of `tools` named `name`, or null.
const ToolFunction* find_function(const std::vector<ToolFunction>& tools, const std::string& name);

// A fresh call id: "call_" and 24 random letters and digits.
std::string new_call_id();

// The schema a constrained call's output is held to: {"name": the function, "arguments":
// an instance of its parameters}, one alternative per function (anyOf) unless `only`
// names one.
nlohmann::ordered_json tool_call_schema(const std::vector<ToolFunction>& tools, const std::string& only = "");

// The conversation as `tpl` should see it. With `offer_tools` the functions are offered;
// tool calls and results in the history are kept as message fields where the template
// reads them and written as Hermes text where it does not. `tools_json` is set to the
// tools array when the template renders it itself, and cleared otherwise.
std::vector<ChatMessage> messages_for_template(const ChatTemplate& tpl, const std::vector<ChatMessage>& messages,
                                               const std::vector<ToolFunction>& tools, bool offer_tools,
                                               std::string& tools_json);

// Renders `in`. Most templates write a call's arguments with tojson, as a dict; where
// that fails (DeepSeek's concatenate them as a string) they are given as the JSON text.
std::string render_conversation(const ChatTemplate& tpl, ChatTemplateInput in);

// The system text that offers `tools` to a template with no tool support of its own.
std::string hermes_tools_preamble(const std::vector<ToolFunction>& tools);

struct ParsedReply {
  std::string content;           // the text outside the calls, trimmed; empty: none
  std::vector<ToolCall> calls;   // in the order written
};

// Reads the calls out of a reply (formats above). With `parallel` false only the first
// call is kept.
ParsedReply parse_tool_calls(const std::string& text, const std::vector<ToolFunction>& tools, bool parallel = true);

// A streamed reply's text split as it arrives into content that can go out at once and
// text held back because a call may begin there: from a "<tool_call>" or DeepSeek's or
// Kimi's call tags (or what could be their beginning at the end of the text so far), or from the start when the reply opens
// with '{' or '[' (a bare JSON call), or all of it when `hold_all` (a constrained call).
class ToolCallStream {
 public:
  explicit ToolCallStream(bool hold_all = false) : hold_all_(hold_all) {}
  // The next piece of the reply; returns the content that can be sent now.
  std::string push(const std::string& text);
  // The held text (what follows the content already sent), to be parsed at the end.
  const std::string& held() const { return held_; }
  bool holding() const { return holding_; }

 private:
  bool hold_all_;
  bool holding_ = false;
  bool sent_any_ = false;
  std::string held_;  // text not sent: a possible call, or a possible start of one
};

}  // namespace moeflow::serve
