// Anonymous memory for weights the kernels stream through, in huge pages where the
// kernel grants them (madvise: advice only). With 4 KiB pages the hardware prefetcher
// stops at every page boundary and every page costs a TLB entry; the resident model
// copy and the kernel benchmark both read their weights from here, so the benchmark
// measures what decoding sees.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace moeflow {

class AnonMemory {
 public:
  // Null when the system refuses the mapping.
  static std::unique_ptr<AnonMemory> allocate(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return std::unique_ptr<AnonMemory>(new AnonMemory(p, bytes));
  }
  ~AnonMemory() { munmap(p_, n_); }
  AnonMemory(const AnonMemory&) = delete;
  AnonMemory& operator=(const AnonMemory&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(p_); }
  size_t size() const { return n_; }

 private:
  AnonMemory(void* p, size_t n) : p_(p), n_(n) {}
  void* p_;
  size_t n_;
};

}  // namespace moeflow
