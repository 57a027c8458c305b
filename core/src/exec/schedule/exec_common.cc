#include "exec/schedule/exec_common.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include "reshard/block_scales.h"
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
  const std::vector<uint8_t> scales = scale_tensor_flags(tensors);
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& spec = tensors[t];
    const TensorBuffers& b = buffers[t];
    for (int side = 0; side < 2; ++side) {
      const bool is_dst = side == 1;
      // Block scales: the executor computes a scale tensor's source
      // (block_scales.h); buffers given for it are checked and not read.
      if (!is_dst && scales[t] && b.src.empty()) continue;
      // A destination holds the destination's dtype (a cast: TensorSpec::dst_dtype).
      const DType dtype = is_dst ? out_dtype(spec) : spec.dtype;
      const int64_t elem = dtype_size(dtype);
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
                                                std::string(dtype_name(dtype)) + " needs " +
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
                     const char* list, const std::vector<Message>* messages,
                     const std::vector<uint8_t>* skip) {
  const std::vector<TensorSpec>& tensors = plan.tensors();
  // Each piece's message (none: a local piece, stage 0).
  constexpr uint32_t kNone = 0xffffffffu;
  std::vector<uint32_t> message;
  if (messages) {
    message.assign(pieces.size(), kNone);
    for (size_t i = 0; i < messages->size(); ++i) {
      const Message& m = (*messages)[i];
      for (uint64_t k = m.first_piece; k < pieces.size() && k - m.first_piece < m.num_pieces; ++k)
        message[k] = static_cast<uint32_t>(i);
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (skip != nullptr && i < skip->size() && (*skip)[i]) continue;
    const Piece& p = pieces[i];
    const Message* m = message.empty() || message[i] == kNone ? nullptr : &(*messages)[message[i]];
    const uint32_t s = m ? m->stage : 0;
    const auto where = [&] {
      return "plan: part " + std::to_string(part.process) + " " + list + "[" + std::to_string(i) +
             "]: ";
    };
    const bool src_scratch = p.src_entry == kScratchEntry;
    const bool dst_scratch = p.dst_entry == kScratchEntry;
    if (p.tensor >= tensors.size() ||
        (!src_scratch &&
         p.src_entry >=
             (reads_source(p, s) ? tensors[p.tensor].src : tensors[p.tensor].dst).num_entries()) ||
        (!dst_scratch && p.dst_entry >= tensors[p.tensor].dst.num_entries())) {
      fail(ErrorCode::kInvalidArgument, where() + "tensor or entry index out of range");
    }
    if (p.region != kOverlapRegion && p.region >= part.regions.size()) {
      fail(ErrorCode::kInvalidArgument, where() + "region index out of range");
    }
    if (s > 0 && p.region == kOverlapRegion) {
      fail(ErrorCode::kInvalidArgument,
           where() + "a piece of stage " + std::to_string(s) + " names no region");
    }
    if (src_scratch || dst_scratch) {
      if (p.region == kOverlapRegion) {
        fail(ErrorCode::kInvalidArgument, where() + "a piece naming a scratch names no region");
      }
      // A tensor whose source is not partial: copy staging (plan.h,
      // Scratch), written in stage 0, read into destination entries.
      if (!tensors[p.tensor].src.partial() &&
          ((dst_scratch && (s > 0 || src_scratch)) || has_cast(tensors[p.tensor]) ||
           has_block_scales(tensors[p.tensor]))) {
        fail(ErrorCode::kInvalidArgument,
             where() + "names a staging scratch of tensor " + std::to_string(p.tensor) +
                 " other than as a copy from a source entry in stage 0 or into a destination "
                 "entry (or the tensor has a cast or block scales)");
      }
      if (src_scratch && s == 0) {
        fail(ErrorCode::kInvalidArgument, where() + "a piece of stage 0 reads a scratch");
      }
      if (src_scratch && dst_scratch && m == nullptr) {
        fail(ErrorCode::kInvalidArgument, where() + "a local piece reads and writes a scratch");
      }
    }
    // A piece naming no region (stage 0, no scratch: checked above) moves
    // the overlap of its source and destination entries' boxes
    // (Plan::region), which lies inside both.
    if (p.region == kOverlapRegion) continue;
    // The devices that read and write it: the message's, or for a local
    // piece the one device of its source entry.
    const int64_t local_device = src_scratch || m ? 0 : tensors[p.tensor].src.device(p.src_entry);
    const int64_t src_device = m ? m->src_device : local_device;
    const int64_t dst_device = m ? m->dst_device : local_device;
    const Box region = plan.region(part, p);
    Box src;
    Box dst;
    // A part holds the scratch its pieces write and its sends read: a
    // received piece's source scratch is the sender's, a sent piece's
    // destination scratch the receiver's (checked by their parts).
    const bool sent = messages != nullptr && std::string_view(list) == "send_pieces";
    const bool received = messages != nullptr && !sent;
    try {
      src = received && src_scratch ? region : plan.source_box(part, p, s, src_device);
      dst = sent && dst_scratch ? region : plan.destination_box(part, p, dst_device);
    } catch (const Error& e) {
      fail(ErrorCode::kInvalidArgument, where() + e.what());
    }
    if (region.rank != src.rank || region.rank != dst.rank ||
        (!region.empty() && (!src.contains(region) || !dst.contains(region)))) {
      fail(ErrorCode::kInvalidArgument, where() + "region " + to_string(region) +
                                            " is not inside source box " + to_string(src) +
                                            " and destination box " + to_string(dst));
    }
  }
}

}  // namespace reshard::exec_detail
