#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/hardware_threads.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/kv_read_bytes.h"
#include "format/gguf.h"
#include "engine/forward_pass.h"
#include "engine/model_check.h"
#include "model/model_weights.h"

namespace moeflow::cli {

namespace {
bool is_expert_tensor(const std::string& name) { return name.find("_exps.") != std::string::npos; }
std::string human(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1ull << 20));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024.0);
  return buf;
}
}  // namespace

int cmd_inspect(int argc, char** argv) {
  Args a("inspect");
  a.positional("MODEL.gguf", "the model file");
  a.flag("--json", "print one JSON object", false);
  a.flag("--tensors", "list every tensor (prose output)", false);
  a.parse(argc, argv, 2);
  if (a.positionals().empty()) throw UsageError("moeflow inspect: give a model file\n" + a.help());
  auto f = gguf::GgufFile::open(a.positionals()[0]);
  uint64_t dense = 0, expert = 0;
  for (const auto& t : f->tensors()) (is_expert_tensor(t.name) ? expert : dense) += t.nbytes;
  // Validate the model too, with every check loading for `run` makes (tokenizer
  // included), so inspect tells whether `run` will accept the file.
  std::string model_error;
  std::unique_ptr<Model> model;
  try {
    model = Model::load(a.positionals()[0]);
    check_loadable(*model, hardware_threads());
  } catch (const InputError& e) {
    model_error = e.what();
  }
  // What a sequence's KV cache takes per position, every layer, in each cache type:
  // what --kv-type and --ctx-size cost. Sliding-window layers (gpt-oss) keep only their
  // window unless --swa-full: past it a position costs only the other layers'.
  nlohmann::json kv_per_position = nlohmann::json::object(), kv_per_position_past_window = nlohmann::json::object();
  int64_t ctx_train = 0, sliding_layers = 0, window = 0;
  if (model_error.empty()) {
    const ModelConfig& c = model->config();
    sliding_layers = kv_pool_layers(c, KvLayers::Sliding);
    window = c.sliding_window;
    for (const char* t : {"f32", "f16", "q8_0"}) {
      kv_per_position[t] = static_cast<uint64_t>(c.n_layer) * kv_bytes_per_position(c, t);
      kv_per_position_past_window[t] = static_cast<uint64_t>(c.n_layer - sliding_layers) * kv_bytes_per_position(c, t);
    }
    ctx_train = c.n_ctx_train;
  }
  if (a.has("--json")) {
    nlohmann::json j;
    j["path"] = f->path();
    j["version"] = f->version();
    j["alignment"] = f->alignment();
    j["file_bytes"] = f->file_size();
    j["dense_bytes"] = dense;
    j["expert_bytes"] = expert;
    j["loadable"] = model_error.empty();
    if (model_error.empty()) {
      j["kv_bytes_per_position"] = kv_per_position;
      if (sliding_layers > 0) {
        j["sliding_window"] = window;
        j["sliding_layers"] = sliding_layers;
        j["kv_bytes_per_position_past_the_window"] = kv_per_position_past_window;
      }
      j["context_length"] = ctx_train;
    }
    if (!model_error.empty()) j["load_error"] = model_error;
    nlohmann::json md = nlohmann::json::object();
    for (const auto& k : f->metadata_order()) md[k] = f->get(k).to_display();
    j["metadata"] = md;
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& t : f->tensors())
      ts.push_back({{"name", t.name}, {"dims", t.dims}, {"dtype", dtype_name(t.dtype)}, {"bytes", t.nbytes},
                    {"offset", t.file_offset}});
    j["tensors"] = ts;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("%s: GGUF v%u, %zu metadata keys, %zu tensors, %s\n", f->path().c_str(), f->version(),
              f->metadata().size(), f->tensors().size(), human(f->file_size()).c_str());
  std::printf("\nmetadata:\n");
  for (const auto& k : f->metadata_order()) std::printf("  %-48s %s\n", k.c_str(), f->get(k).to_display().c_str());
  std::printf("\nbytes: dense %s, experts %s (%.1f%% of weights are experts)\n", human(dense).c_str(), human(expert).c_str(),
              dense + expert ? 100.0 * static_cast<double>(expert) / static_cast<double>(dense + expert) : 0.0);
  if (a.has("--tensors")) {
    std::printf("\ntensors:\n");
    for (const auto& t : f->tensors()) {
      std::string dims;
      for (size_t i = 0; i < t.dims.size(); ++i) dims += (i ? " x " : "") + std::to_string(t.dims[i]);
      std::printf("  %-36s %-6s %-24s %s\n", t.name.c_str(), dtype_name(t.dtype), dims.c_str(), human(t.nbytes).c_str());
    }
  }
  if (model_error.empty()) {
    auto kv = [&](const char* t, int64_t n) { return human(kv_per_position[t].get<uint64_t>() * static_cast<uint64_t>(n)); };
    std::printf("\nKV cache a position: %s as f32, %s as f16, %s as q8_0", kv("f32", 1).c_str(), kv("f16", 1).c_str(),
                kv("q8_0", 1).c_str());
    if (ctx_train > 0)
      std::printf("; the model's %lld-token context: %s f16, %s q8_0 a sequence", static_cast<long long>(ctx_train),
                  kv("f16", ctx_train).c_str(), kv("q8_0", ctx_train).c_str());
    if (sliding_layers > 0) {
      const auto past = [&](const char* t) { return human(kv_per_position_past_window[t].get<uint64_t>()); };
      std::printf("\n%lld of %lld layers slide over the last %lld positions and keep only those (unless --swa-full): "
                  "past the window a position takes %s as f16, %s as q8_0",
                  static_cast<long long>(sliding_layers), static_cast<long long>(model->config().n_layer),
                  static_cast<long long>(window), past("f16").c_str(), past("q8_0").c_str());
    }
    std::printf("\n\nmodel: loads as a supported MoE architecture\n");
  } else {
    std::printf("\nmodel: NOT loadable: %s\n", model_error.c_str());
  }
  return 0;
}

}  // namespace moeflow::cli
