// gpt-oss's clamped SwiGLU (GptOssExperts in Hugging Face's modeling_gpt_oss.py,
// ggml_swiglu_oai in llama.cpp): g = min(gate, limit), u = clamp(up, -limit, limit),
// out = (u + 1) * g * sigmoid(alpha * g).
#pragma once
#include <cstdint>

namespace moeflow::cpu {

// The constants of both released gpt-oss models (config swiglu_limit; alpha is fixed
// in the modeling code; llama.cpp writes neither into the GGUF).
constexpr float kSwigluOaiAlpha = 1.702f;
constexpr float kSwigluOaiLimit = 7.0f;

// out[i] for i < n; out may alias gate. SIMD (Highway).
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n);
// The same in scalar code with std::exp: the definition swiglu_oai is tested against.
void swiglu_oai_reference(const float* gate, const float* up, float* out, int64_t n);

}  // namespace moeflow::cpu
