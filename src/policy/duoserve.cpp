#include "policy/duoserve.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <istream>
#include <numeric>
#include <ostream>

#include "base/error.h"
#include "policy/binary_io.h"

namespace moeflow {

namespace {

constexpr char kMagic[8] = {'M', 'F', 'D', 'U', 'O', 'S', 'V', '1'};

using binio::get;
using binio::put;

}  // namespace

namespace {

// Refuses a shape whose tables would not fit in memory before anything is allocated
// (a one-line trace naming layer 255 and 1024 experts asked for 2.1 GB of affinity
// counts, and the ExpertMLP's first layer grows with layers x experts).
DuoserveStats checked_stats(int32_t n_layer, int32_t n_expert, int32_t top_k, const DuoserveOptions& opt) {
  const std::string what = "DuoServe predictor";
  DuoserveStats::check_shape(n_layer, n_expert, what);
  if (top_k < 1 || top_k > n_expert)
    throw InputError(what + ": top-" + std::to_string(top_k) + " of " + std::to_string(n_expert) + " experts");
  uint64_t params = 0, prev = static_cast<uint64_t>(state_size(n_layer, n_expert));
  for (int32_t w : opt.mlp.widths) params += prev * static_cast<uint64_t>(w), prev = static_cast<uint64_t>(w);
  params += prev * static_cast<uint64_t>(n_expert);
  constexpr uint64_t kMaxMlpBytes = 2ull << 30;  // parameters, gradients and two Adam moments
  if (opt.epochs > 0 && params * 4 * sizeof(float) > kMaxMlpBytes)
    throw InputError(what + ": an ExpertMLP for " + std::to_string(n_layer) + " layers x " + std::to_string(n_expert) +
                     " experts would take " + std::to_string(params * 4 * sizeof(float) >> 20) + " MiB to train (limit " +
                     std::to_string(kMaxMlpBytes >> 20) + " MiB); give smaller --widths");
  return DuoserveStats(n_layer, n_expert);
}

}  // namespace

DuoservePredictor::DuoservePredictor(int32_t n_layer, int32_t n_expert, int32_t top_k, DuoserveOptions opt)
    : top_k_(top_k), opt_(std::move(opt)), stats_(checked_stats(n_layer, n_expert, top_k, opt_)) {}

void DuoservePredictor::observe(const ActivationPath& path) {
  stats_.add(path);
  if (paths_.size() < opt_.max_paths) paths_.push_back(path);
}

double DuoservePredictor::train() {
  const int32_t nl = n_layer(), m = n_expert();
  const int64_t d = state_size(nl, m);
  std::vector<float> x, y;
  int64_t n = 0;
  for (const ActivationPath& p : paths_)
    for (int32_t t = 1; t < nl && t < static_cast<int32_t>(p.size()); ++t) {
      if (p[t - 1].empty() || p[t].empty()) continue;  // dropped rows: nothing to learn from
      x.resize(static_cast<size_t>((n + 1) * d));
      build_state(stats_, p, t, &x[static_cast<size_t>(n * d)]);
      y.resize(static_cast<size_t>((n + 1) * m), 0.0f);
      for (int32_t e : p[t])
        if (e >= 0 && e < m) y[static_cast<size_t>(n * m + e)] = 1.0f;  // multi-label target (Eq. 6)
      ++n;
    }
  if (n < 2 || opt_.epochs <= 0) return 0;  // --epochs 0: statistics only (fallback)
  mlp_ = ExpertMlp(static_cast<int32_t>(d), m, opt_.mlp);
  const double loss = mlp_.fit(x, y, n, opt_.epochs);
  trained_ = true;
  return loss;
}

std::vector<float> DuoservePredictor::fallback_scores(const ActivationPath& path, int32_t target) const {
  static const std::vector<int32_t> kNone;
  const std::vector<int32_t>& prev = target >= 1 && target - 1 < static_cast<int32_t>(path.size()) ? path[target - 1] : kNone;
  std::vector<float> s = stats_.affinity(target - 1, prev);
  const std::vector<float> pop = stats_.popularity(target);
  for (size_t j = 0; j < s.size(); ++j) s[j] += 1e-3f * pop[j];
  return s;
}

std::vector<float> DuoservePredictor::scores(const ActivationPath& path, int32_t target) const {
  if (!trained_) return fallback_scores(path, target);
  std::vector<float> x(static_cast<size_t>(state_size(n_layer(), n_expert())));
  build_state(stats_, path, target, x.data());
  return mlp_.predict(x.data(), 1);
}

std::vector<std::vector<float>> DuoservePredictor::scores_many(
    const std::vector<std::pair<const ActivationPath*, int32_t>>& q) const {
  std::vector<std::vector<float>> out;
  if (!trained_) {
    for (const auto& [path, target] : q) out.push_back(fallback_scores(*path, target));
    return out;
  }
  const int64_t d = state_size(n_layer(), n_expert());
  const size_t m = static_cast<size_t>(n_expert()), chunk = 256;
  std::vector<float> x;
  for (size_t s = 0; s < q.size(); s += chunk) {
    const size_t cnt = std::min(chunk, q.size() - s);
    x.assign(cnt * static_cast<size_t>(d), 0.0f);
    for (size_t i = 0; i < cnt; ++i) build_state(stats_, *q[s + i].first, q[s + i].second, &x[i * static_cast<size_t>(d)]);
    const std::vector<float> y = mlp_.predict(x.data(), static_cast<int64_t>(cnt));
    for (size_t i = 0; i < cnt; ++i) out.emplace_back(y.begin() + static_cast<std::ptrdiff_t>(i * m), y.begin() + static_cast<std::ptrdiff_t>((i + 1) * m));
  }
  return out;
}

std::vector<int32_t> DuoservePredictor::top(const std::vector<float>& s) const {
  std::vector<int32_t> ids(s.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min(static_cast<size_t>(top_k_), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](int32_t a, int32_t b) { return s[a] != s[b] ? s[a] > s[b] : a < b; });
  ids.resize(k);
  return ids;
}

void DuoservePredictor::save(std::ostream& o) const {
  o.write(kMagic, sizeof kMagic);
  put<int32_t>(o, top_k_);
  stats_.save(o);
  put<uint8_t>(o, trained_ ? 1 : 0);
  if (trained_) mlp_.save(o);
}

void DuoservePredictor::load(std::istream& in, const std::string& what) {
  char magic[sizeof kMagic];
  if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0)
    throw InputError(what + ": not a DuoServe policy state (written by `moeflow train-predictor`)");
  const int32_t k = get<int32_t>(in, what);
  if (k != top_k_)
    throw InputError(what + ": DuoServe state is for top-" + std::to_string(k) + " routing, the model routes top-" +
                     std::to_string(top_k_));
  DuoserveStats s;
  s.load(in, what, n_layer(), n_expert());  // checks the shape against the model before allocating
  const uint8_t trained = get<uint8_t>(in, what);
  if (trained > 1) throw InputError(what + ": DuoServe state has a bad 'trained' flag");
  ExpertMlp mlp;
  if (trained) {
    mlp.load(in, what, static_cast<int32_t>(state_size(n_layer(), n_expert())), n_expert());
  }
  if (in.peek() != std::char_traits<char>::eof()) throw InputError(what + ": trailing bytes after the DuoServe state");
  stats_ = std::move(s);
  mlp_ = std::move(mlp);
  trained_ = trained;
  paths_.clear();
}

PredictorAccuracy evaluate_predictor(const DuoservePredictor& p, const Trace& t) {
  const std::vector<ActivationPath> paths = activation_paths(t, false, true);
  std::vector<std::pair<const ActivationPath*, int32_t>> q;
  for (const ActivationPath& path : paths)
    for (int32_t l = 1; l < p.n_layer() && l < static_cast<int32_t>(path.size()); ++l)
      if (!path[l - 1].empty() && !path[l].empty()) q.push_back({&path, l});
  const std::vector<std::vector<float>> s = p.scores_many(q);  // uses layers < l only
  PredictorAccuracy acc;
  for (size_t i = 0; i < q.size(); ++i) {
    const std::vector<int32_t>& truth = (*q[i].first)[static_cast<size_t>(q[i].second)];
    const std::vector<int32_t> guess = p.top(s[i]);
    size_t right = 0;
    for (int32_t e : truth) right += std::find(guess.begin(), guess.end(), e) != guess.end();
    ++acc.samples;
    acc.all_right += right == truth.size();
    acc.at_least_one += right > 0;
  }
  return acc;
}

namespace {

class DuoservePolicy : public ExpertPolicy {
 public:
  DuoservePolicy(const ExpertGeometry& g, DuoserveOptions opt)
      : n_layer_(g.n_layer), k_cache_(opt.k_cache), prediction_s_(opt.prediction_seconds),
        pred_(g.n_layer, g.n_expert, g.top_k, std::move(opt)) {}
  std::string name() const override { return k_cache_ ? "duoserve-k" : "duoserve"; }
  bool frees_computed_experts() const override { return k_cache_; }
  double prediction_seconds() const override { return prediction_s_; }
  bool prefetches() const override { return true; }

  void begin_iteration(Phase phase, int64_t) override {
    phase_ = phase;
    rows_.assign(static_cast<size_t>(n_layer_), {});
    n_tok_.assign(static_cast<size_t>(n_layer_), 0);
  }
  void routed(const LayerRouting& r) override {
    if (r.layer < 0 || r.layer >= n_layer_ || rows_.empty()) return;
    rows_[static_cast<size_t>(r.layer)] = r.experts;
    n_tok_[static_cast<size_t>(r.layer)] = r.n_tok;
    k_ = r.top_k;
  }

  void plan_prefetch(int32_t layer_now, PrefetchPlan& plan) override {
    // Decode only (prefill streams, see stream_order). Only layer l+1 is ever asked
    // for: with layer l's own (demand) loads that keeps at most two layers in flight,
    // the "two slots" of §5.1. Layer 0 gets no prefetch: its experts are fetched once
    // its gate has chosen (§5.3, "In the first layer ...").
    const int32_t next = layer_now + 1;
    if (phase_ == Phase::Prefill || next >= n_layer_ || layer_now < 0 || rows_.empty()) return;
    const int64_t n = n_tok_[static_cast<size_t>(layer_now)];
    // §5.3: predict the next layer's experts from each token's path so far (one token
    // in decode) and fetch them while this layer computes.
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<int32_t> guess = pred_.top(pred_.scores(token_path(t, next), next));
      for (size_t i = 0; i < guess.size(); ++i) {
        const ExpertKey k{next, guess[i]};
        if (std::none_of(plan.begin(), plan.end(), [&](const PrefetchRequest& r) { return r.key == k; }))
          plan.push_back({k, 2.0 - static_cast<double>(i) / static_cast<double>(guess.size())});
      }
    }
  }

  bool stream_order(int32_t layer, std::vector<int32_t>& order) override {
    // §5.2: every prefill layer streams its experts through the layer protocol's two
    // slots; no predictor runs in prefill.
    if (phase_ != Phase::Prefill || layer < 0 || layer >= n_layer_ || rows_.empty()) return false;
    const int32_t m = pred_.n_expert();
    std::vector<double> want(static_cast<size_t>(m), 0.0);
    if (n_tok_[static_cast<size_t>(layer)] > 0) {
      // Routed: the experts with the most tokens first (they are all needed).
      for (int32_t e : rows_[static_cast<size_t>(layer)])
        if (e >= 0 && e < m) want[static_cast<size_t>(e)] += 1.0;
    } else if (layer > 0 && n_tok_[static_cast<size_t>(layer - 1)] > 0) {
      want = expected_tokens(layer - 1);
    }
    // Ties (and a layer with nothing known): the layer's popularity, as the paper
    // orders its expert dispatch.
    const std::vector<float> pop = pred_.stats().popularity(layer);
    order.resize(static_cast<size_t>(m));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      if (want[static_cast<size_t>(a)] != want[static_cast<size_t>(b)]) return want[static_cast<size_t>(a)] > want[static_cast<size_t>(b)];
      return pop[static_cast<size_t>(a)] > pop[static_cast<size_t>(b)];
    });
    return true;
  }

  size_t victim(const CacheView& v, const ExpertKey&) override {
    // The paper's GPU cache holds exactly the k experts being used or fetched (§5.1),
    // so the expert replaced is always the one used longest ago: LRU over a larger
    // cache (prefetched-but-unused experts count as used on arrival, so the next
    // layer's predictions are not the first to go).
    const auto& c = *v.candidates;
    size_t best = 0;
    for (size_t i = 1; i < c.size(); ++i)
      if (c[i].last_use != c[best].last_use ? c[i].last_use < c[best].last_use : c[i].key < c[best].key) best = i;
    return best;
  }

  void end_iteration() override {
    if (!learning_ || rows_.empty()) return;
    int64_t n = 0;
    for (int64_t t : n_tok_) n = std::max(n, t);
    for (int64_t t = 0; t < n; ++t) pred_.observe(token_path(t, n_layer_));
  }
  void finish_learning() override {
    if (!learning_) return;  // a loaded state is already trained
    learning_ = false;
    pred_.train();
  }
  void save(std::ostream& out) const override { pred_.save(out); }
  void load(std::istream& in) override {
    pred_.load(in, "duoserve policy state");
    learning_ = false;
  }

 private:
  // Token t's experts at layers < upto (empty where it has no row).
  ActivationPath token_path(int64_t t, int32_t upto) const {
    ActivationPath p(static_cast<size_t>(n_layer_));
    for (int32_t l = 0; l < upto; ++l)
      if (t < n_tok_[static_cast<size_t>(l)]) {
        const auto& row = rows_[static_cast<size_t>(l)];
        p[static_cast<size_t>(l)].assign(row.begin() + t * k_, row.begin() + (t + 1) * k_);
      }
    return p;
  }

  // How many of this block's tokens are expected at layer l+1 per expert, from the
  // affinity rows of their experts at l (the head of l+1 is fetched before its router
  // runs): token t uses expert j with probability min(1, k * a_t(j)).
  std::vector<double> expected_tokens(int32_t l) const {
    const int32_t m = pred_.n_expert();
    std::vector<double> expected(static_cast<size_t>(m), 0.0);
    const auto& row = rows_[static_cast<size_t>(l)];
    for (int64_t t = 0; t < n_tok_[static_cast<size_t>(l)]; ++t) {
      ActivationPath p(static_cast<size_t>(n_layer_));
      p[static_cast<size_t>(l)].assign(row.begin() + t * k_, row.begin() + (t + 1) * k_);
      const std::vector<float> a = pred_.fallback_scores(p, l + 1);
      for (int32_t j = 0; j < m; ++j)
        expected[static_cast<size_t>(j)] += std::min(1.0, static_cast<double>(k_) * a[static_cast<size_t>(j)]);
    }
    return expected;
  }

  int32_t n_layer_;
  bool k_cache_;
  double prediction_s_;
  DuoservePredictor pred_;
  Phase phase_ = Phase::Decode;
  std::vector<std::vector<int32_t>> rows_;
  std::vector<int64_t> n_tok_;
  int64_t k_ = 1;
  bool learning_ = true;  // until finish_learning() or a loaded state
};

}  // namespace

std::unique_ptr<ExpertPolicy> make_duoserve_policy(const ExpertGeometry& g, DuoserveOptions opt) {
  return std::make_unique<DuoservePolicy>(g, std::move(opt));
}

}  // namespace moeflow
