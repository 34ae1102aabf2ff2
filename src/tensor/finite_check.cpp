#include "tensor/finite_check.h"

#include <cstring>

namespace moeflow {

namespace {

// A block-at-a-time OR of "exponent all ones" flags (vectorises), then a scalar pass
// over the block that has one to find its index.
template <class Bits, class IsBad>
int64_t scan(const uint8_t* p, int64_t n, size_t stride, IsBad is_bad) {
  constexpr int64_t kBlock = 256;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = b + kBlock < n ? b + kBlock : n;
    bool any = false;
    for (int64_t i = b; i < e; ++i) {
      Bits v;
      std::memcpy(&v, p + static_cast<size_t>(i) * stride, sizeof v);
      any |= is_bad(v);
    }
    if (!any) continue;
    for (int64_t i = b; i < e; ++i) {
      Bits v;
      std::memcpy(&v, p + static_cast<size_t>(i) * stride, sizeof v);
      if (is_bad(v)) return i;
    }
  }
  return -1;
}

bool f32_bad(uint32_t v) { return (v & 0x7f800000u) == 0x7f800000u; }
bool f16_bad(uint16_t v) { return (v & 0x7c00u) == 0x7c00u; }
bool bf16_bad(uint16_t v) { return (v & 0x7f80u) == 0x7f80u; }

}  // namespace

int64_t first_non_finite(DType t, const void* data, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  switch (t) {
    case DType::F32: return scan<uint32_t>(p, n, 4, f32_bad);
    case DType::F16: return scan<uint16_t>(p, n, 2, f16_bad);
    case DType::BF16: return scan<uint16_t>(p, n, 2, bf16_bad);
    case DType::Q8_0: {
      const int64_t b = scan<uint16_t>(p, n / 32, sizeof(BlockQ8_0), f16_bad);
      return b < 0 ? -1 : b * 32;
    }
    case DType::Q4_0: {
      const int64_t b = scan<uint16_t>(p, n / 32, sizeof(BlockQ4_0), f16_bad);
      return b < 0 ? -1 : b * 32;
    }
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1: {  // d, and Q4_1's / Q5_1's minimum m after it
      const size_t bytes = static_cast<size_t>(dtype_info(t).type_size);
      int64_t b = scan<uint16_t>(p, n / 32, bytes, f16_bad);
      if (t != DType::Q5_0) {
        const int64_t bm = scan<uint16_t>(p + 2, b < 0 ? n / 32 : b, bytes, f16_bad);
        if (bm >= 0) b = bm;
      }
      return b < 0 ? -1 : b * 32;
    }
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S: {  // the super-block's d first (IQ1_M's is spread over its scales)
      const int64_t b = scan<uint16_t>(p, n / 256, static_cast<size_t>(dtype_info(t).type_size), f16_bad);
      return b < 0 ? -1 : b * 256;
    }
    default: return -1;  // in-memory layouts are made from checked file data
  }
}

}  // namespace moeflow
