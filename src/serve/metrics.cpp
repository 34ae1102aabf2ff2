#include "serve/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace moeflow::serve {
namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest form that reads back as the same double (0.0025, not 0.0025000000000000001).
  char b[64];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(b, sizeof b, "%.*g", digits, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void scalar(std::string& out, const std::string& name, const char* type, const std::string& help, double v) {
  header(out, name, type, help);
  out += name + " " + num(v) + "\n";
}

// Latency buckets from 1 ms to 5 min: token-level and request-level times alike.
std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
          1,     1.5,    2,     2.5,  5,     7.5,  10,    15,  20,   30,  60,  120, 300};
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum " + num(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics()
    : time_to_first_token(latency_buckets()),
      inter_token_latency(latency_buckets()),
      e2e_latency(latency_buckets()),
      queue_time(latency_buckets()) {}

void ServerMetrics::set_expert_cache(const ExpertCacheCounters& c, bool offloaded) {
  std::lock_guard<std::mutex> lock(cache_mu_);
  cache_ = c;
  offloaded_ = offloaded;
}

std::string ServerMetrics::render() const {
  std::string o;
  scalar(o, "moeflow_requests_running", "gauge", "Requests holding a slot (prefilling or decoding).",
         static_cast<double>(requests_running.load()));
  scalar(o, "moeflow_requests_waiting", "gauge", "Requests queued for a slot.",
         static_cast<double>(requests_waiting.load()));
  scalar(o, "moeflow_prompt_tokens_total", "counter", "Prompt tokens prefilled.",
         static_cast<double>(prompt_tokens.load()));
  scalar(o, "moeflow_prompt_tokens_cached_total", "counter",
         "Prompt tokens whose keys and values came from an earlier request's prompt (not prefilled).",
         static_cast<double>(prompt_tokens_cached.load()));
  scalar(o, "moeflow_generation_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(generated_tokens.load()));
  header(o, "moeflow_requests_finished_total", "counter", "Requests finished, by finish reason.");
  o += "moeflow_requests_finished_total{reason=\"stop\"} " + std::to_string(finished_stop.load()) + "\n";
  o += "moeflow_requests_finished_total{reason=\"length\"} " + std::to_string(finished_length.load()) + "\n";
  o += "moeflow_requests_finished_total{reason=\"cancelled\"} " + std::to_string(finished_cancelled.load()) + "\n";
  o += "moeflow_requests_finished_total{reason=\"error\"} " + std::to_string(finished_error.load()) + "\n";
  scalar(o, "moeflow_requests_rejected_total", "counter", "Requests refused with 503 (queue full or shutting down).",
         static_cast<double>(rejected_full.load()));
  header(o, "moeflow_requests_slo_total", "counter", "Finished requests by whether their latency met their SLO.");
  o += "moeflow_requests_slo_total{met=\"true\"} " + std::to_string(slo_met.load()) + "\n";
  o += "moeflow_requests_slo_total{met=\"false\"} " + std::to_string(slo_missed.load()) + "\n";
  scalar(o, "moeflow_engine_steps_total", "counter", "Batched engine steps run.", static_cast<double>(steps.load()));
  scalar(o, "moeflow_engine_step_tokens_total", "counter", "Tokens evaluated by engine steps.",
         static_cast<double>(step_tokens.load()));
  time_to_first_token.render(o, "moeflow_time_to_first_token_seconds",
                             "Time from a request's arrival to its first generated token.");
  inter_token_latency.render(o, "moeflow_inter_token_latency_seconds", "Time between consecutive generated tokens.");
  e2e_latency.render(o, "moeflow_e2e_request_latency_seconds", "Time from a request's arrival to its last token.");
  queue_time.render(o, "moeflow_request_queue_time_seconds", "Time a request waited for a slot.");
  scalar(o, "moeflow_kv_blocks_used", "gauge", "KV cache blocks held by sequences.",
         static_cast<double>(kv_blocks_used.load()));
  scalar(o, "moeflow_prompt_cache_mode", "gauge",
         "The prompt cache: -1 off, 0 whole prefill chunks of prompts, 1 any common prefix, replies included "
         "(the engine is split-invariant).",
         static_cast<double>(prompt_cache_mode.load()));
  scalar(o, "moeflow_kv_blocks_parked", "gauge",
         "Of the used KV blocks, those holding finished prompts kept for reuse (given back as needed).",
         static_cast<double>(kv_blocks_parked.load()));
  scalar(o, "moeflow_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
         static_cast<double>(kv_blocks_total.load()));
  scalar(o, "moeflow_kv_bytes_touched", "gauge",
         "Bytes of the KV cache ever written: the most it held at once, the memory it takes.",
         static_cast<double>(kv_bytes_touched.load()));
  ExpertCacheCounters c;
  bool off;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    c = cache_;
    off = offloaded_;
  }
  scalar(o, "moeflow_expert_offloading", "gauge", "1 when experts stream under a budget, else 0.", off ? 1 : 0);
  scalar(o, "moeflow_expert_cache_hits_total", "counter", "Expert uses found resident.", static_cast<double>(c.hits));
  scalar(o, "moeflow_expert_cache_misses_total", "counter", "Expert uses that had to wait for a load.",
         static_cast<double>(c.misses));
  scalar(o, "moeflow_expert_bytes_read_total", "counter", "Expert bytes read from the model file.",
         static_cast<double>(c.bytes_read));
  scalar(o, "moeflow_expert_stall_seconds_total", "counter", "Time steps waited for experts to arrive.",
         c.stall_seconds);
  scalar(o, "moeflow_expert_prefetches_issued_total", "counter", "Expert prefetches issued by the policy.",
         static_cast<double>(c.prefetches_issued));
  scalar(o, "moeflow_expert_prefetches_used_total", "counter", "Prefetched experts used before eviction.",
         static_cast<double>(c.prefetches_used));
  scalar(o, "moeflow_expert_evictions_total", "counter", "Experts evicted from the cache.",
         static_cast<double>(c.evictions));
  scalar(o, "moeflow_expert_rerouted_slots_total", "counter",
         "Token-expert slots served by another resident expert (--on-miss reroute: lossy outputs).",
         static_cast<double>(c.rerouted_slots));
  return o;
}

}  // namespace moeflow::serve
