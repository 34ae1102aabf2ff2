// Finished requests' prompts kept in the engine's KV pool (parked prefixes) for later
// requests that begin with the same tokens: a chat's next turn sends the whole
// conversation again, an agent loop its growing history, and only what is new needs
// prefill.
//
// Only positions computed in whole prefill chunks are kept (a multiple of the chunk
// length), and a request that takes them continues at that chunk boundary, so its
// prompt is split into the chunks it would be split into without the cache and it gets
// the same tokens either way (the engine's guarantee: a sequence's logits depend only
// on its tokens and how they were split into steps). The tokens a request generated
// were computed one a step, not in the chunks a later prompt holding them would be
// split into, so they are not kept.
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

class PromptCache {
 public:
  // chunk: the serving loop's prefill chunk (>= 1).
  PromptCache(Engine& engine, int64_t chunk);
  ~PromptCache();  // gives every parked prefix back to the engine
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  // Ends the sequence `seq`, whose first `computed` positions hold the keys and values
  // of `tokens` (its prompt) computed in whole chunks from position 0 (any later partial
  // chunk is not kept), parking those chunks. A parked prefix that the new one extends
  // or repeats is given back: it offers nothing the new one does not.
  void put(SeqId seq, const std::vector<int32_t>& tokens, int64_t computed);

  struct Taken {
    SeqId seq = 0;
    int64_t cached = 0;  // the prompt's first positions it already holds
  };
  // A new sequence for params.prompt, continued from the parked prefix that shares the
  // most whole chunks with it, leaving at least one prompt token to compute (the last
  // position's logits give the first token); a fresh sequence when none shares a chunk.
  Taken take(const SequenceParams& params);

  // Gives parked prefixes back, least recently used first, until `blocks` KV blocks
  // are free. False when the pool has fewer even with none parked.
  bool make_room(int64_t blocks);

  size_t size() const { return parked_.size(); }
  int64_t blocks() const;  // KV blocks the parked prefixes hold

 private:
  struct Parked {
    SeqId seq;
    std::vector<int32_t> tokens;  // the positions it holds
    uint64_t used;                // when it was parked (a clock of put() calls)
  };
  void drop(size_t i);

  Engine& engine_;
  int64_t chunk_;
  uint64_t clock_ = 0;
  std::vector<Parked> parked_;
};

}  // namespace moeflow::serve
