// The JSON the OpenAI API answers with: whole responses (chat.completion,
// text_completion) and stream chunks (chat.completion.chunk, text_completion), with
// usage and the log-probability objects of each endpoint's format.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/completion_request.h"
#include "serve/request_stream.h"

namespace moeflow::serve {

struct ResponseHeader {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// A request's tokens, OpenAI's usage object: the prompt counted once for all choices,
// the completions summed over them, and of the prompt the positions continued from an
// earlier request's (prompt_tokens_details.cached_tokens).
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};
nlohmann::json usage_json(const Usage& u);

// Log-probabilities in the endpoint's format: chat {"content":[{token,logprob,bytes,
// top_logprobs}]}, completions {tokens, token_logprobs, top_logprobs, text_offset};
// text_offset counts from `text_offset0` bytes into the completion.
nlohmann::json logprobs_json(Endpoint ep, const std::vector<TokenLogprob>& lp, int64_t text_offset0);

// One of a request's `n` choices, whole.
struct Choice {
  std::string text;
  std::string finish_reason;
  std::vector<TokenLogprob> logprobs;
  std::vector<ToolCall> tool_calls;  // chat: the calls read out of the text (then `text` is the rest)
  std::string reasoning;             // chat: message.reasoning_content; empty: none
};

// The whole response of a request that was not streamed: its choices in order (index i),
// usage summed over them (the prompt counted once, as OpenAI counts it).
nlohmann::json full_response(Endpoint ep, const ResponseHeader& h, const std::vector<Choice>& choices,
                             bool with_logprobs, const Usage& usage);

// One stream chunk of choice `index`. `first` adds the assistant role (chat);
// `finish_reason` empty: null.
nlohmann::json stream_chunk(Endpoint ep, const ResponseHeader& h, int index, const std::string& text, bool first,
                            const std::string& finish_reason, const nlohmann::json& logprobs, bool include_usage);

// A chat stream's chunk of choice `index` carrying its function calls whole.
nlohmann::json tool_calls_chunk(const ResponseHeader& h, int index, const std::vector<ToolCall>& calls, bool first,
                                bool include_usage);

// A chat stream's chunk of choice `index` carrying reasoning (delta.reasoning_content).
nlohmann::json reasoning_chunk(const ResponseHeader& h, int index, const std::string& text, bool first,
                               bool include_usage);

// The last chunk when stream_options.include_usage: no choices, only usage.
nlohmann::json usage_chunk(Endpoint ep, const ResponseHeader& h, const Usage& usage);

// A JSON value as one SSE event ("data: ...\n\n"); invalid UTF-8 becomes U+FFFD.
std::string sse_event(const nlohmann::json& j);

}  // namespace moeflow::serve
