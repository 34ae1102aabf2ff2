#include "experts/expert_memory.h"

#include <sys/mman.h>

#include <new>

namespace moeflow {

namespace {

class HostExpertMemory final : public ExpertMemory {
 public:
  uint8_t* allocate_expert_buffer(uint64_t bytes) override {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<uint8_t*>(p);
  }
  void release_expert_buffer(uint8_t* p, uint64_t bytes) override {
    if (p) ::munmap(p, bytes);
  }
};

}  // namespace

ExpertMemory& host_expert_memory() {
  static HostExpertMemory m;
  return m;
}

}  // namespace moeflow
