// Which activations the integer kernels multiply a matrix's weights with
// (EngineOptions::activations, --activations).
#pragma once
#include <string>

#include "base/error.h"
#include "tensor/dtype.h"

namespace moeflow {

enum class ActivationPrecision {
  Int16,  // every block of 32 in int16 (products within ~2e-5 of f32)
  Int8,   // int8 per 32 columns, as llama.cpp's q8_0 activations (~4e-3 per product); per 256 for the
          // k-quants and iq4_xs on AVX2 CPUs without VNNI, as its q8_K (int8_avx2.h)
  Auto,   // int8 where the weights round coarser than int8 does, int16 for q8_0 weights
};

inline ActivationPrecision parse_activation_precision(const std::string& s) {
  if (s == "auto") return ActivationPrecision::Auto;
  if (s == "int16") return ActivationPrecision::Int16;
  if (s == "int8") return ActivationPrecision::Int8;
  throw InputError("activations '" + s + "': expected auto, int16 or int8");
}

// Auto: a q4_0 or k-quant weight's step is 1/8 to 1/32 of its block's range, an int8
// activation's 1/254, so int8 adds little to the weights' own error (built-in model,
// q4_0: +0.04% perplexity against +0.43% for the q4_0 weights themselves,
// docs/performance.md) and halves the batched step's arithmetic. q8_0 weights round
// as finely as int8 activations would, so they keep int16. IQ4_NL, IQ4_XS and MXFP4
// (4-bit levels) round as coarsely as q4_0 and have an int8 kernel only (nl4_vnni.h:
// on int16 they take the f32 path). Other types never read integer activations.
inline bool int8_activations_for(ActivationPrecision p, DType weights) {
  return p == ActivationPrecision::Int8 || (p == ActivationPrecision::Auto && weights != DType::Q8_0);
}

}  // namespace moeflow
