// `moeflow trace stats FILE [--json]`: what a routing trace says about expert use.
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "engine/trace_recorder.h"
#include "engine/generator.h"
#include "moeflow/engine.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "base/input_file.h"
#include "policy/emoe.h"
#include "policy/emoe_sensitivity.h"
#include "sim/trace_stats.h"

namespace moeflow::cli {

namespace {

void print_popularity_table(const char* title, const std::vector<std::vector<double>>& pop, int32_t n_expert) {
  std::printf("%s\n  layer", title);
  for (int32_t e = 0; e < n_expert && e < 64; ++e) std::printf(" %5d", e);
  std::printf("\n");
  for (size_t l = 0; l < pop.size(); ++l) {
    std::printf("  %5zu", l);
    for (int32_t e = 0; e < n_expert && e < 64; ++e) std::printf(" %5.1f", 100.0 * pop[l][static_cast<size_t>(e)]);
    std::printf("\n");
  }
}

int trace_stats(int argc, char** argv) {
  Args a("trace stats");
  a.positional("FILE", "routing trace (.jsonl, DESIGN.md interchange format)");
  a.flag("--json", "print one JSON object", false);
  a.flag("--by-task", "also print the popularity table of each task", false);
  a.parse(argc, argv, 3);
  if (a.positionals().empty()) throw UsageError("moeflow trace stats: give a trace file\n" + a.help());
  const Trace t = load_trace(a.positionals()[0]);
  const TraceStats s = compute_trace_stats(t);
  if (a.has("--json")) {
    nlohmann::json j;
    j["model"] = t.model;
    j["layers"] = s.n_layer;
    j["experts"] = s.n_expert;
    j["top_k"] = s.top_k;
    j["requests"] = s.requests;
    j["iterations"] = s.iterations;
    j["routed_tokens"] = s.routed_tokens;
    j["dropped_rows"] = s.dropped_rows;
    j["popularity"] = s.popularity;
    j["top_share"] = s.top_share;
    j["normalized_entropy"] = s.normalized_entropy;
    j["affinity_top1_hit"] = s.affinity_top1_hit;
    j["affinity_chance"] = s.affinity_chance;
    j["temporal_overlap"] = s.temporal_overlap;
    j["lookahead_recall"] = s.lookahead_recall;
    nlohmann::json ws = nlohmann::json::array();
    for (const auto& w : s.working_sets)
      ws.push_back({{"request", w.request}, {"task", w.task}, {"prefill_tokens", w.prefill_tokens},
                    {"decode_tokens", w.decode_tokens}, {"prefill_fraction", w.prefill_fraction},
                    {"decode_fraction", w.decode_fraction}});
    j["working_sets"] = ws;
    j["task_popularity"] = s.task_popularity;
    j["task_divergence"] = s.task_divergence;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: %s, %d layers x %d experts, top-%d; %lld requests, %lld iterations, %lld routed tokens",
              t.path.c_str(), t.model.c_str(), s.n_layer, s.n_expert, s.top_k, static_cast<long long>(s.requests),
              static_cast<long long>(s.iterations), static_cast<long long>(s.routed_tokens));
  if (s.dropped_rows) std::printf(", %lld dropped rows skipped", static_cast<long long>(s.dropped_rows));
  std::printf("%s\n\n", t.has_probs ? "" : " (no gate probabilities recorded)");
  print_popularity_table("popularity (% of the layer's routed slots):", s.popularity, s.n_expert);
  std::printf("\n  layer  top-expert share  entropy/log(E)\n");
  for (size_t l = 0; l < s.top_share.size(); ++l)
    std::printf("  %5zu  %15.1f%%  %14.3f\n", l, 100.0 * s.top_share[l], s.normalized_entropy[l]);
  std::printf("\nper-request working set (distinct experts touched / all %d):\n", s.n_layer * s.n_expert);
  std::printf("  request  task            prefill tok  prefill set  decode tok  decode set\n");
  for (const auto& w : s.working_sets)
    std::printf("  %7lld  %-14s  %11lld  %10.1f%%  %10lld  %9.1f%%\n", static_cast<long long>(w.request),
                w.task.empty() ? "-" : w.task.c_str(), static_cast<long long>(w.prefill_tokens), 100.0 * w.prefill_fraction,
                static_cast<long long>(w.decode_tokens), 100.0 * w.decode_fraction);
  std::printf("\ninter-layer affinity: the strongest successor of layer l's experts is in layer l+1's top-%d "
              "%.1f%% of the time (chance %.1f%%; in-sample)\n",
              s.top_k, 100.0 * s.affinity_top1_hit, 100.0 * s.affinity_chance);
  std::printf("temporal locality: consecutive decode tokens share %.1f%% of a layer's top-%d (chance %.1f%%)\n",
              100.0 * s.temporal_overlap, s.top_k, 100.0 * s.affinity_chance);
  for (size_t h = 0; h < s.lookahead_recall.size(); ++h)
    std::printf("lookahead routing: layer l's lookahead at distance %zu names %.1f%% of layer l+%zu's routed experts "
                "(decode; chance %.1f%%)\n",
                h + 1, 100.0 * s.lookahead_recall[h], h + 1, 100.0 * s.affinity_chance);
  if (!s.task_divergence.empty()) {
    std::printf("\nspecialisation by task (mean total-variation distance of the task's popularity from the overall, "
                "0 = none, 1 = disjoint):\n");
    for (const auto& [task, d] : s.task_divergence) std::printf("  %-14s %.3f\n", task.c_str(), d);
    if (a.has("--by-task"))
      for (const auto& [task, pop] : s.task_popularity) {
        std::printf("\n");
        print_popularity_table(("task " + task + ":").c_str(), pop, s.n_expert);
      }
  }
  return 0;
}

// Teacher-forced routing traces of a model on a text file: consecutive windows of
// the file, each a request of `prefill` prompt tokens and `decode` single-token steps
// that feed the text's own next tokens (as the FLAME-MoE traces were recorded). Or,
// with --from-trace, the token ids another trace recorded, request by request and step
// by step as they were run there (same ids and tasks): the same routing again, with
// the lookahead field added.
int trace_record(int argc, char** argv) {
  Args a("trace record");
  add_model_flags(a);
  a.flag("-f,--file", "text file to run the model on (this or --from-trace)");
  a.flag("--from-trace", "rerun the token ids of this trace's requests (its \"tokens\" fields) instead of a text");
  a.flag("-o,--out", "trace file to write (required)");
  a.flag("--task", "task label of every request (e.g. the text's domain)");
  a.flag("--append", "append to --out instead of replacing it", false);
  a.flag("--windows", "requests (windows of the text) to record", true, "8");
  a.flag("--prefill", "prompt tokens per request", true, "16");
  a.flag("--decode", "teacher-forced decode steps per request", true, "48");
  a.flag("--first-request", "request id of the first window", true, "0");
  a.flag("--first-window", "skip this many windows of the text first", true, "0");
  a.flag("--decimals", "decimals kept of weights and probabilities", true, "4");
  a.flag("--lookahead", "also record the next D layers' routers applied to each layer's MoE input (0: none)", true, "2");
  a.flag("--embedding-dim", "also record each iteration's embedding-layer output (fMoE's semantic key) in N numbers, "
                            "a fixed random projection of the model's width (0: none; N >= the width: the row itself)",
         true, "0");
  a.parse(argc, argv, 3);
  if (a.has("--file") && a.has("--from-trace"))
    throw UsageError("moeflow trace record: give -f FILE or --from-trace TRACE, not both");
  if (a.has("--file") == a.has("--from-trace") || !a.has("--out"))
    throw UsageError("moeflow trace record: -o OUT and one of -f FILE or --from-trace TRACE are required\n" + a.help());
  {
    // Writing the trace over its own input would destroy the text or trace being read.
    const std::string in = a.has("--file") ? a.str("--file") : a.str("--from-trace");
    std::error_code ec;
    if (std::filesystem::equivalent(in, a.str("--out"), ec))
      throw UsageError("moeflow trace record: --out '" + a.str("--out") + "' is the input '" + in + "' itself");
  }
  if (a.has("--task") && a.str("--task").empty()) throw UsageError("moeflow trace record: --task: empty task name");
  const auto lookahead = static_cast<int32_t>(a.integer("--lookahead", 0, 3));
  // The token ids of each request, split into the steps that ran them.
  struct Recording {
    int64_t id;
    std::string task;
    std::vector<std::vector<int32_t>> steps;
  };
  std::vector<Recording> runs;
  int64_t max_len = 0;
  std::unique_ptr<Engine> engine;
  auto open_engine = [&](int64_t ctx) {
    EngineOptions eo = engine_options_from_flags(a, "all");
    eo.ctx_size = ctx + 1;
    engine = Engine::open(eo);
  };
  if (a.has("--from-trace")) {
    const Trace src = load_trace(a.str("--from-trace"));
    for (const TraceRequest& rq : src.requests) {
      Recording r{rq.id, rq.task, {}};
      int64_t len = 0;
      for (const TraceIteration& it : rq.iterations) {
        if (it.tokens.empty())
          throw InputError(src.path + ": request " + std::to_string(rq.id) + ", iter " + std::to_string(it.iter) +
                           " has no \"tokens\" to rerun");
        r.steps.push_back(it.tokens);
        len += static_cast<int64_t>(it.tokens.size());
      }
      max_len = std::max(max_len, len);
      runs.push_back(std::move(r));
    }
    open_engine(max_len);
  } else {
    std::ifstream in = open_input_file(a.str("--file"), "--file", true);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const int64_t windows = a.integer("--windows", 1, 1 << 20), prefill = a.integer("--prefill", 1, 1 << 16),
                  decode = a.integer("--decode", 0, 1 << 16), first = a.integer("--first-request", 0, INT64_MAX);
    const int64_t per = prefill + decode;
    open_engine(per);
    const std::vector<int32_t> ids = engine->tokenize(text, false);
    const int64_t skip = a.integer("--first-window", 0, 1 << 30);
    const int64_t whole = static_cast<int64_t>(ids.size()) / per;
    if (whole < 1)
      throw InputError(a.str("--file") + ": " + std::to_string(ids.size()) + " tokens, too few for one window of " +
                       std::to_string(per) + " (--prefill + --decode)");
    if (skip >= whole)
      throw UsageError("moeflow trace record: --first-window " + std::to_string(skip) + " skips every window: " +
                       a.str("--file") + " holds " + std::to_string(whole) + " windows of " + std::to_string(per) + " tokens");
    const int64_t n = std::min<int64_t>(windows, whole - skip);
    // Request ids first .. first + n - 1 must not wrap past the largest id.
    if (first > INT64_MAX - n)
      throw UsageError("moeflow trace record: --first-request " + std::to_string(first) + " + " + std::to_string(n) +
                       " windows passes the largest request id");
    for (int64_t w = 0; w < n; ++w) {
      const int32_t* tok = ids.data() + (skip + w) * per;
      Recording r{first + w, a.str("--task"), {std::vector<int32_t>(tok, tok + prefill)}};
      for (int64_t d = 0; d < decode; ++d) r.steps.push_back({tok[prefill + d]});
      runs.push_back(std::move(r));
    }
  }
  for (const Recording& r : runs)
    for (const auto& st : r.steps)
      for (int32_t t : st)
        if (t < 0 || t >= engine->n_vocab())
          throw InputError("request " + std::to_string(r.id) + ": token id " + std::to_string(t) +
                           " is outside the model's vocabulary of " + std::to_string(engine->n_vocab()));
  TraceRecorder rec(a.str("--out"), model_name(engine->model()), static_cast<int>(a.integer("--decimals", 1, 8)),
                    a.has("--append"));
  rec.set_lookahead(lookahead);
  rec.set_embedding_dim(a.integer("--embedding-dim", 0, kMaxTraceEmbedding));
  engine->add_listener(&rec);
  std::vector<float> logits;
  for (const Recording& r : runs) {
    const SeqId seq = engine->add_sequence({r.steps.front(), r.task});
    rec.begin_request(seq, r.task, r.id);
    EngineSequenceSink sink(*engine, seq);
    for (const auto& st : r.steps) sink.eval(st.data(), static_cast<int64_t>(st.size()), false, logits);
    engine->remove_sequence(seq);
    rec.end_request(seq);
  }
  rec.finish();
  std::fprintf(stderr, "recorded %zu requests (%lld lines, lookahead %d) of %s into %s\n", runs.size(),
               static_cast<long long>(rec.lines_written()), lookahead,
               (a.has("--file") ? a.str("--file") : a.str("--from-trace")).c_str(), a.str("--out").c_str());
  return 0;
}

// eMoE's predictor accuracy (emoe.txt Table 2): learn on some requests, predict the
// experts of the others, count the (token, layer) slots predicted right.
int trace_accuracy(int argc, char** argv) {
  Args a("trace accuracy");
  a.positional("FILE", "routing trace (.jsonl)");
  a.flag("--learn", "requests to learn from (range a:b)", true, "0:1");
  a.flag("--measure", "requests to predict (range a:b)", true, "1:");
  a.flag("--period", "eMoE: predict every p prompts", true, "40");
  a.flag("--json", "print one JSON object", false);
  a.parse(argc, argv, 3);
  if (a.positionals().empty()) throw UsageError("moeflow trace accuracy: give a trace file\n" + a.help());
  const Trace t = load_trace(a.positionals()[0]);
  const auto learn = parse_request_range("--learn", a.str("--learn"), t.requests.size());
  const auto measure = parse_request_range("--measure", a.str("--measure"), t.requests.size());
  if (measure.first >= measure.second) throw UsageError("--measure selects no requests");
  check_learn_measure_disjoint(learn, measure);
  const Trace lt = slice_requests(t, learn.first, learn.second), mt = slice_requests(t, measure.first, measure.second);
  const auto period = static_cast<int32_t>(a.integer("--period", 1, 1 << 20));
  const EmoeAccuracy all_layer = emoe_predictor_accuracy(lt, mt, EmoeVariant::AllLayer, period);
  const EmoeAccuracy by_layer = emoe_predictor_accuracy(lt, mt, EmoeVariant::LayerByLayer, period);
  if (a.has("--json")) {
    nlohmann::json j = {{"trace", t.path},
                        {"emoe_all_layer_accuracy", all_layer.accuracy()},
                        {"emoe_layer_by_layer_accuracy", by_layer.accuracy()},
                        {"slots", all_layer.slots},
                        {"chance", static_cast<double>(t.top_k) / t.n_expert}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: learn requests [%zu, %zu), measure [%zu, %zu), %lld (token, layer) slots\n", t.path.c_str(),
              learn.first, learn.second, measure.first, measure.second, static_cast<long long>(all_layer.slots));
  std::printf("eMoE predictor accuracy: all-layer (eMoE-A) %.1f%%, layer-by-layer (eMoE-L) %.1f%% (chance %.1f%%)\n",
              100 * all_layer.accuracy(), 100 * by_layer.accuracy(), 100.0 * t.top_k / t.n_expert);
  return 0;
}

// eMoE's per-(task, layer) sensitivity (emoe_sensitivity.h) from a labelled trace,
// written into a task profile file next to the keywords it keeps from --tasks.
int trace_sensitivity(int argc, char** argv) {
  Args a("trace sensitivity");
  a.positional("FILE", "routing trace (.jsonl) whose requests carry task labels");
  a.flag("--requests", "requests to measure (range a:b; e.g. the learning split only)", true, ":");
  a.flag("--tasks", "task profiles whose keywords to keep (default: profiles/tasks.json; none with --task)");
  a.flag("--task", "count requests without a task label as this task (a trace of one workload)");
  a.flag("--out", "write the profiles with the sensitivity table here (may be the --tasks file)");
  a.flag("--insensitive-below", "also mark layers under this sensitivity insensitive (s = 0; the paper's binary s)", true, "0");
  a.flag("--json", "print one JSON object", false);
  a.parse(argc, argv, 3);
  if (a.positionals().empty()) throw UsageError("moeflow trace sensitivity: give a trace file\n" + a.help());
  if (a.has("--out")) check_output_path(a.str("--out"), "--out");  // before the work, not after it
  const Trace t = load_trace(a.positionals()[0]);
  const auto range = parse_request_range("--requests", a.str("--requests"), t.requests.size());
  if (range.first >= range.second) throw UsageError("--requests selects no requests");
  const double below = a.number("--insensitive-below", 0, 1);
  if (a.has("--task") && a.str("--task").empty()) throw UsageError("--task: empty task name");
  const SensitivityTable s = routing_sensitivity(slice_requests(t, range.first, range.second), a.str("--task"));
  if (s.by_task.empty()) throw InputError(t.path + ": no request in the range carries a task label (give --task NAME)");
  // With --task the profiles start empty unless --tasks names some: another model's
  // sensitivity rows (profiles/tasks.json is the built-in model's) would not fit.
  std::vector<TaskProfile> profiles =
      a.has("--task") && !a.has("--tasks") ? std::vector<TaskProfile>{} : task_profiles_or_default(a.str("--tasks"));
  merge_sensitivity(profiles, s, below);
  const nlohmann::ordered_json source = {{"trace", t.path},
                                         {"model", t.model},
                                         {"requests", std::to_string(range.first) + ":" + std::to_string(range.second)},
                                         {"method", s.method},
                                         {"layers", s.n_layer}};
  if (a.has("--out"))
    save_task_profiles(a.str("--out"), profiles,
                       "eMoE task types (emoe.txt §3.2.1): keywords matched case-insensitively in the prompt, the most "
                       "matches wins. sensitivity: s of Eq. 2 per layer, in [0, 1], written by `moeflow trace "
                       "sensitivity` (" + s.method + ", see src/policy/emoe_sensitivity.h) for " + t.model +
                           "; insensitive_layers: s = 0 there.",
                       source.dump());
  if (a.has("--json")) {
    nlohmann::json j = {{"source", source}, {"sensitivity", s.by_task}, {"tokens", s.tokens}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: %s, requests [%zu, %zu); sensitivity by %s%s\n  task          rows ", t.path.c_str(), t.model.c_str(),
              range.first, range.second, s.method.c_str(),
              s.unlabelled_requests ? (", " + std::to_string(s.unlabelled_requests) + " unlabelled requests skipped").c_str() : "");
  for (int32_t l = 0; l < s.n_layer && l < 64; ++l) std::printf(" L%-4d", l);
  std::printf("\n");
  for (const auto& [task, row] : s.by_task) {
    std::printf("  %-12s %5lld ", task.c_str(), static_cast<long long>(s.tokens.at(task)));
    for (size_t l = 0; l < row.size() && l < 64; ++l) std::printf(" %.3f", row[l]);
    std::printf("\n");
  }
  if (a.has("--out")) std::printf("wrote %s\n", a.str("--out").c_str());
  return 0;
}

}  // namespace

int cmd_trace(int argc, char** argv) {
  const std::string sub = argc > 2 ? argv[2] : "";
  if (sub == "stats") return trace_stats(argc, argv);
  if (sub == "record") return trace_record(argc, argv);
  if (sub == "accuracy") return trace_accuracy(argc, argv);
  if (sub == "sensitivity") return trace_sensitivity(argc, argv);
  throw UsageError(
      "moeflow trace: expected a subcommand:\n  moeflow trace stats FILE [--json] [--by-task]\n"
      "  moeflow trace record -m MODEL (-f TEXT | --from-trace TRACE) -o OUT [--task T] [--windows N] [--prefill 16]\n"
      "                       [--decode 48] [--lookahead 2] [--embedding-dim N]\n"
      "  moeflow trace accuracy FILE [--learn 0:1] [--measure 1:] (eMoE predictor accuracy)\n"
      "  moeflow trace sensitivity FILE [--requests a:b] [--tasks IN] [--out FILE] (eMoE per-(task, layer) sensitivity)");
}

}  // namespace moeflow::cli
