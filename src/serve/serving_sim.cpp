#include "serve/serving_sim.h"

#include "base/quantile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

namespace moeflow::serve {
namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return quantile_of_sorted(v, q);
}

struct Active {
  size_t index;
  int64_t generated = 0;
};

}  // namespace

ServingSimResult simulate_serving(const std::vector<SimRequest>& requests, const ServingSimOptions& opt) {
  if (opt.slots < 1) throw std::invalid_argument("simulate_serving: slots must be positive");
  for (size_t i = 1; i < requests.size(); ++i)
    if (requests[i].arrival_s < requests[i - 1].arrival_s)
      throw std::invalid_argument("simulate_serving: arrivals must be in time order");
  SchedulerOptions so = opt.sched_options;
  so.token_seconds = opt.token_s;
  so.expert_load_seconds = opt.expert_load_s;
  auto sched = make_scheduler(opt.sched, so);
  const size_t n = requests.size();
  ServingSimResult res;
  res.requests = static_cast<int64_t>(n);
  res.latency_s.assign(n, 0);
  std::vector<double> first_token(n, 0), start(n, 0);
  std::vector<Active> running;
  size_t next = 0;  // next arrival
  double now = 0;
  size_t done = 0;
  while (done < n) {
    while (next < n && requests[next].arrival_s <= now) {
      const SimRequest& r = requests[next];
      sched->push({static_cast<int64_t>(next), r.arrival_s, r.slo_s, r.prompt_tokens, r.output_tokens, r.task});
      ++next;
    }
    if (running.empty() && sched->size() == 0) {  // idle until the next arrival
      now = requests[next].arrival_s;
      continue;
    }
    std::vector<RunningRequest> view;
    for (const Active& a : running) {
      const SimRequest& r = requests[a.index];
      view.push_back({static_cast<int64_t>(a.index), r.arrival_s, r.slo_s, r.output_tokens, a.generated, r.task});
    }
    const std::vector<QueuedRequest> admitted =
        sched->admit(now, opt.slots - static_cast<int>(running.size()), view);
    if (running.empty() && admitted.empty()) {
      // The scheduler holds every waiting request back with nothing running: only a
      // new arrival can change its mind (eMoE admits anything when idle, so this is a
      // guard against a scheduler that would stall).
      if (next >= n) throw std::logic_error("simulate_serving: the scheduler admits nothing and nothing will arrive");
      now = requests[next].arrival_s;
      continue;
    }
    int64_t tokens = static_cast<int64_t>(running.size());
    for (const QueuedRequest& q : admitted) tokens += q.prompt_tokens;
    const double dt = opt.step_fixed_s + opt.token_s * static_cast<double>(tokens) +
                      (admitted.empty() ? 0.0 : opt.expert_load_s);
    sched->observed_step(dt, tokens);
    now += dt;
    for (Active& a : running) ++a.generated;
    for (const QueuedRequest& q : admitted) {
      const size_t i = static_cast<size_t>(q.id);
      start[i] = now - dt;
      first_token[i] = now;
      running.push_back({i, 1});
    }
    for (auto it = running.begin(); it != running.end();) {
      const SimRequest& r = requests[it->index];
      if (it->generated >= r.output_tokens) {
        res.latency_s[it->index] = now - r.arrival_s;
        sched->completed(r.task, it->generated);
        ++done;
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }
  res.makespan_s = now;
  double lat = 0, ttft = 0, queue = 0;
  for (size_t i = 0; i < n; ++i) {
    const SimRequest& r = requests[i];
    lat += res.latency_s[i];
    ttft += first_token[i] - r.arrival_s;
    queue += start[i] - r.arrival_s;
    const double slo = r.slo_s > 0 ? r.slo_s : opt.sched_options.default_slo_s;
    if (slo > 0) {
      ++res.with_slo;
      res.slo_met += res.latency_s[i] <= slo;
    }
  }
  if (n) {
    res.mean_latency_s = lat / static_cast<double>(n);
    res.mean_ttft_s = ttft / static_cast<double>(n);
    res.mean_queue_s = queue / static_cast<double>(n);
  }
  res.p50_latency_s = quantile(res.latency_s, 0.5);
  res.p90_latency_s = quantile(res.latency_s, 0.9);
  res.p99_latency_s = quantile(res.latency_s, 0.99);
  return res;
}

std::vector<SimRequest> mixed_workload(int n, double rate, double interactive, uint64_t seed) {
  // Uniforms from the raw 64-bit generator (whose sequence the standard fixes), so the
  // workload is the same with every standard library.
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
  std::vector<SimRequest> out;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    t += -std::log(uniform()) / rate;
    SimRequest r;
    r.arrival_s = t;
    if (uniform() < interactive) {
      r.prompt_tokens = 64, r.output_tokens = 16, r.slo_s = 1.5, r.task = "chat";
    } else {
      r.prompt_tokens = 512, r.output_tokens = 160, r.slo_s = 30, r.task = "summary";
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace moeflow::serve
