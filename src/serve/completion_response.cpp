#include "serve/completion_response.h"

namespace moeflow::serve {
namespace {

using nlohmann::json;

const char* object_name(Endpoint ep, bool chunk) {
  if (ep == Endpoint::completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json header_json(Endpoint ep, const ResponseHeader& h, bool chunk) {
  return {{"id", h.id}, {"object", object_name(ep, chunk)}, {"created", h.created}, {"model", h.model}};
}

// message.tool_calls; in a stream each call carries its index.
json tool_calls_json(const std::vector<ToolCall>& calls, bool indexed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

}  // namespace

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json logprobs_json(Endpoint ep, const std::vector<TokenLogprob>& lp, int64_t text_offset0) {
  if (ep == Endpoint::chat) {
    json content = json::array();
    for (const TokenLogprob& t : lp) {
      json top = json::array();
      for (const auto& [tok, p] : t.top) top.push_back({{"token", tok}, {"logprob", p}, {"bytes", bytes_of(tok)}});
      content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
  int64_t off = text_offset0;
  for (const TokenLogprob& t : lp) {
    tokens.push_back(t.token);
    token_logprobs.push_back(t.scored ? json(t.logprob) : json(nullptr));
    json top = json::object();
    for (const auto& [tok, p] : t.top) top[tok] = p;
    top_logprobs.push_back(t.scored ? top : json(nullptr));
    offsets.push_back(off);
    off += static_cast<int64_t>(t.token.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

json full_response(Endpoint ep, const ResponseHeader& h, const std::vector<Choice>& choices, bool with_logprobs,
                   const Usage& usage) {
  json r = header_json(ep, h, false);
  r["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    json choice = {{"index", i}};
    if (ep == Endpoint::chat) {
      json message = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) message["content"] = nullptr;
        message["tool_calls"] = tool_calls_json(c.tool_calls, false);
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = with_logprobs ? logprobs_json(ep, c.logprobs, 0) : json(nullptr);
    choice["finish_reason"] = finish_json(c.finish_reason);
    r["choices"].push_back(std::move(choice));
  }
  r["usage"] = usage_json(usage);
  return r;
}

json stream_chunk(Endpoint ep, const ResponseHeader& h, int index, const std::string& text, bool first,
                  const std::string& finish_reason, const json& logprobs, bool include_usage) {
  json r = header_json(ep, h, true);
  json choice = {{"index", index}};
  if (ep == Endpoint::chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_json(finish_reason);
  r["choices"] = json::array({choice});
  // With include_usage OpenAI sends "usage": null on every chunk but the last.
  if (include_usage) r["usage"] = nullptr;
  return r;
}

namespace {

// A chat chunk whose delta holds `key`: `value` (and the role when first).
json delta_chunk(const ResponseHeader& h, int index, const char* key, json value, bool first, bool include_usage) {
  json r = header_json(Endpoint::chat, h, true);
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  delta[key] = std::move(value);
  r["choices"] = json::array({{{"index", index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  if (include_usage) r["usage"] = nullptr;
  return r;
}

}  // namespace

json tool_calls_chunk(const ResponseHeader& h, int index, const std::vector<ToolCall>& calls, bool first,
                      bool include_usage) {
  return delta_chunk(h, index, "tool_calls", tool_calls_json(calls, true), first, include_usage);
}

json reasoning_chunk(const ResponseHeader& h, int index, const std::string& text, bool first, bool include_usage) {
  return delta_chunk(h, index, "reasoning_content", text, first, include_usage);
}

json usage_chunk(Endpoint ep, const ResponseHeader& h, const Usage& usage) {
  json r = header_json(ep, h, true);
  r["choices"] = json::array();
  r["usage"] = usage_json(usage);
  return r;
}

std::string sse_event(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace moeflow::serve
