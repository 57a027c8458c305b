#include "exec/schedule/exec_common.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "reshard/box_copy.h"
#include "reshard/error.h"

namespace reshard::exec_detail {

std::string buffer_name(size_t tensor, const char* side, size_t entry) {
  return "tensors[" + std::to_string(tensor) + "]." + side + "[" + std::to_string(entry) + "]";
}

void validate_buffers(const Plan& plan, std::span<const TensorBuffers> buffers, int32_t process) {
  const std::vector<TensorSpec>& tensors = plan.tensors();
  const Topology& topology = plan.topology();
  if (buffers.size() != tensors.size()) {
    fail(ErrorCode::kInvalidArgument, "buffers: " + std::to_string(buffers.size()) +
                                          " tensors given, the plan has " +
                                          std::to_string(tensors.size()));
  }
  const auto mine = [&](const Layout& layout, size_t e) {
    return process < 0 || topology.info(layout.device(e)).process == process;
  };
  // Sizes and null pointers, collecting the address range of every buffer.
  struct Range {
    uintptr_t lo;
    uintptr_t hi;
    size_t tensor;
    size_t entry;
    bool dst;
  };
  std::vector<Range> ranges;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& spec = tensors[t];
    const TensorBuffers& b = buffers[t];
    const int64_t elem = dtype_size(spec.dtype);
    for (int side = 0; side < 2; ++side) {
      const bool is_dst = side == 1;
      const char* name = is_dst ? "dst" : "src";
      const Layout& layout = is_dst ? spec.dst : spec.src;
      const size_t given = is_dst ? b.dst.size() : b.src.size();
      if (given != layout.num_entries()) {
        bool none_local = process >= 0 && given == 0;
        for (size_t e = 0; none_local && e < layout.num_entries(); ++e)
          none_local = !mine(layout, e);
        if (!none_local) {
          fail(ErrorCode::kInvalidArgument, "tensors[" + std::to_string(t) + "]." + name + ": " +
                                                std::to_string(given) +
                                                " buffers given, the layout has " +
                                                std::to_string(layout.num_entries()) + " entries");
        }
        continue;
      }
      for (size_t e = 0; e < given; ++e) {
        if (!mine(layout, e)) continue;
        const void* data = is_dst ? b.dst[e].data : b.src[e].data;
        const int64_t bytes = is_dst ? b.dst[e].bytes : b.src[e].bytes;
        const Box box = layout.box(e);
        const int64_t want = box.volume() * elem;
        if (bytes != want) {
          fail(ErrorCode::kInvalidArgument, buffer_name(t, name, e) + ": " + std::to_string(bytes) +
                                                " bytes given, box " + to_string(box) + " of " +
                                                std::string(dtype_name(spec.dtype)) + " needs " +
                                                std::to_string(want));
        }
        if (bytes > 0 && data == nullptr) {
          fail(ErrorCode::kInvalidArgument,
               buffer_name(t, name, e) + ": null data for " + std::to_string(bytes) + " bytes");
        }
        if (bytes > 0) {
          const auto lo = reinterpret_cast<uintptr_t>(data);
          ranges.push_back({lo, lo + static_cast<uintptr_t>(bytes), t, e, is_dst});
        }
      }
    }
  }
  // A destination may overlap nothing; sources may share memory. Sweep by
  // address: any overlapping pair is caught when its later-starting member
  // is visited, against the furthest-reaching earlier buffer (of any kind if
  // the member is a destination, among destinations otherwise).
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.lo != b.lo ? a.lo < b.lo : a.dst > b.dst;
  });
  const Range* reach_all = nullptr;
  const Range* reach_dst = nullptr;
  for (const Range& r : ranges) {
    const Range* other = r.dst ? reach_all : reach_dst;
    if (other != nullptr && other->hi > r.lo) {
      const Range& d = r.dst ? r : *other;
      const Range& o = r.dst ? *other : r;
      fail(ErrorCode::kInvalidArgument, buffer_name(d.tensor, "dst", d.entry) + ": overlaps " +
                                            buffer_name(o.tensor, o.dst ? "dst" : "src", o.entry) +
                                            " in memory");
    }
    if (reach_all == nullptr || r.hi > reach_all->hi) reach_all = &r;
    if (r.dst && (reach_dst == nullptr || r.hi > reach_dst->hi)) reach_dst = &r;
  }
}

void validate_pieces(const Plan& plan, const ProcessPart& part, const std::vector<Piece>& pieces,
                     const char* list, const std::vector<Message>* messages) {
  const std::vector<TensorSpec>& tensors = plan.tensors();
  // Each piece's stage: that of the message holding it (0 without one).
  std::vector<uint32_t> stage;
  if (messages) {
    for (const Message& m : *messages) {
      if (m.stage == 0) continue;
      if (stage.empty()) stage.assign(pieces.size(), 0);
      for (uint64_t k = m.first_piece; k < pieces.size() && k - m.first_piece < m.num_pieces; ++k)
        stage[k] = m.stage;
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    const uint32_t s = stage.empty() ? 0 : stage[i];
    const auto where = [&] {
      return "plan: part " + std::to_string(part.process) + " " + list + "[" + std::to_string(i) +
             "]: ";
    };
    if (p.tensor >= tensors.size() ||
        p.src_entry >= (s == 0 ? tensors[p.tensor].src : tensors[p.tensor].dst).num_entries() ||
        p.dst_entry >= tensors[p.tensor].dst.num_entries()) {
      fail(ErrorCode::kInvalidArgument, where() + "tensor or entry index out of range");
    }
    if (p.region != kOverlapRegion && p.region >= part.regions.size()) {
      fail(ErrorCode::kInvalidArgument, where() + "region index out of range");
    }
    if (s > 0 && p.region == kOverlapRegion) {
      fail(ErrorCode::kInvalidArgument,
           where() + "a piece of stage " + std::to_string(s) + " names no region");
    }
    const Box region = plan.region(part, p);
    const Box src = plan.source_box(p, s);
    const Box dst = tensors[p.tensor].dst.box(p.dst_entry);
    if (region.rank != src.rank || region.rank != dst.rank ||
        (!region.empty() && (!src.contains(region) || !dst.contains(region)))) {
      fail(ErrorCode::kInvalidArgument, where() + "region " + to_string(region) +
                                            " is not inside source box " + to_string(src) +
                                            " and destination box " + to_string(dst));
    }
  }
}

}  // namespace reshard::exec_detail
