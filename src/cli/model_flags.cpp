#include "cli/model_flags.h"

#include <unistd.h>

#include <filesystem>
#include <cstdio>
#include <cstdlib>

#include "backend/activation_precision.h"
#include "base/error.h"
#include "base/hardware_threads.h"
#include "engine/model_loading.h"

#ifndef MOEFLOW_SOURCE_DIR
#define MOEFLOW_SOURCE_DIR "."
#endif

namespace moeflow::cli {

void add_model_flags(Args& a) {
  a.flag("-m,--model", "GGUF model file (default: the built-in model)");
  a.flag("--backend", "where the model computes: cpu, or cuda / cuda:N (weights, KV cache and expert cache in GPU "
                      "memory; needs a build with the CUDA toolkit)", true, "cpu");
  a.flag("-t,--threads", "worker threads", true, std::to_string(hardware_threads()));
  a.flag("-c,--ctx-size", "context size in tokens (0: the model's, at most 4096)", true, "0");
  a.flag("--mmap", "compute from the file mapping instead of copying the weights into memory first "
                   "(starts faster; page-cache pages: a q8_0 mat-vec alone read 26 against 44 GB/s)", false);
  a.flag("--kv-type", "KV cache elements: f32, f16, q8_0 (int8 with a scale per 32 elements: 0.56x f16's memory "
                      "and reads at long context; CPU backend), or auto (f16 when the model's key and value projections are "
                      "q8_0 / q4_0, whose rounding exceeds f16's; f32 otherwise)", true, "auto");
  a.flag("--swa-full", "keep every position of sliding-window layers (gpt-oss) in the KV cache, as the other layers "
                      "do; by default they keep only their window (half gpt-oss's KV memory at long context; serve "
                      "keeps every position while its prompt cache is on)", false);
  a.flag("--no-repack", "keep q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, iq4_xs, Q4_K, Q5_K and Q6_K weights in GGUF's row layout "
                        "in memory (by default, on CPUs with AVX-512 VNNI, their rows are interleaved in fours for the faster kernels; all "
                        "but q4_0 and q8_0 on int8 activations only)", false);
  a.flag("--activations", "precision of the activations that interleaved q4_0 / q8_0 rows, k-quant rows and iq4_nl / "
                          "iq4_xs / mxfp4 rows multiply, in decode and prefill: auto (int8 for q4_0, q4_1, q5_0, q5_1, "
                          "k-quant, iq4 and mxfp4 weights, whose own rounding is coarser; int16 for q8_0), int16 (within "
                          "~2e-5 of f32; q4_1 / q5_0 / q5_1, iq4 and mxfp4 then on f32) or int8 (llama.cpp's q8_0 activations, or its q8_K for k-quant and "
                          "iq4_xs weights on AVX2 CPUs without VNNI; faster batched decoding and prefill where arithmetic "
                          "limits them)", true, "auto");
}

std::string default_model_path() {
  const char* env = std::getenv("MOEFLOW_DEFAULT_MODEL");
  if (env && *env) return env;
  const std::filesystem::path p = std::filesystem::path(MOEFLOW_SOURCE_DIR) / "models" / "default.gguf";
  return std::filesystem::exists(p) ? p.string() : "";
}

EngineOptions engine_options_from_flags(const Args& a, const std::string& policy) {
  EngineOptions o;
  if (a.has("--model") && a.str("--model").empty()) throw UsageError("-m/--model: empty path");
  o.model_path = a.str("--model");
  if (o.model_path.empty()) o.model_path = default_model_path();
  if (o.model_path.empty())
    throw UsageError("no model given and no built-in default found: pass -m model.gguf (or set MOEFLOW_DEFAULT_MODEL)");
  o.threads = static_cast<int>(a.integer("--threads", 1, 256));
  o.backend = a.str("--backend");
  o.ctx_size = a.integer("--ctx-size", 0, 1 << 20);
  o.kv_type = a.str("--kv-type");
  if (o.kv_type != "auto" && o.kv_type != "f32" && o.kv_type != "f16" && o.kv_type != "q8_0")
    throw UsageError("--kv-type '" + o.kv_type + "': expected f32, f16, q8_0 or auto");
  o.mmap = a.has("--mmap");
  o.swa_full = a.has("--swa-full");
  o.repack = !a.has("--no-repack");  // where the backend interleaves rows at all
  o.activations = a.str("--activations");
  try {
    parse_activation_precision(o.activations);  // the engine's check, as a usage error here
  } catch (const InputError& e) {
    throw UsageError(std::string("--") + e.what());
  }
  o.policy = policy;
  if (!a.declared("--expert-budget")) return o;  // a command without the offloading flags
  if (a.has("--expert-budget")) o.expert_budget = a.str("--expert-budget");
  o.on_miss = a.str("--on-miss");
  o.io_threads = static_cast<int>(a.integer("--io-threads", 1, 64));
  if (a.has("--policy-state")) o.policy_state = a.str("--policy-state");
  if (a.has("--tasks")) o.tasks_path = a.str("--tasks");
  o.emoe_variant = a.str("--emoe-variant");
  o.emoe_top_l = static_cast<int32_t>(a.integer("--emoe-top-l", 0, 1 << 20));
  return o;
}

std::string model_name(const Model& model) {
  if (const gguf::Value* v = model.file().find("general.name"); v && v->type == gguf::ValueType::STRING && !v->s.empty())
    return v->s;
  std::string p = model.file().path();
  if (const size_t slash = p.find_last_of('/'); slash != std::string::npos) p = p.substr(slash + 1);
  if (const size_t dot = p.rfind('.'); dot != std::string::npos && dot > 0) p = p.substr(0, dot);
  return p;
}

}  // namespace moeflow::cli
