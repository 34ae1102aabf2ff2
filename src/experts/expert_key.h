// Names an expert and the routing decision of one layer: the vocabulary shared by the
// expert store, the cache, the policies, the trace recorder and the simulator.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace moeflow {

struct ExpertKey {
  int32_t layer = 0;
  int32_t expert = 0;
  friend bool operator==(const ExpertKey& a, const ExpertKey& b) {
    return a.layer == b.layer && a.expert == b.expert;
  }
  friend bool operator<(const ExpertKey& a, const ExpertKey& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.expert < b.expert;
  }
};

// Prefill evaluates the prompt (one or more chunks); decode evaluates one new token.
enum class Phase { Prefill, Decode };
inline const char* phase_name(Phase p) { return p == Phase::Prefill ? "prefill" : "decode"; }

// Router output of one layer for a block of tokens.
struct LayerRouting {
  int64_t layer = 0;
  int64_t n_tok = 0, n_expert = 0, top_k = 0;
  std::vector<int32_t> experts;   // [n_tok][top_k], best first
  std::vector<float> weights;     // [n_tok][top_k], as applied (renormalised or not); may be empty in traces
  std::vector<float> probs;       // [n_tok][n_expert], full softmax; may be empty in traces
  // [n_tok]: the request (sequence) each token belongs to; empty: one request. A
  // step of the engine may carry tokens of several requests.
  std::vector<int64_t> requests;
  // Lookahead routing (optional): the top-k ids, best first, that the routers of layers
  // layer+1 .. layer+lookahead_depth pick when applied to this layer's MoE input (each
  // with its own layer's norm). [n_tok][lookahead_depth][top_k]; empty (depth 0) when
  // nobody asked for it, at the last layer, or when a trace does not carry it. Never
  // wraps into the next token's layers (their input is not known yet).
  int64_t lookahead_depth = 0;
  std::vector<int32_t> lookahead = {};
  // The ids layer layer+h (1 <= h <= lookahead_depth) would give token t.
  const int32_t* lookahead_of(int64_t t, int64_t h) const {
    return lookahead.data() + (t * lookahead_depth + (h - 1)) * top_k;
  }
  // The step's semantic embeddings (optional; fMoE's Eq. 4): per request of the step,
  // the embedding-layer output of its tokens in this step, averaged over them (a
  // decode step: the new token's embedding row; a prefill chunk: the mean of its
  // rows). Only with the step's first MoE layer, and only when someone asked for it
  // (ExpertPolicy::wants_embedding); traces carry it projected to fewer dimensions,
  // or not at all.
  struct StepEmbedding {
    int64_t request = 0;
    std::vector<float> values;
  };
  std::vector<StepEmbedding> embeddings = {};
};

// Counts, sizes and byte costs of every expert of a model: all the cache and the
// simulator need to know about a model's experts.
struct ExpertGeometry {
  int32_t n_layer = 0;
  int32_t n_expert = 0;
  int32_t top_k = 0;
  std::vector<uint64_t> bytes;  // [n_layer * n_expert]: fast-tier bytes one expert occupies

  int64_t index(const ExpertKey& k) const { return static_cast<int64_t>(k.layer) * n_expert + k.expert; }
  uint64_t bytes_of(const ExpertKey& k) const { return bytes[static_cast<size_t>(index(k))]; }
  uint64_t total_bytes() const {
    uint64_t s = 0;
    for (uint64_t b : bytes) s += b;
    return s;
  }
  // The smallest budget that can run the model: the top_k largest experts of the
  // layer that needs most (one token's experts of one layer must be resident at once).
  uint64_t min_budget() const;
  // Same sizes for every expert (a model profile without a file).
  static ExpertGeometry uniform(int32_t n_layer, int32_t n_expert, int32_t top_k, uint64_t bytes_per_expert);
};

}  // namespace moeflow

template <>
struct std::hash<moeflow::ExpertKey> {
  size_t operator()(const moeflow::ExpertKey& k) const noexcept {
    return std::hash<int64_t>()((static_cast<int64_t>(k.layer) << 32) | static_cast<uint32_t>(k.expert));
  }
};
