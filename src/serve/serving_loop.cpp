#include "serve/serving_loop.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <optional>

#include "engine/tokenizer.h"
#include "serve/json_prefix.h"
#include "serve/json_schema_prefix.h"
#include "serve/stop_strings.h"
#include "serve/token_logprobs.h"

namespace moeflow::serve {

// A request holding a slot: its sequence in the engine and its generation state.
struct ServingLoop::Slot {
  int64_t id = 0;
  GenerationJob job;
  SeqId seq = 0;
  bool started = false;         // seq is its sequence in the engine
  int64_t prefilled = 0;        // prompt tokens in the KV cache
  int64_t cached = 0;           // of those, taken from the prompt cache
  int64_t offered = 0;          // of those, offered to the prompt cache while running
  int64_t generated = 0;        // tokens sampled
  int32_t next_token = -1;      // sampled, to be fed in the next step
  std::vector<int32_t> output;  // every token sampled (the prompt cache keeps those fed)
  bool waiting_logits = false;  // a token of the last step asked for this slot's logits
  size_t logits_index = 0;
  Sampler sampler;
  StreamingDetokenizer detok;
  StopStrings stops;
  // The text so far against JSON mode's grammar or the request's schema (at most one).
  std::optional<JsonPrefix> json;
  std::optional<JsonSchemaPrefix> schema;
  // Log-probabilities go out with their tokens' text: a token whose text the stop
  // strings hold back waits with it, and one whose text lies wholly in a stop string
  // is never sent (OpenAI and llama-server list only the returned text's tokens). Each
  // waits beside the byte offset in the detokenized text where its own text begins.
  std::deque<std::pair<int64_t, TokenLogprob>> held_logprobs;
  std::vector<TokenLogprob> prompt_logprobs;  // echo: gathered over the prompt's chunks
  int64_t text_bytes = 0;  // detokenized so far
  int64_t sent_bytes = 0;  // of that, passed by the stop strings
  double arrival = 0, last_token = 0;
  bool done = false;
  bool removed = false;  // its sequence (and KV blocks) given back to the engine

  Slot(int64_t id_, GenerationJob j, const Tokenizer& tok)
      : id(id_), job(std::move(j)), sampler(job.sampler), detok(tok), stops(job.stop) {
    sampler.add_prompt(job.prompt);
    if (job.json_schema) {
      schema.emplace(*job.json_schema);
    } else if (job.json_object) {
      json.emplace();
    }
  }
  int64_t prompt_len() const { return static_cast<int64_t>(job.prompt.size()); }
  bool prefilling() const { return prefilled < prompt_len(); }
  bool scores_prompt() const { return job.echo && job.top_logprobs >= 0; }
  // Scoring the prompt (echo with logprobs) needs every position's logits.
  bool continues_cached() const { return job.cache_prompt && !scores_prompt(); }
  bool constrained() const { return json || schema; }
  void feed_constraint(const std::string& bytes) {
    for (const char c : bytes) {
      const auto u = static_cast<unsigned char>(c);
      json ? json->feed(u) : schema->feed(u);
    }
  }
  // The object the constraint asks for is closed.
  bool constraint_done() const { return json ? json->done() : schema && schema->done(); }

  // Passes detokenized text through the stop strings into `e`, with the log-probabilities
  // of the tokens whose text has now begun to go out.
  void pass_text(const std::string& piece, StreamEvent& e) {
    text_bytes += static_cast<int64_t>(piece.size());
    const std::string out = stops.push(piece);
    sent_bytes += static_cast<int64_t>(out.size());
    e.text += out;
    while (!held_logprobs.empty() && held_logprobs.front().first < sent_bytes) {
      e.logprobs.push_back(std::move(held_logprobs.front().second));
      held_logprobs.pop_front();
    }
  }
  // At the end: the text held back, and the log-probabilities of every token left
  // unless a stop string ended the text before them.
  void pass_rest(StreamEvent& e) {
    if (!stops.stopped()) pass_text(detok.flush(), e);
    const std::string rest = stops.flush();
    sent_bytes += static_cast<int64_t>(rest.size());
    e.text += rest;
    for (auto& [begin, lp] : held_logprobs)
      if (!stops.stopped() || begin < sent_bytes) e.logprobs.push_back(std::move(lp));
    held_logprobs.clear();
  }
};

ServingLoop::ServingLoop(Engine& engine, const LoopOptions& opt, ServerMetrics& metrics)
    : engine_(engine),
      opt_(opt),
      metrics_(metrics),
      scheduler_(make_scheduler(opt.sched, opt.sched_options)),
      t0_(std::chrono::steady_clock::now()) {
  metrics_.kv_blocks_total = engine_.kv_blocks_total();
  if (opt_.cache_prompt) prompt_cache_ = std::make_unique<PromptCache>(engine_, opt_.prefill_chunk);
  metrics_.prompt_cache_mode = prompt_cache_ ? (prompt_cache_->exact() ? 1 : 0) : -1;
  thread_ = std::thread([this] { run(); });
}

ServingLoop::~ServingLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

double ServingLoop::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void ServingLoop::submit(GenerationJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stop_) {
      ++metrics_.rejected_full;
      throw ApiError(503, "the server is shutting down", "server_error", "", "shutting_down");
    }
    if (waiting_.size() >= opt_.max_waiting) {
      ++metrics_.rejected_full;
      throw ApiError(503, "the server is full: " + std::to_string(waiting_.size()) +
                              " requests are already waiting; retry later",
                     "server_error", "", "queue_full");
    }
    const int64_t id = next_id_++;
    const double t = now();
    QueuedRequest q;
    q.id = id;
    q.arrival_s = t;
    q.slo_s = job.slo_s;
    q.prompt_tokens = static_cast<int>(job.prompt.size());
    q.max_tokens = static_cast<int>(std::min<int64_t>(job.max_tokens, INT32_MAX));
    q.task = job.task;
    scheduler_->push(q);
    waiting_.emplace(id, std::move(job));
    metrics_.requests_waiting = static_cast<int64_t>(waiting_.size());
  }
  cv_.notify_all();
}

void ServingLoop::drain() {
  std::map<int64_t, GenerationJob> refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    for (auto& [id, job] : waiting_) scheduler_->remove(id);
    refused.swap(waiting_);
    metrics_.requests_waiting = 0;
  }
  for (auto& [id, job] : refused) {
    StreamEvent e;
    e.finished = true;
    e.error = ApiError(503, "the server is shutting down", "server_error", "", "shutting_down");
    job.stream->push(std::move(e));
  }
  cv_.notify_all();
}

bool ServingLoop::draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draining_;
}

bool ServingLoop::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.empty() && running_ == 0;
}

void ServingLoop::admit(double t) {
  // Waiting requests whose client left are dropped before they take a slot.
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second.stream->cancelled()) {
      scheduler_->remove(it->first);
      ++metrics_.finished_cancelled;
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  const int free_slots = opt_.n_parallel - static_cast<int>(slots_.size());
  if (free_slots > 0 && scheduler_->size() > 0) {
    std::vector<RunningRequest> running;
    for (const auto& s : slots_)
      running.push_back({s->id, s->arrival, s->job.slo_s, static_cast<int>(std::min<int64_t>(s->job.max_tokens, INT32_MAX)),
                         s->generated, s->job.task});
    for (const QueuedRequest& q : scheduler_->admit(t, free_slots, running)) {
      auto it = waiting_.find(q.id);
      if (it == waiting_.end()) continue;
      auto slot = std::make_unique<Slot>(q.id, std::move(it->second), engine_.tokenizer());
      waiting_.erase(it);
      slot->arrival = q.arrival_s;
      metrics_.queue_time.observe(t - slot->arrival);
      slots_.push_back(std::move(slot));
    }
  }
  running_ = slots_.size();
  metrics_.requests_waiting = static_cast<int64_t>(waiting_.size());
  metrics_.requests_running = static_cast<int64_t>(running_);
}

bool ServingLoop::waits_for_prompt(const Slot& s) const {
  if (!prompt_cache_ || !s.continues_cached()) return false;
  const int64_t limit = s.prompt_len() - 1;  // the last prompt token is computed anyway
  for (const auto& a : slots_) {
    if (a.get() == &s) return false;  // only requests that started before it lead it
    if (a->done || !a->started || !a->prefilling()) continue;
    if (prompt_cache_->usable(common_prefix(a->job.prompt, s.job.prompt, limit)) > a->offered) return true;
  }
  return false;
}

void ServingLoop::start(Slot& s) {
  const SequenceParams params{s.job.prompt, s.job.task};
  if (prompt_cache_ && s.continues_cached()) {
    const PromptCache::Taken taken = prompt_cache_->take(params);
    s.seq = taken.seq;
    s.prefilled = s.cached = s.offered = taken.cached;
    metrics_.prompt_tokens_cached += static_cast<uint64_t>(taken.cached);
  } else {
    s.seq = engine_.add_sequence(params);
  }
  s.started = true;
}

void ServingLoop::drop_cancelled() {
  for (auto& s : slots_)
    if (!s->done && s->job.stream->cancelled()) {
      s->done = true;
      ++metrics_.finished_cancelled;
    }
}

void ServingLoop::finish(Slot& s, const std::string& reason, double t) {
  StreamEvent e;
  s.pass_rest(e);
  e.finished = true;
  e.finish_reason = reason;
  e.prompt_tokens = s.prompt_len();
  e.cached_tokens = s.cached;
  e.completion_tokens = s.generated;
  // The request is counted as finished before its client hears so: a client that reads
  // /metrics right after its response must not still see it running (the loop's own
  // count of running slots catches up at the end of the step).
  s.done = true;
  --metrics_.requests_running;
  (reason == "stop" ? metrics_.finished_stop : metrics_.finished_length)++;
  const double e2e = t - s.arrival;
  metrics_.e2e_latency.observe(e2e);
  const double slo = s.job.slo_s > 0 ? s.job.slo_s : opt_.sched_options.default_slo_s;
  if (slo > 0) (e2e <= slo ? metrics_.slo_met : metrics_.slo_missed)++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    scheduler_->completed(s.job.task, s.generated);
  }
  release(s);  // its KV blocks too are back before the client hears
  s.job.stream->push(std::move(e));
}

void ServingLoop::release(Slot& s, bool failed) {
  if (!s.removed && s.started) {
    if (prompt_cache_ && !failed) {
      std::vector<int32_t> tokens = s.job.prompt;
      tokens.insert(tokens.end(), s.output.begin(), s.output.end());
      prompt_cache_->put(s.seq, tokens, s.prompt_len());
    } else {
      engine_.remove_sequence(s.seq);
    }
  }
  s.removed = true;
  note_kv_metrics();
}

void ServingLoop::note_kv_metrics() {
  metrics_.kv_blocks_used = engine_.kv_blocks_total() - engine_.kv_blocks_free();
  metrics_.kv_blocks_parked = prompt_cache_ ? engine_.kv_blocks_parked() : 0;
  metrics_.kv_bytes_touched = engine_.kv_bytes_touched();
}

void ServingLoop::make_room(const std::vector<BatchToken>& batch) {
  if (!prompt_cache_ || prompt_cache_->size() == 0) return;
  // Short even so: the engine refuses the step and names it.
  prompt_cache_->make_room(engine_.kv_blocks_needed(batch));
  metrics_.kv_blocks_parked = engine_.kv_blocks_parked();
}

void ServingLoop::fail(Slot& s, const ApiError& err) {
  StreamEvent e;
  e.finished = true;
  e.error = err;
  s.done = true;  // counted before the client hears, as finish() does
  --metrics_.requests_running;
  ++metrics_.finished_error;
  release(s, true);
  s.job.stream->push(std::move(e));
}

const std::vector<std::string>& ServingLoop::token_texts() {
  if (token_texts_.empty()) {
    const Tokenizer& tok = engine_.tokenizer();
    token_texts_.resize(static_cast<size_t>(engine_.n_vocab()));
    for (size_t t = 0; t < token_texts_.size(); ++t) token_texts_[t] = tok.token_bytes(static_cast<int32_t>(t), false);
  }
  return token_texts_;
}

void ServingLoop::json_allowed(const Slot& s) {
  if (!json_filter_) json_filter_ = std::make_unique<JsonTokenFilter>(token_texts());
  if (s.json) {
    json_filter_->allowed(*s.json, json_allowed_);
  } else {
    json_filter_->allowed(*s.schema, json_allowed_);
  }
}

bool ServingLoop::echo_prompt(Slot& s, int64_t pos, const float* logits, double t) {
  const std::vector<std::string>& texts = token_texts();
  auto prompt_text = [&](int32_t id) { return texts[static_cast<size_t>(id)]; };
  auto first_unscored = [&] {  // nothing comes before the prompt's first token to predict it
    if (!s.prompt_logprobs.empty()) return;
    TokenLogprob first;
    first.token = prompt_text(s.job.prompt[0]);
    first.scored = false;
    s.prompt_logprobs.push_back(std::move(first));
  };
  if (pos < s.prompt_len() - 1) {  // how likely the prompt's next token was
    first_unscored();
    s.prompt_logprobs.push_back(token_logprobs(logits, engine_.n_vocab(), s.job.prompt[static_cast<size_t>(pos) + 1],
                                               s.job.top_logprobs, prompt_text));
    return true;
  }
  // The prompt done: its text goes out first.
  StreamEvent echo;
  echo.text = engine_.tokenizer().decode(s.job.prompt);
  if (s.scores_prompt()) {
    first_unscored();  // a prompt of one token has no other
    echo.logprobs = std::move(s.prompt_logprobs);
  }
  s.job.stream->push(std::move(echo));
  if (s.job.max_tokens > 0) return false;
  finish(s, "length", t);
  return true;
}

void ServingLoop::step_once() {
  // A request whose prompt begins as one being read before it does waits until that
  // one has offered the shared part to the prompt cache, then continues from it: a
  // prompt that requests arriving together share is computed once.
  for (auto& s : slots_)
    if (!s->done && !s->started && !waits_for_prompt(*s)) start(*s);
  std::vector<BatchToken> batch;
  std::vector<Slot*> owners;  // per batch token: the slot it belongs to
  // Decode tokens first: every running decode advances by one token per step.
  for (auto& s : slots_) {
    if (s->done || !s->started || s->prefilling()) continue;
    batch.push_back({s->seq, s->next_token, s->prompt_len() + s->generated - 1, true});
    owners.push_back(s.get());
  }
  // Then whole prompt chunks, oldest request first, while the step has room; at least
  // one chunk per step so that prefill always progresses.
  int64_t room = opt_.step_tokens - static_cast<int64_t>(batch.size());
  bool any_prefill = false;
  for (auto& s : slots_) {
    if (s->done || !s->started || !s->prefilling()) continue;
    const int64_t end = std::min(s->prompt_len(), (s->prefilled / opt_.prefill_chunk + 1) * opt_.prefill_chunk);
    const int64_t n = end - s->prefilled;
    if (any_prefill && n > room) break;
    for (int64_t p = s->prefilled; p < end; ++p) {
      batch.push_back({s->seq, s->job.prompt[static_cast<size_t>(p)], p, p == s->prompt_len() - 1 || s->scores_prompt()});
      owners.push_back(s.get());
    }
    room -= n;
    any_prefill = true;
  }
  if (batch.empty()) return;
  const double t_step = now();
  try {
    make_room(batch);
    engine_.step(batch);
  } catch (const std::exception& ex) {
    // The step changed nothing; its requests cannot go on.
    std::fprintf(stderr, "serve: engine step of %zu tokens failed: %s\n", batch.size(), ex.what());
    for (Slot* s : owners)
      if (!s->done) fail(*s, ApiError(500, std::string("the engine failed: ") + ex.what(), "server_error"));
    return;
  }
  ++metrics_.steps;
  metrics_.step_tokens += batch.size();
  const double t = now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    scheduler_->observed_step(t - t_step, static_cast<int64_t>(batch.size()));
  }
  const Tokenizer& tok = engine_.tokenizer();
  for (size_t i = 0; i < batch.size(); ++i) {
    Slot& s = *owners[i];
    const BatchToken& b = batch[i];
    if (s.prefilling()) {
      s.prefilled = b.pos + 1;
      ++metrics_.prompt_tokens;
    }
    if (!b.logits || s.done) continue;
    const float* logits = engine_.logits(i);
    if (s.job.echo && b.pos < s.prompt_len() && echo_prompt(s, b.pos, logits, t)) continue;
    int32_t id;
    try {
      if (s.constrained()) {
        json_allowed(s);
        id = s.sampler.sample(logits, engine_.n_vocab(), json_allowed_);
        s.feed_constraint(token_texts_[static_cast<size_t>(id)]);
      } else {
        id = s.sampler.sample(logits, engine_.n_vocab());
      }
    } catch (const std::exception& ex) {
      fail(s, ApiError(500, ex.what(), "server_error"));
      continue;
    }
    ++s.generated;
    s.output.push_back(id);
    ++metrics_.generated_tokens;
    if (s.generated == 1)
      metrics_.time_to_first_token.observe(t - s.arrival);
    else
      metrics_.inter_token_latency.observe(t - s.last_token);
    s.last_token = t;
    if (s.job.stop_at_eog && engine_.is_end_of_generation(id)) {
      finish(s, "stop", t);
      continue;
    }
    if (s.job.top_logprobs >= 0)
      s.held_logprobs.emplace_back(s.text_bytes, token_logprobs(logits, engine_.n_vocab(), id, s.job.top_logprobs,
                                                                [&](int32_t t2) { return tok.token_bytes(t2, true); }));
    StreamEvent e;
    s.pass_text(s.detok.push(id), e);
    if (!e.text.empty() || !e.logprobs.empty()) s.job.stream->push(std::move(e));
    if (s.stops.stopped() || s.constraint_done()) {
      finish(s, "stop", t);
    } else if (s.generated >= s.job.max_tokens || s.prompt_len() + s.generated > engine_.ctx_size()) {
      // The next token would need a position past the context.
      finish(s, "length", t);
    } else {
      s.next_token = id;
    }
  }
  if (prompt_cache_)
    for (auto& s : slots_)
      if (!s->done && s->started && prompt_cache_->usable(std::min(s->prefilled, s->prompt_len())) > s->offered)
        s->offered = prompt_cache_->offer(s->seq, s->job.prompt, s->prefilled);
}

void ServingLoop::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !slots_.empty() || !waiting_.empty(); });
      if (stop_) break;
      admit(now());
    }
    drop_cancelled();
    step_once();
    // Finished and cancelled requests give their KV blocks back before the next step.
    for (auto& s : slots_)
      if (s->done) release(*s);
    slots_.erase(std::remove_if(slots_.begin(), slots_.end(), [](const auto& s) { return s->done; }), slots_.end());
    note_kv_metrics();
    if (engine_.offloaded()) {
      const ExpertCacheStats c = engine_.cache_stats();
      metrics_.set_expert_cache({c.hits, c.misses, c.bytes_read, c.prefetches_issued, c.prefetch_hits, c.evictions,
                                 c.stall_seconds, c.rerouted_slots},
                                true);
    }
    std::lock_guard<std::mutex> lock(mu_);
    running_ = slots_.size();
    metrics_.requests_running = static_cast<int64_t>(running_);
  }
  // Stopped with requests still in flight: their clients get an error, not silence.
  for (auto& s : slots_)
    if (!s->done) fail(*s, ApiError(503, "the server stopped", "server_error", "", "shutting_down"));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, job] : waiting_) {
    StreamEvent e;
    e.finished = true;
    e.error = ApiError(503, "the server stopped", "server_error", "", "shutting_down");
    job.stream->push(std::move(e));
  }
}

}  // namespace moeflow::serve
