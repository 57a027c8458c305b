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
