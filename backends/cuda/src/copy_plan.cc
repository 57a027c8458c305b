#include "copy_plan.h"

#include <algorithm>
#include <array>
#include <climits>
#include <compare>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

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

Work base_work(WorkKind kind, const CopyDesc& d, const void* src, void* dst, int32_t src_size,
               int32_t dst_size) {
  Work w{};
  w.desc = d;
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
  return w;
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

// The same for element-wise kinds, in elements (up to 16 per thread).
void shape_elements(Work& w) {
  if (w.run_len > kElementChunk) {
    w.chunk = kElementChunk;
    w.chunks_per_run = ceil_div(w.run_len, kElementChunk);
    w.group = kThreads;
  } else {
    w.chunk = std::max<int64_t>(w.run_len, 1);
    w.chunks_per_run = 1;
    w.group =
        static_cast<int32_t>(std::min<int64_t>(kThreads, pow2_at_least(ceil_div(w.run_len, 16))));
  }
  w.units = w.runs * w.chunks_per_run;
}

struct Planned {
  Work work;
  std::vector<Footprint> reads;
  std::vector<Footprint> writes;
};

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
  out.reads.clear();
  out.writes.clear();
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
      out.work = base_work(reduce ? WorkKind::kReduce : WorkKind::kCopy, d, op.src, op.dst,
                           static_cast<int32_t>(es), static_cast<int32_t>(ds));
      out.work.dtype = static_cast<int32_t>(op.dtype);
      out.work.op = static_cast<int32_t>(op.op);
      out.reads.push_back(make_footprint(d, true, op.src, es));
      out.writes.push_back(make_footprint(d, false, op.dst, ds));
      if (reduce) {
        shape_elements(out.work);
      } else {
        shape_copy(out.work);
      }
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
      out.work = base_work(WorkKind::kFill, linear_desc(op.count), nullptr, op.dst,
                           static_cast<int32_t>(size), static_cast<int32_t>(size));
      std::memcpy(&out.work.pattern, value, 8);
      out.writes.push_back(dense_footprint(op.dst, op.count * size));
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
        out.work = base_work(WorkKind::kCopy, d, op.src, op.dst, static_cast<int32_t>(es),
                             static_cast<int32_t>(es));
        shape_copy(out.work);
      } else {
        out.work = base_work(WorkKind::kStore, d, op.src, op.dst, static_cast<int32_t>(as),
                             static_cast<int32_t>(es));
        out.work.dtype = static_cast<int32_t>(op.dtype);
        out.work.divisor = op.divisor;
        shape_elements(out.work);
      }
      out.reads.push_back(dense_footprint(op.src, op.count * as));
      out.writes.push_back(dense_footprint(op.dst, op.count * es));
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

Footprint make_footprint(const CopyDesc& d, bool src, const void* base, int64_t elem) {
  Footprint f;
  f.base = reinterpret_cast<uintptr_t>(base);
  f.elem = elem;
  f.rank = d.rank;
  f.offset = src ? d.src_offset : d.dst_offset;
  int64_t last = f.offset;
  bool empty = false;
  for (int k = 0; k < d.rank; ++k) {
    f.extent[k] = d.extent[k];
    f.stride[k] = src ? d.src_stride[k] : d.dst_stride[k];
    if (d.extent[k] == 0) empty = true;
    last += (d.extent[k] - 1) * f.stride[k];
  }
  f.lo = f.base + static_cast<uintptr_t>(f.offset * elem);
  f.hi = empty ? f.lo : f.base + static_cast<uintptr_t>((last + 1) * elem);
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

// A byte span one op reads or writes, for the whole-call check.
struct Span {
  uintptr_t lo;
  uintptr_t hi;
  bool write;
};

// True when no write span meets another op's span (reads may meet reads):
// then no op can see another's effect and the call is one phase. A sweep in
// order of `lo` finds any pair that meets with a write in it: the later
// starting one begins before the earlier one's end. An op's own read and
// write meeting also answers false (the caller then takes the exact path).
bool writes_isolated(std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  uintptr_t end_any = 0;
  uintptr_t end_write = 0;
  for (const Span& s : spans) {
    if (s.lo >= s.hi) continue;
    if (s.lo < end_write || (s.write && s.lo < end_any)) return false;
    end_any = std::max(end_any, s.hi);
    if (s.write) end_write = std::max(end_write, s.hi);
  }
  return true;
}

}  // namespace

std::vector<Launch> plan_launches(std::span<const CopyOp> ops) {
  std::vector<Launch> launches;
  // Fast path: independent ops (packing into distinct staging ranges,
  // unpacking distinct messages into distinct shards) are one phase, found
  // by one sort instead of the incremental overlap index.
  {
    Launch copies;
    Launch elements;
    elements.element = true;
    std::vector<Span> spans;
    spans.reserve(2 * ops.size());
    copies.works.reserve(ops.size());
    copies.tile_start.reserve(ops.size() + 1);
    Planned p;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!plan_op(ops[i], i, p)) continue;
      for (const Footprint& f : p.reads) spans.push_back({f.lo, f.hi, false});
      for (const Footprint& f : p.writes) spans.push_back({f.lo, f.hi, true});
      append_work(static_cast<WorkKind>(p.work.kind) == WorkKind::kCopy ? copies : elements,
                  p.work);
    }
    if (writes_isolated(spans)) {
      for (Launch* l : {&copies, &elements}) {
        if (!l->works.empty()) launches.push_back(std::move(*l));
      }
      return launches;
    }
  }
  Phase phase;
  Launch copies;
  Launch elements;
  elements.element = true;
  const auto flush = [&] {
    for (Launch* l : {&copies, &elements}) {
      if (l->works.empty()) continue;
      launches.push_back(std::move(*l));
      l->works.clear();
      l->tile_start.clear();
    }
    phase.clear();
  };
  Planned p;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!plan_op(ops[i], i, p)) continue;
    if (phase.conflicts(p.reads, p.writes)) flush();
    phase.add(p.reads, p.writes);
    append_work(static_cast<WorkKind>(p.work.kind) == WorkKind::kCopy ? copies : elements, p.work);
  }
  flush();
  return launches;
}

}  // namespace reshard::cuda_backend
