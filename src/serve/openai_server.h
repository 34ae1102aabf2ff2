// moeflow's OpenAI-compatible HTTP server (cpp-httplib):
//   POST /v1/chat/completions, POST /v1/completions   streamed (SSE) or not
//   GET  /v1/models, /v1/models/{id}                   the one model served
//   GET  /health                                       503 while loading or shutting down, 200 ready
//   GET  /metrics                                      Prometheus text (serve/metrics.h)
//   POST /tokenize, POST /detokenize                   the model's tokenizer (llama-server's bodies)
// It listens before the model is loaded (so /health can say "loading"), then
// set_ready() hands it the engine's serving loop. Every error is OpenAI's error object
// with its status: 400 bad request, 401 a missing or wrong API key (--api-key), 404
// unknown route or model, 503 loading, full (with Retry-After) or shutting down, 500
// engine failure.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "policy/emoe.h"
#include "serve/chat_template.h"
#include "serve/metrics.h"

namespace httplib { class Server; }

namespace moeflow {
class Engine;
}

namespace moeflow::serve {

class ServingLoop;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;           // 0: any free port (bind() returns it)
  int http_threads = 16;     // connections served at once (each open request holds one)
  size_t max_body_bytes = 8u << 20;
  std::vector<std::string> api_keys;  // none: open; else every route but /health needs one (serve/api_keys.h)
};

// What the server needs of the loaded model.
struct ServedModel {
  Engine* engine = nullptr;
  ServingLoop* loop = nullptr;
  std::string id;                       // the name clients pass as "model"
  std::optional<ChatTemplate> chat_template;
  std::vector<TaskProfile> task_profiles;  // eMoE: label unlabelled requests by keyword
  double default_slo_ms = 0;
  // The longest token's text in bytes (set_ready measures it): a prompt text longer than
  // the context times this cannot fit, and is refused before it is tokenised.
  size_t longest_token_bytes = 0;
};

class OpenAiServer {
 public:
  OpenAiServer(const ServerOptions& opt, ServerMetrics& metrics);
  ~OpenAiServer();
  // Binds the address; returns the port. Throws InputError if it cannot be bound.
  int bind();
  // Serves until stop(). Call after bind().
  void listen();
  void set_ready(ServedModel model);
  // From now on completions are refused with 503 and /health says so.
  void set_draining();
  void stop();

 private:
  void routes();
  ServerOptions opt_;
  ServerMetrics& metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::shared_ptr<const ServedModel> served() const;
  mutable std::mutex model_mu_;
  std::shared_ptr<const ServedModel> model_;  // null while loading
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> next_id_{1};
};

}  // namespace moeflow::serve
