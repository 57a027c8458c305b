#include "exec/engine/scaled_sources.h"

#include <algorithm>
#include <string>

#include "exec/engine/direct_copies.h"
#include "reshard/block_scales.h"
#include "reshard/error.h"

namespace reshard::engine_detail {

namespace {
// Scratch offsets are multiples of this: any dtype's alignment.
constexpr int64_t kAlign = 64;
int64_t aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

bool ScaledSources::any(const Plan& plan) {
  return std::any_of(plan.tensors().begin(), plan.tensors().end(),
                     [](const TensorSpec& t) { return has_block_scales(t); });
}

void ScaledSources::check_transport(const Plan& plan, const TransportInfo& info) {
  if (info.memory != MemoryKind::kHost && any(plan))
    fail(ErrorCode::kUnsupported,
         "plan: has block scales (docs/spec.md \"Block scales\"), which are computed in host "
         "memory; the " +
             info.name +
             " transport's buffers are not (execute it with execute_host or the local or mpi "
             "transport)");
}

namespace {
// Bytes per scale of tensor `v`'s scale tensor (f32: 4, e8m0: 1).
int64_t scale_bytes(const std::vector<TensorSpec>& tensors, const TensorSpec& v) {
  return dtype_size(tensors[static_cast<size_t>(v.scale_tensor)].dtype);
}
}  // namespace

int64_t ScaledSources::source_bytes(const Plan& plan, int32_t process,
                                    std::span<const TensorBuffers> buffers) {
  int64_t bytes = 0;
  const Topology& topology = plan.topology();
  for (size_t t = 0; t < plan.tensors().size() && t < buffers.size(); ++t) {
    const TensorSpec& v = plan.tensors()[t];
    if (!has_block_scales(v)) continue;
    for (size_t e = 0; e < v.src.num_entries() && e < buffers[t].src.size(); ++e)
      if (process < 0 || topology.info(v.src.device(e)).process == process)
        bytes += buffers[t].src[e].bytes;
  }
  return bytes;
}

std::span<const TensorBuffers> ScaledSources::prepare(const Plan& plan, int32_t process,
                                                      std::span<const TensorBuffers> buffers,
                                                      const TransportInfo& info, WorkerPool* pool,
                                                      int threads) {
  const std::vector<TensorSpec>& tensors = plan.tensors();
  if (!any(plan)) return buffers;
  check_transport(plan, info);
  buffers_.assign(buffers.begin(), buffers.end());
  const Topology& topology = plan.topology();
  // The shards to quantise, each with its place in the scratch.
  struct Shard {
    size_t tensor, entry;
    int64_t values, scales;  // offsets in memory_
  };
  std::vector<Shard> shards;
  int64_t total = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& v = tensors[t];
    if (!has_block_scales(v)) continue;
    const Layout& scale_src = tensors[static_cast<size_t>(v.scale_tensor)].src;
    buffers_[static_cast<size_t>(v.scale_tensor)].src.assign(scale_src.num_entries(),
                                                             ConstBuffer{});
    for (size_t e = 0; e < v.src.num_entries() && e < buffers_[t].src.size(); ++e) {
      if (process >= 0 && topology.info(v.src.device(e)).process != process) continue;
      if (buffers_[t].src[e].bytes == 0) continue;
      const int64_t values = total;
      total += aligned(buffers_[t].src[e].bytes);
      shards.push_back({t, e, values, total});
      total += aligned(scale_src.box(e).volume() * scale_bytes(tensors, v));
    }
  }
  if (static_cast<size_t>(total) > capacity_) {
    memory_.reset();  // the old block goes first
    memory_ = std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(total));
    capacity_ = static_cast<size_t>(total);
  }
  // The parts of every shard, quantised in any order.
  struct Part {
    const Shard* shard;
    Box box;
  };
  std::vector<Part> parts;
  for (const Shard& s : shards) {
    const TensorSpec& v = tensors[s.tensor];
    const ConstBuffer in = buffers_[s.tensor].src[s.entry];
    const Layout& scale_src = tensors[static_cast<size_t>(v.scale_tensor)].src;
    for (const Box& b : quantise_parts(v.src.box(s.entry), v.scale_block, kQuantisePartElements))
      parts.push_back({&s, b});
    buffers_[s.tensor].src[s.entry] = {memory_.get() + s.values, in.bytes};
    buffers_[static_cast<size_t>(v.scale_tensor)].src[s.entry] = {
        memory_.get() + s.scales, scale_src.box(s.entry).volume() * scale_bytes(tensors, v)};
  }
  const auto task = [&](size_t i, int) {
    const Shard& s = *parts[i].shard;
    const TensorSpec& v = tensors[s.tensor];
    quantise_part(v, tensors[static_cast<size_t>(v.scale_tensor)].dtype, v.src.box(s.entry),
                  parts[i].box, buffers[s.tensor].src[s.entry].data, memory_.get() + s.scales,
                  memory_.get() + s.values);
  };
  if (pool != nullptr && threads > 1) {
    pool->run(parts.size(), task, {}, threads);
  } else {
    for (size_t i = 0; i < parts.size(); ++i) task(i, 0);
  }
  return buffers_;
}

}  // namespace reshard::engine_detail
