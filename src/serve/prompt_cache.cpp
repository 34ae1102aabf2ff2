#include "serve/prompt_cache.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"

namespace moeflow::serve {

int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t limit) {
  const int64_t n = std::min({static_cast<int64_t>(a.size()), static_cast<int64_t>(b.size()), limit});
  int64_t i = 0;
  while (i < n && a[static_cast<size_t>(i)] == b[static_cast<size_t>(i)]) ++i;
  return i;
}

PromptCache::PromptCache(Engine& engine, int64_t chunk)
    : engine_(engine), exact_(engine.split_invariant()), step_(engine.kv_block_len()) {
  if (chunk < 1) throw InputError("prompt cache: the prefill chunk must be >= 1, not " + std::to_string(chunk));
  if (!exact_) step_ = std::lcm(chunk, step_);
}

PromptCache::~PromptCache() {
  for (const Parked& p : parked_) engine_.remove_sequence(p.seq);
}

void PromptCache::put(SeqId seq, const std::vector<int32_t>& tokens, int64_t prompt_len) {
  // Without exactness, the generated positions (computed a token a step) are not kept.
  const int64_t held = std::min(engine_.sequence_length(seq), static_cast<int64_t>(tokens.size()));
  const int64_t keep = usable(exact_ ? held : std::min(held, prompt_len));
  if (keep == 0 || !engine_.kv_can_keep(seq, keep)) {
    engine_.remove_sequence(seq);
    return;
  }
  add(engine_.park_sequence(seq, keep), std::vector<int32_t>(tokens.begin(), tokens.begin() + keep));
}

int64_t PromptCache::offer(SeqId seq, const std::vector<int32_t>& prompt, int64_t computed) {
  const int64_t keep = usable(std::min({computed, engine_.sequence_length(seq), static_cast<int64_t>(prompt.size())}));
  if (keep == 0 || !engine_.kv_can_keep(seq, keep)) return 0;
  for (const Parked& p : parked_)
    if (common_prefix(p.tokens, prompt, keep) == keep && engine_.kv_can_keep(p.seq, keep)) return keep;
  add(engine_.park_prefix(seq, keep), std::vector<int32_t>(prompt.begin(), prompt.begin() + keep));
  return keep;
}

void PromptCache::add(SeqId seq, std::vector<int32_t> kept) {
  for (size_t i = parked_.size(); i-- > 0;) {
    const std::vector<int32_t>& old = parked_[i].tokens;
    // (Not where sliding-window layers kept only the new one's last window: the old one
    // continues from a point the new one cannot.)
    if (old.size() <= kept.size() && std::equal(old.begin(), old.end(), kept.begin()) &&
        engine_.kv_can_keep(seq, static_cast<int64_t>(old.size())))
      drop(i);
  }
  parked_.push_back({seq, std::move(kept), ++clock_});
}

PromptCache::Taken PromptCache::take(const SequenceParams& params) {
  const std::vector<int32_t>& prompt = params.prompt;
  // At least the last prompt token is computed again: its logits give the first token.
  const int64_t limit = static_cast<int64_t>(prompt.size()) - 1;
  size_t best = parked_.size();
  int64_t best_len = 0;
  for (size_t i = 0; i < parked_.size(); ++i) {
    int64_t len = usable(common_prefix(parked_[i].tokens, prompt, limit));
    if (!engine_.kv_can_keep(parked_[i].seq, len)) len = 0;
    if (len > best_len || (len == best_len && len > 0 && parked_[i].used > parked_[best].used)) {
      best = i;
      best_len = len;
    }
  }
  if (best_len == 0) return {engine_.add_sequence(params), 0};
  parked_[best].used = ++clock_;
  return {engine_.add_sequence(params, parked_[best].seq, best_len), best_len};
}

bool PromptCache::make_room(int64_t blocks) {
  // kv_blocks_parked() == 0: every parked block is a running sequence's too.
  while (engine_.kv_blocks_free() < blocks && !parked_.empty() && engine_.kv_blocks_parked() > 0) {
    // A prefix whose blocks all belong to others frees nothing alone; it goes only when
    // none frees anything (two prefixes sharing their blocks free them together).
    size_t victim = parked_.size();
    bool victim_frees = false;
    for (size_t i = 0; i < parked_.size(); ++i) {
      const bool frees = engine_.kv_blocks_freed_by_removing(parked_[i].seq) > 0;
      if (victim == parked_.size() || frees > victim_frees ||
          (frees == victim_frees && parked_[i].used < parked_[victim].used)) {
        victim = i;
        victim_frees = frees;
      }
    }
    drop(victim);
  }
  return engine_.kv_blocks_free() >= blocks;
}

void PromptCache::drop(size_t i) {
  engine_.remove_sequence(parked_[i].seq);
  parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
}

}  // namespace moeflow::serve
