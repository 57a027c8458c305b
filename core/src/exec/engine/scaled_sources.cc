#include "exec/engine/scaled_sources.h"

#include <algorithm>
#include <string>

#include "exec/engine/direct_copies.h"
#include "layout/quantise_copy.h"
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

void ScaledSources::check_transport(const Plan& plan, const TransportInfo& info, bool whole) {
  if (whole && info.memory != MemoryKind::kHost && any(plan))
    fail(ErrorCode::kUnsupported,
         "plan: has block scales (docs/spec.md \"Block scales\"), which executing every process "
         "at once computes in host memory; the " +
             info.name +
             " transport's buffers are not (execute it per process, or with execute_host or the "
             "local transport)");
}

namespace {
// The scaled shard of source entry `entry` of `v` (CopyOp::shard).
CopyOp::Shard shard_of(std::span<const TensorSpec> tensors, const TensorSpec& v, size_t entry,
                       const void* scales) {
  CopyOp::Shard sh;
  sh.box = v.src.box(entry);
  for (size_t d = 0; d < v.scale_block.size() && d < sh.block.size(); ++d)
    sh.block[d] = v.scale_block[d];
  sh.scale_dtype = tensors[static_cast<size_t>(v.scale_tensor)].dtype;
  sh.scales = scales;
  return sh;
}
}  // namespace

CopyOp::Shard quantise_shard(std::span<const TensorSpec> tensors,
                             std::span<const TensorBuffers> buffers, uint32_t t, uint32_t entry) {
  const TensorSpec& v = tensors[t];
  const auto s = static_cast<size_t>(v.scale_tensor);
  return shard_of(tensors, v, entry, buffers[s].src[entry].data);
}

CopyOp quantise_op(std::span<const TensorSpec> tensors, std::span<const TensorBuffers> buffers,
                   uint32_t t, uint32_t entry, const CopyDesc& desc, void* dst,
                   const CopyOp::Shard* shard) {
  const TensorSpec& v = tensors[t];
  CopyOp op{CopyOp::Kind::kQuantise,    desc, v.dtype, ReduceOp::kSum, 0,
            buffers[t].src[entry].data, dst};
  op.to_dtype = out_dtype(v);
  op.shard = shard;
  return op;
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
                                                      int threads, Transport* transport) {
  const std::vector<TensorSpec>& tensors = plan.tensors();
  if (!any(plan)) return buffers;
  buffers_.assign(buffers.begin(), buffers.end());
  const Topology& topology = plan.topology();
  // The shards whose scales to compute, each with its place in the scratch.
  struct Shard {
    size_t tensor, entry;
    int64_t scales;  // offset in memory_
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
      shards.push_back({t, e, total});
      total += aligned(scale_src.box(e).volume() * scale_bytes(tensors, v));
    }
  }
  if (info.memory != MemoryKind::kHost) {
    if (transport == nullptr)
      fail(ErrorCode::kInternal, "ScaledSources::prepare: device memory needs the transport");
    // Per device: its shards' scales in one staging block, then one call
    // of kBlockScales ops.
    std::vector<std::pair<int64_t, int64_t>> need;  // device, bytes
    std::vector<int64_t> at(shards.size());
    for (size_t i = 0; i < shards.size(); ++i) {
      const Shard& s = shards[i];
      const TensorSpec& v = tensors[s.tensor];
      const int64_t device = v.src.device(s.entry);
      auto it = std::find_if(need.begin(), need.end(), [&](auto& n) { return n.first == device; });
      if (it == need.end()) it = need.insert(need.end(), {device, 0});
      at[i] = it->second;
      it->second += aligned(tensors[static_cast<size_t>(v.scale_tensor)].src.box(s.entry).volume() *
                            scale_bytes(tensors, v));
    }
    for (const auto& [device, bytes] : need) {
      const int64_t dev = device;  // clang 14 cannot capture a structured binding
      auto it = std::find_if(device_memory_.begin(), device_memory_.end(),
                             [dev](const DeviceScratch& m) { return m.device == dev; });
      if (it == device_memory_.end())
        it = device_memory_.insert(device_memory_.end(), DeviceScratch{device, nullptr});
      if (it->block == nullptr || it->block->bytes() < bytes) {
        it->block.reset();  // the old block goes first
        it->block = transport->allocate_staging(device, topology.info(device).ordinal, bytes);
      }
    }
    std::vector<std::pair<int64_t, std::vector<CopyOp>>> calls;  // device, ops
    std::vector<CopyOp::Shard> op_shards(shards.size());         // what the ops point to
    for (size_t i = 0; i < shards.size(); ++i) {
      const Shard& s = shards[i];
      const TensorSpec& v = tensors[s.tensor];
      const Layout& scale_src = tensors[static_cast<size_t>(v.scale_tensor)].src;
      const int64_t device = v.src.device(s.entry);
      auto m = std::find_if(device_memory_.begin(), device_memory_.end(),
                            [&](const DeviceScratch& d) { return d.device == device; });
      std::byte* scales = m->block->data() + at[i];
      buffers_[static_cast<size_t>(v.scale_tensor)].src[s.entry] = {
          scales, scale_src.box(s.entry).volume() * scale_bytes(tensors, v)};
      CopyOp op{CopyOp::Kind::kBlockScales,          {},    v.dtype, ReduceOp::kSum, 0,
                buffers[s.tensor].src[s.entry].data, scales};
      op.to_dtype = out_dtype(v);
      op_shards[i] = shard_of(tensors, v, s.entry, nullptr);
      op.shard = &op_shards[i];
      auto c = std::find_if(calls.begin(), calls.end(), [&](auto& k) { return k.first == device; });
      if (c == calls.end()) c = calls.insert(calls.end(), {device, {}});
      c->second.push_back(op);
    }
    for (const auto& [device, ops] : calls)
      transport->run_copies(device, topology.info(device).ordinal, ops);
    if (!calls.empty()) transport->order_streams();
    return buffers_;
  }
  if (static_cast<size_t>(total) > capacity_) {
    memory_.reset();  // the old block goes first
    memory_ = std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(total));
    capacity_ = static_cast<size_t>(total);
  }
  // The parts of every shard, in any order.
  struct Part {
    const Shard* shard;
    Box box;
  };
  std::vector<Part> parts;
  for (const Shard& s : shards) {
    const TensorSpec& v = tensors[s.tensor];
    const Layout& scale_src = tensors[static_cast<size_t>(v.scale_tensor)].src;
    for (const Box& b : quantise_parts(v.src.box(s.entry), v.scale_block, kQuantisePartElements))
      parts.push_back({&s, b});
    buffers_[static_cast<size_t>(v.scale_tensor)].src[s.entry] = {
        memory_.get() + s.scales, scale_src.box(s.entry).volume() * scale_bytes(tensors, v)};
  }
  const auto task = [&](size_t i, int) {
    const Shard& s = *parts[i].shard;
    const TensorSpec& v = tensors[s.tensor];
    block_scales_part(v, tensors[static_cast<size_t>(v.scale_tensor)].dtype, v.src.box(s.entry),
                      parts[i].box, buffers[s.tensor].src[s.entry].data, memory_.get() + s.scales);
  };
  if (pool != nullptr && threads > 1) {
    pool->run(parts.size(), task, {}, threads);
  } else {
    for (size_t i = 0; i < parts.size(); ++i) task(i, 0);
  }
  return buffers_;
}

void quantise_copy(std::span<const TensorSpec> tensors, std::span<const TensorBuffers> buffers,
                   uint32_t t, uint32_t entry, const CopyDesc& desc, int64_t first_run,
                   int64_t last_run, void* dst) {
  const TensorSpec& v = tensors[t];
  const auto s = static_cast<size_t>(v.scale_tensor);
  quantise_runs(v, tensors[s].dtype, v.src.box(entry), buffers[s].src[entry].data, desc, first_run,
                last_run, buffers[t].src[entry].data, dst);
}

void quantise_copy_slice(std::span<const TensorSpec> tensors,
                         std::span<const TensorBuffers> buffers, uint32_t t, uint32_t entry,
                         const CopyDesc& desc, int64_t lo, int64_t hi, void* dst) {
  const TensorSpec& v = tensors[t];
  const auto s = static_cast<size_t>(v.scale_tensor);
  int64_t so = 0, to = 0;
  run_offsets(desc, 0, &so, &to);
  quantise_span(v, tensors[s].dtype, v.src.box(entry), buffers[s].src[entry].data,
                buffers[t].src[entry].data, so + lo, hi - lo,
                static_cast<std::byte*>(dst) + to + lo);
}

}  // namespace reshard::engine_detail
