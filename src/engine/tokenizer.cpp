// Tokenizer construction, special-token splitting, decoding and streaming
// detokenization. The two encoders live in tokenizer_bpe.cpp;
// reading TokenizerData from GGUF metadata lives in tokenizer_gguf.cpp.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "engine/tokenizer.h"
#include "engine/utf8.h"
#include "base/error.h"

namespace moeflow {
namespace {

constexpr int32_t kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4,
                  kTypeUnused = 5, kTypeByte = 6;

const char* const kSpaceMarker = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

void check_id(const char* key, int32_t id, size_t n) {
  if (id < -1 || (id >= 0 && static_cast<size_t>(id) >= n)) {
    throw InputError("tokenizer: " + std::string(key) + " = " + std::to_string(id) +
                     " is out of range for a vocabulary of " + std::to_string(n) + " tokens");
  }
}

// "<0xNN>" -> NN, or -1.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

bool is_eog_name(const std::string& t) {
  static const char* const kNames[] = {
      "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "</s>", "<|end|>",
      "<|eom_id|>", "<end_of_turn>", "<|end_of_text|>", "<|return|>",
  };
  for (const char* n : kNames)
    if (t == n) return true;
  return false;
}

}  // namespace

void validate_tokenizer_data(const TokenizerData& d) {
  if (d.model != "gpt2" && d.model != "llama") {
    throw InputError("unsupported tokenizer model '" + d.model + "' (key tokenizer.ggml.model)");
  }
  const size_t n = d.tokens.size();
  if (n == 0) throw InputError("tokenizer: tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) throw InputError("tokenizer: tokenizer.ggml.tokens has too many entries");
  if (!d.scores.empty() && d.scores.size() != n) {
    throw InputError("tokenizer: tokenizer.ggml.scores has " + std::to_string(d.scores.size()) +
                     " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  }
  if (!d.types.empty() && d.types.size() != n) {
    throw InputError("tokenizer: tokenizer.ggml.token_type has " + std::to_string(d.types.size()) +
                     " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  }
  check_id("tokenizer.ggml.bos_token_id", d.bos, n);
  check_id("tokenizer.ggml.eos_token_id", d.eos, n);
  check_id("tokenizer.ggml.unknown_token_id", d.unk, n);
  check_id("tokenizer.ggml.padding_token_id", d.pad, n);
}

std::string pretokenizer_warning(const TokenizerData& d) {
  if (d.model != "gpt2" || pretokenizer_for(d.pre)) return {};
  return "tokenizer.ggml.pre '" + d.pre +
         "' names a pre-tokenizer moeflow does not implement (it implements gpt-2, llama-bpe, qwen2, gpt-4o, "
         "deepseek-llm, deepseek-coder, deepseek-v3 and their llama.cpp aliases); text is split with GPT-2's rule, "
         "so token ids may differ from the model's own tokenizer (--prompt-tokens gives exact ids)";
}

int32_t Tokenizer::type_of(int32_t id) const {
  if (d_.types.empty()) return kTypeNormal;
  return d_.types[static_cast<size_t>(id)];
}

Tokenizer::Tokenizer(TokenizerData data) : d_(std::move(data)) {
  validate_tokenizer_data(d_);
  const size_t n = d_.tokens.size();
  const bool gpt2 = d_.model == "gpt2";

  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) token_to_id_.emplace(d_.tokens[i], static_cast<int32_t>(i));  // first wins

  if (gpt2) {
    pre_ = pretokenizer_for(d_.pre).value_or(PreTokenizerSpec{});
    // GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68
    // bytes to U+0100.. in byte order.
    gpt2_byte_to_cp_.assign(256, 0);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      gpt2_byte_to_cp_[b] = keep ? b : next++;
      gpt2_cp_to_byte_[gpt2_byte_to_cp_[b]] = static_cast<uint8_t>(b);
    }
    merge_rank_.reserve(d_.merges.size());
    for (size_t i = 0; i < d_.merges.size(); ++i) merge_rank_.emplace(d_.merges[i], static_cast<int32_t>(i));
  } else {
    byte_token_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      auto it = token_to_id_.find(buf);
      if (it != token_to_id_.end()) byte_token_[b] = it->second;
    }
  }

  special_by_byte_.assign(256, {});
  special_second_byte_.assign(256, {});
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = type_of(static_cast<int32_t>(i));
    const std::string& tok = d_.tokens[i];
    if ((t == kTypeControl || t == kTypeUserDefined) && !tok.empty()) {
      const auto first = static_cast<unsigned char>(tok[0]);
      special_by_byte_[first].push_back(static_cast<int32_t>(i));
      special_second_byte_[first].set(tok.size() > 1 ? static_cast<unsigned char>(tok[1]) : 256);
    }
  }
  for (auto& bucket : special_by_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
      return d_.tokens[a].size() > d_.tokens[b].size();
    });
  }

  eog_.assign(n, 0);
  bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const int32_t t = type_of(id);
    const std::string& tok = d_.tokens[i];
    eog_[i] = id == d_.eos ||
              ((d_.types.empty() || t == kTypeControl || t == kTypeUserDefined) && is_eog_name(tok));
    std::string& out = bytes_[i];
    if (t == kTypeControl || t == kTypeUnused) continue;  // "" unless show_special
    if (t == kTypeUserDefined) { out = tok; continue; }   // stored as raw text
    if (gpt2) {
      for (size_t p = 0; p < tok.size();) {
        uint32_t cp = 0;
        const size_t len = utf8::char_len(tok, p, &cp);
        auto it = gpt2_cp_to_byte_.find(static_cast<int32_t>(cp));
        if (len > 1 || cp < 0x80) {
          if (it != gpt2_cp_to_byte_.end()) out += static_cast<char>(it->second);
          else out.append(tok, p, len);  // not in the mapped alphabet: keep as is
        } else {
          out.append(tok, p, len);  // ill-formed byte: keep as is
        }
        p += len;
      }
    } else {
      const int b = (t == kTypeByte || d_.types.empty()) ? parse_byte_token(tok) : -1;
      if (b >= 0) { out = std::string(1, static_cast<char>(b)); continue; }
      if (t == kTypeUnknown) { out = "\xE2\x96\x85"; continue; }  // as llama.cpp: U+2585
      for (size_t p = 0; p < tok.size();) {
        if (tok.compare(p, 3, kSpaceMarker) == 0) { out += ' '; p += 3; }
        else out += tok[p++];
      }
    }
  }
  mark_reply_structure();
}

// Control tokens that structure a reply are text the server reads: DeepSeek's and
// Kimi-K2's tool-call tags, and gpt-oss's Harmony messages, where <|end|> closes one message of a reply
// (its reasoning, say) and only <|return|> or <|call|> end it (as llama.cpp treats them).
void Tokenizer::mark_reply_structure() {
  static const char* const kCallTags[] = {
      "<｜tool▁calls▁begin｜>",       "<｜tool▁calls▁end｜>",       "<｜tool▁call▁begin｜>",
      "<｜tool▁call▁end｜>",          "<｜tool▁sep｜>",             "<|tool_calls_section_begin|>",
      "<|tool_calls_section_end|>", "<|tool_call_begin|>",        "<|tool_call_argument_begin|>",
      "<|tool_call_end|>"};
  static const char* const kHarmonyMarkup[] = {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"};
  auto id_of = [&](const char* tok) {
    const auto it = token_to_id_.find(tok);
    return it == token_to_id_.end() ? -1 : it->second;
  };
  auto show = [&](int32_t id) {
    if (id >= 0 && type_of(id) == kTypeControl) bytes_[static_cast<size_t>(id)] = d_.tokens[static_cast<size_t>(id)];
  };
  for (const char* tag : kCallTags) show(id_of(tag));
  harmony_ = id_of("<|channel|>") >= 0 && id_of("<|message|>") >= 0 && id_of("<|start|>") >= 0 &&
             id_of("<|return|>") >= 0;
  if (!harmony_) return;
  for (const char* tag : kHarmonyMarkup) show(id_of(tag));
  // Even where a file names <|end|> its end-of-sequence token.
  if (const int32_t end = id_of("<|end|>"); end >= 0) eog_[static_cast<size_t>(end)] = 0;
  if (const int32_t call = id_of("<|call|>"); call >= 0) eog_[static_cast<size_t>(call)] = 1;
}

void Tokenizer::encode_fragment(const std::string& text, bool prev_special,
                                std::vector<int32_t>& out) const {
  if (d_.model == "gpt2") {
    encode_gpt2(text, out);
  } else {
    // As llama.cpp: the space prefix goes before the first text fragment and before
    // every fragment that follows a special token.
    if (d_.add_space_prefix && prev_special) encode_llama(" " + text, out);
    else encode_llama(text, out);
  }
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && d_.bos >= 0) out.push_back(d_.bos);
  bool prev_special = true;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const auto first = static_cast<unsigned char>(text[i]);
    const auto& second = special_second_byte_[first];
    if (second.none() ||
        (i + 1 < text.size() && !second.test(256) && !second.test(static_cast<unsigned char>(text[i + 1])))) {
      ++i;
      continue;
    }
    const auto& bucket = special_by_byte_[first];
    int32_t match = -1;
    for (int32_t id : bucket) {
      const std::string& t = d_.tokens[id];
      if (text.compare(i, t.size(), t) == 0) { match = id; break; }  // longest first
    }
    if (match < 0) { ++i; continue; }
    if (i > start) {
      encode_fragment(text.substr(start, i - start), prev_special, out);
    }
    out.push_back(match);
    prev_special = true;
    i += d_.tokens[match].size();
    start = i;
  }
  if (start < text.size()) encode_fragment(text.substr(start), prev_special, out);
  return out;
}

std::string Tokenizer::token_bytes(int32_t id, bool show_special) const {
  if (id < 0 || static_cast<size_t>(id) >= d_.tokens.size()) return {};
  if (show_special && type_of(id) == kTypeControl) return d_.tokens[id];
  return bytes_[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < eog_.size() && eog_[id];
}

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tok_.token_bytes(id);
  std::string out;
  const size_t used = utf8::sanitize(pending_, out, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  utf8::sanitize(pending_, out, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace moeflow
