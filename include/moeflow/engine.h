// moeflow public API: an inference engine for Mixture-of-Experts models whose
// experts need not fit in memory.
//
//   EngineOptions opt;
//   opt.model_path = "mixtral-q4_0.gguf";
//   opt.n_parallel = 4;                 // room for 4 sequences of ctx_size positions
//   opt.expert_budget = "25%";          // optional: stream experts under a budget
//   opt.policy = "lru";
//   auto engine = moeflow::Engine::open(opt);
//   SeqId a = engine->add_sequence({prompt_a});
//   engine->step({{a, tok0, 0}, {a, tok1, 1, /*logits=*/true}});   // prefill a
//   const float* l = engine->logits(1);                            // a's next-token logits
//
// A step takes the tokens of any sequences (prefill chunks and decode tokens mixed):
// each selected expert's weights are read once for the whole step. A sequence's
// logits depend only on its own tokens and on how its own tokens were split into
// steps: batched with any others, it gets the floats it gets alone, all resident or
// offloaded under any budget and policy with on_miss "load".
//
// KV memory comes in blocks of kv_block_len() positions from one pool shared by all
// sequences (a second one of the same count for sliding-window layers that keep only
// their window: EngineOptions::swa_full); a step that needs more blocks than are free
// is refused whole (nothing changes), and remove_sequence returns a sequence's blocks
// at once.
//
// Errors: bad options, files and batches throw moeflow::InputError (base/error.h)
// naming what is wrong. Thread safety: one thread at a time per Engine.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moeflow {

class Model;
class Tokenizer;
class ForwardListener;
class ThreadPool;
struct ExpertOffload;
class Backend;

struct EngineOptions {
  std::string model_path;          // GGUF file (required)
  // Where the model computes: "cpu", or "cuda" / "cuda:N" (weights, KV cache and the
  // expert cache in GPU memory; under an expert budget experts wait in pinned host
  // memory and cross PCIe). "cuda" needs a build with the CUDA toolkit.
  std::string backend = "cpu";
  int threads = 0;                 // worker threads (0: one per core)
  int64_t ctx_size = 0;            // most positions one sequence holds (0: the model's trained context, at most 4096)
  int n_parallel = 1;              // sequences the KV pool holds at ctx_size each (the pool's size)
  // KV cache elements: auto (f16 for q8_0/q4_0 key/value weights, else f32), f32, f16,
  // or q8_0 (int8 with a scale per 32 elements: ~0.56x an f16 cache's bytes; CPU only).
  std::string kv_type = "auto";
  // Sliding-window layers (gpt-oss's every other layer): false keeps only the positions
  // their window still reaches, in a pool of their own (half a long context's KV memory
  // on gpt-oss); true keeps every position, as the other layers do (llama.cpp's
  // --swa-full), so that a parked prompt can be continued from any of its whole blocks
  // (kv_can_keep), not only from near its end. No effect on other models. The window's
  // saving is in memory touched (kv_bytes_touched); a GPU backend allocates both pools
  // whole.
  bool swa_full = false;
  bool mmap = false;               // compute from the file mapping (starts faster, reads slower)
  bool repack = true;              // rows interleaved in fours on VNNI CPUs (q4_0, q8_0; Q4_K-Q6_K on int8)
  // Precision of the activations those interleaved rows and k-quant rows multiply:
  // "int16" (products within ~2e-5 of f32), "int8" (llama.cpp's q8_0 activations: ~4e-3
  // per product, up to 1.8x the tokens per second where arithmetic, not memory, limits a
  // batched step) or "auto" (int8 for q4_0 and k-quant weights, whose own rounding is
  // 8-32x coarser; int16 for q8_0).
  std::string activations = "auto";
  // Expert offloading: with a policy other than "all", experts stream from the file
  // into a cache of expert_budget bytes ("25%" of what all experts take in memory,
  // "2GiB", or a byte count; empty: 100%).
  std::string expert_budget;
  std::string policy = "all";      // all, lru, lfu, on-demand, next-layer, moe-infinity, fmoe(-async, -prompt), duoserve(-k), emoe, adaptive
  // load (lossless), reroute (eMoE; lossy, labelled so) or host-compute (a GPU backend:
  // a missing expert runs on the CPU from host memory; lossless)
  std::string on_miss = "load";
  int io_threads = 4;              // expert readers
  std::string policy_state;        // learned policy state to start from
  std::string tasks_path;          // eMoE task profiles
  std::string emoe_variant = "all-layer";
  int32_t emoe_top_l = 0;
};

using SeqId = int64_t;

struct SequenceParams {
  std::vector<int32_t> prompt;  // for policies keyed on the prompt (fMoE, eMoE); may be empty
  std::string task;             // task label for task-aware policies; may be empty
};

// One token of a step: it goes to position `pos` of sequence `seq`, whose positions
// before it must be filled (earlier steps or earlier tokens of this step).
struct BatchToken {
  SeqId seq = 0;
  int32_t token = 0;
  int64_t pos = 0;
  bool logits = false;  // keep this token's next-token logits
};

struct ExpertCacheStats {
  uint64_t hits = 0, misses = 0, prefetches_issued = 0, prefetch_hits = 0, evictions = 0;
  uint64_t bytes_read = 0, budget_bytes = 0, expert_bytes_total = 0;
  double stall_seconds = 0;
  // (token, expert) slots that --on-miss reroute served with another, resident expert:
  // how far the outputs are from all-resident ones (0 under load and host-compute).
  uint64_t rerouted_slots = 0;
};

class Engine {
 public:
  // Loads the model and builds the engine. Throws InputError.
  static std::unique_ptr<Engine> open(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // A new empty sequence (ids are never reused).
  SeqId add_sequence(const SequenceParams& params = {});
  // Ends a sequence and returns its KV blocks to the pool. Unknown ids are an error.
  void remove_sequence(SeqId seq);
  // Positions the sequence (or parked prefix) holds.
  int64_t sequence_length(SeqId seq) const;
  int64_t n_sequences() const;  // sequences a step may take (parked prefixes not counted)

  // Prompt reuse (a chat's next turn, an agent's next call): the keys and values of a
  // finished sequence's first positions kept for a later sequence whose tokens begin
  // the same way, so that only the rest needs steps.
  //
  // Ends `seq`'s request as remove_sequence does (policies see it end) but keeps the KV
  // blocks of its first `keep` positions (0 <= keep <= its length; the blocks past them
  // go back to the pool) under the returned id: a parked prefix, which no step takes.
  // remove_sequence frees it.
  SeqId park_sequence(SeqId seq, int64_t keep);
  // A new sequence that starts with the first `keep` positions of the parked prefix
  // `parked` (0 <= keep <= its length, a multiple of kv_block_len()). It shares their
  // blocks (nothing is copied, and no one writes them: the new sequence writes from
  // position keep on, in blocks of its own), and the parked prefix stays for others. Its
  // logits are those of a sequence whose first `keep` positions were split into the
  // same steps as the parked one's were.
  SeqId add_sequence(const SequenceParams& params, SeqId parked, int64_t keep);
  // Parks the first `keep` positions of the running sequence `seq` (0 <= keep <= its
  // length, a multiple of kv_block_len()) while `seq` goes on: a prompt still being read
  // is offered to the sequences that start meanwhile. The two share those blocks, which
  // `seq` no longer writes; its request goes on (policies hear nothing).
  SeqId park_prefix(SeqId seq, int64_t keep);
  // Whether park_sequence, park_prefix or add_sequence(params, seq, keep) may keep
  // `keep` positions of `seq`: always, except where sliding-window layers keep only
  // their window (EngineOptions::swa_full false) and `seq` has let go of rows a
  // continuation from position keep would read (keep then more than a window before the
  // end of what `seq` held). Those calls throw InputError where this is false.
  bool kv_can_keep(SeqId seq, int64_t keep) const;
  int64_t n_parked() const;
  // KV blocks that only parked prefixes hold (what removing them all would free).
  int64_t kv_blocks_parked() const;
  // KV blocks that removing `seq` (a sequence or parked prefix) would give back: those
  // no other one shares.
  int64_t kv_blocks_freed_by_removing(SeqId seq) const;
  // Whether a sequence's logits are the same bits however its tokens were split into
  // steps (a prompt in chunks of any size, or token by token as decoding feeds them):
  // true where every product of the model runs token by token (quantised weights on
  // the CPU's integer kernels), false where a multi-token step rounds differently
  // (float weights, a GPU) and under on_miss "reroute". Where true, a parked prefix may end anywhere, the positions
  // a sequence decoded included, and still continue exactly.
  bool split_invariant() const;

  // Evaluates the batch. Throws InputError for an unknown sequence, a position that
  // does not continue its sequence, a token outside the vocabulary, a sequence past
  // ctx_size, or too few free KV blocks; a refused step changes nothing. A step that
  // fails midway (an expert read from a file cut during the run, a listener's throw)
  // leaves every sequence as it was and offers no logits; the same step may be run
  // again. A second thread calling step() while one runs gets InputError.
  void step(const std::vector<BatchToken>& batch);
  // KV blocks `batch` would take beyond those its sequences hold: what step() checks
  // against kv_blocks_free() (a caller holding parked prefixes frees that many first).
  // Unknown or parked sequences throw InputError as step() does.
  int64_t kv_blocks_needed(const std::vector<BatchToken>& batch) const;
  // Next-token logits (n_vocab floats) of batch token i of the last step, which must
  // have asked for them; valid until the next step.
  const float* logits(size_t batch_index) const;

  int64_t n_vocab() const;
  int64_t ctx_size() const;
  // Sets the most positions one sequence holds, re-sizing the KV pool to n_parallel
  // sequences of them. REQUIRES no sequences and no parked prefixes (InputError
  // otherwise). A size the pool cannot hold is refused (InputError) and the old
  // context stays.
  void resize_context(int64_t ctx_size);
  std::string kv_type() const;  // "f32", "f16" or "q8_0"
  int64_t kv_block_len() const;
  int64_t kv_blocks_total() const;
  int64_t kv_blocks_free() const;
  uint64_t kv_bytes() const;
  // Of kv_bytes(), what the cache has ever written: blocks are reused most recently
  // freed first, so this is the most it held at once, the memory it takes (the rest of
  // the mapping was never touched).
  uint64_t kv_bytes_touched() const;
  // Seconds open() took to read the model, copy its weights into memory (on
  // EngineOptions::threads threads) and check its tokenizer.
  double load_seconds() const;

  // Text.
  std::vector<int32_t> tokenize(const std::string& text, bool add_bos) const;
  std::string detokenize(const std::vector<int32_t>& ids) const;
  bool add_bos_default() const;
  bool is_end_of_generation(int32_t token) const;

  // Expert offloading.
  bool offloaded() const;
  bool lossy() const;  // on_miss "reroute": outputs may differ from all-resident
  ExpertCacheStats cache_stats() const;
  // Writes the policy's learned state (e.g. MoE-Infinity's EAM collection).
  void save_policy_state(const std::string& path) const;

  // The project's own tools reach the parts (src/ headers).
  const Model& model() const;
  const Tokenizer& tokenizer() const;
  ThreadPool& thread_pool();
  Backend& backend();
  ExpertOffload& offload();
  // Sees every step and layer routing (not owned; must outlive the engine's steps).
  void add_listener(ForwardListener* listener);

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moeflow
