#include "policy/emoe.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>

#include "base/error.h"
#include "base/input_file.h"
#include "format/trace.h"

namespace moeflow {

namespace {

constexpr const char* kMagic = "moeflow-emoe";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

size_t count_of(const std::string& hay, const std::string& needle) {
  if (needle.empty()) return 0;
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

// Rows of one layer scaled to sum 1 (all zero stays zero).
void normalise(double* row, int32_t n) {
  const double s = std::accumulate(row, row + n, 0.0);
  if (s > 0)
    for (int32_t i = 0; i < n; ++i) row[i] /= s;
}

bool all_zero(const std::vector<uint64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](uint64_t x) { return x == 0; });
}

}  // namespace

std::vector<TaskProfile> load_task_profiles(const std::string& path) {
  std::ifstream in = open_input_file(path, "task profiles");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path + ": not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("tasks") || !j["tasks"].is_array()) throw InputError(path + ": expected {\"tasks\": [...]}");
  std::vector<TaskProfile> out;
  size_t layers = 0;  // of the first sensitivity row
  for (size_t i = 0; i < j["tasks"].size(); ++i) {
    const auto& t = j["tasks"][i];
    const std::string where = path + ": tasks[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) throw InputError(where + ".name: missing or not a string");
    TaskProfile p;
    p.name = t["name"].get<std::string>();
    if (p.name.empty()) throw InputError(where + ".name: empty");
    for (const TaskProfile& earlier : out)
      if (earlier.name == p.name) throw InputError(where + ".name: '" + p.name + "' names an earlier task again");
    if (!t.contains("keywords") || !t["keywords"].is_array()) throw InputError(where + ".keywords: missing or not an array");
    for (const auto& k : t["keywords"]) {
      if (!k.is_string()) throw InputError(where + ".keywords: not a string");
      // An empty keyword is in every prompt: its task would win every detection.
      if (k.get<std::string>().empty()) throw InputError(where + ".keywords: an empty keyword matches every prompt");
      p.keywords.push_back(lower(k.get<std::string>()));
    }
    if (t.contains("insensitive_layers")) {
      if (!t["insensitive_layers"].is_array()) throw InputError(where + ".insensitive_layers: not an array");
      for (const auto& l : t["insensitive_layers"]) {
        const bool index = l.is_number_unsigned() ? l.get<uint64_t>() < 1024
                                                  : l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() < 1024;
        if (!index)
          throw InputError(where + ".insensitive_layers: " + l.dump() + " is not a layer index (0..1023)");
        p.insensitive_layers.push_back(l.get<int32_t>());
      }
    }
    if (t.contains("sensitivity")) {
      if (!t["sensitivity"].is_array()) throw InputError(where + ".sensitivity: not an array");
      for (const auto& v : t["sensitivity"]) {
        if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= 1))
          throw InputError(where + ".sensitivity: " + v.dump() + " is not a number in [0, 1]");
        p.sensitivity.push_back(v.get<double>());
      }
      if (!p.sensitivity.empty() && layers && p.sensitivity.size() != layers)
        throw InputError(where + ".sensitivity: " + std::to_string(p.sensitivity.size()) + " layers, an earlier task has " +
                         std::to_string(layers));
      if (!layers) layers = p.sensitivity.size();
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string default_task_profiles_path() {
  if (const char* env = std::getenv("MOEFLOW_PROFILES"); env && *env) return std::string(env) + "/tasks.json";
#ifdef MOEFLOW_SOURCE_DIR
  return MOEFLOW_SOURCE_DIR "/profiles/tasks.json";
#else
  return "profiles/tasks.json";
#endif
}

std::vector<TaskProfile> task_profiles_or_default(const std::string& path) {
  if (!path.empty()) return load_task_profiles(path);
  const std::string def = default_task_profiles_path();
  return std::filesystem::exists(def) ? load_task_profiles(def) : std::vector<TaskProfile>{};
}

std::string classify_task(const std::string& text, const std::vector<TaskProfile>& profiles) {
  const std::string t = lower(text);
  std::string best;
  size_t best_n = 0;
  for (const TaskProfile& p : profiles) {
    size_t n = 0;
    for (const std::string& k : p.keywords) n += count_of(t, k);
    if (n > best_n) best_n = n, best = p.name;
  }
  return best;
}

EmoePolicy::EmoePolicy(const ExpertGeometry& g, EmoeOptions opt)
    : n_layer_(g.n_layer), n_expert_(g.n_expert), top_k_(g.top_k), bytes_(g.bytes), opt_(std::move(opt)) {
  opt_.period = std::max(opt_.period, 1);
  opt_.top_l = std::max(opt_.top_l, 0);
  const size_t n = static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_);
  bytes_.resize(n, 1);
  last_any_.assign(n, 0);
  transitions_.assign(n * static_cast<size_t>(n_expert_), 0);
}

double EmoePolicy::sensitivity(const std::string& task, int32_t layer) const {
  for (const TaskProfile& p : opt_.tasks) {
    if (p.name != task) continue;
    if (std::find(p.insensitive_layers.begin(), p.insensitive_layers.end(), layer) != p.insensitive_layers.end()) return 0;
    if (layer >= 0 && static_cast<size_t>(layer) < p.sensitivity.size()) return p.sensitivity[static_cast<size_t>(layer)];
  }
  // Not profiled (a task without a table, or a label the profiles do not know): the
  // model's typical sensitivity at this layer, so the layer keeps its relative weight.
  double sum = 0;
  int n = 0;
  for (const TaskProfile& p : opt_.tasks)
    if (layer >= 0 && static_cast<size_t>(layer) < p.sensitivity.size()) sum += p.sensitivity[static_cast<size_t>(layer)], ++n;
  return n ? sum / n : 1;
}

EmoePolicy::Running& EmoePolicy::running(int64_t id) {
  auto [it, fresh] = running_.try_emplace(id);
  if (fresh) {
    it->second.cur.assign(static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_), 0);
    it->second.prev.layer = -2;
  }
  return it->second;
}

void EmoePolicy::begin_request(const RequestInfo& info) {
  task_ = info.task;
  if (task_.empty() && opt_.detokenize && !opt_.tasks.empty()) task_ = classify_task(opt_.detokenize(info.prompt), opt_.tasks);
  running_.erase(info.id);
  running(info.id).task = task_;
  last_request_ = info.id;
  predicted_now_ = false;
  // §3.3: the predictor runs for the first prompt that has a history, then every p
  // prompts; in between the experts it chose stay loaded: the set is issued when the
  // predictor runs, not again for each request (demand loads may push some of it out
  // until the next prediction, as they do in the paper). (The paper's first prompt,
  // with no history, runs with everything loaded: here, plain demand loading.)
  if (!all_zero(last_any_) && (freq_.empty() || since_prediction_ >= opt_.period)) {
    predict(info);
    predicted_now_ = true;
    planned_ = false;
    since_prediction_ = 0;
  }
  ++since_prediction_;
}

void EmoePolicy::predict(const RequestInfo& info) {
  const auto it = stats_.find(task_);
  const bool known = it != stats_.end() && !all_zero(it->second.last);
  const std::vector<uint64_t>& src = known ? it->second.last : last_any_;
  const size_t n = src.size();
  std::vector<double> base(n);
  for (size_t i = 0; i < n; ++i) base[i] = static_cast<double>(src[i]);
  for (int32_t l = 0; l < n_layer_; ++l) normalise(&base[at(l, 0)], n_expert_);
  freq_ = base;  // eMoE-A (Eq. 1): every layer from the previous prompt
  if (opt_.variant == EmoeVariant::LayerByLayer) {
    // eMoE-L: e_i = f(e_{i-1}), the first layer from the previous prompt's first layer.
    for (int32_t l = 1; l < n_layer_; ++l) {
      double* row = &freq_[at(l, 0)];
      std::fill(row, row + n_expert_, 0.0);
      for (int32_t a = 0; a < n_expert_; ++a) {
        const uint64_t* t = &transitions_[at(l, a) * static_cast<size_t>(n_expert_)];
        const double total = static_cast<double>(std::accumulate(t, t + n_expert_, uint64_t{0}));
        if (total > 0)
          for (int32_t b = 0; b < n_expert_; ++b) row[b] += freq_[at(l - 1, a)] * static_cast<double>(t[b]) / total;
      }
      normalise(row, n_expert_);
      if (std::all_of(row, row + n_expert_, [](double x) { return x == 0; })) std::copy_n(&base[at(l, 0)], n_expert_, row);
    }
  }
  // Eq. 2: N_i = (ΣW_j + T·W_o)·s·f_i over the batch of T requests running now (this
  // one and those already in flight), W_j their prompts' tokens, W_o the task's mean
  // output length so far. (A factor common to every expert: it scales N, the choice of
  // the held set depends on s·f alone.)
  uint64_t reqs = 0, prompt = 0, gen = 0;
  for (const auto& [name, s] : stats_)
    if (!known || name == task_) reqs += s.requests, prompt += s.prompt_tokens, gen += s.generated;
  const double mean_prompt = reqs ? static_cast<double>(prompt) / static_cast<double>(reqs) : 1.0;
  double w = info.prompt.empty() ? mean_prompt : static_cast<double>(info.prompt.size());
  double batch = 1;
  for (const auto& [id, run] : running_)
    if (id != info.id) w += run.prompt > 0 ? static_cast<double>(run.prompt) : mean_prompt, batch += 1;
  const double wo = batch * (reqs ? static_cast<double>(gen) / static_cast<double>(reqs) : 0.0);
  expected_.assign(n, 0);
  for (int32_t l = 0; l < n_layer_; ++l) {
    const double s = sensitivity(task_, l);
    for (int32_t e = 0; e < n_expert_; ++e) expected_[at(l, e)] = (w + wo) * s * freq_[at(l, e)];
  }
  choose_held();
}

// §3.4's top-L per layer. With the user's L: each layer's L best by N_i. Without it,
// from the budget: each layer's top_k best first (rank by rank, so a budget below
// n_layer·top_k spreads evenly), then the largest N_i anywhere while bytes remain.
// Experts with N_i = 0 (unpredicted, or s = 0) are never held.
void EmoePolicy::choose_held() {
  const size_t n = expected_.size();
  held_.assign(n, 0);
  top_l_.assign(static_cast<size_t>(n_layer_), 0);
  if (n == 0) return;
  std::vector<std::vector<int32_t>> order(static_cast<size_t>(n_layer_));
  for (int32_t l = 0; l < n_layer_; ++l) {
    auto& o = order[static_cast<size_t>(l)];
    o.resize(static_cast<size_t>(n_expert_));
    std::iota(o.begin(), o.end(), 0);
    std::stable_sort(o.begin(), o.end(), [&](int32_t a, int32_t b) { return expected_[at(l, a)] > expected_[at(l, b)]; });
  }
  const bool from_budget = opt_.top_l == 0 && opt_.budget_bytes > 0;
  uint64_t left = opt_.budget_bytes;
  auto take = [&](int32_t l, int32_t e) {
    const size_t i = at(l, e);
    if (held_[i] || expected_[i] <= 0) return;
    if (from_budget) {
      if (bytes_[i] > left) return;
      left -= bytes_[i];
    }
    held_[i] = 1;
    ++top_l_[static_cast<size_t>(l)];
  };
  const int32_t first = from_budget ? std::min(top_k_, n_expert_) : opt_.top_l > 0 ? std::min(opt_.top_l, n_expert_) : n_expert_;
  for (int32_t r = 0; r < first; ++r)
    for (int32_t l = 0; l < n_layer_; ++l) take(l, order[static_cast<size_t>(l)][static_cast<size_t>(r)]);
  if (!from_budget) return;
  std::vector<size_t> rest(n);
  std::iota(rest.begin(), rest.end(), size_t{0});
  std::stable_sort(rest.begin(), rest.end(), [&](size_t a, size_t b) { return expected_[a] > expected_[b]; });
  for (size_t i : rest) take(static_cast<int32_t>(i / static_cast<size_t>(n_expert_)), static_cast<int32_t>(i % static_cast<size_t>(n_expert_)));
}

void EmoePolicy::begin_iteration(Phase phase, int64_t) {
  decoding_ = phase == Phase::Decode;
  for (auto& [id, r] : running_) {
    r.prev.layer = -2;
    r.tokens = 0;
    r.in_step = false;
  }
}

void EmoePolicy::end_iteration() {
  for (auto& [id, r] : running_)
    if (r.in_step) ++r.iterations;
}

void EmoePolicy::routed(const LayerRouting& r) {
  if (r.layer < 0 || r.layer >= n_layer_ || r.top_k <= 0) return;
  if (r.requests.empty()) return observe(running(last_request_), r);
  // Each request's rows (contiguous in an engine step) as a routing of their own.
  const int64_t K = r.top_k;
  for (int64_t t = 0; t < r.n_tok;) {
    int64_t e = t + 1;
    while (e < r.n_tok && r.requests[static_cast<size_t>(e)] == r.requests[static_cast<size_t>(t)]) ++e;
    sub_.layer = r.layer;
    sub_.n_tok = e - t;
    sub_.n_expert = r.n_expert;
    sub_.top_k = K;
    sub_.experts.assign(r.experts.begin() + t * K, r.experts.begin() + e * K);
    observe(running(r.requests[static_cast<size_t>(t)]), sub_);
    t = e;
  }
}

void EmoePolicy::observe(Running& run, const LayerRouting& r) {
  const int32_t layer = static_cast<int32_t>(r.layer);
  for (int32_t e : r.experts)
    if (e >= 0 && e < n_expert_) ++run.cur[at(layer, e)];
  if (!run.in_step) run.tokens = r.n_tok;
  run.in_step = true;
  // A request decodes in a decode step, and in a prefill step unless this is its prompt
  // (its first iteration, or a chunk of several tokens).
  const bool decoding = decoding_ || (run.iterations > 0 && run.tokens == 1);
  if (layer == 0) (decoding ? run.generated : run.prompt) += static_cast<uint64_t>(r.n_tok);
  // eMoE-L's transition counts pair each token's experts at layer-1 and layer.
  LayerRouting& prev_ = run.prev;
  if (prev_.layer == r.layer - 1 && prev_.n_tok == r.n_tok && prev_.experts.size() == r.experts.size()) {
    const size_t k_prev = static_cast<size_t>(prev_.top_k), k = static_cast<size_t>(r.top_k);
    for (size_t t = 0; t < static_cast<size_t>(r.n_tok); ++t)
      for (size_t i = 0; i < k_prev; ++i)
        for (size_t j = 0; j < k; ++j) {
          const int32_t a = prev_.experts[t * k_prev + i], b = r.experts[t * k + j];
          if (a >= 0 && a < n_expert_ && b >= 0 && b < n_expert_)
            ++transitions_[at(layer, a) * static_cast<size_t>(n_expert_) + static_cast<size_t>(b)];
        }
  }
  prev_.layer = r.layer;
  prev_.n_tok = r.n_tok;
  prev_.top_k = r.top_k;
  prev_.experts = r.experts;
}

// §3.4: the held (top-L) experts of every layer, by N_i. Issued once per prediction (§3.3:
// the set the predictor chose is loaded before the prompt runs, then stays until the
// next prediction). Ranks interleave across layers (every layer's best,
// then every layer's second, ...) so that a budget too small for L per layer still gets
// an even top-L' everywhere; within a rank the next layers come first.
void EmoePolicy::plan_prefetch(int32_t layer_now, PrefetchPlan& plan) {
  if (expected_.empty() || planned_) return;
  planned_ = true;
  const double scale = static_cast<double>(n_expert_ + 1) * static_cast<double>(n_layer_);
  std::vector<int32_t> order(static_cast<size_t>(n_expert_));
  for (int32_t l = 0; l < n_layer_; ++l) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return expected_[at(l, a)] > expected_[at(l, b)]; });
    const int32_t dist = ((l - layer_now - 1) % n_layer_ + n_layer_) % n_layer_;
    for (int32_t r = 0; r < n_expert_; ++r) {
      if (!held_[at(l, order[static_cast<size_t>(r)])]) continue;
      const double pri = static_cast<double>(n_expert_ - r) * n_layer_ + static_cast<double>(n_layer_ - dist);
      plan.push_back({{l, order[static_cast<size_t>(r)]}, pri / scale});
    }
  }
}

// Experts outside the held set (the paper moves them back to the CPU) go first, then
// the fewest expected tokens; ties, and everything before the first prediction, by LRU.
size_t EmoePolicy::victim(const CacheView& view, const ExpertKey&) {
  const auto& c = *view.candidates;
  auto score = [&](const ExpertKey& k) {
    if (held_.empty() || k.layer < 0 || k.layer >= n_layer_ || k.expert < 0 || k.expert >= n_expert_) return 0.0;
    return held_[at(k.layer, k.expert)] ? expected_[at(k.layer, k.expert)] : 0.0;
  };
  size_t best = 0;
  for (size_t i = 1; i < c.size(); ++i) {
    const double a = score(c[i].key), b = score(c[best].key);
    if (a != b ? a < b : c[i].last_use != c[best].last_use ? c[i].last_use < c[best].last_use : c[i].key < c[best].key) best = i;
  }
  return best;
}

void EmoePolicy::end_request(int64_t id) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  Running& r = it->second;
  if (!all_zero(r.cur)) {
    TaskStats& s = stats_[r.task];
    s.last = r.cur;
    ++s.requests;
    s.prompt_tokens += r.prompt;
    s.generated += r.generated;
    last_any_ = r.cur;
  }
  running_.erase(it);
}

// Text; doubles with 17 significant digits, which read back to the same value, so a
// save of a load is byte-identical.
void EmoePolicy::save(std::ostream& out) const {
  auto put = [&out](const auto& v) {
    out << v.size();
    for (const auto& x : v) out << ' ' << x;
    out << '\n';
  };
  const auto old = out.precision(std::numeric_limits<double>::max_digits10);
  out << kMagic << " 1\n" << n_layer_ << ' ' << n_expert_ << ' ' << since_prediction_ << '\n';
  put(freq_);
  put(expected_);
  put(last_any_);
  put(transitions_);
  out << stats_.size() << '\n';
  for (const auto& [name, s] : stats_) {
    out << name.size() << ' ' << name << ' ' << s.requests << ' ' << s.prompt_tokens << ' ' << s.generated << '\n';
    put(s.last);
  }
  out.precision(old);
}

void EmoePolicy::load(std::istream& in) {
  const std::string what = "emoe state: ";
  const size_t n = static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_);
  auto get = [&](auto& v, std::initializer_list<size_t> sizes, const char* field) {
    size_t size = 0;
    if (!(in >> size) || std::find(sizes.begin(), sizes.end(), size) == sizes.end())
      throw InputError(what + field + ": bad length");
    v.resize(size);
    for (size_t i = 0; i < v.size(); ++i) {
      // Every value is a count or a rate, never negative; an unsigned read would take
      // "-1" for 18446744073709551615.
      if ((in >> std::ws).peek() == '-')
        throw InputError(what + field + "[" + std::to_string(i) + "] is negative");
      if (!(in >> v[i]) || !(v[i] >= 0)) throw InputError(what + field + "[" + std::to_string(i) + "]: bad or missing value");
    }
  };
  std::string magic;
  int version = 0;
  int64_t n_layer = 0, n_expert = 0, since = 0;
  if (!(in >> magic >> version) || magic != kMagic) throw InputError(what + "not an eMoE state (expected '" + kMagic + "')");
  if (version != 1) throw InputError(what + "unsupported version " + std::to_string(version));
  if (!(in >> n_layer >> n_expert >> since) || since < 0) throw InputError(what + "bad header");
  if (n_layer != n_layer_ || n_expert != n_expert_)
    throw InputError(what + "saved for " + std::to_string(n_layer) + " layers x " + std::to_string(n_expert) +
                     " experts, the model has " + std::to_string(n_layer_) + " x " + std::to_string(n_expert_));
  std::vector<double> freq, expected;
  std::vector<uint64_t> last_any, transitions;
  get(freq, {0, n}, "frequency");
  get(expected, {freq.size()}, "expected tokens");
  get(last_any, {n}, "last prompt");
  get(transitions, {n * static_cast<size_t>(n_expert_)}, "transitions");
  size_t n_tasks = 0;
  if (!(in >> n_tasks)) throw InputError(what + "bad task count");
  std::map<std::string, TaskStats> stats;
  for (size_t t = 0; t < n_tasks; ++t) {
    size_t len = 0;
    if (!(in >> len) || len > 4096 || in.get() != ' ') throw InputError(what + "task " + std::to_string(t) + ": bad name");
    std::string name(len, '\0');
    TaskStats s;
    if (!in.read(name.data(), static_cast<std::streamsize>(len)) || !(in >> s.requests >> s.prompt_tokens >> s.generated))
      throw InputError(what + "task " + std::to_string(t) + ": bad counts");
    get(s.last, {n}, "task routing");
    stats[name] = std::move(s);
  }
  std::string extra;
  if (in >> extra) throw InputError(what + "unexpected data after the tasks");
  since_prediction_ = since;
  freq_ = std::move(freq);
  expected_ = std::move(expected);
  last_any_ = std::move(last_any);
  transitions_ = std::move(transitions);
  stats_ = std::move(stats);
  choose_held();  // derived from N_i and this run's budget, not saved
}

EmoeVariant parse_emoe_variant(const std::string& s) {
  if (s == "layer-by-layer" || s == "L") return EmoeVariant::LayerByLayer;
  if (s.empty() || s == "all-layer" || s == "A") return EmoeVariant::AllLayer;
  throw InputError("emoe variant '" + s + "': expected all-layer or layer-by-layer");
}

std::unique_ptr<ExpertPolicy> make_emoe_policy(const ExpertGeometry& g, const PolicyOptions& opt) {
  EmoeOptions o;
  o.variant = parse_emoe_variant(opt.emoe_variant);
  o.top_l = opt.emoe_top_l;
  o.budget_bytes = opt.budget_bytes;
  o.detokenize = opt.detokenize;
  o.tasks = task_profiles_or_default(opt.tasks_path);
  for (TaskProfile& t : o.tasks) {
    for (int32_t l : t.insensitive_layers)
      if (l >= g.n_layer && !opt.tasks_path.empty())
        throw InputError(opt.tasks_path + ": task '" + t.name + "' names insensitive layer " + std::to_string(l) +
                         ", the model has " + std::to_string(g.n_layer) + " MoE layers");
    if (t.sensitivity.empty() || t.sensitivity.size() == static_cast<size_t>(g.n_layer)) continue;
    if (!opt.tasks_path.empty())
      throw InputError(opt.tasks_path + ": the sensitivity table of task '" + t.name + "' has " + std::to_string(t.sensitivity.size()) +
                       " layers, the model has " + std::to_string(g.n_layer) +
                       " (derive one: moeflow trace sensitivity TRACE --out FILE)");
    // The default file profiles the built-in model; another model keeps its keywords only.
    t.sensitivity.clear();
    t.insensitive_layers.clear();
  }
  return std::make_unique<EmoePolicy>(g, std::move(o));
}

EmoeAccuracy emoe_predictor_accuracy(const Trace& learn, const Trace& measure, EmoeVariant variant, int32_t period) {
  const ExpertGeometry g = ExpertGeometry::uniform(learn.n_layer ? learn.n_layer : measure.n_layer,
                                                   learn.n_expert ? learn.n_expert : measure.n_expert,
                                                   learn.top_k ? learn.top_k : measure.top_k, 1);
  EmoeOptions opt;
  opt.variant = variant;
  opt.period = period;
  EmoePolicy p(g, opt);
  EmoeAccuracy acc;
  auto replay = [&](const TraceRequest& rq, bool score) {
    p.begin_request(RequestInfo{rq.id, {}, {}, rq.task});
    std::vector<std::vector<int32_t>> top;  // per layer, the top_k predicted experts
    if (score) {
      ++acc.requests;
      if (!p.frequency().empty()) {
        ++acc.predicted_requests;
        top.resize(static_cast<size_t>(g.n_layer));
        for (int32_t l = 0; l < g.n_layer; ++l) {
          std::vector<int32_t> ids(static_cast<size_t>(g.n_expert));
          std::iota(ids.begin(), ids.end(), 0);
          const double* f = &p.frequency()[static_cast<size_t>(l) * static_cast<size_t>(g.n_expert)];
          std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return f[a] > f[b]; });
          ids.resize(static_cast<size_t>(std::min(g.top_k, g.n_expert)));
          top[static_cast<size_t>(l)] = ids;
        }
      }
    }
    for (const TraceIteration& it : rq.iterations) {
      p.begin_iteration(it.prefill ? Phase::Prefill : Phase::Decode, it.iter);
      for (const TraceRecord& rec : it.layers) {
        LayerRouting r;
        r.layer = rec.layer;
        r.n_expert = g.n_expert;
        r.top_k = g.top_k;
        for (const auto& row : rec.experts) {
          if (row.size() != static_cast<size_t>(g.top_k)) continue;  // dropped row
          r.experts.insert(r.experts.end(), row.begin(), row.end());
          ++r.n_tok;
          if (!top.empty() && rec.layer >= 0 && rec.layer < g.n_layer)
            for (int32_t e : row) {
              const auto& t = top[static_cast<size_t>(rec.layer)];
              ++acc.slots;
              if (std::find(t.begin(), t.end(), e) != t.end()) ++acc.right;
            }
        }
        if (r.n_tok) p.routed(r);
      }
      p.end_iteration();
    }
    p.end_request(rq.id);
  };
  for (const TraceRequest& rq : learn.requests) replay(rq, false);
  p.finish_learning();
  for (const TraceRequest& rq : measure.requests) replay(rq, true);
  return acc;
}

}  // namespace moeflow
