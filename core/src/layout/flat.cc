#include "reshard/flat.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "layout/element_range.h"
#include "reshard/error.h"

namespace reshard {

std::string_view flat_partition_name(FlatPartition p) noexcept {
  switch (p) {
    case FlatPartition::kConcat:
      return "concat";
    case FlatPartition::kPerTensor:
      return "per_tensor";
    case FlatPartition::kFused:
      return "fused";
  }
  return "invalid";
}

FlatPartition parse_flat_partition(std::string_view name, const std::string& field) {
  if (name == "concat") return FlatPartition::kConcat;
  if (name == "per_tensor") return FlatPartition::kPerTensor;
  if (name == "fused") return FlatPartition::kFused;
  fail(ErrorCode::kInvalidArgument, field,
       "unknown partition \"" + std::string(name) + "\" (expected concat, per_tensor or fused)");
}

std::vector<Box> flat_range_boxes(std::span<const int64_t> shape, int64_t lo, int64_t hi) {
  std::vector<Box> out;
  if (lo >= hi) return out;
  Box whole;
  whole.rank = static_cast<int>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) whole.hi[d] = shape[d];
  element_range_boxes(whole, lo, hi, out);
  return out;
}

namespace {

int64_t add_or_fail(int64_t a, int64_t b, const std::string& field) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    fail(ErrorCode::kOverflow, field, "the flat buffer's size overflows 64 bits");
  return r;
}

int64_t mul_or_fail(int64_t a, int64_t b, const std::string& field) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(ErrorCode::kOverflow, field, "the flat buffer's size overflows 64 bits");
  return r;
}

// The least multiple of m (>= 1) at or above x (>= 0).
int64_t round_up(int64_t x, int64_t m, const std::string& field) {
  const int64_t r = x % m;
  return r == 0 ? x : add_or_fail(x, m - r, field);
}

// Tensor i's start: the next multiple of align_elements at or past `pos`
// (the previous tensor's end), or its explicit offset, checked (aligned,
// not before `pos`). `ends` says what ends at `pos` in the message.
int64_t tensor_start(const FlatLayout& flat, size_t i, int64_t pos, const std::string& field,
                     const char* ends) {
  if (flat.offsets.empty()) return round_up(pos, flat.align_elements, field + ".tensors");
  const std::string of = field + ".offsets[" + std::to_string(i) + "]";
  const int64_t start = flat.offsets[i];
  if (start < 0) fail(ErrorCode::kOutOfRange, of, std::to_string(start) + " is negative");
  if (start % flat.align_elements != 0)
    fail(ErrorCode::kInvalidArgument, of,
         std::to_string(start) + " is not a multiple of align_elements (" +
             std::to_string(flat.align_elements) + ")");
  if (start < pos)
    fail(ErrorCode::kInvalidArgument, of,
         "tensor " + std::to_string(i) + " at " + std::to_string(start) + " overlaps tensor " +
             std::to_string(i - 1) + ", " + ends + " at " + std::to_string(pos));
  return start;
}

// kFused: the members' own layouts, each rank's boxes in slots of the
// same offset on every rank (flat.h).
void lower_fused(const FlatLayout& flat, const std::string& field, FlatLowered& out) {
  const size_t nt = flat.tensors.size();
  if (flat.members.size() != nt)
    fail(ErrorCode::kInvalidArgument, field + ".members",
         std::to_string(flat.members.size()) + " member layouts for " + std::to_string(nt) +
             " tensors (the fused partition needs one per tensor)");
  std::map<int64_t, int32_t> rank_of;
  for (size_t r = 0; r < flat.devices.size(); ++r)
    rank_of.emplace(flat.devices[r], static_cast<int32_t>(r));
  // Per member: the rank of each entry and the slot (largest box).
  std::vector<std::vector<int32_t>> ranks(nt);
  std::vector<int64_t> slot(nt, 0);
  for (size_t i = 0; i < nt; ++i) {
    const std::string mf = field + ".members[" + std::to_string(i) + "]";
    const Layout& m = flat.members[i];
    if (m.shape() != flat.tensors[i].shape) {
      auto str = [](const std::vector<int64_t>& v) {
        std::string o = "[";
        for (size_t d = 0; d < v.size(); ++d) o += (d ? ", " : "") + std::to_string(v[d]);
        return o + "]";
      };
      fail(ErrorCode::kInvalidArgument, mf,
           "the member layout's shape " + str(m.shape()) + " is not the tensor's " +
               str(flat.tensors[i].shape));
    }
    if (m.num_summands() != 1)
      fail(ErrorCode::kInvalidArgument, mf,
           std::to_string(m.num_summands()) +
               " summands: a fused buffer holds whole values (partial sums are not supported)");
    for (size_t e = 0; e < m.num_entries(); ++e) {
      auto it = rank_of.find(m.device(e));
      if (it == rank_of.end())
        fail(ErrorCode::kInvalidArgument, mf,
             "device " + std::to_string(m.device(e)) + " is not one of " + field +
                 "'s devices (a member is laid out over its flat layout's ranks)");
      ranks[i].push_back(it->second);
      slot[i] = std::max(slot[i], m.box(e).volume());
    }
  }
  int64_t pos = 0;
  out.tensor_offsets.resize(nt);
  for (size_t i = 0; i < nt; ++i) {
    const int64_t start = tensor_start(flat, i, pos, field, "whose largest box ends");
    out.tensor_offsets[i] = start;
    pos = add_or_fail(start, slot[i], field + ".tensors");
  }
  out.shard_elements = round_up(pos, flat.pad_multiple, field + ".pad_multiple");
  out.shard_bytes = mul_or_fail(out.shard_elements, out.element_size, field + ".tensors");
  mul_or_fail(out.shard_bytes, out.world_size, field + ".tensors");
  for (size_t i = 0; i < nt; ++i) {
    const int64_t at = out.tensor_offsets[i] * out.element_size;
    out.layouts.push_back(flat.members[i]);
    out.entry_ranks.push_back(std::move(ranks[i]));
    out.entry_offsets.emplace_back(out.entry_ranks.back().size(), at);
  }
}

}  // namespace

FlatLowered lower_flat(const FlatLayout& flat, const std::string& field) {
  const std::string devices_field = field + ".devices";
  if (flat.devices.empty()) fail(ErrorCode::kInvalidArgument, devices_field, "no devices");
  if (static_cast<int64_t>(flat.devices.size()) > kMaxDevices)
    fail(ErrorCode::kOutOfRange, devices_field,
         "more than " + std::to_string(kMaxDevices) + " devices (the most one plan holds)");
  for (size_t i = 0; i < flat.devices.size(); ++i) {
    const int64_t d = flat.devices[i];
    if (d < 0 || d >= kFlatSlotStride) {
      const std::string f = devices_field + "[" + std::to_string(i) + "]";
      if (d < 0)
        fail(ErrorCode::kInvalidArgument, f, "device id " + std::to_string(d) + " is negative");
      fail(ErrorCode::kOutOfRange, f,
           "device id " + std::to_string(d) +
               " is at or above 2^40 (ids from 2^40 name the slots of flat layouts)");
    }
  }
  {
    // Duplicates: sorted (device, position); the later position is named.
    std::vector<std::pair<int64_t, size_t>> sorted(flat.devices.size());
    for (size_t i = 0; i < flat.devices.size(); ++i) sorted[i] = {flat.devices[i], i};
    std::sort(sorted.begin(), sorted.end());
    size_t worst = flat.devices.size(), first = 0;
    for (size_t k = 1; k < sorted.size(); ++k)
      if (sorted[k].first == sorted[k - 1].first && sorted[k].second < worst) {
        worst = sorted[k].second;
        first = sorted[k - 1].second;
      }
    if (worst < flat.devices.size())
      fail(ErrorCode::kInvalidArgument, devices_field + "[" + std::to_string(worst) + "]",
           "device " + std::to_string(flat.devices[worst]) + " appears twice (also at [" +
               std::to_string(first) + "])");
  }
  if (flat.partition != FlatPartition::kConcat && flat.partition != FlatPartition::kPerTensor &&
      flat.partition != FlatPartition::kFused)
    fail(ErrorCode::kInvalidArgument, field + ".partition",
         "invalid partition " + std::to_string(static_cast<int32_t>(flat.partition)));
  if (flat.align_elements < 1)
    fail(ErrorCode::kInvalidArgument, field + ".align_elements",
         std::to_string(flat.align_elements) + " must be at least 1");
  if (flat.pad_multiple < 1)
    fail(ErrorCode::kInvalidArgument, field + ".pad_multiple",
         std::to_string(flat.pad_multiple) + " must be at least 1");
  if (flat.tensors.empty()) fail(ErrorCode::kInvalidArgument, field + ".tensors", "no tensors");
  const DType dtype = flat.tensors[0].dtype;
  if (!dtype_valid(static_cast<int32_t>(dtype)))
    fail(ErrorCode::kInvalidArgument, field + ".tensors[0].dtype",
         "invalid dtype " + std::to_string(static_cast<int32_t>(dtype)));
  std::vector<int64_t> numel(flat.tensors.size());
  for (size_t i = 0; i < flat.tensors.size(); ++i) {
    const std::string tf = field + ".tensors[" + std::to_string(i) + "]";
    if (flat.tensors[i].dtype != dtype)
      fail(ErrorCode::kInvalidArgument, tf + ".dtype",
           std::string(dtype_name(flat.tensors[i].dtype)) + " in a flat layout of " +
               std::string(dtype_name(dtype)) + " (one dtype per flat buffer)");
    validate_shape(flat.tensors[i].shape, dtype_size(dtype), tf + ".shape");
    int64_t n = 1;
    for (int64_t s : flat.tensors[i].shape) n *= s;
    numel[i] = n;
  }
  const bool concat = flat.partition == FlatPartition::kConcat;
  const bool fused = flat.partition == FlatPartition::kFused;
  if (!flat.offsets.empty() && !concat && !fused)
    fail(ErrorCode::kInvalidArgument, field + ".offsets",
         "explicit offsets are for the concat and fused partitions only");
  if (flat.total_elements != -1 && !concat)
    fail(ErrorCode::kInvalidArgument, field + ".total_elements",
         "an explicit total is for the concat partition only");
  if (!flat.offsets.empty() && flat.offsets.size() != flat.tensors.size())
    fail(ErrorCode::kInvalidArgument, field + ".offsets",
         std::to_string(flat.offsets.size()) + " offsets for " +
             std::to_string(flat.tensors.size()) + " tensors");

  if (!fused && !flat.members.empty())
    fail(ErrorCode::kInvalidArgument, field + ".members",
         "member layouts are for the fused partition only");

  FlatLowered out;
  out.world_size = static_cast<int64_t>(flat.devices.size());
  out.element_size = dtype_size(dtype);
  if (fused) {
    lower_fused(flat, field, out);
    return out;
  }
  const int64_t w = out.world_size;
  const size_t nt = flat.tensors.size();
  out.tensor_offsets.resize(nt);
  if (concat) {
    int64_t pos = 0;
    for (size_t i = 0; i < nt; ++i) {
      const int64_t start = tensor_start(flat, i, pos, field, "which ends");
      out.tensor_offsets[i] = start;
      pos = add_or_fail(start, numel[i], field + ".tensors");
    }
    int64_t total;
    if (flat.total_elements == -1) {
      const int64_t g = std::gcd(w, flat.pad_multiple);
      const int64_t l = mul_or_fail(w / g, flat.pad_multiple, field + ".pad_multiple");
      total = round_up(pos, l, field + ".pad_multiple");
    } else {
      total = flat.total_elements;
      const std::string tf = field + ".total_elements";
      if (total < pos)
        fail(ErrorCode::kOutOfRange, tf,
             std::to_string(total) + " is below the end of the last tensor (" +
                 std::to_string(pos) + ")");
      if (total % w != 0)
        fail(ErrorCode::kInvalidArgument, tf,
             std::to_string(total) + " is not a multiple of the world size " + std::to_string(w));
      if (total % flat.pad_multiple != 0)
        fail(ErrorCode::kInvalidArgument, tf,
             std::to_string(total) + " is not a multiple of pad_multiple (" +
                 std::to_string(flat.pad_multiple) + ")");
    }
    out.shard_elements = total / w;
  } else {
    int64_t pos = 0;
    for (size_t i = 0; i < nt; ++i) {
      const int64_t part = numel[i] / w + (numel[i] % w != 0 ? 1 : 0);
      const int64_t start = round_up(pos, flat.align_elements, field + ".tensors");
      out.tensor_offsets[i] = start;
      pos = add_or_fail(start, part, field + ".tensors");
    }
    out.shard_elements = round_up(pos, flat.pad_multiple, field + ".pad_multiple");
  }
  out.shard_bytes = mul_or_fail(out.shard_elements, out.element_size, field + ".tensors");
  mul_or_fail(out.shard_bytes, w, field + ".tensors");  // the whole buffer's bytes fit too

  // The ranks holding a part of tensor i, [r0, r1), and for rank r the
  // tensor's element range [lo, hi) it holds and the element offset of lo in
  // its buffer: only those ranks are visited, so the work is the entries'.
  struct Part {
    int64_t lo, hi, at;
  };
  auto ranks_of = [&](size_t i) -> std::pair<int64_t, int64_t> {
    if (numel[i] == 0) return {0, 0};
    if (!concat) return {0, std::min<int64_t>(w, numel[i])};
    const int64_t s = out.shard_elements;
    return {out.tensor_offsets[i] / s, (out.tensor_offsets[i] + numel[i] - 1) / s + 1};
  };
  auto part_of = [&](size_t i, int64_t r) -> Part {
    if (concat) {
      const int64_t s0 = r * out.shard_elements, s1 = s0 + out.shard_elements;
      const int64_t a = std::max(s0, out.tensor_offsets[i]);
      const int64_t b = std::max(a, std::min(s1, out.tensor_offsets[i] + numel[i]));
      return {a - out.tensor_offsets[i], b - out.tensor_offsets[i], a - s0};
    }
    const int64_t part = numel[i] / w + (numel[i] % w != 0 ? 1 : 0);
    return {std::min(numel[i], r * part), std::min(numel[i], (r + 1) * part),
            out.tensor_offsets[i]};
  };
  // Bounded before anything is built: a few lines of spec (a large mesh,
  // many tensors) must not buy unbounded memory (docs/design.md §1.5).
  {
    int64_t bound = 0;
    for (size_t i = 0; i < nt; ++i) {
      const auto [r0, r1] = ranks_of(i);
      const int64_t rank = static_cast<int64_t>(flat.tensors[i].shape.size());
      bound += (r1 - r0) * std::max<int64_t>(1, 2 * rank - 1);
      if (bound > kMaxFlatEntries)
        fail(ErrorCode::kResourceExhausted, field + ".tensors",
             "the tensors' layouts would hold more than " + std::to_string(kMaxFlatEntries) +
                 " entries (boxes of ranks); split the flat layout");
    }
  }
  out.layouts.reserve(nt);
  for (size_t i = 0; i < nt; ++i) {
    const std::vector<int64_t>& shape = flat.tensors[i].shape;
    std::vector<LayoutEntry> entries;
    std::map<int64_t, std::pair<int32_t, int64_t>> where;  // entry device -> rank, byte offset
    const auto [r0, r1] = ranks_of(i);
    for (int64_t r = r0; r < r1; ++r) {
      const size_t ri = static_cast<size_t>(r);
      const Part pt = part_of(i, r);
      int64_t at = pt.at;
      int64_t slot = 0;
      for (const Box& b : flat_range_boxes(shape, pt.lo, pt.hi)) {
        const int64_t dev = flat.devices[ri] + slot * kFlatSlotStride;
        entries.push_back(LayoutEntry{dev, 0, b});
        where.emplace(dev, std::make_pair(static_cast<int32_t>(r), at * out.element_size));
        at += b.volume();
        ++slot;
      }
    }
    Layout l = Layout::from_boxes(shape, std::move(entries), 1, ReduceOp::kSum,
                                  field + ".tensors[" + std::to_string(i) + "]");
    std::vector<int32_t> ranks(l.num_entries());
    std::vector<int64_t> offsets(l.num_entries());
    for (size_t e = 0; e < l.num_entries(); ++e) {
      const auto& [rank, off] = where.at(l.device(e));
      ranks[e] = rank;
      offsets[e] = off;
    }
    out.layouts.push_back(std::move(l));
    out.entry_ranks.push_back(std::move(ranks));
    out.entry_offsets.push_back(std::move(offsets));
  }
  return out;
}

void add_flat_slots(Topology& topology, const FlatLowered& lowered, const std::string& field) {
  for (const Layout& l : lowered.layouts)
    for (size_t e = 0; e < l.num_entries(); ++e) {
      const int64_t id = l.device(e);
      if (flat_slot(id) == 0) continue;
      DeviceInfo info = topology.info(flat_physical_device(id));
      info.device = id;
      topology.add(info, field);
    }
}

namespace {

template <class Buf>
std::vector<Buf> views_impl(const FlatLowered& lowered, size_t tensor, std::span<const Buf> flat,
                            const std::string& field) {
  if (tensor >= lowered.layouts.size())
    fail(ErrorCode::kOutOfRange, "tensor",
         std::to_string(tensor) + " is not below " + std::to_string(lowered.layouts.size()));
  if (static_cast<int64_t>(flat.size()) != lowered.world_size)
    fail(ErrorCode::kInvalidArgument, field,
         std::to_string(flat.size()) + " flat buffers for a world size of " +
             std::to_string(lowered.world_size));
  for (size_t r = 0; r < flat.size(); ++r) {
    const std::string f = field + "[" + std::to_string(r) + "]";
    if (flat[r].data == nullptr && flat[r].bytes == 0) continue;  // held by another process
    if (flat[r].data == nullptr)
      fail(ErrorCode::kInvalidArgument, f,
           "null data for " + std::to_string(flat[r].bytes) +
               " bytes (give {null, 0} for a rank another process holds)");
    if (flat[r].bytes < lowered.shard_bytes)
      fail(ErrorCode::kInvalidArgument, f,
           std::to_string(flat[r].bytes) + " bytes, below the shard's " +
               std::to_string(lowered.shard_bytes));
  }
  const Layout& l = lowered.layouts[tensor];
  std::vector<Buf> out(l.num_entries());
  for (size_t e = 0; e < l.num_entries(); ++e) {
    const Buf& f = flat[static_cast<size_t>(lowered.entry_ranks[tensor][e])];
    if (f.data == nullptr) continue;  // empty view: the rank is not held here
    using Ptr = std::conditional_t<std::is_same_v<Buf, ConstBuffer>, const std::byte*, std::byte*>;
    out[e].data = static_cast<Ptr>(f.data) + lowered.entry_offsets[tensor][e];
    out[e].bytes = l.box(e).volume() * lowered.element_size;
  }
  return out;
}

}  // namespace

std::vector<ConstBuffer> flat_views(const FlatLowered& lowered, size_t tensor,
                                    std::span<const ConstBuffer> flat, const std::string& field) {
  return views_impl<ConstBuffer>(lowered, tensor, flat, field);
}

std::vector<MutableBuffer> flat_views(const FlatLowered& lowered, size_t tensor,
                                      std::span<const MutableBuffer> flat,
                                      const std::string& field) {
  return views_impl<MutableBuffer>(lowered, tensor, flat, field);
}

}  // namespace reshard
