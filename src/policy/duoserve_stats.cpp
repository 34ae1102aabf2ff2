#include "policy/duoserve_stats.h"

#include <algorithm>
#include <cmath>
#include <istream>
#include <ostream>

#include "base/error.h"
#include "policy/binary_io.h"

namespace moeflow {

DuoserveStats::DuoserveStats(int32_t n_layer, int32_t n_expert)
    : n_layer_(n_layer),
      n_expert_(n_expert),
      pop_(static_cast<size_t>(n_layer) * n_expert, 0.0),
      aff_(static_cast<size_t>(std::max(n_layer - 1, 0)) * n_expert * n_expert, 0.0) {}

void DuoserveStats::add(const ActivationPath& path) {
  const size_t m = static_cast<size_t>(n_expert_);
  const int32_t nl = std::min<int32_t>(n_layer_, static_cast<int32_t>(path.size()));
  for (int32_t l = 0; l < nl; ++l) {
    for (int32_t e : path[l])
      if (e >= 0 && e < n_expert_) pop_[l * m + e] += 1;
    if (l + 1 >= nl) continue;
    for (int32_t i : path[l])
      for (int32_t j : path[l + 1])
        if (i >= 0 && i < n_expert_ && j >= 0 && j < n_expert_) aff_[(l * m + i) * m + j] += 1;
  }
  ++paths_;
}

std::vector<float> DuoserveStats::popularity(int32_t layer) const {
  const size_t m = static_cast<size_t>(n_expert_);
  std::vector<float> p(m, 1.0f / static_cast<float>(m));
  double sum = 0;
  for (size_t e = 0; e < m; ++e) sum += pop_[layer * m + e];
  if (sum > 0)
    for (size_t e = 0; e < m; ++e) p[e] = static_cast<float>(pop_[layer * m + e] / sum);
  return p;
}

std::vector<float> DuoserveStats::affinity(int32_t layer, const std::vector<int32_t>& from) const {
  const size_t m = static_cast<size_t>(n_expert_);
  std::vector<float> a(m, 0.0f);
  int32_t rows = 0;
  for (int32_t i : from) {
    if (i < 0 || i >= n_expert_ || layer < 0 || layer + 1 >= n_layer_) continue;
    const double* row = &aff_[(layer * m + i) * m];
    double sum = 0;
    for (size_t j = 0; j < m; ++j) sum += row[j];
    for (size_t j = 0; j < m; ++j) a[j] += sum > 0 ? static_cast<float>(row[j] / sum) : 1.0f / static_cast<float>(m);
    ++rows;
  }
  for (float& v : a) v = rows ? v / static_cast<float>(rows) : 1.0f / static_cast<float>(m);
  return a;
}

namespace {
using binio::get;
using binio::put;
}  // namespace

void DuoserveStats::save(std::ostream& o) const {
  put<int32_t>(o, n_layer_);
  put<int32_t>(o, n_expert_);
  put<int64_t>(o, paths_);
  o.write(reinterpret_cast<const char*>(pop_.data()), static_cast<std::streamsize>(pop_.size() * sizeof(double)));
  o.write(reinterpret_cast<const char*>(aff_.data()), static_cast<std::streamsize>(aff_.size() * sizeof(double)));
}

void DuoserveStats::check_shape(int32_t n_layer, int32_t n_expert, const std::string& what) {
  if (n_layer <= 0 || n_expert <= 0 || n_layer > 4096 || n_expert > 65536)
    throw InputError(what + ": DuoServe statistics for " + std::to_string(n_layer) + " layers x " + std::to_string(n_expert) +
                     " experts: shape out of range");
  const uint64_t cells = static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(n_expert) * (1 + static_cast<uint64_t>(n_expert));
  if (cells * sizeof(double) > kMaxBytes)
    throw InputError(what + ": DuoServe's inter-layer affinity for " + std::to_string(n_layer) + " layers x " +
                     std::to_string(n_expert) + " experts would take " + std::to_string(cells * sizeof(double) >> 20) +
                     " MiB (limit " + std::to_string(kMaxBytes >> 20) + " MiB)");
}

void DuoserveStats::load(std::istream& in, const std::string& what, int32_t n_layer, int32_t n_expert) {
  const int32_t nl = get<int32_t>(in, what), ne = get<int32_t>(in, what);
  const int64_t np = get<int64_t>(in, what);
  if (nl != n_layer || ne != n_expert)
    throw InputError(what + ": DuoServe state is for " + std::to_string(nl) + " layers x " + std::to_string(ne) +
                     " experts, the model has " + std::to_string(n_layer) + " x " + std::to_string(n_expert));
  if (np < 0) throw InputError(what + ": DuoServe statistics count " + std::to_string(np) + " paths");
  check_shape(nl, ne, what);
  const uint64_t cells = static_cast<uint64_t>(nl) * static_cast<uint64_t>(ne) +
                         static_cast<uint64_t>(std::max(nl - 1, 0)) * static_cast<uint64_t>(ne) * static_cast<uint64_t>(ne);
  binio::need(in, cells * sizeof(double), what + ": DuoServe statistics");
  *this = DuoserveStats(nl, ne);
  paths_ = np;
  for (std::vector<double>* v : {&pop_, &aff_})
    if (!in.read(reinterpret_cast<char*>(v->data()), static_cast<std::streamsize>(v->size() * sizeof(double))))
      throw InputError(what + ": truncated DuoServe statistics");
  for (const std::vector<double>* v : {&pop_, &aff_})
    for (double x : *v)
      if (!(x >= 0 && std::isfinite(x))) throw InputError(what + ": DuoServe statistics hold a negative or non-finite count");
}

int64_t state_size(int32_t n_layer, int32_t n_expert) {
  return static_cast<int64_t>(n_layer) * n_expert + 2 * static_cast<int64_t>(n_expert);
}

void build_state(const DuoserveStats& s, const ActivationPath& path, int32_t target, float* out) {
  const int32_t nl = s.n_layer(), m = s.n_expert();
  std::fill_n(out, state_size(nl, m), 0.0f);
  // h_l: the experts of every earlier layer ("the cumulative set of all previous
  // expert selections", Eq. 4), one slot per (layer, expert).
  for (int32_t l = 0; l < target && l < static_cast<int32_t>(path.size()); ++l)
    for (int32_t e : path[l])
      if (e >= 0 && e < m) out[static_cast<int64_t>(l) * m + e] = 1.0f;
  float* p = out + static_cast<int64_t>(nl) * m;
  const std::vector<float> pop = s.popularity(target);
  std::copy(pop.begin(), pop.end(), p);
  static const std::vector<int32_t> kNone;
  const std::vector<int32_t>& prev = target >= 1 && target - 1 < static_cast<int32_t>(path.size()) ? path[target - 1] : kNone;
  const std::vector<float> aff = s.affinity(target - 1, prev);
  std::copy(aff.begin(), aff.end(), p + m);
}

std::vector<ActivationPath> activation_paths(const Trace& t, bool prefill, bool decode) {
  std::vector<ActivationPath> out;
  for (const TraceRequest& rq : t.requests)
    for (const TraceIteration& it : rq.iterations) {
      if (it.prefill ? !prefill : !decode) continue;
      const int64_t n = it.n_tokens();
      for (int64_t tok = 0; tok < n; ++tok) {
        ActivationPath p(static_cast<size_t>(t.n_layer));
        for (size_t l = 0; l < it.layers.size() && l < p.size(); ++l)
          if (tok < static_cast<int64_t>(it.layers[l].experts.size())) p[l] = it.layers[l].experts[static_cast<size_t>(tok)];
        out.push_back(std::move(p));
      }
    }
  return out;
}

}  // namespace moeflow
