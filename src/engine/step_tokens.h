// The tokens of one forward step: prefill chunks and decode tokens of several
// sequences, each tagged with its position, its request (sequence) id and its
// sequence's KV block table.
#pragma once
#include <cstdint>
#include <vector>

namespace moeflow {

// REQUIRES (checked by ForwardPass::run): the tokens of one sequence are contiguous and
// in position order, and the sequences with a single token come first: tokens
// [0, n_single) are each their sequence's only token of the step. The layout lets a
// dense product run its single tokens as mat-vecs and the rest as one mat-mul, so a
// sequence gets the same floats whatever shares its step (moe_layer.h).
struct StepTokens {
  std::vector<int32_t> tokens;
  std::vector<int64_t> pos;             // position of each token in its sequence
  std::vector<int64_t> requests;        // request id of each token's sequence
  std::vector<const int32_t*> blocks;   // each token's sequence's block table (covers its position)
  // With a pool of its own for the sliding-window layers (forward_pass.h), each token's
  // block table there (entries before its window may be released); else empty.
  std::vector<const int32_t*> sliding_blocks;
  std::vector<int64_t> logits_rows;     // tokens whose logits are wanted, ascending
  int64_t n_single = 0;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  void clear() {
    tokens.clear();
    pos.clear();
    requests.clear();
    blocks.clear();
    sliding_blocks.clear();
    logits_rows.clear();
    n_single = 0;
  }
};

}  // namespace moeflow
