// Finding NaN and infinities in weights as stored in a file, before they turn every
// activation into NaN and a run "succeeds" with token 0 repeated. Float types are
// checked element by element; q8_0 / q4_0 only through their f16 block scales (their
// int8 / 4-bit quants are always finite), which costs one 2-byte read per 32 weights.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace moeflow {

// Index of the first element whose value (or whose block's scale) is NaN or infinite,
// or -1 when all are finite. `n` elements of file dtype `t` (REQUIRES n % block_size == 0).
int64_t first_non_finite(DType t, const void* data, int64_t n);

}  // namespace moeflow
