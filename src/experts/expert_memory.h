// Where the expert cache's buffers come from: the fast tier's memory (host RAM for the
// CPU backend, device memory for a GPU one). The backend provides it; the cache asks
// for one buffer per resident expert and gives it back on eviction, so what it holds
// never exceeds the budget.
#pragma once
#include <cstdint>

namespace moeflow {

class ExpertMemory {
 public:
  virtual ~ExpertMemory() = default;
  // A buffer of `bytes`, aligned for O_DIRECT reads (4 KiB); throws std::bad_alloc.
  virtual uint8_t* allocate_expert_buffer(uint64_t bytes) = 0;
  virtual void release_expert_buffer(uint8_t* p, uint64_t bytes) = 0;
};

// Host memory straight from mmap, back to the system with munmap: malloc would keep
// freed chunks in its heap (its mmap threshold grows with every large free), and the
// process would hold more than the budget after churn.
ExpertMemory& host_expert_memory();

}  // namespace moeflow
