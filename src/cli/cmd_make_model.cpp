#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "base/atomic_file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/synthetic_model.h"

namespace moeflow::cli {

int cmd_make_model(int argc, char** argv) {
  Args a("make-model");
  a.flag("-o,--out", "output GGUF path (required)");
  a.flag("--arch", "mixtral | qwen3moe | olmoe | qwen2moe | deepseek2 | gpt-oss | glm4moe | granitemoe | ernie4_5-moe | hunyuan-moe", true, "mixtral");
  a.flag("--dtype", "f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_k .. q6_k | iq4_nl | iq4_xs | mxfp4 (big matrices; the k-quants need --embd, --ff "
                    "and heads x head-dim multiples of 256)", true, "f32");
  a.flag("--expert-dtype", "dtype of the expert matrices, e.g. mxfp4 as gpt-oss ships them (default: --dtype)", true, "");
  a.flag("--window", "sliding window of the even layers (gpt-oss)", true, "8");
  a.flag("--vocab", "vocabulary size", true, "300");
  a.flag("--embd", "hidden size", true, "64");
  a.flag("--layers", "number of blocks", true, "2");
  a.flag("--heads", "attention heads", true, "4");
  a.flag("--kv-heads", "key/value heads", true, "2");
  a.flag("--head-dim", "head size", true, "16");
  a.flag("--ff", "hidden size of one expert", true, "64");
  a.flag("--ff-shared", "hidden size of the shared expert (qwen2moe, ernie4_5-moe, hunyuan-moe: default twice --ff; granitemoe: default none)", true, "0");
  a.flag("--q-lora", "deepseek2: q's low rank (0: attn_q directly, as V2-Lite)", true, "0");
  a.flag("--kv-lora", "deepseek2: the compressed kv's width", true, "32");
  a.flag("--rope-dim", "deepseek2, glm4moe: the rotated dims of a key (0: half --head-dim)", true, "0");
  a.flag("--v-head-dim", "deepseek2: value head size (0: half --head-dim)", true, "0");
  a.flag("--dense-lead", "deepseek2, glm4moe, ernie4_5-moe: leading dense layers", true, "1");
  a.flag("--shared-experts", "deepseek2, glm4moe: shared experts of --ff each", true, "2");
  a.flag("--expert-groups", "deepseek2, glm4moe: expert groups for group-limited routing", true, "1");
  a.flag("--groups-used", "deepseek2, glm4moe: groups a token may route to (0: all)", true, "0");
  a.flag("--yarn-factor", "deepseek2: YaRN rope scaling factor (1: none)", true, "4");
  a.flag("--router", "deepseek2: softmax (V2) or sigmoid (V3: a choice bias, groups by their two best)", true,
         "softmax");
  a.flag("--experts", "experts per layer", true, "8");
  a.flag("--top-k", "experts used per token", true, "2");
  a.flag("--tied", "tie the output projection to the embeddings", false);
  a.flag("--seed", "random seed", true, "1");
  a.parse(argc, argv, 2);
  if (!a.has("--out")) throw UsageError("moeflow make-model: --out is required\n" + a.help());
  check_output_path(a.str("--out"), "--out");
  SyntheticModelSpec s;
  const std::string arch = a.str("--arch");
  if (arch == "mixtral") s.arch = Arch::Mixtral;
  else if (arch == "qwen3moe") s.arch = Arch::Qwen3Moe;
  else if (arch == "olmoe") s.arch = Arch::Olmoe;
  else if (arch == "qwen2moe") s.arch = Arch::Qwen2Moe;
  else if (arch == "deepseek2") s.arch = Arch::DeepSeek2;
  else if (arch == "gpt-oss") s.arch = Arch::GptOss;
  else if (arch == "glm4moe") s.arch = Arch::Glm4Moe;
  else if (arch == "granitemoe") s.arch = Arch::GraniteMoe;
  else if (arch == "ernie4_5-moe") s.arch = Arch::Ernie45Moe;
  else if (arch == "hunyuan-moe") s.arch = Arch::HunyuanMoe;
  else throw UsageError("moeflow make-model: --arch must be mixtral, qwen3moe, olmoe, qwen2moe, deepseek2, gpt-oss, glm4moe, "
                        "granitemoe, ernie4_5-moe or hunyuan-moe, got '" + arch + "'");
  if (!dtype_from_name(a.str("--dtype"), s.dtype))
    throw UsageError("moeflow make-model: --dtype must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k..q6_k, iq4_nl, iq4_xs or mxfp4, got '" + a.str("--dtype") + "'");
  if (dtype_is_lattice_iquant(s.dtype))
    throw UsageError("moeflow make-model: --dtype " + a.str("--dtype") + ": moeflow reads this type but does not write it");
  DType expert_dtype = s.dtype;
  if (!a.str("--expert-dtype").empty() && !dtype_from_name(a.str("--expert-dtype"), expert_dtype))
    throw UsageError("moeflow make-model: --expert-dtype must be a dtype --dtype takes, or mxfp4, got '" +
                     a.str("--expert-dtype") + "'");
  if (dtype_is_lattice_iquant(expert_dtype))
    throw UsageError("moeflow make-model: --expert-dtype " + a.str("--expert-dtype") +
                     ": moeflow reads this type but does not write it");
  if (!a.str("--expert-dtype").empty()) s.expert_dtype = expert_dtype;
  s.sliding_window = a.integer("--window", 1, 1 << 24);
  s.n_vocab = a.integer("--vocab", 257, 1 << 20);
  s.n_embd = a.integer("--embd", 32, 1 << 16);
  s.n_layer = a.integer("--layers", 1, 256);
  s.n_head = a.integer("--heads", 1, 256);
  s.n_head_kv = a.integer("--kv-heads", 1, 256);
  // (DeepSeek-2's latent attention writes as many key/value heads as heads.)
  if (s.arch != Arch::DeepSeek2 && s.n_head % s.n_head_kv != 0)
    throw UsageError("moeflow make-model: --heads " + std::to_string(s.n_head) + " must be a multiple of --kv-heads " +
                     std::to_string(s.n_head_kv) + " (each key/value head serves a whole group of heads)");
  s.head_dim = a.integer("--head-dim", 2, 1024);
  s.n_ff_expert = a.integer("--ff", 32, 1 << 16);
  s.n_ff_shexp = a.integer("--ff-shared", 0, 1 << 16);
  s.n_expert = a.integer("--experts", 1, 1024);
  s.n_expert_used = a.integer("--top-k", 1, s.n_expert);
  s.ds_q_lora_rank = a.integer("--q-lora", 0, 1 << 16);
  s.ds_kv_lora_rank = a.integer("--kv-lora", 1, 1 << 16);
  s.ds_rope_dim = a.integer("--rope-dim", 0, 1024);
  s.ds_v_head_dim = a.integer("--v-head-dim", 0, 1024);
  s.ds_dense_lead = a.integer("--dense-lead", 0, 255);
  s.ds_shared = a.integer("--shared-experts", 0, 64);
  s.ds_groups = a.integer("--expert-groups", 1, 1024);
  s.ds_groups_used = a.integer("--groups-used", 0, 1024);
  s.ds_yarn_factor = a.number("--yarn-factor", 1.0, 1e6);
  const std::string router = a.str("--router");
  if (router != "softmax" && router != "sigmoid")
    throw UsageError("moeflow make-model: --router must be softmax or sigmoid, got '" + router + "'");
  if (router == "sigmoid" && s.arch != Arch::DeepSeek2)
    throw UsageError("moeflow make-model: --router sigmoid is deepseek2's (DeepSeek-V3's router)");
  s.ds_sigmoid_router = router == "sigmoid";
  s.tied_output = a.has("--tied");
  s.seed = static_cast<uint64_t>(a.integer("--seed", 0, INT64_MAX));
  // Rotary embedding turns pairs of a head's dimensions.
  if (s.head_dim % 2) throw UsageError("moeflow make-model: --head-dim " + std::to_string(s.head_dim) + " must be even");
  // A flag of another architecture would be written nowhere, without a word.
  struct ArchFlag {
    const char* flag;
    std::vector<Arch> archs;
    const char* names;
  };
  const std::vector<ArchFlag> arch_flags = {
      {"--window", {Arch::GptOss}, "gpt-oss"},
      {"--ff-shared", {Arch::Qwen2Moe, Arch::Ernie45Moe, Arch::HunyuanMoe, Arch::GraniteMoe},
       "qwen2moe, ernie4_5-moe, hunyuan-moe and granitemoe"},
      {"--q-lora", {Arch::DeepSeek2}, "deepseek2"},
      {"--kv-lora", {Arch::DeepSeek2}, "deepseek2"},
      {"--v-head-dim", {Arch::DeepSeek2}, "deepseek2"},
      {"--yarn-factor", {Arch::DeepSeek2}, "deepseek2"},
      {"--rope-dim", {Arch::DeepSeek2, Arch::Glm4Moe}, "deepseek2 and glm4moe"},
      {"--dense-lead", {Arch::DeepSeek2, Arch::Glm4Moe, Arch::Ernie45Moe}, "deepseek2, glm4moe and ernie4_5-moe"},
      {"--shared-experts", {Arch::DeepSeek2, Arch::Glm4Moe}, "deepseek2 and glm4moe"},
      {"--expert-groups", {Arch::DeepSeek2, Arch::Glm4Moe}, "deepseek2 and glm4moe"},
      {"--groups-used", {Arch::DeepSeek2, Arch::Glm4Moe}, "deepseek2 and glm4moe"},
  };
  for (const ArchFlag& f : arch_flags)
    if (a.has(f.flag) && std::find(f.archs.begin(), f.archs.end(), s.arch) == f.archs.end())
      throw UsageError("moeflow make-model: " + std::string(f.flag) + " applies to " + f.names + ", not " + arch);
  // The writer holds the model in memory: sizes each in range can still ask for more
  // than the machine has (a 1M x 64K embedding alone is 256 GiB in floats).
  const auto bytes_of = [](DType t, double elements) {
    const DTypeInfo& d = dtype_info(t);
    return elements * static_cast<double>(d.type_size) / static_cast<double>(d.block_size);
  };
  const double E = static_cast<double>(s.n_embd), F = static_cast<double>(s.n_ff_expert);
  const double attn = E * static_cast<double>(s.head_dim) * static_cast<double>(2 * s.n_head + 2 * s.n_head_kv);
  const double experts = static_cast<double>(s.n_expert) * 3 * E * F;
  const double shared = 3 * E * std::max<double>({static_cast<double>(s.n_ff_shexp), 2 * F, static_cast<double>(s.ds_shared) * F});
  const double embed = static_cast<double>(s.n_vocab) * E * (s.tied_output ? 1 : 2);
  const double total = bytes_of(s.dtype, embed + static_cast<double>(s.n_layer) * (attn + shared)) +
                       bytes_of(s.expert_dtype.value_or(s.dtype), static_cast<double>(s.n_layer) * experts) +
                       4 * std::max({static_cast<double>(s.n_vocab) * E, F * E});
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (ram > 0 && total > 0.8 * ram)
    throw UsageError("moeflow make-model: the model would take about " + std::to_string(static_cast<int64_t>(total / 1048576.0)) +
                     " MiB to write, more than this machine's memory (" + std::to_string(static_cast<int64_t>(ram / 1048576.0)) +
                     " MiB) allows; lower --vocab, --embd, --ff, --experts or --layers");
  write_synthetic_model(s, a.str("--out"));
  std::printf("wrote %s\n", a.str("--out").c_str());
  return 0;
}

}  // namespace moeflow::cli
