// moeflow quantize: rewrite a GGUF model's weight tensors in another element type.
#include <climits>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "cli/commands.h"
#include "cli/args.h"
#include "cli/perplexity.h"
#include "base/atomic_file.h"
#include "cli/quant_mix.h"
#include "base/error.h"
#include "format/gguf.h"

namespace moeflow::cli {
namespace {

// llama.cpp's general.file_type (enum llama_ftype) for a file whose weights are `t`.
uint32_t ftype_of(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::BF16: return 32;
    // An all-k-quant file has no id of its own: the mix closest to it.
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 11;  // Q3_K_S
    case DType::Q4_K: return 14;  // Q4_K_S
    case DType::Q5_K: return 16;  // Q5_K_S
    case DType::Q6_K: return 18;
    case DType::IQ4_NL: return 25;
    case DType::IQ4_XS: return 30;
    case DType::MXFP4: return 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S:
    case DType::IQ1_S: case DType::IQ1_M:
      break;  // never written (quantize refuses them)
  }
  return 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::pair<std::string, gguf::Value> parse_override_kv(const std::string& spec) {
  const size_t eq = spec.find('='), colon = spec.find(':', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || eq == 0 || colon == std::string::npos)
    throw UsageError("--override-kv '" + spec + "': expected KEY=TYPE:VALUE, e.g. tokenizer.ggml.pre=str:gpt-2");
  const std::string key = spec.substr(0, eq), type = spec.substr(eq + 1, colon - eq - 1), val = spec.substr(colon + 1);
  try {
    size_t used = 0;
    if (type == "str") return {key, gguf::Value::make_string(val)};
    if (type == "bool") {
      if (val != "true" && val != "false") throw std::invalid_argument("bool");
      return {key, gguf::Value::make_bool(val == "true")};
    }
    if (type == "int") {
      const long long v = std::stoll(val, &used);
      if (used != val.size() || v < INT32_MIN || v > INT32_MAX) throw std::invalid_argument("int");
      return {key, gguf::Value::make_i32(static_cast<int32_t>(v))};
    }
    if (type == "float") {
      const float v = std::stof(val, &used);
      if (used != val.size()) throw std::invalid_argument("float");
      return {key, gguf::Value::make_f32(v)};
    }
  } catch (const std::exception&) {
    throw UsageError("--override-kv '" + spec + "': '" + val + "' is not a valid " + type + " value");
  }
  throw UsageError("--override-kv '" + spec + "': unknown type '" + type + "' (expected str, int, float or bool)");
}

namespace {

// What becomes of one tensor: its new type, or why it is kept as it is.
struct TensorPlan {
  DType type;
  const char* kept_why = nullptr;  // not null: kept
};

// quantize_model's body: plan(t) decides every tensor.
QuantizeStats quantize_tensors(const std::string& in, const std::string& out, uint32_t ftype,
                               const std::function<TensorPlan(const gguf::GgufFile&, const gguf::TensorInfo&)>& plan,
                               const std::function<void(const std::string&)>& log,
                               const std::vector<std::pair<std::string, gguf::Value>>& overrides) {
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(in, out, ec))
    throw InputError("quantize: input and output are the same file '" + out + "'");
  auto f = gguf::GgufFile::open(in);
  gguf::GgufWriter w(f->alignment());
  for (const std::string& k : f->metadata_order()) {
    if (k == "general.alignment") continue;  // the writer sets it from its own alignment
    w.set(k, f->metadata().at(k));
  }
  if (f->alignment() != 32) w.set("general.alignment", gguf::Value::make_u32(static_cast<uint32_t>(f->alignment())));
  w.set("general.file_type", gguf::Value::make_u32(ftype));
  for (const auto& [key, value] : overrides) w.set(key, value);
  QuantizeStats st;
  std::vector<float> row;
  for (const gguf::TensorInfo& t : f->tensors()) {
    ++st.n_tensors;
    st.bytes_in += t.nbytes;
    const int64_t cols = static_cast<int64_t>(t.dims.empty() ? 1 : t.dims[0]);
    TensorPlan p = plan(*f, t);
    if (!p.kept_why && p.type == t.dtype) p.kept_why = "already";
    if (p.kept_why) {
      w.add_tensor(t.name, t.dims, t.dtype, std::vector<uint8_t>(t.data, t.data + t.nbytes));
      st.bytes_out += t.nbytes;
      if (log) log(t.name + ": kept " + dtype_name(t.dtype) + " (" + p.kept_why + ")");
      continue;
    }
    const DType type = p.type;
    const int64_t rows = static_cast<int64_t>(t.n_elements()) / cols;
    const size_t in_row = row_bytes(t.dtype, cols), out_row = row_bytes(type, cols);
    std::vector<uint8_t> bytes(out_row * static_cast<size_t>(rows));
    row.resize(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(t.dtype, t.data + in_row * static_cast<size_t>(r), row.data(), cols);
      quantize_row(type, row.data(), bytes.data() + out_row * static_cast<size_t>(r), cols);
    }
    st.bytes_out += bytes.size();
    ++st.n_converted;
    if (log) log(t.name + ": " + dtype_name(t.dtype) + " -> " + dtype_name(type));
    w.add_tensor(t.name, t.dims, type, std::move(bytes));
  }
  w.write(out);
  return st;
}

// 1-D tensors (norms), biases and routers stay as they are, as llama.cpp keeps them
// (it quantises only names ending in "weight": gpt-oss's expert biases are 2-D).
const char* never_quantized(const gguf::TensorInfo& t) {
  if (t.dims.size() < 2) return "1-D";
  if (ends_with(t.name, ".bias")) return "bias";
  if (ends_with(t.name, "ffn_gate_inp.weight")) return "router";
  return nullptr;
}

int64_t metadata_int(const gguf::GgufFile& f, const std::string& key, int64_t fallback) {
  const gguf::Value* v = f.find(key);
  return v ? v->as_int(key) : fallback;
}

}  // namespace

QuantizeStats quantize_model(const std::string& in, const std::string& out, DType type,
                             const std::function<void(const std::string&)>& log,
                             const std::vector<std::pair<std::string, gguf::Value>>& overrides) {
  const int64_t block = dtype_info(type).block_size;
  auto plan = [&](const gguf::GgufFile&, const gguf::TensorInfo& t) {
    if (const char* why = never_quantized(t)) return TensorPlan{t.dtype, why};
    if (static_cast<int64_t>(t.dims[0]) % block != 0)
      return TensorPlan{t.dtype, block == 256 ? "row length not a multiple of the 256-column k-quant block"
                                              : "row length not a multiple of the block"};
    return TensorPlan{type};
  };
  return quantize_tensors(in, out, ftype_of(type), plan, log, overrides);
}

QuantizeStats quantize_model_mix(const std::string& in, const std::string& out, QuantMix mix,
                                 const std::function<void(const std::string&)>& log,
                                 const std::vector<std::pair<std::string, gguf::Value>>& overrides) {
  auto plan = [&](const gguf::GgufFile& f, const gguf::TensorInfo& t) {
    if (const char* why = never_quantized(t)) return TensorPlan{t.dtype, why};
    const gguf::Value* arch_v = f.find("general.architecture");
    const std::string arch = arch_v ? arch_v->as_string("general.architecture") : "";
    MixModel m;
    m.n_layer = metadata_int(f, arch + ".block_count", 0);
    m.n_expert = metadata_int(f, arch + ".expert_count", 0);
    const int64_t heads = metadata_int(f, arch + ".attention.head_count", 1);
    const int64_t kv_heads = metadata_int(f, arch + ".attention.head_count_kv", heads);
    m.n_gqa = kv_heads > 0 ? heads / kv_heads : 1;
    m.tied_output = f.find_tensor("output.weight") == nullptr;
    return TensorPlan{quant_mix_tensor_type(mix, m, t.name, static_cast<int64_t>(t.dims[0]))};
  };
  return quantize_tensors(in, out, quant_mix_ftype(mix), plan, log, overrides);
}

int cmd_quantize(int argc, char** argv) {
  Args a("quantize");
  a.flag("-i,--input", "GGUF model to read (required)");
  a.flag("-o,--output", "GGUF model to write (required; not the input)");
  a.flag("--type", "element type of the weight matrices: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4, f16, bf16 or "
                   "f32; or a llama.cpp mix: q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q2_k_mix, q6_k_mix "
                   "(docs/kquants.md) (required)");
  a.flag("-v,--verbose", "print what happens to every tensor", false);
  a.flag("--override-kv", "set a metadata key in the output: KEY=TYPE:VALUE, TYPE str|int|float|bool "
                          "(comma-separate several)");
  a.parse(argc, argv, 2);
  if (!a.has("--input") || !a.has("--output") || !a.has("--type"))
    throw UsageError("moeflow quantize: -i/--input, -o/--output and --type are required\n" + a.help());
  check_output_path(a.str("--output"), "--output");  // before the quantisation, not after it
  DType type = DType::F32;
  QuantMix mix = QuantMix::Q4_K_M;
  const bool is_mix = quant_mix_from_name(a.str("--type"), mix);
  if (!is_mix && !dtype_from_name(a.str("--type"), type))
    throw UsageError("moeflow quantize: --type: unknown type '" + a.str("--type") +
                     "' (expected q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4, f16, bf16, f32, or a mix: q3_k_s, "
                     "q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q2_k_mix, q6_k_mix)");
  if (!is_mix && dtype_is_lattice_iquant(type))
    throw UsageError("moeflow quantize: --type " + a.str("--type") +
                     ": moeflow reads this type but does not write it (llama-quantize does, with an importance matrix)");
  const bool verbose = a.has("--verbose");
  std::vector<std::pair<std::string, gguf::Value>> overrides;
  for (const std::string& spec : split_list(a.str("--override-kv"))) overrides.push_back(parse_override_kv(spec));
  auto log = [&](const std::string& m) {
    if (verbose) std::fprintf(stderr, "%s\n", m.c_str());
  };
  const QuantizeStats st = is_mix ? quantize_model_mix(a.str("--input"), a.str("--output"), mix, log, overrides)
                                  : quantize_model(a.str("--input"), a.str("--output"), type, log, overrides);
  std::printf("wrote %s: %lld of %lld tensors as %s, %.2f MiB -> %.2f MiB\n", a.str("--output").c_str(),
              static_cast<long long>(st.n_converted), static_cast<long long>(st.n_tensors),
              is_mix ? quant_mix_name(mix) : dtype_name(type), st.bytes_in / 1048576.0, st.bytes_out / 1048576.0);
  if (st.n_converted == 0)
    std::fprintf(stderr, "note: no tensor was converted: every one is already %s, too small, or has rows this type's "
                         "blocks do not divide (a k-quant needs rows that are multiples of 256; --verbose says why per tensor)\n",
                 is_mix ? quant_mix_name(mix) : dtype_name(type));
  return 0;
}

}  // namespace moeflow::cli
