// eMoE's task-aware expert loading (emoe.txt §3.2-3.4): the expert predictor runs only
// every p prompts (§3.3); it predicts each layer's routing frequency either for all
// layers from the previous prompt (eMoE-A) or layer by layer from the layer before
// (eMoE-L); the experts to hold are the top-L per layer by Eq. 2's expected tokens,
// N_i = (ΣW_j + T·W_o)·s·f_i, with s the (task, layer) sensitivity. eMoE reroutes
// misses (lossy); that is the engine's/simulator's --on-miss, not this policy's.
//
// Substitutes, where the paper relies on what a trace does not carry:
// - the predictor is not a transformer (XLNet): eMoE-A reuses the last prompt of the
//   same task type (the paper's Eq. 1 input), eMoE-L chains a first-order transition
//   table P(expert at l | expert at l-1) counted from observed tokens;
// - the sensitivity s of Eq. 2 is a number in [0, 1] per (task, layer) from the task
//   profiles ("sensitivity", derived from a labelled routing trace by
//   `moeflow trace sensitivity`, see emoe_sensitivity.h) instead of the paper's binary
//   s from accuracy under random routing, which needs the model and a labelled data
//   set; "insensitive_layers" still forces s = 0 (the paper's binary marking). A task
//   or layer without a value takes the mean of the profiled tasks at that layer, else 1;
// - L (§3.4: "set based on the memory budget") is derived from the cache budget when
//   not given: every layer first gets its top_k best experts (one token's experts,
//   so that rerouting always has a resident choice), then the rest of the budget goes
//   to the largest N_i of any layer. N_i carries s, so the budget is divided over the
//   layers by sensitivity-weighted expected tokens: the paper's objective, the most
//   correctly routed tokens, with insensitive layers giving way to sensitive ones.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "experts/expert_policy.h"
#include "policy/policy_factory.h"

namespace moeflow {

struct Trace;

// One task type of §3.2.1: its keywords, and its sensitivity to routing accuracy (§3.4).
struct TaskProfile {
  std::string name;
  std::vector<std::string> keywords;
  std::vector<int32_t> insensitive_layers;  // s = 0 there (the paper's binary s)
  std::vector<double> sensitivity = {};     // per layer, in [0, 1]; empty: not profiled
};
// Reads {"tasks":[{"name","keywords":[...],"insensitive_layers":[...]?,
// "sensitivity":[...]?}]}. Every non-empty sensitivity row has the same length.
// Throws InputError naming the file and field.
std::vector<TaskProfile> load_task_profiles(const std::string& path);
// profiles/tasks.json of the source tree (MOEFLOW_PROFILES overrides the folder).
std::string default_task_profiles_path();
// The profiles of `path` (an InputError if it is bad), or with an empty path those of
// default_task_profiles_path() when that file exists, else none.
std::vector<TaskProfile> task_profiles_or_default(const std::string& path);
// §3.2.1: the task whose keywords occur most often (case-insensitive); ties go to the
// earlier profile; "" when no keyword occurs.
std::string classify_task(const std::string& text, const std::vector<TaskProfile>& profiles);

enum class EmoeVariant { AllLayer, LayerByLayer };  // eMoE-A, eMoE-L

struct EmoeOptions {
  EmoeVariant variant = EmoeVariant::AllLayer;
  int32_t period = 40;  // p: prompts between predictor calls (§3.3; 40 keeps perplexity, Fig. 10)
  int32_t top_l = 0;    // L experts held per layer (the user's L); 0: derived from budget_bytes
  uint64_t budget_bytes = 0;  // the cache budget for deriving L; 0 (and top_l 0): every expert with expected tokens
  std::vector<TaskProfile> tasks = {};
  // Prompt text for keyword matching when RequestInfo.task is empty (the engine has a tokenizer; traces have labels).
  std::function<std::string(const std::vector<int32_t>&)> detokenize = {};
};

class EmoePolicy : public ExpertPolicy {
 public:
  EmoePolicy(const ExpertGeometry& g, EmoeOptions opt = {});
  std::string name() const override { return "emoe"; }
  bool prefetches() const override { return true; }

  void begin_request(const RequestInfo& info) override;
  void begin_iteration(Phase phase, int64_t iter) override;
  void routed(const LayerRouting& r) override;
  void end_iteration() override;
  void plan_prefetch(int32_t layer_now, PrefetchPlan& plan) override;
  size_t victim(const CacheView& view, const ExpertKey& incoming) override;
  void end_request(int64_t id) override;
  void save(std::ostream& out) const override;
  void load(std::istream& in) override;

  // The current prediction: f_i, the predicted routing frequency (rows sum to 1), and
  // N_i of Eq. 2; [n_layer * n_expert], empty before the first prediction.
  const std::vector<double>& frequency() const { return freq_; }
  const std::vector<double>& expected_tokens() const { return expected_; }
  bool predicted_this_request() const { return predicted_now_; }
  // The task of the request that began last.
  const std::string& task() const { return task_; }
  // L of each layer in the current prediction: how many of its experts are held.
  const std::vector<int32_t>& held_per_layer() const { return top_l_; }
  bool held(const ExpertKey& k) const { return !held_.empty() && held_[at(k.layer, k.expert)]; }
  // s of Eq. 2 for `task` at `layer` (see the header comment for the fallbacks).
  double sensitivity(const std::string& task, int32_t layer) const;

 private:
  struct TaskStats {
    std::vector<uint64_t> last;  // routing counts of the task's last prompt, [n_layer * n_expert]
    uint64_t requests = 0, prompt_tokens = 0, generated = 0;
  };
  void predict(const RequestInfo& info);
  void choose_held();
  size_t at(int32_t layer, int32_t expert) const {
    return static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) + static_cast<size_t>(expert);
  }

  int32_t n_layer_, n_expert_, top_k_;
  std::vector<uint64_t> bytes_;  // per expert, for fitting the budget
  EmoeOptions opt_;
  // Learned state (saved).
  std::map<std::string, TaskStats> stats_;
  std::vector<uint64_t> last_any_;     // the previous prompt, whatever its task
  std::vector<uint64_t> transitions_;  // [layer][from][to]: tokens routed to `from` at layer-1 and `to` at layer
  int64_t since_prediction_ = 0;
  std::vector<double> freq_, expected_;
  std::vector<char> held_;      // the top-L set of every layer (derived from expected_)
  std::vector<int32_t> top_l_;  // its size per layer
  // A running request: what it routes is its own (several run at once in the engine).
  struct Running {
    std::string task;
    std::vector<uint64_t> cur;  // its routing counts, [n_layer * n_expert]
    uint64_t prompt = 0, generated = 0;
    int64_t iterations = 0, tokens = 0;  // ended iterations; tokens of this step
    bool in_step = false;
    LayerRouting prev;  // its tokens at the layer before, to pair them across layers
  };
  Running& running(int64_t id);
  // Counts one request's tokens of a layer (its rows of the step's routing).
  void observe(Running& run, const LayerRouting& r);

  std::map<int64_t, Running> running_;
  int64_t last_request_ = 0;  // tokens of a routing without request ids belong to it
  std::string task_;          // the last begun request's
  bool predicted_now_ = false, planned_ = false, decoding_ = false;
  LayerRouting sub_;          // scratch: one request's rows of a routing
};

// eMoE's predictor accuracy (emoe.txt Table 2): `learn` is observed first; then for each
// request of `measure` the prediction made for it (at the period's schedule) is compared
// with its actual routing: a (token, layer) slot counts as right when its routed expert
// is among the layer's top_k predicted experts. Unpredicted requests are counted apart.
struct EmoeAccuracy {
  int64_t slots = 0, right = 0;
  int64_t requests = 0, predicted_requests = 0;
  double accuracy() const { return slots ? static_cast<double>(right) / static_cast<double>(slots) : 0; }
};
EmoeAccuracy emoe_predictor_accuracy(const Trace& learn, const Trace& measure, EmoeVariant variant, int32_t period = 40);

}  // namespace moeflow

namespace moeflow {
// "all-layer" (also "" and "A") or "layer-by-layer" ("L"); throws InputError naming the value.
EmoeVariant parse_emoe_variant(const std::string& s);
// For the policy table: task profiles from opt.tasks_path (empty: profiles/tasks.json if
// present), opt.emoe_variant, L from opt.emoe_top_l or opt.budget_bytes. A sensitivity
// table made for another layer count is an error in a file the user named, and is
// dropped (keywords kept) from the default file.
std::unique_ptr<ExpertPolicy> make_emoe_policy(const ExpertGeometry& g, const PolicyOptions& opt);
}  // namespace moeflow
