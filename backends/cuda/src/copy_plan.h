// Host side of the fused copy kernels: turns a run_copies call (an ordered
// list of CopyOps, reshard/transport.h) into as few kernel launches as the
// order allows. Pure C++ (no CUDA), so it is tested on any machine.
//
// Order. CopyOps have sequential semantics: an op sees what earlier ops
// wrote (an identity fill before the reductions into it, reductions of
// summands in order, a store after them, an unpack reading staging before a
// pack overwrites it). A launch runs its Works concurrently, so the ops are
// cut into phases, greedily and in order: an op joins the current phase
// unless it writes memory the phase reads or writes, or reads memory the
// phase writes (exact element sets for boxes of the same buffer, see
// footprints_overlap; conservative byte spans otherwise). Each phase is at
// most three launches, its copies, its element-wise ops and its fused
// reductions (different register needs), which are independent of each
// other.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernel_body.h"
#include "reshard/transport.h"

namespace reshard::cuda_backend {

struct Launch {
  bool element = false;   // run_tile<true> (element kinds) or <false> (copies)
  bool multi = false;     // run_tile<true, true>: kReduceN Works only
  bool swizzled = false;  // run_tile<false, false, true>: swizzled copies only
  std::vector<Work> works;
  std::vector<int64_t> tile_start;  // works.size() + 1 entries
  // Empty, or the Work of each tile (tiles() entries), for launches of many
  // small Works (copy_plan.cc, index_tiles).
  std::vector<int32_t> tile_work;
  std::vector<SrcRef> sources;   // summands of its kReduceN Works
  std::vector<ScaleGrid> grids;  // scaled shards of its kBlockScales, kQuantise Works
  // Host side only: the last Work as narrow copies merged so far (see
  // copy_plan.cc, append_copy).
  struct Merge {
    int64_t count = 0;  // copies in the last Work (0: it is no mergeable copy)
    int64_t elem = 0;   // their element size
    CopyDesc base{};    // the first one's descriptor
    uintptr_t src = 0;  // the first one's start addresses
    uintptr_t dst = 0;
    int64_t src_step = 0;  // bytes from one copy's start to the next's
    int64_t dst_step = 0;
  } merge;
  int64_t tiles() const { return tile_start.empty() ? 0 : tile_start.back(); }
};

// Validates `ops` (kind, dtype, op, descriptor shape, null pointers) and
// plans the launches, in the order they must run. Empty ops are dropped.
// Throws Error(kInvalidArgument) naming the op ("run_copies: ops[3].desc:
// ..."). Thread-safe.
std::vector<Launch> plan_launches(std::span<const CopyOp> ops);

// Where each launch's Works, tile starts, tile index, summands and scaled
// shards sit in one descriptor buffer (the upload of a call's launches).
struct DescriptorPart {
  bool element;
  bool multi;
  bool swizzled;
  int works;
  int64_t tiles;
  size_t works_offset;
  size_t tiles_offset;
  size_t tile_work_offset;  // SIZE_MAX: the launch has no tile index
  size_t sources_offset;    // the launch's SrcRefs (kReduceN summands)
  size_t grids_offset;      // its ScaleGrids (kBlockScales, kQuantise)
};
struct Descriptors {
  std::vector<DescriptorPart> parts;  // one per launch, in order
  size_t bytes = 0;
};
Descriptors layout_descriptors(const std::vector<Launch>& launches);
// Writes the launches' descriptors at `host` (d.bytes) as laid out by d.
void write_descriptors(const std::vector<Launch>& launches, const Descriptors& d,
                       unsigned char* host);

// A byte span [lo, hi) one op reads or writes, for the whole-call check.
struct Span {
  uintptr_t lo;
  uintptr_t hi;
  bool write;
};
// The whole-call check of plan_launches: true when no write span meets
// another span (reads may meet reads), so that the call is one phase.
// Reorders `spans`.
bool writes_isolated(std::vector<Span>& spans);

// True for an op plan_launches drops: a copy or reduction of an empty box,
// a fill or store of no elements.
bool moves_nothing(const CopyOp& op);

// One side of a copy: the element set base + elem * (offset + Σ i_k
// stride_k), 0 <= i_k < extent_k (elements of `elem` bytes).
struct Footprint {
  uintptr_t base = 0;
  int64_t elem = 1;
  int32_t rank = 0;
  int64_t extent[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t offset = 0;
  uintptr_t lo = 0;  // byte span [lo, hi) covering every element
  uintptr_t hi = 0;
};

// Footprint of the source (src = true) or destination side of `desc`.
Footprint make_footprint(const CopyDesc& desc, bool src, const void* base, int64_t elem);
// A dense range of `bytes` bytes.
Footprint dense_footprint(const void* base, int64_t bytes);

// True when the two element sets share a byte. Exact when both describe
// boxes of row-major buffers that share an element grid (equal element
// sizes, bases congruent modulo it, strides nesting by divisibility);
// otherwise true whenever the byte spans overlap.
bool footprints_overlap(const Footprint& a, const Footprint& b);

}  // namespace reshard::cuda_backend
