#include "model/synthetic_model.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "format/gguf.h"

namespace moeflow {

namespace {

using gguf::Value;
using gguf::ValueType;

std::vector<uint8_t> encode(DType t, const std::vector<float>& v, int64_t row) {
  std::vector<uint8_t> out(row_bytes(t, row) * (v.size() / static_cast<size_t>(row)));
  const size_t rb = row_bytes(t, row);
  for (size_t r = 0; r < v.size() / static_cast<size_t>(row); ++r)
    quantize_row(t, v.data() + r * static_cast<size_t>(row), out.data() + r * rb, row);
  return out;
}

// GPT-2's byte-to-unicode table, so the fixture's vocabulary is a real byte-level one.
std::string byte_token(int b) {
  int cp;
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
    cp = b;
  } else {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// --groups-used, 0 meaning every group.
int64_t groups_used(const SyntheticModelSpec& s) { return s.ds_groups_used > 0 ? s.ds_groups_used : s.ds_groups; }

struct DeepSeek2Sizes {
  int64_t q_lora, kv_lora, rope, v, ff_dense, groups_used;
};

DeepSeek2Sizes deepseek2_sizes(const SyntheticModelSpec& s) {
  DeepSeek2Sizes d{};
  if (s.arch != Arch::DeepSeek2) return d;
  d.q_lora = s.ds_q_lora_rank;
  d.kv_lora = s.ds_kv_lora_rank;
  d.rope = s.ds_rope_dim > 0 ? s.ds_rope_dim : s.head_dim / 2;
  d.v = s.ds_v_head_dim > 0 ? s.ds_v_head_dim : s.head_dim / 2;
  d.ff_dense = s.ds_ff_dense > 0 ? s.ds_ff_dense : 2 * s.n_ff_expert;
  d.groups_used = groups_used(s);
  const int64_t blk = dtype_info(s.dtype).block_size;
  if (d.rope % 2 || d.rope >= s.head_dim)
    throw InputError("synthetic model: the rope dims must be even and below the head size (the key's length)");
  if (s.ds_dense_lead >= s.n_layer) throw InputError("synthetic model: deepseek2 needs a MoE layer after the dense ones");
  for (int64_t cols : {d.q_lora, d.kv_lora, s.n_head * d.v, d.ff_dense, s.ds_shared * s.n_ff_expert})
    if (cols % blk)
      throw InputError("synthetic model: deepseek2's q/kv ranks, heads x value size, dense and shared FFN sizes must be "
                       "multiples of " + std::to_string(blk) + " for dtype " + dtype_name(s.dtype));
  if (s.ds_groups < 1 || s.n_expert % s.ds_groups || d.groups_used > s.ds_groups ||
      d.groups_used * (s.n_expert / s.ds_groups) < s.n_expert_used)
    throw InputError("synthetic model: expert groups must divide the experts and the used groups hold top-k experts");
  return d;
}

// The keys of DeepSeek's MoE block (model/deepseek_moe_config.h): V3's router
// (routed_scaling_factor 2.5, norm_topk_prob, sigmoid) or V2's.
void write_deepseek_moe_metadata(const SyntheticModelSpec& s, bool sigmoid, const std::string& p,
                                 gguf::GgufWriter& w) {
  const auto u32 = [](int64_t v) { return Value::make_u32(static_cast<uint32_t>(v)); };
  w.set(p + "leading_dense_block_count", u32(s.ds_dense_lead));
  w.set(p + "expert_shared_count", u32(s.ds_shared));
  w.set(p + "expert_weights_scale", Value::make_f32(sigmoid ? 2.5f : 1.5f));
  w.set(p + "expert_weights_norm", Value::make_bool(sigmoid));
  w.set(p + "expert_gating_func", u32(sigmoid ? 2 : 1));
  if (s.ds_groups > 1) {
    w.set(p + "expert_group_count", u32(s.ds_groups));
    w.set(p + "expert_group_used_count", u32(groups_used(s)));
  }
}

// Overrides and adds the keys llama.cpp's converter writes for DeepSeek-V2.
void write_deepseek2_metadata(const SyntheticModelSpec& s, const DeepSeek2Sizes& d, gguf::GgufWriter& w) {
  const std::string p = "deepseek2.";
  const auto u32 = [](int64_t v) { return Value::make_u32(static_cast<uint32_t>(v)); };
  w.set(p + "feed_forward_length", u32(d.ff_dense));
  w.set(p + "expert_feed_forward_length", u32(s.n_ff_expert));
  w.set(p + "attention.head_count_kv", u32(s.n_head));
  w.set(p + "attention.value_length", u32(d.v));
  w.set(p + "rope.dimension_count", u32(d.rope));
  if (d.q_lora > 0) w.set(p + "attention.q_lora_rank", u32(d.q_lora));
  w.set(p + "attention.kv_lora_rank", u32(d.kv_lora));
  write_deepseek_moe_metadata(s, s.ds_sigmoid_router, p, w);
  if (s.ds_yarn_factor > 1.0) {
    w.set(p + "rope.scaling.type", Value::make_string("yarn"));
    w.set(p + "rope.scaling.factor", Value::make_f32(static_cast<float>(s.ds_yarn_factor)));
    w.set(p + "rope.scaling.original_context_length", u32(4096));
    w.set(p + "rope.scaling.yarn_log_multiplier", Value::make_f32(0.0707f));  // 0.1 * DeepSeek's mscale_all_dim
  }
}

}  // namespace

void write_synthetic_model(const SyntheticModelSpec& s, const std::string& path) {
  const int64_t blk = dtype_info(s.dtype).block_size;
  if (s.n_embd % blk || s.n_ff_expert % blk || (s.n_head * s.head_dim) % blk)
    throw InputError("synthetic model: embedding, expert and attention sizes must be multiples of " +
                     std::to_string(blk) + " for dtype " + dtype_name(s.dtype));
  const DType expert_dtype = s.expert_dtype.value_or(s.dtype);
  const int64_t eblk = dtype_info(expert_dtype).block_size;
  if (s.n_embd % eblk || s.n_ff_expert % eblk)
    throw InputError("synthetic model: embedding and expert sizes must be multiples of " + std::to_string(eblk) +
                     " for the experts' dtype " + dtype_name(expert_dtype));
  const bool gpt_oss = s.arch == Arch::GptOss;
  const bool glm = s.arch == Arch::Glm4Moe;
  const bool ernie = s.arch == Arch::Ernie45Moe;
  // hunyuan-moe: per-head q/k norms (after RoPE) and one ungated shared expert of
  // --ff-shared (default twice --ff) in every layer.
  const bool hunyuan = s.arch == Arch::HunyuanMoe;
  const bool granite = s.arch == Arch::GraniteMoe;
  // glm4moe: RoPE on half of each head (partial_rotary_factor 0.5), dense leading layers
  // and ungated shared experts of the sizes the deepseek2 flags give.
  const int64_t glm_rope = s.ds_rope_dim > 0 ? s.ds_rope_dim : s.head_dim / 2;
  // ernie4_5-moe: dense leading layers too, a choice bias under a softmax router, one
  // ungated shared expert (of --ff-shared; default twice --ff, as ERNIE-4.5-21B's two).
  const int64_t glm_ff_dense = s.ds_ff_dense > 0 ? s.ds_ff_dense : 2 * s.n_ff_expert;
  if ((glm || ernie) && (glm_ff_dense % blk || s.ds_dense_lead >= s.n_layer))
    throw InputError("synthetic model: glm4moe and ernie4_5-moe need a dense size that is a multiple of " +
                     std::to_string(blk) + " and a MoE layer after the dense ones");
  if (glm && (glm_rope % 2 || glm_rope > s.head_dim || glm_ff_dense % blk || s.ds_dense_lead >= s.n_layer))
    throw InputError("synthetic model: glm4moe needs even rope dims up to the head size, a dense size that is a "
                     "multiple of " + std::to_string(blk) + " and a MoE layer after the dense ones");
  if (s.n_vocab < 257) throw InputError("synthetic model: n_vocab must be at least 257");
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = normal(rng) * scale;
    return v;
  };
  auto norm_weight = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = 1.0f + 0.1f * normal(rng);
    return v;
  };

  const char* arch = s.arch == Arch::Mixtral ? "llama" : arch_display_name(s.arch);
  const int64_t F_sh = s.n_ff_shexp > 0 ? s.n_ff_shexp : 2 * s.n_ff_expert;
  // Granite-MoE has a shared expert only when --ff-shared asks (GraniteMoeShared).
  const int64_t F_granite_sh = granite ? s.n_ff_shexp : 0;
  if ((s.arch == Arch::Qwen2Moe || ernie || hunyuan || F_granite_sh > 0) && F_sh % blk)
    throw InputError("synthetic model: the shared expert's size must be a multiple of " + std::to_string(blk) +
                     " for dtype " + dtype_name(s.dtype));
  const std::string p = std::string(arch) + ".";
  gguf::GgufWriter w;
  w.set("general.architecture", Value::make_string(arch));
  w.set("general.name", Value::make_string(std::string("moeflow synthetic ") + arch_display_name(s.arch)));
  w.set(p + "context_length", Value::make_u32(static_cast<uint32_t>(s.n_ctx)));
  w.set(p + "embedding_length", Value::make_u32(static_cast<uint32_t>(s.n_embd)));
  w.set(p + "block_count", Value::make_u32(static_cast<uint32_t>(s.n_layer)));
  w.set(p + "feed_forward_length", Value::make_u32(static_cast<uint32_t>(s.n_ff_expert)));
  if (s.arch == Arch::Qwen3Moe || s.arch == Arch::Qwen2Moe || gpt_oss || glm || ernie || hunyuan)
    w.set(p + "expert_feed_forward_length", Value::make_u32(static_cast<uint32_t>(s.n_ff_expert)));
  if (s.arch == Arch::Qwen2Moe || ernie || hunyuan || F_granite_sh > 0)
    w.set(p + "expert_shared_feed_forward_length", Value::make_u32(static_cast<uint32_t>(F_sh)));
  if (ernie) {  // ERNIE-4.5's converter: the dense layers' size and count, MoE in every later layer
    w.set(p + "feed_forward_length", Value::make_u32(static_cast<uint32_t>(glm_ff_dense)));
    w.set(p + "leading_dense_block_count", Value::make_u32(static_cast<uint32_t>(s.ds_dense_lead)));
    w.set(p + "interleave_moe_layer_step", Value::make_u32(1));
  }
  if (granite) {  // granite-3.0-1b-a400m's multipliers (its attention's is 1/head_dim; the embeddings' below)
    w.set(p + "embedding_scale", Value::make_f32(12.0f));
    w.set(p + "residual_scale", Value::make_f32(0.22f));
    w.set(p + "attention.scale", Value::make_f32(1.0f / static_cast<float>(s.head_dim)));
    w.set(p + "logit_scale", Value::make_f32(6.0f));
  }
  w.set(p + "attention.head_count", Value::make_u32(static_cast<uint32_t>(s.n_head)));
  w.set(p + "attention.head_count_kv", Value::make_u32(static_cast<uint32_t>(s.n_head_kv)));
  w.set(p + "attention.key_length", Value::make_u32(static_cast<uint32_t>(s.head_dim)));
  w.set(p + "attention.value_length", Value::make_u32(static_cast<uint32_t>(s.head_dim)));
  w.set(p + "attention.layer_norm_rms_epsilon", Value::make_f32(1e-5f));
  // gpt-oss's own RoPE: base 150000, YaRN x32 over an original context of 4096 (its
  // ramp then spans dims ~2-4 of a 16-dim head's 8 pairs).
  w.set(p + "rope.freq_base", Value::make_f32(gpt_oss ? 150000.0f : 10000.0f));
  if (gpt_oss) {
    w.set(p + "rope.scaling.type", Value::make_string("yarn"));
    w.set(p + "rope.scaling.factor", Value::make_f32(32.0f));
    w.set(p + "rope.scaling.original_context_length", Value::make_u32(4096));
    w.set(p + "attention.sliding_window", Value::make_u32(static_cast<uint32_t>(s.sliding_window)));
  }
  w.set(p + "rope.dimension_count", Value::make_u32(static_cast<uint32_t>(s.head_dim)));
  w.set(p + "expert_count", Value::make_u32(static_cast<uint32_t>(s.n_expert)));
  w.set(p + "expert_used_count", Value::make_u32(static_cast<uint32_t>(s.n_expert_used)));
  const DeepSeek2Sizes ds = deepseek2_sizes(s);
  if (s.arch == Arch::DeepSeek2) write_deepseek2_metadata(s, ds, w);
  if (glm) {  // GLM-4.5's converter: the dense layers' size, half-head RoPE, V3's router
    w.set(p + "feed_forward_length", Value::make_u32(static_cast<uint32_t>(glm_ff_dense)));
    w.set(p + "rope.dimension_count", Value::make_u32(static_cast<uint32_t>(glm_rope)));
    write_deepseek_moe_metadata(s, true, p, w);
  }

  // Byte-level BPE vocabulary: 256 byte tokens, one end-of-text token, merges of
  // frequent English pairs, then filler words until n_vocab is reached.
  std::vector<Value> tokens, types, merges;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(Value::make_string(byte_token(b)));
    types.push_back(Value::make_i32(1));
  }
  tokens.push_back(Value::make_string("<|endoftext|>"));
  types.push_back(Value::make_i32(3));
  const char* pairs[] = {"t h", "h e", "i n", "e r", "a n", "o n", "r e", "e n", "a t", "o r", "e s", "i s",
                         "i t", "a r", "o u", "e d", "a l", "t o", "s t", "n d"};
  const std::string space = byte_token(' ');
  std::vector<std::string> merge_strs;
  for (const char* pr : pairs) merge_strs.push_back(pr);
  for (char ch = 'a'; ch <= 'z'; ++ch) merge_strs.push_back(space + " " + std::string(1, ch));
  for (size_t i = 0; static_cast<int64_t>(tokens.size()) < s.n_vocab; ++i) {
    if (i < merge_strs.size()) {
      const std::string& m = merge_strs[i];
      const size_t sp = m.find(' ', m[0] == ' ' ? 1 : 0);
      tokens.push_back(Value::make_string(m.substr(0, sp) + m.substr(sp + 1)));
      merges.push_back(Value::make_string(m));
    } else {
      // Filler words (" wa", " wb", ...): no merge reaches them, so prompts never use
      // them, but a random model mostly generates them and they must decode to text, or
      // a served stream of such a model carries none (bench-serve times text chunks).
      std::string word = space + "w";
      for (size_t k = i; ; k /= 26) {
        word += static_cast<char>('a' + k % 26);
        if (k < 26) break;
      }
      tokens.push_back(Value::make_string(word));
    }
    types.push_back(Value::make_i32(1));
  }
  w.set("tokenizer.ggml.model", Value::make_string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::make_string("gpt-2"));  // GPT-2 pre-split, which our tokenizer does (llama.cpp reads the key)
  w.set("tokenizer.ggml.tokens", Value::make_array(ValueType::STRING, tokens));
  w.set("tokenizer.ggml.token_type", Value::make_array(ValueType::INT32, types));
  w.set("tokenizer.ggml.merges", Value::make_array(ValueType::STRING, merges));
  w.set("tokenizer.ggml.bos_token_id", Value::make_u32(256));
  w.set("tokenizer.ggml.eos_token_id", Value::make_u32(256));
  w.set("tokenizer.ggml.add_bos_token", Value::make_bool(false));

  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const int64_t D = s.n_embd, q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  const int64_t F = s.n_ff_expert, E = s.n_expert;
  auto add = [&](const std::string& name, std::vector<uint64_t> dims, DType t, const std::vector<float>& v) {
    w.add_tensor(name, dims, t, encode(t, v, static_cast<int64_t>(dims[0])));
  };
  // A SwiGLU FFN of hidden size ff under layer prefix b: ffn_{gate,up,down}<suffix>
  // (suffix "" for a dense layer's FFN, "_shexp" for DeepSeek-style shared experts).
  const auto swiglu = [&](const std::string& b, const std::string& suffix, int64_t ff) {
    const float in = 1.0f / std::sqrt(static_cast<float>(D)), out = 1.0f / std::sqrt(static_cast<float>(ff));
    add(b + "ffn_gate" + suffix + ".weight", {u(D), u(ff)}, s.dtype, random(ff * D, in));
    add(b + "ffn_up" + suffix + ".weight", {u(D), u(ff)}, s.dtype, random(ff * D, in));
    add(b + "ffn_down" + suffix + ".weight", {u(ff), u(D)}, s.dtype, random(D * ff, out));
  };
  // Scales keep activations O(1) through the layers so logits are not saturated.
  // Granite's embeddings are trained small, for its x12 multiplier to bring them to O(1).
  add("token_embd.weight", {u(D), u(s.n_vocab)}, s.dtype, random(s.n_vocab * D, granite ? 1.0f / 12 : 1.0f));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const float in_scale = 1.0f / std::sqrt(static_cast<float>(D));
    if (s.arch == Arch::DeepSeek2) {
      const auto mat = [&](const std::string& name, int64_t cols, int64_t rows) {
        add(b + name, {u(cols), u(rows)}, s.dtype, random(rows * cols, 1.0f / std::sqrt(static_cast<float>(cols))));
      };
      const auto norm = [&](const std::string& name, int64_t n) { add(b + name, {u(n)}, DType::F32, norm_weight(n)); };
      const int64_t H = s.n_head;
      norm("attn_norm.weight", D);
      if (ds.q_lora == 0) {
        mat("attn_q.weight", D, H * s.head_dim);
      } else {
        mat("attn_q_a.weight", D, ds.q_lora);
        norm("attn_q_a_norm.weight", ds.q_lora);
        mat("attn_q_b.weight", ds.q_lora, H * s.head_dim);
      }
      mat("attn_kv_a_mqa.weight", D, ds.kv_lora + ds.rope);
      norm("attn_kv_a_norm.weight", ds.kv_lora);
      mat("attn_kv_b.weight", ds.kv_lora, H * (s.head_dim - ds.rope + ds.v));
      mat("attn_output.weight", H * ds.v, D);
      norm("ffn_norm.weight", D);
      if (l < s.ds_dense_lead) {
        swiglu(b, "", ds.ff_dense);
        continue;
      }
      add(b + "ffn_gate_inp.weight", {u(D), u(E)}, DType::F32, random(E * D, 2.0f * in_scale));
      // Of the size of the sigmoid scores' spread, so that it changes choices.
      if (s.ds_sigmoid_router) add(b + "exp_probs_b.bias", {u(E)}, DType::F32, random(E, 0.2f));
      add(b + "ffn_gate_exps.weight", {u(D), u(F), u(E)}, s.dtype, random(E * F * D, in_scale));
      add(b + "ffn_up_exps.weight", {u(D), u(F), u(E)}, s.dtype, random(E * F * D, in_scale));
      add(b + "ffn_down_exps.weight", {u(F), u(D), u(E)}, s.dtype, random(E * D * F, 1.0f / std::sqrt(static_cast<float>(F))));
      if (s.ds_shared > 0) swiglu(b, "_shexp", s.ds_shared * F);
      continue;
    }
    add(b + "attn_norm.weight", {u(D)}, DType::F32, norm_weight(D));
    add(b + "attn_q.weight", {u(D), u(q_dim)}, s.dtype, random(q_dim * D, in_scale));
    add(b + "attn_k.weight", {u(D), u(kv_dim)}, s.dtype, random(kv_dim * D, in_scale));
    add(b + "attn_v.weight", {u(D), u(kv_dim)}, s.dtype, random(kv_dim * D, in_scale));
    add(b + "attn_output.weight", {u(q_dim), u(D)}, s.dtype, random(D * q_dim, 1.0f / std::sqrt(static_cast<float>(q_dim))));
    if (s.arch == Arch::Qwen2Moe || gpt_oss || glm) {
      add(b + "attn_q.bias", {u(q_dim)}, DType::F32, random(q_dim, 0.5f));
      add(b + "attn_k.bias", {u(kv_dim)}, DType::F32, random(kv_dim, 0.5f));
      add(b + "attn_v.bias", {u(kv_dim)}, DType::F32, random(kv_dim, 0.5f));
    }
    if (gpt_oss) {
      add(b + "attn_output.bias", {u(D)}, DType::F32, random(D, 0.2f));
      // Sinks of the size of a score (O(1)): they take a visible share of the softmax.
      add(b + "attn_sinks.weight", {u(s.n_head)}, DType::F32, random(s.n_head, 1.0f));
    }
    if (s.arch == Arch::Qwen3Moe || glm || hunyuan) {  // glm4moe: GLM-4.5's (Air has none)
      add(b + "attn_q_norm.weight", {u(s.head_dim)}, DType::F32, norm_weight(s.head_dim));
      add(b + "attn_k_norm.weight", {u(s.head_dim)}, DType::F32, norm_weight(s.head_dim));
    } else if (s.arch == Arch::Olmoe) {
      add(b + "attn_q_norm.weight", {u(q_dim)}, DType::F32, norm_weight(q_dim));
      add(b + "attn_k_norm.weight", {u(kv_dim)}, DType::F32, norm_weight(kv_dim));
    }
    add(b + (gpt_oss || glm ? "post_attention_norm.weight" : "ffn_norm.weight"), {u(D)}, DType::F32, norm_weight(D));
    if ((glm || ernie) && l < s.ds_dense_lead) {
      swiglu(b, "", glm_ff_dense);
      continue;
    }
    add(b + "ffn_gate_inp.weight", {u(D), u(E)}, DType::F32, random(E * D, 2.0f * in_scale));
    if (glm) add(b + "exp_probs_b.bias", {u(E)}, DType::F32, random(E, 0.2f));
    // Of the softmax probabilities' spread (~1/E), so that it changes choices.
    if (ernie) add(b + "exp_probs_b.bias", {u(E)}, DType::F32, random(E, 0.5f / static_cast<float>(E)));
    // gpt-oss's gate is scaled up so that its clamp at 7 is reached by some units.
    add(b + "ffn_gate_exps.weight", {u(D), u(F), u(E)}, expert_dtype, random(E * F * D, (gpt_oss ? 3.0f : 1.0f) * in_scale));
    add(b + "ffn_up_exps.weight", {u(D), u(F), u(E)}, expert_dtype, random(E * F * D, (gpt_oss ? 3.0f : 1.0f) * in_scale));
    add(b + "ffn_down_exps.weight", {u(F), u(D), u(E)}, expert_dtype, random(E * D * F, 1.0f / std::sqrt(static_cast<float>(F))));
    if (gpt_oss) {
      add(b + "ffn_gate_inp.bias", {u(E)}, DType::F32, random(E, 0.5f));
      add(b + "ffn_gate_exps.bias", {u(F), u(E)}, DType::F32, random(E * F, 0.5f));
      add(b + "ffn_up_exps.bias", {u(F), u(E)}, DType::F32, random(E * F, 0.5f));
      add(b + "ffn_down_exps.bias", {u(D), u(E)}, DType::F32, random(E * D, 0.2f));
    }
    if (glm && s.ds_shared > 0) swiglu(b, "_shexp", s.ds_shared * F);  // ungated
    if (F_granite_sh > 0) swiglu(b, "_shexp", F_granite_sh);            // ungated
    if (ernie || hunyuan) swiglu(b, "_shexp", F_sh);                     // ungated
    if (s.arch == Arch::Qwen2Moe) {
      add(b + "ffn_gate_inp_shexp.weight", {u(D)}, DType::F32, random(D, 2.0f * in_scale));
      add(b + "ffn_gate_shexp.weight", {u(D), u(F_sh)}, s.dtype, random(F_sh * D, in_scale));
      add(b + "ffn_up_shexp.weight", {u(D), u(F_sh)}, s.dtype, random(F_sh * D, in_scale));
      add(b + "ffn_down_shexp.weight", {u(F_sh), u(D)}, s.dtype, random(D * F_sh, 1.0f / std::sqrt(static_cast<float>(F_sh))));
    }
  }
  add("output_norm.weight", {u(D)}, DType::F32, norm_weight(D));
  if (!s.tied_output) add("output.weight", {u(D), u(s.n_vocab)}, s.dtype, random(s.n_vocab * D, 1.0f / std::sqrt(static_cast<float>(D))));
  w.write(path);
}

}  // namespace moeflow
