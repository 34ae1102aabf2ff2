// Where every expert's bytes live in the model file: the gate/up/down slices of the
// stacked expert tensors, in the file's own dtype. The cache copies an expert into one
// fast-tier buffer laid out as three direct-I/O-aligned spans (one per projection), so
// a transfer is three aligned preads and the matrices are used in place.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_key.h"
#include "model/model_weights.h"

namespace moeflow {

// Alignment of file offsets, lengths and buffers for O_DIRECT (covers 512 B and 4 KiB
// logical blocks).
constexpr uint64_t kDirectIoAlign = 4096;

struct ExpertPart {
  uint64_t file_offset = 0;  // absolute offset of the slice in the model file
  uint64_t bytes = 0;        // slice length
  uint64_t span_begin = 0;   // aligned file range read for it: [span_begin, span_end)
  uint64_t span_end = 0;
  uint64_t buffer_offset = 0;  // where span_begin lands in the expert's buffer
  MatrixRef shape;           // dtype (the file's), the layout its rows take once read
                             // (ExpertStore::prepare), rows, cols (data unset)
  // Where the slice starts inside the expert's buffer.
  uint64_t data_offset() const { return buffer_offset + (file_offset - span_begin); }
};

class ExpertStore {
 public:
  // With a placer (the backend, unless --no-repack), each part takes the row layout
  // the placer chooses once read (prepare), as in Model::make_resident; without, the
  // file's. The placer must outlive the store.
  explicit ExpertStore(const Model& model, const WeightPlacer* placer = nullptr);

  const std::string& path() const { return path_; }
  const ExpertGeometry& geometry() const { return geometry_; }
  // gate, up, down
  const std::array<ExpertPart, 3>& parts(const ExpertKey& k) const { return parts_[static_cast<size_t>(geometry_.index(k))]; }
  // Buffer size of one expert (sum of its aligned spans; what the cache budgets).
  uint64_t buffer_bytes(const ExpertKey& k) const { return geometry_.bytes_of(k); }
  // Bytes of the expert as stored (without alignment padding).
  uint64_t file_bytes(const ExpertKey& k) const;
  uint64_t total_file_bytes() const { return total_file_bytes_; }
  // Called by the transport once an expert's spans are in its buffer: puts parts whose
  // layout is not the file's into it, in place. Thread-safe (per-thread scratch).
  void prepare(const ExpertKey& k, uint8_t* buf) const;
  // The matrices of an expert whose buffer starts at `buf` (prepared).
  ExpertMatrices matrices(const ExpertKey& k, const uint8_t* buf) const;
  // The matrices of an expert read straight from the file mapping (no cache).
  ExpertMatrices mapped(const ExpertKey& k) const;

 private:
  const Model& model_;
  const WeightPlacer* placer_;
  std::string path_;
  ExpertGeometry geometry_;
  std::vector<std::array<ExpertPart, 3>> parts_;
  uint64_t total_file_bytes_ = 0;
};

}  // namespace moeflow
