// Fast-tier residency of experts under a byte budget (DESIGN.md, "Units and names").
//
// Entries are absent, in flight (queued or being copied by the Transport) or resident.
// Resident entries are pinned while an expert computes and can only be evicted when
// unpinned. Space is reserved when a copy is submitted, so bytes in flight count
// against the budget and the budget is never exceeded, not even transiently.
//
// Demand loads outrank every prefetch: a demand for an expert whose prefetch is still
// queued promotes it, and when a demand needs room and nothing resident can go, queued
// prefetches are cancelled before the cache waits for copies in flight.
//
// Only one thread uses a cache (the engine's or the simulator's); the Transport may
// use its own threads behind it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_key.h"
#include "experts/expert_memory.h"
#include "experts/transport.h"
#include "experts/expert_policy.h"

namespace moeflow {

struct CacheCounters {
  uint64_t hits = 0;                  // acquires that found the expert resident
  uint64_t misses = 0;                // acquires that had to wait for it
  uint64_t prefetch_hits = 0;         // hits on an expert fetched ahead and not used before
  uint64_t late_prefetches = 0;       // misses on an expert whose prefetch was still in flight
  uint64_t prefetches_issued = 0;
  uint64_t prefetches_dropped = 0;    // not issued: no room without evicting protected experts
  uint64_t prefetches_cancelled = 0;  // dequeued before their copy started
  uint64_t wasted_prefetches = 0;     // fetched ahead and evicted unused
  uint64_t demand_loads = 0;
  uint64_t evictions = 0;
  uint64_t bytes_read = 0;            // bytes copied into the fast tier
  uint64_t peak_bytes = 0;            // most bytes reserved at once (resident + in flight)
  double stall_seconds = 0;           // time spent waiting for copies

  // Counts of a span of a run: later - earlier (peak_bytes: the later value).
  CacheCounters operator-(const CacheCounters& earlier) const;
  CacheCounters& operator+=(const CacheCounters& more);

  double hit_rate() const { return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0; }
  double prefetch_hit_rate() const {
    return prefetches_issued ? static_cast<double>(prefetch_hits) / static_cast<double>(prefetches_issued) : 0;
  }
};

// Priority of a demand load: above every prefetch a policy can ask for.
constexpr double kDemandPriority = 1e300;

class ExpertCache {
 public:
  // Throws InputError if budget_bytes is below geometry.min_budget(). Expert buffers
  // come from `memory` (the backend's fast tier; must outlive the cache).
  ExpertCache(const ExpertGeometry& geometry, uint64_t budget_bytes, Transport& transport, ExpertPolicy& policy,
              ExpertMemory& memory = host_expert_memory());
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // Starts a layer: its needed experts become protected (a prefetch never evicts
  // them) and the policy's view of "now" moves to this layer.
  void begin_layer(int32_t layer, const std::vector<int32_t>& needed);

  // Fetch ahead. Ignored if the expert is resident or in flight (the priority of a
  // queued copy is updated), or if there is no room without evicting a pinned,
  // protected or just-prefetched expert.
  void prefetch(const ExpertKey& key, double priority);
  // If resident: pins it, counts a hit, returns its buffer (non-null). Otherwise
  // returns null and counts nothing.
  const uint8_t* try_acquire(const ExpertKey& key);
  // Demand: counts a miss and starts loading now if not resident (promoting a queued
  // prefetch); a later acquire() of the key does not count again.
  void request(const ExpertKey& key);
  // Pins and returns the expert's buffer, waiting for its copy if needed (a non-null
  // placeholder with a simulated transport). Counts a hit or a miss unless request() already did.
  const uint8_t* acquire(const ExpertKey& key);
  void release(const ExpertKey& key);
  // The layer computing now is done with `key`: a demand of this layer may evict it
  // (it stays resident otherwise). The prefill pipeline retires each expert after
  // computing it, so that two slots suffice even at the minimum budget. With
  // `evict_first`, the expert goes before any other when room is needed (until it is
  // used again): the pipeline's streamed experts pass through its two slots instead
  // of displacing what the cache holds for later layers and for decode.
  void retire(const ExpertKey& key, bool evict_first = false);
  // Cancels every queued prefetch that has not started, except those in `keep`: the
  // prefill pipeline owns the link, and stale decode guesses left in the queue would
  // otherwise start whenever its one loading slot is between copies.
  void cancel_prefetches(const std::vector<ExpertKey>& keep);
  // An access served from another tier without loading (--on-miss host-compute): a
  // miss, and a use for the policy's recency and frequency.
  void note_served_elsewhere(const ExpertKey& key);
  // Waits until `key`'s copy, if one is in flight, has landed (pins and counts nothing).
  void wait_for(const ExpertKey& key);

  // Whether a demand for `key` could start without evicting another expert of the
  // layer computing now (free bytes, evictable experts, or cancellable prefetches).
  bool room_for_demand(const ExpertKey& key) const;
  bool resident(const ExpertKey& key) const;
  bool in_flight(const ExpertKey& key) const;
  // Copies queued or running (demand loads and prefetches).
  size_t copies_in_flight() const { return in_flight_; }
  // Prefetches among them (copies no demand waits for yet).
  size_t prefetches_in_flight() const;
  // Resident experts of a layer (for rerouting), ascending ids.
  std::vector<int32_t> resident_experts(int32_t layer) const;
  // Takes in every finished copy without waiting.
  void poll();

  const CacheCounters& counters() const { return counters_; }
  uint64_t budget_bytes() const { return budget_; }
  uint64_t used_bytes() const { return used_; }
  const ExpertGeometry& geometry() const { return geometry_; }
  ExpertPolicy& policy() { return policy_; }
  Transport& transport() { return transport_; }

 private:
  enum class State : uint8_t { Absent, InFlight, Resident };
  struct Entry {
    State state = State::Absent;
    int32_t pins = 0;
    bool prefetched = false;   // the current copy was a prefetch not yet used
    bool demand = false;       // a demand is waiting for the in-flight copy
    bool counted = false;      // request() counted this access already
    bool evict_first = false;  // retired from the prefill pipeline's slots
    uint64_t last_use = 0, loaded_at = 0, uses = 0;
    uint64_t protect_epoch = 0, prefetch_epoch = 0;
    double priority = 0;
    uint8_t* buf = nullptr;
  };

  Entry& at(const ExpertKey& k) { return entries_[static_cast<size_t>(geometry_.index(k))]; }
  const Entry& at(const ExpertKey& k) const { return entries_[static_cast<size_t>(geometry_.index(k))]; }
  ExpertKey key_of(size_t i) const;
  // Frees room for `bytes`. A demand may evict protected experts, cancel queued
  // prefetches and wait; a prefetch may not (returns false instead).
  bool make_room(uint64_t bytes, const ExpertKey& incoming, bool demand);
  void start_copy(const ExpertKey& key, double priority, bool demand);
  // Drops the queued copy of entry i (a prefetch); false if it has started.
  bool cancel_queued(size_t i);
  void evict(size_t index);
  // Expert buffers are recycled: an evicted or cancelled copy's buffer waits in
  // spares_ for the next copy of the same size. A fresh mapping costs a page fault
  // and a zeroed page per 4 KiB (~1300 for a 5 MiB expert) and munmap a TLB
  // shootdown; in the offloaded decode profile those were the largest costs outside
  // the reads. Resident, in-flight and spare bytes together stay within the budget.
  void release_buffer(uint8_t*& buf, uint64_t bytes);
  uint8_t* acquire_buffer(uint64_t bytes);  // REQUIRES used_ already counts bytes
  void take(const std::vector<ExpertKey>& done);
  void wait_for_any();
  void count_access(Entry& e, bool hit);

  const ExpertGeometry& geometry_;
  uint64_t budget_;
  Transport& transport_;
  ExpertMemory& memory_;
  ExpertPolicy& policy_;
  std::vector<Entry> entries_;
  uint64_t used_ = 0;
  uint64_t tick_ = 0, epoch_ = 1;  // entries start at epoch 0: never protected
  int32_t layer_now_ = 0;
  size_t in_flight_ = 0;
  CacheCounters counters_;
  struct Spare {
    uint8_t* buf;
    uint64_t bytes;
  };
  std::vector<Spare> spares_;
  uint64_t spare_bytes_ = 0;
  std::vector<CacheEntryView> candidates_;
  std::vector<size_t> candidate_index_;
  std::vector<ExpertKey> done_;
};

// Parses "512MiB", "2GiB", "1.5GB", "123456" (bytes) or "25%" (of `total_bytes`).
// Throws InputError naming `flag` (the option the text came from) and the bad text.
uint64_t parse_budget(const std::string& text, uint64_t total_bytes, const std::string& flag = "--expert-budget");

}  // namespace moeflow
