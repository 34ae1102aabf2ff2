// Subcommands of the `moeflow` binary. Each returns the process exit code and throws
// UsageError / InputError for bad flags and bad files (main prints them).
#pragma once

namespace moeflow::cli {

int cmd_run(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_bench_kernels(int argc, char** argv);
int cmd_make_model(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_trace(int argc, char** argv);
int cmd_simulate(int argc, char** argv);
int cmd_train_predictor(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_bench_serve(int argc, char** argv);
int cmd_simulate_serve(int argc, char** argv);

}  // namespace moeflow::cli
