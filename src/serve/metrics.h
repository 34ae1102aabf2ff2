// The server's Prometheus metrics (text exposition format 0.0.4), all named moeflow_*:
// counters end in _total, durations are histograms in seconds. The serving loop
// updates them; GET /metrics renders them. Thread-safe.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace moeflow::serve {

// Cumulative buckets with fixed upper bounds, plus _sum and _count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  void render(std::string& out, const std::string& name, const std::string& help) const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Expert-cache counters as the engine reports them after a step.
struct ExpertCacheCounters {
  uint64_t hits = 0, misses = 0, bytes_read = 0, prefetches_issued = 0, prefetches_used = 0, evictions = 0;
  double stall_seconds = 0;
  uint64_t rerouted_slots = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  std::atomic<int64_t> requests_running{0}, requests_waiting{0};
  std::atomic<uint64_t> prompt_tokens{0}, generated_tokens{0};
  std::atomic<uint64_t> prompt_tokens_cached{0};  // prompt positions taken from parked prefixes
  // Finished requests by how they ended.
  std::atomic<uint64_t> finished_stop{0}, finished_length{0}, finished_cancelled{0}, finished_error{0};
  std::atomic<uint64_t> rejected_full{0};  // 503: queue full or shutting down
  std::atomic<uint64_t> slo_met{0}, slo_missed{0};
  std::atomic<int64_t> kv_blocks_used{0}, kv_blocks_total{0};
  std::atomic<int64_t> kv_blocks_parked{0};  // of the used: finished prompts kept for reuse
  std::atomic<uint64_t> kv_bytes_touched{0};  // Engine::kv_bytes_touched: the KV cache's memory
  // The prompt cache: -1 off, 0 keeping whole prefill chunks, 1 any prefix (replies too).
  std::atomic<int64_t> prompt_cache_mode{-1};
  std::atomic<uint64_t> steps{0}, step_tokens{0};

  Histogram time_to_first_token, inter_token_latency, e2e_latency, queue_time;

  void set_expert_cache(const ExpertCacheCounters& c, bool offloaded);
  std::string render() const;

 private:
  mutable std::mutex cache_mu_;
  ExpertCacheCounters cache_;
  bool offloaded_ = false;
};

}  // namespace moeflow::serve
