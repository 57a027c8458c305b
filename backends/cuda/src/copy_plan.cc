#include "copy_plan.h"

#include <algorithm>
#include <array>
#include <climits>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "reshard/box_copy.h"
#include "reshard/error.h"

namespace reshard::cuda_backend {
namespace {

// Bounds on the overlap search per op: beyond them an op conservatively
// starts a new phase (correct, one launch more).
constexpr int kMaxCandidates = 256;  // general (footprints_overlap) tests
constexpr int kMaxScanned = 16384;   // index entries looked at

std::string at(size_t i) { return "run_copies: ops[" + std::to_string(i) + "]"; }

int64_t pow2_at_least(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Makes rank 0 a rank-1 single element and checks what the kernels rely on:
// rank within bounds, non-negative extents, offsets and strides, unit
// innermost strides, destinations that never repeat an element.
CopyDesc checked_desc(const CopyDesc& in, size_t i) {
  CopyDesc d = in;
  if (d.rank < 0 || d.rank > kMaxRank) {
    fail(ErrorCode::kInvalidArgument, at(i) + ".desc.rank: " + std::to_string(d.rank) +
                                          " is outside [0, " + std::to_string(kMaxRank) + "]");
  }
  if (d.rank == 0) {
    d.rank = 1;
    d.extent[0] = 1;
    d.src_stride[0] = 1;
    d.dst_stride[0] = 1;
  }
  if (d.src_offset < 0 || d.dst_offset < 0) {
    fail(ErrorCode::kInvalidArgument, at(i) + ".desc: negative offset");
  }
  for (int k = 0; k < d.rank; ++k) {
    if (d.extent[k] < 0) {
      fail(ErrorCode::kInvalidArgument, at(i) + ".desc.extent[" + std::to_string(k) + "] < 0");
    }
    if (d.src_stride[k] < 0 || d.dst_stride[k] < 0) {
      fail(ErrorCode::kInvalidArgument, at(i) + ".desc.stride[" + std::to_string(k) + "] < 0");
    }
  }
  const int last = d.rank - 1;
  if (d.src_stride[last] != 1 || d.dst_stride[last] != 1) {
    fail(ErrorCode::kInvalidArgument,
         at(i) + ".desc: the innermost dimension must have unit strides on both sides");
  }
  for (int k = 0; k < last; ++k) {
    if (d.extent[k] > 1 && d.extent[k + 1] > 0 &&
        d.dst_stride[k] < d.dst_stride[k + 1] * d.extent[k + 1]) {
      fail(ErrorCode::kInvalidArgument, at(i) + ".desc.dst_stride[" + std::to_string(k) +
                                            "]: destination elements would repeat");
    }
  }
  return d;
}

bool empty_desc(const CopyDesc& d) {
  for (int k = 0; k < d.rank; ++k)
    if (d.extent[k] == 0) return true;
  return false;
}

CopyDesc linear_desc(int64_t count) {
  CopyDesc d{};
  d.rank = 1;
  d.extent[0] = count;
  d.src_stride[0] = 1;
  d.dst_stride[0] = 1;
  return d;
}

// Highest element offset of one side, checked for overflow.
int64_t last_offset(const CopyDesc& d, bool src, size_t i) {
  int64_t v = src ? d.src_offset : d.dst_offset;
  for (int k = 0; k < d.rank; ++k) {
    int64_t t = 0;
    if (__builtin_mul_overflow(d.extent[k] - 1, src ? d.src_stride[k] : d.dst_stride[k], &t) ||
        __builtin_add_overflow(v, t, &v)) {
      fail(ErrorCode::kInvalidArgument, at(i) + ".desc: offsets overflow 64 bits");
    }
  }
  return v;
}

// ---------------------------------------------------------------- phases

// Budget of one op's overlap search: beyond it the op conservatively starts
// a new phase (correct, one launch more).
struct Budget {
  int candidates = kMaxCandidates;  // general overlap tests
  int scanned = kMaxScanned;        // index entries looked at
};

int64_t footprint_elements(const Footprint& f) {
  int64_t v = 1;
  for (int k = 0; k < f.rank; ++k) v *= f.extent[k];
  return v;
}

// Every byte of the span belongs to the footprint.
bool dense(const Footprint& f) {
  return f.hi - f.lo == static_cast<uintptr_t>(footprint_elements(f) * f.elem);
}

// The footprint as a box in its own strides' coordinates: lo[k] per
// dimension (extents are the footprint's). False when the strides do not
// nest or the box wraps (then it is indexed by its byte span only).
bool own_box(const Footprint& f, int64_t* lo) {
  if (f.lo >= f.hi || f.rank < 1 || f.stride[f.rank - 1] != 1) return false;
  int64_t rem = f.offset;
  for (int k = 0; k < f.rank; ++k) {
    if (f.stride[k] <= 0) return false;
    if (k > 0) {
      if (f.stride[k - 1] % f.stride[k] != 0) return false;
      const int64_t radix = f.stride[k - 1] / f.stride[k];
      lo[k] = rem / f.stride[k];
      rem %= f.stride[k];
      if (lo[k] + f.extent[k] > radix) return false;
    } else {
      lo[0] = rem / f.stride[0];
      rem %= f.stride[0];
    }
  }
  return true;
}

// The footprints of one phase's reads (or writes). Footprints that are
// boxes of one buffer with the same strides (the pieces a shard receives
// from many senders, the summands reduced into one accumulator) form a group
// whose members are indexed by their innermost coordinate and compared as
// boxes, so testing a piece against hundreds of interleaved ones costs a
// few comparisons; groups and other footprints are found by byte span.
class FootprintIndex {
 public:
  // Some footprint shares a byte with f (or the budget ran out).
  bool hits(const Footprint& f, Budget& budget) const {
    if (f.lo >= f.hi || spans_.empty()) return false;
    int64_t lo[kMaxRank];
    const Group* own = nullptr;
    if (!dense(f) && own_box(f, lo)) {
      const auto it = group_of_.find(key_of(f));
      if (it != group_of_.end()) {
        own = &groups_[it->second];
        if (own->hits(f, lo, budget)) return true;
      }
    }
    auto it = spans_.lower_bound(f.lo >= max_span_ ? f.lo - max_span_ : 0);
    for (; it != spans_.end() && it->first < f.hi; ++it) {
      if (--budget.scanned < 0) return true;
      const Entry& e = it->second;
      if (e.hi <= f.lo) continue;
      if (e.group) {
        const Group& g = groups_[e.index];
        if (&g == own) continue;
        if (g.hits_by_span(f, budget)) return true;
      } else {
        if (--budget.candidates < 0) return true;
        if (footprints_overlap(loose_[e.index], f)) return true;
      }
    }
    return false;
  }

  void add(const Footprint& f) {
    if (f.lo >= f.hi) return;
    int64_t lo[kMaxRank];
    // Dense footprints (staging, whole buffers) are exact by byte span.
    if (dense(f) || !own_box(f, lo)) {
      loose_.push_back(f);
      insert_span(f.lo, {f.hi, false, loose_.size() - 1});
      return;
    }
    const Key key = key_of(f);
    auto [it, fresh] = group_of_.emplace(key, groups_.size());
    if (fresh) groups_.emplace_back();
    Group& g = groups_[it->second];
    g.add(f, lo);
    // Refresh the group's entry in the span index.
    if (!fresh) spans_.erase(g.entry);
    g.entry = insert_span(g.lo, {g.hi, true, it->second});
  }

  void clear() {
    spans_.clear();
    max_span_ = 0;
    loose_.clear();
    groups_.clear();
    group_of_.clear();
  }

 private:
  struct Key {
    uintptr_t base;
    int64_t elem;
    int32_t rank;
    std::array<int64_t, kMaxRank> stride;
    auto operator<=>(const Key&) const = default;
  };
  struct Entry {
    uintptr_t hi;
    bool group;
    size_t index;  // into groups_ or loose_
  };
  struct Member {
    Footprint f;
    std::array<int64_t, kMaxRank> lo;
  };
  struct Group {
    std::vector<Member> members;
    std::multimap<int64_t, size_t> by_inner;  // innermost coordinate -> member
    int64_t max_inner = 0;
    std::multimap<uintptr_t, size_t> by_span;
    uintptr_t max_span = 0;
    uintptr_t lo = UINTPTR_MAX;
    uintptr_t hi = 0;
    std::multimap<uintptr_t, Entry>::iterator entry;

    void add(const Footprint& f, const int64_t* lo_in) {
      Member m;
      m.f = f;
      std::copy(lo_in, lo_in + f.rank, m.lo.begin());
      const int last = f.rank - 1;
      members.push_back(m);
      by_inner.emplace(m.lo[last], members.size() - 1);
      max_inner = std::max(max_inner, f.extent[last]);
      by_span.emplace(f.lo, members.size() - 1);
      max_span = std::max(max_span, f.hi - f.lo);
      lo = std::min(lo, f.lo);
      hi = std::max(hi, f.hi);
    }

    // Exact: f is a box of this group's coordinates.
    bool hits(const Footprint& f, const int64_t* flo, Budget& budget) const {
      const int last = f.rank - 1;
      const int64_t a = flo[last];
      const int64_t b = a + f.extent[last];
      auto it = by_inner.lower_bound(a >= max_inner ? a - max_inner : INT64_MIN);
      for (; it != by_inner.end() && it->first < b; ++it) {
        if (--budget.scanned < 0) return true;
        const Member& m = members[it->second];
        bool overlap = true;
        for (int k = 0; k < f.rank && overlap; ++k) {
          overlap = m.lo[k] < flo[k] + f.extent[k] && flo[k] < m.lo[k] + m.f.extent[k];
        }
        if (overlap) return true;
      }
      return false;
    }

    bool hits_by_span(const Footprint& f, Budget& budget) const {
      auto it = by_span.lower_bound(f.lo >= max_span ? f.lo - max_span : 0);
      for (; it != by_span.end() && it->first < f.hi; ++it) {
        if (--budget.scanned < 0) return true;
        const Footprint& m = members[it->second].f;
        if (m.hi <= f.lo) continue;
        if (--budget.candidates < 0) return true;
        if (footprints_overlap(m, f)) return true;
      }
      return false;
    }
  };

  static Key key_of(const Footprint& f) {
    Key k{f.base, f.elem, f.rank, {}};
    std::copy(f.stride, f.stride + f.rank, k.stride.begin());
    return k;
  }

  std::multimap<uintptr_t, Entry>::iterator insert_span(uintptr_t lo, const Entry& e) {
    max_span_ = std::max(max_span_, e.hi - lo);
    return spans_.emplace(lo, e);
  }

  std::multimap<uintptr_t, Entry> spans_;  // groups and loose footprints by byte span
  uintptr_t max_span_ = 0;
  std::vector<Footprint> loose_;
  std::vector<Group> groups_;
  std::map<Key, size_t> group_of_;
};

class Phase {
 public:
  bool conflicts(const std::vector<Footprint>& reads, const std::vector<Footprint>& writes) const {
    Budget budget;
    for (const Footprint& w : writes) {
      if (writes_.hits(w, budget) || reads_.hits(w, budget)) return true;
    }
    for (const Footprint& r : reads) {
      if (writes_.hits(r, budget)) return true;
    }
    return false;
  }

  void add(const std::vector<Footprint>& reads, const std::vector<Footprint>& writes) {
    for (const Footprint& f : reads) reads_.add(f);
    for (const Footprint& f : writes) writes_.add(f);
  }

  void clear() {
    reads_.clear();
    writes_.clear();
  }

 private:
  FootprintIndex reads_;
  FootprintIndex writes_;
};

// --------------------------------------------------------------- works

// Sets `w` (every field: the descriptor copied, the rest cleared first) in
// place, rather than a Work returned and copied, cleared whole before
// (two 264-byte block operations per op).
void base_work(Work& w, WorkKind kind, const CopyDesc& d, const void* src, void* dst,
               int32_t src_size, int32_t dst_size) {
  static_assert(std::is_trivially_copyable_v<Work> && std::is_standard_layout_v<Work>);
  static_assert(offsetof(Work, desc) == 0 && offsetof(Work, src) >= sizeof(CopyDesc));
  std::memcpy(&w.desc, &d, sizeof(CopyDesc));
  std::memset(reinterpret_cast<unsigned char*>(&w) + sizeof(CopyDesc), 0,
              sizeof(Work) - sizeof(CopyDesc));
  w.kind = static_cast<int32_t>(kind);
  w.src = static_cast<const unsigned char*>(src);
  w.dst = static_cast<unsigned char*>(dst);
  w.src_size = src_size;
  w.dst_size = dst_size;
  w.runs = copy_desc_runs(d);
  w.run_len = copy_desc_run_length(d);
  if (src != nullptr && reinterpret_cast<uintptr_t>(src) % static_cast<uintptr_t>(src_size) == 0) {
    w.flags |= kSrcAligned;
  }
  if (reinterpret_cast<uintptr_t>(dst) % static_cast<uintptr_t>(dst_size) == 0) {
    w.flags |= kDstAligned;
  }
}

// Units and thread groups of a byte copy: runs longer than a chunk are cut
// into chunks for a whole block; shorter runs get the smallest group that
// moves at most four 16-byte units per thread.
void shape_copy(Work& w) {
  const int64_t run_bytes = w.run_len * w.src_size;
  if (run_bytes > kCopyChunkBytes) {
    w.chunk = kCopyChunkBytes;
    w.chunks_per_run = ceil_div(run_bytes, kCopyChunkBytes);
    w.group = kThreads;
  } else {
    w.chunk = std::max<int64_t>(run_bytes, 1);
    w.chunks_per_run = 1;
    w.group = static_cast<int32_t>(
        std::min<int64_t>(kThreads, pow2_at_least(ceil_div(ceil_div(run_bytes, 16), 4))));
  }
  w.units = w.runs * w.chunks_per_run;
}

// The same for element-wise kinds, in elements (up to 16 per thread), a
// run longer than `chunk` elements in units of `chunk`.
void shape_elements(Work& w, int64_t chunk = kElementChunk) {
  if (w.run_len > chunk) {
    w.chunk = chunk;
    w.chunks_per_run = ceil_div(w.run_len, chunk);
    w.group = kThreads;
  } else {
    w.chunk = std::max<int64_t>(w.run_len, 1);
    w.chunks_per_run = 1;
    w.group =
        static_cast<int32_t>(std::min<int64_t>(kThreads, pow2_at_least(ceil_div(w.run_len, 16))));
  }
  w.units = w.runs * w.chunks_per_run;
}

// Elements of one unit of a long reduction (kReduce, kReduceN): 32 KiB of
// each summand, so that a block's fixed cost per unit (finding its Work,
// the run's offsets, the summands' pointers) is paid over 8 vectors a
// thread, not 2 (bf16 partial sums at 0.65 of the memory bound on the H200
// with 4,096-element units).
int64_t reduce_chunk(int64_t elem_size) {
  return std::max<int64_t>(kElementChunk, 32768 / std::max<int64_t>(elem_size, 1));
}

// The byte span of one side of `d` (make_footprint's lo and hi).
std::pair<uintptr_t, uintptr_t> span_of(const CopyDesc& d, bool src, const void* base,
                                        int64_t elem) {
  const auto b = reinterpret_cast<uintptr_t>(base);
  const int64_t offset = src ? d.src_offset : d.dst_offset;
  int64_t last = offset;
  bool empty = false;
  for (int k = 0; k < d.rank; ++k) {
    if (d.extent[k] == 0) empty = true;
    last += (d.extent[k] - 1) * (src ? d.src_stride[k] : d.dst_stride[k]);
  }
  const uintptr_t lo = b + static_cast<uintptr_t>(offset * elem);
  return {lo, empty ? lo : b + static_cast<uintptr_t>((last + 1) * elem)};
}

struct Planned {
  Work work;
  // What the op reads and writes: footprints, or for the whole-call check
  // their byte spans alone, appended to *spans_only (the call's spans: a
  // planned op adds them once it cannot be dropped any more).
  std::vector<Span>* spans_only = nullptr;
  std::vector<Footprint> reads;
  std::vector<Footprint> writes;
  void add(bool write, const CopyDesc& d, bool src, const void* base, int64_t elem) {
    if (spans_only != nullptr) {
      const auto [lo, hi] = span_of(d, src, base, elem);
      spans_only->push_back({lo, hi, write});
      return;
    }
    (write ? writes : reads).push_back(make_footprint(d, src, base, elem));
  }
  void add_dense(bool write, const void* base, int64_t bytes) {
    if (spans_only != nullptr) {
      const auto lo = reinterpret_cast<uintptr_t>(base);
      spans_only->push_back({lo, lo + static_cast<uintptr_t>(bytes), write});
      return;
    }
    (write ? writes : reads).push_back(dense_footprint(base, bytes));
  }
  std::vector<SrcRef> sources;   // kReduceN
  std::vector<ScaleGrid> grids;  // kBlockScales, kQuantise: one
};

// Validates the scaled shard of a kBlockScales or kQuantise op (dtypes,
// box, block) and describes it in `g` (without its scales); returns the
// number of blocks the shard touches.
int64_t scale_grid(const CopyOp& op, size_t i, ScaleGrid& g) {
  if (op.shard == nullptr) {
    fail(ErrorCode::kInvalidArgument,
         at(i) + ".shard: null (a block-scales or quantise op points to its scaled shard)");
  }
  const CopyOp::Shard& sh = *op.shard;
  if (op.dtype != DType::kF32 && op.dtype != DType::kBF16 && op.dtype != DType::kF16) {
    fail(ErrorCode::kInvalidArgument, at(i) +
                                          ".dtype: block scales need an f32, bf16 or f16 "
                                          "source, not " +
                                          std::string(dtype_name(op.dtype)));
  }
  if (op.to_dtype != DType::kF8E4M3 && op.to_dtype != DType::kF8E5M2) {
    fail(ErrorCode::kInvalidArgument,
         at(i) + ".to_dtype: block scales need an f8e4m3 or f8e5m2 destination, not value " +
             std::to_string(static_cast<int32_t>(op.to_dtype)));
  }
  if (sh.scale_dtype != DType::kF32 && sh.scale_dtype != DType::kE8M0) {
    fail(ErrorCode::kInvalidArgument, at(i) + ".shard.scale_dtype: f32 or e8m0, not value " +
                                          std::to_string(static_cast<int32_t>(sh.scale_dtype)));
  }
  if (sh.box.rank < 1 || sh.box.rank > kMaxRank) {
    fail(ErrorCode::kInvalidArgument,
         at(i) + ".shard.box: rank " + std::to_string(sh.box.rank) + " is not in [1, 8]");
  }
  g.rank = sh.box.rank;
  g.scale_dtype = static_cast<int32_t>(sh.scale_dtype);
  int64_t blocks = 1;
  for (int d = 0; d < g.rank; ++d) {
    if (sh.block[d] < 1) {
      fail(ErrorCode::kInvalidArgument, at(i) + ".shard.block[" + std::to_string(d) + "]: below 1");
    }
    if (sh.box.lo[d] < 0 || sh.box.hi[d] < sh.box.lo[d]) {
      fail(ErrorCode::kInvalidArgument, at(i) + ".shard.box: dim " + std::to_string(d) +
                                            " is not a range of non-negative indices");
    }
    g.extent[d] = sh.box.extent(d);
    g.lo[d] = sh.box.lo[d];
    g.block[d] = sh.block[d];
    g.blocks_lo[d] = sh.box.lo[d] / sh.block[d];
    g.blocks_extent[d] =
        sh.box.hi[d] > sh.box.lo[d] ? ceil_div(sh.box.hi[d], sh.block[d]) - g.blocks_lo[d] : 0;
    blocks *= g.blocks_extent[d];
  }
  if (sh.scale_dtype == DType::kE8M0) {
    for (int d = 0; d + 1 < g.rank; ++d) {
      if (sh.block[d] != 1) {
        fail(ErrorCode::kInvalidArgument,
             at(i) + ".shard.block[" + std::to_string(d) + "]: MXFP8 blocks are [1, ..., 1, 32]");
      }
    }
  }
  return blocks;
}

// Validates op i and describes it as a Work with its footprints; false for
// an op that moves nothing.
bool plan_op(const CopyOp& op, size_t i, Planned& out) {
  if (!dtype_valid(static_cast<int32_t>(op.dtype))) {
    fail(ErrorCode::kInvalidArgument,
         at(i) + ".dtype: invalid value " + std::to_string(static_cast<int32_t>(op.dtype)));
  }
  const int64_t es = dtype_size(op.dtype);
  const int64_t as = acc_size(op.dtype);
  const auto check_op = [&] {
    if (op.op != ReduceOp::kSum && op.op != ReduceOp::kMax && op.op != ReduceOp::kMin) {
      fail(ErrorCode::kInvalidArgument,
           at(i) + ".op: invalid value " + std::to_string(static_cast<int32_t>(op.op)));
    }
  };
  const auto check_count = [&] {
    if (op.count < 0) fail(ErrorCode::kInvalidArgument, at(i) + ".count: negative");
    return op.count > 0;
  };
  const auto need = [&](const void* p, const char* field) {
    if (p == nullptr) fail(ErrorCode::kInvalidArgument, at(i) + "." + field + ": null");
  };
  const auto aligned_to = [&](const void* p, int64_t a, const char* field) {
    if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(a) != 0) {
      fail(ErrorCode::kInvalidArgument,
           at(i) + "." + field + ": not aligned to its " + std::to_string(a) + "-byte elements");
    }
  };
  out.reads.clear();
  out.writes.clear();
  out.grids.clear();
  switch (op.kind) {
    case CopyOp::Kind::kCopy:
    case CopyOp::Kind::kReduce: {
      const bool reduce = op.kind == CopyOp::Kind::kReduce;
      if (reduce) check_op();
      const CopyDesc d = checked_desc(op.desc, i);
      if (empty_desc(d)) return false;
      need(op.src, "src");
      need(op.dst, "dst");
      last_offset(d, true, i);
      last_offset(d, false, i);
      const int64_t ds = reduce ? as : es;
      base_work(out.work, reduce ? WorkKind::kReduce : WorkKind::kCopy, d, op.src, op.dst,
                static_cast<int32_t>(es), static_cast<int32_t>(ds));
      out.work.dtype = static_cast<int32_t>(op.dtype);
      out.work.op = static_cast<int32_t>(op.op);
      out.add(false, d, true, op.src, es);
      out.add(true, d, false, op.dst, ds);
      if (reduce) {
        shape_elements(out.work, reduce_chunk(es));
      } else {
        shape_copy(out.work);
      }
      return true;
    }
    case CopyOp::Kind::kCast: {
      // A pack or unpack converting elements (a cast in flight).
      if (!cast_supported(op.dtype, op.to_dtype)) {
        fail(ErrorCode::kInvalidArgument, at(i) + ".to_dtype: no cast from " +
                                              std::string(dtype_name(op.dtype)) + " to value " +
                                              std::to_string(static_cast<int32_t>(op.to_dtype)));
      }
      const CopyDesc d = checked_desc(op.desc, i);
      if (empty_desc(d)) return false;
      need(op.src, "src");
      need(op.dst, "dst");
      last_offset(d, true, i);
      last_offset(d, false, i);
      const int64_t ts = dtype_size(op.to_dtype);
      base_work(out.work, WorkKind::kCast, d, op.src, op.dst, static_cast<int32_t>(es),
                static_cast<int32_t>(ts));
      out.work.dtype = static_cast<int32_t>(op.dtype);
      out.work.to_dtype = static_cast<int32_t>(op.to_dtype);
      out.add(false, d, true, op.src, es);
      out.add(true, d, false, op.dst, ts);
      shape_elements(out.work);
      return true;
    }
    case CopyOp::Kind::kBlockScales:
    case CopyOp::Kind::kQuantise: {
      // Block scales of a source shard (reshard/quantise_grid.h).
      const bool scales = op.kind == CopyOp::Kind::kBlockScales;
      ScaleGrid g{};
      const int64_t blocks = scale_grid(op, i, g);
      const int64_t ss = dtype_size(op.shard->scale_dtype);
      if (scales) {
        if (blocks == 0) return false;
        need(op.src, "src");
        need(op.dst, "dst");
        aligned_to(op.dst, ss, "dst");
        // One unit per block: runs of one element, a thread each.
        CopyDesc d{};
        d.rank = 2;
        d.extent[0] = blocks;
        d.extent[1] = 1;
        d.src_stride[0] = d.src_stride[1] = 1;
        d.dst_stride[0] = d.dst_stride[1] = 1;
        base_work(out.work, WorkKind::kBlockScales, d, op.src, op.dst, static_cast<int32_t>(es),
                  static_cast<int32_t>(ss));
        out.add_dense(false, op.src, op.shard->box.volume() * es);
        out.add_dense(true, op.dst, blocks * ss);
      } else {
        const CopyDesc d = checked_desc(op.desc, i);
        if (empty_desc(d)) return false;
        need(op.src, "src");
        need(op.dst, "dst");
        need(op.shard->scales, "shard.scales");
        aligned_to(op.shard->scales, ss, "shard.scales");
        last_offset(d, false, i);
        if (last_offset(d, true, i) >= op.shard->box.volume()) {
          fail(ErrorCode::kInvalidArgument, at(i) + ".desc: reads past the shard (" +
                                                std::to_string(op.shard->box.volume()) +
                                                " elements)");
        }
        base_work(out.work, WorkKind::kQuantise, d, op.src, op.dst, static_cast<int32_t>(es), 1);
        out.add(false, d, true, op.src, es);
        out.add_dense(false, op.shard->scales, blocks * ss);
        out.add(true, d, false, op.dst, 1);
        g.scales = static_cast<const unsigned char*>(op.shard->scales);
      }
      out.work.dtype = static_cast<int32_t>(op.dtype);
      out.work.to_dtype = static_cast<int32_t>(op.to_dtype);
      out.grids.push_back(g);
      shape_elements(out.work);
      return true;
    }
    case CopyOp::Kind::kFillAcc:
    case CopyOp::Kind::kFillElements: {
      check_op();
      if (!check_count()) return false;
      need(op.dst, "dst");
      const bool acc = op.kind == CopyOp::Kind::kFillAcc;
      const int64_t size = acc ? as : es;
      // The identity's bytes, computed by the host core (little endian).
      alignas(8) unsigned char value[8] = {};
      if (acc) {
        fill_identity(op.dtype, op.op, value, 1);
      } else {
        fill_identity_elements(op.dtype, op.op, value, 1);
      }
      base_work(out.work, WorkKind::kFill, linear_desc(op.count), nullptr, op.dst,
                static_cast<int32_t>(size), static_cast<int32_t>(size));
      std::memcpy(&out.work.pattern, value, 8);
      out.add_dense(true, op.dst, op.count * size);
      shape_elements(out.work);
      return true;
    }
    case CopyOp::Kind::kStore: {
      if (!check_count()) return false;
      need(op.src, "src");
      need(op.dst, "dst");
      const CopyDesc d = linear_desc(op.count);
      if (op.divisor < 1) {
        fail(ErrorCode::kInvalidArgument,
             at(i) + ".divisor: " + std::to_string(op.divisor) + " is below 1");
      }
      if (op.divisor > 1 && !dtype_is_float(op.dtype)) {
        fail(ErrorCode::kInvalidArgument,
             at(i) + ".divisor: a mean needs a floating-point dtype, not " +
                 std::string(dtype_name(op.dtype)));
      }
      if (acc_is_elem(op.dtype) && op.divisor == 1) {
        // store is the identity on these types: a plain copy.
        base_work(out.work, WorkKind::kCopy, d, op.src, op.dst, static_cast<int32_t>(es),
                  static_cast<int32_t>(es));
        shape_copy(out.work);
      } else {
        base_work(out.work, WorkKind::kStore, d, op.src, op.dst, static_cast<int32_t>(as),
                  static_cast<int32_t>(es));
        out.work.dtype = static_cast<int32_t>(op.dtype);
        out.work.divisor = op.divisor;
        shape_elements(out.work);
      }
      out.add_dense(false, op.src, op.count * as);
      out.add_dense(true, op.dst, op.count * es);
      return true;
    }
  }
  fail(ErrorCode::kInvalidArgument,
       at(i) + ".kind: invalid value " + std::to_string(static_cast<int32_t>(op.kind)));
}

void append_work(Launch& l, const Work& w) {
  if (l.tile_start.empty()) l.tile_start.push_back(0);
  const int64_t per_tile = kThreads / w.group;
  l.works.push_back(w);
  l.tile_start.push_back(l.tile_start.back() + ceil_div(w.units, per_tile));
}

// Longest run (bytes) of copies merged side by side: narrower runs are what
// a Work of its own moves badly (one thread per run, scattered rows).
constexpr int64_t kMergeRunBytes = 256;

// Narrowest run (bytes) of merged copies moved in swizzled warps.
constexpr int64_t kSwizzleMinBytes = 8;

// The copies a swizzled warp moves side by side: the largest power of two
// whose runs fill at most a 128-byte line, at most 16 (2 rows at a time).
int64_t swizzle_copies(int64_t run_bytes) {
  int64_t k = 1;
  while (k < 16 && 2 * k * run_bytes <= 128) k *= 2;
  return k;
}

// Swizzles w as k copies side by side, where its rows fill a warp.
void swizzle_as(Work& w, int64_t k) {
  const int64_t rows = w.desc.extent[0];
  if (rows < kWarp / k) return;
  w.swizzle = static_cast<int32_t>(k);
  w.units = ceil_div(rows, kWarp / k * kSwizzleRows) * ceil_div(w.desc.extent[1], k) * kWarp;
}

// Swizzles merged copies of runs narrower than a sector
// (kernel_detail::copy_swizzled): a warp moves k neighbouring copies of
// 32 / k consecutive rows at a time (k = swizzle_copies: up to a 128-byte
// line across the copies on the side where they lie side by side, and on
// the other, where rows follow each other in packed staging, 32 / k rows of
// each copy an access and kSwizzleRows accesses a thread, from offsets
// computed once). Only for one dimension of rows ([rows, copies, run]);
// units are then whole warps.
void swizzle_narrow(Work& w, int64_t run_bytes) {
  w.swizzle = 0;
  if (run_bytes >= 32 || run_bytes < kSwizzleMinBytes || w.group != 1 || w.chunks_per_run != 1 ||
      w.desc.rank != 3) {
    return;
  }
  const int64_t k = swizzle_copies(run_bytes);
  swizzle_as(w, k);
}

bool same_shape(const CopyDesc& a, const CopyDesc& b) {
  if (a.rank != b.rank) return false;
  for (int k = 0; k < a.rank; ++k) {
    if (a.extent[k] != b.extent[k] || a.src_stride[k] != b.src_stride[k] ||
        a.dst_stride[k] != b.dst_stride[k]) {
      return false;
    }
  }
  return true;
}

// Appends copy Work w, merged into the launch's last Work when both are
// narrow copies of one shape whose start addresses step by a constant (the
// pieces of one buffer packed into or unpacked from consecutive staging,
// column blocks side by side): the last Work gains a dimension just outside
// its runs, so that consecutive threads move neighbouring runs, contiguous
// on the side where they are adjacent. The copies of one launch are
// independent, so their order does not matter.
void append_copy(Launch& l, const Work& w) {
  const int64_t es = w.src_size;
  const uintptr_t src =
      reinterpret_cast<uintptr_t>(w.src) + static_cast<uintptr_t>(w.desc.src_offset * es);
  const uintptr_t dst =
      reinterpret_cast<uintptr_t>(w.dst) + static_cast<uintptr_t>(w.desc.dst_offset * es);
  Launch::Merge& m = l.merge;
  const int64_t run_bytes = w.run_len * es;
  const bool narrow = run_bytes <= kMergeRunBytes && w.desc.rank < kMaxRank;
  // Runs shorter than a 32-byte sector merge only where they lie side by
  // side on one side: in warps of neighbouring rows (Work::swizzle) from
  // kSwizzleMinBytes, else only where they land side by side (scattered
  // partial-sector writes cost more than the reads they coalesce: packing
  // 16-byte runs merged row by row ran at 0.13 of cudaMemcpy on the H200,
  // unmerged at 0.27).
  const bool sector = run_bytes >= 32;
  const bool swizzles = run_bytes >= kSwizzleMinBytes;
  if (narrow && m.count > 0 && m.elem == es && same_shape(m.base, w.desc)) {
    const int64_t src_step = static_cast<int64_t>(src - m.src);
    const int64_t dst_step = static_cast<int64_t>(dst - m.dst);
    bool fits = false;
    if (m.count == 1) {
      fits = src >= m.src && dst > m.dst && src_step % es == 0 && dst_step % es == 0;
      if (fits) {
        m.src_step = src_step;
        m.dst_step = dst_step;
      }
    } else {
      fits = src >= m.src && dst > m.dst && src_step == m.count * m.src_step &&
             dst_step == m.count * m.dst_step;
    }
    fits = fits && (sector || m.dst_step == run_bytes || (swizzles && m.src_step == run_bytes));
    if (fits) {
      ++m.count;
      Work& last = l.works.back();
      const CopyDesc& b = m.base;
      const int r = b.rank;
      CopyDesc d = b;
      d.rank = r + 1;
      d.extent[r] = b.extent[r - 1];
      d.src_stride[r] = b.src_stride[r - 1];
      d.dst_stride[r] = b.dst_stride[r - 1];
      d.extent[r - 1] = m.count;
      d.src_stride[r - 1] = m.src_step / es;
      d.dst_stride[r - 1] = m.dst_step / es;
      last.desc = d;
      last.runs = copy_desc_runs(d);
      last.run_len = copy_desc_run_length(d);
      shape_copy(last);
      swizzle_narrow(last, run_bytes);
      const int64_t per_tile = kThreads / last.group;
      l.tile_start.back() = l.tile_start[l.tile_start.size() - 2] + ceil_div(last.units, per_tile);
      return;
    }
  }
  append_work(l, w);
  m = Launch::Merge{};
  if (narrow) {
    m.count = 1;
    m.elem = es;
    m.base = w.desc;
    m.src = src;
    m.dst = dst;
  }
}

// Most tiles a Work may have on average for its launch to carry the tile
// index (Launch::tile_work): 4 bytes a tile, at most a fifth of the Works'
// own bytes.
constexpr int64_t kIndexedTilesPerWork = 16;

// Gives a launch of several Works its tile -> Work index, where it is small
// beside the Works (a launch of many small pieces: each block then finds
// its Work with one load instead of a binary search of dependent loads).
void index_tiles(Launch& l) {
  l.tile_work.clear();
  const int64_t n = static_cast<int64_t>(l.works.size());
  const int64_t tiles = l.tiles();
  if (n < 2 || tiles > n * kIndexedTilesPerWork || tiles >= INT32_MAX) return;
  l.tile_work.resize(static_cast<size_t>(tiles));
  for (int64_t w = 0; w < n; ++w) {
    std::fill(l.tile_work.begin() + l.tile_start[w], l.tile_work.begin() + l.tile_start[w + 1],
              static_cast<int32_t>(w));
  }
}

// Moves a copy launch's swizzled Works into a launch of their own after it
// (the Works of one launch are independent): their kernel's registers
// (kSwizzleRows runs in flight a thread) would lower the occupancy of the
// other copies'. Then gives each launch its tile index.
std::vector<Launch> finish_launches(std::vector<Launch> launches) {
  std::vector<Launch> out;
  out.reserve(launches.size() + 1);
  for (Launch& l : launches) {
    const bool any = !l.element && std::any_of(l.works.begin(), l.works.end(),
                                               [](const Work& w) { return w.swizzle > 0; });
    if (!any) {
      out.push_back(std::move(l));
      continue;
    }
    Launch plain;
    Launch swizzled;
    swizzled.swizzled = true;
    for (const Work& w : l.works) append_work(w.swizzle > 0 ? swizzled : plain, w);
    if (!plain.works.empty()) out.push_back(std::move(plain));
    out.push_back(std::move(swizzled));
  }
  for (Launch& l : out) index_tiles(l);
  return out;
}

void append_planned(Launch& l, const Planned& p) {
  if (static_cast<WorkKind>(p.work.kind) == WorkKind::kCopy) return append_copy(l, p.work);
  l.merge = Launch::Merge{};
  append_work(l, p.work);
  if (!p.grids.empty()) {
    l.works.back().src_begin = static_cast<int64_t>(l.grids.size());
    l.grids.insert(l.grids.end(), p.grids.begin(), p.grids.end());
    return;
  }
  if (p.sources.empty()) return;
  l.works.back().src_begin = static_cast<int64_t>(l.sources.size());
  l.sources.insert(l.sources.end(), p.sources.begin(), p.sources.end());
}

// ------------------------------------------------------ fused reductions

// Byte spans of every planned op, sorted, to find the ops that touch a span.
class SpanIndex {
 public:
  explicit SpanIndex(const std::vector<Planned>& planned) {
    for (size_t i = 0; i < planned.size(); ++i) {
      for (const auto* fs : {&planned[i].reads, &planned[i].writes}) {
        for (const Footprint& f : *fs) {
          if (f.lo >= f.hi) continue;
          spans_.push_back({f.lo, f.hi, i});
          max_len_ = std::max(max_len_, f.hi - f.lo);
        }
      }
    }
    std::sort(spans_.begin(), spans_.end(),
              [](const Entry& a, const Entry& b) { return a.lo < b.lo; });
  }

  // Calls f(index) for every op with a span meeting [lo, hi); false when
  // the search gave up (too many spans to look at).
  template <class F>
  bool touching(uintptr_t lo, uintptr_t hi, F&& f) const {
    const uintptr_t from = lo >= max_len_ ? lo - max_len_ : 0;
    auto it = std::lower_bound(spans_.begin(), spans_.end(), from,
                               [](const Entry& e, uintptr_t v) { return e.lo < v; });
    int budget = kMaxScanned;
    for (; it != spans_.end() && it->lo < hi; ++it) {
      if (--budget < 0) return false;
      if (it->hi > lo) f(it->index);
    }
    return true;
  }

 private:
  struct Entry {
    uintptr_t lo;
    uintptr_t hi;
    size_t index;
  };
  std::vector<Entry> spans_;
  uintptr_t max_len_ = 0;
};

bool same_acc_side(const CopyDesc& a, const CopyDesc& b) {
  if (a.rank != b.rank || a.dst_offset != b.dst_offset) return false;
  for (int k = 0; k < a.rank; ++k) {
    if (a.extent[k] != b.extent[k] || a.dst_stride[k] != b.dst_stride[k]) return false;
  }
  return true;
}

bool spans_meet(const Footprint& a, const Footprint& b) { return a.lo < b.hi && b.lo < a.hi; }

// Whether the destination side of `d` is row-major dense from its offset
// (strides the suffix products of the extents): then `d` is any element
// range of the accumulator, whatever dimensions make_copy_desc merged.
bool dense_dst(const CopyDesc& d) {
  int64_t p = 1;
  for (int k = d.rank - 1; k >= 0; --k) {
    if (d.extent[k] > 1 && d.dst_stride[k] != p) return false;
    p *= d.extent[k];
  }
  return true;
}

// Re-expresses descriptors whose destination sides are the same dense range
// (make_copy_desc merges dimensions contiguous on both sides, so summands
// from buffers of different shapes come with different ranks) in one common
// refinement of their dimensions: the union of their row sizes, when those
// nest and fit kMaxRank. False (descriptors unchanged) otherwise.
bool common_dims(std::vector<CopyDesc>& ds) {
  std::vector<int64_t> cuts;  // suffix products: row sizes of every dimension
  for (const CopyDesc& d : ds) {
    int64_t p = 1;
    for (int k = d.rank - 1; k >= 0; --k) {
      cuts.push_back(p);
      p *= d.extent[k];
    }
    cuts.push_back(p);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  if (cuts.front() != 1 || static_cast<int>(cuts.size()) - 1 > kMaxRank) return false;
  for (size_t i = 1; i < cuts.size(); ++i)
    if (cuts[i] % cuts[i - 1] != 0) return false;
  const int rank = static_cast<int>(cuts.size()) - 1;
  for (CopyDesc& d : ds) {
    CopyDesc r{};
    r.rank = rank;
    r.src_offset = d.src_offset;
    r.dst_offset = d.dst_offset;
    // Refined dimension m (outermost first) has row size cuts[rank - 1 - m].
    for (int m = 0; m < rank; ++m) {
      const int64_t row = cuts[static_cast<size_t>(rank - 1 - m)];
      r.extent[m] = cuts[static_cast<size_t>(rank - m)] / row;
      r.dst_stride[m] = row;
      // The original dimension holding it: the innermost whose row size
      // (suffix product) is at most `row`.
      int64_t p = 1;
      int k = d.rank - 1;
      while (k > 0 && p * d.extent[k] <= row) {
        p *= d.extent[k];
        --k;
      }
      r.src_stride[m] = d.src_stride[k] * (row / p);
    }
    d = r;
  }
  return true;
}

// Folds reductions into one pass per accumulator region (WorkKind::kReduceN):
// consecutive kReduce ops into the same accumulator box (the engine queues
// one entry's summands together, in reduction order) become Works that read
// each summand once and read and write the accumulator once per up to
// kMaxFusedSources summands. When the group covers its whole accumulator,
// the kFillAcc before it and the kStore after it join too, where no op in
// between touches the accumulator (and none between the group and the store
// touches the destination) and no later op of the call reads the
// accumulator: the identity is then never written, and the store's
// destination is written straight from the summands, the accumulator not
// at all (after its store the engine never reads it again). Summands fold
// in the same order as the ops, so the bytes are those of the ops one by
// one.
std::vector<Planned> fuse_reductions(std::span<const CopyOp> ops, const std::vector<size_t>& op_of,
                                     std::vector<Planned> planned) {
  const size_t n = planned.size();
  const SpanIndex index(planned);
  std::vector<char> dropped(n, 0);
  std::vector<std::vector<Planned>> replace(n);
  const auto kind_of = [&](size_t i) { return ops[op_of[i]].kind; };
  for (size_t i = 0; i < n; ++i) {
    if (dropped[i] || kind_of(i) != CopyOp::Kind::kReduce) continue;
    const CopyOp& first = ops[op_of[i]];
    const Footprint acc = planned[i].writes[0];
    // Op k reduces into the same accumulator, dtype and op as op i.
    const auto same_target = [&](size_t k) {
      const CopyOp& o = ops[op_of[k]];
      return kind_of(k) == CopyOp::Kind::kReduce && o.dst == first.dst && o.dtype == first.dtype &&
             o.op == first.op;
    };
    size_t j = i + 1;
    const bool dense_i = dense_dst(planned[i].work.desc);
    bool reshape = false;
    while (j < n && same_target(j)) {
      const CopyDesc& d = planned[j].work.desc;
      if (!same_acc_side(d, planned[i].work.desc)) {
        // The same dense element range, cut into other dimensions.
        if (!dense_i || !dense_dst(d) || planned[j].writes[0].lo != acc.lo ||
            planned[j].writes[0].hi != acc.hi) {
          break;
        }
        reshape = true;
      }
      ++j;
    }
    std::vector<CopyDesc> descs;
    if (reshape) {
      for (size_t m = i; m < j; ++m) descs.push_back(planned[m].work.desc);
      if (!common_dims(descs)) {
        // Keep the leading members that already agree.
        j = i + 1;
        while (j < n && same_target(j) &&
               same_acc_side(planned[j].work.desc, planned[i].work.desc)) {
          ++j;
        }
        descs.clear();
      }
    }
    const auto desc_of = [&](size_t m) -> const CopyDesc& {
      return descs.empty() ? planned[m].work.desc : descs[m - i];
    };
    // A summand must not be the accumulator's own memory.
    bool ok = true;
    for (size_t m = i; m < j && ok; ++m) ok = !spans_meet(planned[m].reads[0], acc);
    if (!ok) continue;
    // The fill and the store around the group, when it covers the whole
    // accumulator and nothing else touches it.
    size_t fill = SIZE_MAX;
    size_t store = SIZE_MAX;
    if (dense(acc)) {
      size_t before = SIZE_MAX;  // last op before the group touching acc
      size_t after = SIZE_MAX;   // first op after it
      size_t last = 0;           // last op touching acc
      const bool complete = index.touching(acc.lo, acc.hi, [&](size_t k) {
        if (k < i && (before == SIZE_MAX || k > before)) before = k;
        if (k >= j && (after == SIZE_MAX || k < after)) after = k;
        last = std::max(last, k);
      });
      const auto covers = [&](const Footprint& f) { return f.lo == acc.lo && f.hi == acc.hi; };
      if (complete && before != SIZE_MAX && kind_of(before) == CopyOp::Kind::kFillAcc &&
          ops[op_of[before]].dtype == first.dtype && ops[op_of[before]].op == first.op &&
          covers(planned[before].writes[0])) {
        fill = before;
        if (after != SIZE_MAX && after == last && kind_of(after) == CopyOp::Kind::kStore &&
            ops[op_of[after]].dtype == first.dtype && covers(planned[after].reads[0]) &&
            static_cast<WorkKind>(planned[after].work.kind) == WorkKind::kStore) {
          // Its destination: untouched between the group and the store, and
          // no summand.
          const Footprint& out = planned[after].writes[0];
          bool clear = !spans_meet(out, acc);
          for (size_t m = i; m < j && clear; ++m) clear = !spans_meet(planned[m].reads[0], out);
          clear = clear && index.touching(out.lo, out.hi, [&](size_t k) {
            if (k > i && k < after) clear = false;
          });
          if (clear) store = after;
        }
      }
    }
    if (j - i < 2 && fill == SIZE_MAX) continue;  // nothing to gain
    const DType dtype = first.dtype;
    const int64_t es = dtype_size(dtype);
    const int64_t as = acc_size(dtype);
    alignas(8) unsigned char identity[8] = {};
    fill_identity(dtype, first.op, identity, 1);
    for (size_t c = i; c < j; c += kMaxFusedSources) {
      const size_t e = std::min(j, c + kMaxFusedSources);
      const bool from_identity = c == i && fill != SIZE_MAX;
      const bool out_store = e == j && store != SIZE_MAX;
      Planned f;
      void* out = out_store ? ops[op_of[store]].dst : first.dst;
      base_work(f.work, WorkKind::kReduceN, desc_of(c), ops[op_of[c]].src, out,
                static_cast<int32_t>(es), static_cast<int32_t>(out_store ? es : as));
      f.work.dtype = static_cast<int32_t>(dtype);
      f.work.op = static_cast<int32_t>(first.op);
      f.work.divisor = out_store ? ops[op_of[store]].divisor : 1;
      std::memcpy(&f.work.pattern, identity, 8);
      f.work.nsrc = static_cast<int32_t>(e - c);
      if (from_identity) {
        f.work.flags |= kFromIdentity;
      } else {
        f.work.acc = static_cast<const unsigned char*>(first.dst);
        if (reinterpret_cast<uintptr_t>(first.dst) % static_cast<uintptr_t>(as) == 0) {
          f.work.flags |= kAccAligned;
        }
      }
      if (out_store) f.work.flags |= kStoreOut;
      for (size_t m = c; m < e; ++m) {
        const CopyDesc& d = desc_of(m);
        SrcRef r{};
        r.ptr = static_cast<const unsigned char*>(ops[op_of[m]].src);
        r.offset = d.src_offset;
        std::copy(d.src_stride, d.src_stride + kMaxRank, r.stride);
        if ((planned[m].work.flags & kSrcAligned) == 0) f.work.flags &= ~kSrcAligned;
        f.sources.push_back(r);
        f.reads.push_back(planned[m].reads[0]);
      }
      if (!from_identity) f.reads.push_back(acc);
      f.writes.push_back(out_store ? make_footprint(f.work.desc, false, out, es) : acc);
      shape_elements(f.work, reduce_chunk(es));
      replace[i].push_back(std::move(f));
    }
    for (size_t m = i + 1; m < j; ++m) dropped[m] = 1;
    if (fill != SIZE_MAX) dropped[fill] = 1;
    if (store != SIZE_MAX) dropped[store] = 1;
    dropped[i] = 2;  // replaced
    i = j - 1;
  }
  std::vector<Planned> out;
  out.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    if (dropped[k] == 2) {
      for (Planned& f : replace[k]) out.push_back(std::move(f));
    } else if (!dropped[k]) {
      out.push_back(std::move(planned[k]));
    }
  }
  return out;
}

// ------------------------------------------------------ exact overlaps

// Expresses a footprint (offset `off` relative to the common base) as a box
// in the mixed-radix coordinates of the stride chain F (descending, each a
// multiple of the next, F[m-1] = 1). False when it is no such box.
bool to_fine(const Footprint& f, int64_t off, const int64_t* F, int m, int64_t* lo, int64_t* len) {
  int64_t rem = off;
  for (int j = 0; j < m; ++j) {
    lo[j] = rem / F[j];
    rem %= F[j];
    len[j] = 1;
  }
  for (int k = 0; k < f.rank; ++k) {
    if (f.extent[k] <= 1) continue;
    int j = 0;
    while (j < m && F[j] != f.stride[k]) ++j;
    if (j == m) return false;
    int64_t e = f.extent[k];
    while (true) {
      if (len[j] != 1) return false;
      if (j == 0) {
        len[0] = e;
        break;
      }
      const int64_t radix = F[j - 1] / F[j];
      if (lo[j] + e <= radix) {
        len[j] = e;
        break;
      }
      // A dimension merged across full rows: it covers whole coarser rows.
      if (lo[j] != 0 || e % radix != 0) return false;
      len[j] = radix;
      e /= radix;
      --j;
    }
  }
  return true;
}

}  // namespace

bool moves_nothing(const CopyOp& op) {
  if (op.kind == CopyOp::Kind::kCopy || op.kind == CopyOp::Kind::kReduce ||
      op.kind == CopyOp::Kind::kCast || op.kind == CopyOp::Kind::kQuantise) {
    return op.desc.rank > 0 && empty_desc(op.desc);
  }
  if (op.kind == CopyOp::Kind::kBlockScales)
    return op.shard != nullptr && op.shard->box.volume() == 0;
  return op.count == 0;
}

Footprint make_footprint(const CopyDesc& d, bool src, const void* base, int64_t elem) {
  Footprint f;
  f.base = reinterpret_cast<uintptr_t>(base);
  f.elem = elem;
  f.rank = d.rank;
  f.offset = src ? d.src_offset : d.dst_offset;
  for (int k = 0; k < d.rank; ++k) {
    f.extent[k] = d.extent[k];
    f.stride[k] = src ? d.src_stride[k] : d.dst_stride[k];
  }
  std::tie(f.lo, f.hi) = span_of(d, src, base, elem);  // the whole-call check's spans too
  return f;
}

Footprint dense_footprint(const void* base, int64_t bytes) {
  Footprint f;
  f.base = reinterpret_cast<uintptr_t>(base);
  f.elem = 1;
  f.rank = 1;
  f.extent[0] = bytes;
  f.stride[0] = 1;
  f.lo = f.base;
  f.hi = f.base + static_cast<uintptr_t>(bytes);
  return f;
}

bool footprints_overlap(const Footprint& a, const Footprint& b) {
  if (a.lo >= a.hi || b.lo >= b.hi) return false;
  if (a.hi <= b.lo || b.hi <= a.lo) return false;
  if (dense(a) && dense(b)) return true;  // overlapping spans, no holes
  if (a.elem != b.elem) return true;
  const uintptr_t base = std::min(a.base, b.base);
  const uintptr_t da = a.base - base;
  const uintptr_t db = b.base - base;
  const auto elem = static_cast<uintptr_t>(a.elem);
  if (da % elem != 0 || db % elem != 0) return true;
  const int64_t off_a = a.offset + static_cast<int64_t>(da / elem);
  const int64_t off_b = b.offset + static_cast<int64_t>(db / elem);
  int64_t F[2 * kMaxRank + 1];
  int m = 0;
  F[m++] = 1;
  for (const Footprint* f : {&a, &b}) {
    for (int k = 0; k < f->rank; ++k) {
      if (f->extent[k] > 1) F[m++] = f->stride[k];
    }
  }
  std::sort(F, F + m, [](int64_t x, int64_t y) { return x > y; });
  m = static_cast<int>(std::unique(F, F + m) - F);
  if (F[m - 1] != 1) return true;
  for (int j = 1; j < m; ++j) {
    if (F[j] <= 0 || F[j - 1] % F[j] != 0) return true;
  }
  int64_t lo_a[2 * kMaxRank + 1];
  int64_t len_a[2 * kMaxRank + 1];
  int64_t lo_b[2 * kMaxRank + 1];
  int64_t len_b[2 * kMaxRank + 1];
  if (!to_fine(a, off_a, F, m, lo_a, len_a) || !to_fine(b, off_b, F, m, lo_b, len_b)) return true;
  for (int j = 0; j < m; ++j) {
    if (lo_a[j] + len_a[j] <= lo_b[j] || lo_b[j] + len_b[j] <= lo_a[j]) return false;
  }
  return true;
}

namespace {

// Sorts `v` by `lo` (equal ones in any order): a many-op call's spans by
// a radix sort of lo - min(lo), 11 bits a pass (as many passes as the
// range of starts needs: two or three for one process's buffers), fewer
// by std::sort. `tmp`: scratch of the same size.
constexpr size_t kRadixSpans = 512;
void sort_by_lo(std::span<Span> v, std::vector<Span>& tmp) {
  const auto by_lo = [](const Span& a, const Span& b) { return a.lo < b.lo; };
  if (v.size() < kRadixSpans) {
    std::sort(v.begin(), v.end(), by_lo);
    return;
  }
  const auto [first, last] = std::minmax_element(v.begin(), v.end(), by_lo);
  const uintptr_t base = first->lo;
  const uintptr_t range = last->lo - base;
  tmp.resize(v.size());
  Span* from = v.data();
  Span* to = tmp.data();
  constexpr unsigned kBits = 11;
  constexpr uintptr_t kMask = (uintptr_t{1} << kBits) - 1;
  for (unsigned shift = 0; shift < 64 && (range >> shift) != 0; shift += kBits) {
    uint32_t at[kMask + 2] = {};
    for (size_t i = 0; i < v.size(); ++i) ++at[((from[i].lo - base) >> shift & kMask) + 1];
    for (size_t d = 1; d <= kMask + 1; ++d) at[d] += at[d - 1];
    for (size_t i = 0; i < v.size(); ++i) to[at[(from[i].lo - base) >> shift & kMask]++] = from[i];
    std::swap(from, to);
  }
  if (from != v.data()) std::copy(from, from + v.size(), v.data());
}

}  // namespace

// True when no write span meets another op's span (reads may meet reads):
// then no op can see another's effect and the call is one phase. The
// writes are sorted by `lo` and must not meet each other (a sweep); their
// ends then ascend too, so the reads, sorted by `lo` as well, are checked
// in one pass, each against the one write that ends first after its
// start. An op's own read and write meeting also answers false (the
// caller then takes the exact path). Empty spans meet nothing.
bool writes_isolated(std::vector<Span>& spans) {
  const auto empty = [](const Span& s) { return s.lo >= s.hi; };
  std::erase_if(spans, empty);
  const auto reads =
      std::partition(spans.begin(), spans.end(), [](const Span& s) { return s.write; });
  std::vector<Span> tmp;
  sort_by_lo(std::span(spans.begin(), reads), tmp);
  for (auto w = spans.begin(); w != reads && w + 1 != reads; ++w) {
    if ((w + 1)->lo < w->hi) return false;
  }
  sort_by_lo(std::span(reads, spans.end()), tmp);
  auto w = spans.begin();
  for (auto r = reads; r != spans.end(); ++r) {
    // The first write ending after the read starts: it meets the read
    // when it starts before the read ends.
    while (w != reads && w->hi <= r->lo) ++w;
    if (w != reads && w->lo < r->hi) return false;
  }
  return true;
}

std::vector<Launch> plan_launches(std::span<const CopyOp> ops) {
  // Calls with reductions are planned as a whole first, so that the
  // summands of one accumulator fold in one pass (fuse_reductions); others
  // stream op by op.
  const bool reductions = std::any_of(
      ops.begin(), ops.end(), [](const CopyOp& op) { return op.kind == CopyOp::Kind::kReduce; });
  std::vector<Planned> planned;
  if (reductions) {
    std::vector<size_t> op_of;
    Planned p;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!plan_op(ops[i], i, p)) continue;
      planned.push_back(p);
      op_of.push_back(i);
    }
    planned = fuse_reductions(ops, op_of, std::move(planned));
  }
  // Visits the planned ops in order (spans_only: where they are planned
  // here, their spans go there instead of their footprints).
  const auto each = [&](auto&& f, std::vector<Span>* spans_only) {
    if (reductions) {
      for (const Planned& p : planned) f(p);
      return;
    }
    Planned p;
    p.spans_only = spans_only;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (plan_op(ops[i], i, p)) f(p);
    }
  };
  // The launch class of a Work: copies, element kinds, fused reductions.
  const auto klass = [](const Planned& p) {
    const auto k = static_cast<WorkKind>(p.work.kind);
    return k == WorkKind::kCopy ? 0 : k == WorkKind::kReduceN ? 2 : 1;
  };
  std::vector<Launch> launches;
  // Fast path: independent ops (packing into distinct staging ranges,
  // unpacking distinct messages into distinct shards) are one phase, found
  // by one sort instead of the incremental overlap index.
  {
    Launch classes[3];
    classes[1].element = true;
    classes[2].element = classes[2].multi = true;
    Launch& copies = classes[0];
    std::vector<Span> spans;
    spans.reserve(2 * ops.size());
    copies.works.reserve(ops.size());
    copies.tile_start.reserve(ops.size() + 1);
    each(
        [&](const Planned& p) {
          for (const Footprint& f : p.reads) spans.push_back({f.lo, f.hi, false});
          for (const Footprint& f : p.writes) spans.push_back({f.lo, f.hi, true});
          append_planned(classes[klass(p)], p);
        },
        &spans);
    if (writes_isolated(spans)) {
      for (Launch& l : classes) {
        if (!l.works.empty()) launches.push_back(std::move(l));
      }
      return finish_launches(std::move(launches));
    }
  }
  Phase phase;
  Launch classes[3];
  const auto reset = [&] {
    for (int k = 0; k < 3; ++k) {
      classes[k] = Launch{};
      classes[k].element = k > 0;
      classes[k].multi = k == 2;
    }
  };
  reset();
  const auto flush = [&] {
    for (Launch& l : classes) {
      if (!l.works.empty()) launches.push_back(std::move(l));
    }
    reset();
    phase.clear();
  };
  each(
      [&](const Planned& p) {
        if (phase.conflicts(p.reads, p.writes)) flush();
        phase.add(p.reads, p.writes);
        append_planned(classes[klass(p)], p);
      },
      nullptr);
  flush();
  return finish_launches(std::move(launches));
}

Descriptors layout_descriptors(const std::vector<Launch>& launches) {
  Descriptors d;
  for (const Launch& l : launches) {
    DescriptorPart p{l.element, l.multi, l.swizzled, static_cast<int>(l.works.size()),
                     l.tiles(), 0,       0,          SIZE_MAX,
                     0,         0};
    d.bytes = (d.bytes + 15) / 16 * 16;  // Works hold 8-byte fields; keep 16
    p.works_offset = d.bytes;
    d.bytes += l.works.size() * sizeof(Work);
    p.tiles_offset = d.bytes;
    d.bytes += l.tile_start.size() * sizeof(int64_t);
    if (!l.tile_work.empty()) {
      p.tile_work_offset = d.bytes;
      d.bytes += (l.tile_work.size() * sizeof(int32_t) + 7) / 8 * 8;  // keep 8 for what follows
    }
    p.sources_offset = d.bytes;
    d.bytes += l.sources.size() * sizeof(SrcRef);
    p.grids_offset = d.bytes;
    d.bytes += l.grids.size() * sizeof(ScaleGrid);
    d.parts.push_back(p);
  }
  return d;
}

void write_descriptors(const std::vector<Launch>& launches, const Descriptors& d,
                       unsigned char* host) {
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& l = launches[i];
    const DescriptorPart& p = d.parts[i];
    std::memcpy(host + p.works_offset, l.works.data(), l.works.size() * sizeof(Work));
    std::memcpy(host + p.tiles_offset, l.tile_start.data(), l.tile_start.size() * sizeof(int64_t));
    if (!l.tile_work.empty()) {
      std::memcpy(host + p.tile_work_offset, l.tile_work.data(),
                  l.tile_work.size() * sizeof(int32_t));
    }
    if (!l.sources.empty()) {
      std::memcpy(host + p.sources_offset, l.sources.data(), l.sources.size() * sizeof(SrcRef));
    }
    if (!l.grids.empty()) {
      std::memcpy(host + p.grids_offset, l.grids.data(), l.grids.size() * sizeof(ScaleGrid));
    }
  }
}

}  // namespace reshard::cuda_backend
