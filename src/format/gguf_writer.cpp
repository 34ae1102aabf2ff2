#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/atomic_file.h"
#include "format/gguf.h"

namespace moeflow::gguf {

namespace {

class Out {
 public:
  explicit Out(std::vector<uint8_t>& b) : b_(b) {}
  template <class T>
  void put(T v) {
    // resize + memcpy rather than insert(ptr range): GCC 12 misreads the latter as an
    // overflow (-Wstringop-overflow) once inlined.
    const size_t at = b_.size();
    b_.resize(at + sizeof(T));
    std::memcpy(b_.data() + at, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
  }
  void value(const Value& v) {
    switch (v.type) {
      case ValueType::UINT8: put<uint8_t>(static_cast<uint8_t>(v.u)); break;
      case ValueType::INT8: put<int8_t>(static_cast<int8_t>(v.i)); break;
      case ValueType::UINT16: put<uint16_t>(static_cast<uint16_t>(v.u)); break;
      case ValueType::INT16: put<int16_t>(static_cast<int16_t>(v.i)); break;
      case ValueType::UINT32: put<uint32_t>(static_cast<uint32_t>(v.u)); break;
      case ValueType::INT32: put<int32_t>(static_cast<int32_t>(v.i)); break;
      case ValueType::UINT64: put<uint64_t>(v.u); break;
      case ValueType::INT64: put<int64_t>(v.i); break;
      case ValueType::FLOAT32: put<float>(static_cast<float>(v.f)); break;
      case ValueType::FLOAT64: put<double>(v.f); break;
      case ValueType::BOOL: put<uint8_t>(v.u ? 1 : 0); break;
      case ValueType::STRING: str(v.s); break;
      case ValueType::ARRAY:
        put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        put<uint64_t>(v.array.size());
        for (const auto& x : v.array) value(x);
        break;
    }
  }
  void pad(uint64_t align) {
    while (b_.size() % align) b_.push_back(0);
  }

 private:
  std::vector<uint8_t>& b_;
};

}  // namespace

void GgufWriter::set(const std::string& key, Value v) {
  for (auto& kv : kv_)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<uint64_t> dims, DType dtype, std::vector<uint8_t> bytes) {
  // Check the shape before calling row_bytes, whose precondition is a whole number of
  // blocks; a bad shape here would otherwise produce a file the reader rejects later.
  const std::string what = "GgufWriter: tensor '" + name + "'";
  if (dims.empty() || dims.size() > 4) throw InputError(what + " must have 1..4 dims, got " + std::to_string(dims.size()));
  uint64_t rows = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 60) || (i > 0 && rows > (1ull << 60) / dims[i]))
      throw InputError(what + " dims[" + std::to_string(i) + "] = " + std::to_string(dims[i]) + " is zero or too large");
    if (i > 0) rows *= dims[i];
  }
  if (!dtype_is_file_type(dtype))
    throw InputError(what + " has dtype " + dtype_name(dtype) + ", an in-memory layout that no GGUF file may hold");
  const DTypeInfo& info = dtype_info(dtype);
  if (dims[0] % static_cast<uint64_t>(info.block_size) != 0)
    throw InputError(what + " dims[0] = " + std::to_string(dims[0]) + " is not a multiple of the " + info.name + " block size");
  const uint64_t want = row_bytes(dtype, static_cast<int64_t>(dims[0])) * rows;
  if (bytes.size() != want)
    throw InputError(what + " has " + std::to_string(bytes.size()) + " bytes, its dims and dtype need " + std::to_string(want));
  tensors_.push_back(Pending{name, std::move(dims), dtype, std::move(bytes)});
}

void GgufWriter::write(const std::string& path) const {
  // An explicit general.alignment key wins over the constructor argument, so the
  // offsets written always agree with what the reader will use.
  uint64_t alignment = alignment_;
  bool has_align = false;
  for (const auto& [k, v] : kv_)
    if (k == "general.alignment") {
      has_align = true;
      alignment = v.as_int(k) < 0 ? 0 : static_cast<uint64_t>(v.as_int(k));
    }
  // Same rule as the reader, so the writer never produces a file it cannot read back.
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 20))
    throw InputError("GgufWriter: alignment " + std::to_string(alignment) + " is not a nonzero power of two up to 1 MiB");

  std::vector<uint8_t> head;
  Out o(head);
  o.put<uint32_t>(0x46554747u);
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  o.put<uint64_t>(kv_.size() + (has_align || alignment == 32 ? 0 : 1));
  for (const auto& [k, v] : kv_) {
    o.str(k);
    o.put<uint32_t>(static_cast<uint32_t>(v.type));
    o.value(v);
  }
  if (!has_align && alignment != 32) {
    o.str("general.alignment");
    o.put<uint32_t>(static_cast<uint32_t>(ValueType::UINT32));
    o.put<uint32_t>(static_cast<uint32_t>(alignment));
  }
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    o.str(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) o.put<uint64_t>(d);
    o.put<uint32_t>(static_cast<uint32_t>(t.dtype));
    o.put<uint64_t>(off);
    off += (t.bytes.size() + alignment - 1) / alignment * alignment;
  }
  o.pad(alignment);
  AtomicFile f(path);  // never leaves a half-written model behind (base/atomic_file.h)
  f.write(head.data(), head.size());
  static const char zeros[64] = {};
  for (const auto& t : tensors_) {
    f.write(t.bytes.data(), t.bytes.size());
    uint64_t padn = (alignment - t.bytes.size() % alignment) % alignment;
    while (padn) {
      const uint64_t k = std::min<uint64_t>(padn, sizeof zeros);
      f.write(zeros, k);
      padn -= k;
    }
  }
  f.commit();
}

}  // namespace moeflow::gguf
