// The per-GPU state both CUDA transports share: the stream all work for the
// GPU is ordered on, the descriptor buffers of the fused kernels, staging
// allocation, peer access between the GPUs in use and pointer checks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "copy_plan.h"
#include "cuda_util.h"
#include "launch_cache.h"
#include "reshard/cuda.h"
#include "reshard/transport.h"

namespace reshard::cuda_backend {

// One GPU.
class DeviceContext {
 public:
  // `stream` null: the context creates a blocking stream.
  DeviceContext(int ordinal, cudaStream_t stream);
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }

  // Enqueues `launches` (copy_plan.h) on the stream. Descriptor buffers are
  // reused once the kernel that read them completed; waiting for one is
  // bounded by `deadline` (kTimeout). With `ops` (the call the launches were
  // planned from, and its key: Transport::run_keyed_copies, 0 for none),
  // the launches and their descriptors, kept in device memory, are
  // remembered for run_cached when they fit the cache.
  void enqueue(const std::vector<Launch>& launches, Clock::time_point deadline,
               std::span<const CopyOp> ops = {}, uint64_t key = 0);
  // Enqueues the launches remembered for an earlier call with the same key
  // (nonzero), or without a key the same ops (launch_cache.h): true when
  // there was one. A repeated call, e.g. the same plan executed again on
  // the same buffers, then skips planning and the descriptor upload.
  bool run_cached(std::span<const CopyOp> ops, uint64_t key = 0);

  // Stream-ordered device memory (cudaMallocAsync where the device has
  // memory pools), freed in stream order by the block's destructor.
  std::unique_ptr<StagingBlock> allocate(int64_t bytes);

  // Records an event of everything enqueued so far.
  EventPtr record();

 private:
  struct Slot {
    PinnedPtr host;
    DevicePtr device;  // only for uncached launches (a cache entry has its own)
    size_t host_capacity = 0;
    size_t device_capacity = 0;
    EventPtr done;
    bool used = false;
  };
  // A slot whose last use completed (next_slot_ moves past it).
  Slot& acquire(Clock::time_point deadline);
  // A free slot of at least d.bytes whose pinned memory holds the launches'
  // descriptors as laid out by d, and device memory as large where
  // `device` (the uncached path, whose kernels read the slot's copy).
  Slot& stage(const std::vector<Launch>& launches, const Descriptors& d, Clock::time_point deadline,
              bool device);
  // Enqueues every launch of d reading its descriptors at `device`.
  void launch_all(const void* device, const Descriptors& d);
  // Launches remembered by enqueue (launch_cache.h).
  struct Cached {
    DevicePtr descriptors;  // every launch's works and tile starts
    Descriptors layout;
  };
  // Uploads the descriptors into a new cache entry and enqueues the
  // launches from there; false (nothing done) when they exceed the cache.
  bool remember(std::span<const CopyOp> ops, uint64_t key, const std::vector<Launch>& launches,
                const Descriptors& d, Clock::time_point deadline);

  int ordinal_;
  StreamPtr owned_;
  cudaStream_t stream_;
  int max_blocks_ = 0;
  bool pools_ = false;
  bool pageable_access_ = false;
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t next_slot_ = 0;
  LaunchCache<Cached> cache_;

  friend class DeviceSet;
};

// The GPUs a transport uses, created on first use, with peer access enabled
// between them where possible.
class DeviceSet {
 public:
  explicit DeviceSet(const CudaStreamOptions& options);

  // The context of `ordinal` (kInvalidArgument when no such device).
  DeviceContext& get(int ordinal);
  const std::map<int, std::unique_ptr<DeviceContext>>& contexts() const { return contexts_; }

  // Checks the pointers (unless disabled), plans and enqueues the copies;
  // a call found in the launch cache (by `key` when nonzero,
  // Transport::run_keyed_copies) is enqueued as remembered.
  void run_copies(int ordinal, std::span<const CopyOp> ops, uint64_t key = 0);

  // Every stream waits for the work enqueued so far on every other stream
  // (Transport::order_streams); nothing with one GPU.
  void order_streams();

  // Waits until all work enqueued so far completed or `deadline` passed
  // (false). `poll` runs between queries and may throw (NCCL errors).
  bool wait_all(Clock::time_point deadline, const std::function<void()>& poll = {});

  // Whether the transport should wait in finish().
  bool wait() const { return options_.wait; }
  double timeout_seconds() const { return options_.timeout_seconds; }

  // Throws unless the memory at `p` can be addressed from `ordinal`;
  // `what` names the pointer in the message.
  void check_pointer(int ordinal, const void* p, const std::string& what);

 private:
  bool peer(int from, int to);

  CudaStreamOptions options_;
  int device_count_ = 0;
  std::map<int, std::unique_ptr<DeviceContext>> contexts_;
  std::map<std::pair<int, int>, bool> peers_;
  std::map<std::pair<int, const void*>, bool> checked_;  // pointers found addressable
  // Per ordinal: device allocations [start, end) found addressable.
  std::map<int, std::map<uintptr_t, uintptr_t>> checked_ranges_;
  // The allocations the last checks fell in, tried first: a call's pieces
  // mostly alternate between a few shards and staging buffers.
  struct RecentRange {
    int ordinal = -1;
    uintptr_t lo = 0;
    uintptr_t hi = 0;
  };
  RecentRange recent_[4];
  size_t recent_next_ = 0;
};

}  // namespace reshard::cuda_backend
