// Internal: the source side of block scales (reshard/block_scales.h) for
// the engine. Before a plan with block scales executes, each source shard
// of a scaled tensor on this process's devices is quantised on the host
// into a scratch of its own size and dtype (each q widened back, exactly),
// and the scales of its blocks into a scratch that serves as the scale
// tensor's source buffer. The execution then reads those scratches in place
// of the caller's source buffers: the ordinary cast to the fp8 destination
// reproduces each q bit for bit, so the copy paths know nothing of scales.
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

class ScaledSources {
 public:
  // Throws kUnsupported when the plan has block scales and the transport's
  // memory is not host memory (the CUDA path does not compute scales):
  // checked by every rank before anything else.
  static void check_transport(const Plan& plan, const TransportInfo& info);

  // `buffers` when the plan has no block scales. Otherwise a list in which
  // the source buffers of every scaled tensor's entries on `process` (every
  // entry with kAllProcesses) are their quantised scratches and every scale
  // tensor's source list holds its computed scales (null, 0 bytes for
  // entries elsewhere); valid while this object lives. `buffers` must have
  // passed exec_detail::validate_buffers, and the transport
  // check_transport.
  std::span<const TensorBuffers> prepare(const Plan& plan, int32_t process,
                                         std::span<const TensorBuffers> buffers,
                                         const TransportInfo& info);

 private:
  std::vector<TensorBuffers> buffers_;
  std::vector<std::unique_ptr<std::byte[]>> memory_;
};

}  // namespace reshard::engine_detail
