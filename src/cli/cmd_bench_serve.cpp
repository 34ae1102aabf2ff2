// moeflow bench-serve: cli/bench_serve.h against a running server, one run per
// --concurrency value (or one Poisson run at --request-rate).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/bench_serve.h"
#include "cli/commands.h"

namespace moeflow::cli {
namespace {

nlohmann::json percentiles_json(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
}

nlohmann::json result_json(const BenchServeResult& r) {
  nlohmann::json j = {{"concurrency", r.concurrency},
                      {"request_rate", r.request_rate},
                      {"completed", r.completed},
                      {"failed", r.failed},
                      {"duration_s", r.duration_s},
                      {"request_throughput", r.request_throughput},
                      {"output_throughput", r.output_throughput},
                      {"total_token_throughput", r.total_token_throughput},
                      {"prompt_tokens", r.prompt_tokens},
                      {"cached_tokens", r.cached_tokens},
                      {"output_tokens", r.output_tokens},
                      {"ttft_ms", percentiles_json(r.ttft_ms)},
                      {"tpot_ms", percentiles_json(r.tpot_ms)},
                      {"itl_ms", percentiles_json(r.itl_ms)},
                      {"e2e_ms", percentiles_json(r.e2e_ms)},
                      {"errors", r.errors}};
  j["slo_attainment"] = r.slo_attainment >= 0 ? nlohmann::json(r.slo_attainment) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

int cmd_bench_serve(int argc, char** argv) {
  Args a("bench-serve");
  a.flag("--url", "the server's base URL (http only)", true, "http://127.0.0.1:8080");
  a.flag("--endpoint", "chat or completions", true, "chat");
  a.flag("--model", "model id to send (default: the first of GET /v1/models)");
  a.flag("--concurrency", "clients sending back to back, comma-separated for several runs (e.g. 1,4,16)");
  a.flag("--request-rate", "Poisson arrivals per second instead of a fixed concurrency");
  a.flag("--num-prompts", "requests per run", true, "64");
  a.flag("--dataset", "prompts: one per line, or JSONL objects with \"prompt\"");
  a.flag("--input-len", "words per random prompt (without --dataset)", true, "64");
  a.flag("--prefix-len", "words of a random prefix every prompt begins with (a shared system prompt or document)",
         true, "0");
  a.flag("--max-tokens", "tokens to generate per request", true, "64");
  a.flag("--temperature", "sampling temperature", true, "0");
  a.flag("--no-ignore-eos", "let requests end at end-of-text (default: ask for --max-tokens exactly)", false);
  a.flag("--slo-ms", "latency target sent as 'slo_ms' and counted as attainment");
  a.flag("--seed", "random prompts and Poisson arrivals", true, "1");
  a.flag("--timeout", "seconds a request may take", true, "600");
  a.flag("--json", "print one JSON object", false);
  a.parse(argc, argv, 2);

  BenchServeOptions o;
  const std::string url = a.str("--url");
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) throw UsageError("--url '" + url + "': expected http://HOST:PORT");
  std::string hostport = url.substr(scheme.size());
  if (const size_t slash = hostport.find('/'); slash != std::string::npos) hostport.resize(slash);
  // An IPv6 host goes in brackets ([::1]:8080); the port follows the closing one.
  size_t colon = hostport.rfind(':');
  if (!hostport.empty() && hostport[0] == '[') {
    const size_t close = hostport.find(']');
    if (close == std::string::npos) throw UsageError("--url '" + url + "': an IPv6 host needs its closing ']'");
    if (close + 1 < hostport.size() && hostport[close + 1] != ':')
      throw UsageError("--url '" + url + "': expected ':PORT' after ']'");
    colon = close + 1 < hostport.size() ? close + 1 : std::string::npos;
    o.host = hostport.substr(1, close - 1);
  } else {
    o.host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
  }
  if (colon != std::string::npos) {
    const std::string port = hostport.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      throw UsageError("--url '" + url + "': bad port '" + port + "'");
    o.port = std::stoi(port);
  } else {
    o.port = 80;
  }
  if (o.host.empty()) throw UsageError("--url '" + url + "': no host");
  o.endpoint = a.str("--endpoint");
  if (o.endpoint != "chat" && o.endpoint != "completions")
    throw UsageError("--endpoint '" + o.endpoint + "': expected chat or completions");
  o.model = a.str("--model");
  o.num_prompts = static_cast<int>(a.integer("--num-prompts", 1, 1 << 20));
  o.max_tokens = static_cast<int>(a.integer("--max-tokens", 1, 1 << 20));
  o.temperature = a.number("--temperature", 0, 2);
  o.ignore_eos = !a.has("--no-ignore-eos");
  o.seed = static_cast<uint64_t>(a.integer("--seed", 0, INT64_MAX));
  o.timeout_s = a.number("--timeout", 1, 86400);
  if (a.has("--slo-ms")) o.slo_ms = a.number("--slo-ms", 1e-3, 86400e3);
  o.prompts = a.has("--dataset") ? load_prompts(a.str("--dataset"))
                                 : random_prompts(o.num_prompts, static_cast<int>(a.integer("--input-len", 1, 1 << 16)), o.seed);
  o.prompts = with_shared_prefix(std::move(o.prompts), static_cast<int>(a.integer("--prefix-len", 0, 1 << 16)), o.seed);
  std::vector<int64_t> levels;
  if (a.has("--request-rate")) {
    if (a.has("--concurrency")) throw UsageError("bench-serve: give --concurrency or --request-rate, not both");
    o.request_rate = a.number("--request-rate", 1e-6, 1e6);
    levels.push_back(0);
  } else {
    for (int32_t c : parse_int_list("--concurrency", a.has("--concurrency") ? a.str("--concurrency") : "1")) {
      if (c < 1 || c > 4096) throw UsageError("--concurrency " + std::to_string(c) + ": expected 1 to 4096");
      levels.push_back(c);
    }
  }
  nlohmann::json runs = nlohmann::json::array();
  for (int64_t c : levels) {
    o.concurrency = static_cast<int>(c);
    const BenchServeResult r = run_bench_serve(o);
    runs.push_back(result_json(r));
    if (a.has("--json")) continue;
    std::printf("%s: %lld completed, %lld failed in %.2f s; %.3f req/s, %.1f output tok/s, %.1f total tok/s%s\n",
                c > 0 ? ("concurrency " + std::to_string(c)).c_str() : ("rate " + std::to_string(o.request_rate) + "/s").c_str(),
                static_cast<long long>(r.completed), static_cast<long long>(r.failed), r.duration_s,
                r.request_throughput, r.output_throughput, r.total_token_throughput,
                r.slo_attainment >= 0 ? (", SLO met " + std::to_string(static_cast<int>(100 * r.slo_attainment + 0.5)) + "%").c_str() : "");
    if (r.cached_tokens > 0)
      std::printf("  %lld of %lld prompt tokens reused from earlier requests (the server's prompt cache)\n",
                  static_cast<long long>(r.cached_tokens), static_cast<long long>(r.prompt_tokens));
    std::printf("  %-5s %10s %10s %10s %10s\n", "ms", "mean", "p50", "p90", "p99");
    for (const auto& [name, p] : {std::pair<const char*, Percentiles>{"TTFT", r.ttft_ms}, {"TPOT", r.tpot_ms},
                                  {"ITL", r.itl_ms}, {"E2E", r.e2e_ms}})
      std::printf("  %-5s %10.2f %10.2f %10.2f %10.2f\n", name, p.mean, p.p50, p.p90, p.p99);
    for (const std::string& e : r.errors) std::printf("  error: %s\n", e.c_str());
  }
  if (a.has("--json")) std::printf("%s\n", nlohmann::json{{"url", url}, {"endpoint", o.endpoint}, {"runs", runs}}.dump().c_str());
  return 0;
}

}  // namespace moeflow::cli
