// The body of POST /v1/chat/completions and POST /v1/completions, validated.
//
// Fields follow the OpenAI API: model, messages (chat) or prompt (completions: a
// string, a one-string array, or an array of token ids), max_tokens
// (max_completion_tokens for chat), temperature, top_p, seed, presence_penalty and
// frequency_penalty (-2 to 2), stop (a string or up to 4 strings), n (1 to kMaxChoices), stream,
// stream_options.include_usage, logprobs and top_logprobs (chat: a bool and 0-20;
// completions: an integer 0-5), echo (completions: the prompt's text, and with logprobs
// each prompt token's log-probability given the tokens before it, before the
// completion; max_tokens 0 then scores the prompt alone), logit_bias ({"token id": -100 to 100}; ids past the
// vocabulary are refused where the model is known), response_format ({"type": "text"},
// {"type": "json_object"}: the output is one JSON object, or {"type": "json_schema"}: an
// instance of the schema, whose unsupported keywords are refused, not ignored). Extensions: top_k, repeat_penalty and repeat_last_n
// (llama-server's names and meaning), slo_ms (the request's latency target for the
// eMoE scheduler), task (the task label for task-aware policies), ignore_eos (generate
// max_tokens whatever the model says; llama-server's name, for benchmarks), cache_prompt
// (llama-server's: false computes the whole prompt even where an earlier request's
// keys and values could be reused; the tokens are the same either way).
// Function calling (chat): tools (functions with a name, description and JSON-schema
// parameters), tool_choice ("none", "auto", "required", or {"type": "function",
// "function": {"name": ...}}: the last two hold the output to one call of the
// function(s), through json_schema, so their parameters' schemas must be supported
// ones), parallel_tool_calls; assistant messages' tool_calls and tool messages'
// tool_call_id (serve/tool_calls.h). reasoning_format (chat, llama-server's): "auto" or
// "deepseek" (the default) return a <think> block as reasoning_content, "none" leaves it
// in the content (serve/think_reply.h).
//
// Every field is type-checked; a field the server does not implement but a client may
// send (user, ...) is type-checked where its type is known and ignored.
// Any violation throws ApiError 400 naming the field (`param`).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "serve/chat_template.h"
#include "serve/json_schema.h"
#include "serve/tool_calls.h"

namespace moeflow::serve {

enum class Endpoint { chat, completions };

constexpr int kMaxChoices = 16;  // n: each choice holds a slot or a queue place

struct CompletionRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;                    // empty: not given
  std::vector<ChatMessage> messages;    // chat
  std::string prompt;                   // completions, as text
  std::vector<int32_t> prompt_tokens;   // completions, as token ids (then prompt is empty)
  std::optional<int64_t> max_tokens;    // absent: completions 16 (OpenAI's default), chat up to the context
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = 0;
  std::optional<uint64_t> seed;
  double presence_penalty = 0, frequency_penalty = 0;
  double repeat_penalty = 1;            // 1: off
  int32_t repeat_last_n = 64;           // -1: the whole context
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
  double slo_ms = 0;                    // 0: the server's default
  std::string task;
  bool ignore_eos = false;
  bool cache_prompt = true;             // may continue from an earlier request's prompt
  bool echo = false;                    // completions: the prompt returned before the completion
  bool json_object = false;             // response_format {"type": "json_object"}
  std::shared_ptr<const JsonSchema> json_schema;  // response_format {"type": "json_schema"}
  int n = 1;                            // choices, each its own sequence (seed + i when seeded)
  std::vector<ToolFunction> tools;      // chat: the functions the model may call
  ToolChoice tool_choice = ToolChoice::none;  // automatic by default when tools are given
  std::string tool_choice_name;         // ToolChoice::named
  bool parallel_tool_calls = true;      // false: at most one call a reply
  bool split_reasoning = true;          // reasoning_format: <think> blocks as reasoning_content ("none": off)
};

// Whether a reply of `r` is read for function calls (tools offered, and the output not
// held to a response_format of its own).
bool reads_tool_calls(const CompletionRequest& r);

// Parses and validates `body`; throws ApiError (400) naming the offending field.
CompletionRequest parse_completion_request(const std::string& body, Endpoint endpoint);

// POST /tokenize {"content": text, "add_special": bool (default false)} and POST
// /detokenize {"tokens": [ids]} (llama-server's bodies), validated the same way; ids are
// checked against the vocabulary by the server.
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
};
TokenizeRequest parse_tokenize_request(const std::string& body);
std::vector<int32_t> parse_detokenize_request(const std::string& body);

}  // namespace moeflow::serve
