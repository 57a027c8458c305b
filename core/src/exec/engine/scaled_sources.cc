#include "exec/engine/scaled_sources.h"

#include <algorithm>
#include <string>

#include "reshard/block_scales.h"
#include "reshard/error.h"

namespace reshard::engine_detail {

namespace {
bool any_scales(const Plan& plan) {
  return std::any_of(plan.tensors().begin(), plan.tensors().end(),
                     [](const TensorSpec& t) { return has_block_scales(t); });
}
}  // namespace

void ScaledSources::check_transport(const Plan& plan, const TransportInfo& info) {
  if (info.memory != MemoryKind::kHost && any_scales(plan))
    fail(ErrorCode::kUnsupported,
         "plan: has block scales (docs/spec.md \"Block scales\"), which are computed in host "
         "memory; the " +
             info.name +
             " transport's buffers are not (execute it with execute_host or the local or mpi "
             "transport)");
}

std::span<const TensorBuffers> ScaledSources::prepare(const Plan& plan, int32_t process,
                                                      std::span<const TensorBuffers> buffers,
                                                      const TransportInfo& info) {
  const std::vector<TensorSpec>& tensors = plan.tensors();
  if (!any_scales(plan)) return buffers;
  check_transport(plan, info);
  buffers_.assign(buffers.begin(), buffers.end());
  const Topology& topology = plan.topology();
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& v = tensors[t];
    if (!has_block_scales(v)) continue;
    const auto s = static_cast<size_t>(v.scale_tensor);
    const Layout& scale_src = tensors[s].src;
    std::vector<ConstBuffer>& values = buffers_[t].src;
    std::vector<ConstBuffer>& scales = buffers_[s].src;
    scales.assign(scale_src.num_entries(), ConstBuffer{});
    for (size_t e = 0; e < v.src.num_entries() && e < values.size(); ++e) {
      if (process >= 0 && topology.info(v.src.device(e)).process != process) continue;
      const Box box = v.src.box(e);
      const int64_t bytes = values[e].bytes;
      const int64_t scale_bytes = scale_src.box(e).volume() * 4;
      if (bytes == 0) continue;
      // One block: the values (aligned for any dtype), then the scales.
      const int64_t padded = (bytes + 15) / 16 * 16;
      memory_.push_back(
          std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(padded + scale_bytes)));
      std::byte* q = memory_.back().get();
      auto* sc = reinterpret_cast<float*>(q + padded);
      quantise_shard(v, box, values[e].data, sc, q);
      values[e] = {q, bytes};
      scales[e] = {sc, scale_bytes};
    }
  }
  return buffers_;
}

}  // namespace reshard::engine_detail
