#include "serve/openai_server.h"

#include <httplib.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "base/error.h"
#include "engine/tokenizer.h"
#include "moeflow/engine.h"
#include "serve/api_error.h"
#include "serve/api_keys.h"
#include "serve/completion_request.h"
#include "serve/completion_response.h"
#include "serve/connection_watch.h"
#include "serve/harmony_reply.h"
#include "serve/serving_loop.h"
#include "serve/think_reply.h"

namespace moeflow::serve {
namespace {

using nlohmann::json;

constexpr const char* kChatRoute = "/v1/chat/completions";
constexpr const char* kCompletionsRoute = "/v1/completions";
constexpr const char* kTokenizeRoute = "/tokenize";
constexpr const char* kDetokenizeRoute = "/detokenize";

bool post_route(const std::string& path) {
  return path == kChatRoute || path == kCompletionsRoute || path == kTokenizeRoute || path == kDetokenizeRoute;
}

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), e.to_json());
}

// Reads a POST body through `reader`. The body is read by the handler, not by httplib:
// httplib's size limit holds a Content-Length, but a chunked body it reads whole,
// however large (a client could fill memory). On failure answers `res` (400, or 413
// past `max_bytes`) and returns false.
bool read_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
               size_t max_bytes, std::string& body) {
  bool too_large = false;
  const bool read = reader([&](const char* data, size_t n) {
    if (body.size() + n > max_bytes) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  // httplib refuses a Content-Length past the limit before reading any of it.
  if (!read && req.has_header("Content-Length") &&
      std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > max_bytes)
    too_large = true;
  if (too_large) {
    res.set_header("Connection", "close");  // the rest of the body is not read
    send_error(res, ApiError(413, "the request body is too large (at most " + std::to_string(max_bytes) + " bytes)",
                             "invalid_request_error"));
    return false;
  }
  if (!read) {
    send_error(res, ApiError::bad_request("the request body could not be read (the connection ended early, or a "
                                          "malformed chunked encoding)"));
    return false;
  }
  return true;
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

// Tokenising a text far past the context costs seconds and hundreds of MB (a body of
// 8 MiB is ~2M tokens) only to refuse it: a text of more bytes than the context's
// tokens could ever hold is refused as it is.
void check_text_fits(const std::string& text, const ServedModel& m, const char* param) {
  const int64_t ctx = m.engine->ctx_size();
  if (m.longest_token_bytes == 0 || text.size() <= static_cast<size_t>(ctx) * m.longest_token_bytes) return;
  throw ApiError::bad_request("the prompt is " + std::to_string(text.size()) + " bytes, more than the context of " +
                                  std::to_string(ctx) + " tokens can hold (the longest token is " +
                                  std::to_string(m.longest_token_bytes) + " bytes)",
                              param, "context_length_exceeded");
}

// How a chat reply is read: gpt-oss's Harmony messages, or a reply that may think
// between <think> and </think> (a template that knows the tag), with the block perhaps
// opened by the prompt itself; neither while a constraint holds the text to JSON from
// its first byte, or for /v1/completions, whose text is returned as written.
struct ReplyFormat {
  bool harmony = false;
  bool thinks = false;
  bool prompt_opened_thinking = false;
};

// The prompt's tokens: the chat template's rendering (which writes its own BOS when
// the model wants one), or the completion prompt as text or ids; `format` says how
// the reply to a chat prompt is read.
std::vector<int32_t> prompt_tokens(const CompletionRequest& r, const ServedModel& m, ReplyFormat& format) {
  const Engine& engine = *m.engine;
  const Tokenizer& tok = engine.tokenizer();
  if (r.endpoint == Endpoint::completions) {
    if (r.prompt_tokens.empty()) {
      check_text_fits(r.prompt, m, "prompt");
      return engine.tokenize(r.prompt, engine.add_bos_default());
    }
    for (size_t i = 0; i < r.prompt_tokens.size(); ++i)
      if (r.prompt_tokens[i] >= engine.n_vocab())
        throw ApiError::bad_request("'prompt[" + std::to_string(i) + "]' = " + std::to_string(r.prompt_tokens[i]) +
                                        " is not a token id (the vocabulary has " + std::to_string(engine.n_vocab()) +
                                        ")",
                                    "prompt[" + std::to_string(i) + "]");
    return r.prompt_tokens;
  }
  // The rendering holds every message's content: a content past the context is refused
  // before the template renders it (rendering 200k messages takes a second).
  std::string contents;
  for (const ChatMessage& msg : r.messages) {
    contents += msg.content;
    for (const ChatToolCall& c : msg.tool_calls) contents += c.arguments;
  }
  check_text_fits(contents, m, "messages");
  ChatTemplateInput in;
  in.messages = messages_for_template(*m.chat_template, r.messages, r.tools, r.tool_choice != ToolChoice::none,
                                      in.tools_json);
  in.add_generation_prompt = true;
  if (tok.bos() >= 0) in.bos_token = tok.token_bytes(tok.bos(), true);
  if (tok.eos() >= 0) in.eos_token = tok.token_bytes(tok.eos(), true);
  std::string text;
  try {
    text = render_conversation(*m.chat_template, in);
  } catch (const InputError& e) {
    // The template's own raise_exception (e.g. "roles must alternate") is the client's fault.
    throw ApiError::bad_request(std::string("the chat template refused the messages: ") + e.what(), "messages");
  }
  check_text_fits(text, m, "messages");
  const bool constrained = r.json_object || r.json_schema;
  format.harmony = tok.harmony() && !constrained;
  format.thinks = !format.harmony && !constrained && r.split_reasoning && m.chat_template->mentions("<think>");
  format.prompt_opened_thinking = format.thinks && prompt_opens_thinking(text);
  const bool has_bos = !in.bos_token.empty() && text.rfind(in.bos_token, 0) == 0;
  return engine.tokenize(text, engine.add_bos_default() && !has_bos);
}

GenerationJob make_job(const CompletionRequest& r, const ServedModel& m, ReplyFormat& format) {
  const Engine& engine = *m.engine;
  GenerationJob job;
  job.prompt = prompt_tokens(r, m, format);
  if (job.prompt.empty()) throw ApiError::bad_request("the prompt encodes to no tokens", "prompt");
  const int64_t ctx = engine.ctx_size();
  const int64_t n = static_cast<int64_t>(job.prompt.size());
  if (n > ctx)
    throw ApiError::bad_request("the prompt is " + std::to_string(n) + " tokens, longer than the context of " +
                                    std::to_string(ctx) + " tokens",
                                r.endpoint == Endpoint::chat ? "messages" : "prompt", "context_length_exceeded");
  // The last prompt position yields the first token; each later one needs a position.
  const int64_t room = ctx - n + 1;
  if (r.max_tokens) {
    if (*r.max_tokens > room)
      throw ApiError::bad_request("max_tokens " + std::to_string(*r.max_tokens) + " + the prompt's " +
                                      std::to_string(n) + " tokens exceed the context of " + std::to_string(ctx) +
                                      " tokens (at most " + std::to_string(room) + " new tokens fit)",
                                  "max_tokens", "context_length_exceeded");
    job.max_tokens = *r.max_tokens;
  } else {
    job.max_tokens = r.endpoint == Endpoint::completions ? std::min<int64_t>(16, room) : room;
  }
  job.sampler.temperature = static_cast<float>(r.temperature);
  job.sampler.top_p = static_cast<float>(r.top_p);
  job.sampler.top_k = r.top_k;
  job.sampler.seed = r.seed ? *r.seed : std::random_device{}();
  job.sampler.presence_penalty = static_cast<float>(r.presence_penalty);
  job.sampler.frequency_penalty = static_cast<float>(r.frequency_penalty);
  job.sampler.repeat_penalty = static_cast<float>(r.repeat_penalty);
  job.sampler.repeat_last_n = r.repeat_last_n;
  for (const auto& [id, bias] : r.logit_bias)
    if (id >= engine.n_vocab())
      throw ApiError::bad_request("'logit_bias' names token " + std::to_string(id) + ", past the vocabulary of " +
                                      std::to_string(engine.n_vocab()) + " tokens",
                                  "logit_bias");
  job.sampler.logit_bias = r.logit_bias;
  job.stop = r.stop;
  job.stop_at_eog = !r.ignore_eos;
  job.top_logprobs = r.logprobs ? r.top_logprobs : -1;
  job.echo = r.echo;
  job.cache_prompt = r.cache_prompt;
  job.json_object = r.json_object;
  job.json_schema = r.json_schema;
  job.slo_s = (r.slo_ms > 0 ? r.slo_ms : m.default_slo_ms) / 1e3;
  job.task = r.task;
  if (job.task.empty() && !m.task_profiles.empty()) {
    std::string text;
    for (const ChatMessage& msg : r.messages)
      if (msg.role == "user") text += msg.content + "\n";
    if (r.endpoint == Endpoint::completions) text = r.prompt.empty() ? engine.detokenize(job.prompt) : r.prompt;
    job.task = classify_task(text, m.task_profiles);
  }
  job.stream = std::make_shared<RequestStream>();
  return job;
}

using Streams = std::vector<std::shared_ptr<RequestStream>>;

void cancel_all(const Streams& streams) {
  for (const auto& s : streams) s->cancel();
}


// Takes a request's choices' events in turn until every choice has ended. `on_event(i,
// event)` sees each event of choice i, the last one included; `between(took_any)` runs
// after each round while choices remain. Either returning false stops the poll, and
// poll_choices returns false. `one_wait` is how long a lone choice waits for its next
// event; several are polled at 10 ms each.
template <class OnEvent, class Between>
bool poll_choices(const Streams& streams, std::chrono::milliseconds one_wait, Usage& usage, OnEvent on_event,
                  Between between) {
  std::vector<bool> ended(streams.size(), false);
  size_t left = streams.size();
  const auto wait = streams.size() == 1 ? one_wait : std::chrono::milliseconds(10);
  while (left > 0) {
    bool took_any = false;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (ended[i]) continue;
      for (StreamEvent& e : streams[i]->take(wait)) {
        took_any = true;
        if (e.finished) {
          ended[i] = true;
          --left;
          usage.prompt_tokens = e.prompt_tokens;
          usage.cached_tokens = std::max(usage.cached_tokens, e.cached_tokens);
          usage.completion_tokens += e.completion_tokens;
        }
        if (!on_event(i, e)) return false;
      }
    }
    if (left > 0 && !between(took_any)) return false;
  }
  return true;
}

// A reply that ended by itself and holds calls ends for them ("tool_calls", as OpenAI
// says).
void end_for_calls(bool has_calls, std::string& finish_reason) {
  if (has_calls && finish_reason == "stop") finish_reason = "tool_calls";
}

// The calls a finished reply holds (the text outside them in `content`).
ParsedReply read_calls(const CompletionRequest& r, const std::string& text, std::string& finish_reason) {
  ParsedReply reply = parse_tool_calls(text, r.tools, r.parallel_tool_calls);
  end_for_calls(!reply.calls.empty(), finish_reason);
  return reply;
}

// Streams a request's choices as SSE until they all end or the client goes away; each
// chunk carries its choice's index. False when the client went away.
bool stream_events(const CompletionRequest& r, const ResponseHeader& h, const Streams& streams,
                   const ReplyFormat& format, httplib::DataSink& sink) {
  // A reply read for function calls sends its content as it comes, but holds back the
  // text from where a call may begin and sends the calls whole when the choice ends. A
  // Harmony reply sends its reasoning and its content apart, and its calls at the end.
  const bool calls_on = reads_tool_calls(r);
  const bool hold_all = r.tool_choice == ToolChoice::required || r.tool_choice == ToolChoice::named;
  struct State {
    bool first = true;
    int64_t text_offset = 0;
    ToolCallStream calls;
    HarmonyStream messages;
    ThinkStream thinking;
  };
  std::vector<State> st(streams.size(), State{true, 0, ToolCallStream(hold_all), HarmonyStream(),
                                              ThinkStream(format.prompt_opened_thinking)});
  Usage usage;
  bool error_sent = false;
  auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  auto last_write = std::chrono::steady_clock::now();
  auto on_event = [&](size_t i, StreamEvent& e) {
    if (e.error) {
      cancel_all(streams);
      if (!write(sse_event(e.error->to_json()))) return false;
      write("data: [DONE]\n\n");
      sink.done();
      error_sent = true;
      return false;
    }
    const int index = static_cast<int>(i);
    auto send_text = [&](const std::string& text, const json& lp) {
      const bool ok = write(sse_event(stream_chunk(r.endpoint, h, index, text, st[i].first, "", lp, r.include_usage)));
      st[i].first = false;
      return ok;
    };
    auto send_calls = [&](const std::vector<ToolCall>& calls) {
      if (calls.empty()) return true;
      const bool ok = write(sse_event(tool_calls_chunk(h, index, calls, st[i].first, r.include_usage)));
      st[i].first = false;
      return ok;
    };
    auto send_reasoning = [&](const std::string& text) {
      if (text.empty()) return true;
      const bool ok = write(sse_event(reasoning_chunk(h, index, text, st[i].first, r.include_usage)));
      st[i].first = false;
      return ok;
    };
    if (!e.text.empty() || !e.logprobs.empty()) {
      const json lp = r.logprobs ? logprobs_json(r.endpoint, e.logprobs, st[i].text_offset) : json(nullptr);
      st[i].text_offset += static_cast<int64_t>(e.text.size());
      std::string text = e.text;
      if (format.harmony) {
        HarmonyStream::Delta d = st[i].messages.push(e.text);
        if (!send_reasoning(d.reasoning)) return false;
        text = std::move(d.content);
      } else {
        if (format.thinks) {
          ThinkStream::Delta d = st[i].thinking.push(e.text);
          if (!send_reasoning(d.reasoning)) return false;
          text = std::move(d.content);
        }
        if (calls_on) text = st[i].calls.push(text);
      }
      if ((!text.empty() || !e.logprobs.empty()) && !send_text(text, lp)) return false;
    }
    if (!e.finished) return true;
    std::string reason = e.finish_reason;
    if (format.thinks) {  // the thinking's held tail, and the answer's on to the calls
      ThinkStream::Delta d = st[i].thinking.finish();
      if (!send_reasoning(d.reasoning)) return false;
      if (calls_on) d.content = st[i].calls.push(d.content);
      if (!d.content.empty() && !send_text(d.content, json(nullptr))) return false;
    }
    if (format.harmony) {
      const HarmonyReply reply = st[i].messages.finish(calls_on ? r.tools : std::vector<ToolFunction>{});
      if (!send_reasoning(reply.reasoning)) return false;
      if (!reply.content.empty() && !send_text(reply.content, json(nullptr))) return false;
      if (!send_calls(reply.calls)) return false;
      end_for_calls(!reply.calls.empty(), reason);
    } else if (calls_on) {
      const std::string& held = st[i].calls.held();
      const ParsedReply reply = read_calls(r, held, reason);
      const std::string& rest = reply.calls.empty() ? held : reply.content;
      if (!rest.empty() && !send_text(rest, json(nullptr))) return false;
      if (!send_calls(reply.calls)) return false;
    }
    return write(sse_event(stream_chunk(r.endpoint, h, index, "", st[i].first, reason, json(nullptr),
                                        r.include_usage)));
  };
  // An SSE comment while nothing happens finds out whether the client is still there.
  auto between = [&](bool took_any) {
    const auto now = std::chrono::steady_clock::now();
    if (took_any) {
      last_write = now;
    } else if (now - last_write >= std::chrono::milliseconds(1000)) {
      if (!write(": keep-alive\n\n")) return false;
      last_write = now;
    }
    return true;
  };
  if (!poll_choices(streams, std::chrono::milliseconds(1000), usage, on_event, between)) return error_sent;
  if (r.include_usage &&
      !write(sse_event(usage_chunk(r.endpoint, h, usage))))
    return false;
  write("data: [DONE]\n\n");
  sink.done();
  return true;
}

}  // namespace

OpenAiServer::OpenAiServer(const ServerOptions& opt, ServerMetrics& metrics)
    : opt_(opt), metrics_(metrics), http_(std::make_unique<httplib::Server>()) {
  const size_t threads = static_cast<size_t>(std::max(4, opt_.http_threads));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(opt_.max_body_bytes);
  // Tokens go out as small writes one step apart: with Nagle's algorithm each waits for
  // the client's delayed ACK of the last (tens of ms per token).
  http_->set_tcp_nodelay(true);
  routes();
}

OpenAiServer::~OpenAiServer() = default;

std::shared_ptr<const ServedModel> OpenAiServer::served() const {
  std::lock_guard<std::mutex> lock(model_mu_);
  return model_;
}

void OpenAiServer::set_ready(ServedModel model) {
  if (model.engine && model.longest_token_bytes == 0) {
    const Tokenizer& tok = model.engine->tokenizer();
    for (size_t i = 0; i < tok.vocab_size(); ++i)
      model.longest_token_bytes = std::max(model.longest_token_bytes, tok.token_bytes(static_cast<int32_t>(i), true).size());
  }
  std::lock_guard<std::mutex> lock(model_mu_);
  model_ = std::make_shared<const ServedModel>(std::move(model));
}

void OpenAiServer::set_draining() { draining_ = true; }

int OpenAiServer::bind() {
  int port = opt_.port == 0 ? http_->bind_to_any_port(opt_.host) : (http_->bind_to_port(opt_.host, opt_.port) ? opt_.port : -1);
  if (port < 0)
    throw InputError("cannot listen on " + opt_.host + ":" + std::to_string(opt_.port) +
                     " (address in use, not an address of this machine, or a privileged port)");
  return port;
}

void OpenAiServer::listen() { http_->listen_after_bind(); }

void OpenAiServer::stop() { http_->stop(); }

void OpenAiServer::routes() {
  // `curl -d '{...}'` labels a JSON body application/x-www-form-urlencoded, and httplib
  // caps form bodies at 8 KiB (413 for a longer prompt) before any handler runs. The
  // API's bodies are JSON whatever the label says: on its two POST routes the label is
  // read as JSON, so the body limit is --max-body's alone. (The pre-routing handler
  // runs before the body is read; the request it is given is the server's own, not a
  // constant, so relabelling it is sound.)
  //
  // Two Content-Length headers that disagree (RFC 9112 §6.3: an error) are refused before
  // the body is read: httplib would take the first, and a proxy in front that took the
  // last would see another request in the rest (request smuggling). With --api-key every
  // route but /health needs a key, checked before the body is read too. A refused
  // request's connection is closed after the answer, since its unread body cannot be
  // told from a next request.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    auto& headers = const_cast<httplib::Request&>(req).headers;  // case-insensitive keys
    auto refuse = [&](const ApiError& e) {
      headers.erase("Connection");
      headers.emplace("Connection", "close");
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    };
    auto [cl_first, cl_last] = headers.equal_range("Content-Length");
    for (auto it = cl_first; it != cl_last; ++it)
      if (it->second != cl_first->second)
        return refuse(ApiError::bad_request("the request has Content-Length headers that disagree"));
    if (!opt_.api_keys.empty() && req.path != "/health") {
      const std::string auth = req.get_header_value("Authorization");
      if (!authorized(opt_.api_keys, auth)) {
        res.set_header("WWW-Authenticate", "Bearer");
        return refuse(ApiError(401,
                               auth.empty() ? "no API key given: send 'Authorization: Bearer KEY' (the server runs "
                                              "with --api-key)"
                                            : "the API key is not one of this server's",
                               "invalid_request_error", "", "invalid_api_key"));
      }
    }
    if (req.method == "POST" && post_route(req.path)) {
      auto [first, last] = headers.equal_range("Content-Type");
      for (auto it = first; it != last; ++it)
        if (it->second.rfind("application/x-www-form-urlencoded", 0) == 0) it->second = "application/json";
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) return send_json(res, 503, {{"status", "shutting down"}});
    if (!served()) return send_json(res, 503, {{"status", "loading model"}});
    send_json(res, 200, {{"status", "ok"}});
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  auto model_object = [](const ServedModel& m) {
    return json{{"id", m.id}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "moeflow"}};
  };
  http_->Get("/v1/models", [this, model_object](const httplib::Request&, httplib::Response& res) {
    const auto m = served();
    if (!m) return send_error(res, ApiError(503, "the model is loading", "server_error", "", "loading"));
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model_object(*m)})}});
  });
  http_->Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request& req, httplib::Response& res) {
    const auto m = served();
    if (!m) return send_error(res, ApiError(503, "the model is loading", "server_error", "", "loading"));
    if (req.matches[1] != m->id)
      return send_error(res, ApiError(404, "the model '" + std::string(req.matches[1]) + "' does not exist",
                                      "invalid_request_error", "model", "model_not_found"));
    send_json(res, 200, model_object(*m));
  });
  auto completion = [this](Endpoint ep) {
    return [this, ep](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      std::string body;
      if (!read_body(req, res, reader, opt_.max_body_bytes, body)) return;
      // A large body's parse (a JSON tree of every message) is freed into this thread's
      // malloc arena, where it would stay: given back to the system once the request is
      // answered.
      struct TrimAfterLargeBody {
        bool large;
        ~TrimAfterLargeBody() {
          if (large) malloc_trim(0);
        }
      } trim{body.size() > (1u << 20)};
      try {
        const auto m = served();
        if (!m) throw ApiError(503, "the model is loading", "server_error", "", "loading");
        if (draining_) throw ApiError(503, "the server is shutting down", "server_error", "", "shutting_down");
        const CompletionRequest r = parse_completion_request(body, ep);
        if (!r.model.empty() && r.model != m->id)
          throw ApiError(404, "the model '" + r.model + "' does not exist (this server serves '" + m->id + "')",
                         "invalid_request_error", "model", "model_not_found");
        if (ep == Endpoint::chat && !m->chat_template)
          throw ApiError::bad_request("this model has no chat template; use /v1/completions", "messages");
        // Each of the n choices is its own sequence (seed + i when the request is seeded).
        ReplyFormat format;
        const GenerationJob job = make_job(r, *m, format);
        Streams streams;
        try {
          for (int i = 0; i < r.n; ++i) {
            GenerationJob choice = job;
            choice.stream = std::make_shared<RequestStream>();
            if (i > 0) choice.sampler.seed = r.seed ? *r.seed + static_cast<uint64_t>(i) : std::random_device{}();
            streams.push_back(choice.stream);
            m->loop->submit(std::move(choice));
          }
        } catch (...) {
          cancel_all(streams);  // a full queue took some of the choices: none runs
          throw;
        }
        ResponseHeader h{(ep == Endpoint::chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++), unix_now(), m->id};
        if (r.stream) {
          res.set_header("Cache-Control", "no-cache");
          res.set_chunked_content_provider(
              "text/event-stream",
              [r, h, streams, format](size_t, httplib::DataSink& sink) {
                if (stream_events(r, h, streams, format, sink)) return true;
                cancel_all(streams);  // the client went away: the slots are freed before the next step
                return false;
              },
              [streams](bool success) {
                if (!success) cancel_all(streams);
              });
          return;
        }
        // A plain response is written only when the generation ends: the connection is
        // watched meanwhile, so a client that leaves frees its slots (or its queue places)
        // before the next step, as a streamed one does.
        const ConnectionWatch watch(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
        std::vector<Choice> choices(streams.size());
        Usage usage;
        auto on_event = [&](size_t i, StreamEvent& e) {
          if (e.error) {
            cancel_all(streams);
            throw *e.error;
          }
          choices[i].text += e.text;
          for (TokenLogprob& t : e.logprobs) choices[i].logprobs.push_back(std::move(t));
          if (e.finished) choices[i].finish_reason = e.finish_reason;
          return true;
        };
        auto client_there = [&](bool) { return !watch.closed(); };
        if (client_there(false) &&
            poll_choices(streams, std::chrono::milliseconds(100), usage, on_event, client_there)) {
          if (format.harmony)
            for (Choice& c : choices) {
              HarmonyReply reply = parse_harmony_reply(c.text, reads_tool_calls(r) ? r.tools : std::vector<ToolFunction>{});
              c.text = std::move(reply.content);
              c.reasoning = std::move(reply.reasoning);
              c.tool_calls = std::move(reply.calls);
              end_for_calls(!c.tool_calls.empty(), c.finish_reason);
            }
          else
            for (Choice& c : choices) {
              if (format.thinks) {
                ThinkStream::Delta split = split_thinking(c.text, format.prompt_opened_thinking);
                c.reasoning = std::move(split.reasoning);
                c.text = std::move(split.content);
              }
              if (!reads_tool_calls(r)) continue;
              ParsedReply reply = read_calls(r, c.text, c.finish_reason);
              if (reply.calls.empty()) continue;
              c.text = std::move(reply.content);
              c.tool_calls = std::move(reply.calls);
            }
          return send_json(res, 200,
                           full_response(ep, h, choices, r.logprobs, usage));
        }
        cancel_all(streams);  // the client went away: its slots are freed before the next step
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const InputError& e) {
        send_error(res, ApiError::bad_request(e.what()));
      }
    };
  };
  http_->Post(kChatRoute, completion(Endpoint::chat));
  http_->Post(kCompletionsRoute, completion(Endpoint::completions));
  // llama-server's /tokenize and /detokenize: a client that scores or budgets prompts
  // (an evaluation harness sending token ids) counts with the served model's tokenizer.
  auto text_route = [this](auto answer) {
    return [this, answer](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      std::string body;
      if (!read_body(req, res, reader, opt_.max_body_bytes, body)) return;
      try {
        const auto m = served();
        if (!m) throw ApiError(503, "the model is loading", "server_error", "", "loading");
        send_json(res, 200, answer(body, *m));
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const InputError& e) {
        send_error(res, ApiError::bad_request(e.what()));
      }
    };
  };
  http_->Post(kTokenizeRoute, text_route([](const std::string& body, const ServedModel& m) {
    const TokenizeRequest t = parse_tokenize_request(body);
    check_text_fits(t.content, m, "content");
    return json{{"tokens", m.engine->tokenize(t.content, t.add_special && m.engine->add_bos_default())}};
  }));
  http_->Post(kDetokenizeRoute, text_route([](const std::string& body, const ServedModel& m) {
    const std::vector<int32_t> ids = parse_detokenize_request(body);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= m.engine->n_vocab())
        throw ApiError::bad_request("'tokens[" + std::to_string(i) + "]' = " + std::to_string(ids[i]) +
                                        " is not a token id (the vocabulary has " +
                                        std::to_string(m.engine->n_vocab()) + ")",
                                    "tokens[" + std::to_string(i) + "]");
    return json{{"content", m.engine->detokenize(ids)}};
  }));
  // Routes and methods that do not exist get OpenAI's error object, not an empty body.
  http_->set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                    httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    // A route that exists, asked with another method: 405 with the method it takes.
    const bool takes_post = post_route(req.path);
    const bool get_route = req.path == "/health" || req.path == "/metrics" || req.path == "/v1/models" ||
                           req.path.rfind("/v1/models/", 0) == 0;
    if (res.status == 404 && (takes_post || get_route)) {
      res.status = 405;
      res.set_header("Allow", takes_post ? "POST" : "GET, HEAD");
    }
    const int status = res.status;
    std::string msg = status == 404   ? "unknown route " + req.method + " " + req.path
                      : status == 405 ? req.method + " is not allowed on " + req.path + " (it takes " +
                                            (takes_post ? "POST" : "GET") + ")"
                                      : "HTTP " + std::to_string(status) + " for " + req.method + " " + req.path;
    if (status == 413) msg = "the request body is too large";
    send_error(res, ApiError(status, msg, status >= 500 ? "server_error" : "invalid_request_error"));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, msg, "server_error"));
  });
}

}  // namespace moeflow::serve
