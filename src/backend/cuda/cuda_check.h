// CUDA runtime errors as exceptions naming the call and where it was made.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#define CUDA_CHECK(call)                                                                                      \
  do {                                                                                                        \
    const cudaError_t moeflow_cuda_err = (call);                                                              \
    if (moeflow_cuda_err != cudaSuccess)                                                                      \
      throw std::runtime_error(std::string("CUDA: ") + #call + " failed at " + __FILE__ + ":" +              \
                               std::to_string(__LINE__) + ": " + cudaGetErrorString(moeflow_cuda_err));      \
  } while (0)
