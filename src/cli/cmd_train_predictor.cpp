// `moeflow train-predictor --trace T --out P`: DuoServe-MoE's preprocess stage
// (duoserve-moe.txt §4): popularity and affinity from a trace, the ExpertMLP trained on
// its activation paths, written as the duoserve policy's state (--policy-state P), and
// the predictor's accuracy in the paper's Table 3 metrics on held-out requests.
#include <chrono>
#include <cstdio>
#include <fstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "policy/duoserve.h"

namespace moeflow::cli {

namespace {


void print_accuracy(const char* what, const PredictorAccuracy& a, int32_t k) {
  std::printf("%s: %lld predictions (decode tokens x layers 1..L-1)\n", what, static_cast<long long>(a.samples));
  std::printf("  all top-%d right (Table 3 \"Top-%d\"): %6.2f%%\n", k, k, 100.0 * a.all_rate());
  std::printf("  at least one right (Table 3 \"at least one\"): %6.2f%%\n", 100.0 * a.one_rate());
}

}  // namespace

int cmd_train_predictor(int argc, char** argv) {
  Args a("train-predictor");
  a.flag("--trace", "routing trace to learn from (.jsonl)");
  a.flag("--requests", "requests of --trace to learn from, a:b (default: all)");
  a.flag("--out", "policy state to write (load with --policy-state)");
  a.flag("--epochs", "training epochs (paper §6.4: 15-20 for Mixtral-8x7B)", true, "15");
  a.flag("--seed", "seed of initialisation, shuffling and dropout", true, "1");
  a.flag("--widths", "hidden widths of the ExpertMLP (paper §4.2)", true, "2048,1024,512,256,128,64");
  a.flag("--eval-trace", "trace to measure the accuracy on (default: --trace)");
  a.flag("--eval-requests", "requests of the evaluation trace to measure on, a:b");
  a.parse(argc, argv, 2);
  if (!a.has("--trace") || !a.has("--out"))
    throw UsageError("moeflow train-predictor: give --trace and --out\n" + a.help());

  check_output_path(a.str("--out"), "--out");  // before the training, not after it
  const Trace full = load_trace(a.str("--trace"));
  auto [b0, b1] = a.has("--requests") ? parse_request_range("--requests", a.str("--requests"), full.requests.size())
                                      : std::pair<size_t, size_t>{0, full.requests.size()};
  const Trace learn = slice_requests(full, b0, b1);

  DuoserveOptions opt;
  opt.epochs = static_cast<int32_t>(a.integer("--epochs", 0, 10000));
  opt.mlp.seed = static_cast<uint64_t>(a.integer("--seed", 0, INT64_MAX));
  opt.mlp.widths = parse_int_list("--widths", a.str("--widths"));
  for (int32_t w : opt.mlp.widths)
    if (w <= 0 || w > 65536) throw UsageError("--widths: each width must be in 1..65536");
  // The evaluation set is read and checked before the training, so a mistake in it is
  // not found after the state has been written.
  Trace eval;
  const char* label = "held-out";
  if (a.has("--eval-trace")) {
    eval = load_trace(a.str("--eval-trace"));
    if (eval.n_layer != full.n_layer || eval.n_expert != full.n_expert || eval.top_k != full.top_k)
      throw InputError(a.str("--eval-trace") + ": another model's shape than --trace");
  } else if (a.has("--eval-requests")) {
    eval = full;
  } else {
    eval = learn;
    label = "in-sample (no --eval-requests or --eval-trace given)";
  }
  if (a.has("--eval-requests")) {
    auto [e0, e1] = parse_request_range("--eval-requests", a.str("--eval-requests"), eval.requests.size());
    eval = slice_requests(eval, e0, e1);
  }
  bool eval_decodes = false;
  for (const TraceRequest& r : eval.requests)
    for (const TraceIteration& it : r.iterations) eval_decodes = eval_decodes || !it.prefill;
  if (!eval_decodes)
    throw InputError(std::string("the evaluation requests (") + label + ") hold no decode token: nothing to measure the "
                     "predictor on (it predicts decode tokens' experts)");
  DuoservePredictor pred(full.n_layer, full.n_expert, full.top_k, opt);
  for (const ActivationPath& p : activation_paths(learn, true, true)) pred.observe(p);
  if (pred.observed() == 0)
    throw InputError(full.path + ": requests " + std::to_string(b0) + ":" + std::to_string(b1) +
                     " hold no decode token to learn from (the predictor learns decode tokens' paths)");

  const auto t0 = std::chrono::steady_clock::now();
  const double loss = pred.train();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: learned from requests %zu:%zu (%zu token paths), %d epochs, final BCE %.4f, %.1f s\n",
              full.path.c_str(), b0, b1, pred.observed(), opt.epochs, loss, secs);
  {
    AtomicFile out(a.str("--out"));  // a kill mid-write leaves the previous state intact
    pred.save(out.stream());
    out.commit();
  }
  std::printf("wrote %s%s\n", a.str("--out").c_str(),
              pred.trained() ? "" : " (no ExpertMLP trained: predictions use popularity and affinity only)");

  print_accuracy(label, evaluate_predictor(pred, eval), full.top_k);
  return 0;
}

}  // namespace moeflow::cli
