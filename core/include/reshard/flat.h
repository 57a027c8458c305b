// reshard — flat layouts (docs/design.md §1.6): an ordered list of tensors
// flattened and concatenated into one buffer with alignment padding, split
// evenly over ranks (PyTorch FSDP1's FlatParameter, a Megatron distributed-
// optimizer bucket), or each tensor split over the ranks on its own and the
// parts concatenated per rank (DeepSpeed ZeRO-3). A rank's flat buffer holds
// the tail of one tensor and the head of the next. Or (buffer views) each
// tensor keeps its own sharding over the ranks and each rank's buffer holds
// its box of every tensor, dense and row-major, one after another (vLLM's
// QKVParallelLinear, MergedColumnParallelLinear, padded vocabularies).
//
// A flat layout lowers to one explicit Layout per tensor. The row-major
// element range [lo, hi) a rank holds of a tensor of rank R is a union of at
// most 2R - 1 boxes, each contiguous in row-major order and laid out one
// after another in the flat buffer (flat_range_boxes). Layouts hold one entry
// per device, so the k-th box (k >= 1) a device holds of one tensor is given
// to a *slot device*: the id device + k * kFlatSlotStride, on the device's
// process, host and ordinal (add_flat_slots). Planner, plan format and
// executors see boxes and devices as for any explicit layout; the caller
// passes one flat buffer per rank and flat_*_views cuts it into the
// per-entry views execute_host and the engine take.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reshard/box.h"
#include "reshard/buffers.h"
#include "reshard/dtype.h"
#include "reshard/layout.h"

namespace reshard {

// How a flat layout splits its tensors over the ranks.
enum class FlatPartition : int32_t {
  // FSDP1, Megatron buckets: tensors concatenated (each start a multiple of
  // align_elements), the total padded to a multiple of
  // lcm(world size, pad_multiple), then split into equal shards: rank r holds
  // flat elements [r * S, (r + 1) * S).
  kConcat = 1,
  // DeepSpeed ZeRO-3: each tensor of n elements split on its own into
  // P = ceil(n / world size) elements per rank (rank r holds its elements
  // [r * P, min(n, (r + 1) * P)), the rest of its P padding); each rank's
  // buffer holds its parts back to back, each start a multiple of
  // align_elements, the total padded to a multiple of pad_multiple.
  kPerTensor = 2,
  // Buffer views (vLLM's fused QKVParallelLinear, MergedColumnParallelLinear,
  // VocabParallelEmbedding): each tensor (a member) keeps its own layout over
  // the ranks (FlatLayout::members: one box per rank at most, no partial
  // sums); rank r's buffer holds its box of every member, dense and
  // row-major. Each member has a slot of the same size and offset on every
  // rank: its largest box on any rank (a shorter box is followed by
  // padding); slots follow one another in member order, each start a
  // multiple of align_elements (or at the explicit `offsets`), the buffer
  // padded to a multiple of pad_multiple.
  kFused = 3,
};
// "concat", "per_tensor", "fused"
std::string_view flat_partition_name(FlatPartition p) noexcept;
FlatPartition parse_flat_partition(std::string_view name, const std::string& field);

// Slot devices: the k-th box (k >= 1) device d holds of one tensor is entry
// d + k * kFlatSlotStride. Devices of a flat layout are below the stride;
// an input with flat layouts must use no other device id at or above it.
inline constexpr int64_t kFlatSlotStride = int64_t{1} << 40;
// The device a (slot) device id belongs to, and its slot (0: the device).
constexpr int64_t flat_physical_device(int64_t id) noexcept { return id % kFlatSlotStride; }
constexpr int64_t flat_slot(int64_t id) noexcept { return id / kFlatSlotStride; }

struct FlatTensor {
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
};

struct FlatLayout {
  // Rank order: rank r is devices[r]; the world size is devices.size().
  std::vector<int64_t> devices;
  FlatPartition partition = FlatPartition::kConcat;
  // Every tensor's start (in elements) is a multiple of this (>= 1).
  int64_t align_elements = 1;
  // kConcat: the flat total is padded to a multiple of lcm(world size, this);
  // kPerTensor: each rank's buffer is padded to a multiple of this (>= 1).
  int64_t pad_multiple = 1;
  // The tensors in buffer order; all of one dtype.
  std::vector<FlatTensor> tensors;
  // kConcat and kFused, optional: each tensor's element offset in the
  // unsharded flat buffer (kConcat) or in every rank's buffer (kFused)
  // instead of packing them with align_elements; ascending and
  // non-overlapping (kFused: past the previous slot's end), each a multiple
  // of align_elements. kConcat only: the unsharded total (-1: the last end
  // padded as above; else a multiple of the world size, at least the last
  // end).
  std::vector<int64_t> offsets;
  int64_t total_elements = -1;
  // kFused only (required there): per tensor, its layout over `devices`
  // (any layout of the tensor's shape whose entries are on these devices,
  // one summand); empty for the other partitions.
  std::vector<Layout> members;
};

struct FlatLowered {
  int64_t world_size = 0;
  int64_t element_size = 0;
  // Elements and bytes of each rank's flat buffer (equal for every rank).
  int64_t shard_elements = 0;
  int64_t shard_bytes = 0;
  // kConcat: each tensor's element offset in the unsharded flat buffer;
  // kPerTensor, kFused: its element offset in every rank's buffer.
  std::vector<int64_t> tensor_offsets;
  // Per tensor: its explicit layout (entries on devices and slot devices),
  // and per layout entry (the layout's order) the entry's rank and the byte
  // offset of its box in that rank's flat buffer.
  std::vector<Layout> layouts;
  std::vector<std::vector<int32_t>> entry_ranks;
  std::vector<std::vector<int64_t>> entry_offsets;
};

// The most entries (boxes of ranks, over all tensors) one flat layout
// lowers to; more is kResourceExhausted before anything is built.
inline constexpr int64_t kMaxFlatEntries = int64_t{1} << 24;

// Lowers a flat layout. Errors (kInvalidArgument; kOutOfRange for sizes and
// ids out of bounds; kOverflow) name the field under `field`:
// "<field>.devices[3]", "<field>.align_elements", "<field>.tensors[2].dtype",
// "<field>.offsets[1]", "<field>.total_elements", "<field>.members[0]", ...
FlatLowered lower_flat(const FlatLayout& flat, const std::string& field);

// The boxes of the row-major element range [lo, hi) of a tensor of `shape`,
// in row-major order: at most 2 * rank - 1 (one for a rank-0 tensor), each
// contiguous in row-major order, together exactly the range.
std::vector<Box> flat_range_boxes(std::span<const int64_t> shape, int64_t lo, int64_t hi);

// Adds every slot device of `lowered`'s layouts to `topology`, on the
// process, host and ordinal of its device (topology.info). Errors name
// `field`.
void add_flat_slots(Topology& topology, const FlatLowered& lowered, const std::string& field);

// Per-entry views of tensor `tensor` of `lowered` into one flat buffer per
// rank (`flat[r]` for rank r, at least shard_bytes each): what
// TensorBuffers::src / ::dst take for that tensor. A rank this process does
// not hold is given as {nullptr, 0}; its entries get empty views (what the
// engine expects of entries on other processes). Errors (kInvalidArgument)
// name `field` ("flat[2]: ...").
std::vector<ConstBuffer> flat_views(const FlatLowered& lowered, size_t tensor,
                                    std::span<const ConstBuffer> flat,
                                    const std::string& field = "flat");
std::vector<MutableBuffer> flat_views(const FlatLowered& lowered, size_t tensor,
                                      std::span<const MutableBuffer> flat,
                                      const std::string& field = "flat");

}  // namespace reshard
