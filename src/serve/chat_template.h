// A model's chat template (GGUF `tokenizer.chat_template`, Jinja) turned into the prompt
// text for a conversation, the way Hugging Face's apply_chat_template renders it: Python's
// jinja2 with trim_blocks and lstrip_blocks, raise_exception, strftime_now and HF's
// tojson. The interpreter (serve/jinja/) covers the subset real templates use
// (docs/chat_templates.md lists it); anything else is refused when the template is parsed.
//
// The template comes from a model file, so it is untrusted: parse() and render() throw
// moeflow::InputError naming line:column for malformed or unsupported input, and render()
// is bounded (steps, loop iterations, output and value sizes, nesting depth: Limits), so
// a hostile template fails cleanly instead of hanging or exhausting memory or stack.
//
// Thread safety: a parsed ChatTemplate is immutable; render() may run on several threads.
// Stack: render() recurses at most Limits::max_depth levels, about 1 KiB of stack each in
// a release build (3 KiB under ASan), so the default needs a thread stack of 256 KiB
// (1 MiB under ASan).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/jinja/call_context.h"

namespace moeflow::serve {

namespace jinja {
struct Template;
}

// A function call an assistant turn made (OpenAI's message.tool_calls[i]).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as the API carries it
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}
  std::string role;
  std::string content;
  bool null_content = false;             // content is None to the template (an assistant turn of calls only)
  std::vector<ChatToolCall> tool_calls;  // assistant: the calls it made
  std::string tool_call_id;              // tool: the call this result answers; empty: none
  std::string name;                      // empty: none
};

struct ChatTemplateInput {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  // The request's `tools` (an OpenAI-style JSON array of function schemas) as JSON text;
  // empty: none (the template sees `tools` as none). Malformed JSON is an InputError.
  std::string tools_json;
  // More template variables, as a JSON object (what vLLM's `chat_template_kwargs` and
  // Hugging Face's extra apply_chat_template arguments carry, e.g. {"enable_thinking":
  // false} for Qwen3); empty: none. A key naming one of the variables above, or
  // malformed JSON, is an InputError.
  std::string variables_json;
  // Tool calls' arguments as dicts (what most templates write with tojson) or as the
  // JSON text itself (DeepSeek's, which concatenate them as strings).
  bool tool_arguments_as_objects = true;
  // strftime_now()'s time, seconds since the epoch formatted as UTC; unset: the local clock.
  std::optional<int64_t> now_unix_seconds;
};

class ChatTemplate {
 public:
  using Limits = jinja::RenderLimits;

  // Parses once; throws moeflow::InputError naming line:column and the construct for
  // anything unsupported or malformed.
  static ChatTemplate parse(std::string_view source);

  // Renders the conversation. The template sees `messages` (a list of {role, content}
  // dicts, content None where null_content, with `tool_calls` ([{id, type: "function",
  // function: {name, arguments}}], arguments as a dict when they are a JSON object and
  // input.tool_arguments_as_objects), `tool_call_id` and `name` where the message has
  // them), `add_generation_prompt`, `bos_token`, `eos_token`, `tools` (none unless
  // input.tools_json is given) and `documents` (none), as Hugging Face passes them. Throws InputError for runtime
  // errors (raise_exception('...') included, with its message) and exceeded limits.
  std::string render(const ChatTemplateInput& input) const;

  // Whether the template's text contains `word` (how the server tells a template that
  // renders tools itself from one that knows nothing of them).
  bool mentions(std::string_view word) const { return source_->find(word) != std::string::npos; }

  const Limits& limits() const { return limits_; }
  void set_limits(const Limits& limits) { limits_ = limits; }

 private:
  ChatTemplate() = default;  // only parse() makes one, so every ChatTemplate holds a template
  std::shared_ptr<const jinja::Template> tpl_;
  std::shared_ptr<const std::string> source_;
  Limits limits_;
};

}  // namespace moeflow::serve
