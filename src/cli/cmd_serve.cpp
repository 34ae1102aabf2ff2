// moeflow serve: the OpenAI-compatible server (serve/openai_server.h) over one engine
// with continuous batching (serve/serving_loop.h).
//
// Start-up order: parse flags, bind the port (a taken port fails at once), serve
// /health as "loading" while the model loads, then serve completions. SIGINT/SIGTERM:
// stop taking requests (503), let running requests finish, exit 0; a second signal
// exits at once.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/offload_flags.h"
#include "base/error.h"
#include "base/input_file.h"
#include "engine/tokenizer.h"
#include "format/gguf.h"
#include "model/model_weights.h"
#include "moeflow/engine.h"
#include "serve/api_keys.h"
#include "serve/openai_server.h"
#include "serve/scheduler.h"
#include "serve/serving_loop.h"

namespace moeflow::cli {
namespace {

std::string read_template_file(const std::string& path) {
  std::ifstream in = open_input_file(path, "--chat-template-file", true);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The chat template of the GGUF (tokenizer.chat_template), else ChatML, which
// llama-server also falls back to; a template that does not parse is reported and
// chat requests are refused rather than rendered wrongly.
std::optional<serve::ChatTemplate> chat_template_of(const Engine& engine, const std::string& override_path) {
  std::string source;
  std::string where;
  if (!override_path.empty()) {
    source = read_template_file(override_path);
    where = override_path;
  } else if (const gguf::Value* v = engine.model().file().find("tokenizer.chat_template");
             v && v->type == gguf::ValueType::STRING) {
    source = v->s;
    where = "the model's tokenizer.chat_template";
  } else {
    std::fprintf(stderr, "serve: the model has no chat template; /v1/chat/completions uses ChatML\n");
    source =
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    where = "the ChatML fallback";
  }
  try {
    return serve::ChatTemplate::parse(source);
  } catch (const InputError& e) {
    std::fprintf(stderr, "serve: %s cannot be used (%s); /v1/chat/completions is disabled\n", where.c_str(), e.what());
    return std::nullopt;
  }
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  Args a("serve");
  add_model_flags(a);
  a.flag("--host", "address to listen on", true, "127.0.0.1");
  a.flag("--port", "port to listen on (0: any free port, printed at start)", true, "8080");
  a.flag("-np,--parallel", "requests decoding at once (slots); the KV pool holds this many contexts", true, "4");
  a.flag("--queue", "requests waiting for a slot at most; more get 503 with Retry-After", true, "64");
  a.flag("-b,--batch-size", "tokens per engine step at most (decode tokens always fit)", true, "256");
  a.flag("--prefill-chunk", "prompt tokens per prefill chunk (long prompts are read over several steps)", true, "128");
  a.flag("--no-cache-prompt",
         "compute every prompt whole (default: a finished request's prompt stays in the KV pool, in whole prefill "
         "chunks, for later requests that begin with it, until running ones need the blocks)",
         false);
  a.flag("--sched", "order of waiting requests: fcfs or emoe (eMoE's SLO- and task-aware order)", true, "fcfs");
  a.flag("--slo-ms", "latency target of a request that gives none (its 'slo_ms' field), in milliseconds; 0: none",
         true, "0");
  a.flag("--alias", "model name clients use (default: general.name, else the file name)");
  a.flag("--chat-template-file", "Jinja chat template to use instead of the model's");
  a.flag("--http-threads", "connections served at once (0: --parallel + --queue + 4)", true, "0");
  a.flag("--api-key", "admit only requests with 'Authorization: Bearer KEY' (every route but /health)", true);
  a.flag("--api-key-file", "as --api-key, the keys read from a file, one a line (kept out of the process list)",
         true);
  add_offload_flags(a);
  a.parse(argc, argv, 2);

  serve::LoopOptions lo;
  lo.n_parallel = static_cast<int>(a.integer("--parallel", 1, 4096));
  lo.max_waiting = static_cast<size_t>(a.integer("--queue", 0, 1 << 20));
  lo.step_tokens = a.integer("--batch-size", 1, 1 << 20);
  lo.prefill_chunk = a.integer("--prefill-chunk", 1, 1 << 20);
  lo.cache_prompt = !a.has("--no-cache-prompt");
  lo.sched = serve::parse_sched_policy(a.str("--sched"));
  const double slo_ms = a.number("--slo-ms", 0, 86400e3);
  lo.sched_options.default_slo_s = slo_ms / 1e3;
  const std::vector<TaskProfile> profiles = task_profiles_from_flags(a);
  EngineOptions eo = engine_options_from_flags(a, a.str("--policy"));
  if (eo.policy == "all" && a.has("--expert-budget"))
    throw UsageError("--expert-budget needs a --policy other than 'all' (e.g. --policy lru)");
  check_policy_state_out(a, "serve", true);
  eo.n_parallel = lo.n_parallel;
  // The prompt cache keeps prompts in the pool until running requests need the blocks,
  // so it fills the pool either way, and with every sliding-layer position kept any
  // block of a prompt can be continued from (measured in docs/serving.md): only
  // without the cache do sliding layers that keep their window save memory here.
  eo.swa_full = eo.swa_full || lo.cache_prompt;
  serve::ServerOptions so;
  so.host = a.str("--host");
  so.port = static_cast<int>(a.integer("--port", 0, 65535));
  if (a.has("--api-key") && a.has("--api-key-file"))
    throw UsageError("serve: --api-key and --api-key-file exclude each other (put every key in the file)");
  if (a.has("--api-key")) {
    so.api_keys = {a.str("--api-key")};
    serve::check_api_key(so.api_keys[0], "--api-key");
  } else if (a.has("--api-key-file")) {
    so.api_keys = serve::read_api_keys(a.str("--api-key-file"));
  }
  const int64_t http_threads = a.integer("--http-threads", 0, 1 << 16);
  so.http_threads = http_threads > 0 ? static_cast<int>(http_threads)
                                     : lo.n_parallel + static_cast<int>(std::min<size_t>(lo.max_waiting, 1 << 14)) + 4;

  // Signals go to one thread that turns them into a drain; every other thread,
  // httplib's included, inherits the blocked mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that disconnects mid-write is a failed write, not a dead server
  // Request bodies of megabytes, read by many HTTP threads: glibc raises its mmap
  // threshold after the first such buffer is freed, and every later one then stays in
  // its thread's arena for good (RSS grew by ~30 MB a large request, never returned).
  // A fixed threshold keeps buffers past 1 MiB in mappings that go back when freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  serve::ServerMetrics metrics;
  serve::OpenAiServer server(so, metrics);
  const int port = server.bind();
  std::fprintf(stderr, "serve: listening on http://%s:%d (loading the model)\n", so.host.c_str(), port);
  if (!so.api_keys.empty())
    std::fprintf(stderr, "serve: %zu API key%s: every route but /health needs 'Authorization: Bearer KEY'\n",
                 so.api_keys.size(), so.api_keys.size() == 1 ? "" : "s");
  else if (so.host != "127.0.0.1" && so.host != "localhost" && so.host != "::1")
    std::fprintf(stderr, "serve: no --api-key: anyone who reaches %s:%d can use the model\n", so.host.c_str(), port);
  std::thread http([&] { server.listen(); });

  std::unique_ptr<Engine> engine;
  std::unique_ptr<serve::ServingLoop> loop;
  try {
    engine = Engine::open(eo);
    if (engine->lossy())
      std::fprintf(stderr, "serve: --on-miss reroute is lossy: tokens whose expert is not resident use another one\n");
    loop = std::make_unique<serve::ServingLoop>(*engine, lo, metrics);
  } catch (...) {
    server.stop();
    http.join();
    throw;
  }
  serve::ServedModel m;
  m.engine = engine.get();
  m.loop = loop.get();
  m.id = a.has("--alias") ? a.str("--alias") : model_name(engine->model());
  m.chat_template = chat_template_of(*engine, a.str("--chat-template-file"));
  m.task_profiles = profiles;
  m.default_slo_ms = slo_ms;
  server.set_ready(std::move(m));
  if (lo.cache_prompt)
    std::fprintf(stderr, "serve: prompt cache: %s\n",
                 engine->split_invariant()
                     ? "any common prefix, replies included (the model's products run token by token)"
                     : "whole prefill chunks of prompts (a multi-token chunk rounds differently here)");
  std::fprintf(stderr,
               "serve: ready: model '%s' (loaded in %.2f s), %d slots of %lld positions, %s scheduling, "
               "http://%s:%d/v1\n",
               model_name(engine->model()).c_str(), engine->load_seconds(), lo.n_parallel,
               static_cast<long long>(engine->ctx_size()), a.str("--sched").c_str(), so.host.c_str(), port);
  std::fflush(stderr);

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "serve: %s: finishing running requests (again to stop now)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.set_draining();
  loop->drain();
  // Wait for the running requests to finish, or for a second signal.
  struct timespec poll = {0, 20 * 1000 * 1000};
  bool forced = false;
  while (!loop->idle()) {
    siginfo_t info;
    if (sigtimedwait(&sigs, &info, &poll) > 0) {
      forced = true;
      break;
    }
  }
  // Let the last responses leave before the sockets close.
  if (!forced) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  loop.reset();  // requests still running (forced) get an error event
  server.stop();
  http.join();
  // What the policy learned from the requests served, for the next start's --policy-state.
  if (a.has("--policy-state-out")) {
    engine->save_policy_state(a.str("--policy-state-out"));
    std::fprintf(stderr, "serve: policy state saved to %s\n", a.str("--policy-state-out").c_str());
  }
  std::fprintf(stderr, "serve: stopped\n");
  return 0;
}

}  // namespace moeflow::cli
