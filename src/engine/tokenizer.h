// Tokenizers described by GGUF metadata (tokenizer.ggml.*), as llama.cpp writes them:
//   "gpt2"  : byte-level BPE (tokens are byte-to-unicode mapped strings, merges ranked
//             by position in tokenizer.ggml.merges), pre-tokenised by the regex split
//             that tokenizer.ggml.pre names (pretokenizer.h: gpt-2, llama-bpe, qwen2,
//             gpt-4o, deepseek-llm, deepseek-coder, deepseek-v3 and their aliases; an
//             unknown name falls back to GPT-2's split, see pretokenizer_warning).
//   "llama" : SentencePiece-style BPE over scores (highest-score merge first), spaces
//             as U+2581 with a leading one added, byte fallback tokens <0xNN> for bytes
//             that have no piece.
// Special (control, type 3, and user-defined, type 4) tokens written literally in the
// text are split out first (longest match) and encoded as themselves; the text between
// them is encoded normally (for "llama", each such piece gets the space prefix when
// it starts the text or follows a special token, as llama.cpp does).
// decode() is the plain concatenation of token_bytes(): for "llama" the leading space
// that the prefix added is kept (encode("hi") decodes to " hi"); for "gpt2" decode is
// the exact inverse of encode, ill-formed UTF-8 included, except that "qwen2" first
// normalises the text between special tokens to NFC as its tokenizer.json says
// (llama.cpp does not), so it decodes to the NFC form of non-NFC input.
// Thread safety: a Tokenizer is immutable after construction.
#pragma once
#include <bitset>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/pretokenizer.h"

namespace moeflow {
namespace gguf { class GgufFile; }

struct TokenizerData {
  std::string model;                // "gpt2" or "llama"
  std::string pre;                  // tokenizer.ggml.pre: the pre-tokenizer (gpt2 only)
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens
  std::vector<float> scores;        // tokenizer.ggml.scores (may be empty for gpt2)
  std::vector<int32_t> types;       // tokenizer.ggml.token_type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)
  std::vector<std::string> merges;  // tokenizer.ggml.merges ("a b"), gpt2 only
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false;             // tokenizer.ggml.add_bos_token (default: llama and llama-bpe true, else false)
  bool add_space_prefix = true;     // tokenizer.ggml.add_space_prefix, llama only (default true)
};

// Reads tokenizer.ggml.* keys; throws InputError naming the key on a missing or
// malformed value (e.g. an eos id past the vocabulary).
TokenizerData tokenizer_data_from_gguf(const gguf::GgufFile& f);

// Checks the model name, array lengths and special ids; throws InputError naming the
// tokenizer.ggml.* key at fault. The Tokenizer constructor calls it too.
void validate_tokenizer_data(const TokenizerData& d);

// The warning to print for a vocabulary whose tokenizer.ggml.pre names a split that is not
// implemented (it names the value; text is then split with GPT-2's rule), or "".
std::string pretokenizer_warning(const TokenizerData& d);

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerData data);
  std::vector<int32_t> encode(const std::string& text, bool add_bos) const;
  // The raw bytes this token stands for (byte-level mapping undone, U+2581 -> ' ',
  // <0xNN> -> the byte). Control tokens give "" unless `show_special`.
  std::string token_bytes(int32_t id, bool show_special = false) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  int32_t bos() const { return d_.bos; }
  int32_t eos() const { return d_.eos; }
  bool add_bos_default() const { return d_.add_bos; }
  size_t vocab_size() const { return d_.tokens.size(); }
  bool is_end_of_generation(int32_t id) const;
  // gpt-oss's Harmony format: a reply is messages on channels (analysis, commentary,
  // final), its markup tokens are text (token_bytes), and <|end|> does not end it.
  bool harmony() const { return harmony_; }
  const TokenizerData& data() const { return d_; }
  const PreTokenizerSpec& pretokenizer() const { return pre_; }

 private:
  TokenizerData d_;
  PreTokenizerSpec pre_;                   // gpt2: from d_.pre (GPT-2's if unknown)
  // implementation state (token -> id map, merge ranks, byte maps) lives here
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<std::string, int32_t> merge_rank_;   // gpt2: "left right" -> rank
  // Control / user-defined tokens matched literally, bucketed by first byte and
  // sorted longest first inside each bucket (so the longest match wins).
  std::vector<std::vector<int32_t>> special_by_byte_;
  // For each first byte, which second bytes its tokens have (256 bits; bit 256: a
  // one-byte token): a run of "<" then skips DeepSeek-V3's ~800 "<｜...｜>" tokens at
  // once instead of comparing each (190 ms -> ~1 ms per 100 KB).
  std::vector<std::bitset<257>> special_second_byte_;
  std::vector<int32_t> byte_token_;        // llama: byte -> <0xNN> id (-1 if none)
  std::vector<int32_t> gpt2_byte_to_cp_;   // gpt2: byte -> unicode code point
  std::unordered_map<int32_t, uint8_t> gpt2_cp_to_byte_;
  std::vector<uint8_t> eog_;               // per id: ends generation
  std::vector<std::string> bytes_;         // per id: token_bytes(id, false)
  bool harmony_ = false;
  void mark_reply_structure();
  int32_t type_of(int32_t id) const;
  void encode_fragment(const std::string& text, bool prev_special, std::vector<int32_t>& out) const;
  void encode_gpt2(const std::string& text, std::vector<int32_t>& out) const;
  void encode_llama(const std::string& text, std::vector<int32_t>& out) const;
};

// Turns a stream of token ids into text without ever emitting half of a UTF-8
// character: bytes of an incomplete sequence are held back until it completes.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);  // returns the complete text that is now printable
  std::string flush();           // whatever is left (invalid bytes become U+FFFD)
 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace moeflow
