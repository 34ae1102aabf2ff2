// Memory a backend hands out for weights and KV blocks: host memory for the CPU
// backend, device memory for a GPU one. The model and KV stages hold it through this
// interface and never ask where it lives.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/anon_memory.h"

namespace moeflow {

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

// Host memory: an anonymous mapping in huge pages where the kernel grants them
// (tensor/anon_memory.h says why). Null when the system refuses it.
inline std::unique_ptr<DeviceBuffer> allocate_host_buffer(size_t bytes) {
  class HostBuffer final : public DeviceBuffer {
   public:
    explicit HostBuffer(std::unique_ptr<AnonMemory> m) : m_(std::move(m)) {}
    uint8_t* data() const override { return m_->data(); }
    size_t size() const override { return m_->size(); }

   private:
    std::unique_ptr<AnonMemory> m_;
  };
  std::unique_ptr<AnonMemory> m = AnonMemory::allocate(bytes);
  if (!m) return nullptr;
  return std::make_unique<HostBuffer>(std::move(m));
}

}  // namespace moeflow
