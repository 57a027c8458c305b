// Internal: the source side of block scales (reshard/block_scales.h) for
// the engine. Before a plan with block scales executes, each source shard
// of a scaled tensor on this process's devices is quantised on the host
// into a scratch of its own size and dtype (each q widened back, exactly),
// and the scales of its blocks into a scratch that serves as the scale
// tensor's source buffer. The execution then reads those scratches in place
// of the caller's source buffers: the ordinary cast to the fp8 destination
// reproduces each q bit for bit, so the copy paths know nothing of scales.
//
// The scratch is kept by the schedule (Schedule::scaled_sources), so a
// cached schedule's later executions quantise into the memory of the first
// (no allocation, no page faults); an uncached schedule's goes with it. The
// shards are cut into parts of whole blocks (quantise_parts) that run on
// the engine's threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "reshard/buffers.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

namespace reshard::engine_detail {

class WorkerPool;

// Elements per quantise_parts part: a part's source and output stay in a
// core's cache between the amax pass and the quantising pass.
inline constexpr int64_t kQuantisePartElements = int64_t{1} << 17;

class ScaledSources {
 public:
  // Whether any tensor of `plan` has block scales.
  static bool any(const Plan& plan);
  // Throws kUnsupported when the plan has block scales and the transport's
  // memory is not host memory (the CUDA path does not compute scales):
  // checked by every rank before anything else.
  static void check_transport(const Plan& plan, const TransportInfo& info);
  // The source bytes of the scaled tensors' entries on `process` (every
  // entry with kAllProcesses) in `buffers`: what prepare() reads.
  static int64_t source_bytes(const Plan& plan, int32_t process,
                              std::span<const TensorBuffers> buffers);

  // `buffers` when the plan has no block scales. Otherwise a list in which
  // the source buffers of every scaled tensor's entries on `process` (every
  // entry with kAllProcesses) are their quantised scratches and every scale
  // tensor's source list holds its computed scales (null, 0 bytes for
  // entries elsewhere); valid while this object lives and until the next
  // call. The parts run on up to `threads` threads of `pool` (null: the
  // calling thread). `buffers` must have passed
  // exec_detail::validate_buffers, and the transport check_transport.
  std::span<const TensorBuffers> prepare(const Plan& plan, int32_t process,
                                         std::span<const TensorBuffers> buffers,
                                         const TransportInfo& info, WorkerPool* pool = nullptr,
                                         int threads = 1);

  // Bytes of scratch held (kept between calls).
  size_t capacity() const { return capacity_; }

 private:
  std::vector<TensorBuffers> buffers_;
  // One allocation for every shard's values and scales, kept while large
  // enough.
  std::unique_ptr<std::byte[]> memory_;
  size_t capacity_ = 0;
};

}  // namespace reshard::engine_detail
