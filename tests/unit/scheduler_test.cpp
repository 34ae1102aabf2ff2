// The request schedulers (serve/scheduler.h) by hand, and eMoE against FCFS on a
// replayed mixed workload in the deterministic serving model (serve/serving_sim.h).
#include <gtest/gtest.h>

#include <cstdio>

#include "base/error.h"
#include "serve/scheduler.h"
#include "serve/serving_sim.h"

namespace moeflow::serve {
namespace {

std::vector<int64_t> ids(const std::vector<QueuedRequest>& v) {
  std::vector<int64_t> out;
  for (const QueuedRequest& q : v) out.push_back(q.id);
  return out;
}

TEST(Scheduler, FcfsAdmitsInArrivalOrderUpToTheFreeSlots) {
  auto s = make_scheduler(SchedPolicy::fcfs, {});
  for (int64_t i = 1; i <= 4; ++i) s->push({i, static_cast<double>(i), 10.0 / static_cast<double>(i), 8, 8, ""});
  EXPECT_TRUE(s->remove(2));
  EXPECT_FALSE(s->remove(2));
  EXPECT_EQ(ids(s->admit(5, 2, {})), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(s->size(), 1u);
  EXPECT_TRUE(s->admit(5, 0, {}).empty());
  EXPECT_EQ(ids(s->admit(5, 3, {})), (std::vector<int64_t>{4}));
}

SchedulerOptions emoe_options() {
  SchedulerOptions o;
  o.token_seconds = 0.01;
  o.task_output_tokens = {{"chat", 10}};
  return o;
}

TEST(Scheduler, EmoeTakesTheEarliestDeadlineFirst) {
  auto s = make_scheduler(SchedPolicy::emoe, emoe_options());
  s->push({1, 0.0, 10.0, 8, 8, "chat"});  // deadline 10
  s->push({2, 1.0, 2.0, 8, 8, "chat"});   // deadline 3
  s->push({3, 2.0, 0.0, 8, 8, "chat"});   // no SLO: last
  EXPECT_EQ(ids(s->admit(2.5, 3, {})), (std::vector<int64_t>{2, 1, 3}));
}

// Eq. 3 by hand: S arrived at 0 with a 1 s SLO and is expected to generate 10 more
// tokens (its task's profile), alone in the engine (n_S = 1), c = 0.01 s, at 0.5 s:
// without an admission t_S = 10 * 0.01 + 0.5 = 0.6 s. A 100-token prompt makes it
// (100 + 10) * 0.01 + 0.5 = 1.6 s: refused. A 20-token one: 0.8 s: admitted.
TEST(Scheduler, EmoeRefusesWhatWouldPushARunningRequestPastItsSlo) {
  const std::vector<RunningRequest> running = {{7, 0.0, 1.0, 64, 0, "chat"}};
  auto s = make_scheduler(SchedPolicy::emoe, emoe_options());
  s->push({1, 0.4, 60.0, 100, 8, "chat"});
  EXPECT_TRUE(s->admit(0.5, 4, running).empty());
  EXPECT_EQ(s->size(), 1u) << "a refused request keeps waiting";
  s->push({2, 0.45, 60.0, 20, 8, "chat"});
  EXPECT_EQ(ids(s->admit(0.5, 4, running)), (std::vector<int64_t>{2})) << "a later, smaller one goes ahead";
  // At 2 s S has missed its SLO whatever happens: it no longer holds anyone back.
  EXPECT_EQ(ids(s->admit(2.0, 4, running)), (std::vector<int64_t>{1}));
  // Nothing running: everything is admissible.
  s->push({3, 3.0, 0.5, 5000, 8, "chat"});
  EXPECT_EQ(ids(s->admit(3.0, 4, {})), (std::vector<int64_t>{3}));
}

TEST(Scheduler, EmoeKeepsToTheStepTokenLimitAndLearnsOutputLengths) {
  SchedulerOptions o = emoe_options();
  o.max_step_tokens = 100;
  auto s = make_scheduler(SchedPolicy::emoe, o);
  s->push({1, 0.0, 0.0, 60, 8, ""});
  s->push({2, 0.0, 0.0, 60, 8, ""});
  s->push({3, 0.0, 0.0, 30, 8, ""});
  EXPECT_EQ(ids(s->admit(0, 4, {})), (std::vector<int64_t>{1, 3})) << "60 + 60 >= T_max; 60 + 30 fits";
  // The profile of "chat" (10 tokens) becomes the mean with each completion: after a
  // 30-token answer, (10 + 30) / 2 = 20, so S (5 generated) has 15 left: 0.15 + 0.5
  // = 0.65 s without, (30 + 15) * 0.01 + 0.5 = 0.95 s with a 30-token prompt (admitted),
  // (40 + 15) * 0.01 + 0.5 = 1.05 s with a 40-token one (refused).
  auto e = make_scheduler(SchedPolicy::emoe, emoe_options());
  e->completed("chat", 30);
  const std::vector<RunningRequest> running = {{7, 0.0, 1.0, 64, 5, "chat"}};
  e->push({1, 0.1, 60.0, 40, 8, "chat"});
  EXPECT_TRUE(e->admit(0.5, 4, running).empty());
  e->push({2, 0.2, 60.0, 30, 8, "chat"});
  EXPECT_EQ(ids(e->admit(0.5, 4, running)), (std::vector<int64_t>{2}));
}

TEST(Scheduler, ParsesItsName) {
  EXPECT_EQ(parse_sched_policy("fcfs"), SchedPolicy::fcfs);
  EXPECT_EQ(parse_sched_policy("emoe"), SchedPolicy::emoe);
  EXPECT_THROW(parse_sched_policy("edf"), InputError);
}

// The test: on a replayed arrival trace with mixed SLOs, on a simulated clock,
// eMoE's order meets more SLOs than arrival order, at every load of the sweep.
TEST(ServingSim, EmoeMeetsMoreSlosThanFcfsOnAMixedWorkload) {
  for (double rate : {0.8, 1.2, 1.6}) {
    const std::vector<SimRequest> w = mixed_workload(300, rate, 0.6, 42);
    ServingSimOptions o;
    o.slots = 4;
    o.sched_options.task_output_tokens = {{"chat", 16}, {"summary", 160}};
    o.sched = SchedPolicy::fcfs;
    const ServingSimResult fcfs = simulate_serving(w, o);
    o.sched = SchedPolicy::emoe;
    const ServingSimResult emoe = simulate_serving(w, o);
    std::printf("  rate %.1f/s: SLOs met fcfs %lld/%lld, emoe %lld/%lld; mean latency %.2f s vs %.2f s\n", rate,
                static_cast<long long>(fcfs.slo_met), static_cast<long long>(fcfs.with_slo),
                static_cast<long long>(emoe.slo_met), static_cast<long long>(emoe.with_slo), fcfs.mean_latency_s,
                emoe.mean_latency_s);
    EXPECT_GT(emoe.slo_met, fcfs.slo_met) << "rate " << rate;
    EXPECT_EQ(fcfs.requests, 300);
  }
}

// The model by hand: one slot, two requests. A (t=0, prompt 10, 3 tokens): its
// admission step takes 0.01 + 0.002 * 10 = 0.03 s and gives its first token, then two
// decode steps of 0.012 s: done at 0.054 s. B arrives at 0.01 and waits for the slot:
// admitted at 0.054, 0.03 + 0.012 s later it has its 2 tokens: latency 0.096 - 0.01.
TEST(ServingSim, StepTimesByHand) {
  ServingSimOptions o;
  o.slots = 1;
  const ServingSimResult r = simulate_serving({{0.0, 10, 3, 0, ""}, {0.01, 10, 2, 0, ""}}, o);
  EXPECT_NEAR(r.latency_s[0], 0.054, 1e-12);
  EXPECT_NEAR(r.latency_s[1], 0.054 + 0.03 + 0.012 - 0.01, 1e-12);
  EXPECT_NEAR(r.makespan_s, 0.096, 1e-12);
}

}  // namespace
}  // namespace moeflow::serve
