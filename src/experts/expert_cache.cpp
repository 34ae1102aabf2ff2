#include "experts/expert_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "base/error.h"

namespace moeflow {

namespace {

std::string mib(uint64_t b) {
  char s[64];
  std::snprintf(s, sizeof s, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return s;
}
}  // namespace

// Every count of CacheCounters, for the arithmetic below (peak_bytes is not a count).
template <class F>
void for_each_count(CacheCounters& a, const CacheCounters& b, F f) {
  f(a.hits, b.hits);
  f(a.misses, b.misses);
  f(a.prefetch_hits, b.prefetch_hits);
  f(a.late_prefetches, b.late_prefetches);
  f(a.prefetches_issued, b.prefetches_issued);
  f(a.prefetches_dropped, b.prefetches_dropped);
  f(a.prefetches_cancelled, b.prefetches_cancelled);
  f(a.wasted_prefetches, b.wasted_prefetches);
  f(a.demand_loads, b.demand_loads);
  f(a.evictions, b.evictions);
  f(a.bytes_read, b.bytes_read);
  f(a.stall_seconds, b.stall_seconds);
}

CacheCounters CacheCounters::operator-(const CacheCounters& earlier) const {
  CacheCounters d = *this;
  for_each_count(d, earlier, [](auto& x, const auto& y) { x -= y; });
  return d;
}

CacheCounters& CacheCounters::operator+=(const CacheCounters& more) {
  for_each_count(*this, more, [](auto& x, const auto& y) { x += y; });
  peak_bytes = std::max(peak_bytes, more.peak_bytes);
  return *this;
}

ExpertCache::ExpertCache(const ExpertGeometry& geometry, uint64_t budget_bytes, Transport& transport,
                         ExpertPolicy& policy, ExpertMemory& memory)
    : geometry_(geometry), budget_(budget_bytes), transport_(transport), memory_(memory), policy_(policy),
      entries_(geometry.bytes.size()) {
  const uint64_t min = geometry.min_budget();
  if (budget_bytes < min)
    throw InputError("expert budget " + mib(budget_bytes) + " is below the minimum of " + mib(min) +
                     " (the " + std::to_string(geometry.top_k) +
                     " largest experts of one layer must fit at once); raise --expert-budget");
}

ExpertCache::~ExpertCache() {
  // Copies in flight write into our buffers: cancel the queued ones and wait for the
  // rest before freeing anything.
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.state == State::InFlight && transport_.cancel(key_of(i))) {
      e.state = State::Absent;
      --in_flight_;
    }
  }
  try {
    while (in_flight_ > 0) wait_for_any();
  } catch (...) {
    // A failed read still ended; nothing more will write into the buffers.
  }
  for (size_t i = 0; i < entries_.size(); ++i) memory_.release_expert_buffer(entries_[i].buf, geometry_.bytes_of(key_of(i)));
  for (Spare& sp : spares_) memory_.release_expert_buffer(sp.buf, sp.bytes);
}

void ExpertCache::release_buffer(uint8_t*& buf, uint64_t bytes) {
  if (!buf) return;
  spares_.push_back({buf, bytes});
  spare_bytes_ += bytes;
  buf = nullptr;
}

uint8_t* ExpertCache::acquire_buffer(uint64_t bytes) {
  for (size_t i = 0; i < spares_.size(); ++i)
    if (spares_[i].bytes == bytes) {
      uint8_t* p = spares_[i].buf;
      spares_[i] = spares_.back();
      spares_.pop_back();
      spare_bytes_ -= bytes;
      return p;
    }
  // No spare of this size: give back spares until a new one fits next to them
  // (used_ already counts `bytes`).
  while (!spares_.empty() && used_ + spare_bytes_ > budget_) {
    memory_.release_expert_buffer(spares_.back().buf, spares_.back().bytes);
    spare_bytes_ -= spares_.back().bytes;
    spares_.pop_back();
  }
  return memory_.allocate_expert_buffer(bytes);
}

ExpertKey ExpertCache::key_of(size_t i) const {
  return {static_cast<int32_t>(i / static_cast<size_t>(geometry_.n_expert)),
          static_cast<int32_t>(i % static_cast<size_t>(geometry_.n_expert))};
}

void ExpertCache::begin_layer(int32_t layer, const std::vector<int32_t>& needed) {
  layer_now_ = layer;
  ++epoch_;
  for (int32_t x : needed) at({layer, x}).protect_epoch = epoch_;
  poll();
}

void ExpertCache::poll() {
  done_.clear();
  transport_.collect(done_, false);
  take(done_);
}

void ExpertCache::take(const std::vector<ExpertKey>& done) {
  for (const ExpertKey& k : done) {
    Entry& e = at(k);
    if (e.state != State::InFlight) continue;  // cancelled copies never report
    e.state = State::Resident;
    e.loaded_at = tick_;
    e.last_use = tick_;
    --in_flight_;
    counters_.bytes_read += geometry_.bytes_of(k);
  }
}

void ExpertCache::wait_for_any() {
  const double t0 = transport_.now();
  done_.clear();
  transport_.collect(done_, true);
  counters_.stall_seconds += transport_.now() - t0;
  take(done_);
}

void ExpertCache::evict(size_t i) {
  Entry& e = entries_[i];
  if (e.prefetched) ++counters_.wasted_prefetches;
  release_buffer(e.buf, geometry_.bytes_of(key_of(i)));
  e.state = State::Absent;
  e.prefetched = false;
  e.evict_first = false;
  used_ -= geometry_.bytes_of(key_of(i));
  ++counters_.evictions;
}

bool ExpertCache::make_room(uint64_t bytes, const ExpertKey& incoming, bool demand) {
  while (budget_ - used_ < bytes) {
    // A pipeline slot that has done its work goes first, without asking the policy.
    size_t slot = entries_.size();
    for (size_t i = 0; i < entries_.size() && slot == entries_.size(); ++i)
      if (entries_[i].evict_first && entries_[i].state == State::Resident && entries_[i].pins == 0) slot = i;
    if (slot < entries_.size()) {
      evict(slot);
      continue;
    }
    // Candidates: resident and unpinned; a prefetch spares the experts of the layer
    // computing now and the prefetches of this same plan; a demand spares them only
    // while there is anything else.
    candidates_.clear();
    candidate_index_.clear();
    for (int pass = 0; pass < 2 && candidates_.empty(); ++pass) {
      if (pass == 1 && !demand) break;
      for (size_t i = 0; i < entries_.size(); ++i) {
        const Entry& e = entries_[i];
        if (e.state != State::Resident || e.pins > 0) continue;
        if (pass == 0 && (e.protect_epoch == epoch_ || (e.prefetched && e.prefetch_epoch == epoch_))) continue;
        candidates_.push_back({key_of(i), e.last_use, e.loaded_at, e.uses, e.prefetched});
        candidate_index_.push_back(i);
      }
    }
    if (!candidates_.empty()) {
      const CacheView view{&candidates_, tick_, layer_now_, !demand};
      const size_t pick = policy_.victim(view, incoming);
      if (pick == ExpertPolicy::kDecline && !demand) return false;
      if (pick >= candidates_.size()) throw std::logic_error("policy " + policy_.name() + " chose no valid victim");
      evict(candidate_index_[pick]);
      continue;
    }
    if (!demand) return false;
    // Cancel the lowest-priority prefetch that has not started.
    size_t cancel = entries_.size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (e.state == State::InFlight && !e.demand && (cancel == entries_.size() || e.priority < entries_[cancel].priority))
        cancel = i;
    }
    if (cancel < entries_.size() && cancel_queued(cancel)) continue;
    if (in_flight_ == 0)
      throw std::logic_error("expert cache: no room for " + std::to_string(bytes) + " bytes and nothing to evict");
    wait_for_any();
  }
  return true;
}

bool ExpertCache::cancel_queued(size_t i) {
  if (!transport_.cancel(key_of(i))) return false;
  Entry& e = entries_[i];
  release_buffer(e.buf, geometry_.bytes_of(key_of(i)));
  e.state = State::Absent;
  e.prefetched = false;
  used_ -= geometry_.bytes_of(key_of(i));
  --in_flight_;
  ++counters_.prefetches_cancelled;
  return true;
}

void ExpertCache::cancel_prefetches(const std::vector<ExpertKey>& keep) {
  for (size_t i = 0; i < entries_.size() && in_flight_ > 0; ++i) {
    const Entry& e = entries_[i];
    if (e.state != State::InFlight || e.demand) continue;
    if (std::find(keep.begin(), keep.end(), key_of(i)) == keep.end()) cancel_queued(i);
  }
}

void ExpertCache::start_copy(const ExpertKey& key, double priority, bool demand) {
  Entry& e = at(key);
  const uint64_t bytes = geometry_.bytes_of(key);
  used_ += bytes;
  if (transport_.needs_buffers()) e.buf = acquire_buffer(bytes);
  e.state = State::InFlight;
  e.priority = priority;
  e.demand = demand;
  e.prefetched = !demand;
  e.prefetch_epoch = epoch_;
  counters_.peak_bytes = std::max(counters_.peak_bytes, used_);
  ++in_flight_;
  if (demand) ++counters_.demand_loads;
  else ++counters_.prefetches_issued;
  transport_.submit(key, e.buf, priority);
}

void ExpertCache::prefetch(const ExpertKey& key, double priority) {
  Entry& e = at(key);
  if (e.state == State::Resident) return;
  if (e.state == State::InFlight) {
    if (!e.demand && priority > e.priority) {
      e.priority = priority;
      transport_.reprioritize(key, priority);
    }
    return;
  }
  if (!make_room(geometry_.bytes_of(key), key, false)) {
    ++counters_.prefetches_dropped;
    return;
  }
  start_copy(key, priority, false);
}

void ExpertCache::count_access(Entry& e, bool hit) {
  if (e.counted) {
    e.counted = false;
  } else if (hit) {
    ++counters_.hits;
    if (e.prefetched) ++counters_.prefetch_hits;
  } else {
    ++counters_.misses;
    if (e.state == State::InFlight && e.prefetched) ++counters_.late_prefetches;
  }
  e.prefetched = false;
  e.evict_first = false;
  ++e.uses;
  e.last_use = ++tick_;
}

void ExpertCache::note_served_elsewhere(const ExpertKey& key) {
  if (in_flight_ > 0) poll();
  count_access(at(key), false);
}

const uint8_t* ExpertCache::try_acquire(const ExpertKey& key) {
  if (in_flight_ > 0) poll();
  Entry& e = at(key);
  if (e.state != State::Resident) return nullptr;
  count_access(e, true);
  ++e.pins;
  return e.buf ? e.buf : reinterpret_cast<const uint8_t*>(&e);  // non-null even when simulated
}

void ExpertCache::request(const ExpertKey& key) {
  if (in_flight_ > 0) poll();
  Entry& e = at(key);
  if (e.state == State::Resident || e.counted) return;
  ++counters_.misses;
  if (e.state == State::InFlight) {
    if (e.prefetched) ++counters_.late_prefetches;
    e.prefetched = false;
    e.demand = true;
    e.priority = kDemandPriority;
    transport_.reprioritize(key, kDemandPriority);
  } else {
    make_room(geometry_.bytes_of(key), key, true);
    start_copy(key, kDemandPriority, true);
  }
  e.counted = true;
}

const uint8_t* ExpertCache::acquire(const ExpertKey& key) {
  if (in_flight_ > 0) poll();
  Entry& e = at(key);
  if (e.state != State::Resident) {
    if (!e.counted) request(key);  // counts the miss, starts or promotes the copy
    while (e.state != State::Resident) {
      if (e.state == State::Absent) {  // arrived, then evicted for another demand
        make_room(geometry_.bytes_of(key), key, true);
        start_copy(key, kDemandPriority, true);
      } else {
        wait_for_any();
      }
    }
  }
  count_access(e, true);  // a no-op count when request() counted the miss
  ++e.pins;
  return e.buf ? e.buf : reinterpret_cast<const uint8_t*>(&e);  // non-null even when simulated
}

void ExpertCache::release(const ExpertKey& key) {
  Entry& e = at(key);
  if (e.pins <= 0) throw std::logic_error("expert cache: release of an expert that is not pinned");
  --e.pins;
}

void ExpertCache::retire(const ExpertKey& key, bool evict_first) {
  Entry& e = at(key);
  e.protect_epoch = 0;
  e.evict_first = evict_first;
}

void ExpertCache::wait_for(const ExpertKey& key) {
  while (at(key).state == State::InFlight) wait_for_any();
}

bool ExpertCache::room_for_demand(const ExpertKey& key) const {
  uint64_t room = budget_ - used_;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const bool evictable = e.state == State::Resident && e.pins == 0 && e.protect_epoch != epoch_;
    const bool cancellable = e.state == State::InFlight && !e.demand;
    if (evictable || cancellable) room += geometry_.bytes_of(key_of(i));
  }
  return room >= geometry_.bytes_of(key);
}

size_t ExpertCache::prefetches_in_flight() const {
  if (in_flight_ == 0) return 0;
  size_t n = 0;
  for (const Entry& e : entries_) n += e.state == State::InFlight && !e.demand;
  return n;
}

bool ExpertCache::resident(const ExpertKey& key) const { return at(key).state == State::Resident; }

bool ExpertCache::in_flight(const ExpertKey& key) const { return at(key).state == State::InFlight; }

std::vector<int32_t> ExpertCache::resident_experts(int32_t layer) const {
  std::vector<int32_t> out;
  for (int32_t x = 0; x < geometry_.n_expert; ++x)
    if (resident({layer, x})) out.push_back(x);
  return out;
}

uint64_t parse_budget(const std::string& text, uint64_t total_bytes, const std::string& flag) {
  const std::string where = flag + " '" + text + "'";
  if (text.empty()) throw InputError(where + ": empty");
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    throw InputError(where + ": expected a size like 512MiB, 2GiB or 25%");
  }
  if (!std::isfinite(v) || v < 0) throw InputError(where + ": must be a non-negative size");
  const std::string unit = text.substr(used);
  double bytes = 0;
  if (unit == "%") {
    if (v > 100) throw InputError(where + ": a percentage must be at most 100%");
    bytes = v / 100.0 * static_cast<double>(total_bytes);
  } else {
    static const std::pair<const char*, double> units[] = {
        {"", 1}, {"B", 1}, {"K", 1024.0}, {"KiB", 1024.0}, {"KB", 1e3}, {"M", 1048576.0}, {"MiB", 1048576.0},
        {"MB", 1e6}, {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9}, {"T", 1099511627776.0},
        {"TiB", 1099511627776.0}, {"TB", 1e12}};
    bool found = false;
    for (const auto& [name, mult] : units)
      if (unit == name) {
        bytes = v * mult;
        found = true;
      }
    if (!found) throw InputError(where + ": unknown unit '" + unit + "' (use B, KiB, MiB, GiB, KB, MB, GB or %)");
  }
  if (bytes > 1.8e19) throw InputError(where + ": too large");
  return static_cast<uint64_t>(bytes);
}

}  // namespace moeflow
