#include "cli/bench_serve.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/error.h"
#include "base/input_file.h"
#include "base/quantile.h"

namespace moeflow::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::unique_ptr<httplib::Client> client_for(const BenchServeOptions& o) {
  auto c = std::make_unique<httplib::Client>(o.host, o.port);
  const auto t = static_cast<time_t>(o.timeout_s);
  c->set_read_timeout(t, 0);
  c->set_write_timeout(t, 0);
  c->set_connection_timeout(10, 0);
  c->set_tcp_nodelay(true);
  return c;
}

json request_body(const BenchServeOptions& o, const std::string& prompt) {
  json b = {{"model", o.model}, {"max_tokens", o.max_tokens}, {"temperature", o.temperature}, {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  if (o.ignore_eos) b["ignore_eos"] = true;
  if (o.slo_ms > 0) b["slo_ms"] = o.slo_ms;
  if (o.endpoint == "chat")
    b["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
  else
    b["prompt"] = prompt;
  return b;
}

// One streamed request: the time of each chunk that carries text, and the usage.
RequestTiming run_request(httplib::Client& c, const BenchServeOptions& o, const std::string& prompt,
                          Clock::time_point bench_start) {
  RequestTiming t;
  t.slo_s = o.slo_ms / 1e3;
  t.start_s = seconds_since(bench_start);
  const Clock::time_point t0 = Clock::now();
  SseParser sse;
  std::vector<double> chunk_times;
  bool done = false;
  std::string error_body;
  std::string raw;  // the first bytes of the body as received
  httplib::Request req;
  req.method = "POST";
  req.path = o.endpoint == "chat" ? "/v1/chat/completions" : "/v1/completions";
  req.body = request_body(o, prompt).dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (raw.size() < 4096) raw.append(data, std::min(n, 4096 - raw.size()));
    for (const std::string& ev : sse.feed(data, n)) {
      if (ev == "[DONE]") {
        done = true;
        continue;
      }
      json j = json::parse(ev, nullptr, false);
      if (j.is_discarded()) {
        error_body = "a stream event that is not JSON: " + ev.substr(0, 200);
        continue;
      }
      if (j.contains("error")) {
        error_body = j["error"].value("message", j.dump());
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        t.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
        t.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
        const json& details = j["usage"].value("prompt_tokens_details", json::object());
        if (details.is_object()) t.cached_tokens = details.value("cached_tokens", int64_t{0});
      }
      if (!j.contains("choices") || !j["choices"].is_array()) continue;
      for (const json& ch : j["choices"]) {
        std::string text;
        if (ch.contains("delta") && ch["delta"].contains("content") && ch["delta"]["content"].is_string())
          text = ch["delta"]["content"].get<std::string>();
        else if (ch.contains("text") && ch["text"].is_string())
          text = ch["text"].get<std::string>();
        if (!text.empty()) chunk_times.push_back(seconds_since(t0));
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = c.send(req, res, err);
  t.e2e_s = seconds_since(t0);
  if (!sent) {
    t.error = "request failed: " + httplib::to_string(err);
    return t;
  }
  if (res.status != 200) {
    // An error's body is one JSON object, not an event stream: the receiver kept its bytes.
    const std::string& body = res.body.empty() ? raw : res.body;
    if (error_body.empty() && !body.empty()) {
      const json j = json::parse(body, nullptr, false);
      if (!j.is_discarded() && j.contains("error") && j["error"].is_object())
        error_body = j["error"].value("message", j["error"].dump());
      else
        error_body = body.substr(0, 200);
    }
    t.error = "HTTP " + std::to_string(res.status) + (error_body.empty() ? "" : ": " + error_body);
    return t;
  }
  if (!error_body.empty()) {
    t.error = error_body;
    return t;
  }
  if (!done || chunk_times.empty()) {
    t.error = done ? "the stream carried no text" : "the stream ended without [DONE]";
    return t;
  }
  t.ok = true;
  t.ttft_s = chunk_times.front();
  for (size_t i = 1; i < chunk_times.size(); ++i) t.itl_s.push_back(chunk_times[i] - chunk_times[i - 1]);
  if (t.output_tokens == 0) t.output_tokens = static_cast<int64_t>(chunk_times.size());
  return t;
}

std::string first_model(const BenchServeOptions& o) {
  auto c = client_for(o);
  auto r = c->Get("/v1/models");
  if (!r)
    throw InputError("bench-serve: cannot reach http://" +
                     (o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host) + ":" + std::to_string(o.port) + " (" +
                     httplib::to_string(r.error()) + ")");
  const json j = json::parse(r->body, nullptr, false);
  if (r->status != 200 || j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    throw InputError("bench-serve: GET /v1/models gave HTTP " + std::to_string(r->status) + " without a model id; "
                     "pass --model");
  return j["data"][0]["id"].get<std::string>();
}

}  // namespace

std::vector<std::string> SseParser::feed(const char* data, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    const char ch = data[i];
    if (ch != '\n') {
      line_ += ch;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.empty()) {  // the blank line ends an event
      if (has_data_) out.push_back(data_);
      data_.clear();
      has_data_ = false;
    } else if (line_.rfind("data:", 0) == 0) {
      std::string v = line_.substr(5);
      if (!v.empty() && v[0] == ' ') v.erase(0, 1);
      if (has_data_) data_ += '\n';
      data_ += v;
      has_data_ = true;
    }  // ":" comments and other fields carry nothing we measure
    line_.clear();
  }
  return out;
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double s = 0;
  for (double x : v) s += x;
  p.mean = s / static_cast<double>(v.size());
  p.p50 = quantile_of_sorted(v, 0.5), p.p90 = quantile_of_sorted(v, 0.9), p.p99 = quantile_of_sorted(v, 0.99);
  return p;
}

BenchServeResult summarize(const std::vector<RequestTiming>& timings, double duration_s) {
  BenchServeResult r;
  r.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t with_slo = 0, met = 0;
  for (const RequestTiming& t : timings) {
    if (!t.ok) {
      ++r.failed;
      if (r.errors.size() < 5) r.errors.push_back(t.error);
      continue;
    }
    ++r.completed;
    r.prompt_tokens += t.prompt_tokens;
    r.cached_tokens += t.cached_tokens;
    r.output_tokens += t.output_tokens;
    ttft.push_back(t.ttft_s * 1e3);
    e2e.push_back(t.e2e_s * 1e3);
    if (t.output_tokens > 1) tpot.push_back((t.e2e_s - t.ttft_s) * 1e3 / static_cast<double>(t.output_tokens - 1));
    for (double x : t.itl_s) itl.push_back(x * 1e3);
    if (t.slo_s > 0) {
      ++with_slo;
      met += t.e2e_s <= t.slo_s;
    }
  }
  r.ttft_ms = percentiles(ttft);
  r.tpot_ms = percentiles(tpot);
  r.itl_ms = percentiles(itl);
  r.e2e_ms = percentiles(e2e);
  if (duration_s > 0) {
    r.request_throughput = static_cast<double>(r.completed) / duration_s;
    r.output_throughput = static_cast<double>(r.output_tokens) / duration_s;
    r.total_token_throughput = static_cast<double>(r.prompt_tokens + r.output_tokens) / duration_s;
  }
  if (with_slo) r.slo_attainment = static_cast<double>(met) / static_cast<double>(with_slo);
  return r;
}

BenchServeResult run_bench_serve(const BenchServeOptions& opt_in) {
  BenchServeOptions o = opt_in;
  if (o.prompts.empty()) throw InputError("bench-serve: no prompts");
  if (o.model.empty()) o.model = first_model(o);
  std::vector<RequestTiming> timings(static_cast<size_t>(o.num_prompts));
  const Clock::time_point t0 = Clock::now();
  auto prompt_of = [&](size_t i) -> const std::string& { return o.prompts[i % o.prompts.size()]; };
  if (o.concurrency > 0) {
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < o.concurrency; ++w)
      workers.emplace_back([&] {
        auto c = client_for(o);
        for (size_t i; (i = next++) < timings.size();) timings[i] = run_request(*c, o, prompt_of(i), t0);
      });
    for (auto& w : workers) w.join();
  } else {
    // Poisson arrivals: exponential gaps from a seeded generator; each request on its
    // own thread so that a slow one does not delay the next arrival.
    std::mt19937_64 rng(o.seed);
    std::vector<std::thread> inflight;
    double at = 0;
    for (size_t i = 0; i < timings.size(); ++i) {
      const double u = (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
      at += -std::log(u) / o.request_rate;
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
      inflight.emplace_back([&, i] {
        auto c = client_for(o);
        timings[i] = run_request(*c, o, prompt_of(i), t0);
      });
    }
    for (auto& t : inflight) t.join();
  }
  BenchServeResult r = summarize(timings, seconds_since(t0));
  r.concurrency = o.concurrency;
  r.request_rate = o.concurrency > 0 ? 0 : o.request_rate;
  return r;
}

std::vector<std::string> random_prompts(int n, int words, uint64_t seed) {
  static const char* kWords[] = {"the",  "river", "stone", "light", "north", "window", "quiet", "number", "garden",
                                 "write", "under", "silver", "field", "market", "story", "engine", "winter", "paper",
                                 "bridge", "mountain", "question", "answer", "summer", "letter", "music", "city"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string p;
    for (int w = 0; w < words; ++w) {
      if (w) p += ' ';
      p += kWords[rng() % (sizeof kWords / sizeof kWords[0])];
    }
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> with_shared_prefix(std::vector<std::string> prompts, int words, uint64_t seed) {
  if (words <= 0) return prompts;
  const std::string prefix = random_prompts(1, words, seed ^ 0x9e3779b97f4a7c15ull)[0];
  for (std::string& p : prompts) p = prefix + " " + p;
  return prompts;
}

std::vector<std::string> load_prompts(const std::string& path) {
  std::ifstream in = open_input_file(path, "--dataset");
  std::vector<std::string> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    if (line[0] == '{') {
      const json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("prompt") || !j["prompt"].is_string())
        throw InputError(path + ":" + std::to_string(n) + ": expected a JSON object with a string \"prompt\"");
      out.push_back(j["prompt"].get<std::string>());
    } else {
      out.push_back(line);
    }
  }
  if (out.empty()) throw InputError(path + ": no prompts");
  return out;
}

}  // namespace moeflow::cli
