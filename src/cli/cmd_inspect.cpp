#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/hardware_threads.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "format/gguf.h"
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
  try {
    check_loadable(*Model::load(a.positionals()[0]), hardware_threads());
  } catch (const InputError& e) {
    model_error = e.what();
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
  if (model_error.empty()) std::printf("\nmodel: loads as a supported MoE architecture\n");
  else std::printf("\nmodel: NOT loadable: %s\n", model_error.c_str());
  return 0;
}

}  // namespace moeflow::cli
