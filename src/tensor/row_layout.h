// How a weight matrix's rows sit in memory, apart from its element type (DType, the
// file's): in GGUF's order (each row's blocks together), or interleaved in fours for
// the CPU's VNNI kernels (tensor/rows_x4.h: q4_0 and q8_0 only). Files always hold
// GGUF's layout; the backend chooses the in-memory one when it makes the resident copy
// or fills the expert cache, and every product names both.
#pragma once
#include <cstdint>

#include <cstddef>
#include <memory>

#include "tensor/device_buffer.h"
#include "tensor/dtype.h"

namespace moeflow {

enum class RowLayout : uint8_t {
  gguf,     // row-major, each row row_bytes(dtype, cols) contiguous bytes
  rows_x4,  // rows interleaved in fours (tensor/rows_x4.h)
};

inline const char* row_layout_name(RowLayout l) { return l == RowLayout::rows_x4 ? "rows_x4" : "gguf"; }

// The backend's side of weight placement: the memory the resident weights go to, which
// layout a matrix takes there, and the copy into it. The model's resident copy and the
// expert cache ask it (the model and expert stages sit below the backend and know
// neither its memory nor its kernels).
class WeightPlacer {
 public:
  virtual ~WeightPlacer() = default;
  // Null when the memory cannot be had.
  virtual std::unique_ptr<DeviceBuffer> allocate(size_t bytes) = 0;
  virtual RowLayout layout_for(DType t, int64_t rows, int64_t cols) const = 0;
  // Writes the rows x cols matrix src (GGUF layout) to dst (same size, no overlap) in
  // `layout`, which layout_for gave for this type and shape. Every layout keeps each
  // four rows' bytes where GGUF has them, so a matrix may be placed four rows at a
  // time (the expert cache does, in place through a small scratch).
  virtual void place(RowLayout layout, DType t, const void* src, int64_t rows, int64_t cols, void* dst) const = 0;
};

}  // namespace moeflow
