#include "sim/profiles.h"

#include <cstdlib>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/input_file.h"
#include "base/json_fields.h"

namespace moeflow {

namespace {

using nlohmann::json;

std::string resolve(const std::string& name_or_path, const char* kind) {
  const bool json_file =
      name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0;
  if (name_or_path.find('/') != std::string::npos || json_file)
    return name_or_path;
  return profiles_dir() + "/" + kind + "/" + name_or_path + ".json";
}

json read_json(const std::string& path, const char* kind) {
  std::error_code exists_ec;
  if (!std::filesystem::exists(path, exists_ec)) {
    std::string known;
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().extension() == ".json") known += (known.empty() ? "" : ", ") + e.path().stem().string();
    throw InputError(std::string("cannot open ") + kind + " profile " + path +
                     (known.empty() ? "" : " (known: " + known + ")"));
  }
  std::ifstream in = open_input_file(path, std::string(kind) + " profile");
  try {
    json j = json::parse(in);
    if (!j.is_object()) throw InputError(path + ": a profile must be a JSON object");
    return j;
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number such as 1e400
    throw InputError(path + ": not valid JSON: " + e.what());
  }
}

std::string name_field(const json& j, const std::string& dflt, const std::string& path) {
  auto it = j.find("name");
  if (it == j.end()) return dflt;
  if (!it->is_string()) throw InputError(path + ": field \"name\" must be a string");
  return it->get<std::string>();
}

double number(const json& j, const char* key, const std::string& path, double lo, double hi) {
  return json_number(j, key, path, lo, hi);
}

}  // namespace

std::string profiles_dir() {
  if (const char* env = std::getenv("MOEFLOW_PROFILES"); env && *env) return env;
  return MOEFLOW_SOURCE_DIR "/profiles";
}

HardwareProfile load_hardware_profile(const std::string& name_or_path) {
  const std::string path = resolve(name_or_path, "hw");
  const json j = read_json(path, "hardware");
  HardwareProfile h;
  json_check_fields(j, path, "hardware", {"name", "bandwidth_gbs", "latency_us", "copy_engines", "chunk_kib"});
  h.name = name_field(j, name_or_path, path);
  h.link.bandwidth_bytes_per_s = number(j, "bandwidth_gbs", path, 1e-6, 1e6) * 1e9;
  h.link.latency_s = number(j, "latency_us", path, 0, 1e9) * 1e-6;
  h.link.copy_engines = static_cast<int>(json_integer(j, "copy_engines", path, 1, 64));
  // Optional: copies move in chunks of this size and a demand pre-empts a prefetch
  // at a chunk boundary (absent: copies are whole).
  if (j.contains("chunk_kib")) h.link.chunk_bytes = static_cast<uint64_t>(number(j, "chunk_kib", path, 4, 1 << 30) * 1024.0);
  return h;
}

ModelProfile load_model_profile(const std::string& name_or_path) {
  const std::string path = resolve(name_or_path, "models");
  const json j = read_json(path, "model");
  ModelProfile m;
  json_check_fields(j, path, "model",
                    {"name", "n_layer", "n_expert", "top_k", "expert_bytes", "dense_seconds_per_layer",
                     "dense_seconds_per_layer_token", "expert_seconds", "expert_seconds_per_token", "predictor_seconds",
                     "fmoe_semantic_seconds", "fmoe_trajectory_seconds", "fmoe_insert_seconds", "hidden_size"});
  m.name = name_field(j, name_or_path, path);
  m.n_layer = static_cast<int32_t>(json_integer(j, "n_layer", path, 1, 1 << 16));
  m.n_expert = static_cast<int32_t>(json_integer(j, "n_expert", path, 1, 1 << 16));
  m.top_k = static_cast<int32_t>(json_integer(j, "top_k", path, 1, m.n_expert));
  m.expert_bytes = static_cast<uint64_t>(json_integer(j, "expert_bytes", path, 1, 1e15));
  m.dense_seconds_per_layer = number(j, "dense_seconds_per_layer", path, 0, 1e3);
  m.dense_seconds_per_layer_token = number(j, "dense_seconds_per_layer_token", path, 0, 1e3);
  m.expert_seconds = number(j, "expert_seconds", path, 0, 1e3);
  m.expert_seconds_per_token = number(j, "expert_seconds_per_token", path, 0, 1e3);
  if (j.contains("predictor_seconds")) m.predictor_seconds = number(j, "predictor_seconds", path, 0, 1);
  if (j.contains("fmoe_semantic_seconds")) m.fmoe_semantic_seconds = number(j, "fmoe_semantic_seconds", path, 0, 1);
  if (j.contains("fmoe_trajectory_seconds"))
    m.fmoe_trajectory_seconds = number(j, "fmoe_trajectory_seconds", path, 0, 1);
  if (j.contains("fmoe_insert_seconds")) m.fmoe_insert_seconds = number(j, "fmoe_insert_seconds", path, 0, 1);
  if (j.contains("hidden_size")) m.hidden_size = static_cast<int32_t>(json_integer(j, "hidden_size", path, 1, 1 << 20));
  return m;
}

namespace {
// The trace's "model" field is data, not a path: only a plain profile name (letters,
// digits, '.', '_', '-', not starting with '.') is looked up in the profiles folder.
bool plain_profile_name(const std::string& s) {
  if (s.empty() || s[0] == '.' || s.size() > 128) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}
}  // namespace

std::string model_profile_for_trace_model(const std::string& model) {
  if (model.empty()) throw InputError("the trace names no model (its records have no \"model\" field): give --model-profile NAME|FILE");
  if (model.find("mixtral-8x7b") != std::string::npos) return "mixtral-8x7b";
  if (model.find("flame-moe-290m") != std::string::npos) return "flame-moe-290m";
  if (plain_profile_name(model) && std::filesystem::is_regular_file(profiles_dir() + "/models/" + model + ".json"))
    return model;
  throw InputError("no model profile known for the trace's model '" + model + "': give --model-profile NAME|FILE");
}

}  // namespace moeflow
