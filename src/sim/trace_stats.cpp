#include "sim/trace_stats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "base/error.h"

namespace moeflow {

namespace {

using Matrix = std::vector<std::vector<double>>;

constexpr double kMaxTableBytes = 256.0 * (1 << 20);

Matrix zeros(int32_t rows, int32_t cols) {
  return Matrix(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(cols), 0.0));
}

void normalize_rows(Matrix& m) {
  for (auto& row : m) {
    double s = 0;
    for (double v : row) s += v;
    if (s > 0)
      for (double& v : row) v /= s;
  }
}

}  // namespace

TraceStats compute_trace_stats(const Trace& t) {
  TraceStats s;
  s.n_layer = t.n_layer;
  s.n_expert = t.n_expert;
  s.top_k = t.top_k;
  s.requests = static_cast<int64_t>(t.requests.size());
  s.dropped_rows = t.dropped_rows;
  const int32_t L = t.n_layer, E = t.n_expert;
  Matrix pop = zeros(L, E);
  // successors[l * E + i][j]: expert i at layer l followed by j at layer l+1 (same
  // token). Sparse: a dense L x E x E table is 8.4 GB at 4096 x 4096 experts and
  // would be allocated for a one-line trace; the counts present are at most the
  // trace's routed pairs.
  std::unordered_map<int64_t, std::map<int32_t, double>> successors;
  // One L x E table per task: refuse before allocating them when a trace names so many
  // tasks that they would not fit in a reasonable amount of memory.
  {
    std::set<std::string> tasks;
    for (const TraceRequest& rq : t.requests)
      if (!rq.task.empty()) tasks.insert(rq.task);
    const double bytes = static_cast<double>(tasks.size() + 1) * L * E * sizeof(double);
    if (bytes > kMaxTableBytes)
      throw InputError(t.path + ": " + std::to_string(tasks.size()) + " tasks x " + std::to_string(L) + " layers x " +
                       std::to_string(E) + " experts: the per-task popularity tables would take " +
                       std::to_string(static_cast<int64_t>(bytes / (1 << 20))) + " MiB");
  }
  double overlap_sum = 0;
  int64_t overlap_n = 0;

  for (const TraceRequest& rq : t.requests) {
    TraceStats::WorkingSet ws;
    ws.request = rq.id;
    ws.task = rq.task;
    std::set<int64_t> seen_prefill, seen_decode;
    Matrix* task_pop = nullptr;
    if (!rq.task.empty()) {
      auto [it, fresh] = s.task_popularity.emplace(rq.task, Matrix{});
      if (fresh) it->second = zeros(L, E);
      task_pop = &it->second;
    }
    const TraceIteration* prev_decode = nullptr;
    for (const TraceIteration& it : rq.iterations) {
      ++s.iterations;
      const int64_t n_tok = it.n_tokens();
      s.routed_tokens += n_tok;
      (it.prefill ? ws.prefill_tokens : ws.decode_tokens) += n_tok;
      auto& seen = it.prefill ? seen_prefill : seen_decode;
      for (int32_t l = 0; l < L; ++l) {
        const TraceRecord& r = it.layers[static_cast<size_t>(l)];
        for (size_t tok = 0; tok < r.experts.size(); ++tok) {
          for (int32_t e : r.experts[tok]) {
            pop[static_cast<size_t>(l)][static_cast<size_t>(e)] += 1;
            if (task_pop) (*task_pop)[static_cast<size_t>(l)][static_cast<size_t>(e)] += 1;
            seen.insert(static_cast<int64_t>(l) * E + e);
          }
          if (l + 1 < L) {
            const TraceRecord& next = it.layers[static_cast<size_t>(l) + 1];
            if (tok < next.experts.size())
              for (int32_t i : r.experts[tok]) {
                auto& succ = successors[static_cast<int64_t>(l) * E + i];
                for (int32_t j : next.experts[tok]) succ[j] += 1;
              }
          }
        }
      }
      if (!it.prefill) {
        if (prev_decode && it.n_tokens() == 1 && prev_decode->n_tokens() == 1) {
          for (int32_t l = 0; l < L; ++l) {
            const auto& a = prev_decode->layers[static_cast<size_t>(l)].experts;
            const auto& b = it.layers[static_cast<size_t>(l)].experts;
            if (a.empty() || b.empty() || a[0].empty() || b[0].empty()) continue;
            int common = 0;
            for (int32_t x : b[0]) common += std::count(a[0].begin(), a[0].end(), x) > 0 ? 1 : 0;
            overlap_sum += static_cast<double>(common) / static_cast<double>(t.top_k);
            ++overlap_n;
          }
        }
        prev_decode = &it;
      }
    }
    const double all = static_cast<double>(L) * E;
    ws.prefill_fraction = static_cast<double>(seen_prefill.size()) / all;
    ws.decode_fraction = static_cast<double>(seen_decode.size()) / all;
    s.working_sets.push_back(ws);
  }

  normalize_rows(pop);
  s.popularity = pop;
  for (const auto& row : pop) {
    double top = 0, h = 0;
    for (double p : row) {
      top = std::max(top, p);
      if (p > 0) h -= p * std::log(p);
    }
    s.top_share.push_back(top);
    s.normalized_entropy.push_back(E > 1 ? h / std::log(static_cast<double>(E)) : 0);
  }
  for (auto& [task, m] : s.task_popularity) {
    normalize_rows(m);
    double tv = 0;
    for (int32_t l = 0; l < L; ++l) {
      double d = 0;
      for (int32_t e = 0; e < E; ++e) d += std::abs(m[static_cast<size_t>(l)][static_cast<size_t>(e)] - pop[static_cast<size_t>(l)][static_cast<size_t>(e)]);
      tv += d / 2;
    }
    s.task_divergence[task] = L ? tv / L : 0;
  }

  // Affinity: for each token and layer, does the strongest successor of its experts
  // land in the next layer's top-k? (In-sample: the counts include the token itself.)
  int64_t hit = 0, n = 0;
  std::map<int32_t, double> score;
  for (const TraceRequest& rq : t.requests)
    for (const TraceIteration& it : rq.iterations)
      for (int32_t l = 0; l + 1 < L; ++l) {
        const auto& cur = it.layers[static_cast<size_t>(l)].experts;
        const auto& next = it.layers[static_cast<size_t>(l) + 1].experts;
        for (size_t tok = 0; tok < cur.size() && tok < next.size(); ++tok) {
          if (cur[tok].empty() || next[tok].empty()) continue;
          score.clear();
          for (int32_t i : cur[tok])
            if (auto s_it = successors.find(static_cast<int64_t>(l) * E + i); s_it != successors.end())
              for (const auto& [j, count] : s_it->second) score[j] += count;
          // The lowest id among the highest scores (expert 0 when nothing follows).
          int32_t best = 0;
          double best_score = 0;
          for (const auto& [j, v] : score)
            if (v > best_score) best = j, best_score = v;
          hit += std::count(next[tok].begin(), next[tok].end(), best) > 0 ? 1 : 0;
          ++n;
        }
      }
  s.affinity_top1_hit = n ? static_cast<double>(hit) / static_cast<double>(n) : 0;
  s.affinity_chance = E ? static_cast<double>(t.top_k) / E : 0;
  s.temporal_overlap = overlap_n ? overlap_sum / static_cast<double>(overlap_n) : 0;

  std::vector<int64_t> named(static_cast<size_t>(t.lookahead_depth), 0), routed(named.size(), 0);
  for (const TraceRequest& rq : t.requests)
    for (const TraceIteration& it : rq.iterations) {
      if (it.prefill) continue;
      for (int32_t l = 0; l < L; ++l) {
        const TraceRecord& r = it.layers[static_cast<size_t>(l)];
        for (size_t tok = 0; tok < r.lookahead.size(); ++tok)
          for (size_t h = 1; h <= r.lookahead[tok].size(); ++h) {
            const auto& later = it.layers[static_cast<size_t>(l) + h].experts;
            if (tok >= later.size() || later[tok].empty()) continue;
            for (int32_t e : later[tok]) {
              named[h - 1] += std::count(r.lookahead[tok][h - 1].begin(), r.lookahead[tok][h - 1].end(), e) > 0;
              ++routed[h - 1];
            }
          }
      }
    }
  for (size_t h = 0; h < named.size(); ++h)
    s.lookahead_recall.push_back(routed[h] ? static_cast<double>(named[h]) / static_cast<double>(routed[h]) : 0);
  return s;
}

}  // namespace moeflow
