#include "backend/backend_factory.h"

#include <cstdlib>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#ifdef MOEFLOW_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace moeflow {

bool cuda_backend_built() {
#ifdef MOEFLOW_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
  if (o.name == "cpu") return std::make_unique<CpuBackend>(o.threads, o.repack, o.activations);
  if (o.name == "cuda" || o.name.rfind("cuda:", 0) == 0) {
    int device = 0;
    if (o.name.size() > 5) {
      char* end = nullptr;
      const long d = std::strtol(o.name.c_str() + 5, &end, 10);
      if (*end != '\0' || d < 0 || d > 1024) throw InputError("--backend '" + o.name + "': expected cuda:N, N a GPU number");
      device = static_cast<int>(d);
    }
#ifdef MOEFLOW_HAVE_CUDA
    return std::make_unique<CudaBackend>(device, o.threads, o.activations);
#else
    (void)device;
    throw InputError("--backend " + o.name + ": this build has no CUDA backend (rebuild where the CUDA toolkit is "
                     "installed: cmake finds nvcc)");
#endif
  }
  throw InputError("--backend '" + o.name + "': expected cpu or cuda[:N]");
}

}  // namespace moeflow
