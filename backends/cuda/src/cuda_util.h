// Small RAII owners and error checks for the CUDA runtime: every stream,
// event and allocation of the backend lives in one of these.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "reshard/error.h"
#include "reshard/wait.h"

namespace reshard::cuda_backend {

using Clock = std::chrono::steady_clock;

// Throws reshard::Error for a failed CUDA call: kOutOfMemory for allocation
// failures, kUnsupported when there is no usable driver or device,
// kTransport otherwise; the message names the call and CUDA's error.
[[noreturn]] void cuda_fail(cudaError_t e, const std::string& what);

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cuda_fail(e, what);
}

// Makes `ordinal` the calling thread's current device; restores the
// previous one on destruction, so callers' device selection is untouched.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

struct StreamDeleter {
  void operator()(CUstream_st* s) const noexcept { cudaStreamDestroy(s); }
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;

struct EventDeleter {
  void operator()(CUevent_st* e) const noexcept { cudaEventDestroy(e); }
};
using EventPtr = std::unique_ptr<CUevent_st, EventDeleter>;

struct DeviceFree {
  int ordinal = 0;
  void operator()(void* p) const noexcept;
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;

struct PinnedFree {
  void operator()(void* p) const noexcept { cudaFreeHost(p); }
};
using PinnedPtr = std::unique_ptr<void, PinnedFree>;

// A blocking stream (ordered with the legacy default stream) on `ordinal`.
StreamPtr make_stream(int ordinal);
// An event without timing on `ordinal`.
EventPtr make_event(int ordinal);
DevicePtr device_alloc(int ordinal, size_t bytes);
PinnedPtr pinned_alloc(size_t bytes);

}  // namespace reshard::cuda_backend
