#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "format/gguf.h"

namespace moeflow::gguf {

namespace {

class Out {
 public:
  explicit Out(std::vector<uint8_t>& b) : b_(b) {}
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
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
  uint64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  const uint64_t want = dims.empty() ? 0 : row_bytes(dtype, static_cast<int64_t>(dims[0])) * rows;
  if (dims.empty() || bytes.size() != want)
    throw InputError("GgufWriter: tensor '" + name + "' has " + std::to_string(bytes.size()) + " bytes, its dims and dtype need " +
                     std::to_string(want));
  tensors_.push_back(Pending{name, std::move(dims), dtype, std::move(bytes)});
}

void GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> head;
  Out o(head);
  o.put<uint32_t>(0x46554747u);
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  const bool has_align = std::any_of(kv_.begin(), kv_.end(), [](const auto& kv) { return kv.first == "general.alignment"; });
  o.put<uint64_t>(kv_.size() + (has_align || alignment_ == 32 ? 0 : 1));
  for (const auto& [k, v] : kv_) {
    o.str(k);
    o.put<uint32_t>(static_cast<uint32_t>(v.type));
    o.value(v);
  }
  if (!has_align && alignment_ != 32) {
    o.str("general.alignment");
    o.put<uint32_t>(static_cast<uint32_t>(ValueType::UINT32));
    o.put<uint32_t>(static_cast<uint32_t>(alignment_));
  }
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    o.str(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) o.put<uint64_t>(d);
    o.put<uint32_t>(static_cast<uint32_t>(t.dtype));
    o.put<uint64_t>(off);
    off += (t.bytes.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  o.pad(alignment_);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw InputError("cannot create '" + tmp + "'");
    f.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
    static const char zeros[64] = {};
    for (const auto& t : tensors_) {
      f.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
      uint64_t padn = (alignment_ - t.bytes.size() % alignment_) % alignment_;
      while (padn) {
        const uint64_t k = std::min<uint64_t>(padn, sizeof zeros);
        f.write(zeros, static_cast<std::streamsize>(k));
        padn -= k;
      }
    }
    if (!f) throw InputError("write to '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw InputError("cannot rename '" + tmp + "' to '" + path + "'");
}

}  // namespace moeflow::gguf
