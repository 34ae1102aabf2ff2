#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/offload_flags.h"
#include "cli/process_memory.h"
#include "engine/trace_recorder.h"
#include "engine/generator.h"
#include "engine/logits_file.h"
#include "engine/tokenizer.h"
#include "moeflow/engine.h"

namespace moeflow::cli {

int cmd_run(int argc, char** argv) {
  Args a("run");
  add_model_flags(a);
  a.flag("-p,--prompt", "prompt text");
  a.flag("--prompt-tokens", "comma-separated token ids fed instead of text");
  a.flag("-n,--n-predict", "tokens to generate", true, "64");
  a.flag("--temp", "sampling temperature (0: greedy)", true, "0.8");
  a.flag("--top-k", "sample among the k most likely (0: all)", true, "40");
  a.flag("--top-p", "nucleus sampling mass", true, "0.95");
  a.flag("-s,--seed", "random seed", true, "42");
  a.flag("--repeat-penalty", "divide the logits of the last --repeat-last-n tokens by this (1: off)", true, "1");
  a.flag("--repeat-last-n", "tokens --repeat-penalty looks back over, prompt included (-1: all)", true, "64");
  a.flag("--presence-penalty", "lower a generated token's logit by this once (OpenAI's, -2 to 2)", true, "0");
  a.flag("--frequency-penalty", "lower a generated token's logit by this per time generated (-2 to 2)", true, "0");
  a.flag("--ignore-eos", "keep generating past end-of-text", false);
  a.flag("--logits-out", "write the logits of every position to this file (format: tools/reference/README.md)");
  a.flag("--json", "print one JSON object instead of streaming text", false);
  a.flag("--trace", "record every layer's routing to this .jsonl file (DESIGN.md interchange format)");
  a.flag("--task", "task label written into the trace and given to task-aware policies (default: detected from the "
                   "prompt's keywords, see --tasks)");
  add_offload_flags(a);
  a.parse(argc, argv, 2);
  if (a.has("--task") && a.str("--task").empty()) throw UsageError("moeflow run: --task: empty task name");

  // Flags that need neither the model nor the prompt are checked before loading.
  if (a.has("--prompt") && a.has("--prompt-tokens"))
    throw UsageError("moeflow run: give either -p/--prompt or --prompt-tokens, not both");
  const std::vector<TaskProfile> profiles = task_profiles_from_flags(a);
  EngineOptions eo = engine_options_from_flags(a, a.str("--policy"));
  if (eo.policy == "all" && a.has("--expert-budget"))
    throw UsageError("--expert-budget needs a --policy other than 'all' (e.g. --policy lru)");
  GenerateOptions opt;
  opt.n_predict = a.integer("--n-predict", 0, 1 << 20);
  opt.sampler.temperature = static_cast<float>(a.number("--temp", 0.0, 100.0));
  opt.sampler.top_k = static_cast<int32_t>(a.integer("--top-k", 0, 1 << 20));
  opt.sampler.top_p = static_cast<float>(a.number("--top-p", 0.0, 1.0));
  opt.sampler.seed = static_cast<uint64_t>(a.integer("--seed", 0, INT64_MAX));
  opt.sampler.repeat_penalty = static_cast<float>(a.number("--repeat-penalty", 1e-3, 100.0));
  opt.sampler.repeat_last_n = static_cast<int32_t>(a.integer("--repeat-last-n", -1, INT32_MAX));
  opt.sampler.presence_penalty = static_cast<float>(a.number("--presence-penalty", -2.0, 2.0));
  opt.sampler.frequency_penalty = static_cast<float>(a.number("--frequency-penalty", -2.0, 2.0));
  opt.stop_at_eog = !a.has("--ignore-eos");
  opt.record_logits = a.has("--logits-out");
  opt.feed_last = opt.record_logits;
  const bool json = a.has("--json");
  // Outputs that cannot be written are reported now, not after the whole generation.
  if (a.has("--logits-out")) check_output_path(a.str("--logits-out"), "--logits-out");
  check_policy_state_out(a, "run", true);

  auto engine = Engine::open(eo);
  const Tokenizer& tok = engine->tokenizer();
  std::vector<int32_t> prompt;
  std::string prompt_text;
  if (a.has("--prompt-tokens")) {
    prompt = parse_int_list("--prompt-tokens", a.str("--prompt-tokens"));
    for (size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] >= engine->n_vocab())
        throw UsageError("--prompt-tokens: id " + std::to_string(prompt[i]) + " (item " + std::to_string(i + 1) +
                         ") is outside the vocabulary [0, " + std::to_string(engine->n_vocab()) + ")");
  } else {
    prompt_text = a.has("--prompt") ? a.str("--prompt") : std::string("Once upon a time");
    prompt = tok.encode(prompt_text, tok.add_bos_default());
  }
  if (prompt.empty()) throw UsageError("moeflow run: the prompt encodes to no tokens");
  // Without --ctx-size the context is what the prompt and the generation need (at
  // least the default); with it, generation stops there and says so, and a prompt
  // that does not fit is refused before any step.
  const int64_t need = static_cast<int64_t>(prompt.size()) + opt.n_predict;
  if (a.has("--ctx-size") && static_cast<int64_t>(prompt.size()) > engine->ctx_size())
    throw UsageError("--ctx-size " + std::to_string(engine->ctx_size()) + ": the prompt alone is " +
                     std::to_string(prompt.size()) + " tokens; raise --ctx-size or shorten the prompt");
  if (need > engine->ctx_size()) {
    if (a.has("--ctx-size"))
      std::fprintf(stderr, "note: %lld prompt tokens + %lld to generate exceed --ctx-size %lld: generation stops at "
                   "the context size\n", static_cast<long long>(prompt.size()), static_cast<long long>(opt.n_predict),
                   static_cast<long long>(engine->ctx_size()));
    else
      engine->resize_context(need);
  }
  const int64_t trained = engine->model().config().n_ctx_train;
  if (trained > 0 && std::min(need, engine->ctx_size()) > trained)
    std::fprintf(stderr, "note: the run reaches position %lld, past the %lld positions the model was trained on\n",
                 static_cast<long long>(std::min(need, engine->ctx_size())), static_cast<long long>(trained));

  // eMoE §3.2.1: an unlabelled prompt gets the task whose keywords it matches most.
  // The trace keeps only a label the user gave: traces are the ground truth that
  // profiles and simulations learn from, a keyword guess is not.
  std::string task = a.str("--task");
  const char* task_source = task.empty() ? "none" : "flag";
  if (task.empty() && !profiles.empty()) {
    task = classify_task(prompt_text.empty() ? tok.decode(prompt) : prompt_text, profiles);
    if (!task.empty()) task_source = "keywords";
  }
  if (engine->lossy())
    std::fprintf(stderr, "note: --on-miss reroute is lossy: tokens whose expert is not resident use another one\n");
  std::unique_ptr<TraceRecorder> trace;
  if (a.has("--trace")) {
    trace = std::make_unique<TraceRecorder>(a.str("--trace"), model_name(engine->model()));
    engine->add_listener(trace.get());
  }
  const SeqId seq = engine->add_sequence({prompt, task});
  if (trace) trace->begin_request(seq, a.str("--task"));
  EngineSequenceSink sink(*engine, seq);
  StreamingDetokenizer detok(tok);
  std::string text;
  if (!json && !a.has("--prompt-tokens")) {
    std::fputs(tok.decode(prompt).c_str(), stdout);
    std::fflush(stdout);
  }
  GenerateResult r = generate(sink, prompt, opt, [&](int32_t id) { return tok.is_end_of_generation(id); },
                              [&](int32_t id) {
                                const std::string piece = detok.push(id);
                                text += piece;
                                if (!json) {
                                  std::fputs(piece.c_str(), stdout);
                                  std::fflush(stdout);
                                }
                              });
  engine->remove_sequence(seq);
  if (trace) trace->finish();
  if (engine->offloaded() && a.has("--policy-state-out")) engine->save_policy_state(a.str("--policy-state-out"));
  const std::string rest = detok.flush();
  text += rest;
  if (opt.record_logits) {
    LogitsRecord rec{engine->n_vocab(), r.fed_tokens, r.logits};
    write_logits_file(a.str("--logits-out"), rec);
  }
  const double pp = r.prompt_seconds > 0 ? static_cast<double>(prompt.size()) / r.prompt_seconds : 0;
  const double tg = r.gen_seconds > 0 && r.gen_evals > 0 ? static_cast<double>(r.gen_evals) / r.gen_seconds : 0;
  if (json) {
    nlohmann::json j;
    j["model"] = engine->model().file().path();
    j["prompt_tokens"] = prompt;
    j["tokens"] = r.generated;
    j["task"] = task;
    j["task_source"] = task_source;
    j["text"] = text;
    j["timings"] = {{"load_seconds", engine->load_seconds()},
                    {"prompt_seconds", r.prompt_seconds}, {"generation_seconds", r.gen_seconds},
                    {"prompt_tokens_per_second", pp},
                    {"generation_tokens_per_second", r.gen_evals > 0 ? nlohmann::json(tg) : nlohmann::json(nullptr)}};
    j["cache"] = offload_counters_json(engine->offload());
    j["memory"] = {{"peak_rss_bytes", peak_rss_bytes()},
                   {"dense_bytes", engine->model().weights().dense_bytes},
                   {"expert_bytes", engine->model().weights().expert_bytes},
                   {"kv_bytes", engine->kv_bytes()},
                   {"kv_bytes_touched", engine->kv_bytes_touched()},
                   {"kv_type", engine->kv_type()}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputs(rest.c_str(), stdout);
    std::printf("\n");
    std::fprintf(stderr, "\nload: %.2f s (%.0f MiB copied into memory)", engine->load_seconds(),
                 static_cast<double>(engine->model().resident_bytes()) / (1 << 20));
    // The first generated token comes from the prompt pass's logits: with one token
    // (or none) there is no decode pass to time, and 0.0 tokens/s would read as a stall.
    if (r.gen_evals > 0)
      std::fprintf(stderr, "\nprompt: %zu tokens, %.1f tokens/s | generation: %zu tokens, %.1f tokens/s\n",
                   prompt.size(), pp, r.generated.size(), tg);
    else
      std::fprintf(stderr, "\nprompt: %zu tokens, %.1f tokens/s | generation: %zu tokens (no decode pass to time)\n",
                   prompt.size(), pp, r.generated.size());
    if (engine->offloaded())
      std::fprintf(stderr, "%s | task: %s (%s)\n", engine->offload().summary().c_str(), task.empty() ? "-" : task.c_str(),
                   task_source);
  }
  return 0;
}

}  // namespace moeflow::cli
