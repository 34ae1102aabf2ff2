#include "format/routing_trace.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/input_file.h"

namespace moeflow {

namespace {

using nlohmann::json;

const json& field(const json& j, const char* name, const std::string& where) {
  auto it = j.find(name);
  if (it == j.end()) throw InputError(where + ": missing field \"" + name + "\"");
  return *it;
}

int64_t int_field(const json& j, const char* name, const std::string& where, int64_t lo, int64_t hi) {
  const json& v = field(j, name, where);
  if (!v.is_number_integer()) throw InputError(where + ": field \"" + name + "\" must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw InputError(where + ": field \"" + name + "\" = " + v.dump() + " is outside [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw InputError(where + ": field \"" + name + "\" = " + std::to_string(x) + " is outside [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + "]");
  return x;
}

std::string opt_string(const json& j, const char* name, const std::string& where) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) throw InputError(where + ": field \"" + name + "\" must be a string");
  return it->get<std::string>();
}

// A [[...] | null, ...] matrix; rows may be null (kept empty). Returns false if the
// whole field is null or absent. `read` turns one JSON value into a T or throws
// naming its position.
template <class T, class Read>
bool rows_field(const json& j, const char* name, const std::string& where, std::vector<std::vector<T>>& out,
                Read read) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_array()) throw InputError(where + ": field \"" + name + "\" must be an array of rows or null");
  out.resize(it->size());
  for (size_t t = 0; t < it->size(); ++t) {
    const json& row = (*it)[t];
    if (row.is_null()) continue;
    if (!row.is_array())
      throw InputError(where + ": " + name + "[" + std::to_string(t) + "] must be an array or null");
    out[t].reserve(row.size());
    for (size_t k = 0; k < row.size(); ++k) {
      const std::string at = where + ": " + name + "[" + std::to_string(t) + "][" + std::to_string(k) + "]";
      out[t].push_back(read(row[k], at));
    }
  }
  return true;
}

// An integer in [lo, hi) exactly as written: 1.7 or 4294967297 must not become 1.
int64_t integer_in(const json& v, int64_t lo, int64_t hi, const std::string& at, const char* what) {
  if (!v.is_number_integer())
    throw InputError(at + " = " + v.dump() + " is not an integer (expected " + what + ")");
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(hi) : (v.get<int64_t>() < lo || v.get<int64_t>() >= hi))
    throw InputError(at + " = " + v.dump() + " is not " + what + " in [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  return v.get<int64_t>();
}

float finite_float(const json& v, const std::string& at) {
  if (!v.is_number()) throw InputError(at + " is not a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::abs(d) > 3.4e38) throw InputError(at + " = " + v.dump() + " is not a finite float");
  return static_cast<float>(d);
}

// "lookahead": [[[ids] per layer ahead] | null per token], checked like "experts":
// ids in range and distinct, top_k of them, every row the same depth, null exactly
// where the experts row is.
void parse_lookahead(const json& j, const std::string& where, TraceRecord& r) {
  auto it = j.find("lookahead");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_array()) throw InputError(where + ": field \"lookahead\" must be an array of rows or null");
  if (it->size() != r.experts.size())
    throw InputError(where + ": \"lookahead\" has " + std::to_string(it->size()) + " rows, \"experts\" has " +
                     std::to_string(r.experts.size()));
  r.has_lookahead = true;
  r.lookahead.assign(it->size(), {});
  int64_t depth = -1;
  for (size_t t = 0; t < it->size(); ++t) {
    const json& row = (*it)[t];
    const std::string at = where + ": lookahead[" + std::to_string(t) + "]";
    if (row.is_null() != r.experts[t].empty())
      throw InputError(at + (row.is_null() ? " is null but experts[" : " is given but experts[") + std::to_string(t) +
                       (row.is_null() ? "] is not" : "] is null"));
    if (row.is_null()) continue;
    if (!row.is_array()) throw InputError(at + " must be an array of id lists (one per layer ahead) or null");
    if (row.empty() || static_cast<int64_t>(row.size()) > kMaxTraceLookahead)
      throw InputError(at + " has " + std::to_string(row.size()) + " layers ahead (1 to " +
                       std::to_string(kMaxTraceLookahead) + ")");
    if (depth >= 0 && static_cast<int64_t>(row.size()) != depth)
      throw InputError(at + " has " + std::to_string(row.size()) + " layers ahead, the rows before it " +
                       std::to_string(depth));
    depth = static_cast<int64_t>(row.size());
    if (r.layer + depth >= kMaxTraceLayers)
      throw InputError(at + " looks " + std::to_string(depth) + " layers past layer " + std::to_string(r.layer) +
                       " (layers end at " + std::to_string(kMaxTraceLayers - 1) + ")");
    for (size_t h = 0; h < row.size(); ++h) {
      const json& ids = row[h];
      const std::string ah = at + "[" + std::to_string(h) + "]";
      if (!ids.is_array() || static_cast<int32_t>(ids.size()) != r.top_k)
        throw InputError(ah + " must be " + std::to_string(r.top_k) + " expert ids (top_k)");
      std::vector<int32_t> v;
      for (size_t k = 0; k < ids.size(); ++k)
        v.push_back(static_cast<int32_t>(
            integer_in(ids[k], 0, r.num_experts, ah + "[" + std::to_string(k) + "]", "an expert id")));
      std::vector<int32_t> sorted = v;
      std::sort(sorted.begin(), sorted.end());
      if (auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
        throw InputError(ah + " names expert " + std::to_string(*d) + " twice (a token's top-k experts are distinct)");
      r.lookahead[t].push_back(std::move(v));
    }
  }
  r.lookahead_depth = static_cast<int32_t>(std::max<int64_t>(depth, 0));
}

// "embedding_dim": N and "embedding": [N finite numbers], both or neither.
void parse_embedding(const json& j, const std::string& where, TraceRecord& r) {
  auto it = j.find("embedding");
  const bool has = it != j.end() && !it->is_null();
  const bool declared = j.contains("embedding_dim") && !j["embedding_dim"].is_null();
  if (!has && !declared) return;
  if (!has) throw InputError(where + ": field \"embedding_dim\" is given without \"embedding\"");
  if (!declared) throw InputError(where + ": field \"embedding\" is given without \"embedding_dim\"");
  const int64_t dim = int_field(j, "embedding_dim", where, 1, kMaxTraceEmbedding);
  if (!it->is_array()) throw InputError(where + ": field \"embedding\" must be an array of numbers");
  if (static_cast<int64_t>(it->size()) != dim)
    throw InputError(where + ": \"embedding\" has " + std::to_string(it->size()) + " numbers, \"embedding_dim\" is " +
                     std::to_string(dim));
  r.embedding.reserve(it->size());
  for (size_t k = 0; k < it->size(); ++k)
    r.embedding.push_back(finite_float((*it)[k], where + ": embedding[" + std::to_string(k) + "]"));
}

}  // namespace

TraceRecord parse_trace_line(const std::string& line, const std::string& where) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number such as 1e400 that no double holds.
    throw InputError(where + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw InputError(where + ": expected a JSON object");
  TraceRecord r;
  r.model = opt_string(j, "model", where);
  r.source = opt_string(j, "source", where);
  r.task = opt_string(j, "task", where);
  r.request = int_field(j, "request", where, 0, INT64_MAX);
  r.iter = int_field(j, "iter", where, 0, INT64_MAX);
  r.layer = static_cast<int32_t>(int_field(j, "layer", where, 0, kMaxTraceLayers - 1));
  r.num_experts = static_cast<int32_t>(int_field(j, "num_experts", where, 1, kMaxTraceExperts));
  r.top_k = static_cast<int32_t>(int_field(j, "top_k", where, 1, r.num_experts));
  const std::string phase = opt_string(j, "phase", where);
  if (phase == "prefill") r.prefill = true;
  else if (phase != "decode") throw InputError(where + ": field \"phase\" must be \"prefill\" or \"decode\"");

  const int32_t E = r.num_experts;
  if (!rows_field<int32_t>(j, "experts", where, r.experts, [&](const json& v, const std::string& at) {
        return static_cast<int32_t>(integer_in(v, 0, E, at, "an expert id"));
      }))
    throw InputError(where + ": field \"experts\" is missing or null");
  for (size_t t = 0; t < r.experts.size(); ++t) {
    const std::vector<int32_t>& row = r.experts[t];
    if (!row.empty() && static_cast<int32_t>(row.size()) != r.top_k)
      throw InputError(where + ": experts[" + std::to_string(t) + "] has " + std::to_string(row.size()) +
                       " ids, top_k is " + std::to_string(r.top_k));
    std::vector<int32_t> sorted = row;
    std::sort(sorted.begin(), sorted.end());
    if (auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
      throw InputError(where + ": experts[" + std::to_string(t) + "] names expert " + std::to_string(*d) +
                       " twice (a token's top-k experts are distinct)");
  }
  r.has_weights = rows_field<float>(j, "weights", where, r.weights, finite_float);
  if (r.has_weights && r.weights.size() != r.experts.size())
    throw InputError(where + ": \"weights\" has " + std::to_string(r.weights.size()) + " rows, \"experts\" has " +
                     std::to_string(r.experts.size()));
  r.has_probs = rows_field<float>(j, "probs", where, r.probs, finite_float);
  if (r.has_probs) {
    if (r.probs.size() != r.experts.size()) throw InputError(where + ": \"probs\" and \"experts\" differ in rows");
    for (size_t t = 0; t < r.probs.size(); ++t)
      if (!r.probs[t].empty() && static_cast<int32_t>(r.probs[t].size()) != E)
        throw InputError(where + ": probs[" + std::to_string(t) + "] has " + std::to_string(r.probs[t].size()) +
                         " entries, num_experts is " + std::to_string(E));
  }
  parse_lookahead(j, where, r);
  parse_embedding(j, where, r);
  if (auto it = j.find("tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw InputError(where + ": field \"tokens\" must be an array");
    for (size_t k = 0; k < it->size(); ++k)
      r.tokens.push_back(static_cast<int32_t>(
          integer_in((*it)[k], 0, INT32_MAX, where + ": tokens[" + std::to_string(k) + "]", "a token id")));
    // One token id per routed row (the row's token), as the recorder writes them.
    if (!r.tokens.empty() && r.tokens.size() != r.experts.size())
      throw InputError(where + ": \"tokens\" has " + std::to_string(r.tokens.size()) + " ids, \"experts\" has " +
                       std::to_string(r.experts.size()) + " rows");
  }
  return r;
}

std::string format_trace_line(const TraceRecord& r) {
  json j;
  j["model"] = r.model;
  j["source"] = r.source;
  j["request"] = r.request;
  j["iter"] = r.iter;
  j["phase"] = r.prefill ? "prefill" : "decode";
  j["layer"] = r.layer;
  j["num_experts"] = r.num_experts;
  j["top_k"] = r.top_k;
  // Floats go out with 6 significant digits: a float widened to double would print
  // as 0.009600000455975533 and triple the size of a trace.
  auto rows = [](const auto& m) {
    json a = json::array();
    for (const auto& row : m) {
      if (row.empty()) {
        a.push_back(nullptr);
        continue;
      }
      json r = json::array();
      for (const auto v : row) {
        if constexpr (std::is_floating_point_v<std::decay_t<decltype(v)>>) {
          char b[32];
          std::snprintf(b, sizeof b, "%.6g", static_cast<double>(v));
          r.push_back(std::strtod(b, nullptr));
        } else {
          r.push_back(v);
        }
      }
      a.push_back(std::move(r));
    }
    return a;
  };
  j["experts"] = rows(r.experts);
  j["weights"] = r.has_weights ? rows(r.weights) : json(nullptr);
  j["probs"] = r.has_probs ? rows(r.probs) : json(nullptr);
  if (!r.tokens.empty()) j["tokens"] = r.tokens;
  if (!r.task.empty()) j["task"] = r.task;
  if (r.has_lookahead) {
    json a = json::array();
    for (const auto& row : r.lookahead) a.push_back(row.empty() ? json(nullptr) : json(row));
    j["lookahead"] = std::move(a);
  }
  if (!r.embedding.empty()) {
    j["embedding_dim"] = r.embedding.size();
    j["embedding"] = rows(std::vector<std::vector<float>>{r.embedding})[0];
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void read_trace_file(const std::string& path, const std::function<void(const TraceRecord&)>& fn) {
  std::ifstream in = open_input_file(path, "trace");
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    fn(parse_trace_line(line, path + ":" + std::to_string(n)));
  }
}

std::vector<TraceRecord> read_trace_file(const std::string& path) {
  std::vector<TraceRecord> out;
  read_trace_file(path, [&](const TraceRecord& r) { out.push_back(r); });
  return out;
}

}  // namespace moeflow
