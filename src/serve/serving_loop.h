// Continuous batching over one Engine. Requests wait in a bounded queue ordered by a
// RequestScheduler (FCFS or eMoE's SLO-aware order); a free slot takes the next one.
// Every step carries one token of each decoding request and whole prefill chunks of
// the requests still reading their prompts, up to a per-step token budget, so a long
// prompt is read over several steps while the others keep decoding.
//
// A prompt is always split at the same positions (multiples of prefill_chunk), and a
// token alone in its sequence is computed the same way whatever else is in the step,
// so a request gets the same tokens whether it runs alone or among others (the engine's
// batching guarantee, include/moeflow/engine.h), and whether or not it continues from
// an earlier request's prompt (serve/prompt_cache.h).
//
// Thread safety: submit(), drain(), idle() and the metrics may be used from any
// thread; the Engine is used only by the loop's own thread.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moeflow/engine.h"
#include "moeflow/sampler.h"
#include "serve/json_schema.h"
#include "serve/json_token_filter.h"
#include "serve/metrics.h"
#include "serve/prompt_cache.h"
#include "serve/request_stream.h"
#include "serve/scheduler.h"

namespace moeflow::serve {

struct GenerationJob {
  std::vector<int32_t> prompt;
  SamplerOptions sampler;
  int64_t max_tokens = 16;      // tokens to generate at most (0 with echo: score the prompt alone)
  bool stop_at_eog = true;
  std::vector<std::string> stop;
  int top_logprobs = -1;        // -1: no log-probabilities; else how many alternatives
  // The prompt's text goes out first, with (when top_logprobs >= 0) each prompt token's
  // log-probability given those before it; the first token has none.
  bool echo = false;
  // JSON mode: only tokens that keep the text a prefix of one JSON object are sampled,
  // and the request ends ("stop") when the object closes (serve/json_prefix.h).
  bool json_object = false;
  // response_format json_schema: the same with the text kept a prefix of an instance of
  // this schema (serve/json_schema.h); it outranks json_object.
  std::shared_ptr<const JsonSchema> json_schema;
  // May continue from a finished request's prompt that begins the same way (the
  // loop's prompt cache; the tokens are the same either way, only prefill is saved).
  bool cache_prompt = true;
  double slo_s = 0;             // 0: the scheduler's default
  std::string task;
  std::shared_ptr<RequestStream> stream;
};

struct LoopOptions {
  int n_parallel = 4;            // slots: requests running at once
  int64_t prefill_chunk = 128;   // prompt tokens per chunk
  int64_t step_tokens = 256;     // tokens per step at most (decode tokens always fit)
  size_t max_waiting = 64;       // queue bound; beyond it submit() refuses with 503
  // Finished prompts stay in the KV pool for later requests that begin with them
  // (serve/prompt_cache.h) until running requests need the blocks.
  bool cache_prompt = true;
  SchedPolicy sched = SchedPolicy::fcfs;
  SchedulerOptions sched_options;
};

class ServingLoop {
 public:
  ServingLoop(Engine& engine, const LoopOptions& opt, ServerMetrics& metrics);
  ~ServingLoop();  // stops the loop; requests still running get an error event
  ServingLoop(const ServingLoop&) = delete;
  ServingLoop& operator=(const ServingLoop&) = delete;

  // Queues a request; throws ApiError 503 when the queue is full or the loop drains.
  void submit(GenerationJob job);
  // Refuses new requests from now on; those waiting get 503; running ones finish.
  void drain();
  bool draining() const;
  // No request running or waiting.
  bool idle() const;

 private:
  struct Slot;
  void run();
  void admit(double now);
  // Whether slot s, not yet started, shares more of its prompt with one that an
  // earlier request is reading than that one has offered to the prompt cache so far.
  bool waits_for_prompt(const Slot& s) const;
  // Gives slot s its sequence, continued from the prompt cache where it may be.
  void start(Slot& s);
  void drop_cancelled();
  void step_once();
  void finish(Slot& s, const std::string& reason, double now);
  void fail(Slot& s, const ApiError& e);
  // Gives a done slot's sequence (if it started) back to the engine (once), its
  // prompt's whole chunks to the prompt cache unless `failed`, and updates the KV gauges.
  void release(Slot& s, bool failed = false);
  // Frees parked prompts until the batch's new positions have KV blocks.
  void make_room(const std::vector<BatchToken>& batch);
  // The KV gauges of /metrics, from the engine as it is now.
  void note_kv_metrics();
  double now() const;
  // echo: a prompt position's logits score the prompt's next token; at the last one the
  // prompt's text (and scores) go out. True when the position yields no token to sample
  // (an inner position, or max_tokens 0, which finishes the request).
  bool echo_prompt(Slot& s, int64_t pos, const float* logits, double t);
  // Every token's bytes as decode() spells them, built at the first request that needs
  // them (JSON mode, echo).
  const std::vector<std::string>& token_texts();
  // The tokens JSON mode or the slot's schema lets slot s write next, in json_allowed_.
  void json_allowed(const Slot& s);

  Engine& engine_;
  LoopOptions opt_;
  ServerMetrics& metrics_;
  std::unique_ptr<RequestScheduler> scheduler_;
  const std::chrono::steady_clock::time_point t0_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, GenerationJob> waiting_;  // by request id; the scheduler orders them
  int64_t next_id_ = 1;
  bool draining_ = false, stop_ = false;
  size_t running_ = 0;  // slots in use (written by the loop thread under mu_)

  std::unique_ptr<PromptCache> prompt_cache_;  // loop thread only; null when off
  std::vector<std::unique_ptr<Slot>> slots_;  // loop thread only
  std::vector<std::string> token_texts_;      // loop thread only
  std::unique_ptr<JsonTokenFilter> json_filter_;  // over token_texts_; loop thread only
  std::vector<uint8_t> json_allowed_;
  std::thread thread_;
};

}  // namespace moeflow::serve
