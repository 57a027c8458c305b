// Structural validation of a decoded process part (exact.h): interval
// coverage per buffer, by slabs along each dimension.
#include "wire/exact.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "reshard/error.h"

namespace reshard::wire {
namespace {

// Write::target of a scratch: this bit | its index in ProcessPart::scratch.
constexpr uint32_t kScratchTarget = 0x80000000u;
// Write::cls besides a source summand (>= 0).
constexpr int32_t kCopy = -1;         // a relay's reduced (final) value
constexpr int32_t kFromScratch = -2;  // one contribution: a scratch's partial reduction

// One piece as a write into a buffer of the part's process (local and
// received pieces) or of a peer's (sent pieces, `device` the receiver).
struct Write {
  uint32_t tensor = 0;
  uint32_t target = 0;  // destination entry, or kScratchTarget | scratch index
  int32_t cls = 0;
  uint32_t stage = 0;
  int64_t device = -1;  // sent pieces from a scratch: the sending device
  int64_t peer = -1;    // sent pieces: the receiving device
  uint64_t where = 0;   // piece index; bit 63: a received piece, bit 62: a sent one
  // The piece; its region is computed when needed (PartChecker::box_of):
  // a box per piece would be most of the memory and time of the check.
  const Piece* piece = nullptr;
};

constexpr uint64_t kRecvBit = uint64_t{1} << 63;
constexpr uint64_t kSendBit = uint64_t{1} << 62;

std::string piece_name(uint64_t where) {
  const uint64_t i = where & ~(kRecvBit | kSendBit);
  const char* list = (where & kRecvBit)   ? "recv_pieces"
                     : (where & kSendBit) ? "send_pieces"
                                          : "local";
  return std::string(list) + "[" + std::to_string(i) + "]";
}

// A box of elements covered other than once: count 0 (a gap) or 2 (two
// boxes or more).
struct Bad {
  Box where;
  int count = 0;
};

// Checks that boxes lying inside `region` are pairwise disjoint and, with
// `cover`, cover it: slabs along dimension 0 between the boxes' bounds, each
// checked on the boxes spanning it along the next dimension, the last one
// by sorting intervals. Work is charged to a budget; running out is
// kCorrupt (the plans the planner writes stay far below it).
class Tiler {
 public:
  Tiler(uint64_t budget, const std::string& field) : budget_(budget), field_(field) {}

  std::optional<Bad> check(std::vector<const Box*>& boxes, const Box& region, bool cover) {
    return slab(boxes, region, 0, cover);
  }

 private:
  void spend(uint64_t n) {
    if (n > budget_)
      fail(ErrorCode::kCorrupt, field_,
           "its pieces overlap in ways too costly to check (more box comparisons than the part's "
           "pieces allow)");
    budget_ -= n;
  }

  std::optional<Bad> slab(std::vector<const Box*>& v, const Box& region, int d, bool cover) {
    spend(v.size() + 1);
    const int r = region.rank;
    if (d == r) {
      if (v.size() == 1 || (v.empty() && !cover)) return std::nullopt;
      return Bad{region, v.empty() ? 0 : 2};
    }
    std::sort(v.begin(), v.end(), [d](const Box* a, const Box* b) { return a->lo[d] < b->lo[d]; });
    if (d == r - 1) {
      int64_t at = region.lo[d];
      for (const Box* b : v) {
        Box w = region;
        if (b->lo[d] < at) {
          w.lo[d] = b->lo[d];
          w.hi[d] = std::min(at, b->hi[d]);
          return Bad{w, 2};
        }
        if (cover && b->lo[d] > at) {
          w.lo[d] = at;
          w.hi[d] = b->lo[d];
          return Bad{w, 0};
        }
        at = b->hi[d];
      }
      if (cover && at < region.hi[d]) {
        Box w = region;
        w.lo[d] = at;
        return Bad{w, 0};
      }
      return std::nullopt;
    }
    std::vector<int64_t> xs;
    xs.reserve(2 * v.size() + 2);
    xs.push_back(region.lo[d]);
    xs.push_back(region.hi[d]);
    for (const Box* b : v) {
      xs.push_back(b->lo[d]);
      xs.push_back(b->hi[d]);
    }
    std::sort(xs.begin(), xs.end());
    xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
    std::vector<const Box*> active, sub;
    size_t next = 0;
    for (size_t i = 0; i + 1 < xs.size(); ++i) {
      const int64_t a = xs[i], b = xs[i + 1];
      spend(active.size() + 1);
      active.erase(
          std::remove_if(active.begin(), active.end(), [&](const Box* x) { return x->hi[d] <= a; }),
          active.end());
      while (next < v.size() && v[next]->lo[d] <= a) active.push_back(v[next++]);
      Box w = region;
      w.lo[d] = a;
      w.hi[d] = b;
      if (active.empty()) {
        if (cover) return Bad{w, 0};
        continue;
      }
      sub = active;
      if (auto bad = slab(sub, w, d + 1, cover)) return bad;
    }
    return std::nullopt;
  }

  uint64_t budget_;
  const std::string& field_;
};

// A box in a sweep (check_reads): a read with its piece index, or a write.
struct Swept {
  const Box* box;
  uint64_t id;
};
// A box's extent along dimension d; a rank-0 box (one element) is [0, 1).
int64_t lo_along(const Box& b, int d) { return d < b.rank ? b.lo[d] : 0; }
int64_t hi_along(const Box& b, int d) { return d < b.rank ? b.hi[d] : 1; }
bool meet(const Box& a, const Box& b) {
  for (int d = 0; d < a.rank; ++d)
    if (std::max(a.lo[d], b.lo[d]) >= std::min(a.hi[d], b.hi[d])) return false;
  return true;
}

// The pairs (a, b) of non-empty boxes whose extents along d overlap: all
// pairs but those where one ends before the other starts.
uint64_t pairs_overlapping_along(const std::vector<Swept>& a, const std::vector<Swept>& b, int d) {
  std::vector<int64_t> a_hi, b_hi;
  a_hi.reserve(a.size());
  b_hi.reserve(b.size());
  for (const Swept& x : a) a_hi.push_back(hi_along(*x.box, d));
  for (const Swept& x : b) b_hi.push_back(hi_along(*x.box, d));
  std::sort(a_hi.begin(), a_hi.end());
  std::sort(b_hi.begin(), b_hi.end());
  uint64_t apart = 0;
  for (const Swept& x : b)
    apart += static_cast<uint64_t>(std::upper_bound(a_hi.begin(), a_hi.end(), lo_along(*x.box, d)) -
                                   a_hi.begin());
  for (const Swept& x : a)
    apart += static_cast<uint64_t>(std::upper_bound(b_hi.begin(), b_hi.end(), lo_along(*x.box, d)) -
                                   b_hi.begin());
  return static_cast<uint64_t>(a.size()) * b.size() - apart;
}

// The smallest id of a box of `reads` that meets a box of `writes` (all
// non-empty, one rank), UINT64_MAX when none does: a sweep along the
// dimension where the fewest (read, write) pairs overlap, comparing each
// box as it starts with the boxes of the other list still open. Its
// comparisons are exactly those pairs (plus one per box closed), charged
// to `spend` before the sweep, with the counting (rank sorts).
template <typename Spend>
uint64_t first_meeting(std::vector<Swept>& reads, std::vector<Swept>& writes, Spend&& spend) {
  const int dims = std::max(reads[0].box->rank, 1);
  int along = 0;
  uint64_t fewest = UINT64_MAX;
  for (int d = 0; d < dims && fewest > 0; ++d) {
    spend(reads.size() + writes.size());
    const uint64_t pairs = pairs_overlapping_along(reads, writes, d);
    if (pairs < fewest) {
      fewest = pairs;
      along = d;
    }
  }
  spend(fewest + reads.size() + writes.size());
  auto by_lo = [along](const Swept& x, const Swept& y) {
    return lo_along(*x.box, along) < lo_along(*y.box, along);
  };
  std::sort(reads.begin(), reads.end(), by_lo);
  std::sort(writes.begin(), writes.end(), by_lo);
  uint64_t first = UINT64_MAX;
  std::vector<const Swept*> open_reads, open_writes;
  size_t i = 0, j = 0;
  while (i < reads.size() || j < writes.size()) {
    const bool read =
        j == writes.size() ||
        (i < reads.size() && lo_along(*reads[i].box, along) < lo_along(*writes[j].box, along));
    const Swept& x = read ? reads[i++] : writes[j++];
    const int64_t at = lo_along(*x.box, along);
    std::vector<const Swept*>& other = read ? open_writes : open_reads;
    bool met = false;
    for (size_t o = 0; o < other.size();) {
      const Swept& y = *other[o];
      if (hi_along(*y.box, along) <= at) {  // closed for every later box too
        other[o] = other.back();
        other.pop_back();
        continue;
      }
      if (meet(*x.box, *y.box)) {
        met = true;
        if (!read) {  // a read met once is done
          first = std::min(first, y.id);
          other[o] = other.back();
          other.pop_back();
          continue;
        }
      }
      ++o;
    }
    if (read && met)
      first = std::min(first, x.id);
    else
      (read ? open_reads : open_writes).push_back(&x);
  }
  return first;
}

// Source summands destination entry `e` of `t` takes: all of them when the
// destination is not partial, else those equal to its summand mod T.
int64_t summands_taken(const TensorSpec& t, uint32_t e) {
  const int64_t S = t.src.num_summands(), T = t.dst.num_summands();
  if (T == 1) return S;
  const int64_t u = t.dst.summand(e);
  return S > u ? (S - 1 - u) / T + 1 : 0;
}
bool takes(const TensorSpec& t, uint32_t e, int32_t s) {
  const int32_t T = t.dst.num_summands();
  return s >= 0 && s < t.src.num_summands() && (T == 1 || s % T == t.dst.summand(e));
}

// The summands a scratch holds: (sending device, tensor, a region of the
// scratch) -> its summands, sorted; null when unknown.
using ScratchSetOf =
    std::function<const std::vector<int32_t>*(int64_t device, uint32_t tensor, const Box& region)>;

class PartChecker {
 public:
  PartChecker(const ProcessPart& part, const std::vector<TensorSpec>& tensors,
              const EntryBox& entry_box, const std::string& field,
              const ScratchSetOf* sets = nullptr)
      : part_(part), tensors_(tensors), entry_box_(entry_box), field_(field), sets_(sets) {}

  // Only the reductions with scratch contributions, their sources resolved.
  void run_scratch_reductions() {
    collect();
    only_scratch_reductions_ = true;
    check_targets();
  }

  void run(const std::vector<std::pair<uint32_t, uint32_t>>& entries) {
    collect();
    check_targets();
    check_written(entries);
    check_reads();
    check_sends();
  }

 private:
  Box region_of(const Piece& p, uint32_t stage) const {
    if (p.region != kOverlapRegion) return part_.regions[p.region];
    return intersect(entry_box_(p.tensor, reads_source(p, stage), p.src_entry),
                     entry_box_(p.tensor, false, p.dst_entry));
  }
  Box box_of(const Write& w) const { return region_of(*w.piece, w.stage); }
  int32_t cls_of(const Piece& p, uint32_t stage) const {
    if (p.src_entry == kScratchEntry) return kFromScratch;
    if (reads_source(p, stage)) return tensors_[p.tensor].src.summand(p.src_entry);
    return kCopy;
  }
  // The scratch of this part on `device` holding `box` (decode.cc checked
  // that there is one).
  uint32_t scratch_target(uint32_t tensor, int64_t device, const Box& box) const {
    const int64_t k = find_scratch(part_, tensor, device, box);
    if (k < 0) fail(ErrorCode::kInternal, field_, "a piece names a scratch the part lacks");
    return kScratchTarget | static_cast<uint32_t>(k);
  }

  void add(std::vector<Write>& out, const Piece& p, uint32_t stage, int64_t device, uint64_t where,
           bool resolve_scratch) {
    Write w;
    const Box box = region_of(p, stage);
    if (box.empty()) return;
    w.piece = &p;
    w.tensor = p.tensor;
    w.cls = cls_of(p, stage);
    w.stage = stage;
    w.where = where;
    if (p.dst_entry != kScratchEntry)
      w.target = p.dst_entry;
    else
      w.target = resolve_scratch ? scratch_target(p.tensor, device, box) : kScratchTarget;
    out.push_back(w);
  }

  void collect() {
    writes_.reserve(part_.local.size() + part_.recv_pieces.size());
    for (size_t i = 0; i < part_.local.size(); ++i) {
      const Piece& p = part_.local[i];
      add(writes_, p, 0, tensors_[p.tensor].src.device(p.src_entry), i, true);
    }
    for (const Message& m : part_.recvs)
      for (uint64_t k = m.first_piece; k < m.first_piece + m.num_pieces; ++k) {
        const size_t before = writes_.size();
        add(writes_, part_.recv_pieces[k], m.stage, m.dst_device, k | kRecvBit, true);
        if (writes_.size() > before && writes_.back().cls == kFromScratch)
          writes_.back().device = m.src_device;
      }
    std::sort(writes_.begin(), writes_.end(), [](const Write& a, const Write& b) {
      return std::tie(a.tensor, a.target, a.cls, a.device, a.where) <
             std::tie(b.tensor, b.target, b.cls, b.device, b.where);
    });
  }

  std::string target_name(uint32_t tensor, uint32_t target) const {
    const TensorSpec& t = tensors_[tensor];
    if (target & kScratchTarget) {
      const Scratch& s = part_.scratch[target & ~kScratchTarget];
      return "tensor \"" + t.name + "\" scratch " + std::to_string(target & ~kScratchTarget) +
             " (device " + std::to_string(s.device) + ", box " + to_string(s.box) + ")";
    }
    return "tensor \"" + t.name + "\" destination entry " + std::to_string(target) + " (device " +
           std::to_string(t.dst.device(target)) + ")";
  }

  [[noreturn]] void report(const Write* first, const Write* last, uint32_t tensor, uint32_t target,
                           const Bad& bad, const std::string& what) const {
    std::string pieces;
    int named = 0;
    for (const Write* w = first; w != last && named < 2; ++w) {
      if (intersect(box_of(*w), bad.where).empty()) continue;
      pieces += (named++ ? ", " : " (") + piece_name(w->where);
    }
    if (named) pieces += ")";
    fail(ErrorCode::kCorrupt, field_,
         target_name(tensor, target) + ": elements " + to_string(bad.where) +
             (bad.count == 0 ? " are never written" : " are written more than once") + what +
             pieces);
  }

  // Checks the boxes of [first, last) (and of `also`) tile `region` (cover)
  // or are disjoint.
  void tile(const Write* first, const Write* last, const std::vector<const Write*>& also,
            const Box& region, bool cover, uint32_t tensor, uint32_t target,
            const std::string& what) {
    held_.clear();
    for (const Write* w = first; w != last; ++w) held_.push_back(box_of(*w));
    for (const Write* w : also) held_.push_back(box_of(*w));
    boxes_.clear();
    for (const Box& b : held_) boxes_.push_back(&b);
    Tiler tiler(256 * (boxes_.size() + 1) * static_cast<uint64_t>(std::max(region.rank, 1)) +
                    (uint64_t{1} << 16),
                field_);
    if (auto bad = tiler.check(boxes_, region, cover)) {
      // Name pieces from either list.
      std::vector<Write> named(first, last);
      for (const Write* w : also) named.push_back(*w);
      report(named.data(), named.data() + named.size(), tensor, target, *bad, what);
    }
  }

  bool same_boxes(const Write* a0, const Write* a1, const Write* b0, const Write* b1) const {
    if (a1 - a0 != b1 - b0) return false;
    std::vector<Box> x, y;
    for (const Write* w = a0; w != a1; ++w) x.push_back(box_of(*w));
    for (const Write* w = b0; w != b1; ++w) y.push_back(box_of(*w));
    auto less = [](const Box& p, const Box& q) {
      for (int d = 0; d < p.rank; ++d)
        if (p.lo[d] != q.lo[d]) return p.lo[d] < q.lo[d];
      for (int d = 0; d < p.rank; ++d)
        if (p.hi[d] != q.hi[d]) return p.hi[d] < q.hi[d];
      return false;
    };
    std::sort(x.begin(), x.end(), less);
    std::sort(y.begin(), y.end(), less);
    for (size_t i = 0; i < x.size(); ++i)
      if (!(x[i] == y[i])) return false;
    return true;
  }

  void check_targets() {
    for (size_t g = 0, g_end = 0; g < writes_.size(); g = g_end) {
      g_end = g;
      while (g_end < writes_.size() && writes_[g_end].tensor == writes_[g].tensor &&
             writes_[g_end].target == writes_[g].target)
        ++g_end;
      const Write* first = writes_.data() + g;
      const Write* last = writes_.data() + g_end;
      const uint32_t tensor = first->tensor, target = first->target;
      uint32_t max_stage = 0;
      for (const Write* w = first; w != last; ++w) max_stage = std::max(max_stage, w->stage);
      groups_.push_back({tensor, target, g, g_end, max_stage});
      if (only_scratch_reductions_) {
        if (!(target & kScratchTarget) &&
            std::any_of(first, last, [](const Write& w) { return w.cls == kFromScratch; }))
          check_entry(first, last, tensor, target);
        continue;
      }
      if (target & kScratchTarget)
        check_scratch(first, last, tensor, target);
      else
        check_entry(first, last, tensor, target);
    }
  }

  // Runs of one class inside a target's writes (sorted by cls).
  struct Run {
    const Write* first;
    const Write* last;
  };
  static std::vector<Run> runs(const Write* first, const Write* last) {
    std::vector<Run> out;
    for (const Write* w = first; w != last;) {
      const Write* e = w;
      while (e != last && e->cls == w->cls) ++e;
      out.push_back({w, e});
      w = e;
    }
    return out;
  }

  void check_scratch(const Write* first, const Write* last, uint32_t tensor, uint32_t target) {
    const Box& box = part_.scratch[target & ~kScratchTarget].box;
    for (const Run& r : runs(first, last)) {
      if (r.first->cls == kCopy)
        fail(ErrorCode::kCorrupt, field_,
             target_name(tensor, target) + ": " + piece_name(r.first->where) +
                 " copies a reduced value into a scratch (a scratch takes summands and "
                 "scratch contributions only)");
      if (r.first->cls >= 0 && !tensors_[tensor].src.partial())
        tile(r.first, r.last, {}, box, true, tensor, target,
             " (a staging scratch takes a copy of each of its elements exactly once)");
      else if (r.first->cls >= 0)
        tile(r.first, r.last, {}, box, true, tensor, target,
             " by summand " + std::to_string(r.first->cls) +
                 " (a scratch takes each of its summands over its whole box)");
      if (r.first->cls != kFromScratch) continue;
      // Each source's contribution covers the whole box once, so that every
      // element of a scratch holds the same summands (resolved below).
      for (const Write* w = r.first; w != r.last;) {
        const Write* e = w;
        while (e != r.last && e->device == w->device) ++e;
        tile(w, e, {}, box, true, tensor, target,
             " by the scratch of device " + std::to_string(w->device) +
                 " (a scratch takes each contribution over its whole box)");
        w = e;
      }
    }
  }

  void check_entry(const Write* first, const Write* last, uint32_t tensor, uint32_t e) {
    const TensorSpec& t = tensors_[tensor];
    const Box& box = entry_box_(tensor, false, e);
    const int64_t taken = summands_taken(t, e);
    for (const Write* w = first; w != last; ++w)
      if (w->cls >= 0 && !takes(t, e, w->cls))
        fail(ErrorCode::kCorrupt, field_,
             target_name(tensor, e) + ": " + piece_name(w->where) + " writes source summand " +
                 std::to_string(w->cls) + ", which this entry does not take (summand " +
                 std::to_string(t.dst.summand(e)) + " of " + std::to_string(t.dst.num_summands()) +
                 ")");
    if (taken <= 1) {
      // One value per element, whatever piece brings it.
      tile(first, last, {}, box, true, tensor, e, "");
      return;
    }
    const std::vector<Run> all = runs(first, last);
    std::vector<const Write*> copies;
    bool from_scratch = false;
    std::vector<Run> raw;
    for (const Run& r : all) {
      if (r.first->cls == kCopy)
        for (const Write* w = r.first; w != r.last; ++w) copies.push_back(w);
      else if (r.first->cls == kFromScratch)
        from_scratch = true;
      else
        raw.push_back(r);
    }
    if (from_scratch && sets_) {
      if (expand(first, last, tensor, e, copies, box, taken)) return;
    }
    if (from_scratch) {
      // Scratch contributions carry summands of other parts' buffers: here
      // only duplicates are found (exact.h).
      const Run* checked = nullptr;
      for (const Run& r : raw) {
        if (checked && same_boxes(r.first, r.last, checked->first, checked->last)) continue;
        tile(r.first, r.last, copies, box, false, tensor, e,
             " (copies and summand " + std::to_string(r.first->cls) + ")");
        checked = &r;
      }
      if (raw.empty()) tile(nullptr, nullptr, copies, box, false, tensor, e, " (copies)");
      return;
    }
    if (raw.empty()) {
      tile(nullptr, nullptr, copies, box, true, tensor, e, " (by relayed copies)");
      return;
    }
    if (static_cast<int64_t>(raw.size()) < taken) {
      // Some summand comes nowhere: the copies alone would have to cover
      // the entry, and then the other summands overlap them.
      int32_t missing = 0;
      for (int32_t s = 0; s < t.src.num_summands(); ++s) {
        if (!takes(t, e, s)) continue;
        if (!std::any_of(raw.begin(), raw.end(), [s](const Run& r) { return r.first->cls == s; })) {
          missing = s;
          break;
        }
      }
      tile(nullptr, nullptr, copies, box, true, tensor, e,
           " by summand " + std::to_string(missing) + " (or a relayed copy)");
      tile(raw[0].first, raw[0].last, copies, box, true, tensor, e,
           " (summand " + std::to_string(raw[0].first->cls) + " and relayed copies)");
      return;
    }
    const Run* checked = nullptr;
    for (const Run& r : raw) {
      if (checked && same_boxes(r.first, r.last, checked->first, checked->last)) continue;
      tile(r.first, r.last, copies, box, true, tensor, e,
           " by summand " + std::to_string(r.first->cls) + " (or a relayed copy)");
      checked = &r;
    }
  }

  // The entry's scratch contributions, each replaced by one piece per
  // summand its source scratch holds (ScratchSets): then every summand the
  // entry takes must tile it with the copies, as without scratch. False when
  // some source is unknown (its part is not in the buffer).
  bool expand(const Write* first, const Write* last, uint32_t tensor, uint32_t e,
              const std::vector<const Write*>& copies, const Box& box, int64_t taken) {
    const TensorSpec& t = tensors_[tensor];
    std::vector<Write> virt;
    for (const Write* w = first; w != last; ++w) {
      if (w->cls != kFromScratch) {
        if (w->cls >= 0) virt.push_back(*w);
        continue;
      }
      const std::vector<int32_t>* set = (*sets_)(w->device, tensor, box_of(*w));
      if (set == nullptr) return false;
      for (int32_t s : *set) {
        if (!takes(t, e, s))
          fail(ErrorCode::kCorrupt, field_,
               target_name(tensor, e) + ": " + piece_name(w->where) +
                   " adds a scratch holding source summand " + std::to_string(s) +
                   ", which this entry does not take");
        Write v = *w;
        v.cls = s;
        virt.push_back(v);
      }
    }
    std::sort(virt.begin(), virt.end(),
              [](const Write& a, const Write& b) { return a.cls < b.cls; });
    const std::vector<Run> raw = runs(virt.data(), virt.data() + virt.size());
    if (static_cast<int64_t>(raw.size()) < taken) {
      int32_t missing = 0;
      for (int32_t s = 0; s < t.src.num_summands(); ++s)
        if (takes(t, e, s) &&
            !std::any_of(raw.begin(), raw.end(), [s](const Run& r) { return r.first->cls == s; })) {
          missing = s;
          break;
        }
      tile(nullptr, nullptr, copies, box, true, tensor, e,
           " by summand " + std::to_string(missing) +
               " (directly, through a scratch or by a relayed copy)");
      tile(raw.empty() ? nullptr : raw[0].first, raw.empty() ? nullptr : raw[0].last, copies, box,
           true, tensor, e, " (a summand and relayed copies)");
      return true;
    }
    const Run* checked = nullptr;
    for (const Run& r : raw) {
      if (checked && same_boxes(r.first, r.last, checked->first, checked->last)) continue;
      tile(r.first, r.last, copies, box, true, tensor, e,
           " by summand " + std::to_string(r.first->cls) +
               " (directly, through a scratch or by a relayed copy)");
      checked = &r;
    }
    return true;
  }

  struct Group {
    uint32_t tensor, target;
    size_t first, last;
    uint32_t max_stage;
  };
  const Group* group(uint32_t tensor, uint32_t target) const {
    auto it = std::lower_bound(groups_.begin(), groups_.end(), std::pair{tensor, target},
                               [](const Group& g, const std::pair<uint32_t, uint32_t>& key) {
                                 return std::pair{g.tensor, g.target} < key;
                               });
    return it == groups_.end() || it->tensor != tensor || it->target != target ? nullptr : &*it;
  }

  // Destination entries on this part's devices that take a summand and no
  // piece writes at all.
  void check_written(const std::vector<std::pair<uint32_t, uint32_t>>& entries) {
    for (const auto& [tensor, e] : entries) {
      const TensorSpec& t = tensors_[tensor];
      if (summands_taken(t, e) == 0 || group(tensor, e)) continue;
      const Box& box = entry_box_(tensor, false, e);
      if (box.empty()) continue;
      fail(ErrorCode::kCorrupt, field_,
           target_name(tensor, e) + ": elements " + to_string(box) +
               " are never written (no local or received piece writes this entry)");
    }
  }

  // A piece of stage s > 0 reading a buffer of this part reads no element
  // a piece of stage s or later writes. Per (tensor, target) group and per
  // stage s of its reads: the reads of stage s against the group's writes
  // of stage >= s only, by a sweep along the dimension where the fewest
  // (read, write) pairs overlap (counted first, exactly, by sorting), so
  // that the work is those pairs plus O(n log n), linear in the pieces for
  // the plans the planner writes. The pair counts are charged to a budget
  // before any sweep: a part whose reads would cost more is refused
  // (kCorrupt) instead of being checked slowly.
  void check_reads() {
    struct Read {
      uint32_t tensor, target, stage;
      uint64_t k;
      Box box;
    };
    std::vector<Read> reads;
    for (const Message& m : part_.sends) {
      if (m.stage == 0) continue;
      for (uint64_t k = m.first_piece; k < m.first_piece + m.num_pieces; ++k) {
        const Piece& p = part_.send_pieces[k];
        if (reads_source(p, m.stage)) continue;
        Box region = region_of(p, m.stage);
        if (region.empty()) continue;
        const uint32_t target = p.src_entry == kScratchEntry
                                    ? scratch_target(p.tensor, m.src_device, region)
                                    : p.src_entry;
        const Group* it = group(p.tensor, target);
        if (it == nullptr || it->max_stage < m.stage) continue;
        reads.push_back({p.tensor, target, m.stage, k, region});
      }
    }
    if (reads.empty()) return;
    std::sort(reads.begin(), reads.end(), [](const Read& a, const Read& b) {
      return std::tie(a.tensor, a.target, a.stage, a.k) <
             std::tie(b.tensor, b.target, b.stage, b.k);
    });
    uint64_t budget = 64 * (writes_.size() + part_.send_pieces.size()) + (uint64_t{1} << 20);
    auto spend = [&](uint64_t n) {
      if (n > budget)
        fail(ErrorCode::kCorrupt, field_,
             "its relays read buffers written in the same stages in ways too costly to check");
      budget -= n;
    };
    // The first read (in send order) of any conflict, and its group.
    uint64_t best = UINT64_MAX;
    const Read* best_read = nullptr;
    std::vector<std::pair<uint32_t, Box>> written;  // (stage, box), by stage descending
    std::vector<Swept> rs, ws;
    for (size_t g = 0, g_end = 0; g < reads.size(); g = g_end) {
      g_end = g;
      while (g_end < reads.size() && reads[g_end].tensor == reads[g].tensor &&
             reads[g_end].target == reads[g].target)
        ++g_end;
      const Group* it = group(reads[g].tensor, reads[g].target);
      written.clear();
      for (size_t i = it->first; i < it->last; ++i)
        if (writes_[i].stage >= reads[g].stage)
          written.emplace_back(writes_[i].stage, box_of(writes_[i]));
      spend(written.size() + (g_end - g));
      std::sort(written.begin(), written.end(),
                [](const auto& a, const auto& b) { return a.first > b.first; });
      for (size_t s = g, s_end = g; s < g_end; s = s_end) {
        const uint32_t stage = reads[s].stage;
        s_end = s;
        while (s_end < g_end && reads[s_end].stage == stage) ++s_end;
        size_t n_w = 0;
        while (n_w < written.size() && written[n_w].first >= stage) ++n_w;
        if (n_w == 0) break;  // later stages have fewer writes still
        rs.clear();
        ws.clear();
        for (size_t i = s; i < s_end; ++i)
          if (reads[i].k < best) rs.push_back({&reads[i].box, reads[i].k});
        for (size_t i = 0; i < n_w; ++i) ws.push_back({&written[i].second, 0});
        if (rs.empty()) continue;
        const uint64_t k = first_meeting(rs, ws, spend);
        if (k < best) {
          best = k;
          for (size_t i = s; i < s_end; ++i)
            if (reads[i].k == k) best_read = &reads[i];
        }
      }
    }
    if (best_read == nullptr) return;
    // Name the first write the read meets, in the group's order.
    const Read& r = *best_read;
    const Group* it = group(r.tensor, r.target);
    for (size_t i = it->first; i < it->last; ++i) {
      const Write& w = writes_[i];
      if (w.stage < r.stage) continue;
      const Box overlap = intersect(box_of(w), r.box);
      if (overlap.empty()) continue;
      fail(ErrorCode::kCorrupt, field_,
           target_name(r.tensor, r.target) + ": " + piece_name(r.k | kSendBit) + " of stage " +
               std::to_string(r.stage) + " reads elements " + to_string(overlap) + " that " +
               piece_name(w.where) + " writes in stage " + std::to_string(w.stage) +
               " (a stage reads only what earlier stages wrote)");
    }
    fail(ErrorCode::kInternal, field_, "a conflicting read lost its write");
  }

  // The pieces this part sends into one buffer of a peer are disjoint per
  // summand: no piece is sent twice.
  void check_sends() {
    std::vector<Write> sent;
    sent.reserve(part_.send_pieces.size());
    for (const Message& m : part_.sends)
      for (uint64_t k = m.first_piece; k < m.first_piece + m.num_pieces; ++k) {
        const Piece& p = part_.send_pieces[k];
        add(sent, p, m.stage, m.dst_device, k | kSendBit, false);
        if (sent.empty() || sent.back().where != (k | kSendBit)) continue;
        Write& w = sent.back();
        w.peer = m.dst_device;
        if (w.cls == kFromScratch) w.device = m.src_device;
        // One value per element where the entry takes at most one summand.
        if (p.dst_entry != kScratchEntry && w.cls != kFromScratch &&
            summands_taken(tensors_[p.tensor], p.dst_entry) <= 1)
          w.cls = kCopy;
      }
    std::sort(sent.begin(), sent.end(), [](const Write& a, const Write& b) {
      return std::tie(a.tensor, a.target, a.cls, a.peer, a.device) <
             std::tie(b.tensor, b.target, b.cls, b.peer, b.device);
    });
    for (size_t g = 0, g_end = 0; g < sent.size(); g = g_end) {
      g_end = g;
      const Write& a = sent[g];
      while (g_end < sent.size() && sent[g_end].tensor == a.tensor &&
             sent[g_end].target == a.target && sent[g_end].cls == a.cls &&
             sent[g_end].peer == a.peer && sent[g_end].device == a.device)
        ++g_end;
      if (g_end - g < 2) continue;
      const TensorSpec& t = tensors_[a.tensor];
      const Box box =
          a.target == kScratchTarget ? t.src.full_box() : entry_box_(a.tensor, false, a.target);
      held_.clear();
      for (size_t i = g; i < g_end; ++i) held_.push_back(box_of(sent[i]));
      boxes_.clear();
      for (const Box& b : held_) boxes_.push_back(&b);
      Tiler tiler(256 * (boxes_.size() + 1) * static_cast<uint64_t>(std::max(box.rank, 1)) +
                      (uint64_t{1} << 16),
                  field_);
      if (auto bad = tiler.check(boxes_, box, false)) {
        std::string pieces;
        int named = 0;
        for (size_t i = g; i < g_end && named < 2; ++i)
          if (!intersect(held_[i - g], bad->where).empty())
            pieces += (named++ ? ", " : " (") + piece_name(sent[i].where);
        fail(ErrorCode::kCorrupt, field_,
             "tensor \"" + t.name + "\": elements " + to_string(bad->where) + " are sent twice" +
                 (a.target == kScratchTarget
                      ? " into the scratch of device " + std::to_string(a.peer)
                      : " into destination entry " + std::to_string(a.target)) +
                 (a.cls >= 0 ? " (summand " + std::to_string(a.cls) + ")" : std::string()) +
                 pieces);
      }
    }
  }

  const ProcessPart& part_;
  const std::vector<TensorSpec>& tensors_;
  const EntryBox& entry_box_;
  const std::string& field_;
  std::vector<Write> writes_;  // local and received pieces, by (tensor, target, cls)
  std::vector<Group> groups_;  // runs of writes_ per (tensor, target), sorted
  std::vector<Box> held_;      // the boxes of the writes being checked
  std::vector<const Box*> boxes_;
  const ScratchSetOf* sets_ = nullptr;
  bool only_scratch_reductions_ = false;
};

std::string message_name(const Message& m) {
  return "the message of stage " + std::to_string(m.stage) + ", round " + std::to_string(m.round) +
         " from device " + std::to_string(m.src_device) + " to device " +
         std::to_string(m.dst_device) + (m.sub != 0 ? ", sub " + std::to_string(m.sub) : "");
}

}  // namespace

void check_parts_agree(const std::map<int32_t, ProcessPart>& parts,
                       const std::function<int32_t(int64_t device)>& process_of,
                       const std::string& field) {
  using Key = std::tuple<uint32_t, uint32_t, int64_t, int64_t, uint32_t>;
  auto key = [](const Message& m) {
    return Key{m.stage, m.round, m.src_device, m.dst_device, m.sub};
  };
  // Per receiving process: the messages other held parts send it, by key.
  std::map<int32_t, std::vector<std::pair<const ProcessPart*, const Message*>>> sent;
  for (const auto& [p, part] : parts)
    for (const Message& m : part.sends) {
      const int32_t q = process_of(m.dst_device);
      if (parts.count(q)) sent[q].emplace_back(&part, &m);
    }
  for (auto& [q, list] : sent) {
    std::sort(list.begin(), list.end(),
              [&](const auto& a, const auto& b) { return key(*a.second) < key(*b.second); });
    const ProcessPart& recv = parts.at(q);
    // The receiving part's messages from held parts, in the same order.
    std::vector<const Message*> got;
    for (const Message& m : recv.recvs)
      if (parts.count(process_of(m.src_device))) got.push_back(&m);
    for (size_t i = 0; i < std::max(list.size(), got.size()); ++i) {
      const Message* a = i < list.size() ? list[i].second : nullptr;
      const Message* b = i < got.size() ? got[i] : nullptr;
      if (!a || !b || key(*a) != key(*b))
        fail(ErrorCode::kCorrupt, field,
             (a && (!b || key(*a) < key(*b))
                  ? "process " + std::to_string(process_of(a->src_device)) + " sends " +
                        message_name(*a) + ", which process " + std::to_string(q) +
                        " does not receive"
                  : "process " + std::to_string(q) + " receives " + message_name(*b) +
                        ", which process " + std::to_string(process_of(b->src_device)) +
                        " does not send"));
      const ProcessPart& from = *list[i].first;
      bool same = a->num_pieces == b->num_pieces && a->bytes == b->bytes;
      for (uint64_t k = 0; same && k < a->num_pieces; ++k) {
        const Piece& x = from.send_pieces[a->first_piece + k];
        const Piece& y = recv.recv_pieces[b->first_piece + k];
        same = x.tensor == y.tensor && x.src_entry == y.src_entry && x.dst_entry == y.dst_entry &&
               (x.region == kOverlapRegion) == (y.region == kOverlapRegion) &&
               (x.region == kOverlapRegion || from.regions[x.region] == recv.regions[y.region]);
      }
      if (!same)
        fail(ErrorCode::kCorrupt, field,
             "process " + std::to_string(process_of(a->src_device)) + " and process " +
                 std::to_string(q) + " disagree on the pieces of " + message_name(*a) +
                 " (the sender would pack other elements than the receiver unpacks)");
    }
  }
}

void check_scratch_reductions(const std::map<int32_t, ProcessPart>& parts,
                              const std::vector<TensorSpec>& tensors,
                              const std::function<int32_t(int64_t device)>& process_of,
                              const EntryBox& entry_box, const std::string& field) {
  bool any = false;
  for (const auto& [p, part] : parts) any |= !part.scratch.empty();
  if (!any) return;
  // Per part, per scratch: its raw summands and the scratch contributions
  // it receives (sending device, region), from its local and received
  // pieces; then each scratch's summands, resolved through the sources
  // (stages only go forward, so the recursion ends; a cycle is corrupt).
  struct Into {
    std::vector<int32_t> raw;
    std::vector<std::pair<int64_t, Box>> from;
    std::vector<int32_t> set;
    int state = 0;  // 0: not resolved, 1: resolving, 2: resolved, 3: unknown
  };
  std::map<std::pair<int32_t, int64_t>, Into> into;
  for (const auto& entry : parts) {
    // Named, not structured, bindings: clang 14 (the fuzz build) does not
    // let a lambda capture a structured binding.
    const int32_t p = entry.first;
    const ProcessPart& part = entry.second;
    auto add = [&](const Piece& q, uint32_t stage, int64_t device, int64_t from) {
      if (q.dst_entry != kScratchEntry || q.region >= part.regions.size()) return;
      const Box& r = part.regions[q.region];
      // A piece that moves no element brings no summand: the part checks
      // skip it too, so counting it would let a scratch claim a summand (or
      // a source scratch's summands) that never arrives (fuzz_plan_attack).
      if (r.empty()) return;
      const int64_t k = find_scratch(part, q.tensor, device, r);
      if (k < 0) return;
      Into& x = into[{p, k}];
      if (q.src_entry == kScratchEntry)
        x.from.emplace_back(from, r);
      else if (reads_source(q, stage))
        x.raw.push_back(tensors[q.tensor].src.summand(q.src_entry));
    };
    for (const Piece& q : part.local) add(q, 0, tensors[q.tensor].src.device(q.src_entry), -1);
    for (const Message& m : part.recvs)
      for (uint64_t k = m.first_piece; k < m.first_piece + m.num_pieces; ++k)
        add(part.recv_pieces[k], m.stage, m.dst_device, m.src_device);
  }
  std::function<const std::vector<int32_t>*(int64_t, uint32_t, const Box&)> set_of =
      [&](int64_t device, uint32_t tensor, const Box& region) -> const std::vector<int32_t>* {
    const int32_t p = process_of(device);
    auto part = parts.find(p);
    if (part == parts.end()) return nullptr;
    const int64_t k = find_scratch(part->second, tensor, device, region);
    if (k < 0) return nullptr;
    Into& x = into[{p, k}];
    if (x.state == 2) return &x.set;
    if (x.state == 3) return nullptr;
    if (x.state == 1)
      fail(ErrorCode::kCorrupt, field,
           "scratch " + std::to_string(k) + " of process " + std::to_string(p) +
               " takes contributions that depend on itself");
    x.state = 1;
    // A summand or a source arrives in several pieces (cut into rounds);
    // each covers the box once (check_part_exact), so each counts once.
    std::vector<int32_t> set = x.raw;
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    std::vector<const std::vector<int32_t>*> sources;
    for (const auto& [from, r] : x.from) {
      const std::vector<int32_t>* s = set_of(from, tensor, r);
      if (s == nullptr) {
        x.state = 3;
        return nullptr;
      }
      if (std::find(sources.begin(), sources.end(), s) == sources.end()) sources.push_back(s);
    }
    for (const std::vector<int32_t>* s : sources) set.insert(set.end(), s->begin(), s->end());
    std::sort(set.begin(), set.end());
    if (auto d = std::adjacent_find(set.begin(), set.end()); d != set.end())
      fail(ErrorCode::kCorrupt, field,
           "scratch " + std::to_string(k) + " of process " + std::to_string(p) + " (device " +
               std::to_string(device) + ", tensor \"" + tensors[tensor].name +
               "\") takes source summand " + std::to_string(*d) +
               " twice (directly or through the scratch it receives)");
    x.set = std::move(set);
    x.state = 2;
    return &x.set;
  };
  size_t i = 0;
  for (const auto& [p, part] : parts) {
    const std::string f = field + "[" + std::to_string(i++) + "]";
    PartChecker(part, tensors, entry_box, f, &set_of).run_scratch_reductions();
  }
}

void check_part_exact(const ProcessPart& part, const std::vector<TensorSpec>& tensors,
                      const std::vector<std::pair<uint32_t, uint32_t>>& entries,
                      const EntryBox& entry_box, const std::string& field) {
  PartChecker(part, tensors, entry_box, field).run(entries);
}

}  // namespace reshard::wire
