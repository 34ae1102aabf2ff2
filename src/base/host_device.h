// Small functions that the CUDA kernels share with the CPU code (format facts such as
// a k-quant's scale packing): host and device functions under nvcc, plain inline
// functions otherwise.
#pragma once

#if defined(__CUDACC__)
#define MOEFLOW_HD __host__ __device__ inline
#else
#define MOEFLOW_HD inline
#endif
