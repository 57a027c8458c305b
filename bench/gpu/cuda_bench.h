// What the GPU benchmarks share: RAII owners of CUDA memory, an exit on a
// failed CUDA call, and the check that there is a GPU and a loadable
// backend (GPU benchmarks print that nothing was measured and exit 0 on a
// machine without a GPU, so builds without one stay green).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "reshard/cuda.h"

namespace reshard::bench_gpu {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct CudaFree {
  void operator()(void* p) const noexcept { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<void, CudaFree>;

// `bytes` of device memory (at least one byte), every byte set to `fill`.
inline DevicePtr alloc(size_t bytes, int fill) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc");
  check(cudaMemset(p, fill, bytes), "cudaMemset");
  return DevicePtr(p);
}

// -1 when there is a GPU and the cuda backend loads; otherwise the exit
// status for main: 0 without a GPU (nothing measured), 1 when the backend
// cannot be used (the reason on stderr). `name` prefixes the messages.
inline int unavailable(const char* name) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("%s: no GPU (cudaGetDeviceCount), nothing measured\n", name);
    return 0;
  }
  std::string why;
  if (!reshard::cuda_transport_available(&why)) {
    std::fprintf(stderr, "%s: %s\n", name, why.c_str());
    return 1;
  }
  return -1;
}

}  // namespace reshard::bench_gpu
