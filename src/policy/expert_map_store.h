// fMoE's Expert Map Store (fmoe.txt §3.2, §4.1, §4.2, §4.4): expert maps of past
// iterations (the gate distribution of every layer) with the semantic embedding of
// their input, searched by cosine similarity and kept diverse by replacing the most
// redundant map once the store is full.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <vector>

namespace moeflow {

struct ExpertMap {
  std::vector<float> sem;    // semantic embedding of the iteration's input (may be empty)
  std::vector<float> probs;  // [n_layer][n_expert] gate probabilities (§4.1)
};

// A search result: which map matched, how well, and a copy of its probabilities (the
// store may replace the map while the caller still uses the result).
struct MapMatch {
  bool found = false;
  int64_t index = -1;
  double score = 0;          // cosine similarity in [-1, 1]
  std::vector<float> probs;  // [n_layer][n_expert]
};

// Cosine similarity; 0 when either vector is zero or the lengths differ.
double cosine(const float* a, const float* b, size_t n);

class ExpertMapStore {
 public:
  // `distance` is the prefetch distance d, which weights the redundancy score (§4.4).
  ExpertMapStore(int32_t n_layer, int32_t n_expert, size_t capacity, int32_t distance);

  // Step 5 (§3.2): appends the map, or once `capacity` maps are stored replaces the one
  // with the highest redundancy RDY = d/L·score_sem + (L−d)/L·score_map (§4.4).
  // Returns the slot written.
  size_t add(ExpertMap m);
  // Redundancy of two maps (§4.4).
  double redundancy(const ExpertMap& a, const ExpertMap& b) const;

  // Eq. 4: the map whose embedding is most similar to `sem` (not found when the store
  // is empty or `sem` is empty/zero).
  MapMatch search_semantic(const std::vector<float>& sem) const;
  // Eq. 5: the map most similar to `partial` over its first `layers` layers.
  // Both searches give ties to the later slot: until the store fills, the most recent
  // iteration (all iterations of a request share its embedding).
  MapMatch search_trajectory(const std::vector<float>& partial, int32_t layers) const;

  size_t size() const { return maps_.size(); }
  size_t capacity() const { return capacity_; }
  const ExpertMap& at(size_t i) const { return maps_[i]; }

  // Binary form; load() validates it against this store's shape and throws InputError.
  void save(std::ostream& out) const;
  void load(std::istream& in);

 private:
  int32_t n_layer_, n_expert_;
  size_t capacity_;
  int32_t distance_;
  std::vector<ExpertMap> maps_;
};

}  // namespace moeflow
