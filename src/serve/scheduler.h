// Which waiting requests take the free slots (eMoE §3.5, Eq. 3, Alg. 1).
//
//   fcfs: arrival order.
//   emoe: Alg. 1. Waiting requests in order of SLO stringency (the earliest deadline,
//         arrival + SLO, first); each is admitted if the step's token limit allows its
//         prompt (line 4) and no running request S is then expected to miss its SLO
//         (line 5), S's expected latency being Eq. 3:
//             t_S = ΔE + (W + n_S · G_S) · c + r_S
//         W the prompt tokens being admitted, G_S the tokens S is still expected to
//         generate (its task's profiled mean output length minus what it generated;
//         when it overruns, 5% of the mean, as §3.5 says), n_S the running requests
//         that finish after S (S included: they share every decode step with it), c the
//         time one token adds to a step, ΔE the expert loading an admission causes, and
//         r_S the time since S arrived. A request that is skipped stays waiting; it is
//         tried again at the next admission round (every step: "whenever a new request
//         arrives or a running request completes").
//
// Deviations, each to keep the algorithm live where the paper is silent: a running
// request already expected to miss its SLO without the admission does not block it
// (nothing the scheduler does can save it); with nothing running every request is
// admissible. The task profile (mean output tokens per task) starts from options and
// learns online from completed requests.
//
// The SLO is on end-to-end latency (arrival to last token); 0 means the server default
// (SchedulerOptions::default_slo_s), and without one, no target.
// Thread safety: none; the serving loop serialises calls.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace moeflow::serve {

struct QueuedRequest {
  int64_t id = 0;
  double arrival_s = 0;  // the server's clock, seconds
  double slo_s = 0;      // end-to-end latency target; 0: the default
  int prompt_tokens = 0;
  int max_tokens = 0;
  std::string task;      // eMoE task type ("": unknown)
};

// A request holding a slot, as Eq. 3 needs it.
struct RunningRequest {
  int64_t id = 0;
  double arrival_s = 0;
  double slo_s = 0;      // 0: the default
  int max_tokens = 0;
  int64_t generated = 0;
  std::string task;
};

enum class SchedPolicy { fcfs, emoe };

struct SchedulerOptions {
  double default_slo_s = 0;       // a request's target when it gives none (0: none)
  double token_seconds = 2e-3;    // c: what one more token adds to a step (then measured)
  double expert_load_seconds = 0; // ΔE: expert loading an admission causes
  int64_t max_step_tokens = 1 << 30;  // T_max: prompt tokens admitted in one round
  double default_output_tokens = 128; // G of a task never profiled
  std::map<std::string, double> task_output_tokens;  // profiled mean output per task
};

class RequestScheduler {
 public:
  virtual ~RequestScheduler() = default;
  virtual void push(const QueuedRequest& q) = 0;
  // Takes a waiting request out (its client left); false if it is not waiting.
  virtual bool remove(int64_t id) = 0;
  virtual size_t size() const = 0;
  // The requests to start now, in order, at most `free_slots` of them; they leave the
  // queue. `running`: the requests holding slots.
  virtual std::vector<QueuedRequest> admit(double now_s, int free_slots, const std::vector<RunningRequest>& running) = 0;
  // A request finished having generated `generated` tokens (profiles its task).
  virtual void completed(const std::string& task, int64_t generated) = 0;
  // A step of `tokens` tokens took `seconds` (profiles c of Eq. 3).
  virtual void observed_step(double seconds, int64_t tokens) = 0;
};

std::unique_ptr<RequestScheduler> make_scheduler(SchedPolicy policy, const SchedulerOptions& opt);
// "fcfs" or "emoe"; throws moeflow::InputError naming the value otherwise.
SchedPolicy parse_sched_policy(std::string_view name);

}  // namespace moeflow::serve
