// moeflow: MoE inference with experts that do not fit in fast memory.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "base/error.h"

namespace {

const char* kUsage =
    "usage: moeflow <command> [flags]\n"
    "commands:\n"
    "  run         generate text from a prompt (or token ids)\n"
    "  inspect     print a model file's metadata, tensors, dense vs expert bytes\n"
    "  bench       prompt and generation speed beside the machine's bandwidth and FLOP/s bounds\n"
    "  bench-kernels  mat-vec kernels per weight type, from cache and streaming, beside the triad\n"
    "  make-model  write a random-weight model (test fixtures, benchmarks)\n"
    "  perplexity  perplexity of a model on a text file\n"
    "  quantize    rewrite a model's weights as q8_0, q4_0, f16, bf16 or f32\n"
    "  trace       routing-trace tools: trace stats FILE\n"
    "  simulate    replay a routing trace through the expert cache and a policy (or --sweep)\n"
    "  train-predictor  train DuoServe's expert predictor from a routing trace\n"
    "  plan        plan a serverless deployment of the MoE layers for a trace (ODS, BO, exact)\n"
    "  serve       OpenAI-compatible HTTP server with continuous batching (/v1/chat/completions, /metrics)\n"
    "  bench-serve load-test an OpenAI-compatible server (TTFT, TPOT, ITL, latency; concurrency or request rate)\n"
    "  simulate-serve  FCFS against eMoE's request scheduler on a simulated clock (mixed workloads, arrival traces)\n"
    "run 'moeflow <command> --help' for its flags\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace moeflow::cli;
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "run") return cmd_run(argc, argv);
    if (cmd == "inspect") return cmd_inspect(argc, argv);
    if (cmd == "bench") return cmd_bench(argc, argv);
    if (cmd == "bench-kernels") return cmd_bench_kernels(argc, argv);
    if (cmd == "make-model") return cmd_make_model(argc, argv);
    if (cmd == "perplexity") return cmd_perplexity(argc, argv);
    if (cmd == "quantize") return cmd_quantize(argc, argv);
    if (cmd == "trace") return cmd_trace(argc, argv);
    if (cmd == "simulate") return cmd_simulate(argc, argv);
    if (cmd == "train-predictor") return cmd_train_predictor(argc, argv);
    if (cmd == "plan") return cmd_plan(argc, argv);
    if (cmd == "serve") return cmd_serve(argc, argv);
    if (cmd == "bench-serve") return cmd_bench_serve(argc, argv);
    if (cmd == "simulate-serve") return cmd_simulate_serve(argc, argv);
    std::fprintf(stderr, "moeflow: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const UsageError& e) {
    const std::string what = e.what();
    const bool is_help = what.rfind("usage:", 0) == 0;
    // Every refusal names the command, as the flag parser's own messages do.
    const bool named = is_help || what.rfind("moeflow ", 0) == 0;
    std::fprintf(is_help ? stdout : stderr, "%s%s\n", named ? "" : ("moeflow " + cmd + ": ").c_str(), what.c_str());
    return is_help ? 0 : 2;
  } catch (const moeflow::InputError& e) {
    std::fprintf(stderr, "moeflow %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moeflow %s: internal error: %s\n", cmd.c_str(), e.what());
    return 3;
  }
}
