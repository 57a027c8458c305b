// Internal: the source side of block scales (reshard/block_scales.h) for
// the engine, cast on send. Before a plan with block scales executes, the
// scales of each source shard of a scaled tensor on this process's devices
// are computed on the host (block_scales_part: one pass over the shard)
// into a scratch that serves as the scale tensor's source buffer. The
// values are not copied: whatever reads a scaled tensor's source (packing
// a message, a local copy) quantises it straight to fp8 with those scales
// (quantise_copy), so the source is read once more, in the copy itself.
//
// The scratch is kept by the schedule (Schedule::scaled_sources), so a
// cached schedule's later executions write the scales into the memory of
// the first; an uncached schedule's goes with it. The shards are cut into
// parts of whole blocks (quantise_parts) that run on the engine's threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "reshard/box_copy.h"
#include "reshard/buffers.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

namespace reshard::engine_detail {

class WorkerPool;

// Elements per quantise_parts part: a part of the scales pass on one
// thread.
inline constexpr int64_t kQuantisePartElements = int64_t{1} << 17;

class ScaledSources {
 public:
  // Whether any tensor of `plan` has block scales.
  static bool any(const Plan& plan);
  // Throws kUnsupported when the plan has block scales, the transport's
  // memory is not host memory and `whole` (Engine::execute with
  // kAllProcesses, whose copies run on the host): checked by every rank
  // before anything else. Device transports compute the scales and
  // quantise in their copies (CopyOp::Kind::kBlockScales, kQuantise).
  static void check_transport(const Plan& plan, const TransportInfo& info, bool whole);
  // The source bytes of the scaled tensors' entries on `process` (every
  // entry with kAllProcesses) in `buffers`: what prepare() reads.
  static int64_t source_bytes(const Plan& plan, int32_t process,
                              std::span<const TensorBuffers> buffers);

  // `buffers` when the plan has no block scales. Otherwise `buffers` with
  // every scale tensor's source list holding the scales computed from the
  // scaled tensor's source entries on `process` (every entry with
  // kAllProcesses; null, 0 bytes for entries elsewhere); valid while this
  // object lives and until the next call. A scaled tensor's source buffers
  // are the caller's: read them with quantise_copy. The parts run on up to `threads` threads of
  // `pool` (null: the calling thread). `buffers` must have passed exec_detail::validate_buffers,
  // and the transport check_transport.
  //
  // Device memory (info.memory not kHost, `transport` given): the scratch is
  // staging of `transport` on each shard's device, and the scales are
  // computed there, one run_copies call of kBlockScales ops per device,
  // followed by order_streams (a copy on another device may read them).
  std::span<const TensorBuffers> prepare(const Plan& plan, int32_t process,
                                         std::span<const TensorBuffers> buffers,
                                         const TransportInfo& info, WorkerPool* pool = nullptr,
                                         int threads = 1, Transport* transport = nullptr);

  // Bytes of scratch held (kept between calls).
  size_t capacity() const { return capacity_; }

 private:
  std::vector<TensorBuffers> buffers_;
  // One allocation for every shard's scales, kept while large enough.
  std::unique_ptr<std::byte[]> memory_;
  size_t capacity_ = 0;
  // Device memory: one staging block per device, kept while large enough.
  struct DeviceScratch {
    int64_t device;
    std::unique_ptr<StagingBlock> block;
  };
  std::vector<DeviceScratch> device_memory_;
};

// The scaled shard of source entry `entry` of tensor `t` (which has block
// scales), with the scales in `buffers` (prepare()'s result): what the
// kQuantise ops out of that entry point to (CopyOp::shard).
CopyOp::Shard quantise_shard(std::span<const TensorSpec> tensors,
                             std::span<const TensorBuffers> buffers, uint32_t t, uint32_t entry);

// The CopyOp of a copy out of source entry `entry` of tensor `t` (which has
// block scales) quantised into `dst` (device memory: kQuantise), with the
// scales in `buffers` (prepare()'s result); `shard` is quantise_shard of
// that entry, kept by the caller while the op is.
CopyOp quantise_op(std::span<const TensorSpec> tensors, std::span<const TensorBuffers> buffers,
                   uint32_t t, uint32_t entry, const CopyDesc& desc, void* dst,
                   const CopyOp::Shard* shard);

// Runs [first_run, last_run) of `desc`, a copy out of source entry `entry`
// of tensor `t` (which has block scales), quantised straight into `dst`
// (its destination dtype), with the scales in `buffers` (prepare()'s
// result). The run slice form copies elements [lo, hi) of desc's only run.
void quantise_copy(std::span<const TensorSpec> tensors, std::span<const TensorBuffers> buffers,
                   uint32_t t, uint32_t entry, const CopyDesc& desc, int64_t first_run,
                   int64_t last_run, void* dst);
void quantise_copy_slice(std::span<const TensorSpec> tensors,
                         std::span<const TensorBuffers> buffers, uint32_t t, uint32_t entry,
                         const CopyDesc& desc, int64_t lo, int64_t hi, void* dst);

}  // namespace reshard::engine_detail
