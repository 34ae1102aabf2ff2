// The ExpertCache on the simulated transport, checked step by step against counts
// and times worked out by hand (1 copy engine, 100-byte experts at 100 B/s: every
// copy takes exactly one virtual second).
#include <gtest/gtest.h>

#include "experts/expert_cache.h"
#include "experts/simulated_transport.h"
#include "policy/baseline_policies.h"

namespace moeflow {
namespace {

struct Rig {
  ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  std::unique_ptr<ExpertPolicy> policy = make_baseline_policy("lru", g);
  SimulatedTransport link{g, LinkProfile{100.0, 0.0, 1}};
  ExpertCache cache{g, 200, link, *policy};
  void use(int32_t l, int32_t e) {
    cache.acquire({l, e});
    cache.release({l, e});
  }
};

TEST(ExpertCache, LruDemandLoadsByHand) {
  Rig r;
  r.use(0, 0);  // miss, 1 s
  r.use(0, 1);  // miss, 1 s
  r.use(0, 0);  // hit
  r.use(1, 0);  // miss: evicts (0,1), the least recently used
  r.use(0, 1);  // miss: evicts (0,0)
  const CacheCounters& c = r.cache.counters();
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(c.misses, 4u);
  EXPECT_EQ(c.evictions, 2u);
  EXPECT_EQ(c.demand_loads, 4u);
  EXPECT_EQ(c.bytes_read, 400u);
  EXPECT_DOUBLE_EQ(c.stall_seconds, 4.0);
  EXPECT_DOUBLE_EQ(r.link.now(), 4.0);
  EXPECT_TRUE(r.cache.resident({1, 0}));
  EXPECT_TRUE(r.cache.resident({0, 1}));
  EXPECT_FALSE(r.cache.resident({0, 0}));
  EXPECT_DOUBLE_EQ(c.hit_rate(), 0.2);
  EXPECT_LE(c.peak_bytes, 200u);
}

TEST(ExpertCache, PrefetchHitCancelAndWasteByHand) {
  Rig r;
  r.cache.prefetch({0, 2}, 1.0);  // copy 0 -> 1 s
  r.link.advance(2.0);             // compute for 2 s: the prefetch lands meanwhile
  r.use(0, 2);                     // hit, and a prefetch hit
  r.cache.prefetch({0, 3}, 2.0);   // starts at 2 s, lands at 3 s
  r.cache.prefetch({1, 1}, 1.0);   // evicts (0,2) (used, so not wasted); queued behind (0,3)
  r.use(1, 3);                     // demand: no room -> cancels the queued (1,1); waits 2 s
  r.cache.begin_layer(0, {0});     // a new layer: (0,3) is no longer a prefetch of the current plan
  r.use(0, 0);                     // evicts (0,3) (LRU), prefetched and never used: wasted
  const CacheCounters& c = r.cache.counters();
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(c.misses, 2u);
  EXPECT_EQ(c.prefetch_hits, 1u);
  EXPECT_EQ(c.prefetches_issued, 3u);
  EXPECT_EQ(c.prefetches_cancelled, 1u);
  EXPECT_EQ(c.wasted_prefetches, 1u);
  EXPECT_EQ(c.demand_loads, 2u);
  EXPECT_EQ(c.evictions, 2u);
  EXPECT_EQ(c.bytes_read, 400u);
  EXPECT_DOUBLE_EQ(c.stall_seconds, 3.0);
  EXPECT_DOUBLE_EQ(r.link.now(), 5.0);
}

TEST(ExpertCache, DemandPromotesAQueuedPrefetchOverHigherPrefetches) {
  ExpertGeometry g = ExpertGeometry::uniform(1, 4, 1, 100);
  auto policy = make_baseline_policy("lru", g);
  SimulatedTransport link{g, LinkProfile{100.0, 0.0, 1}};
  ExpertCache cache{g, 400, link, *policy};
  cache.prefetch({0, 0}, 1.0);  // running 0..1
  cache.prefetch({0, 1}, 1.0);  // queued
  cache.prefetch({0, 2}, 2.0);  // queued ahead of (0,1)
  cache.acquire({0, 1});        // a late prefetch: promoted past (0,2), runs 1..2
  cache.release({0, 1});
  EXPECT_EQ(cache.counters().misses, 1u);
  EXPECT_EQ(cache.counters().late_prefetches, 1u);
  EXPECT_DOUBLE_EQ(cache.counters().stall_seconds, 2.0);
  EXPECT_TRUE(cache.resident({0, 0}));
  EXPECT_FALSE(cache.resident({0, 2}));
  link.advance(1.0);            // (0,2) lands at 3
  cache.acquire({0, 2});
  cache.release({0, 2});
  EXPECT_EQ(cache.counters().hits, 1u);
  EXPECT_EQ(cache.counters().prefetch_hits, 1u);
  EXPECT_THROW(cache.release({0, 2}), std::logic_error);  // not pinned any more
}

TEST(SimulatedTransport, LatencyPlusBytesOverBandwidthPerEngine) {
  ExpertGeometry g = ExpertGeometry::uniform(1, 4, 1, 1000);
  SimulatedTransport link{g, LinkProfile{1000.0, 0.5, 2}};
  EXPECT_DOUBLE_EQ(link.transfer_seconds({0, 0}), 1.5);
  link.submit({0, 0}, nullptr, 1);
  link.submit({0, 1}, nullptr, 1);
  link.submit({0, 2}, nullptr, 1);  // waits for an engine
  std::vector<ExpertKey> done;
  link.collect(done, true);
  EXPECT_DOUBLE_EQ(link.now(), 1.5);
  EXPECT_EQ(done.size(), 2u);
  done.clear();
  link.collect(done, true);
  EXPECT_DOUBLE_EQ(link.now(), 3.0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0], (ExpertKey{0, 2}));
  EXPECT_EQ(link.bytes_moved(), 3000u);
}

TEST(SimulatedTransport, HigherPriorityStartsFirstAndCancelWorksOnlyWhileQueued) {
  ExpertGeometry g = ExpertGeometry::uniform(1, 4, 1, 100);
  SimulatedTransport link{g, LinkProfile{100.0, 0.0, 1}};
  link.submit({0, 0}, nullptr, 1);  // starts at once
  link.submit({0, 1}, nullptr, 1);
  link.submit({0, 2}, nullptr, 3);
  link.submit({0, 3}, nullptr, 2);
  EXPECT_FALSE(link.cancel({0, 0}));
  EXPECT_TRUE(link.cancel({0, 3}));
  link.reprioritize({0, 1}, 10);
  std::vector<ExpertKey> order;
  while (order.size() < 3) link.collect(order, true);
  EXPECT_EQ(order, (std::vector<ExpertKey>{{0, 0}, {0, 1}, {0, 2}}));
}

// Chunked copies: 100-byte experts at 100 B/s in 25-byte chunks, latency 0.1 s. A
// prefetch of A starts at 0 (bytes move from 0.1 s); at 0.3 s, 20 bytes in, a demand
// for B arrives: A stops at its chunk boundary (25 bytes, 0.35 s), B runs 0.35 to
// 1.45, and A resumes with its 75 bytes, latency again: 1.45 to 2.30. Unchunked, B
// would wait for the whole of A (done at 1.1) and land at 2.2.
TEST(SimulatedTransport, DemandPreemptsAPrefetchAtAChunkBoundary) {
  ExpertGeometry g = ExpertGeometry::uniform(1, 4, 1, 100);
  for (uint64_t chunk : {uint64_t{25}, uint64_t{0}}) {
    SimulatedTransport link{g, LinkProfile{100.0, 0.1, 1, chunk}};
    link.submit({0, 0}, nullptr, 1.0);
    link.advance(0.3);
    link.submit({0, 1}, nullptr, kDemandPriority);
    std::vector<ExpertKey> done;
    link.collect(done, true);
    ASSERT_EQ(done.size(), 1u);
    if (chunk) {
      EXPECT_EQ(done[0], (ExpertKey{0, 1})) << "the demand lands first";
      EXPECT_NEAR(link.now(), 1.45, 1e-12);
      EXPECT_EQ(link.preemptions(), 1u);
    } else {
      EXPECT_EQ(done[0], (ExpertKey{0, 0}));
      EXPECT_NEAR(link.now(), 1.1, 1e-12);
      EXPECT_EQ(link.preemptions(), 0u);
    }
    done.clear();
    link.collect(done, true);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_NEAR(link.now(), chunk ? 2.30 : 2.2, 1e-12);
    EXPECT_EQ(link.bytes_moved(), 200u) << "every byte moved once";
  }
  // A prefetch is never pre-empted by another prefetch, nor by a demand when an engine
  // is free, nor in its last chunk.
  SimulatedTransport link{g, LinkProfile{100.0, 0.0, 1, 25}};
  link.submit({0, 0}, nullptr, 1.0);
  link.submit({0, 1}, nullptr, 5.0);
  link.advance(0.8);  // 80 bytes in: the chunk under way is the last
  link.submit({0, 2}, nullptr, kDemandPriority);
  EXPECT_EQ(link.preemptions(), 0u);
  std::vector<ExpertKey> order;
  while (order.size() < 3) link.collect(order, true);
  EXPECT_EQ(order, (std::vector<ExpertKey>{{0, 0}, {0, 2}, {0, 1}}));
}

// The prediction stream (DuoServe §5.3): 100-byte experts at 100 B/s, no latency. A
// prefetch submitted at 0 under a hold until 0.5 s moves from 0.5 to 1.5. A demand at
// 0.2 s finds the engine taken by the held prefetch, which has not begun: the demand
// gets it at once (0.2 to 1.2), and the prefetch follows (1.2 to 2.2). A demand is
// never held.
TEST(SimulatedTransport, HeldPrefetchesStartAtTheHoldsEndAndYieldToDemands) {
  ExpertGeometry g = ExpertGeometry::uniform(1, 4, 1, 100);
  {
    SimulatedTransport link{g, LinkProfile{100.0, 0.0, 1}};
    link.hold_prefetches(0.5);
    link.submit({0, 0}, nullptr, 1.0);
    std::vector<ExpertKey> done;
    link.collect(done, true);
    EXPECT_DOUBLE_EQ(link.now(), 1.5);
  }
  {
    SimulatedTransport link{g, LinkProfile{100.0, 0.0, 1}};
    link.hold_prefetches(0.5);
    link.submit({0, 0}, nullptr, 1.0);
    link.advance(0.2);
    link.submit({0, 1}, nullptr, kDemandPriority);
    std::vector<ExpertKey> done;
    link.collect(done, true);
    ASSERT_EQ(done, (std::vector<ExpertKey>{{0, 1}}));
    EXPECT_DOUBLE_EQ(link.now(), 1.2);
    done.clear();
    link.collect(done, true);
    ASSERT_EQ(done, (std::vector<ExpertKey>{{0, 0}}));
    EXPECT_DOUBLE_EQ(link.now(), 2.2);
    EXPECT_EQ(link.bytes_moved(), 200u);
  }
  {
    SimulatedTransport link{g, LinkProfile{100.0, 0.0, 1}};
    link.hold_prefetches(0.5);
    link.submit({0, 2}, nullptr, kDemandPriority);
    std::vector<ExpertKey> done;
    link.collect(done, true);
    EXPECT_DOUBLE_EQ(link.now(), 1.0);
  }
}

// In the cache: a demand promoted from a queued prefetch pre-empts the prefetch that
// is copying. 1 s per expert, 4 chunks; prefetch A at 0, prefetch B queued behind it;
// at 0.1 s B is demanded: A yields at 0.25, B lands at 1.25.
TEST(ExpertCache, PromotedDemandPreemptsTheRunningPrefetch) {
  ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  auto policy = make_baseline_policy("lru", g);
  SimulatedTransport link{g, LinkProfile{100.0, 0.0, 1, 25}};
  ExpertCache cache{g, 400, link, *policy};
  cache.prefetch({0, 0}, 1.0);
  cache.prefetch({1, 0}, 1.0);
  link.advance(0.1);
  cache.acquire({1, 0});
  EXPECT_NEAR(link.now(), 1.25, 1e-12);
  cache.release({1, 0});
  EXPECT_EQ(link.preemptions(), 1u);
  EXPECT_EQ(cache.counters().late_prefetches, 1u);
  cache.acquire({0, 0});
  EXPECT_NEAR(link.now(), 2.0, 1e-12) << "A's 75 bytes left";
  cache.release({0, 0});
}

}  // namespace
}  // namespace moeflow
