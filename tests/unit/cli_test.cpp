// The binary as a user meets it: bad flags and bad files exit non-zero with a message
// that says what to fix; good runs print what the docs promise.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

#include "policy/policy_factory.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using Result = moeflow::testing::BinaryResult;
Result run(const std::string& args) { return moeflow::testing::run_moeflow(args); }

const std::string kModel = moeflow::testing::fixture_path("mixtral-f32.gguf");

void expect_failure(const std::string& args, const std::string& needle) {
  const Result r = run(args);
  EXPECT_NE(r.code, 0) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\nexpected '" << needle << "' in:\n" << r.out;
}

TEST(Cli, BadFlagsExitNonZeroAndSayWhatToFix) {
  expect_failure("", "usage");
  expect_failure("frobnicate", "unknown command");
  expect_failure("run -m '' -n 1", "empty path");  // not the built-in model
  expect_failure("run -m " + kModel + " --no-such-flag", "--no-such-flag");
  expect_failure("run -m " + kModel + " -n lots", "-n");
  expect_failure("run -m " + kModel + " --temp -1", "--temp");
  expect_failure("run -m " + kModel + " -p hi --prompt-tokens 1,2", "not both");
  expect_failure("run -m " + kModel + " --prompt-tokens 1,x,3", "x");
  expect_failure("run -m " + kModel + " --prompt-tokens 1,999999", "--prompt-tokens: id 999999 (item 2) is outside the vocabulary");
  expect_failure("run -m " + kModel + " --prompt-tokens 1,2,3 -c 2 -n 1", "--ctx-size 2: the prompt alone is 3 tokens");
  expect_failure("bench -m " + kModel + " --parallel 1,abc", "moeflow bench: --parallel: 'abc' is not a non-negative integer");
  expect_failure("bench -m " + kModel + " --parallel 0", "moeflow bench: --parallel 0: expected 1 to 256 sequences");
  expect_failure("run -m " + kModel + " --top-p 2", "--top-p must be a number in [0, 1], got '2'");
  expect_failure("run -m " + kModel + " --policy nope --expert-budget 50%", "unknown policy 'nope'");
  expect_failure("run -m " + kModel + " --policy lru --expert-budget 10parsecs", "unknown unit");
  expect_failure("run -m " + kModel + " --expert-budget 50%", "--policy");
  expect_failure("run -m " + kModel + " --policy lru --on-miss maybe", "--on-miss");
  expect_failure("run -m " + kModel + " --kv-type bf16", "--kv-type 'bf16'");
  expect_failure("run -m " + kModel + " --activations int4", "--activations 'int4': expected auto, int16 or int8");
  expect_failure("bench-kernels --cols 100", "multiple of 32");
  expect_failure("make-model -o " + moeflow::testing::scratch_path("gqa") + ".gguf --heads 3 --kv-heads 2",
                 "--heads 3 must be a multiple of --kv-heads 2");
  expect_failure("simulate", "--trace");
  expect_failure("bench-serve --url http://[::1", "an IPv6 host needs its closing ']'");
  expect_failure("bench-serve --url http://[::1]x", "expected ':PORT' after ']'");
  expect_failure("trace", "subcommand");
  expect_failure("serve -m " + kModel + " --api-key 'two words'", "--api-key: the API key has a space");
  expect_failure("serve -m " + kModel + " --api-key k --api-key-file f", "exclude each other");
  expect_failure("serve -m " + kModel + " --api-key-file /nonexistent/keys", "--api-key-file '/nonexistent/keys': no such file");
}

// bench-kernels measures every weight type (both q4_0 kernels where the CPU has VNNI)
// and reports each speed beside its own triad.
TEST(Cli, BenchKernelsJsonHasEveryTypeBesideTheTriad) {
  const Result r = run("bench-kernels --rows 64 --cols 256 --stream-mib 2 --threads 2 --min-seconds 0.01 --triad-mib 2 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_TRUE(j["simd_target"].is_string());
  std::vector<std::string> types;
  for (const auto& k : j["kernels"]) {
    types.push_back(k["dtype"]);
    for (const char* f : {"cache_gbs", "stream_gbs", "triad_gbs"}) EXPECT_GT(k[f].get<double>(), 0.0) << f;
    EXPECT_NEAR(k["stream_fraction_of_triad"].get<double>(),
                k["stream_gbs"].get<double>() / k["triad_gbs"].get<double>(), 1e-9);
  }
  for (const char* t : {"f32", "f16", "bf16", "q8_0", "q4_0"})
    EXPECT_NE(std::find(types.begin(), types.end(), t), types.end()) << t;
  for (const char* f : {"one_stream_gbs", "two_streams_gbs", "triad_gbs"}) EXPECT_GT(j["reads"][f].get<double>(), 0.0) << f;
  // Where the CPU runs the VNNI kernel, the interleaved layout's kernel is measured too.
  std::vector<std::string> kernels;
  for (const auto& k : j["kernels"]) kernels.push_back(k["kernel"]);
  const bool vnni = std::find(kernels.begin(), kernels.end(), "avx512-vnni") != kernels.end();
  EXPECT_EQ(std::find(kernels.begin(), kernels.end(), "avx512-vnni rows x4") != kernels.end(), vnni);
  EXPECT_EQ(std::find(kernels.begin(), kernels.end(), "rows x4, pairs on one x") != kernels.end(), vnni);
}

// With --tokens N the products are a batched step's (N tokens on each matrix): the
// multiply-adds per second are the bytes' rate times N columns per row's bytes.
TEST(Cli, BenchKernelsTakesTokensAndActivations) {
  const Result r = run("bench-kernels --rows 64 --cols 256 --stream-mib 2 --threads 2 --min-seconds 0.01 --triad-mib 2 "
                       "--tokens 5 --activations int8 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["tokens"].get<int>(), 5);
  EXPECT_EQ(j["activations"].get<std::string>(), "int8");
  for (const auto& k : j["kernels"]) {
    const double bytes_per_row = k["dtype"] == "q4_0" ? 256.0 / 32 * 18 : k["dtype"] == "q8_0" ? 256.0 / 32 * 34 : 0;
    if (bytes_per_row == 0) continue;
    EXPECT_NEAR(k["stream_gmacs"].get<double>(), k["stream_gbs"].get<double>() * 256 * 5 / bytes_per_row, 1e-6)
        << k["dtype"];
  }
  expect_failure("bench-kernels --activations int4", "int16 or int8");
  expect_failure("bench-kernels --tokens 0", "--tokens");
}

// bench reports each speed beside its bound, and where generation's time went (inside
// the pool's parallel sections or between them); with a policy, one row per policy.
// bench --parallel: N sequences decoding together, tokens/s summed, against the bytes
// a step reads (dense weights once, the distinct experts its tokens select once each),
// and where the steps' time went as for one sequence.
TEST(Cli, BenchParallelJsonHasSummedSpeedsAndStepBounds) {
  const Result r = run("bench -m " + kModel + " -p 4 -n 3 -r 1 --threads 2 --json --parallel 1,4 --policy lru "
                       "--expert-budget 50%");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["runs"].size(), 4u) << "all and lru, each at 1 and 4";
  double bytes1 = 0, bytes4 = 0, kv1 = 0, kv4 = 0;
  for (const auto& run : j["runs"]) {
    const int n = run["parallel"].get<int>();
    EXPECT_TRUE(n == 1 || n == 4);
    for (const char* f : {"tg_tokens_per_second", "tg_bound_tokens_per_second", "weight_bytes_per_step"})
      EXPECT_GT(run[f].get<double>(), 0.0) << f;
    EXPECT_NEAR(run["tg_fraction_of_bound"].get<double>(),
                run["tg_tokens_per_second"].get<double>() / run["tg_bound_tokens_per_second"].get<double>(), 1e-9);
    const double share = run["distinct_expert_share"].get<double>();
    EXPECT_GT(share, 0.0);
    EXPECT_LE(share, 1.0);
    // Where the steps' time went: shares of the decode time, the waits inside the
    // parallel sections part of the time inside them.
    const double inside = run["parallel_fraction"].get<double>();
    EXPECT_GE(run["sections_per_step"].get<double>(), 0.0);
    EXPECT_GE(inside, 0.0);
    EXPECT_LE(inside, 1.0);
    for (const char* f : {"start_delay_fraction", "uneven_finish_fraction"}) {
      EXPECT_GE(run[f].get<double>(), 0.0) << f;
      EXPECT_LE(run[f].get<double>(), inside + 1e-12) << f;
    }
    // And in the backend's operations: with the time outside them, the whole step.
    const auto& ops = run["backend_ops"];
    ASSERT_EQ(ops.size(), 5u);
    double step_ms = run["outside_backend_ops_ms_per_step"].get<double>();
    for (const auto& o : ops) {
      EXPECT_GE(o["ms_per_step"].get<double>(), 0.0) << o["op"];
      step_ms += o["ms_per_step"].get<double>();
      if (o["op"] == "expert_ffns" || o["op"] == "attention") {
        EXPECT_GE(o["calls_per_step"].get<double>(), 1.0) << o["op"];
      }
    }
    EXPECT_GE(run["outside_backend_ops_ms_per_step"].get<double>(), 0.0);
    const double want_ms = 1000.0 * n / run["tg_tokens_per_second"].get<double>();
    EXPECT_NEAR(step_ms, want_ms, 1e-6 * want_ms);
    if (run["policy"] == "all") {
      (n == 1 ? bytes1 : bytes4) = run["weight_bytes_per_step"].get<double>();
      (n == 1 ? kv1 : kv4) = run["kv_bytes_per_step"].get<double>();
    }
    if (run["policy"] == "lru") {
      EXPECT_TRUE(run.contains("hit_rate"));
      // Its storage bound's rate: the larger probe around it; beside it what it read.
      EXPECT_GT(run["disk_read_gbs"].get<double>(), 0.0);
      EXPECT_GE(run["disk_read_gbs_during_run"].get<double>(), 0.0);
    }
  }
  // Four tokens read the dense weights once but more experts than one token does.
  EXPECT_GT(bytes4, bytes1);
  EXPECT_LT(bytes4, 4 * bytes1);
  // Each sequence's tokens read their own keys and values at the same positions.
  EXPECT_GT(kv1, 0.0);
  EXPECT_DOUBLE_EQ(kv4, 4 * kv1);
  const Result bad = run("bench -m " + kModel + " --parallel 0");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--parallel"), std::string::npos) << bad.out;
}

// bench --parallel --shared-prompt: the sequences continue one parked prompt of whole
// KV blocks, whose keys and values a step reads once for all of them (the bound counts
// them once); the flag is refused without --parallel and past the prompt.
TEST(Cli, BenchParallelWithASharedPromptCountsItsCacheOnce) {
  const Result r = run("bench -m " + kModel + " -p 80 -n 3 -r 1 --threads 2 --json --parallel 1,4 --shared-prompt 70");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["shared_prompt"].get<int>(), 64) << "rounded down to whole blocks of 32";
  ASSERT_EQ(j["runs"].size(), 2u);
  const double kv1 = j["runs"][0]["kv_bytes_per_step"].get<double>(), kv4 = j["runs"][1]["kv_bytes_per_step"].get<double>();
  // A decode token at position p reads p + 1 positions; of four tokens' reads, three
  // leave out the 64 shared ones: kv4 = 4 kv1 - 3 * kv1 * 64 / (p + 1), over the three
  // steps at p = 80, 81, 82.
  double shared_part = 0;
  for (int p = 80; p < 83; ++p) shared_part += 64.0 / (p + 1) / 3.0;
  EXPECT_NEAR(kv4, kv1 * (4.0 - 3.0 * shared_part), 1e-3 * kv4) << "kv1 " << kv1;
  EXPECT_GT(j["runs"][1]["tg_tokens_per_second"].get<double>(), 0.0);
  const Result alone = run("bench -m " + kModel + " -p 8 -n 2 -r 1 --shared-prompt 4");
  EXPECT_NE(alone.code, 0);
  EXPECT_NE(alone.out.find("--shared-prompt needs --parallel"), std::string::npos) << alone.out;
  const Result past = run("bench -m " + kModel + " -p 8 -n 2 -r 1 --parallel 2 --shared-prompt 8");
  EXPECT_NE(past.code, 0);
  EXPECT_NE(past.out.find("--shared-prompt"), std::string::npos) << past.out;
}

TEST(Cli, BenchJsonHasSpeedsBoundsAndSections) {
  const Result r = run("bench -m " + kModel + " -p 8 -n 4 -r 1 --threads 2 --json --policy lru --expert-budget 50%");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["threads"].get<int>(), 2);
  for (const char* f : {"pp_tokens_per_second", "tg_tokens_per_second", "tg_bound_tokens_per_second",
                        "triad_bandwidth_gbs", "peak_gflops", "weight_bytes_per_token", "kv_bytes_per_token"})
    EXPECT_GT(j[f].get<double>(), 0.0) << f;
  // The bound reads the weights and the KV cache at the triad.
  EXPECT_NEAR(j["tg_bound_tokens_per_second"].get<double>(),
              j["triad_bandwidth_gbs"].get<double>() * 1e9 /
                  (j["weight_bytes_per_token"].get<double>() + j["kv_bytes_per_token"].get<double>()),
              1e-6 * j["tg_bound_tokens_per_second"].get<double>());
  // Where a generated token's time went: the backend's operations and the rest.
  double token_ms = j["tg_outside_backend_ops_ms_per_token"].get<double>();
  ASSERT_EQ(j["tg_backend_ops"].size(), 5u);
  for (const auto& o : j["tg_backend_ops"]) token_ms += o["ms_per_token"].get<double>();
  EXPECT_NEAR(token_ms, 1000.0 / j["tg_tokens_per_second"].get<double>(), 1e-6 * token_ms);
  EXPECT_NEAR(j["tg_fraction_of_bound"].get<double>(),
              j["tg_tokens_per_second"].get<double>() / j["tg_bound_tokens_per_second"].get<double>(), 1e-9);
  // The load: every resident byte read, zeroed and written, three passes at the first triad.
  EXPECT_GT(j["load_seconds"].get<double>(), 0.0);
  EXPECT_GT(j["load_bytes"].get<double>(), j["weight_bytes_per_token"].get<double>());
  EXPECT_NEAR(j["load_bound_seconds"].get<double>(),
              3.0 * j["load_bytes"].get<double>() / (j["triad_bandwidth_gbs_all_measurements"][0].get<double>() * 1e9),
              1e-9 * j["load_bound_seconds"].get<double>());
  // The bound is the larger triad around the reported repetition, one whose two triads
  // agree within 20% when any does.
  const auto& triads = j["triad_bandwidth_gbs_all_measurements"];
  const int reps = j["tg_repetitions"].get<int>(), steady = j["tg_steady_repetitions"].get<int>();
  const int rep = j["tg_reported_repetition"].get<int>();
  ASSERT_GE(reps, 1);
  EXPECT_LE(reps, 2);
  EXPECT_LE(steady, reps);
  EXPECT_TRUE(steady > 0 || reps == 2) << "-r 1 runs one more repetition while none was steady";
  ASSERT_EQ(triads.size(), static_cast<size_t>(reps) + 1);
  ASSERT_GE(rep, 0);
  ASSERT_LT(rep, reps);
  const double before = triads[static_cast<size_t>(rep)], after = triads[static_cast<size_t>(rep) + 1];
  EXPECT_DOUBLE_EQ(j["triad_bandwidth_gbs"].get<double>(), std::max(before, after));
  if (steady > 0) {
    EXPECT_LE(std::max(before, after), 1.2 * std::min(before, after));
  }
  const auto& sec = j["tg_sections"];
  EXPECT_GT(sec["per_token"].get<double>(), 0.0);
  for (const char* f : {"parallel_fraction", "start_delay_fraction", "uneven_finish_fraction"}) {
    EXPECT_GE(sec[f].get<double>(), 0.0) << f;
    EXPECT_LE(sec[f].get<double>(), 1.0) << f;
  }
  ASSERT_EQ(j["policies"].size(), 2u);
  const auto& lru = j["policies"][1];
  EXPECT_EQ(lru["policy"], "lru");
  EXPECT_GE(lru["hit_rate"].get<double>(), 0.0);
  // Its storage bound: the bytes it read per token at the storage probe taken around
  // it (the summary's is the largest probe).
  const double bpt = lru["bytes_read_per_token"].get<double>();
  ASSERT_GT(bpt, 0.0);
  EXPECT_GT(lru["read_gbs"].get<double>(), 0.0);
  EXPECT_GT(lru["read_gbs_during_run"].get<double>(), 0.0);
  EXPECT_NEAR(lru["io_bound_tokens_per_second"].get<double>(), lru["read_gbs"].get<double>() * 1e9 / bpt,
              1e-9 * lru["io_bound_tokens_per_second"].get<double>());
  EXPECT_DOUBLE_EQ(j["disk_read_gbs"].get<double>(), lru["read_gbs"].get<double>());
}

// q4_0 weights repacked for the VNNI kernel (the default) and left in GGUF's layout
// (--no-repack) give the same tokens on int16 activations: both kernels add the same
// integer sums in the same order. (GGUF's q4_0 rows have no int8 kernel, so the
// default, auto, would compare int8 against int16.)
TEST(Cli, RepackedQ4WeightsGiveTheTokensOfGgufLayout) {
  const std::string q4 = moeflow::testing::fixture_path("olmoe-q4_0.gguf");
  const std::string args =
      "run -m " + q4 + " --prompt-tokens 1,2,3,4,5,6 -n 8 --temp 0 --ignore-eos --json --activations int16";
  const Result repacked = run(args), plain = run(args + " --no-repack");
  ASSERT_EQ(repacked.code, 0) << repacked.out;
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(nlohmann::json::parse(repacked.out.substr(repacked.out.find('{')))["tokens"],
            nlohmann::json::parse(plain.out.substr(plain.out.find('{')))["tokens"]);
}

TEST(Cli, BadFilesExitNonZeroNamingTheFile) {
  expect_failure("run -m /no/such/model.gguf -p hi", "/no/such/model.gguf");
  const std::string junk = moeflow::testing::scratch_path("junk") + ".gguf";
  std::ofstream(junk) << "this is not a gguf file at all";
  expect_failure("run -m " + junk + " -p hi", "magic");
  expect_failure("inspect " + junk, "magic");
  const std::string bad_trace = moeflow::testing::scratch_path("bad") + ".jsonl";
  std::ofstream(bad_trace) << "{\"request\":0}\n";
  expect_failure("trace stats " + bad_trace, bad_trace + ":1");
  expect_failure("simulate --trace " + bad_trace, bad_trace + ":1");
  std::remove(junk.c_str());
  std::remove(bad_trace.c_str());
}

// --kv-type: auto picks f16 for q4_0 key/value projections and f32 for f32 ones; run
// --json says which, and the bytes each type takes, as inspect foretells them.
TEST(Cli, KvTypeDefaultsByWeightsAndCanBeForced) {
  const std::string q4 = moeflow::testing::fixture_path("olmoe-q4_0.gguf");
  auto kv_of = [](const std::string& args) {
    const Result r = run(args + " --prompt-tokens 1,2,3 -n 2 --temp 0 --ignore-eos --json");
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(r.out.substr(r.out.find('{')))["memory"];
  };
  EXPECT_EQ(kv_of("run -m " + q4)["kv_type"], "f16");
  EXPECT_EQ(kv_of("run -m " + kModel)["kv_type"], "f32");
  const auto f32 = kv_of("run -m " + q4 + " --kv-type f32"), f16 = kv_of("run -m " + q4 + " --kv-type f16");
  EXPECT_EQ(f32["kv_type"], "f32");
  EXPECT_EQ(f32["kv_bytes"].get<uint64_t>(), 2 * f16["kv_bytes"].get<uint64_t>());
  // q8_0: olmoe-q4_0's 32-wide heads take 32 int8 and a float scale a row, against 64 bytes.
  const auto q8 = kv_of("run -m " + q4 + " --kv-type q8_0");
  EXPECT_EQ(q8["kv_type"], "q8_0");
  EXPECT_EQ(64 * q8["kv_bytes"].get<uint64_t>(), 36 * f16["kv_bytes"].get<uint64_t>());
  expect_failure("run -m " + q4 + " --kv-type q4_0", "expected f32, f16, q8_0 or auto");
  // inspect says what a position takes in each type: 64 positions of it are the pool
  // of a 64-token context (two whole blocks).
  const Result ins = run("inspect " + q4 + " --json");
  ASSERT_EQ(ins.code, 0) << ins.out;
  const auto per_pos = nlohmann::json::parse(ins.out)["kv_bytes_per_position"];
  for (const char* t : {"f32", "f16", "q8_0"}) {
    const auto j = kv_of("run -m " + q4 + " -c 64 --kv-type " + t);
    EXPECT_EQ(64 * per_pos[t].get<uint64_t>(), j["kv_bytes"].get<uint64_t>()) << t;
  }
  EXPECT_NE(run("inspect " + q4).out.find("KV cache a position:"), std::string::npos);
}

// gpt-oss's sliding layers keep only their window by default, --swa-full every
// position: the same tokens either way, the same mapping, and a 1100-token prompt (in
// run's 512-token chunks) touches the sliding layers' blocks of a chunk and a window,
// not of the whole prompt. inspect says what a position past the window takes.
TEST(Cli, SlidingLayersKeepTheirWindowUnlessSwaFull) {
  const std::string oss = moeflow::testing::fixture_path("gpt-oss-mxfp4.gguf");
  std::string prompt;
  for (int i = 0; i < 1100; ++i) prompt += (i ? "," : "") + std::to_string(1 + (i * 37) % 250);
  auto run_json = [&](const std::string& flags) {
    const Result r = run("run -m " + oss + " -c 1200 --prompt-tokens " + prompt + " -n 4 --temp 0 --ignore-eos --json" + flags);
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(r.out.substr(r.out.find('{')));
  };
  const auto ring = run_json(""), full = run_json(" --swa-full");
  EXPECT_EQ(ring["tokens"], full["tokens"]);
  EXPECT_EQ(ring["memory"]["kv_bytes"], full["memory"]["kv_bytes"]);
  const auto touched = [](const nlohmann::json& j) { return j["memory"]["kv_bytes_touched"].get<uint64_t>(); };
  // Every position: 35 blocks of 32 (1104 positions) of both layers. The window: 35 of
  // the full layer's, and of the sliding one's at most a chunk and a window's (18).
  EXPECT_EQ(touched(full), 35 * full["memory"]["kv_bytes"].get<uint64_t>() / 38);
  EXPECT_LE(touched(ring), (35 + 18) * full["memory"]["kv_bytes"].get<uint64_t>() / 38 / 2);
  const Result ins = run("inspect " + oss + " --json");
  ASSERT_EQ(ins.code, 0) << ins.out;
  const auto j = nlohmann::json::parse(ins.out);
  EXPECT_EQ(j["sliding_window"], 8);
  EXPECT_EQ(j["sliding_layers"], 1);
  EXPECT_EQ(2 * j["kv_bytes_per_position_past_the_window"]["f16"].get<uint64_t>(),
            j["kv_bytes_per_position"]["f16"].get<uint64_t>());
  EXPECT_NE(run("inspect " + oss).out.find("1 of 2 layers slide over the last 8 positions"), std::string::npos);
}

TEST(Cli, RunJsonHasTokensTextTimingsAndCache) {
  const Result r = run("run -m " + kModel + " --prompt-tokens 1,2,3,4 -n 6 --temp 0 --ignore-eos --json --policy lru "
                       "--expert-budget 50%");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["prompt_tokens"], (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(j["tokens"].size(), 6u);
  EXPECT_TRUE(j["text"].is_string());
  EXPECT_TRUE(j["timings"]["generation_tokens_per_second"].is_number());
  EXPECT_GT(j["timings"]["load_seconds"].get<double>(), 0.0);
  for (const char* k : {"hits", "misses", "hit_rate", "bytes_read"}) EXPECT_TRUE(j["cache"].contains(k)) << k;
  const Result all = run("run -m " + kModel + " --prompt-tokens 1,2,3,4 -n 6 --temp 0 --ignore-eos --json");
  EXPECT_EQ(nlohmann::json::parse(all.out.substr(all.out.find('{')))["tokens"], j["tokens"]);
}

// One generated token comes from the prompt pass alone: no decode rate is claimed for it.
TEST(Cli, RunOfOneTokenTimesNoDecodePass) {
  const Result text = run("run -m " + kModel + " --prompt-tokens 1,2,3 -n 1 --temp 0 --ignore-eos");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("generation: 1 tokens (no decode pass to time)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" MiB copied into memory)\nprompt: 3 tokens"), std::string::npos) << text.out;
  const Result js = run("run -m " + kModel + " --prompt-tokens 1,2,3 -n 1 --temp 0 --ignore-eos --json");
  ASSERT_EQ(js.code, 0) << js.out;
  const auto j = nlohmann::json::parse(js.out.substr(js.out.find('{')));
  EXPECT_TRUE(j["timings"]["generation_tokens_per_second"].is_null());
  EXPECT_EQ(j["tokens"].size(), 1u);
}

TEST(Cli, PolicyStateSurvivesARestart) {
  const std::string state = moeflow::testing::scratch_path("eamc") + ".state";
  const std::string common = "run -m " + kModel + " --prompt-tokens 1,2,3,4,5 -n 6 --temp 0 --ignore-eos --json "
                             "--policy moe-infinity --expert-budget 50%";
  const Result first = run(common + " --policy-state-out " + state);
  ASSERT_EQ(first.code, 0) << first.out;
  std::ifstream in(state, std::ios::binary);
  const std::string saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(saved.empty());
  const Result second = run(common + " --policy-state " + state);
  ASSERT_EQ(second.code, 0) << second.out;
  const auto tokens = [](const Result& r) { return nlohmann::json::parse(r.out.substr(r.out.find('{')))["tokens"]; };
  EXPECT_EQ(tokens(first), tokens(second));
  // A state file that is not one names the file and what is wrong with it.
  expect_failure(common + " --policy-state " + kModel, kModel + ": ");
  expect_failure(common + " --policy-state " + kModel, "moe-infinity state");
  std::remove(state.c_str());
}

// `trace record --from-trace` reruns a trace's own token ids: the same routing again,
// now with the lookahead field (the 2-layer fixture: layer 0 looks one layer ahead).
TEST(Cli, TraceRecordFromTraceAddsTheLookaheadToTheSameRouting) {
  const std::string text = moeflow::testing::scratch_path("text") + ".txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) f << "the quick brown fox " << i << " jumps over the lazy dog. ";
  }
  const std::string a = moeflow::testing::scratch_path("plain") + ".jsonl", b = moeflow::testing::scratch_path("ahead") + ".jsonl";
  const Result first = run("trace record -m " + kModel + " -f " + text + " -o " + a +
                           " --windows 2 --prefill 6 --decode 4 --lookahead 0 --task t");
  ASSERT_EQ(first.code, 0) << first.out;
  const Result again = run("trace record -m " + kModel + " --from-trace " + a + " -o " + b + " --lookahead 1");
  ASSERT_EQ(again.code, 0) << again.out;
  std::ifstream fa(a), fb(b);
  std::string la, lb;
  int lines = 0, with = 0;
  while (std::getline(fa, la) && std::getline(fb, lb)) {
    nlohmann::json ja = nlohmann::json::parse(la), jb = nlohmann::json::parse(lb);
    EXPECT_FALSE(ja.contains("lookahead"));
    with += jb.contains("lookahead");
    if (jb.contains("lookahead")) {
      EXPECT_EQ(jb["layer"], 0);
    }
    jb.erase("lookahead");
    EXPECT_EQ(ja, jb) << "line " << lines;
    ++lines;
  }
  EXPECT_EQ(lines, 2 * 5 * 2);  // 2 requests x (prefill + 4 decode steps) x 2 layers
  EXPECT_EQ(with, lines / 2);
  expect_failure("trace record -m " + kModel + " --from-trace " + a + " -o " + b + " --lookahead 4", "--lookahead");
  expect_failure("trace record -m " + kModel + " -o " + b, "one of -f FILE or --from-trace");
}

// A small routing trace in the interchange format, shaped like the built-in model
// (6 layers, 8 experts, top-2): 3 requests, each an 8-token prefill and 6 decode
// steps, with a sticky expert per request so that caching has something to find.
std::string write_small_trace() {
  const std::string path = moeflow::testing::scratch_path("trace") + ".jsonl";
  std::ofstream f(path);
  uint32_t rng = 12345;
  auto next = [&rng](uint32_t n) {
    rng = rng * 1103515245u + 12345u;
    return (rng >> 16) % n;
  };
  for (int req = 0; req < 3; ++req)
    for (int it = 0; it < 7; ++it)
      for (int l = 0; l < 6; ++l) {
        const int n_tok = it == 0 ? 8 : 1;
        nlohmann::json experts = nlohmann::json::array();
        for (int t = 0; t < n_tok; ++t) {
          const int a = static_cast<int>((req + l) % 8), b = static_cast<int>((a + 1 + next(7)) % 8);
          experts.push_back({a, b});
        }
        const nlohmann::json rec = {{"model", "moeflow-default"}, {"source", "cli_test"}, {"request", req},
                                    {"iter", it}, {"phase", it == 0 ? "prefill" : "decode"}, {"layer", l},
                                    {"num_experts", 8}, {"top_k", 2}, {"experts", experts},
                                    {"weights", nullptr}, {"probs", nullptr}};
        f << rec.dump() << "\n";
      }
  return path;
}

// A bad --cache says why, under the simulator's own flag name (the budget parser's reason).
TEST(Cli, SimulateCacheErrorsSayWhatIsWrong) {
  const std::string trace = write_small_trace();
  const std::string base = "simulate --trace " + trace + " --model-profile moeflow-default --cache ";
  expect_failure(base + "150%", "--cache '150%': a percentage must be at most 100%");
  expect_failure(base + "3parsecs", "--cache '3parsecs': unknown unit 'parsecs'");
  expect_failure(base + "-5", "--cache '-5': must be a non-negative size");
  expect_failure(base + "lots", "--cache 'lots': expected a size like 512MiB, 2GiB or 25%");
  std::remove(trace.c_str());
}

// An unknown name is refused before any replay, and the message lists the bounds the
// simulator runs besides the engine's policies.
TEST(Cli, SimulateNamesItsBoundsAmongTheKnownPolicies) {
  const std::string trace = write_small_trace();
  const std::string base = "simulate --trace " + trace + " --model-profile moeflow-default --cache 25% --policy ";
  const Result r = run(base + "lru,belady-eager,nope");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("unknown policy 'nope'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("belady-min, belady-prefetch, belady-eager"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("hit rate"), std::string::npos) << "nothing replayed before the refusal:\n" << r.out;
  expect_failure(base + "nope+reroute", "unknown policy 'nope'");
  expect_failure(base + "adaptive-nosuch", "unknown ablation 'nosuch'");
  EXPECT_EQ(run(base + "belady-min,lru+reroute").code, 0);
  std::remove(trace.c_str());
}

TEST(Cli, SimulateJsonHasTheDocumentedFields) {
  const std::string trace = write_small_trace();
  for (const char* policy : {"lru", "duoserve", "belady"}) {
    const Result r = run(std::string("simulate --trace ") + trace + " --model-profile moeflow-default --hw pcie4 --cache 25% --policy " +
                         policy + " --json");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    SCOPED_TRACE(policy);
    EXPECT_EQ(j["policy"], policy);
    ASSERT_TRUE(j["hit_rate"].is_number());
    EXPECT_GE(j["hit_rate"].get<double>(), 0.0);
    EXPECT_LE(j["hit_rate"].get<double>(), 1.0);
    EXPECT_GT(j["hit_rate"].get<double>(), 0.0) << "a sticky expert per request must hit sometimes";
    EXPECT_GT(j["ttft_seconds"].get<double>(), 0.0);
    EXPECT_GT(j["tpot_seconds"].get<double>(), 0.0);
    EXPECT_GT(j["bytes_moved"].get<uint64_t>(), 0u);
    EXPECT_GE(j["stall_seconds"].get<double>(), 0.0);
    EXPECT_GE(j["prefetch_accuracy"].get<double>(), 0.0);
    EXPECT_LE(j["prefetch_accuracy"].get<double>(), 1.0);
    EXPECT_NEAR(j["cache_fraction"].get<double>(), 0.25, 0.01);
    EXPECT_EQ(j["measured_requests"], 3);
    EXPECT_EQ(j["scored_decode_tokens"], 18);
    // The prefill pipeline runs for duoserve only, and never holds more than two experts.
    const auto& p = j["pipeline"];
    if (std::string(policy) == "duoserve") {
      EXPECT_GT(p["layers"].get<uint64_t>(), 0u);
      EXPECT_GT(p["streamed_experts"].get<uint64_t>(), 0u);
      EXPECT_GE(p["peak_slots"].get<int>(), 1);
      EXPECT_LE(p["peak_slots"].get<int>(), 2);
      EXPECT_LE(p["next_layer_head_hits"].get<uint64_t>(), p["next_layer_heads"].get<uint64_t>());
    } else {
      EXPECT_EQ(p["layers"].get<uint64_t>(), 0u);
    }
  }
  std::remove(trace.c_str());
}

TEST(Cli, SimulateSweepWritesEveryPolicyAsMarkdownCsvAndSvg) {
  const std::string trace = write_small_trace();
  const std::string dir = moeflow::testing::scratch_path("sweep");
  const Result r = run("simulate --trace " + trace + " --model-profile moeflow-default --sweep --out-dir " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> names = policy_names();
  names.push_back("belady");
  for (const char* file : {"sweep.md", "sweep.csv", "sweep.svg"}) {
    std::ifstream in(dir + "/" + file);
    ASSERT_TRUE(in) << file << " was not written\n" << r.out;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const std::string& n : names) EXPECT_NE(text.find(n), std::string::npos) << n << " missing from " << file;
  }
  // The CSV: a header, then one row per policy and cache size (12.5/25/50/75%), each
  // with a hit rate in [0, 1] in its fourth column.
  std::ifstream csv(dir + "/sweep.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line.rfind("policy,cache_fraction,cache_bytes,hit_rate", 0), 0u) << line;
  size_t rows = 0;
  while (std::getline(csv, line)) {
    if (line.empty()) continue;
    ++rows;
    std::vector<std::string> cols;
    for (size_t b = 0;;) {
      const size_t e = line.find(',', b);
      cols.push_back(line.substr(b, e - b));
      if (e == std::string::npos) break;
      b = e + 1;
    }
    ASSERT_GE(cols.size(), 4u) << line;
    const double hit = std::stod(cols[3]);
    EXPECT_GE(hit, 0.0) << line;
    EXPECT_LE(hit, 1.0) << line;
  }
  EXPECT_GE(rows, 4 * names.size());
  const std::string svg = [&] {
    std::ifstream in(dir + "/sweep.svg");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  std::filesystem::remove_all(dir);
  std::remove(trace.c_str());
}

TEST(Cli, RerouteIsLabelledLossy) {
  const Result r = run("run -m " + kModel + " -p hi -n 4 --policy lru --expert-budget 50% --on-miss reroute");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lossy"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace moeflow
