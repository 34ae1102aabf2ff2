// The server's request parsing (both endpoints) and what it builds from a request:
// any bytes either parse into a request or give a 400 ApiError naming the field; a
// parsed request's text runs through the stop strings and the response builders, whose
// JSON must serialise whatever bytes the text holds, and through JSON mode's prefix
// check and the request's json_schema check, which must agree with nlohmann::json on
// what is a whole object; with tools, through the call reader (every call names a
// function of the request and carries a JSON object) and the stream's hold-back (what it
// sends and what it holds are the text, nothing lost); and as a gpt-oss (Harmony) reply,
// which read in pieces must give what it gives whole, as must its <think> split.
#include <cstdint>
#include <string>

#include "base/error.h"
#include "fuzz_input.h"
#include "serve/api_error.h"
#include "serve/completion_request.h"
#include "serve/completion_response.h"
#include "serve/harmony_reply.h"
#include "serve/json_prefix.h"
#include "serve/json_schema_prefix.h"
#include "serve/stop_strings.h"
#include "serve/think_reply.h"
#include "serve/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeflow::serve;
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (Endpoint ep : {Endpoint::chat, Endpoint::completions}) {
    MOEFLOW_FUZZ_BODY({
      try {
        const CompletionRequest r = parse_completion_request(body, ep);
        std::string text = r.prompt;
        for (const ChatMessage& m : r.messages) text += m.content;
        StopStrings stops(r.stop);
        std::string shown;
        for (size_t i = 0; i < text.size(); i += 3) shown += stops.push(text.substr(i, 3));
        shown += stops.flush();
        if (shown.size() > text.size()) std::abort();  // stop strings only ever cut
        const ResponseHeader h{"id", 0, r.model};
        TokenLogprob lp;
        lp.token = text.substr(0, 8);
        lp.top.emplace_back(lp.token, -1.0);
        const std::vector<TokenLogprob> lps{lp};
        sse_event(stream_chunk(ep, h, 0, shown, true, "", logprobs_json(ep, lps, 0), r.include_usage));
        sse_event(full_response(ep, h, {Choice{shown, "stop", lps, {}}}, r.logprobs, Usage{1, 1, 0}));
        if (reads_tool_calls(r)) {
          const ParsedReply reply = parse_tool_calls(text, r.tools, r.parallel_tool_calls);
          for (const ToolCall& c : reply.calls) {
            bool known = false;
            for (const ToolFunction& f : r.tools) known |= f.name == c.name;
            if (!known || !nlohmann::json::parse(c.arguments).is_object()) std::abort();
          }
          ToolCallStream stream;
          std::string sent;
          for (size_t i = 0; i < text.size(); i += 3) sent += stream.push(text.substr(i, 3));
          if (sent + stream.held() != text) std::abort();
          sse_event(tool_calls_chunk(h, 0, reply.calls, true, r.include_usage));
          sse_event(full_response(ep, h, {Choice{reply.content, "tool_calls", {}, reply.calls}}, false, Usage{1, 1, 0}));
        }
        {  // the text as a gpt-oss reply: read in pieces as whole
          const HarmonyReply whole = parse_harmony_reply(text, r.tools);
          HarmonyStream stream;
          std::string reasoning, content;
          for (size_t i = 0; i < text.size(); i += 3) {
            const HarmonyStream::Delta d = stream.push(text.substr(i, 3));
            reasoning += d.reasoning;
            content += d.content;
          }
          const HarmonyReply end = stream.finish(r.tools);
          if (reasoning + end.reasoning != whole.reasoning || content + end.content != whole.content ||
              end.calls.size() != whole.calls.size())
            std::abort();
        }
        for (const bool opened : {false, true}) {  // as a reply that may think first
          const ThinkStream::Delta whole = split_thinking(text, opened);
          ThinkStream stream(opened);
          std::string reasoning, content;
          for (size_t i = 0; i < text.size(); i += 3) {
            const ThinkStream::Delta d = stream.push(text.substr(i, 3));
            reasoning += d.reasoning;
            content += d.content;
          }
          const ThinkStream::Delta end = stream.finish();
          if (reasoning + end.reasoning != whole.reasoning || content + end.content != whole.content) std::abort();
        }
        JsonPrefix json;
        size_t fed = 0;
        while (fed < text.size() && json.feed(static_cast<unsigned char>(text[fed]))) ++fed;
        bool whole = fed == text.size() && json.done();
        if (r.json_schema) {  // the request's own schema, over its own text
          JsonSchemaPrefix instance(*r.json_schema);
          fed = 0;
          while (fed < text.size() && instance.feed(static_cast<unsigned char>(text[fed]))) ++fed;
          whole |= fed == text.size() && instance.done();
        }
        if (whole && !nlohmann::json::accept(text)) {
          // Only a number past a double's range may be valid JSON that nlohmann refuses.
          try {
            (void)nlohmann::json::parse(text);
          } catch (const nlohmann::json::out_of_range&) {
          } catch (const nlohmann::json::parse_error&) {
            std::abort();
          }
        }
      } catch (const ApiError& e) {
        if (e.status() != 400) std::abort();  // parsing knows only bad requests
        e.to_json().dump();
      }
    })
  }
  return 0;
}
