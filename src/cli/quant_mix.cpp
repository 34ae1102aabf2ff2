#include "cli/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace moeflow::cli {
namespace {

struct MixInfo {
  QuantMix mix;
  const char* name;
  DType base;
  uint32_t ftype;  // enum llama_ftype
};
constexpr MixInfo kMixes[] = {
    {QuantMix::Q2_K, "q2_k_mix", DType::Q2_K, 10},  {QuantMix::Q3_K_S, "q3_k_s", DType::Q3_K, 11},
    {QuantMix::Q3_K_M, "q3_k_m", DType::Q3_K, 12},  {QuantMix::Q3_K_L, "q3_k_l", DType::Q3_K, 13},
    {QuantMix::Q4_K_S, "q4_k_s", DType::Q4_K, 14},  {QuantMix::Q4_K_M, "q4_k_m", DType::Q4_K, 15},
    {QuantMix::Q5_K_S, "q5_k_s", DType::Q5_K, 16},  {QuantMix::Q5_K_M, "q5_k_m", DType::Q5_K, 17},
    {QuantMix::Q6_K, "q6_k_mix", DType::Q6_K, 18},
};
const MixInfo& info(QuantMix m) {
  for (const MixInfo& i : kMixes)
    if (i.mix == m) return i;
  return kMixes[0];
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The layer of "blk.N.<...>", or -1.
int64_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  char* end = nullptr;
  const long v = std::strtol(name.c_str() + 4, &end, 10);
  return end && *end == '.' ? v : -1;
}

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// A row that is no whole number of k-quant super-blocks takes a 32-block type.
DType fallback(DType t, int64_t cols) {
  if (!dtype_is_kquant(t) || cols % 256 == 0) return t;
  if (cols % 32 != 0) return DType::F16;
  switch (t) {
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    default: return DType::IQ4_NL;  // Q2_K, Q3_K
  }
}

}  // namespace

bool quant_mix_from_name(const std::string& name, QuantMix& out) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const MixInfo& i : kMixes)
    if (lower == i.name) {
      out = i.mix;
      return true;
    }
  return false;
}

const char* quant_mix_name(QuantMix m) { return info(m).name; }
uint32_t quant_mix_ftype(QuantMix m) { return info(m).ftype; }

DType quant_mix_tensor_type(QuantMix mix, const MixModel& m, const std::string& name, int64_t cols) {
  using Q = QuantMix;
  const DType base = info(mix).base;
  const int64_t i = std::max<int64_t>(layer_of(name), 0), n = std::max<int64_t>(m.n_layer, 1);
  const bool eight_experts = m.n_expert == 8;
  DType t = base;
  if (name == "output.weight" || (m.tied_output && name == "token_embd.weight")) {
    t = DType::Q6_K;
  } else if (contains(name, "attn_v.weight")) {
    if (mix == Q::Q2_K) t = m.n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (mix == Q::Q3_K_M) t = i < 2 ? DType::Q5_K : DType::Q4_K;
    else if (mix == Q::Q3_K_L) t = DType::Q5_K;
    else if ((mix == Q::Q4_K_M || mix == Q::Q5_K_M) && use_more_bits(i, n)) t = DType::Q6_K;
    else if (mix == Q::Q4_K_S && i < 4) t = DType::Q5_K;
    if (eight_experts) t = DType::Q8_0;
  } else if (contains(name, "attn_k.weight")) {
    if (eight_experts) t = DType::Q8_0;
  } else if (contains(name, "attn_output.weight")) {
    if (eight_experts) {
      if (mix == Q::Q2_K || mix == Q::Q3_K_S || mix == Q::Q3_K_M || mix == Q::Q4_K_S || mix == Q::Q4_K_M)
        t = DType::Q5_K;
    } else {
      if (mix == Q::Q2_K) t = DType::Q3_K;
      else if (mix == Q::Q3_K_M) t = DType::Q4_K;
      else if (mix == Q::Q3_K_L) t = DType::Q5_K;
    }
  } else if (contains(name, "ffn_down")) {  // ffn_down.weight, ffn_down_exps, ffn_down_shexp
    if (mix == Q::Q2_K) t = DType::Q3_K;
    else if (mix == Q::Q3_K_M) t = i < n / 16 ? DType::Q5_K : use_more_bits(i, n) ? DType::Q4_K : DType::Q3_K;
    else if (mix == Q::Q3_K_L) t = DType::Q5_K;
    else if ((mix == Q::Q4_K_M || mix == Q::Q5_K_M) && use_more_bits(i, n)) t = DType::Q6_K;
    else if (mix == Q::Q4_K_S && i < n / 8) t = DType::Q5_K;
  } else if (contains(name, "attn_qkv.weight")) {
    if (mix == Q::Q3_K_M || mix == Q::Q3_K_L) t = DType::Q4_K;
    else if (mix == Q::Q4_K_M) t = DType::Q5_K;
    else if (mix == Q::Q5_K_M) t = DType::Q6_K;
  }
  return fallback(t, cols);
}

}  // namespace moeflow::cli
