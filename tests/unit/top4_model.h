// A top-4-of-8 synthetic model with 128 x 128 experts, large enough for the CPU
// backend's expert-per-thread decode path (its 2^15 multiply-add threshold).
#pragma once
#include <string>

#include "model/synthetic_model.h"
#include "test_paths.h"

namespace moeflow::testing {

// Written to a scratch file named after `name`; its path. t: the weights' type, or
// MXFP4 for gpt-oss with mxfp4 experts (biases on the three projections, the clamped
// SwiGLU) and q8_0 elsewhere.
inline std::string write_top4_model(DType t, const std::string& name) {
  SyntheticModelSpec spec;
  spec.dtype = t;
  if (t == DType::MXFP4) {
    spec.arch = Arch::GptOss;
    spec.dtype = DType::Q8_0;
    spec.expert_dtype = DType::MXFP4;
  }
  spec.n_embd = 128;
  spec.n_ff_expert = 128;
  spec.head_dim = 32;
  spec.n_expert_used = 4;
  const std::string path = scratch_path(name) + ".gguf";
  write_synthetic_model(spec, path);
  return path;
}

}  // namespace moeflow::testing
