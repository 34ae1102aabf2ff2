// Backends by name, as the flags and the engine's options give them: "cpu", or "cuda"
// / "cuda:N" (GPU N) in a build with CUDA.
#pragma once
#include <memory>
#include <string>

#include "backend/activation_precision.h"
#include "backend/backend.h"

namespace moeflow {

struct BackendOptions {
  std::string name = "cpu";
  int threads = 1;              // CPU threads (the CPU backend's pool; a GPU backend's host share)
  bool repack = true;           // CPU: rows interleaved in fours on VNNI CPUs
  ActivationPrecision activations = ActivationPrecision::Int16;  // CPU, and a GPU backend's host share
};

// Whether this build has the CUDA backend (configured with CUDA found).
bool cuda_backend_built();

// Throws InputError for an unknown name, "cuda" in a build without it, or a GPU that
// is not there.
std::unique_ptr<Backend> make_backend(const BackendOptions& o);

}  // namespace moeflow
