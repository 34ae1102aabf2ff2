#include "serve/scheduler.h"

#include <algorithm>
#include <list>

#include "base/error.h"

namespace moeflow::serve {
namespace {

// Waiting requests in arrival order; both policies pick from it.
class QueueBase : public RequestScheduler {
 public:
  void push(const QueuedRequest& q) override { q_.push_back(q); }
  bool remove(int64_t id) override {
    for (auto it = q_.begin(); it != q_.end(); ++it)
      if (it->id == id) {
        q_.erase(it);
        return true;
      }
    return false;
  }
  size_t size() const override { return q_.size(); }
  void completed(const std::string&, int64_t) override {}
  void observed_step(double, int64_t) override {}

 protected:
  std::list<QueuedRequest> q_;
};

class Fcfs final : public QueueBase {
 public:
  std::vector<QueuedRequest> admit(double, int free_slots, const std::vector<RunningRequest>&) override {
    std::vector<QueuedRequest> out;
    while (free_slots-- > 0 && !q_.empty()) {
      out.push_back(q_.front());
      q_.pop_front();
    }
    return out;
  }
};

class Emoe final : public QueueBase {
  struct Job {
    double arrival, slo, remaining;  // remaining: G_S
  };
  struct Profile {
    double mean = 0;
    int64_t n = 0;
  };

 public:
  explicit Emoe(const SchedulerOptions& o) : opt_(o) {
    for (const auto& [task, mean] : o.task_output_tokens) profile_[task] = {mean, 1};
  }

  std::vector<QueuedRequest> admit(double now, int free_slots, const std::vector<RunningRequest>& running) override {
    std::vector<QueuedRequest> out;
    if (free_slots <= 0 || q_.empty()) return out;
    // Line 2: most stringent first (earliest deadline; no SLO: last, by arrival).
    std::vector<std::list<QueuedRequest>::iterator> order;
    for (auto it = q_.begin(); it != q_.end(); ++it) order.push_back(it);
    std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) { return deadline(*a) < deadline(*b); });
    // The running set as Eq. 3 sees it, growing with each admission (line 6).
    std::vector<Job> jobs;
    for (const RunningRequest& r : running) jobs.push_back({r.arrival_s, slo(r.slo_s), remaining(r.task, r.generated)});
    int64_t admitted_tokens = 0;  // T of Alg. 1, this round
    for (auto it : order) {
      if (static_cast<int>(out.size()) == free_slots) break;
      const QueuedRequest& r = *it;
      // Line 4: the step can take the prompt (a lone prompt always fits).
      if (admitted_tokens > 0 && admitted_tokens + r.prompt_tokens >= opt_.max_step_tokens) continue;
      // Line 5: no running request pushed past its SLO.
      if (!harmless(jobs, r.prompt_tokens, now)) continue;
      jobs.push_back({r.arrival_s, slo(r.slo_s), remaining(r.task, 0)});
      admitted_tokens += r.prompt_tokens;
      out.push_back(r);
    }
    for (const QueuedRequest& r : out) remove(r.id);
    return out;
  }

  // c as a moving average of the measured seconds per token of a step.
  void observed_step(double seconds, int64_t tokens) override {
    if (tokens <= 0 || !(seconds >= 0)) return;
    opt_.token_seconds = 0.9 * opt_.token_seconds + 0.1 * seconds / static_cast<double>(tokens);
  }

  void completed(const std::string& task, int64_t generated) override {
    Profile& p = profile_[task];
    p.mean = (p.mean * static_cast<double>(p.n) + static_cast<double>(generated)) / static_cast<double>(p.n + 1);
    ++p.n;
  }

  // Line 5 with Eq. 3: no job expected to meet its SLO misses it with W more prompt
  // tokens in the step.
  bool harmless(const std::vector<Job>& jobs, int64_t W, double now) const {
    for (const Job& s : jobs) {
      if (s.slo <= 0) continue;
      const double with = expected_latency(jobs, s, W, now);
      const double without = expected_latency(jobs, s, 0, now) - opt_.expert_load_seconds;
      if (with >= s.slo && without < s.slo) return false;
    }
    return true;
  }

 private:
  double slo(double s) const { return s > 0 ? s : opt_.default_slo_s; }
  double deadline(const QueuedRequest& r) const {
    const double s = slo(r.slo_s);
    return s > 0 ? r.arrival_s + s : 1e300 + r.arrival_s;
  }
  double mean_output(const std::string& task) const {
    const auto it = profile_.find(task);
    return it != profile_.end() && it->second.n > 0 ? it->second.mean : opt_.default_output_tokens;
  }
  // G_S: the profiled output length left; 5% of it once the request overruns (§3.5).
  double remaining(const std::string& task, int64_t generated) const {
    const double g = mean_output(task);
    const double left = g - static_cast<double>(generated);
    return left > 0 ? left : 0.05 * g;
  }
  double expected_latency(const std::vector<Job>& jobs, const Job& s, int64_t W, double now) const {
    int64_t n = 0;  // n_S: jobs finishing no earlier than S (S included)
    for (const Job& o : jobs) n += o.remaining >= s.remaining;
    return opt_.expert_load_seconds + (static_cast<double>(W) + static_cast<double>(n) * s.remaining) * opt_.token_seconds +
           (now - s.arrival);
  }

  SchedulerOptions opt_;
  std::map<std::string, Profile> profile_;
};

}  // namespace

std::unique_ptr<RequestScheduler> make_scheduler(SchedPolicy policy, const SchedulerOptions& opt) {
  if (policy == SchedPolicy::emoe) return std::make_unique<Emoe>(opt);
  return std::make_unique<Fcfs>();
}

SchedPolicy parse_sched_policy(std::string_view name) {
  if (name == "fcfs") return SchedPolicy::fcfs;
  if (name == "emoe") return SchedPolicy::emoe;
  throw InputError("scheduler '" + std::string(name) + "': expected fcfs or emoe");
}

}  // namespace moeflow::serve
