// Element-wise and normalisation ops on f32 activations. Small, memory-bound,
// single-threaded per call (the callers parallelise over tokens or heads).
#pragma once
#include <cstdint>

namespace moeflow::cpu {

// y = x / sqrt(mean(x^2) + eps) * w   (w may be null: no scale). y may alias x.
// SIMD, the sum of squares in double (rmsnorm.cpp).
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);
// The same one element at a time: the definition rmsnorm is tested against.
void rmsnorm_reference(const float* x, const float* w, float* y, int64_t n, float eps);
// Numerically stable softmax in place.
void softmax(float* x, int64_t n);
// out[i] = silu(gate[i]) * up[i]. out may alias gate. SIMD (swiglu.cpp; the exp of
// every expert hidden unit of every token is a visible share of a decode step).
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// The same in scalar code with std::exp: the definition swiglu is tested against.
void swiglu_reference(const float* gate, const float* up, float* out, int64_t n);
// Rotary embedding on one head vector of size head_dim (rot_dim <= head_dim dims rotated).
// neox=false: pairs (2i, 2i+1) (llama/Mixtral); neox=true: pairs (i, i + rot_dim/2)
// (Qwen, OLMoE). theta_i = pos * base^(-2i/rot_dim).
void rope(float* head, int64_t head_dim, int64_t rot_dim, int64_t pos, float freq_base, bool neox);
// rope in two steps, so that every head of every layer at one position shares the
// angles: cs[2i] = cos(theta_i), cs[2i+1] = sin(theta_i) for i < rot_dim/2 ...
void rope_angles(int64_t pos, int64_t rot_dim, float freq_base, float* cs);
// ... then the rotation of one head by them.
void rope_apply(float* head, int64_t rot_dim, const float* cs, bool neox);

}  // namespace moeflow::cpu
