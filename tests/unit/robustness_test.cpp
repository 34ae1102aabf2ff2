// Issue 19, "bad input never crashes, never eats the machine, never loses a file": one
// regression test per reported fault, named after it. Model files are the fixtures
// rewritten with one field changed; commands run the real binary, and where the fault
// was a huge allocation the child's peak resident memory is measured (wait4).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "input_error_of.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "engine/model_check.h"
#include "engine/sampler.h"
#include "format/gguf.h"
#include "format/routing_trace.h"
#include "format/trace.h"
#include "model/model_weights.h"
#include "policy/duoserve.h"
#include "policy/expert_mlp.h"
#include "sim/trace_stats.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;
using gguf::Value;
using gguf::ValueType;
using moeflow::testing::scratch_path;

const std::string kModel = moeflow::testing::fixture_path("mixtral-f32.gguf");
const std::string kQ8Model = moeflow::testing::fixture_path("qwen3moe-q8_0.gguf");

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A copy of `src` with metadata keys set (added or replaced) and, optionally, a
// tensor's bytes changed.
std::string rewrite(const std::string& src, const std::map<std::string, Value>& set,
                    const std::function<void(const std::string&, std::vector<uint8_t>&)>& patch = {}) {
  auto f = GgufFile::open(src);
  GgufWriter w(f->alignment());
  for (const std::string& k : f->metadata_order()) w.set(k, set.count(k) ? set.at(k) : f->get(k));
  for (const auto& [k, v] : set)
    if (!f->has(k)) w.set(k, v);
  for (const auto& t : f->tensors()) {
    std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
    if (patch) patch(t.name, bytes);
    w.add_tensor(t.name, t.dims, t.dtype, std::move(bytes));
  }
  const std::string out = scratch_path("model") + ".gguf";
  w.write(out);
  return out;
}

std::string load_error(const std::string& path, int threads = 4) {
  try {
    check_loadable(*Model::load(path), threads);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

moeflow::testing::BinaryResult run(const std::string& args) { return moeflow::testing::run_moeflow(args); }

// Runs the binary with output discarded; returns its exit code and peak resident set.
struct Measured {
  int code = -1;
  long max_rss_mib = 0;
};
Measured run_measured(const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::vector<char*> argv;
    std::string bin = MOEFLOW_BINARY;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (std::string& s : copy) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ru.ru_maxrss / 1024};
}

// Under the sanitizers the runtime's shadow memory inflates every process; the bound
// is on what the input makes the program allocate, far below the gigabytes reported.
constexpr long kSmallInputRssMib = 256;

void expect_failure(const std::string& args, int code, const std::string& needle) {
  const auto r = run(args);
  EXPECT_EQ(r.code, code) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\nexpected '" << needle << "' in:\n" << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
}

// ---- item 1: head_count x key_length overflowing int64 -------------------------------

TEST(Issue19, HeadCountTimesHeadDimOverflowIsRejected) {
  const std::string a = rewrite(kModel, {{"llama.attention.head_count", Value::make_u64((1ull << 60) + 4)}});
  EXPECT_NE(load_error(a).find("llama.attention.head_count"), std::string::npos) << load_error(a);
  const std::string b = rewrite(kModel, {{"llama.attention.key_length", Value::make_u64((1ull << 62) - 2)},
                                         {"llama.attention.value_length", Value::make_u64((1ull << 62) - 2)}});
  EXPECT_NE(load_error(b).find("llama.attention.key_length"), std::string::npos) << load_error(b);
  const auto r = run("inspect " + a);
  EXPECT_NE(r.out.find("NOT loadable"), std::string::npos) << r.out;
  expect_failure("run -m " + a + " --prompt-tokens 1,2 -n 1", 1, "head_count");
}

// ---- item 7: scalars and weights -----------------------------------------------------

TEST(Issue19, NanOrNonPositiveRmsEpsAndRopeBaseAreRejected) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float eps : {nan, -1.0f, 0.0f, inf}) {
    const std::string m = rewrite(kModel, {{"llama.attention.layer_norm_rms_epsilon", Value::make_f32(eps)}});
    EXPECT_NE(load_error(m).find("layer_norm_rms_epsilon"), std::string::npos) << eps << ": " << load_error(m);
  }
  for (float base : {0.0f, nan, -5.0f, inf}) {
    const std::string m = rewrite(kModel, {{"llama.rope.freq_base", Value::make_f32(base)}});
    EXPECT_NE(load_error(m).find("rope.freq_base"), std::string::npos) << base << ": " << load_error(m);
  }
}

TEST(Issue19, NanWeightsAndScalesAreNamedNotSampledFrom) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // A dense f32 weight: caught by Model::load.
  const std::string dense = rewrite(kModel, {}, [&](const std::string& name, std::vector<uint8_t>& b) {
    if (name == "blk.1.attn_norm.weight") std::memcpy(b.data() + 8, &nan, 4);
  });
  EXPECT_NE(load_error(dense).find("blk.1.attn_norm.weight"), std::string::npos) << load_error(dense);
  // A q8_0 block scale of +Inf (f16 0x7c00) in a dense matrix.
  const std::string scale = rewrite(kQ8Model, {}, [&](const std::string& name, std::vector<uint8_t>& b) {
    if (name == "blk.0.attn_q.weight") b[34 * 3] = 0x00, b[34 * 3 + 1] = 0x7c;
  });
  EXPECT_NE(load_error(scale).find("blk.0.attn_q.weight' holds NaN or an infinity at element 96"), std::string::npos)
      << load_error(scale);
  // An expert's scale: checked when the experts are copied into memory (and by inspect).
  const std::string expert = rewrite(kQ8Model, {}, [&](const std::string& name, std::vector<uint8_t>& b) {
    if (name != "blk.1.ffn_down_exps.weight") return;
    const size_t per_expert = b.size() / 8;  // the fixture's 8 experts: poison each one's first scale
    for (size_t e = 0; e < 8; ++e) b[e * per_expert] = 0xff, b[e * per_expert + 1] = 0x7f;
  });
  ASSERT_EQ(GgufFile::open(expert)->get("qwen3moe.expert_count").as_int(""), 8);
  auto m = Model::load(expert);
  EXPECT_THROW(m->make_resident(true, nullptr), InputError);
  EXPECT_NE(load_error(expert).find("blk.1.ffn_down_exps.weight"), std::string::npos) << load_error(expert);
  // Copied in pieces of four rows on four threads, the error is the one a copy on one
  // thread names: the first poisoned element, also where it lies past the first piece.
  const auto q8 = Model::load(kQ8Model);
  const int64_t rows = q8->weights().layers[1].down_exps.first.rows, cols = q8->weights().layers[1].down_exps.first.cols;
  const std::string inner = rewrite(kQ8Model, {}, [&](const std::string& name, std::vector<uint8_t>& b) {
    if (name != "blk.1.ffn_down_exps.weight") return;
    for (int64_t e : {5, 6}) {  // expert 5's row 9, block 1; and expert 6's first scale
      const size_t at = static_cast<size_t>(e == 5 ? (5 * rows + 9) * cols / 32 * 34 + 34 : 6 * rows * cols / 32 * 34);
      b[at] = 0x00, b[at + 1] = 0x7c;
    }
  });
  const std::string want = "at element " + std::to_string((5 * rows + 9) * cols + 32) + " ";
  // inspect's check (check_loadable) on four threads names what it names on one: with
  // two expert tensors poisoned, the first in the file.
  const std::string two = rewrite(kQ8Model, {}, [&](const std::string& name, std::vector<uint8_t>& b) {
    if (name != "blk.0.ffn_up_exps.weight" && name != "blk.1.ffn_down_exps.weight") return;
    const size_t middle = b.size() / 34 / 2 * 34;  // a q8_0 block's scale
    b[middle] = 0xff, b[middle + 1] = 0x7f;
  });
  const std::string first = load_error(two, 1);
  EXPECT_NE(first.find("blk.0.ffn_up_exps.weight"), std::string::npos) << first;
  for (int threads : {2, 4, 8}) EXPECT_EQ(load_error(two, threads), first);
  EXPECT_EQ(load_error(inner, 1), load_error(inner, 4));
  for (const std::string& file : {expert, inner}) {
    const std::string one =
        testing::input_error_of([&] { Model::load(file)->make_resident(true, nullptr, 1, size_t{1} << 30); });
    const std::string many = testing::input_error_of([&] { Model::load(file)->make_resident(true, nullptr, 4, 64); });
    EXPECT_NE(one.find(file == expert ? "at element 0 " : want), std::string::npos) << one;
    EXPECT_EQ(many, one);
  }
  // A run that reads the NaN (mapped, not checked up front) says so instead of
  // printing token 0 forever.
  expect_failure("run -m " + expert + " --mmap --prompt-tokens 1,2,3 -n 2 --ignore-eos", 1, "non-finite logits");
}

TEST(Issue19, SamplerRefusesNonFiniteLogits) {
  Sampler s({});
  std::vector<float> logits = {0.5f, 1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f};
  try {
    s.sample(logits.data(), 4);
    FAIL() << "sampled from NaN logits";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite logits at sampled token 0 (vocabulary id 2 is NaN)"), std::string::npos)
        << e.what();
  }
  logits[2] = -std::numeric_limits<float>::infinity();
  SamplerOptions o;
  o.temperature = 0.8f;
  Sampler t(o);
  EXPECT_THROW(t.sample(logits.data(), 4), InputError);
}

// ---- item 9: a tiny temperature ------------------------------------------------------

TEST(Issue19, TinyTemperatureActsAsGreedy) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f};
  for (float temp : {1e-45f, 1e-30f, 1e-6f}) {
    SamplerOptions o;
    o.temperature = temp;
    Sampler s(o);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits.data(), 5), 1) << temp;
  }
  // Just above the threshold, with logits whose quotient overflowed a float: no NaN,
  // the maximum wins (the runner-up's probability is exp(-1e38)).
  SamplerOptions o;
  o.temperature = 1e-4f;
  o.top_k = 0;
  Sampler s(o);
  const std::vector<float> big = {-3e34f, 2e34f, 3e34f};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(big.data(), 3), 2);
}

// ---- item 8: GGUF data layout --------------------------------------------------------

// Two f32 tensors; returns the file's bytes and the offset of `b`'s offset field.
std::string two_tensor_file(size_t* b_offset_field) {
  GgufWriter w;
  w.set("general.architecture", Value::make_string("test"));
  std::vector<uint8_t> data(64 * 4, 1);
  w.add_tensor("a", {64}, DType::F32, data);
  w.add_tensor("b", {64}, DType::F32, data);
  const std::string path = scratch_path("two") + ".gguf";
  w.write(path);
  std::string bytes = read_all(path);
  // Tensor infos: u64 name length 1, "b", u32 n_dims 1, u64 dim, u32 type, u64 offset.
  const std::string b_info = std::string("\x01\0\0\0\0\0\0\0b\x01\0\0\0", 13);
  const size_t at = bytes.find(b_info);
  *b_offset_field = at + 13 + 8 + 4;
  return bytes;
}

TEST(Issue19, OverlappingTensorDataIsRejected) {
  size_t off = 0;
  std::string bytes = two_tensor_file(&off);
  std::memset(bytes.data() + off, 0, 8);  // b starts where a starts
  const std::string path = scratch_path("overlap") + ".gguf";
  write_all(path, bytes);
  try {
    GgufFile::open(path);
    FAIL() << "overlapping tensors accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("overlaps tensor"), std::string::npos) << e.what();
  }
}

TEST(Issue19, TensorCountOneLessThanTheFileHoldsIsRejected) {
  size_t off = 0;
  std::string bytes = two_tensor_file(&off);
  bytes[8] = 1;  // tensor_count 2 -> 1
  const std::string path = scratch_path("count") + ".gguf";
  write_all(path, bytes);
  try {
    GgufFile::open(path);
    FAIL() << "tensor_count one short accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_count 1"), std::string::npos) << e.what();
  }
  // The same for a real model.
  std::string model = read_all(kModel);
  uint64_t n = 0;
  std::memcpy(&n, model.data() + 8, 8);
  --n;
  std::memcpy(model.data() + 8, &n, 8);
  write_all(path, model);
  EXPECT_THROW(GgufFile::open(path), InputError);
}

// A 1 MB file whose one metadata array has a million 1-byte elements would take ~100 MB
// as Values: refused (the fuzzing rule: no input under 1 MB allocates over 64 MB).
TEST(Issue19, OneMegabyteOfMetadataArrayCannotAllocateAHundred) {
  GgufWriter w;
  w.set("general.architecture", Value::make_string("test"));
  std::vector<Value> many(1000000, Value{});
  for (Value& v : many) v.type = ValueType::UINT8;
  w.set("big", Value::make_array(ValueType::UINT8, std::move(many)));
  const std::string path = scratch_path("bigarray") + ".gguf";
  w.write(path);
  try {
    GgufFile::open(path);
    FAIL() << "a million-element array accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("metadata key 'big': array length 1000000"), std::string::npos) << e.what();
  }
}

// ---- item 10: trace expert ids -------------------------------------------------------

std::string trace_line(const std::string& experts, int layer = 0, int num_experts = 8) {
  return R"({"request":0,"iter":0,"phase":"decode","layer":)" + std::to_string(layer) +
         R"(,"num_experts":)" + std::to_string(num_experts) + R"(,"top_k":2,"experts":)" + experts + "}";
}

std::string parse_error(const std::string& line) { return testing::input_error_of([&] { parse_trace_line(line, "t.jsonl:7"); }); }

TEST(Issue19, TraceExpertIdsAreExactDistinctIntegers) {
  EXPECT_EQ(parse_error(trace_line("[[0,1]]")), "");
  EXPECT_NE(parse_error(trace_line("[[4294967297,0]]")).find("t.jsonl:7: experts[0][0] = 4294967297 is not an expert id"),
            std::string::npos)
      << parse_error(trace_line("[[4294967297,0]]"));
  EXPECT_NE(parse_error(trace_line("[[1.7,0]]")).find("experts[0][0] = 1.7 is not an integer"), std::string::npos)
      << parse_error(trace_line("[[1.7,0]]"));
  EXPECT_NE(parse_error(trace_line("[[3,3]]")).find("names expert 3 twice"), std::string::npos);
  EXPECT_NE(parse_error(trace_line("[[1e400,0]]")).find("t.jsonl:7: not valid JSON"), std::string::npos)
      << parse_error(trace_line("[[1e400,0]]"));
  EXPECT_NE(parse_error(trace_line("[[-1,0]]")).find("not an expert id"), std::string::npos);
  EXPECT_NE(parse_error(R"({"request":18446744073709551615,"iter":0,"phase":"decode","layer":0,"num_experts":8,"top_k":2,"experts":[[0,1]]})")
                .find("\"request\""),
            std::string::npos);
  // Through the binary: a user error, never "internal error".
  const std::string path = scratch_path("ids") + ".jsonl";
  write_all(path, trace_line("[[0,1]]") + "\n" + trace_line("[[1e400,1]]") + "\n");
  expect_failure("trace stats " + path, 1, path + ":2");
}

// ---- item 4: layer / num_experts driving huge tables ---------------------------------

TEST(Issue19, TraceWithHugeLayerOrExpertCountStaysSmall) {
  EXPECT_NE(parse_error(trace_line("[[0,1]]", 4095)).find("\"layer\" = 4095 is outside [0, 1023]"), std::string::npos);
  EXPECT_NE(parse_error(trace_line("[[0,1]]", 0, 65536)).find("num_experts"), std::string::npos);
  // One line at layer 255 with 1024 experts: 2.1 GB in trace stats, a 2.14 GB state
  // from train-predictor.
  const std::string one = scratch_path("one") + ".jsonl";
  write_all(one, trace_line("[[0,1]]", 255, 1024) + "\n");
  const std::string state = scratch_path("state") + ".bin";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"trace", "stats", one}, {"train-predictor", "--trace", one, "--out", state}}) {
    const Measured m = run_measured(args);
    EXPECT_EQ(m.code, 1) << args[0];
    EXPECT_LT(m.max_rss_mib, kSmallInputRssMib) << args[0];
  }
  EXPECT_FALSE(std::filesystem::exists(state));
  // ~40 KB: 400 single-layer iterations and one record at layer 1000.
  const std::string sparse = scratch_path("sparse") + ".jsonl";
  {
    std::ofstream f(sparse);
    for (int it = 0; it < 400; ++it)
      f << R"({"request":0,"iter":)" << it << R"(,"phase":"decode","layer":0,"num_experts":8,"top_k":2,"experts":[[0,1]]})"
        << "\n";
    f << trace_line("[[0,1]]", 1000) << "\n";
  }
  const Measured m = run_measured({"trace", "stats", sparse});
  EXPECT_EQ(m.code, 1);
  EXPECT_LT(m.max_rss_mib, kSmallInputRssMib);
  expect_failure("trace stats " + sparse, 1, "more than half the (iteration, layer) records are missing");
  // Dense and legal, but 4096 experts on 2 layers: the affinity counts stay sparse
  // (a dense table is 4096 x 4096 doubles = 128 MiB).
  const std::string wide = scratch_path("wide") + ".jsonl";
  {
    std::ofstream f(wide);
    for (int l = 0; l < 2; ++l) f << trace_line("[[4095,17],[3,4000]]", l, 4096) << "\n";
  }
  const Measured w = run_measured({"trace", "stats", wide});
  EXPECT_EQ(w.code, 0);
  EXPECT_LT(w.max_rss_mib, kSmallInputRssMib);
}

// The sparse successor counts give the dense table's answer (a reference computed
// here the old way, on random routing).
TEST(Issue19, SparseAffinityMatchesADenseReference) {
  const int32_t L = 3, E = 6, K = 2;
  uint32_t rng = 7;
  auto next = [&rng](uint32_t n) {
    rng = rng * 1103515245u + 12345u;
    return static_cast<int32_t>((rng >> 16) % n);
  };
  std::vector<TraceRecord> recs;
  for (int it = 0; it < 30; ++it)
    for (int l = 0; l < L; ++l) {
      TraceRecord r;
      r.iter = it;
      r.layer = l;
      r.num_experts = E;
      r.top_k = K;
      for (int t = 0; t < 3; ++t) {
        const int32_t a = next(E), b = (a + 1 + next(E - 1)) % E;
        r.experts.push_back({a, b});
      }
      recs.push_back(r);
    }
  const Trace t = group_trace(recs, "random");
  // Dense reference.
  std::vector<double> aff(static_cast<size_t>(L) * E * E, 0);
  for (const auto& rq : t.requests)
    for (const auto& it : rq.iterations)
      for (int l = 0; l + 1 < L; ++l)
        for (size_t tok = 0; tok < it.layers[l].experts.size(); ++tok)
          for (int32_t i : it.layers[l].experts[tok])
            for (int32_t j : it.layers[l + 1].experts[tok]) aff[(static_cast<size_t>(l) * E + i) * E + j] += 1;
  int64_t hit = 0, n = 0;
  for (const auto& rq : t.requests)
    for (const auto& it : rq.iterations)
      for (int l = 0; l + 1 < L; ++l)
        for (size_t tok = 0; tok < it.layers[l].experts.size(); ++tok) {
          std::vector<double> score(E, 0);
          for (int32_t i : it.layers[l].experts[tok])
            for (int32_t j = 0; j < E; ++j) score[j] += aff[(static_cast<size_t>(l) * E + i) * E + j];
          const int32_t best = static_cast<int32_t>(std::max_element(score.begin(), score.end()) - score.begin());
          const auto& nx = it.layers[l + 1].experts[tok];
          hit += std::count(nx.begin(), nx.end(), best) > 0;
          ++n;
        }
  const TraceStats s = compute_trace_stats(t);
  EXPECT_DOUBLE_EQ(s.affinity_top1_hit, static_cast<double>(hit) / static_cast<double>(n));
  std::printf("affinity top-1 hit: %.4f (dense reference %lld of %lld)\n", s.affinity_top1_hit, static_cast<long long>(hit),
              static_cast<long long>(n));
}

// ---- item 3: policy states claiming shapes the model does not have -------------------

std::string duoserve_header(int32_t top_k, int32_t n_layer, int32_t n_expert) {
  std::string s("MFDUOSV1", 8);
  auto put = [&](auto v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(top_k);
  put(n_layer);
  put(n_expert);
  put(int64_t{0});
  return s;
}

TEST(Issue19, DuoserveStateShapeIsComparedWithTheModelBeforeAllocating) {
  const std::string h = duoserve_header(2, 256, 1024);
  ASSERT_EQ(h.size(), 28u);
  DuoservePredictor p(6, 8, 2);
  try {
    std::istringstream in(h);
    p.load(in, "s.bin");
    FAIL() << "a 256 x 1024 state loaded into a 6 x 8 model";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is for 256 layers x 1024 experts, the model has 6 x 8"), std::string::npos)
        << e.what();
  }
  // The model's own shape but no payload: refused before the tables are allocated.
  DuoservePredictor big(64, 256, 2, DuoserveOptions{});
  try {
    std::istringstream in(duoserve_header(2, 64, 256));
    big.load(in, "s.bin");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated (needs"), std::string::npos) << e.what();
  }
  // An ExpertMLP header of 2^20 inputs (4.2 GB once built).
  std::string mlp;
  auto put = [&](auto v) { mlp.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(int32_t{1 << 20});
  put(int32_t{8});
  put(int32_t{1});
  put(int32_t{2048});
  put(0.1f);
  ExpertMlp m;
  std::istringstream in(mlp);
  try {
    m.load(in, "s.bin", 64, 8);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ExpertMLP has 1048576 inputs"), std::string::npos) << e.what();
  }
  // Through the binary, under the memory bound.
  const std::string state = scratch_path("duo") + ".bin";
  write_all(state, h);
  const std::string trace = scratch_path("t") + ".jsonl";
  {
    std::ofstream f(trace);
    for (int l = 0; l < 6; ++l) f << trace_line("[[0,1]]", l) << "\n";
  }
  const Measured r = run_measured({"simulate", "--trace", trace, "--model-profile", "moeflow-default", "--policy",
                                   "duoserve", "--policy-state", state});
  EXPECT_EQ(r.code, 1);
  EXPECT_LT(r.max_rss_mib, kSmallInputRssMib);
}

// ---- item 2: an empty policy list ----------------------------------------------------

std::string small_trace() {
  const std::string path = scratch_path("small") + ".jsonl";
  std::ofstream f(path);
  for (int req = 0; req < 3; ++req)
    for (int it = 0; it < 3; ++it)
      for (int l = 0; l < 6; ++l)
        f << R"({"model":"moeflow-default","request":)" << req << R"(,"iter":)" << it << R"(,"phase":")"
          << (it ? "decode" : "prefill") << R"(","layer":)" << l
          << R"(,"num_experts":8,"top_k":2,"experts":[[)" << (req + l) % 8 << "," << (req + l + 1) % 8 << "]]}\n";
  return path;
}

TEST(Issue19, SimulateWithNoPolicyIsAUsageError) {
  const std::string t = small_trace();
  const std::string base = "simulate --trace " + t + " --model-profile moeflow-default";
  expect_failure(base + " --policy ''", 2, "names no policy");
  expect_failure(base + " --policy ,", 2, "names no policy");
}

// ---- item 6: files are replaced atomically, never through a link ---------------------

TEST(Issue19, AtomicFileNeverFollowsAPlantedLinkNorReplacesAFifo) {
  const std::string dir = scratch_path("atomic");
  std::filesystem::create_directory(dir);
  const std::string victim = dir + "/victim", target = dir + "/out.gguf";
  write_all(victim, "precious");
  std::filesystem::create_symlink(victim, target + ".tmp");
  write_file_atomic(target, "new");
  EXPECT_EQ(read_all(victim), "precious");
  EXPECT_EQ(read_all(target), "new");
  // make-model -o and train-predictor --out go through the same path.
  const auto r = run("make-model -o " + target + " --layers 1 --experts 2 --top-k 1 --vocab 300 --embd 32 --ff 32 "
                     "--heads 2 --kv-heads 1 --head-dim 16");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_all(victim), "precious");
  EXPECT_NO_THROW(GgufFile::open(target));
  // A link as the target itself, a FIFO, a folder: refused, left as they were.
  const std::string link = dir + "/link";
  std::filesystem::create_symlink(victim, link);
  EXPECT_THROW(write_file_atomic(link, "x"), InputError);
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(write_file_atomic(fifo, "x"), InputError);
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_THROW(write_file_atomic(dir, "x"), InputError);
  EXPECT_THROW(write_file_atomic(dir + "/missing/out", "x"), InputError);
  const std::string t = small_trace();
  expect_failure("train-predictor --trace " + t + " --out " + fifo, 1, "not a regular file");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_EQ(read_all(victim), "precious");
}

TEST(Issue19, AKilledWriteLeavesThePreviousFile) {
  const std::string dir = scratch_path("killed");
  std::filesystem::create_directory(dir);
  const std::string path = dir + "/state.bin";
  write_all(path, "valid state");
  const pid_t pid = ::fork();
  if (pid == 0) {
    AtomicFile f(path);
    f.write(std::string(1 << 20, 'x').data(), 1 << 20);
    f.stream().flush();
    ::_exit(0);  // killed before commit
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(read_all(path), "valid state");
  // An error (destroyed without commit) removes its temporary too.
  {
    AtomicFile f(path);
    f.write("partial", 7);
  }
  EXPECT_EQ(read_all(path), "valid state");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().filename().string().find(".tmp.") == std::string::npos;
  EXPECT_EQ(files, 1);
  // Replacing keeps the file's permission bits.
  ::chmod(path.c_str(), 0640);
  write_file_atomic(path, "v2");
  struct stat st {};
  ::stat(path.c_str(), &st);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

// ---- item 11: inspect runs loading's validation --------------------------------------

TEST(Issue19, InspectAgreesWithRunOnTokenizerFaults) {
  auto f = GgufFile::open(kModel);
  const size_t n_tok = f->get("tokenizer.ggml.tokens").as_array("").size();
  std::vector<Value> short_types(n_tok - 1, Value::make_i32(1));
  std::vector<Value> nested = {Value::make_array(ValueType::INT32, {Value::make_i32(1)})};
  const std::map<std::string, Value> faults[] = {
      {{"tokenizer.ggml.bos_token_id", Value::make_u32(static_cast<uint32_t>(n_tok) + 5)}},
      {{"tokenizer.ggml.token_type", Value::make_array(ValueType::INT32, short_types)}},
      {{"tokenizer.ggml.token_type", Value::make_array(ValueType::ARRAY, nested)}},
  };
  for (const auto& fault : faults) {
    const std::string m = rewrite(kModel, fault);
    SCOPED_TRACE(fault.begin()->first);
    const auto ins = run("inspect " + m);
    EXPECT_NE(ins.out.find("NOT loadable"), std::string::npos) << ins.out;
    const auto r = run("run -m " + m + " --prompt-tokens 1,2 -n 1");
    EXPECT_EQ(r.code, 1) << r.out;
  }
  EXPECT_NE(run("inspect " + kModel).out.find("loads as a supported MoE architecture"), std::string::npos);
}

// ---- item 12: the smaller ones -------------------------------------------------------

TEST(Issue19, PolicyStateForAPolicyThatKeepsNoneIsAnError) {
  const std::string t = small_trace();
  const std::string state = scratch_path("st") + ".bin";
  write_all(state, "x");
  const std::string base = "simulate --trace " + t + " --model-profile moeflow-default";
  expect_failure(base + " --policy lru --policy-state " + state, 1, "policy 'lru' keeps no learned state");
  expect_failure(base + " --policy lru,duoserve --policy-state bogus=" + state, 2, "'bogus', which --policy does not run");
  expect_failure(base + " --policy lru,duoserve --policy-state " + state, 2, "NAME=FILE");
  expect_failure("run -m " + kModel + " --prompt-tokens 1,2 -n 1 --policy lru --expert-budget 50% --policy-state " + state,
                 1, "keeps no learned state");
}

TEST(Issue19, EmptyOrFolderTracesAreErrors) {
  const std::string empty = scratch_path("empty") + ".jsonl";
  write_all(empty, "");
  expect_failure("trace stats " + empty, 1, "holds no records");
  const std::string dir = scratch_path("dir");
  std::filesystem::create_directory(dir);
  expect_failure("trace stats " + dir, 1, "is a folder");
  const std::string out = scratch_path("pred") + ".bin";
  expect_failure("train-predictor --trace " + empty + " --out " + out, 1, "holds no records");
  EXPECT_FALSE(std::filesystem::exists(out));
}

// A folder or a device where a file belongs was an "internal error" (the stream read
// threw "basic_filebuf::underflow ... Is a directory") or read without end (/dev/zero).
TEST(Issue19, FoldersAndDevicesWhereAFileBelongsAreNamed) {
  const std::string t = small_trace();
  const std::string dir = scratch_path("notafile");
  std::filesystem::create_directories(dir);
  const std::string sim = "simulate --trace " + t + " --model-profile moeflow-default";
  for (const std::string& path : {dir, std::string("/dev/zero")}) {
    const std::string says = path == dir ? "is a folder, not a file" : "is not a regular file";
    expect_failure("simulate --trace " + t + " --hw " + path, 1, "hardware profile '" + path + "' " + says);
    expect_failure("simulate --trace " + t + " --model-profile " + path, 1, "model profile '" + path + "' " + says);
    expect_failure(sim + " --policy emoe --tasks " + path, 1, "task profiles '" + path + "' " + says);
    expect_failure("simulate --trace " + path, 1, "trace '" + path + "' " + says);
    expect_failure("plan --trace " + t + " --platform " + path, 1, "platform profile '" + path + "' " + says);
    expect_failure("trace record -f " + path + " -o " + scratch_path("rec") + ".jsonl", 1, "--file '" + path + "' " + says);
    expect_failure("perplexity -m " + kModel + " -f " + path, 1, "--file '" + path + "' " + says);
    expect_failure("simulate-serve --arrivals " + path, 1, "--arrivals '" + path + "' " + says);
    expect_failure("run -m " + kModel + " -n 1 --policy emoe --expert-budget 50% --policy-state " + path, 1,
                   "policy state '" + path + "' " + says);
  }
}

// --measure's default is every request not learned from, on both sides of --learn (it
// was only those before a --learn that does not start at 0); overlapping ranges and two
// ways to choose the learning requests are refused.
TEST(Issue19, LearnAndMeasureSplitTheRequests) {
  const std::string t = small_trace();  // 3 requests
  const std::string base = "simulate --trace " + t + " --model-profile moeflow-default";
  const auto r = run(base + " --learn 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("learn 1 requests, measure 2"), std::string::npos) << r.out;
  expect_failure(base + " --learn 0:2 --measure 1:3", 2, "--learn 0:2 and --measure 1:3 share requests 1:2");
  expect_failure(base + " --learn 0:1 --learn-fraction 0.5", 2, "give one");
  expect_failure("trace accuracy " + t + " --learn 0:2", 2, "share requests 1:2");
}

// --policy-state-out was accepted everywhere and saved only by run: perplexity and
// bench ignored it, and run with a stateless policy wrote nothing without a word.
TEST(Issue19, PolicyStateOutIsSavedOrRefused) {
  const std::string out = scratch_path("ppl") + ".state";
  const std::string text = scratch_path("ppl") + ".txt";
  write_all(text, "The sea is wide and the ships are many. The sea is deep.\n");
  const auto r = run("perplexity -m " + kModel + " -f " + text + " -c 16 --policy moe-infinity --expert-budget 50% "
                     "--policy-state-out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_TRUE(std::filesystem::exists(out));
  EXPECT_GT(std::filesystem::file_size(out), 0u);
  const auto again = run("run -m " + kModel + " --prompt-tokens 1,2 -n 2 --policy moe-infinity --expert-budget 50% "
                         "--policy-state " + out);
  EXPECT_EQ(again.code, 0) << again.out;
  expect_failure("run -m " + kModel + " --prompt-tokens 1,2 -n 1 --policy-state-out " + out, 2, "--policy all offloads nothing");
  expect_failure("run -m " + kModel + " --prompt-tokens 1,2 -n 1 --policy lru --expert-budget 50% --policy-state-out " + out,
                 2, "policy 'lru' keeps no learned state");
  expect_failure("bench -m " + kModel + " --policy fmoe --expert-budget 50% --policy-state-out " + out, 2,
                 "bench saves no policy state");
  expect_failure("perplexity -m " + kModel + " -f " + text + " --policy fmoe --expert-budget 50% --policy-state-out /nonexistent-dir/s",
                 1, "does not exist");
}

// A count written 1.5 was cut to 1, a misspelt optional field left its default in force,
// and numbers printed as 0.000000; an arrivals line that is not JSON said only
// "expected a JSON object".
TEST(Issue19, ProfilesTakeWholeCountsAndKnownFieldsOnly) {
  const std::string t = small_trace();
  const std::string base = "simulate --trace " + t + " --model-profile moeflow-default --hw ";
  const std::string hw = scratch_path("hwfields") + ".json";
  write_all(hw, R"({"bandwidth_gbs": 16, "latency_us": 10, "copy_engines": 1.7})");
  expect_failure(base + hw, 1, "field \"copy_engines\" = 1.7 must be a whole number");
  write_all(hw, R"({"bandwidth_gbs": 16, "latency_us": 10, "copy_engines": 1, "chunk_kb": 4})");
  expect_failure(base + hw, 1, "\"chunk_kb\" is not a field of a hardware profile (fields: name, bandwidth_gbs");
  write_all(hw, R"({"bandwidth_gbs": 1e-300, "latency_us": 10, "copy_engines": 1})");
  expect_failure(base + hw, 1, "field \"bandwidth_gbs\" = 1e-300 is outside [1e-06, 1e+06]");
  write_all(hw, R"({"bandwidth_gbs": 16, "latency_us": 10, "copy_engines": 2, "description": "x", "link_note": "y"})");
  EXPECT_EQ(run(base + hw).code, 0) << "annotations are fields of every profile";
  const std::string model = scratch_path("modelfields") + ".json";
  std::string text = read_all(std::string(MOEFLOW_SOURCE_DIR_FOR_TESTS) + "/profiles/models/moeflow-default.json");
  text.replace(text.find("\"top_k\": 2"), std::string("\"top_k\": 2").size(), "\"top_k\": 1.5");
  write_all(model, text);
  expect_failure("simulate --trace " + t + " --model-profile " + model, 1, "field \"top_k\" = 1.5 must be a whole number");
  const std::string arrivals = scratch_path("arrivals") + ".jsonl";
  write_all(arrivals, "{\"arrival_s\": 0, \"prompt_tokens\": 10.5, \"output_tokens\": 5}\n");
  expect_failure("simulate-serve --arrivals " + arrivals, 1, ":1: \"prompt_tokens\" = 10.5 must be a whole number");
  write_all(arrivals, "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 5}\n{\"arrival_s\":\n");
  expect_failure("simulate-serve --arrivals " + arrivals, 1, ":2: not valid JSON");
}

// Structurally broken traces were replayed as if whole: a repeated record replaced the
// first, a second model's routing mixed in, token ids that name no row, one iteration
// both prefill and decode.
TEST(Issue19, TracesThatContradictThemselvesAreRefused) {
  const std::string good = read_all(small_trace());
  const std::string first = good.substr(0, good.find('\n') + 1);
  const std::string t = scratch_path("broken") + ".jsonl";
  auto refused = [&](const std::string& text, const std::string& needle) {
    write_all(t, text);
    expect_failure("trace stats " + t, 1, needle);
    expect_failure("simulate --trace " + t + " --model-profile moeflow-default", 1, needle);
  };
  refused(good + first, "record of request 0, iter 0, layer 0: appears twice");
  std::string other = first;
  other.replace(other.find("moeflow-default"), 15, "another-model");
  other.replace(other.find("\"request\":0"), 11, "\"request\":7");
  refused(good + other, "model 'another-model' differs from the first record's 'moeflow-default'");
  std::string tokens = first;
  tokens.insert(tokens.rfind('}'), ",\"tokens\":[1,2,3]");
  refused(tokens + good.substr(first.size()), "\"tokens\" has 3 ids, \"experts\" has 1 rows");
  std::string phase = first;
  phase.replace(phase.find("\"layer\":0"), 9, "\"layer\":5");
  phase.replace(phase.find("prefill"), 7, "decode");
  write_all(t, first + phase);
  expect_failure("trace stats " + t, 1, "phase decode, but the iteration's earlier records say prefill");
  std::string nameless = good;
  for (size_t p; (p = nameless.find("\"model\":\"moeflow-default\",")) != std::string::npos;) nameless.erase(p, 26);
  write_all(t, nameless);
  expect_failure("simulate --trace " + t, 2, "the trace names no model (its records have no \"model\" field)");
}

// A metadata key's error named the key but not the file.
TEST(Issue19, AModelsMetadataErrorsNameTheFile) {
  const std::string out = scratch_path("archint") + ".gguf";
  ASSERT_EQ(run("quantize -i " + kModel + " -o " + out + " --type f16 --override-kv general.architecture=int:5").code, 0);
  expect_failure("run -m " + out + " -n 1", 1, out + ": metadata key 'general.architecture' has type int32, expected string");
}

// A trace of prefill only printed a table of 0.0% hit rates (simulate) and 0.00%
// accuracies (train-predictor) as if measured.
TEST(Issue19, NothingToScoreIsSaidNotPrintedAsZero) {
  const std::string t = scratch_path("prefillonly") + ".jsonl";
  std::string text;
  for (int req = 0; req < 3; ++req)
    for (int l = 0; l < 6; ++l)
      text += R"({"model":"moeflow-default","request":)" + std::to_string(req) +
              R"(,"iter":0,"phase":"prefill","layer":)" + std::to_string(l) +
              R"(,"num_experts":8,"top_k":2,"experts":[[1,2],[3,4]]})" + "\n";
  write_all(t, text);
  expect_failure("simulate --trace " + t, 1, "the measured requests hold no decode iteration");
  EXPECT_EQ(run("simulate --trace " + t + " --score-prefill").code, 0);
  const std::string out = scratch_path("prefillonly") + ".duo";
  expect_failure("train-predictor --trace " + t + " --out " + out, 1, "hold no decode token");
  EXPECT_FALSE(std::filesystem::exists(out)) << "the state was written before the refusal";
  expect_failure("simulate --trace " + small_trace() + " --model-profile moeflow-default --policy emoe --policy-state emoe=",
                 2, "no file after 'emoe='");
}

// make-model wrote a model run then refused (an odd head size), ignored another
// architecture's flags, and ran out of memory (bad_alloc, "internal error") on sizes
// each in range but together past the machine.
TEST(Issue19, MakeModelRefusesWhatItCannotWrite) {
  const std::string out = scratch_path("mm") + ".gguf";
  expect_failure("make-model -o " + out + " --head-dim 3", 2, "--head-dim 3 must be even");
  expect_failure("make-model -o " + out + " --shared-experts 3", 2, "--shared-experts applies to deepseek2 and glm4moe, not mixtral");
  expect_failure("make-model -o " + out + " --arch qwen3moe --window 4", 2, "--window applies to gpt-oss, not qwen3moe");
  expect_failure("make-model -o " + out + " --embd 65536 --vocab 1048576", 2, "more than this machine's memory");
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_EQ(run("make-model -o " + out + " --arch deepseek2 --shared-experts 1").code, 0);
}

// An eMoE state with "-1" for a count loaded it as 18446744073709551615 and saved it on.
TEST(Issue19, NegativeCountsInAnEmoeStateAreRefused) {
  const std::string state = scratch_path("emoe") + ".state";
  const std::string base = "run -m " + kModel + " --prompt-tokens 1,2,3 -n 2 --policy emoe --expert-budget 50% ";
  ASSERT_EQ(run(base + "--policy-state-out " + state).code, 0);
  std::string text = read_all(state);
  // The transitions row: its length, then the counts; the first count becomes -1.
  size_t line = 0;
  for (int i = 0; i < 5; ++i) line = text.find('\n', line) + 1;
  const size_t first = text.find(' ', line) + 1;
  text.replace(first, text.find(' ', first) - first, "-1");
  write_all(state, text);
  expect_failure(base + "--policy-state " + state, 1, "transitions[0] is negative");
}

// trace record: both inputs, an output over its input, windows skipped past the text's
// end, and request ids past the largest were not named (or wrapped around).
TEST(Issue19, TraceRecordChecksItsInputsAndIds) {
  const std::string text = scratch_path("rec") + ".txt";
  std::string words;
  for (int i = 0; i < 400; ++i) words += "the sea and the ships ";
  write_all(text, words);
  const std::string out = scratch_path("rec") + ".jsonl";
  const std::string base = "trace record -m " + kModel + " -f " + text + " --prefill 8 --decode 8 ";
  expect_failure(base + "--from-trace " + small_trace() + " -o " + out, 2, "not both");
  expect_failure(base + "-o " + text, 2, "is the input");
  EXPECT_EQ(read_all(text), words) << "the input was overwritten";
  expect_failure(base + "-o " + out + " --first-window 100000", 2, "--first-window 100000 skips every window");
  expect_failure(base + "-o " + out + " --windows 2 --first-request 9223372036854775807", 2, "passes the largest request id");
  EXPECT_EQ(run(base + "-o " + out + " --windows 2").code, 0);
}

// root may write anywhere by access(), yet /proc takes no new file: found before the
// work, under the output's own name (it was found after, naming a temporary).
TEST(Issue19, OutputsInAFolderThatTakesNoFilesAreFoundFirst) {
  const std::string t = small_trace();
  for (const std::string& cmd : {"train-predictor --trace " + t + " --out /proc/moeflow-x",
                                 "trace sensitivity " + t + " --task a --out /proc/moeflow-x",
                                 "run -m " + kModel + " --prompt-tokens 1,2 -n 1 --logits-out /proc/moeflow-x"}) {
    const auto r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("'/proc/moeflow-x': cannot create files in folder '/proc'"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(".tmp."), std::string::npos) << r.out;
  }
}

// Flags that would be ignored beside the one that rules, and task profiles that
// contradict themselves, are refused.
TEST(Issue19, IgnoredFlagsAndAmbiguousTaskProfilesAreRefused) {
  const std::string t = small_trace();
  expect_failure("simulate --trace " + t + " --model-profile moeflow-default --sweep --cache 10% --out-dir " +
                     scratch_path("sw"), 2, "--sweep runs its own cache sizes");
  const std::string arrivals = scratch_path("arr") + ".jsonl";
  write_all(arrivals, "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 5}\n");
  expect_failure("simulate-serve --arrivals " + arrivals + " --rate 1", 2, "--rate shapes the synthetic workload");
  const std::string tasks = scratch_path("tasks") + ".json";
  const std::string sim = "simulate --trace " + t + " --model-profile moeflow-default --policy emoe --tasks " + tasks;
  write_all(tasks, R"({"tasks": [{"name": "prose", "keywords": ["a"]}, {"name": "prose", "keywords": ["b"]}]})");
  expect_failure(sim, 1, "tasks[1].name: 'prose' names an earlier task again");
  write_all(tasks, R"({"tasks": [{"name": "prose", "keywords": [""]}]})");
  expect_failure(sim, 1, "an empty keyword matches every prompt");
  write_all(tasks, R"({"tasks": [{"name": "prose", "keywords": ["a"], "insensitive_layers": [99]}]})");
  expect_failure(sim, 1, "task 'prose' names insensitive layer 99, the model has 6 MoE layers");
  expect_failure("run -m " + kModel + " -n 1 --task ''", 2, "--task: empty task name");
}

// A platform whose runtime alone fills the largest function made every plan
// "infeasible" (exit 4) without naming the field.
TEST(Issue19, APlatformWithNoRoomIsNamed) {
  std::string text = read_all(std::string(MOEFLOW_SOURCE_DIR_FOR_TESTS) + "/profiles/platforms/lambda.json");
  const size_t at = text.find("\"assumed_runtime_overhead_mb\"");
  ASSERT_NE(at, std::string::npos);
  const size_t colon = text.find(':', at), end = text.find_first_of(",}", colon);
  text.replace(colon + 1, end - colon - 1, " 100000");
  const std::string platform = scratch_path("platform") + ".json";
  write_all(platform, text);
  expect_failure("plan --trace " + small_trace() + " --platform " + platform, 1,
                 "field \"assumed_runtime_overhead_mb\" = 100000 leaves no memory in the largest function");
}

TEST(Issue19, SimulateFlagsThatSilentlyDidSomethingElse) {
  const std::string t = small_trace();
  const std::string base = "simulate --trace " + t + " --model-profile moeflow-default";
  expect_failure(base + " --cache 0", 2, "below the smallest cache");
  expect_failure(base + " --learn 5:2", 2, "selects no requests");
  expect_failure(base + " --learn 2:1", 2, "selects no requests");
  const std::string dir = scratch_path("sweepparent");
  expect_failure(base + " --sweep --policy lru --out-dir " + dir + "/a/b", 1, "does not exist");
  EXPECT_FALSE(std::filesystem::exists(dir));
  // The trace's model field is a name, not a path.
  const std::string esc = scratch_path("esc") + ".jsonl";
  std::string text = read_all(t);
  for (size_t p; (p = text.find("moeflow-default")) != std::string::npos;) text.replace(p, 15, "../hw/pcie4");
  write_all(esc, text);
  expect_failure("simulate --trace " + esc, 2, "no model profile known for the trace's model '../hw/pcie4'");
}

// Found while checking "never internal error": a profile whose name is a number, and
// --cache errors that named --expert-budget.
TEST(Issue19, ProfileAndCacheMistakesAreUserErrors) {
  const std::string t = small_trace();
  const std::string hw = scratch_path("hw") + ".json";
  write_all(hw, R"({"name": 5, "bandwidth_gbs": 16, "latency_us": 10, "copy_engines": 1})");
  const std::string base = "simulate --trace " + t + " --model-profile moeflow-default";
  expect_failure(base + " --hw " + hw, 1, "field \"name\" must be a string");
  expect_failure(base + " --cache 1e400%", 2, "--cache '1e400%'");
  expect_failure(base + " --cache -5%", 2, "--cache '-5%'");
}

TEST(Issue19, UnwritableOutputIsReportedBeforeTheWork) {
  const std::string t = small_trace();
  const auto r = run("train-predictor --trace " + t + " --out /nonexistent-dir/p.bin");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("learned from"), std::string::npos) << "trained before checking --out:\n" << r.out;
  expect_failure("perplexity -m " + kModel + " -f /nonexistent", 1, "no such file");
}

}  // namespace
}  // namespace moeflow
