// moeflow quantize: rewrite a GGUF model's weight tensors in another element type.
#include <climits>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "cli/commands.h"
#include "cli/args.h"
#include "cli/perplexity.h"
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
    case DType::Q8_0: return 7;
    case DType::BF16: return 32;
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 12;  // Q3_K_M's id; a plain all-q3_k file has none of its own
    case DType::Q4_K: return 15;  // likewise Q4_K_M
    case DType::Q5_K: return 17;  // Q5_K_M
    case DType::Q6_K: return 18;
    case DType::Q4_0_R4:
    case DType::Q8_0_R4: break;  // in-memory only; --type never names them
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

QuantizeStats quantize_model(const std::string& in, const std::string& out, DType type,
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
  w.set("general.file_type", gguf::Value::make_u32(ftype_of(type)));
  for (const auto& [key, value] : overrides) w.set(key, value);
  QuantizeStats st;
  const int64_t block = dtype_info(type).block_size;
  std::vector<float> row;
  for (const gguf::TensorInfo& t : f->tensors()) {
    ++st.n_tensors;
    st.bytes_in += t.nbytes;
    const int64_t cols = static_cast<int64_t>(t.dims.empty() ? 1 : t.dims[0]);
    const bool convert = t.dims.size() >= 2 && !ends_with(t.name, "ffn_gate_inp.weight") && cols % block == 0 &&
                         t.dtype != type;
    if (!convert) {
      w.add_tensor(t.name, t.dims, t.dtype, std::vector<uint8_t>(t.data, t.data + t.nbytes));
      st.bytes_out += t.nbytes;
      if (log) {
        const char* why = t.dims.size() < 2 ? "1-D" : ends_with(t.name, "ffn_gate_inp.weight") ? "router"
                          : t.dtype == type ? "already" : "row length not a multiple of the block";
        log(t.name + ": kept " + dtype_name(t.dtype) + " (" + why + ")");
      }
      continue;
    }
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

int cmd_quantize(int argc, char** argv) {
  Args a("quantize");
  a.flag("-i,--input", "GGUF model to read (required)");
  a.flag("-o,--output", "GGUF model to write (required; not the input)");
  a.flag("--type", "element type of the weight matrices: q8_0, q4_0, f16, bf16 or f32 (required)");
  a.flag("-v,--verbose", "print what happens to every tensor", false);
  a.flag("--override-kv", "set a metadata key in the output: KEY=TYPE:VALUE, TYPE str|int|float|bool "
                          "(comma-separate several)");
  a.parse(argc, argv, 2);
  if (!a.has("--input") || !a.has("--output") || !a.has("--type"))
    throw UsageError("moeflow quantize: -i/--input, -o/--output and --type are required\n" + a.help());
  DType type;
  if (!dtype_from_name(a.str("--type"), type))
    throw UsageError("moeflow quantize: --type: unknown type '" + a.str("--type") +
                     "' (expected q8_0, q4_0, f16, bf16 or f32)");
  const bool verbose = a.has("--verbose");
  std::vector<std::pair<std::string, gguf::Value>> overrides;
  for (const std::string& spec : split_list(a.str("--override-kv"))) overrides.push_back(parse_override_kv(spec));
  const QuantizeStats st = quantize_model(
      a.str("--input"), a.str("--output"), type,
      [&](const std::string& m) {
        if (verbose) std::fprintf(stderr, "%s\n", m.c_str());
      },
      overrides);
  std::printf("wrote %s: %lld of %lld tensors as %s, %.2f MiB -> %.2f MiB\n", a.str("--output").c_str(),
              static_cast<long long>(st.n_converted), static_cast<long long>(st.n_tensors), dtype_name(type),
              st.bytes_in / 1048576.0, st.bytes_out / 1048576.0);
  return 0;
}

}  // namespace moeflow::cli
