// The walk a multi-token mat-vec kernel takes over a matrix in GGUF's row layout: rows
// four at a time (the rest one by one), each group against the tokens four at a time,
// so a group's rows are unpacked once per four tokens and stay in cache between passes.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

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

// The same walk for a kernel that takes one row against up to kTileTokens tokens:
// row_tokens(std::integral_constant<int, T>{}, row, t0, y, pf) puts the row's products
// with tokens [t0, t0 + T) into y[0, T), prefetching from pf (null: none); each row of
// a tile's first pass prefetches its row eight on.
template <class RowTokens>
inline void for_row_tokens(const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int n_tok, float* const* outs,
                           const uint8_t* pf_end, RowTokens&& row_tokens) {
  for_row_token_tiles(W, rb, r0, r1, n_tok, outs, pf_end,
                      [&](const uint8_t* const* rows, int nr, int t0, int nt, float* const* o, const uint8_t* pf) {
                        float y[kTileTokens];
                        for (int i = 0; i < nr; ++i) {
                          const uint8_t* p = pf ? pf + rb * static_cast<size_t>(i) : nullptr;
                          switch (nt) {
                            case 1: row_tokens(std::integral_constant<int, 1>{}, rows[i], t0, y, p); break;
                            case 2: row_tokens(std::integral_constant<int, 2>{}, rows[i], t0, y, p); break;
                            case 3: row_tokens(std::integral_constant<int, 3>{}, rows[i], t0, y, p); break;
                            default: row_tokens(std::integral_constant<int, 4>{}, rows[i], t0, y, p); break;
                          }
                          for (int k = 0; k < nt; ++k) o[k][i] = y[k];
                        }
                      });
}

}  // namespace moeflow::cpu
