// moeflow bench-serve: a load generator for any OpenAI-compatible server, in the
// manner of `vllm bench serve`: a fixed concurrency (each client sends its next
// request when the last one ends) or a Poisson request rate, streamed requests
// (SSE), and per request the time to first token (TTFT), the time per output token
// after the first (TPOT), the gaps between streamed tokens (ITL) and the end-to-end
// latency; summarised as mean, p50, p90, p99, with request and token throughput and
// the share of requests within their SLO.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow::cli {

// Splits a byte stream into SSE events: the payload of each "data:" line, in order;
// comments (":...") and other fields are skipped. Bytes may arrive in any pieces.
class SseParser {
 public:
  // Feeds bytes; returns the data payloads completed by them (an event ends at a blank line).
  std::vector<std::string> feed(const char* data, size_t n);

 private:
  std::string line_, data_;
  bool has_data_ = false;
};

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};
// Over the values (empty: zeros); the quantiles interpolate between order statistics.
Percentiles percentiles(std::vector<double> v);

// What one request measured.
struct RequestTiming {
  bool ok = false;
  std::string error;
  double start_s = 0, ttft_s = 0, e2e_s = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  std::vector<double> itl_s;  // between consecutive content chunks
  double slo_s = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens, where the server says
};

struct BenchServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string endpoint = "chat";  // chat | completions
  std::string model;              // empty: the first of GET /v1/models
  std::vector<std::string> prompts;
  int num_prompts = 64;
  int concurrency = 0;            // > 0: fixed concurrency
  double request_rate = 0;        // > 0 (and concurrency 0): Poisson arrivals per second
  int max_tokens = 64;
  double temperature = 0;
  bool ignore_eos = true;         // ask for max_tokens exactly (llama-server and moeflow read it)
  double slo_ms = 0;              // sent as "slo_ms" when > 0; also the attainment target
  uint64_t seed = 1;
  double timeout_s = 600;
};

struct BenchServeResult {
  int concurrency = 0;
  double request_rate = 0;
  int64_t completed = 0, failed = 0;
  double duration_s = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt tokens, those the server reused from earlier requests
  Percentiles ttft_ms, tpot_ms, itl_ms, e2e_ms;
  double slo_attainment = -1;  // -1: no SLO
  std::vector<std::string> errors;  // the first few, for the report
};

// Summarises per-request timings (the part of the benchmark tests check by hand).
BenchServeResult summarize(const std::vector<RequestTiming>& t, double duration_s);

// Runs the benchmark against the server. Throws InputError when it cannot reach it.
BenchServeResult run_bench_serve(const BenchServeOptions& opt);

// Random prompts of about `words` words each (a fixed vocabulary, seeded).
std::vector<std::string> random_prompts(int n, int words, uint64_t seed);
// The prompts, each after the same `words` random words (seeded apart from the prompts):
// requests that share a system prompt or a document, for a server's prompt cache.
std::vector<std::string> with_shared_prefix(std::vector<std::string> prompts, int words, uint64_t seed);
// One prompt per line, or JSONL objects with "prompt" (a line starting with '{').
// Throws InputError naming file:line for a bad line.
std::vector<std::string> load_prompts(const std::string& path);

}  // namespace moeflow::cli
