// GGUF reader/writer tests: round trips through GgufWriter, a hand-built v2 file,
// and corrupted files that must be rejected with an InputError that names the field
// and the byte offset (never a crash or a read past the mapping).
#include "format/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "test_paths.h"

namespace moeflow::gguf {
namespace {

// ---------------------------------------------------------------------------------
// Helpers.

std::string temp_path(const std::string& stem) { return moeflow::testing::scratch_path("gguf_" + stem) + ".gguf"; }

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Opens `path`, expects InputError, checks that the message contains every needle,
// and returns the message.
std::string expect_error(const std::string& path, std::initializer_list<std::string> needles) {
  try {
    GgufFile::open(path);
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg << "\nmissing: " << n;
    return msg;
  }
  ADD_FAILURE() << "no InputError for " << path;
  return "";
}

// Little-endian byte buffer for hand-made files.
struct Buf {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void pad(uint64_t a) {
    while (b.size() % a) b.push_back(0);
  }
  uint64_t pos() const { return b.size(); }
};

// A GGUF file built field by field, so a test can corrupt exactly one field and know
// its offset.
struct HandTensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = 0;  // ggml type id
  uint64_t offset = 0;
};
struct HandKv {
  std::string key;
  uint32_t type;
  std::vector<uint8_t> payload;  // encoded value
};
struct HandFile {
  uint32_t magic = 0x46554747u;
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count;  // unset: the real count
  std::optional<uint64_t> kv_count;
  uint64_t align = 32;        // padding used before the data section
  std::vector<HandKv> kvs;
  std::vector<HandTensor> tensors;
  uint64_t data_bytes = 0;
  std::string path;  // set by write_hand

  // Offsets recorded while building (so write the file before using them: function
  // argument evaluation order is unspecified).
  std::vector<uint64_t> kv_value_at, tensor_type_at, tensor_offset_at, tensor_ndims_at;

  std::vector<uint8_t> build() {
    kv_value_at.clear(), tensor_type_at.clear(), tensor_offset_at.clear(), tensor_ndims_at.clear();
    Buf o;
    o.put<uint32_t>(magic);
    o.put<uint32_t>(version);
    o.put<uint64_t>(tensor_count.value_or(tensors.size()));
    o.put<uint64_t>(kv_count.value_or(kvs.size()));
    for (const auto& kv : kvs) {
      o.str(kv.key);
      o.put<uint32_t>(kv.type);
      kv_value_at.push_back(o.pos());
      o.b.insert(o.b.end(), kv.payload.begin(), kv.payload.end());
    }
    for (const auto& t : tensors) {
      o.str(t.name);
      tensor_ndims_at.push_back(o.pos());
      o.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) o.put<uint64_t>(d);
      tensor_type_at.push_back(o.pos());
      o.put<uint32_t>(t.type);
      tensor_offset_at.push_back(o.pos());
      o.put<uint64_t>(t.offset);
    }
    o.pad(align);
    o.b.resize(o.b.size() + data_bytes, 0xAB);
    return o.b;
  }
};

HandKv kv_u32(const std::string& k, uint32_t v) {
  Buf b;
  b.put<uint32_t>(v);
  return {k, 4, b.b};
}
HandKv kv_str(const std::string& k, const std::string& s) {
  Buf b;
  b.str(s);
  return {k, 8, b.b};
}

// A small valid file: one kv and one f32 tensor of 4 elements (16 bytes).
HandFile simple_file() {
  HandFile h;
  h.kvs.push_back(kv_str("general.architecture", "llama"));
  h.tensors.push_back({"w", {4}, 0, 0});
  h.data_bytes = 16;
  return h;
}

std::string write_hand(HandFile& h, const std::string& stem) {
  h.path = temp_path(stem);
  write_bytes(h.path, h.build());
  return h.path;
}

std::string at(uint64_t off) { return "at offset " + std::to_string(off); }

Value make(ValueType t, uint64_t u, int64_t i, double f) {
  Value v;
  v.type = t;
  v.u = u;
  v.i = i;
  v.f = f;
  return v;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + k * 7);
  return v;
}

// A writer-made file with every value type and three tensors.
GgufWriter full_writer(uint64_t alignment) {
  GgufWriter w(alignment);
  w.set("t.u8", make(ValueType::UINT8, 200, 0, 0));
  w.set("t.i8", make(ValueType::INT8, 0, -100, 0));
  w.set("t.u16", make(ValueType::UINT16, 60000, 0, 0));
  w.set("t.i16", make(ValueType::INT16, 0, -30000, 0));
  w.set("t.u32", Value::make_u32(4000000000u));
  w.set("t.i32", Value::make_i32(-2000000000));
  w.set("t.f32", Value::make_f32(1e-5f));
  w.set("t.bool", Value::make_bool(true));
  w.set("t.str", Value::make_string("hello\nworld"));
  w.set("t.u64", Value::make_u64(UINT64_MAX));
  w.set("t.i64", make(ValueType::INT64, 0, INT64_MIN, 0));
  w.set("t.f64", make(ValueType::FLOAT64, 0, 0, 3.141592653589793));
  w.set("t.arr_i32", Value::make_array(ValueType::INT32, {Value::make_i32(1), Value::make_i32(-2), Value::make_i32(3)}));
  w.set("t.arr_str", Value::make_array(ValueType::STRING, {Value::make_string("a"), Value::make_string(""),
                                                           Value::make_string("<unk>")}));
  w.set("t.arr_empty", Value::make_array(ValueType::FLOAT32, {}));
  w.set("t.arr_nested", Value::make_array(ValueType::ARRAY, {Value::make_array(ValueType::UINT8, {make(ValueType::UINT8, 7, 0, 0)}),
                                                             Value::make_array(ValueType::BOOL, {Value::make_bool(false)})}));
  w.add_tensor("a.f32", {8, 3}, DType::F32, pattern(8 * 3 * 4, 1));
  w.add_tensor("b.f16", {16}, DType::F16, pattern(16 * 2, 2));
  w.add_tensor("c.q8_0", {64, 2, 1}, DType::Q8_0, pattern(2 * 2 * 34, 3));
  return w;
}

// ---------------------------------------------------------------------------------
// Round trips.

class GgufRoundTrip : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GgufRoundTrip, EveryValueTypeAndTensors) {
  const uint64_t align = GetParam();
  const std::string p = temp_path("rt");
  full_writer(align).write(p);
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  auto f = GgufFile::open(p);

  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), align);
  EXPECT_EQ(f->data_offset() % align, 0u);
  EXPECT_EQ(f->has("general.alignment"), align != 32);

  const auto& m = f->metadata();
  EXPECT_EQ(m.at("t.u8").type, ValueType::UINT8);
  EXPECT_EQ(m.at("t.u8").as_int("t.u8"), 200);
  EXPECT_EQ(m.at("t.i8").as_int("t.i8"), -100);
  EXPECT_EQ(m.at("t.u16").as_int("t.u16"), 60000);
  EXPECT_EQ(m.at("t.i16").as_int("t.i16"), -30000);
  EXPECT_EQ(m.at("t.u32").as_int("t.u32"), 4000000000);
  EXPECT_EQ(m.at("t.i32").as_int("t.i32"), -2000000000);
  EXPECT_EQ(m.at("t.f32").type, ValueType::FLOAT32);
  EXPECT_FLOAT_EQ(static_cast<float>(m.at("t.f32").as_float("t.f32")), 1e-5f);
  EXPECT_TRUE(m.at("t.bool").as_bool("t.bool"));
  EXPECT_EQ(m.at("t.str").as_string("t.str"), "hello\nworld");
  EXPECT_EQ(m.at("t.u64").u, UINT64_MAX);
  EXPECT_EQ(m.at("t.i64").as_int("t.i64"), INT64_MIN);
  EXPECT_DOUBLE_EQ(m.at("t.f64").as_float("t.f64"), 3.141592653589793);
  const auto& ai = m.at("t.arr_i32").as_array("t.arr_i32");
  ASSERT_EQ(ai.size(), 3u);
  EXPECT_EQ(m.at("t.arr_i32").elem_type, ValueType::INT32);
  EXPECT_EQ(ai[1].as_int("x"), -2);
  const auto& as = m.at("t.arr_str").as_array("t.arr_str");
  ASSERT_EQ(as.size(), 3u);
  EXPECT_EQ(as[0].s, "a");
  EXPECT_EQ(as[1].s, "");
  EXPECT_EQ(as[2].s, "<unk>");
  EXPECT_TRUE(m.at("t.arr_empty").array.empty());
  EXPECT_EQ(m.at("t.arr_empty").elem_type, ValueType::FLOAT32);
  const auto& an = m.at("t.arr_nested").array;
  ASSERT_EQ(an.size(), 2u);
  EXPECT_EQ(an[0].elem_type, ValueType::UINT8);
  EXPECT_EQ(an[0].array.at(0).u, 7u);
  EXPECT_FALSE(an[1].array.at(0).as_bool("x"));

  // Insertion order is kept; the writer appends general.alignment when it is not 32.
  std::vector<std::string> want = {"t.u8", "t.i8", "t.u16", "t.i16", "t.u32", "t.i32", "t.f32", "t.bool",
                                   "t.str", "t.u64", "t.i64", "t.f64", "t.arr_i32", "t.arr_str", "t.arr_empty",
                                   "t.arr_nested"};
  if (align != 32) want.push_back("general.alignment");
  EXPECT_EQ(f->metadata_order(), want);

  ASSERT_EQ(f->tensors().size(), 3u);
  struct Want { const char* name; std::vector<uint64_t> dims; DType dt; size_t nbytes; uint8_t seed; };
  const Want ws[] = {{"a.f32", {8, 3}, DType::F32, 96, 1}, {"b.f16", {16}, DType::F16, 32, 2},
                     {"c.q8_0", {64, 2, 1}, DType::Q8_0, 136, 3}};
  for (size_t k = 0; k < 3; ++k) {
    const TensorInfo& t = f->tensor(ws[k].name);
    EXPECT_EQ(&t, &f->tensors()[k]);
    EXPECT_EQ(t.dims, ws[k].dims);
    EXPECT_EQ(t.dtype, ws[k].dt);
    EXPECT_EQ(t.nbytes, ws[k].nbytes);
    EXPECT_EQ(t.offset % align, 0u);
    EXPECT_EQ(t.file_offset, f->data_offset() + t.offset);
    EXPECT_EQ(t.file_offset % align, 0u);
    ASSERT_NE(t.data, nullptr);
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), pattern(ws[k].nbytes, ws[k].seed)) << ws[k].name;
  }
  EXPECT_EQ(f->tensor("a.f32").n_elements(), 24u);
  EXPECT_EQ(f->tensor("c.q8_0").n_elements(), 128u);
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
  // The data section is padded, so the file ends on an alignment boundary.
  EXPECT_EQ(f->file_size() % align, 0u);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufRoundTrip, ::testing::Values(32u, 64u, 1u, 4096u));

TEST(GgufWriter, ExplicitAlignmentKeyWins) {
  GgufWriter w(32);
  w.set("general.alignment", Value::make_u32(128));
  w.add_tensor("x", {4}, DType::F32, pattern(16, 0));
  w.add_tensor("y", {4}, DType::F32, pattern(16, 9));
  const std::string p = temp_path("al");
  w.write(p);
  auto f = GgufFile::open(p);
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->metadata_order().size(), 1u);
  EXPECT_EQ(f->tensor("y").offset, 128u);
  EXPECT_EQ(f->data_offset() % 128, 0u);
}

TEST(GgufWriter, SetReplacesSameKeyInPlace) {
  GgufWriter w;
  w.set("a", Value::make_u32(1));
  w.set("b", Value::make_u32(2));
  w.set("a", Value::make_string("x"));
  const std::string p = temp_path("set");
  w.write(p);
  auto f = GgufFile::open(p);
  EXPECT_EQ(f->metadata_order(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f->get("a").as_string("a"), "x");
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufWriter, RejectsBadTensors) {
  GgufWriter w;
  EXPECT_THROW(w.add_tensor("x", {4}, DType::F32, pattern(15, 0)), InputError);
  EXPECT_THROW(w.add_tensor("x", {32, 2}, DType::Q8_0, pattern(34, 0)), InputError);
  EXPECT_THROW(w.add_tensor("x", {33}, DType::Q8_0, pattern(34, 0)), InputError);
  EXPECT_THROW(w.add_tensor("x", {}, DType::F32, {}), InputError);
  EXPECT_THROW(w.add_tensor("x", {4, 0}, DType::F32, {}), InputError);
  EXPECT_THROW(w.add_tensor("x", {1, 1, 1, 1, 1}, DType::F32, pattern(4, 0)), InputError);
  try {
    w.add_tensor("blk.0.w", {8}, DType::F16, pattern(8, 0));
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.w'"), std::string::npos) << e.what();
  }
  w.add_tensor("ok", {32, 2}, DType::Q8_0, pattern(68, 0));  // right size is accepted
  GgufWriter bad(3);
  EXPECT_THROW(bad.write(temp_path("bad_al")), InputError);
}

TEST(GgufReader, HandWrittenV2FileReads) {
  // Version 2 has the same layout as version 3 (u64 counts and lengths).
  HandFile h;
  h.version = 2;
  h.kvs.push_back(kv_str("general.architecture", "llama"));
  h.kvs.push_back(kv_u32("llama.block_count", 2));
  h.tensors.push_back({"tok_embd", {4, 2}, 0, 0});
  h.tensors.push_back({"out", {32}, 8, 32});
  h.data_bytes = 32 + 34;
  const std::string p = write_hand(h, "v2");
  auto f = GgufFile::open(p);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->get("general.architecture").as_string("general.architecture"), "llama");
  EXPECT_EQ(f->get("llama.block_count").as_int("llama.block_count"), 2);
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensor("out").dtype, DType::Q8_0);
  EXPECT_EQ(f->tensor("out").nbytes, 34u);
  EXPECT_EQ(f->tensor("out").data[0], 0xAB);
  EXPECT_EQ(f->tensor("tok_embd").file_offset, f->data_offset());
}

TEST(GgufReader, ZeroTensorFileWithoutPaddingReads) {
  // A metadata-only file need not have a data section at all.
  Buf o;
  o.put<uint32_t>(0x46554747u);
  o.put<uint32_t>(3);
  o.put<uint64_t>(0);
  o.put<uint64_t>(1);
  o.str("k");
  o.put<uint32_t>(7);
  o.put<uint8_t>(0);
  const std::string p = temp_path("meta");
  write_bytes(p, o.b);
  auto f = GgufFile::open(p);
  EXPECT_FALSE(f->get("k").as_bool("k"));
}

#ifdef MOEFLOW_FIXTURES
TEST(GgufReader, FixtureModelsParse) {
  namespace fs = std::filesystem;
  if (!fs::exists(MOEFLOW_FIXTURES)) GTEST_SKIP() << "no fixtures";
  int n = 0;
  for (const auto& e : fs::directory_iterator(MOEFLOW_FIXTURES)) {
    if (e.path().extension() != ".gguf") continue;
    auto f = GgufFile::open(e.path().string());
    EXPECT_FALSE(f->tensors().empty()) << e.path();
    EXPECT_TRUE(f->has("general.architecture")) << e.path();
    for (const auto& t : f->tensors()) EXPECT_LE(t.file_offset + t.nbytes, f->file_size());
    ++n;
  }
  if (n == 0) GTEST_SKIP() << "no .gguf fixtures";
}
#endif

// ---------------------------------------------------------------------------------
// Accessors.

TEST(GgufValue, Accessors) {
  EXPECT_EQ(Value::make_bool(true).as_int("k"), 1);
  EXPECT_EQ(Value::make_u64(INT64_MAX).as_int("k"), INT64_MAX);
  EXPECT_THROW(Value::make_u64(static_cast<uint64_t>(INT64_MAX) + 1).as_int("k"), InputError);
  EXPECT_DOUBLE_EQ(Value::make_i32(-3).as_float("k"), -3.0);
  EXPECT_DOUBLE_EQ(Value::make_u32(7).as_float("k"), 7.0);
  EXPECT_THROW(Value::make_f32(1).as_int("k"), InputError);
  EXPECT_THROW(Value::make_string("1").as_float("k"), InputError);
  EXPECT_THROW(Value::make_u32(1).as_bool("k"), InputError);
  EXPECT_THROW(Value::make_u32(1).as_array("k"), InputError);
  try {
    Value::make_u32(5).as_string("llama.context_length");
    ADD_FAILURE();
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'llama.context_length'"), std::string::npos) << m;
    EXPECT_NE(m.find("uint32"), std::string::npos) << m;
  }
  EXPECT_STREQ(value_type_name(ValueType::FLOAT64), "float64");
  EXPECT_STREQ(value_type_name(ValueType::ARRAY), "array");
}

TEST(GgufValue, ToDisplay) {
  EXPECT_EQ(Value::make_u32(42).to_display(), "42");
  EXPECT_EQ(Value::make_i32(-42).to_display(), "-42");
  EXPECT_EQ(Value::make_bool(false).to_display(), "false");
  EXPECT_EQ(Value::make_string("llama").to_display(), "\"llama\"");
  EXPECT_EQ(Value::make_f32(1e-5f).to_display(), "1e-05");
  EXPECT_EQ(Value::make_f32(0.5f).to_display(), "0.5");
  std::vector<Value> items;
  for (uint32_t k = 1; k <= 10; ++k) items.push_back(Value::make_u32(k));
  EXPECT_EQ(Value::make_array(ValueType::UINT32, items).to_display(2), "[1, 2, ... (10 items)]");
  EXPECT_EQ(Value::make_array(ValueType::STRING, {Value::make_string("a")}).to_display(), "[\"a\" (1 items)]");
}

TEST(GgufReader, MissingKeyAndTensor) {
  HandFile h = simple_file();
  const std::string p = write_hand(h, "missing");
  auto f = GgufFile::open(p);
  try {
    f->get("llama.block_count");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "missing required key 'llama.block_count' in " + p);
  }
  EXPECT_EQ(f->find("llama.block_count"), nullptr);
  ASSERT_NE(f->find("general.architecture"), nullptr);
  try {
    f->tensor("blk.0.ffn_up.weight");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.ffn_up.weight'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
  }
}

TEST(GgufReader, MissingFileAndDirectory) {
  EXPECT_THROW(GgufFile::open(::testing::TempDir() + "does_not_exist.gguf"), InputError);
  EXPECT_THROW(GgufFile::open(::testing::TempDir()), InputError);
}

// ---------------------------------------------------------------------------------
// Corruption.

TEST(GgufCorrupt, TruncatedAtEveryPosition) {
  // Every prefix of a valid file must be rejected: in the header region by the bounded
  // cursor, past it by the tensor-data bounds check.
  const std::string src = temp_path("full");
  full_writer(32).write(src);
  const std::vector<uint8_t> full = read_bytes(src);
  auto ok = GgufFile::open(src);
  const uint64_t last_tensor_end = ok->tensors().back().file_offset + ok->tensors().back().nbytes;
  ASSERT_GT(full.size(), 200u);
  const std::string p = temp_path("trunc");
  for (size_t n = 0; n < last_tensor_end; ++n) {
    write_bytes(p, std::vector<uint8_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
    try {
      GgufFile::open(p);
      ADD_FAILURE() << "prefix of " << n << " bytes was accepted";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("offset"), std::string::npos) << n << ": " << m;
      EXPECT_NE(m.find(p), std::string::npos) << n << ": " << m;
    }
  }
  // Trailing padding after the last tensor is optional.
  write_bytes(p, std::vector<uint8_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(last_tensor_end)));
  EXPECT_NO_THROW(GgufFile::open(p));
}

TEST(GgufCorrupt, TruncatedFieldIsNamed) {
  HandFile h = simple_file();
  std::vector<uint8_t> b = h.build();
  const std::string p = temp_path("tfield");
  write_bytes(p, std::vector<uint8_t>(b.begin(), b.begin() + 6));
  expect_error(p, {"version", "truncated", at(4)});
  write_bytes(p, std::vector<uint8_t>(b.begin(), b.begin() + 20));
  expect_error(p, {"kv_count", at(16)});
}

TEST(GgufCorrupt, BadMagic) {
  HandFile h = simple_file();
  h.magic = 0x46554746u;
  write_hand(h, "magic");
  expect_error(h.path, {"magic", at(0)});
}

TEST(GgufCorrupt, Version1And99) {
  HandFile h = simple_file();
  h.version = 1;
  write_hand(h, "v1");
  expect_error(h.path, {"version", "version 1 is not supported", at(4)});
  h.version = 99;
  write_hand(h, "v99");
  expect_error(h.path, {"version", "99", at(4)});
}

TEST(GgufCorrupt, UnknownDtype) {
  HandFile h = simple_file();
  h.tensors[0].type = 99;
  const std::string p = write_hand(h, "dtype");
  const std::string m = expect_error(p, {"tensor 'w' type", "99", at(h.tensor_type_at[0])});
  EXPECT_NE(m.find(p), std::string::npos);
}

TEST(GgufCorrupt, TensorDataPastEnd) {
  HandFile h = simple_file();
  h.tensors[0].offset = 1024;
  write_hand(h, "past");
  expect_error(h.path, {"tensor 'w' offset", "past the end", at(h.tensor_offset_at[0])});
  HandFile h2 = simple_file();
  h2.data_bytes = 15;  // one byte short
  write_hand(h2, "short");
  expect_error(h2.path, {"tensor 'w' offset", at(h2.tensor_offset_at[0])});
  HandFile h3 = simple_file();
  h3.tensors[0].offset = UINT64_MAX - 31;  // aligned, and would wrap in a naive sum
  write_hand(h3, "wrap");
  expect_error(h3.path, {"tensor 'w' offset", at(h3.tensor_offset_at[0])});
}

TEST(GgufCorrupt, UnalignedTensorOffset) {
  HandFile h = simple_file();
  h.tensors[0].offset = 4;
  h.data_bytes = 64;
  write_hand(h, "unal");
  expect_error(h.path, {"tensor 'w' offset", "not aligned", at(h.tensor_offset_at[0])});
}

TEST(GgufCorrupt, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u, 1u << 30}) {
    HandFile h = simple_file();
    h.kvs.push_back(kv_u32("general.alignment", a));
    const std::string p = write_hand(h, "align");
    expect_error(p, {"metadata key 'general.alignment'", std::to_string(a), at(h.kv_value_at[1])});
  }
  HandFile h = simple_file();
  h.kvs.push_back(kv_str("general.alignment", "32"));
  write_hand(h, "align_str");
  expect_error(h.path, {"metadata key 'general.alignment'", "string", at(h.kv_value_at[1])});
}

TEST(GgufCorrupt, AbsurdCounts) {
  HandFile h = simple_file();
  h.kv_count = uint64_t{1} << 40;
  write_hand(h, "kvc");
  expect_error(h.path, {"kv_count", at(16)});
  HandFile h2 = simple_file();
  h2.tensor_count = uint64_t{1} << 40;
  write_hand(h2, "tc");
  expect_error(h2.path, {"tensor_count", at(8)});
  HandFile h3 = simple_file();
  h3.kv_count = UINT64_MAX - 1;
  write_hand(h3, "kvmax");
  expect_error(h3.path, {"kv_count", at(16)});
  // Plausible alone but one more entry than the file holds: caught while reading.
  HandFile h4 = simple_file();
  h4.kv_count = 2;
  write_hand(h4, "kv2");
  expect_error(h4.path, {"offset"});
}

TEST(GgufCorrupt, NDims) {
  for (size_t nd : {0u, 5u}) {
    HandFile h = simple_file();
    h.tensors[0].dims.assign(nd, 1);
    if (nd == 0) h.data_bytes = 64;
    write_hand(h, "nd");
    expect_error(h.path, {"tensor 'w' n_dims", at(h.tensor_ndims_at[0])});
  }
}

TEST(GgufCorrupt, BadDims) {
  HandFile h = simple_file();
  h.tensors[0].dims = {4, 0};
  write_hand(h, "dim0");
  expect_error(h.path, {"tensor 'w' dims[1]", at(h.tensor_ndims_at[0] + 4 + 8)});
  HandFile h2 = simple_file();
  h2.tensors[0].dims = {1u << 20, 1u << 20, 1u << 30};  // 2^70 elements
  write_hand(h2, "dimov");
  expect_error(h2.path, {"tensor 'w' dims[2]", at(h2.tensor_ndims_at[0] + 4 + 16)});
  HandFile h3 = simple_file();
  h3.tensors[0].dims = {33, 1};
  h3.tensors[0].type = 8;  // q8_0: 33 is not a whole number of 32-element blocks
  write_hand(h3, "blk");
  expect_error(h3.path, {"tensor 'w' dims[0]", "block size", at(h3.tensor_ndims_at[0] + 4)});
  // k-quants: super-blocks of 256 columns; 128 columns of q4_k / q6_k is no whole block.
  for (uint32_t type : {12u, 14u}) {
    HandFile h4 = simple_file();
    h4.tensors[0].dims = {128, 2};
    h4.tensors[0].type = type;
    write_hand(h4, "kblk" + std::to_string(type));
    expect_error(h4.path, {"tensor 'w' dims[0]", "block size 256", at(h4.tensor_ndims_at[0] + 4)});
  }
}

// A q4_k tensor of whole super-blocks reads, with the row size of its 144-byte blocks.
TEST(Gguf, ReadsKquantTensors) {
  HandFile h = simple_file();
  h.tensors[0].dims = {512, 3};
  h.tensors[0].type = 12;
  h.data_bytes = 3 * 2 * 144;
  write_hand(h, "q4k");
  auto f = gguf::GgufFile::open(h.path);
  ASSERT_EQ(f->tensors().size(), 1u);
  EXPECT_EQ(f->tensors()[0].dtype, DType::Q4_K);
  EXPECT_EQ(f->tensors()[0].nbytes, 3u * 2u * 144u);
}

TEST(GgufCorrupt, Duplicates) {
  HandFile h = simple_file();
  h.tensors.push_back({"w", {4}, 0, 32});
  h.data_bytes = 48;
  write_hand(h, "dupt");
  expect_error(h.path, {"tensor 'w'", "duplicate", "offset"});
  HandFile h2 = simple_file();
  h2.kvs.push_back(kv_str("general.architecture", "qwen"));
  write_hand(h2, "dupk");
  expect_error(h2.path, {"metadata key 'general.architecture'", "duplicate", "offset"});
}

TEST(GgufCorrupt, InvalidBool) {
  HandFile h = simple_file();
  h.kvs.push_back({"x.flag", 7, {2}});
  write_hand(h, "bool");
  expect_error(h.path, {"metadata key 'x.flag'", "bool", at(h.kv_value_at[1])});
}

TEST(GgufCorrupt, StringLengthsPastEnd) {
  HandFile h = simple_file();
  Buf b;
  b.put<uint64_t>(1000000);
  b.b.push_back('x');
  h.kvs.push_back({"x.s", 8, b.b});
  write_hand(h, "slen");
  expect_error(h.path, {"metadata key 'x.s'", "string length", at(h.kv_value_at[1])});
  // A huge key length is caught at the key itself.
  Buf o;
  o.put<uint32_t>(0x46554747u);
  o.put<uint32_t>(3);
  o.put<uint64_t>(0);
  o.put<uint64_t>(1);
  o.put<uint64_t>(UINT64_MAX);
  o.b.resize(64, 0);
  const std::string p = temp_path("klen");
  write_bytes(p, o.b);
  expect_error(p, {"metadata key #0", "string length", at(24)});
}

TEST(GgufCorrupt, BadArrays) {
  HandFile h = simple_file();
  Buf b;
  b.put<uint32_t>(4);  // uint32 elements
  b.put<uint64_t>(1000);
  b.put<uint32_t>(1);
  h.kvs.push_back({"x.a", 9, b.b});
  write_hand(h, "alen");
  expect_error(h.path, {"metadata key 'x.a'", "array length", "offset"});
  HandFile h2 = simple_file();
  Buf b2;
  b2.put<uint32_t>(77);  // unknown element type
  b2.put<uint64_t>(0);
  h2.kvs.push_back({"x.a", 9, b2.b});
  write_hand(h2, "atype");
  expect_error(h2.path, {"metadata key 'x.a'", "element type", at(h2.kv_value_at[1])});
  HandFile h3 = simple_file();
  h3.kvs.push_back({"x.v", 13, {0, 0, 0, 0}});
  write_hand(h3, "vtype");
  expect_error(h3.path, {"metadata key 'x.v'", "value type", "offset"});
  // Arrays of arrays of arrays are refused rather than recursed into.
  Buf b4;
  for (int d = 0; d < 3; ++d) {
    b4.put<uint32_t>(9);
    b4.put<uint64_t>(1);
  }
  b4.put<uint32_t>(0);
  b4.put<uint64_t>(0);
  HandFile h4 = simple_file();
  h4.kvs.push_back({"x.deep", 9, b4.b});
  write_hand(h4, "deep");
  expect_error(h4.path, {"metadata key 'x.deep'", "nested", "offset"});
}

// Metadata arrays are held as Values (~100 bytes each, from as little as 1 byte of file),
// so their memory is bounded: 64 MiB for any file (Issue19: a 1 MB file cannot ask for
// 100 MB), 16 times the file up to 512 MiB, a quarter of the file. A vocabulary-only GGUF
// has no tensors to make the file large: o200k's (gpt-4o) holds 846k array elements in
// 9 MB, which 64 MiB alone refused.
TEST(GgufReader, VocabularySizedArraysFitTheMemoryBudget) {
  HandFile h = simple_file();
  Buf b;
  b.put<uint32_t>(8);  // string elements, like tokenizer.ggml.merges
  const uint64_t n = 900000;
  b.put<uint64_t>(n);
  for (uint64_t i = 0; i < n; ++i) {
    b.put<uint64_t>(2);
    b.put<uint16_t>(static_cast<uint16_t>(0x6161 + i % 16));
  }
  h.kvs.push_back({"x.merges", 9, b.b});  // ~86 MB as Values from a 9 MB file
  const std::string p = write_hand(h, "vocabarray");
  auto f = GgufFile::open(p);
  EXPECT_EQ(f->get("x.merges").array.size(), n);
}

TEST(GgufCorrupt, ArraysPastTheMemoryBudget) {
  HandFile h = simple_file();
  Buf b;
  b.put<uint32_t>(0);  // uint8 elements
  b.put<uint64_t>(3000000);
  b.b.resize(b.b.size() + 3000000, 1);
  h.kvs.push_back({"x.a", 9, b.b});  // ~288 MB as Values from a 3 MB file
  write_hand(h, "hugearray");
  expect_error(h.path, {"metadata key 'x.a'", "array length 3000000", "64 MiB in memory", "offset"});
}

TEST(GgufCorrupt, RandomByteFlipsNeverCrash) {
  // Cheap fuzzing: flipping bytes in the header may produce a valid file or an
  // InputError, never anything else (ASan/UBSan builds catch stray reads).
  const std::string src = temp_path("fz");
  full_writer(32).write(src);
  const std::vector<uint8_t> full = read_bytes(src);
  const uint64_t header = GgufFile::open(src)->data_offset();
  const std::string p = temp_path("flip");
  uint32_t rng = 12345;
  for (int iter = 0; iter < 600; ++iter) {
    std::vector<uint8_t> b = full;
    for (int k = 0; k < 3; ++k) {
      rng = rng * 1664525u + 1013904223u;
      const size_t pos = (rng >> 8) % header;
      rng = rng * 1664525u + 1013904223u;
      b[pos] = static_cast<uint8_t>(rng >> 24);
    }
    write_bytes(p, b);
    try {
      auto f = GgufFile::open(p);
      for (const auto& t : f->tensors()) ASSERT_LE(t.file_offset + t.nbytes, f->file_size());
    } catch (const InputError&) {
    }
  }
}

}  // namespace
}  // namespace moeflow::gguf
