#include "policy/emoe_sensitivity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/error.h"
#include "format/trace.h"

namespace moeflow {

namespace {

struct Acc {
  std::vector<double> mass;        // [layer]: summed normalised gate mass
  std::vector<int64_t> rows;       // [layer]: token rows
  std::vector<std::vector<int64_t>> use;  // [layer][expert]: routed slots
};

double rounded(double x) { return std::round(x * 1000.0) / 1000.0; }

}  // namespace

SensitivityTable routing_sensitivity(const Trace& t, const std::string& unlabelled_task) {
  SensitivityTable out;
  out.method = t.has_probs ? "gate-mass" : "concentration";
  out.n_layer = t.n_layer;
  const int32_t E = t.n_expert, k = t.top_k;
  const double chance = E > 0 ? static_cast<double>(k) / E : 0;
  std::map<std::string, Acc> acc;
  for (const TraceRequest& rq : t.requests) {
    if (rq.task.empty() && unlabelled_task.empty()) {
      ++out.unlabelled_requests;
      continue;
    }
    Acc& a = acc[rq.task.empty() ? unlabelled_task : rq.task];
    if (a.rows.empty()) {
      a.mass.assign(static_cast<size_t>(t.n_layer), 0);
      a.rows.assign(static_cast<size_t>(t.n_layer), 0);
      a.use.assign(static_cast<size_t>(t.n_layer), std::vector<int64_t>(static_cast<size_t>(E), 0));
    }
    for (const TraceIteration& it : rq.iterations)
      for (const TraceRecord& rec : it.layers) {
        if (rec.layer < 0 || rec.layer >= t.n_layer) continue;
        const auto l = static_cast<size_t>(rec.layer);
        for (size_t r = 0; r < rec.experts.size(); ++r) {
          const auto& ids = rec.experts[r];
          if (ids.size() != static_cast<size_t>(k)) continue;  // dropped row
          if (t.has_probs) {
            if (r >= rec.probs.size() || rec.probs[r].size() != static_cast<size_t>(E)) continue;
            double m = 0;
            for (int32_t e : ids)
              if (e >= 0 && e < E) m += rec.probs[r][static_cast<size_t>(e)];
            a.mass[l] += chance < 1 ? std::clamp((m - chance) / (1 - chance), 0.0, 1.0) : 0.0;
          }
          for (int32_t e : ids)
            if (e >= 0 && e < E) ++a.use[l][static_cast<size_t>(e)];
          ++a.rows[l];
        }
      }
  }
  for (const auto& [task, a] : acc) {
    std::vector<double> s(static_cast<size_t>(t.n_layer), 1.0);
    int64_t rows = 0;
    for (size_t l = 0; l < s.size(); ++l) {
      rows += a.rows[l];
      if (a.rows[l] == 0) continue;
      if (t.has_probs) {
        s[l] = a.mass[l] / static_cast<double>(a.rows[l]);
      } else {
        double total = 0, h = 0;
        for (int64_t u : a.use[l]) total += static_cast<double>(u);
        for (int64_t u : a.use[l])
          if (u > 0) h -= static_cast<double>(u) / total * std::log(static_cast<double>(u) / total);
        s[l] = E > 1 ? std::clamp(1 - h / std::log(static_cast<double>(E)), 0.0, 1.0) : 1.0;
      }
    }
    out.by_task[task] = std::move(s);
    out.tokens[task] = rows;
  }
  return out;
}

void merge_sensitivity(std::vector<TaskProfile>& profiles, const SensitivityTable& s, double insensitive_below) {
  for (const auto& [task, row] : s.by_task) {
    const std::string& name = task;  // (clang 14 cannot capture a structured binding)
    auto it = std::find_if(profiles.begin(), profiles.end(), [&](const TaskProfile& p) { return p.name == name; });
    if (it == profiles.end()) it = profiles.insert(profiles.end(), TaskProfile{task, {}, {}});
    it->sensitivity.clear();
    for (double v : row) it->sensitivity.push_back(rounded(v));
    it->insensitive_layers.clear();
    if (insensitive_below > 0)
      for (size_t l = 0; l < row.size(); ++l)
        if (row[l] < insensitive_below) it->insensitive_layers.push_back(static_cast<int32_t>(l));
  }
  // Profiles the trace does not cover keep no row of another model's layer count.
  for (TaskProfile& p : profiles)
    if (!s.by_task.count(p.name) && p.sensitivity.size() != static_cast<size_t>(s.n_layer)) p.sensitivity.clear();
}

void save_task_profiles(const std::string& path, const std::vector<TaskProfile>& profiles, const std::string& comment,
                        const std::string& source_json) {
  std::string text = "{\n  \"comment\": " + nlohmann::json(comment).dump() + ",\n";
  if (!source_json.empty()) text += "  \"sensitivity_source\": " + source_json + ",\n";
  text += "  \"tasks\": [\n";
  for (size_t i = 0; i < profiles.size(); ++i) {
    const TaskProfile& p = profiles[i];
    nlohmann::ordered_json j;
    j["name"] = p.name;
    j["keywords"] = p.keywords;
    if (!p.insensitive_layers.empty()) j["insensitive_layers"] = p.insensitive_layers;
    if (!p.sensitivity.empty()) j["sensitivity"] = p.sensitivity;
    text += "    " + j.dump() + (i + 1 < profiles.size() ? ",\n" : "\n");
  }
  text += "  ]\n}\n";
  write_file_atomic(path, text);
}

}  // namespace moeflow
