// The public Engine (include/moeflow/engine.h) over the forward pass, a shared KV
// block pool and, under an expert budget, the offloading objects.
#include "moeflow/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>

#include "backend/backend_factory.h"
#include "base/error.h"
#include "base/hardware_threads.h"
#include "engine/expert_offload.h"
#include "engine/forward_pass.h"
#include "engine/model_loading.h"
#include "engine/tokenizer.h"

namespace moeflow {

struct Engine::Impl {
  // One thread at a time (engine.h): a second caller in step() is told so, where it
  // would otherwise race the first through the KV pool and the forward pass's buffers.
  std::atomic<bool> stepping{false};
  struct Sequence {
    std::vector<int32_t> blocks;
    std::vector<int32_t> sliding;  // the block table of the sliding-window layers' pool (when it exists)
    int64_t length = 0;
    bool parked = false;  // a prefix kept for a later sequence (park_sequence): no step takes it
  };

  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvBlockPool> kv;
  // The sliding-window layers' rows, when kept apart (EngineOptions::swa_full false on
  // a model with such layers): each sequence lets go of the blocks its window has left.
  // As many blocks as kv: a sequence holds a block here only where it holds one there
  // (shared alike), so it never runs out first, and it touches only what it holds at
  // once.
  std::unique_ptr<KvBlockPool> sliding;
  bool swa_full = false;
  std::unique_ptr<ForwardPass> fwd;
  ExpertOffload offload;
  int64_t ctx = 0;
  int n_parallel = 1;
  bool split_invariant = false;
  double load_seconds = 0;
  std::map<SeqId, Sequence> seqs;
  SeqId next_id = 0;
  // The last step: its tokens in the forward pass's order, and where each batch
  // token's logits row is (-1: none kept).
  StepTokens step;
  std::vector<float> logits;
  std::vector<int64_t> logits_row;

  int64_t blocks_for_ctx() const {
    // Divided before it is rounded and checked before it is multiplied: ctx near
    // INT64_MAX, or ctx x n_parallel past it, must not wrap into a small pool.
    const int64_t len = KvBlockPool::kDefaultBlockLen;
    const int64_t per = ctx / len + (ctx % len != 0 ? 1 : 0);
    if (n_parallel > 0 && per > INT32_MAX / n_parallel)
      throw InputError("a KV cache for ctx_size " + std::to_string(ctx) + " x n_parallel " + std::to_string(n_parallel) +
                       " needs more blocks of " + std::to_string(len) + " positions than the pool can index (" +
                       std::to_string(INT32_MAX) + ")");
    return n_parallel * per;
  }

  void make_pools(DType type) {
    sliding.reset();  // the old mappings go before the new ones are made
    kv.reset();
    const int64_t n = blocks_for_ctx();
    // Apart only where both kinds of layer exist (a one-layer gpt-oss slides alone).
    const bool apart = !swa_full && kv_pool_layers(model->config(), KvLayers::Sliding) > 0 &&
                       kv_pool_layers(model->config(), KvLayers::Full) > 0;
    kv = std::make_unique<KvBlockPool>(
        make_kv_pool(*model, *backend, n, type, KvBlockPool::kDefaultBlockLen, apart ? KvLayers::Full : KvLayers::All));
    if (apart)
      sliding = std::make_unique<KvBlockPool>(
          make_kv_pool(*model, *backend, n, type, KvBlockPool::kDefaultBlockLen, KvLayers::Sliding));
  }
  // Table operations on both pools.
  void shrink(Sequence& s, int64_t n_pos) {
    kv->shrink(s.blocks, n_pos);
    if (sliding) sliding->shrink(s.sliding, n_pos);
  }
  void share(Sequence& to, const Sequence& from, int64_t keep) {
    kv->share(to.blocks, from.blocks, kv->blocks_for(keep));
    if (sliding) sliding->share(to.sliding, from.sliding, sliding->blocks_for(keep));
  }
  void release(Sequence& s) {
    kv->release(s.blocks);
    if (sliding) sliding->release(s.sliding);
  }
  // After a step: the sliding rows no later token reads go back. A sequence continued
  // from any whole block of what it holds reads from there back a window less one, so
  // the rows kept reach that far before its last whole block's start.
  void release_behind_window(Sequence& s) {
    if (!sliding) return;
    const int64_t len = sliding->block_len();
    sliding->release_before(s.sliding, s.length / len * len - model->config().sliding_window + 1);
  }
  bool can_keep(const Sequence& s, int64_t keep) const {
    if (!sliding || keep == 0) return true;
    const int64_t first = sliding->first_held(s.sliding);
    return first == 0 || keep - model->config().sliding_window + 1 >= first;
  }
  void check_can_keep(const Sequence& s, SeqId id, int64_t keep, const char* what) const {
    if (!can_keep(s, keep))
      throw InputError(std::string(what) + ": keep " + std::to_string(keep) + " positions of sequence " +
                       std::to_string(id) + ": its sliding-window layers kept only positions from " +
                       std::to_string(sliding->first_held(s.sliding)) + " on, and a continuation from " +
                       std::to_string(keep) + " reads back to " +
                       std::to_string(keep - model->config().sliding_window + 1) +
                       " (EngineOptions::swa_full / --swa-full keeps every position)");
  }

  Sequence& at(SeqId id, const char* what) {
    auto it = seqs.find(id);
    if (it == seqs.end()) throw InputError(std::string(what) + ": no sequence " + std::to_string(id));
    return it->second;
  }
  // A sequence that steps may take (not a parked prefix).
  Sequence& live(SeqId id, const char* what) {
    Sequence& s = at(id, what);
    if (s.parked)
      throw InputError(std::string(what) + ": sequence " + std::to_string(id) +
                       " is a parked prefix (add_sequence(params, parked, keep) continues it)");
    return s;
  }
  Sequence& parked(SeqId id, const char* what) {
    Sequence& s = at(id, what);
    if (!s.parked) throw InputError(std::string(what) + ": sequence " + std::to_string(id) + " is not a parked prefix");
    return s;
  }
  void check_keep(const Sequence& s, SeqId id, int64_t keep, const char* what) const {
    if (keep < 0 || keep > s.length)
      throw InputError(std::string(what) + ": keep " + std::to_string(keep) + " positions of sequence " +
                       std::to_string(id) + ", which holds " + std::to_string(s.length));
  }
  // A prefix shared with a sequence that writes on must end at a block's end.
  void check_whole_blocks(SeqId id, int64_t keep, const char* what, const char* writer) const {
    if (keep % kv->block_len() != 0)
      throw InputError(std::string(what) + ": keep " + std::to_string(keep) + " positions of sequence " +
                       std::to_string(id) + ": not a multiple of the KV block (" + std::to_string(kv->block_len()) +
                       " positions), whose rest " + writer + " would write over");
  }
  // Blocks n more positions of `s` take beyond those it holds.
  int64_t blocks_needed(const Sequence& s, int64_t n) const {
    return kv->blocks_for(s.length + n) - static_cast<int64_t>(s.blocks.size());
  }
  int64_t count(bool parked_ones) const {
    return std::count_if(seqs.begin(), seqs.end(), [&](const auto& kv) { return kv.second.parked == parked_ones; });
  }
};

namespace {

// Whether every product of the model's forward pass runs token by token on `backend`
// (routers always do: moe_layer.h). Offloaded experts take the backend's layout when
// they are read in (experts/expert_store.cpp); resident weights keep the one they were
// placed in.
bool products_per_token(const Model& model, const Backend& backend, bool experts_offloaded) {
  auto per_token = [&](const MatrixRef& m) { return !m.data || backend.products_per_token(m.dtype, m.layout); };
  auto expert_per_token = [&](const StackedExperts& s) {
    if (s.n_expert == 0) return true;
    const RowLayout layout = experts_offloaded ? backend.layout_for(s.first.dtype, s.first.rows, s.first.cols)
                                               : s.first.layout;
    return backend.products_per_token(s.first.dtype, layout);
  };
  auto ffn_per_token = [&](const ExpertMatrices& e) { return per_token(e.gate) && per_token(e.up) && per_token(e.down); };
  const ModelWeights& w = model.weights();
  if (!per_token(w.output)) return false;
  for (const LayerWeights& L : w.layers) {
    for (const MatrixRef* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.mla.wq_a, &L.mla.wq_b, &L.mla.wkv_a})
      if (!per_token(*m)) return false;
    for (const std::vector<MatrixRef>* heads : {&L.mla.k_b, &L.mla.v_b})
      for (const MatrixRef& m : *heads)
        if (!per_token(m)) return false;
    if (!expert_per_token(L.gate_exps) || !expert_per_token(L.up_exps) || !expert_per_token(L.down_exps) ||
        !ffn_per_token(L.shexp) || !ffn_per_token(L.ffn))
      return false;
  }
  return true;
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::open(const EngineOptions& o) {
  auto im = std::make_unique<Impl>();
  if (o.model_path.empty()) throw InputError("no model file given");
  if (o.threads < 0 || o.threads > 256) throw InputError("threads " + std::to_string(o.threads) + ": expected 0 to 256");
  if (o.n_parallel < 1 || o.n_parallel > 4096)
    throw InputError("parallel sequences " + std::to_string(o.n_parallel) + ": expected 1 to 4096");
  if (o.ctx_size < 0) throw InputError("context size " + std::to_string(o.ctx_size) + ": must be >= 0");
  const bool offloaded = o.policy != "all";
  const int threads = o.threads > 0 ? o.threads : hardware_threads();
  BackendOptions bo;
  bo.name = o.backend;
  bo.threads = threads;
  bo.repack = o.repack;
  bo.activations = parse_activation_precision(o.activations);
  if (o.mmap && bo.name != "cpu")
    throw InputError("--mmap computes from the file mapping, in host memory: it cannot run with --backend " + bo.name);
  im->backend = make_backend(bo);
  const auto load_start = std::chrono::steady_clock::now();
  LoadedWeights lw = load_model_and_tokenizer(o.model_path, o.mmap, offloaded, im->backend.get(), threads);
  im->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  im->model = std::move(lw.model);
  im->tokenizer = std::move(lw.tokenizer);
  im->ctx = o.ctx_size > 0 ? o.ctx_size : default_ctx_size(*im->model);
  const DType kv_type = kv_type_from_name(o.kv_type, *im->model);
  im->n_parallel = o.n_parallel;
  im->swa_full = o.swa_full;
  im->make_pools(kv_type);
  im->fwd = std::make_unique<ForwardPass>(*im->model, *im->backend, *im->kv, im->sliding.get());
  OffloadOptions oo;
  oo.budget = o.expert_budget;
  oo.policy = o.policy;
  oo.on_miss = o.on_miss;
  oo.io_threads = o.io_threads;
  oo.policy_state = o.policy_state;
  oo.tasks_path = o.tasks_path;
  oo.emoe_variant = o.emoe_variant;
  oo.emoe_top_l = o.emoe_top_l;
  oo.placer = im->backend.get();
  oo.memory = im->backend.get();
  Backend* backend = im->backend.get();
  oo.make_transport = [backend](const ExpertStore& store, int io_threads) {
    return backend->expert_transport(store, io_threads);
  };
  const Tokenizer* tok = im->tokenizer.get();
  oo.detokenize = [tok](const std::vector<int32_t>& ids) { return tok->decode(ids); };
  im->offload = make_expert_offload(*im->model, oo);
  if (im->offload.active()) im->fwd->set_expert_source(im->offload.source.get());
  // Rerouting makes a token's output depend on what the expert cache holds: no split
  // is promised anything there.
  im->split_invariant = !im->offload.lossy && products_per_token(*im->model, *im->backend, offloaded);
  return std::unique_ptr<Engine>(new Engine(std::move(im)));
}

SeqId Engine::add_sequence(const SequenceParams& p) {
  const SeqId id = impl_->next_id++;
  impl_->seqs[id];
  if (impl_->offload.active())
    impl_->offload.source->begin_request(RequestInfo{id, p.prompt, prompt_embedding(*impl_->model, p.prompt), p.task});
  return id;
}

void Engine::remove_sequence(SeqId id) {
  Impl::Sequence& s = impl_->at(id, "remove_sequence");
  const bool was_parked = s.parked;  // its request ended when it was parked
  impl_->release(s);
  impl_->seqs.erase(id);
  if (impl_->offload.active() && !was_parked) impl_->offload.source->end_request(id);
}

SeqId Engine::park_sequence(SeqId id, int64_t keep) {
  Impl& im = *impl_;
  Impl::Sequence& s = im.live(id, "park_sequence");
  im.check_keep(s, id, keep, "park_sequence");
  im.check_can_keep(s, id, keep, "park_sequence");
  const SeqId parked = im.next_id++;
  Impl::Sequence& p = im.seqs[parked];
  p.blocks = std::move(s.blocks);
  p.sliding = std::move(s.sliding);
  p.length = keep;
  p.parked = true;
  im.shrink(p, keep);
  im.seqs.erase(id);
  if (im.offload.active()) im.offload.source->end_request(id);
  return parked;
}

SeqId Engine::add_sequence(const SequenceParams& params, SeqId parked, int64_t keep) {
  Impl& im = *impl_;
  const Impl::Sequence& p = im.parked(parked, "add_sequence");
  im.check_keep(p, parked, keep, "add_sequence");
  im.check_whole_blocks(parked, keep, "add_sequence", "the new sequence");
  im.check_can_keep(p, parked, keep, "add_sequence");
  const SeqId id = add_sequence(params);
  Impl::Sequence& s = im.seqs.at(id);
  im.share(s, im.seqs.at(parked), keep);
  s.length = keep;
  return id;
}

SeqId Engine::park_prefix(SeqId id, int64_t keep) {
  Impl& im = *impl_;
  const Impl::Sequence& s = im.live(id, "park_prefix");
  im.check_keep(s, id, keep, "park_prefix");
  im.check_whole_blocks(id, keep, "park_prefix", "the running sequence");
  im.check_can_keep(s, id, keep, "park_prefix");
  const SeqId parked = im.next_id++;
  Impl::Sequence& p = im.seqs[parked];
  im.share(p, im.seqs.at(id), keep);
  p.length = keep;
  p.parked = true;
  return parked;
}

bool Engine::kv_can_keep(SeqId id, int64_t keep) const {
  const Impl::Sequence& s = impl_->at(id, "kv_can_keep");
  return keep >= 0 && keep <= s.length && impl_->can_keep(s, keep);
}

int64_t Engine::kv_blocks_freed_by_removing(SeqId id) const {
  return impl_->kv->held_alone(impl_->at(id, "kv_blocks_freed_by_removing").blocks);
}

int64_t Engine::kv_blocks_needed(const std::vector<BatchToken>& batch) const {
  std::map<SeqId, int64_t> added;
  for (const BatchToken& b : batch) ++added[b.seq];
  int64_t need = 0;
  for (const auto& [id, n] : added) need += impl_->blocks_needed(impl_->live(id, "kv_blocks_needed"), n);
  return need;
}

int64_t Engine::kv_blocks_parked() const {
  const Impl& im = *impl_;
  std::vector<int32_t> live(static_cast<size_t>(im.kv->n_blocks()), 0), parked(live.size(), 0);
  for (const auto& [id, s] : im.seqs)
    for (int32_t b : s.blocks) ++(s.parked ? parked : live)[static_cast<size_t>(b)];
  int64_t n = 0;
  for (size_t b = 0; b < live.size(); ++b) n += parked[b] > 0 && live[b] == 0;
  return n;
}

int64_t Engine::sequence_length(SeqId id) const { return impl_->at(id, "sequence_length").length; }
int64_t Engine::n_sequences() const { return impl_->count(false); }
int64_t Engine::n_parked() const { return impl_->count(true); }
bool Engine::split_invariant() const { return impl_->split_invariant; }
double Engine::load_seconds() const { return impl_->load_seconds; }

void Engine::step(const std::vector<BatchToken>& batch) {
  Impl& im = *impl_;
  if (im.stepping.exchange(true, std::memory_order_acquire))
    throw InputError("step: the engine is already stepping on another thread (one thread at a time per Engine)");
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false, std::memory_order_release); }
  } done{im.stepping};
  if (batch.empty()) throw InputError("step: the batch is empty");
  // Group the batch by sequence (in order of first appearance), sequences with one
  // token first (StepTokens' layout), checking every position continues its sequence.
  std::map<SeqId, std::vector<size_t>> by_seq;
  std::vector<SeqId> order;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchToken& b = batch[i];
    Impl::Sequence& s = im.live(b.seq, "step");
    auto [it, fresh] = by_seq.try_emplace(b.seq);
    if (fresh) order.push_back(b.seq);
    const int64_t expect = s.length + static_cast<int64_t>(it->second.size());
    if (b.pos != expect)
      throw InputError("step: batch token " + std::to_string(i) + " of sequence " + std::to_string(b.seq) +
                       " is at position " + std::to_string(b.pos) + ", expected " + std::to_string(expect));
    if (b.token < 0 || b.token >= im.model->config().n_vocab)
      throw InputError("step: batch token " + std::to_string(i) + " has id " + std::to_string(b.token) +
                       ", outside the vocabulary [0, " + std::to_string(im.model->config().n_vocab) + ")");
    it->second.push_back(i);
  }
  int64_t need = 0;
  for (const auto& [id, idx] : by_seq) {
    const Impl::Sequence& s = im.seqs.at(id);
    const int64_t end = s.length + static_cast<int64_t>(idx.size());
    if (end > im.ctx)
      throw InputError("step: sequence " + std::to_string(id) + " would hold " + std::to_string(end) +
                       " positions, the context size is " + std::to_string(im.ctx));
    need += im.blocks_needed(s, static_cast<int64_t>(idx.size()));
  }
  if (need > im.kv->free_blocks())
    throw InputError("step: needs " + std::to_string(need) + " more KV blocks of " +
                     std::to_string(im.kv->block_len()) + " positions, " + std::to_string(im.kv->free_blocks()) +
                     " are free (finish or remove sequences, or raise --parallel / --ctx-size)");
  for (const auto& [id, idx] : by_seq) {
    Impl::Sequence& s = im.seqs.at(id);
    const int64_t end = s.length + static_cast<int64_t>(idx.size());
    im.kv->reserve(s.blocks, end);
    // Never short where kv was not (Impl::sliding).
    if (im.sliding && !im.sliding->reserve(s.sliding, end)) throw std::logic_error("moeflow: sliding KV pool exhausted");
  }
  std::stable_partition(order.begin(), order.end(), [&](SeqId id) { return by_seq[id].size() == 1; });
  StepTokens& st = im.step;
  st.clear();
  im.logits_row.assign(batch.size(), -1);
  std::vector<size_t> batch_of;  // step row -> batch index
  for (SeqId id : order) {
    const Impl::Sequence& s = im.seqs.at(id);
    for (size_t i : by_seq[id]) {
      st.tokens.push_back(batch[i].token);
      st.pos.push_back(batch[i].pos);
      st.requests.push_back(id);
      st.blocks.push_back(s.blocks.data());
      if (im.sliding) st.sliding_blocks.push_back(s.sliding.data());
      batch_of.push_back(i);
    }
    if (by_seq[id].size() == 1) ++st.n_single;
  }
  for (size_t r = 0; r < batch_of.size(); ++r)
    if (batch[batch_of[r]].logits) {
      im.logits_row[batch_of[r]] = static_cast<int64_t>(st.logits_rows.size());
      st.logits_rows.push_back(static_cast<int64_t>(r));
    }
  try {
    im.fwd->run(st, im.logits);
  } catch (...) {
    // A step that fails midway (an expert read, a listener, memory) leaves the
    // sequences as they were: their lengths never moved, the blocks reserved for it go
    // back, and no logits are offered (the previous step's rows were replaced above).
    for (const auto& [id, idx] : by_seq) im.shrink(im.seqs.at(id), im.seqs.at(id).length);
    std::fill(im.logits_row.begin(), im.logits_row.end(), -1);
    im.logits.clear();
    throw;
  }
  for (const auto& [id, idx] : by_seq) {
    Impl::Sequence& s = im.seqs.at(id);
    s.length += static_cast<int64_t>(idx.size());
    im.release_behind_window(s);
  }
}

const float* Engine::logits(size_t i) const {
  const size_t n = impl_->logits_row.size();
  if (i >= n)
    throw InputError(n == 0 ? std::string("logits: no step has left logits (none ran, or the last one failed)")
                            : "logits: batch token " + std::to_string(i) + " is outside the last step's batch of " +
                                  std::to_string(n) + " tokens");
  if (impl_->logits_row[i] < 0)
    throw InputError("logits: batch token " + std::to_string(i) + " of the last step did not ask for logits");
  return impl_->logits.data() + impl_->logits_row[i] * impl_->model->config().n_vocab;
}

int64_t Engine::n_vocab() const { return impl_->model->config().n_vocab; }
int64_t Engine::ctx_size() const { return impl_->ctx; }
void Engine::resize_context(int64_t ctx) {
  Impl& im = *impl_;
  if (!im.seqs.empty()) throw InputError("resize_context: sequences are running or parked");
  if (ctx < 1) throw InputError("context size " + std::to_string(ctx) + ": must be >= 1");
  const int64_t old_ctx = im.ctx;
  const DType type = im.kv->type();
  im.ctx = ctx;
  try {
    im.make_pools(type);
  } catch (...) {
    // Refused (too large to map or to index): the engine keeps its old context.
    im.ctx = old_ctx;
    im.make_pools(type);
    im.fwd->set_kv(*im.kv, im.sliding.get());
    throw;
  }
  im.fwd->set_kv(*im.kv, im.sliding.get());
}

std::string Engine::kv_type() const { return dtype_name(impl_->kv->type()); }

int64_t Engine::kv_block_len() const { return impl_->kv->block_len(); }
int64_t Engine::kv_blocks_total() const { return impl_->kv->n_blocks(); }
int64_t Engine::kv_blocks_free() const { return impl_->kv->free_blocks(); }
uint64_t Engine::kv_bytes() const { return impl_->kv->bytes() + (impl_->sliding ? impl_->sliding->bytes() : 0); }
uint64_t Engine::kv_bytes_touched() const {
  const auto touched = [](const KvBlockPool& p) { return p.block_bytes() * static_cast<uint64_t>(p.peak_used_blocks()); };
  return touched(*impl_->kv) + (impl_->sliding ? touched(*impl_->sliding) : 0);
}

std::vector<int32_t> Engine::tokenize(const std::string& text, bool add_bos) const {
  return impl_->tokenizer->encode(text, add_bos);
}
std::string Engine::detokenize(const std::vector<int32_t>& ids) const { return impl_->tokenizer->decode(ids); }
bool Engine::add_bos_default() const { return impl_->tokenizer->add_bos_default(); }
bool Engine::is_end_of_generation(int32_t t) const { return impl_->tokenizer->is_end_of_generation(t); }

bool Engine::offloaded() const { return impl_->offload.active(); }
bool Engine::lossy() const { return impl_->offload.lossy; }

ExpertCacheStats Engine::cache_stats() const {
  ExpertCacheStats s;
  if (!offloaded()) return s;
  const CacheCounters& c = impl_->offload.cache->counters();
  s.hits = c.hits;
  s.misses = c.misses;
  s.prefetches_issued = c.prefetches_issued;
  s.prefetch_hits = c.prefetch_hits;
  s.evictions = c.evictions;
  s.bytes_read = c.bytes_read;
  s.stall_seconds = c.stall_seconds;
  s.budget_bytes = impl_->offload.cache->budget_bytes();
  s.expert_bytes_total = impl_->offload.store->geometry().total_bytes();
  s.rerouted_slots = impl_->offload.source->rerouted_slots();
  return s;
}

void Engine::save_policy_state(const std::string& path) const { impl_->offload.save_state(path); }

const Model& Engine::model() const { return *impl_->model; }
const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
ThreadPool& Engine::thread_pool() { return *impl_->backend->thread_pool(); }
Backend& Engine::backend() { return *impl_->backend; }
ExpertOffload& Engine::offload() { return impl_->offload; }
void Engine::add_listener(ForwardListener* l) {
  if (!l) throw InputError("add_listener: a null listener");
  impl_->fwd->add_listener(l);
}

}  // namespace moeflow
