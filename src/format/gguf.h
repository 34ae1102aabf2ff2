// GGUF model files (versions 2 and 3), as written by llama.cpp's gguf writer.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
// kv_count x (string key, u32 value_type, value), tensor_count x (string name,
// u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset), padding to
// `general.alignment` (default 32), then the tensor data section; each tensor's
// offset is relative to the start of that section and aligned.
// Strings are u64 length + bytes (no terminator). Arrays are u32 element type +
// u64 count + elements.
//
// GgufFile::open maps the file read-only with mmap and validates every field; any
// problem throws InputError naming the file, the field and the byte offset. It never
// reads outside the mapping. Thread safety: a GgufFile is immutable after open and may
// be read from any number of threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/dtype.h"

namespace moeflow::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

// One metadata value. Scalars keep their exact type; accessors convert where the
// conversion is lossless and throw InputError (naming `key`) otherwise.
struct Value {
  ValueType type = ValueType::UINT32;
  uint64_t u = 0;       // UINT8..UINT64, BOOL (0/1)
  int64_t i = 0;        // INT8..INT64
  double f = 0;         // FLOAT32, FLOAT64
  std::string s;        // STRING
  ValueType elem_type = ValueType::UINT8;  // ARRAY
  std::vector<Value> array;                // ARRAY

  static Value make_u32(uint32_t v);
  static Value make_i32(int32_t v);
  static Value make_u64(uint64_t v);
  static Value make_f32(float v);
  static Value make_bool(bool v);
  static Value make_string(std::string v);
  static Value make_array(ValueType elem, std::vector<Value> items);

  int64_t as_int(const std::string& key) const;     // any integer type or bool
  double as_float(const std::string& key) const;    // float or integer types
  bool as_bool(const std::string& key) const;
  const std::string& as_string(const std::string& key) const;
  const std::vector<Value>& as_array(const std::string& key) const;
  std::string to_display(size_t max_items = 8) const;  // for `inspect`
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // dims[0] is the innermost (contiguous) dimension, as in ggml
  DType dtype = DType::F32;
  uint64_t offset = 0;         // relative to the data section
  uint64_t nbytes = 0;         // computed from dims and dtype
  const uint8_t* data = nullptr;  // into the mapping
  uint64_t file_offset = 0;    // absolute offset of the first byte in the file

  uint64_t n_elements() const;
};

class GgufFile {
 public:
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of data section
  uint64_t file_size() const { return size_; }

  const std::map<std::string, Value>& metadata() const { return kv_; }
  const std::vector<std::string>& metadata_order() const { return kv_order_; }
  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  // REQUIRES nothing: throws InputError "missing required key 'k' in FILE" if absent.
  const Value& get(const std::string& key) const;
  const Value* find(const std::string& key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  // Throws InputError naming the tensor and the file if absent.
  const TensorInfo& tensor(const std::string& name) const;

 private:
  GgufFile() = default;
  std::string path_;
  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, Value> kv_;
  std::vector<std::string> kv_order_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  friend class Parser;
};

// Writes a GGUF v3 file. Used by tests and tools to make fixture models and by the
// trainer's exporter. Tensor data is given as raw bytes already in `dtype`'s layout.
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}
  void set(const std::string& key, Value v);  // keeps insertion order; replaces same key
  void add_tensor(const std::string& name, std::vector<uint64_t> dims, DType dtype,
                  std::vector<uint8_t> bytes);  // REQUIRES bytes.size() == tensor size
  // Writes to `path` through base/atomic_file.h's AtomicFile (a failed or killed write
  // never leaves a half-written model behind). Throws InputError on I/O failure.
  void write(const std::string& path) const;

 private:
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  struct Pending { std::string name; std::vector<uint64_t> dims; DType dtype; std::vector<uint8_t> bytes; };
  std::vector<Pending> tensors_;
};

}  // namespace moeflow::gguf
