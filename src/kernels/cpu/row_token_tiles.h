// The walk a multi-token mat-vec kernel takes over a matrix in GGUF's row layout: rows
// four at a time (the rest one by one), each group against the tokens four at a time,
// so a group's rows are unpacked once per four tokens and stay in cache between passes.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace moeflow::cpu {

inline constexpr int kTileRows = 4, kTileTokens = 4;

// Rows [r0, r1) of a matrix (row r at W + r * rb) against n_tok tokens: calls
// tile(rows, nr, t0, nt, outs_of_tile, pf) for each group of nr rows (kTileRows or 1)
// and tokens [t0, t0 + nt), outs_of_tile[t] = outs[t0 + t] + the group's first row.
// Only the first pass over a group prefetches (pf: the rows eight on, null past
// pf_end); the others read the rows from cache.
template <class Tile>
inline void for_row_token_tiles(const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int n_tok, float* const* outs,
                                const uint8_t* pf_end, Tile&& tile) {
  for (int64_t r = r0; r < r1;) {
    const int nr = r1 - r >= kTileRows ? kTileRows : 1;
    const uint8_t* rows[kTileRows];
    for (int i = 0; i < nr; ++i) rows[i] = W + rb * static_cast<size_t>(r + i);
    const uint8_t* ahead = W + rb * static_cast<size_t>(r + 8);
    for (int t0 = 0; t0 < n_tok; t0 += kTileTokens) {
      const int nt = std::min(kTileTokens, n_tok - t0);
      float* o[kTileTokens];
      for (int t = 0; t < nt; ++t) o[t] = outs[t0 + t] + r;
      tile(rows, nr, t0, nt, o, t0 == 0 && ahead + rb * nr <= pf_end ? ahead : nullptr);
    }
    r += nr;
  }
}

}  // namespace moeflow::cpu
