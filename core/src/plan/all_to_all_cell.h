// Internal (routed_cells.h: RoutedCells::cell, all_to_all_cell.cc): a
// destination cell whose regions each enter every host of the cell, one
// entry a host (the device rule's cells: an all-to-all among the cell's
// entries). Every entry then takes the
// relay parts of a source entry alike: the parts that entered the
// source's host, in the same order, so the pending piece of every (entry,
// source) pair (RelayMerger) is the same. The statistics keep one pending
// piece and one running sum per source, add the sums to every pair at the
// end of the cell, and visit a part once instead of once per entry (2.4 G
// piece visits of the device rule's trial on DeepSeek-V3 at 1,024
// devices). Each pair's streams are still counted at its first part, in
// the order the entries would count them (AllToAllCell::events).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plan/enumerate.h"

namespace reshard::planning {

// The boxes each_linear_box(B, s, e, f) yields (cross_layout.h), told by
// the elements' row digits rather than made one by one: their number, and
// the first and the last (what an all-to-all run's relay merge reads: no
// box of such a cover extends the one before it, RelayMerger::extends).
// The digits of the last range's end are kept: a range starting there (a
// share's next run) takes them without dividing again.
class LinearCover {
 public:
  explicit LinearCover(const Box& B) : B_(B) {
    if (B.rank == 0) return;
    inner_[static_cast<size_t>(B.rank - 1)] = 1;
    for (int d = B.rank - 2; d >= 0; --d) inner_[d] = inner_[d + 1] * B.extent(d + 1);
  }
  // The boxes of elements [s, e): their number; the first and last where
  // asked for (both null, or both not).
  int64_t run(int64_t s, int64_t e, Box* first, Box* last) {
    if (s >= e) return 0;
    if (B_.rank == 0) {
      if (first) *first = *last = B_;
      return 1;
    }
    const int rank = B_.rank;
    if (s == end_) {
      qs_ = qe_;
    } else {
      digits(s, qs_);
    }
    digits(e, qe_);
    end_ = e;
    int d = 0;
    while (qs_[d] == qe_[d]) ++d;  // s < e: some digit differs
    int ks = -1, ke = -1;          // the deepest nonzero digit below d of s, of e
    for (int k = d + 1; k < rank; ++k) {
      if (qs_[k] != 0) ks = k;
      if (qe_[k] != 0) ke = k;
    }
    // The rest of s's row (levels ks down to d + 1), the whole rows, the
    // start of e's row (levels d + 1 up to ke), as each_linear_box.
    int rest_first = -1, rest_last = -1;
    int64_t n = 0;
    for (int k = ks; k > d; --k)
      if (rest_start(k, ks) < B_.extent(k)) {
        if (rest_first < 0) rest_first = k;
        rest_last = k;
        ++n;
      }
    const int64_t m0 = qs_[d] + (ks >= 0);
    const bool mid = m0 < qe_[d];
    n += mid;
    int start_first = -1, start_last = -1;
    for (int k = d + 1; k <= ke; ++k)
      if (qe_[k] > 0) {
        if (start_first < 0) start_first = k;
        start_last = k;
        ++n;
      }
    if (!first) return n;
    const auto rest = [&](Box& w, int k) { make(w, d, qs_, k, rest_start(k, ks), B_.extent(k)); };
    const auto start = [&](Box& w, int k) { make(w, d, qe_, k, 0, qe_[k]); };
    if (rest_first >= 0)
      rest(*first, rest_first);
    else if (mid)
      make(*first, d, qs_, d, m0, qe_[d]);
    else
      start(*first, start_first);
    if (start_last >= 0)
      start(*last, start_last);
    else if (mid)
      make(*last, d, qs_, d, m0, qe_[d]);
    else
      rest(*last, rest_last);
    return n;
  }

 private:
  using Digits = std::array<int64_t, kMaxRank>;
  // x's row in each dimension (the first not reduced: x may be the end).
  void digits(int64_t x, Digits& q) const {
    const int last = B_.rank - 1;
    for (int k = 0; k < last; ++k) {
      q[k] = x / inner_[k];
      x -= q[k] * inner_[k];
    }
    q[last] = x;
  }
  int64_t rest_start(int k, int ks) const { return qs_[k] + (k != ks); }
  // B with the rows of q fixed above `level` (q's row d at d), [lo, hi)
  // at `level`, whole below.
  void make(Box& w, int d, const Digits& q, int level, int64_t lo, int64_t hi) const {
    w = B_;
    for (int k = 0; k < level; ++k) {
      w.lo[k] = B_.lo[k] + (k < d ? qs_[k] : q[k]);
      w.hi[k] = w.lo[k] + 1;
    }
    w.lo[level] = B_.lo[level] + lo;
    w.hi[level] = B_.lo[level] + hi;
  }

  const Box& B_;
  Digits inner_{}, qs_{}, qe_{};
  int64_t end_ = -1;
};

// One source entry of such a cell.
struct AllToAllSource {
  bool seen = false;     // a part of it taken in the cell (its pairs' streams counted)
  bool banded = false;   // a part of it cut into bands (its pairs' band streams counted)
  bool touched = false;  // a part of it summed since the last flush
  // The piece pending from it at every other entry: band, box.
  bool has_pending = false;
  uint32_t pending_band = 0;
  Box pending;
  // Summed since the last flush: pieces added, bytes, bytes of band 0,
  // bytes of the bands above 0, their numbers (a mask) and bytes by band.
  int64_t added = 0, bytes = 0, plain = 0, late = 0;
  uint32_t mask = 0;
  std::array<int64_t, kRelayBands> band{};

  // RelayMerger on the pending piece for a part of n bands, the first and
  // last (numbered last_band) `first` and `last`: the pieces it adds.
  int64_t merge(const Box& first, const Box& last, int64_t n, uint32_t last_band) {
    int64_t added = n;
    bool grew = false;
    if (has_pending && pending_band == 0 && RelayMerger::extends(pending, first)) {
      --added;
      grew = n == 1;  // the pending piece grew (kept as it was)
    }
    if (!grew) {
      pending = last;
      pending_band = last_band;
    }
    has_pending = true;
    return added;
  }
  void clear_sums() {
    touched = false;
    added = bytes = plain = late = 0;
    mask = 0;
    band.fill(0);
  }
};

// The cell's state while its relay parts are taken alike (`on`).
struct AllToAllCell {
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Ref {  // a pair's streams: where its bytes add up
    uint32_t plain = kNone, banded = kNone;
  };
  struct Event {  // a source's first part (band: first banded part) in the cell
    uint32_t p = 0;
    bool band = false;
  };
  bool on = false;
  std::vector<AllToAllSource> src;  // per source position in the cell
  std::vector<Ref> ref;             // per (entry, source) position: entry * m + source
  std::vector<Event> events;        // the region's, in part order
  std::vector<uint32_t> pos;        // per CellHosts slot of the cell: its entry's position
  std::vector<uint32_t> part;       // per part: its source's position, kNone for a direct one

  void start(size_t m) {
    src.assign(m, AllToAllSource{});
    ref.assign(m * m, Ref{});
    on = true;
  }
  // Groups the region's parts by the receiving index they enter
  // (part_entry; -1: direct, sent to every receiving host).
  void sort_parts(const std::vector<int32_t>& part_entry, size_t m) {
    begin_.assign(m + 1, 0);
    direct_.clear();
    for (size_t j = 0; j < part_entry.size(); ++j) {
      if (part_entry[j] < 0)
        direct_.push_back(static_cast<uint32_t>(j));
      else
        ++begin_[static_cast<size_t>(part_entry[j]) + 1];
    }
    for (size_t k = 0; k < m; ++k) begin_[k + 1] += begin_[k];
    order_.resize(begin_[m]);
    cursor_.assign(begin_.begin(), begin_.end() - 1);
    for (size_t j = 0; j < part_entry.size(); ++j)
      if (part_entry[j] >= 0)
        order_[cursor_[static_cast<size_t>(part_entry[j])]++] = static_cast<uint32_t>(j);
  }
  bool any_entered() const { return !order_.empty(); }
  bool any_direct() const { return !direct_.empty(); }
  // f(j) for the parts entering receiving index idx, in part order.
  template <class F>
  void each_entered(size_t idx, F&& f) const {
    for (size_t y = begin_[idx]; y < begin_[idx + 1]; ++y) f(order_[y]);
  }
  // f(j) for the direct parts and those entering receiving index idx: an
  // entry's stage-0 parts, in part order.
  template <class F>
  void each_stage0(size_t idx, F&& f) const {
    size_t x = 0, y = begin_[idx];
    const size_t ye = begin_[idx + 1];
    while (x < direct_.size() || y < ye) {
      const bool direct = y == ye || (x < direct_.size() && direct_[x] < order_[y]);
      f(direct ? direct_[x++] : order_[y++]);
    }
  }

 private:
  std::vector<uint32_t> order_;  // the entered parts by receiving index, in part order
  std::vector<size_t> begin_;    // per receiving index: offset into order_ (+1)
  std::vector<size_t> cursor_;
  std::vector<uint32_t> direct_;  // the direct parts, in order
};

}  // namespace reshard::planning
