// Finished requests' prompts kept in the engine's KV pool (parked prefixes) for later
// requests that begin with the same tokens: a chat's next turn sends the whole
// conversation again, an agent loop its growing history, and only what is new needs
// prefill.
//
// A request gets the same tokens with the cache or without. Where the engine is
// split-invariant (Engine::split_invariant: quantised weights on the CPU's integer
// kernels), any prefix continues exactly, so every position a request computed is
// kept, its reply included, and a later request continues from its longest common
// prefix. Elsewhere a sequence's floats depend on how its tokens were split into
// steps, so only prompt positions computed in whole prefill chunks are kept, and a
// request continues at a chunk boundary: its prompt is then split into the chunks it
// would be split into without the cache. Either way a request continues at the end of
// a KV block (and of a chunk), whose blocks it then shares with the parked prefix, so
// any number of requests, running at once or not, continue from one copy.
//
// Where a model's sliding-window layers keep only their window (Engine::kv_can_keep),
// a parked prefix continues only from near its end (a chat's next turn) and a running
// prompt from the points it was offered at (a shared system prompt from the last one
// inside it); serve --swa-full continues from any whole block.
//
// A prompt is offered while it is still being read (offer()): requests that arrive
// together and begin alike compute the shared part once.
//
// Parked prefixes hold KV blocks that running requests may need: make_room() gives
// back the least recently used first.
//
// Thread safety: none; the serving loop's thread owns it.
#pragma once
#include <cstdint>
#include <vector>

#include "moeflow/engine.h"

namespace moeflow::serve {

// How many first tokens a and b share, at most `limit`.
int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t limit);

class PromptCache {
 public:
  // chunk: the serving loop's prefill chunk (>= 1).
  PromptCache(Engine& engine, int64_t chunk);
  ~PromptCache();  // gives every parked prefix back to the engine
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  // Ends the sequence `seq`, whose positions hold `tokens` (its prompt, of prompt_len
  // tokens, fed in this cache's chunks, then the tokens it generated, the last perhaps
  // never fed), parking what a later request may continue from. A parked prefix that
  // the new one extends or repeats is given back: it offers nothing the new one does
  // not.
  void put(SeqId seq, const std::vector<int32_t>& tokens, int64_t prompt_len);

  // Offers the first `computed` positions of the running sequence `seq`, whose prompt
  // is `prompt`, to requests that start while it runs (rounded down by usable()), unless a
  // parked prefix already holds them. Returns the positions now offered.
  int64_t offer(SeqId seq, const std::vector<int32_t>& prompt, int64_t computed);

  struct Taken {
    SeqId seq = 0;
    int64_t cached = 0;  // the prompt's first positions it already holds
  };
  // A new sequence for params.prompt, continued from the parked prefix that shares the
  // most with it (in whole KV blocks, and whole chunks unless exact()), leaving at
  // least one prompt token to compute (the last position's logits give the first
  // token); a fresh sequence when none shares that much. The prefix stays parked.
  Taken take(const SequenceParams& params);

  // Gives parked prefixes back, least recently used first (those that free blocks of
  // their own before those that share all theirs with running sequences), until
  // `blocks` KV blocks are free. False when the pool has fewer even with none parked.
  bool make_room(int64_t blocks);

  size_t size() const { return parked_.size(); }
  bool exact() const { return exact_; }  // any prefix continues (the engine is split-invariant)
  // Positions of a prompt that a later one beginning with the same `n` tokens may
  // continue from: whole KV blocks (exact), or whole blocks that end a chunk.
  int64_t usable(int64_t n) const { return n / step_ * step_; }

 private:
  struct Parked {
    SeqId seq;
    std::vector<int32_t> tokens;  // the positions it holds
    uint64_t used;                // when it was last parked or continued from (a clock)
  };
  // Parks `kept` under `seq`, giving back the parked prefixes it extends or repeats.
  void add(SeqId seq, std::vector<int32_t> kept);
  void drop(size_t i);

  Engine& engine_;
  bool exact_;
  int64_t step_;  // what usable() rounds down to
  uint64_t clock_ = 0;
  std::vector<Parked> parked_;
};

}  // namespace moeflow::serve
