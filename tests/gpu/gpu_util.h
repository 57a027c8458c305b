// Test support for tests that need a GPU: the skip when there is none, and
// device buffers (RAII) mirroring host buffers.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace reshard::gpu_testing {

// Number of visible GPUs; 0 (and `why`) when there is none or no driver.
inline int gpu_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *why = std::string("no GPU: cudaGetDeviceCount failed with ") + cudaGetErrorName(e) + " (" +
           cudaGetErrorString(e) + ")";
    return 0;
  }
  if (n == 0) *why = "no GPU: cudaGetDeviceCount found none";
  return n;
}

// Skips the current test, with the reason, on a machine without a GPU.
#define RESHARD_REQUIRE_GPU()                                                               \
  do {                                                                                      \
    std::string reshard_why_;                                                               \
    if (::reshard::gpu_testing::gpu_count(&reshard_why_) == 0) {                            \
      GTEST_SKIP() << reshard_why_ << " (scripts/gpu-check.sh runs this on a GPU machine)"; \
    }                                                                                       \
  } while (0)

#define RESHARD_CUDA_OK(call)                                    \
  do {                                                           \
    const cudaError_t reshard_status_ = (call);                  \
    ASSERT_EQ(reshard_status_, cudaSuccess)                      \
        << #call << ": " << cudaGetErrorString(reshard_status_); \
  } while (0)

struct CudaFree {
  void operator()(void* p) const noexcept { cudaFree(p); }
};

// Device memory of `bytes` bytes starting `shift` bytes past a 256-byte
// aligned allocation (so misaligned device pointers are tested too).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int64_t bytes, int shift, int ordinal = 0) : bytes_(bytes), shift_(shift) {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(ordinal);
    void* p = nullptr;
    if (cudaMalloc(&p, static_cast<size_t>(bytes + shift + 16)) == cudaSuccess) base_.reset(p);
    cudaSetDevice(previous);
  }
  bool ok() const { return base_ != nullptr; }
  std::byte* data() const { return static_cast<std::byte*>(base_.get()) + shift_; }
  int64_t bytes() const { return bytes_; }
  void upload(const void* host) const {
    if (bytes_ > 0) cudaMemcpy(data(), host, static_cast<size_t>(bytes_), cudaMemcpyHostToDevice);
  }
  std::vector<std::byte> download() const {
    std::vector<std::byte> out(static_cast<size_t>(bytes_));
    if (bytes_ > 0)
      cudaMemcpy(out.data(), data(), static_cast<size_t>(bytes_), cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  std::unique_ptr<void, CudaFree> base_;
  int64_t bytes_ = 0;
  int shift_ = 0;
};

}  // namespace reshard::gpu_testing
