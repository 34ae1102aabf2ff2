// A fixed-capacity collection of activation patterns kept diverse (MoE-Infinity App.
// B.1): MoE-Infinity's EAM collection and adaptive's stored request EAMs.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

namespace moeflow {

// Adds e to `store` (at most `capacity` entries, capacity >= 1); when it is full, e
// replaces the entry most similar to it (the first of equals), so the newest pattern
// stays and so does the collection's diversity. similarity(stored, e) -> double.
template <class T, class Similarity>
void insert_replacing_most_similar(std::vector<T>& store, size_t capacity, T e, Similarity similarity) {
  if (store.size() < capacity) {
    store.push_back(std::move(e));
    return;
  }
  size_t best = 0;
  double best_sim = -1;
  for (size_t i = 0; i < store.size(); ++i) {
    const double s = similarity(store[i], e);
    if (s > best_sim) best_sim = s, best = i;
  }
  store[best] = std::move(e);
}

}  // namespace moeflow
