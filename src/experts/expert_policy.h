// The policy interface shared by the engine and the simulator (DESIGN.md, "The policy
// interface"). A policy sees events in execution order and answers two questions:
// which experts to fetch ahead (plan_prefetch) and which resident expert to give up
// when space is needed (victim). The cache tracks the bookkeeping every policy needs
// (last use, use counts, whether a prefetch was used) and passes it in the CacheView,
// so simple policies hold no state of their own.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "experts/expert_key.h"

namespace moeflow {

struct RequestInfo {
  int64_t id = 0;
  std::vector<int32_t> prompt;          // token ids
  std::vector<float> prompt_embedding;  // mean input embedding of the prompt (may be empty)
  std::string task;                     // task label, when known (traces, eMoE keywords)
};

struct PrefetchRequest {
  ExpertKey key;
  double priority = 0;  // higher is fetched first; demand loads outrank every prefetch
};
using PrefetchPlan = std::vector<PrefetchRequest>;

// One resident, unpinned expert the cache could evict.
struct CacheEntryView {
  ExpertKey key;
  uint64_t last_use = 0;     // tick of the last acquire (or of its arrival if never used)
  uint64_t loaded_at = 0;    // tick it became resident
  uint64_t uses = 0;         // acquires since the start of the run (survives eviction)
  bool prefetched_unused = false;
};

struct CacheView {
  const std::vector<CacheEntryView>* candidates = nullptr;  // never empty when victim() is called
  uint64_t tick = 0;   // the cache's logical clock (one tick per acquire)
  int32_t layer_now = 0;
  bool for_prefetch = false;  // room is being made for a prefetch, not a demand
};

class ExpertPolicy {
 public:
  virtual ~ExpertPolicy() = default;
  virtual std::string name() const = 0;
  // Prefetch requests this policy makes (false: the cache never asks plan_prefetch).
  virtual bool prefetches() const { return false; }

  // Requests join and leave; several may run at once (an engine step carries the
  // tokens of several, LayerRouting::requests names each token's). A policy keeps
  // what it learns about a running request keyed by its id, so concurrent requests
  // never overwrite each other's state (MoE-Infinity's EAMs). begin_iteration and
  // end_iteration bracket one step of every running request.
  virtual void begin_request(const RequestInfo&) {}
  virtual void begin_iteration(Phase, int64_t /*iter*/) {}
  // Router output of one layer (before any rerouting).
  virtual void routed(const LayerRouting&) {}
  // How many layers of lookahead routing this policy reads in routed()
  // (LayerRouting::lookahead: the next layers' routers applied to the layer's MoE
  // input). 0, the default: none, and the engine spends nothing on it. The engine
  // computes it live, D extra router products per layer; the simulator replays what
  // the trace recorded (possibly fewer layers, or none).
  virtual int32_t lookahead_depth() const { return 0; }
  // Whether this policy reads LayerRouting::embeddings (the embedding-layer output of
  // the step's tokens, pooled per request, with the step's first layer). false, the
  // default: the engine computes none.
  virtual bool wants_embedding() const { return false; }
  // The same embeddings as soon as the step's embedding layer has run, before any of
  // its layers (only for a policy that wants_embedding(), and only when the step has
  // some); plan_prefetch(-1, plan) is asked right after, so fetches for the step's
  // first layers overlap their dense parts (fMoE §3.2 step 1: the contexts are
  // collected "before every inference iteration"; §4.2: the semantic match guides
  // layers 1..d). routed() still carries them with the step's first layer.
  virtual void step_embeddings(const std::vector<LayerRouting::StepEmbedding>&) {}
  // How many copies are queued or running on the link when plan_prefetch is about to
  // be asked (all of them, and the prefetches among them): no copy means the link is
  // idle while the layer computes. Called right before each plan_prefetch.
  virtual void link_state(size_t /*copies_in_flight*/, size_t /*prefetches_in_flight*/) {}
  // The most new copies one plan may start (the rest of the plan is ignored): a copy
  // reserves its bytes from the moment it is queued, so a policy that wants its
  // fetches issued one at a time, as the link frees up, says so here.
  virtual size_t prefetch_limit() const { return static_cast<size_t>(-1); }
  // Seconds the policy's predictor takes on a stream of its own before a plan's
  // prefetches are known (DuoServe's prediction stream, §5.3): they start no earlier.
  // The engine runs predictors inline, so there the time is simply spent; the
  // simulator charges this instead.
  virtual double prediction_seconds() const { return 0; }
  // A cache sized to the experts in use (DuoServe's k slots, §5.1): each expert of
  // the layer gives up its slot once it has computed, and the plan's prefetches that
  // found no room are asked again then (the next layer's guesses stream into the
  // slots the layer frees).
  virtual bool frees_computed_experts() const { return false; }
  // Experts to fetch ahead, planned once the routing of `layer_now` is known (-1: at
  // the step's start, after step_embeddings).
  virtual void plan_prefetch(int32_t /*layer_now*/, PrefetchPlan&) {}
  // DuoServe's prefill (§5.2): true when `layer` streams its experts through the
  // layer protocol's two-slot pipeline instead of loading them on demand (and asking
  // plan_prefetch). `order` gets the layer's experts, the most wanted first: the
  // pipeline loads the missing needed ones in that order, and the first of layer l+1
  // that is not resident while layer l's last expert computes, before l+1's router.
  // Called for a layer after its routing is known, and for the next one before.
  virtual bool stream_order(int32_t /*layer*/, std::vector<int32_t>& /*order*/) { return false; }
  // Index into view.candidates of the expert to evict to make room for `incoming`.
  // For a prefetch (view.for_prefetch) a policy may decline with kDecline: the
  // prefetch is dropped rather than evict something worth more.
  virtual size_t victim(const CacheView& view, const ExpertKey& incoming) = 0;
  static constexpr size_t kDecline = static_cast<size_t>(-1);
  virtual void end_iteration() {}
  virtual void end_request(int64_t /*id*/) {}
  // The simulator's learning requests are over (e.g. train a predictor on what was
  // observed); the engine calls it never.
  virtual void finish_learning() {}
  // What the run should know about how the policy worked (e.g. which input stood in
  // for a signal the run lacked); the simulator prints them with its result.
  virtual std::vector<std::string> notes() const { return {}; }
  // Learned state that survives restarts (no-op for stateless policies).
  virtual void save(std::ostream&) const {}
  virtual void load(std::istream&) {}
};

}  // namespace moeflow
