#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "format/gguf.h"

namespace moeflow::gguf {

namespace {

constexpr uint64_t kMaxDims = 4;
constexpr uint64_t kMaxElements = 1ull << 60;
constexpr int kMaxArrayDepth = 2;

// The memory metadata arrays may take (each element a Value, ~100 bytes, for as little as
// 1 byte of file), for a file of `size` bytes: 64 MiB for any file, so a 1 MB file cannot
// ask for 100 MB; up to 16 times the file, at most 512 MiB, for vocabulary-only GGUFs (no
// tensors: o200k's, gpt-4o, is 9 MB holding 200019 tokens, their types and 446189 merges,
// 846k elements or ~81 MB as Values); a quarter of the file for model files.
uint64_t array_budget_for(uint64_t size) {
  const uint64_t any_file = 64ull << 20, vocabulary = std::min<uint64_t>(size, 32ull << 20) * 16;
  return std::max({any_file, vocabulary, size / 4});
}

// A cursor over the mapping that refuses to read past its end; every error names
// the field being read and its absolute offset.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, uint64_t size) : path_(path), base_(base), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  uint64_t size() const { return size_; }
  // Array elements still allowed in memory (each takes sizeof(Value), ~100 bytes, for
  // as little as 1 byte of file): array_budget_for the file's size.
  uint64_t array_budget = 0;

  [[noreturn]] void fail(const std::string& field, const std::string& why, uint64_t at) const {
    throw InputError(path_ + ": " + field + ": " + why + " at offset " + std::to_string(at));
  }
  void need(uint64_t n, const std::string& field) const {
    if (n > size_ - pos_)
      fail(field, "file truncated (needs " + std::to_string(n) + " bytes, " + std::to_string(size_ - pos_) + " left)", pos_);
  }
  template <class T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& field) {
    const uint64_t at = pos_;
    const uint64_t n = read<uint64_t>(field + " (string length)");
    if (n > remaining()) fail(field, "string length " + std::to_string(n) + " runs past the end of the file", at);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

bool valid_type(uint32_t t) { return t <= 12; }

// Smallest number of bytes one value of type t can occupy in the file.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;   // u64 length
    case ValueType::ARRAY: return 12;   // u32 element type + u64 count
  }
  return 1;
}

bool is_integer(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::INT8 || t == ValueType::UINT16 || t == ValueType::INT16 ||
         t == ValueType::UINT32 || t == ValueType::INT32 || t == ValueType::UINT64 || t == ValueType::INT64;
}

Value read_value(Cursor& c, ValueType t, const std::string& field, int depth) {
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::UINT8: v.u = c.read<uint8_t>(field); break;
    case ValueType::INT8: v.i = c.read<int8_t>(field); break;
    case ValueType::UINT16: v.u = c.read<uint16_t>(field); break;
    case ValueType::INT16: v.i = c.read<int16_t>(field); break;
    case ValueType::UINT32: v.u = c.read<uint32_t>(field); break;
    case ValueType::INT32: v.i = c.read<int32_t>(field); break;
    case ValueType::UINT64: v.u = c.read<uint64_t>(field); break;
    case ValueType::INT64: v.i = c.read<int64_t>(field); break;
    case ValueType::FLOAT32: v.f = c.read<float>(field); break;
    case ValueType::FLOAT64: v.f = c.read<double>(field); break;
    case ValueType::BOOL: {
      const uint64_t at = c.pos();
      const uint8_t b = c.read<uint8_t>(field);
      if (b > 1) c.fail(field, "invalid bool byte " + std::to_string(b), at);
      v.u = b;
      break;
    }
    case ValueType::STRING: v.s = c.read_string(field); break;
    case ValueType::ARRAY: {
      const uint64_t at = c.pos();
      if (depth >= kMaxArrayDepth) c.fail(field, "arrays nested too deeply", at);
      const uint32_t et = c.read<uint32_t>(field + " (array element type)");
      if (!valid_type(et)) c.fail(field, "unknown array element type " + std::to_string(et), at);
      v.elem_type = static_cast<ValueType>(et);
      const uint64_t n = c.read<uint64_t>(field + " (array length)");
      // Each element has a fixed minimum encoded size, so a count whose minimum
      // footprint exceeds the bytes left is corrupt; checking before reserve() keeps a
      // hostile count from allocating unbounded memory.
      if (n > c.remaining() / min_encoded_size(v.elem_type))
        c.fail(field, "array length " + std::to_string(n) + " exceeds the bytes left in the file", at + 4);
      if (n > c.array_budget / sizeof(Value))
        c.fail(field, "array length " + std::to_string(n) + ": the file's metadata arrays would take more than " +
                          std::to_string(array_budget_for(c.size()) >> 20) + " MiB in memory",
               at + 4);
      c.array_budget -= n * sizeof(Value);
      v.array.reserve(n);
      for (uint64_t k = 0; k < n; ++k)
        v.array.push_back(read_value(c, v.elem_type, field + "[" + std::to_string(k) + "]", depth + 1));
      break;
    }
  }
  return v;
}

}  // namespace

class Parser {
 public:
  static void parse(GgufFile& f) {
    Cursor c(f.path_, f.base_, f.size_);
    c.array_budget = array_budget_for(f.size_);
    const uint32_t magic = c.read<uint32_t>("magic");
    if (magic != 0x46554747u) c.fail("magic", "not a GGUF file (expected \"GGUF\")", 0);
    f.version_ = c.read<uint32_t>("version");
    if (f.version_ == 1) c.fail("version", "GGUF version 1 is not supported (re-convert the model with a current llama.cpp)", 4);
    if (f.version_ != 2 && f.version_ != 3) c.fail("version", "unknown GGUF version " + std::to_string(f.version_), 4);
    const uint64_t tensor_count = c.read<uint64_t>("tensor_count");
    const uint64_t kv_count = c.read<uint64_t>("kv_count");
    // A tensor info takes at least 8+4+8+4+8 bytes, a kv at least 8+4+1; rejecting
    // counts that cannot fit stops a corrupt count from driving a huge loop.
    const uint64_t left = c.remaining();
    const auto cannot_fit = [&](const char* what, uint64_t count, uint64_t min_each) {
      return std::string(what) + " " + std::to_string(count) + " needs at least " + std::to_string(min_each) +
             " bytes each but only " + std::to_string(left) + " bytes follow (corrupt count or truncated file)";
    };
    if (tensor_count > left / 32) c.fail("tensor_count", cannot_fit("tensor_count", tensor_count, 32), 8);
    if (kv_count > left / 13) c.fail("kv_count", cannot_fit("kv_count", kv_count, 13), 16);
    if (tensor_count * 32 + kv_count * 13 > left)  // each term <= left, so no overflow
      c.fail("kv_count", "tensor_count " + std::to_string(tensor_count) + " and kv_count " + std::to_string(kv_count) +
                             " cannot fit in the " + std::to_string(left) + " bytes that follow (corrupt count or truncated file)",
             16);

    uint64_t align_at = 0;  // offset of the general.alignment value, for its error message

    for (uint64_t k = 0; k < kv_count; ++k) {
      const uint64_t at = c.pos();
      const std::string key = c.read_string("metadata key #" + std::to_string(k));
      const std::string field = "metadata key '" + key + "'";
      const uint64_t tat = c.pos();
      const uint32_t t = c.read<uint32_t>(field + " (type)");
      if (!valid_type(t)) c.fail(field, "unknown value type " + std::to_string(t), tat);
      if (key == "general.alignment") align_at = c.pos();
      Value v = read_value(c, static_cast<ValueType>(t), field, 0);
      if (f.kv_.count(key)) c.fail(field, "duplicate key", at);
      f.kv_order_.push_back(key);
      f.kv_.emplace(key, std::move(v));
    }
    if (const Value* a = f.find("general.alignment")) {
      // Only integer types make sense; as_int would also accept bool, so check first.
      const int64_t al = is_integer(a->type) && !(a->type == ValueType::UINT64 && a->u > INT64_MAX)
                             ? a->as_int("general.alignment") : -1;
      // Capped at 1 MiB: a larger alignment is certainly corruption, and the cap keeps
      // the data-offset arithmetic far from overflow.
      if (al <= 0 || (al & (al - 1)) != 0 || al > (1 << 20))
        c.fail("metadata key 'general.alignment'",
               "must be a nonzero power of two up to 1 MiB, got " + a->to_display() + " (" + value_type_name(a->type) + ")",
               align_at);
      f.alignment_ = static_cast<uint64_t>(al);
    }

    for (uint64_t k = 0; k < tensor_count; ++k) {
      TensorInfo ti;
      const uint64_t at = c.pos();
      ti.name = c.read_string("tensor #" + std::to_string(k) + " name");
      const std::string field = "tensor '" + ti.name + "'";
      const uint64_t dat = c.pos();
      const uint32_t nd = c.read<uint32_t>(field + " n_dims");
      if (nd == 0 || nd > kMaxDims) c.fail(field + " n_dims", "must be 1.." + std::to_string(kMaxDims) + ", got " + std::to_string(nd), dat);
      uint64_t n = 1;
      for (uint32_t d = 0; d < nd; ++d) {
        const uint64_t pos = c.pos();
        const uint64_t v = c.read<uint64_t>(field + " dims[" + std::to_string(d) + "]");
        if (v == 0 || v > kMaxElements || n > kMaxElements / v)
          c.fail(field + " dims[" + std::to_string(d) + "]", "absurd dimension " + std::to_string(v), pos);
        n *= v;
        ti.dims.push_back(v);
      }
      const uint64_t tpos = c.pos();
      const uint32_t gt = c.read<uint32_t>(field + " type");
      if (!dtype_from_ggml(gt, ti.dtype))
        c.fail(field + " type", "unsupported ggml type " + std::to_string(gt) + " (moeflow reads f32, f16, bf16, q8_0, q4_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4)", tpos);
      const DTypeInfo& info = dtype_info(ti.dtype);
      if (ti.dims[0] % static_cast<uint64_t>(info.block_size) != 0)
        c.fail(field + " dims[0]", std::to_string(ti.dims[0]) + " is not a multiple of the " + info.name + " block size " + std::to_string(info.block_size) + " (a row must be whole blocks)", dat + 4);
      ti.nbytes = n / static_cast<uint64_t>(info.block_size) * static_cast<uint64_t>(info.type_size);
      const uint64_t opos = c.pos();
      ti.offset = c.read<uint64_t>(field + " offset");
      if (ti.offset % f.alignment_ != 0)
        c.fail(field + " offset", "offset " + std::to_string(ti.offset) + " is not aligned to " + std::to_string(f.alignment_), opos);
      if (f.tensor_index_.count(ti.name)) c.fail(field, "duplicate tensor name", at);
      f.tensor_index_[ti.name] = f.tensors_.size();
      ti.file_offset = opos;  // patched below once the data section is known
      f.tensors_.push_back(std::move(ti));
    }
    const uint64_t data = (c.pos() + f.alignment_ - 1) / f.alignment_ * f.alignment_;
    f.data_offset_ = data;
    for (auto& ti : f.tensors_) {
      const uint64_t info_at = ti.file_offset;
      if (data > f.size_ || ti.offset > f.size_ - data || ti.nbytes > f.size_ - data - ti.offset)
        c.fail("tensor '" + ti.name + "' offset",
               "data [" + std::to_string(ti.offset) + ", +" + std::to_string(ti.nbytes) + ") runs past the end of the file (size " +
                   std::to_string(f.size_) + ")",
               info_at);
      ti.file_offset = data + ti.offset;
      ti.data = f.base_ + ti.file_offset;
    }
    check_layout(f, c, data);
  }

  // The data section must be exactly the tensors, each padded to the alignment, with
  // no tensor overlapping another and no bytes that no tensor claims. Writers (llama.cpp,
  // gguf-py, ours) lay tensors out this way; a file that breaks it is corrupt, or its
  // tensor_count is too small (the unread tensor infos then shift the data section, which
  // leaves unclaimed bytes at its end or between tensors).
  static void check_layout(const GgufFile& f, const Cursor& c, uint64_t data) {
    const uint64_t al = f.alignment_;
    const uint64_t pad_end = std::min(data, f.size_);
    for (uint64_t p = c.pos(); p < pad_end; ++p)
      if (f.base_[p] != 0)
        c.fail("padding before the data section",
               "nonzero byte (tensor_count " + std::to_string(f.tensors_.size()) + " may be too small)", p);
    std::vector<const TensorInfo*> order;
    order.reserve(f.tensors_.size());
    for (const TensorInfo& t : f.tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
    });
    uint64_t end = 0;  // end of the claimed bytes so far, relative to the data section
    const TensorInfo* prev = nullptr;
    for (const TensorInfo* t : order) {
      if (prev && t->offset < end)
        throw InputError(f.path_ + ": tensor '" + t->name + "' data [" + std::to_string(t->offset) + ", +" +
                         std::to_string(t->nbytes) + ") overlaps tensor '" + prev->name + "' data [" +
                         std::to_string(prev->offset) + ", +" + std::to_string(prev->nbytes) + ") (offsets relative to the data section at " +
                         std::to_string(data) + ")");
      const uint64_t padded = (end + al - 1) / al * al;
      if (t->offset > padded)
        throw InputError(f.path_ + ": data section bytes [" + std::to_string(padded) + ", " + std::to_string(t->offset) +
                         ") before tensor '" + t->name + "' belong to no tensor (corrupt offsets, or tensor_count " +
                         std::to_string(f.tensors_.size()) + " is too small)");
      end = t->offset + t->nbytes;
      prev = t;
    }
    const uint64_t claimed = data + end;
    if (claimed < f.size_ && f.size_ - claimed >= al)
      throw InputError(f.path_ + ": " + std::to_string(f.size_ - claimed) + " bytes at offset " + std::to_string(claimed) +
                       " after the last tensor's data belong to no tensor (tensor_count " + std::to_string(f.tensors_.size()) +
                       " is too small, or the file has trailing data)");
  }
};

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) throw InputError("cannot open model file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(f->fd_, &st) != 0 || !S_ISREG(st.st_mode)) throw InputError("'" + path + "' is not a regular file");
  f->size_ = static_cast<uint64_t>(st.st_size);
  // mmap rejects length 0; every shorter-than-header file goes through the cursor so
  // the message names the first field that is cut off.
  if (f->size_ == 0) throw InputError(path + ": magic: file truncated (empty file) at offset 0");
  void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, f->fd_, 0);
  if (p == MAP_FAILED) throw InputError("cannot map '" + path + "': " + std::strerror(errno));
  f->base_ = static_cast<const uint8_t*>(p);
  Parser::parse(*f);
  return f;
}

GgufFile::~GgufFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

const Value& GgufFile::get(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) throw InputError("missing required key '" + key + "' in " + path_);
  return it->second;
}

const Value* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const TensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& GgufFile::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw InputError(path_ + ": missing required tensor '" + name + "'");
  return *t;
}

}  // namespace moeflow::gguf
