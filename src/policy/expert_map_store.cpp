#include "policy/expert_map_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <istream>
#include <ostream>
#include <string>

#include "base/error.h"
#include "policy/binary_io.h"

namespace moeflow {

namespace {

constexpr char kMagic[8] = {'F', 'M', 'O', 'E', 'M', 'A', 'P', 'S'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxSemDim = 1u << 20;

template <class T>
void put(std::ostream& out, T v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_floats(std::ostream& out, const std::vector<float>& v) {
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

[[noreturn]] void bad(const std::string& what) { throw InputError("fmoe state: " + what); }

template <class T>
T get(std::istream& in, const char* field) {
  T v{};
  if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) bad(std::string("truncated file while reading ") + field);
  return v;
}
void get_floats(std::istream& in, std::vector<float>& v, const std::string& field) {
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float))))
    bad("truncated file while reading " + field);
  for (float f : v)
    if (!std::isfinite(f)) bad(field + " holds a non-finite value");
}

}  // namespace

double cosine(const float* a, const float* b, size_t n) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < n; ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0.0;
}

ExpertMapStore::ExpertMapStore(int32_t n_layer, int32_t n_expert, size_t capacity, int32_t distance)
    : n_layer_(n_layer), n_expert_(n_expert), capacity_(capacity), distance_(distance) {}

static double sem_score(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() ? cosine(a.data(), b.data(), a.size()) : 0.0;
}

double ExpertMapStore::redundancy(const ExpertMap& a, const ExpertMap& b) const {
  // §4.4: the two searches guide d and L − d layers, so their scores weigh the same.
  const double d = std::min(distance_, n_layer_), L = n_layer_;
  return d / L * sem_score(a.sem, b.sem) + (L - d) / L * cosine(a.probs.data(), b.probs.data(), a.probs.size());
}

size_t ExpertMapStore::add(ExpertMap m) {
  if (maps_.size() < capacity_) {
    maps_.push_back(std::move(m));
    return maps_.size() - 1;
  }
  // Full: the new iteration takes the place of the old one it makes most redundant.
  size_t worst = 0;
  double best = -2;
  for (size_t y = 0; y < maps_.size(); ++y) {
    const double r = redundancy(m, maps_[y]);
    if (r > best) best = r, worst = y;
  }
  if (!maps_.empty()) maps_[worst] = std::move(m);
  return worst;
}

MapMatch ExpertMapStore::search_semantic(const std::vector<float>& sem) const {
  MapMatch best;
  bool nonzero = false;
  for (float f : sem) nonzero |= f != 0;
  if (!nonzero) return best;
  for (size_t y = 0; y < maps_.size(); ++y) {
    if (maps_[y].sem.size() != sem.size()) continue;
    const double s = sem_score(sem, maps_[y].sem);
    if (!best.found || s >= best.score) best.found = true, best.index = static_cast<int64_t>(y), best.score = s;
  }
  if (best.found) best.probs = maps_[static_cast<size_t>(best.index)].probs;
  return best;
}

MapMatch ExpertMapStore::search_trajectory(const std::vector<float>& partial, int32_t layers) const {
  MapMatch best;
  const size_t n = static_cast<size_t>(std::min(layers, n_layer_)) * static_cast<size_t>(n_expert_);
  if (n == 0 || partial.size() < n) return best;
  for (size_t y = 0; y < maps_.size(); ++y) {
    const double s = cosine(partial.data(), maps_[y].probs.data(), n);
    if (!best.found || s >= best.score) best.found = true, best.index = static_cast<int64_t>(y), best.score = s;
  }
  if (best.found) best.probs = maps_[static_cast<size_t>(best.index)].probs;
  return best;
}

void ExpertMapStore::save(std::ostream& out) const {
  out.write(kMagic, sizeof kMagic);
  put(out, kVersion);
  put(out, n_layer_);
  put(out, n_expert_);
  put(out, static_cast<uint64_t>(capacity_));
  put(out, distance_);
  put(out, static_cast<uint64_t>(maps_.size()));
  for (const ExpertMap& m : maps_) {
    put(out, static_cast<uint64_t>(m.sem.size()));
    put_floats(out, m.sem);
    put_floats(out, m.probs);
  }
}

void ExpertMapStore::load(std::istream& in) {
  char magic[sizeof kMagic];
  if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    bad("not an fmoe expert map store (bad magic)");
  if (const auto v = get<uint32_t>(in, "version"); v != kVersion)
    bad("unsupported version " + std::to_string(v) + " (expected " + std::to_string(kVersion) + ")");
  const auto nl = get<int32_t>(in, "n_layer"), ne = get<int32_t>(in, "n_expert");
  if (nl != n_layer_ || ne != n_expert_)
    bad("made for " + std::to_string(nl) + " layers x " + std::to_string(ne) + " experts, this model has " +
        std::to_string(n_layer_) + " x " + std::to_string(n_expert_));
  const auto cap = get<uint64_t>(in, "capacity");
  const auto dist = get<int32_t>(in, "distance");
  if (cap != capacity_ || dist != distance_)
    bad("made with capacity " + std::to_string(cap) + " and prefetch distance " + std::to_string(dist) +
        ", this policy uses " + std::to_string(capacity_) + " and " + std::to_string(distance_));
  const auto count = get<uint64_t>(in, "map count");
  if (count > capacity_) bad("holds " + std::to_string(count) + " maps, more than its capacity " + std::to_string(cap));
  std::vector<ExpertMap> maps(count);
  for (uint64_t i = 0; i < count; ++i) {
    const std::string at = "map " + std::to_string(i);
    const auto dim = get<uint64_t>(in, "embedding size");
    if (dim > kMaxSemDim) bad(at + ": embedding size " + std::to_string(dim) + " is implausible");
    const uint64_t need = (dim + static_cast<uint64_t>(n_layer_) * static_cast<uint64_t>(n_expert_)) * sizeof(float);
    if (need > binio::bytes_left(in))
      bad("truncated file: " + at + " needs " + std::to_string(need) + " more bytes");
    maps[i].sem.resize(dim);
    get_floats(in, maps[i].sem, at + " embedding");
    maps[i].probs.resize(static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_));
    get_floats(in, maps[i].probs, at + " probabilities");
    for (float p : maps[i].probs)
      if (p < 0 || p > 1.0001f) bad(at + " holds a probability outside [0, 1]");
  }
  if (in.peek() != std::char_traits<char>::eof()) bad("trailing bytes after " + std::to_string(count) + " maps");
  maps_ = std::move(maps);
}

}  // namespace moeflow
