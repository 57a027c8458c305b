#include "exec/schedule/interleave.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "reshard/box_copy.h"

namespace reshard::engine_detail {
namespace {

// Copies that read slices of the same rows of one source buffer (a
// row-sharded source cut into columns, one slice per destination) become
// groups of consecutive copies in source order (DirectCopy::interleave).
// Copied one slice after the other, such a source is
// read once per slice with a stride, each run in another page; interleaved,
// it is read once, in order (320-byte runs, 64 MiB: 1.3-1.4x memcpy's
// speed instead of 0.7-0.9 in a microbenchmark on the development machine).
constexpr int64_t kLongRunBytes = 1024;
constexpr size_t kMaxLongRunGroup = 4;
// Runs longer than this are not grouped beyond kMaxLongRunGroup even when
// they make up whole rows: each is a long contiguous read on its own
// (eight 64 KiB or 256 KiB runs per row: 0.7-0.8 of memcpy interleaved,
// 1.1-1.2 copy by copy, in a microbenchmark).
constexpr int64_t kMaxWholeRowRunBytes = int64_t{16} << 10;

}  // namespace

void interleave_round(std::span<const DirectCopy> direct, const std::vector<TensorSpec>& tensors,
                      const std::function<CopyDesc(const DirectCopy&)>& desc_of,
                      std::vector<uint32_t>& order, std::vector<uint32_t>& interleave, size_t b,
                      size_t e) {
  struct Item {
    // Sort key: the source buffer (its piece's tensor and source entry),
    // the stage and the shape (runs and source strides, as an index into
    // `shapes`), the first source element, the position.
    uint64_t buffer;     // tensor << 32 | source entry
    uint64_t shape;      // stage << 32 | shape index
    int64_t src_offset;  // its first source element
    size_t index;        // a position in order
    int64_t src_end;     // one past the last source element of its first run
    int64_t run;         // elements per run
    int64_t row;         // the source stride of the runs' rows
    uint32_t tensor;
  };
  // The distinct shapes of the round: each descriptor's rank, and its
  // extents and source strides outside the innermost dimension, found by
  // a hash of them.
  struct Shape {
    int32_t rank;
    int64_t extent[kMaxRank];
    int64_t src_stride[kMaxRank];
  };
  std::vector<Shape> shapes;
  std::unordered_multimap<uint64_t, uint32_t> shape_of;
  uint32_t last = 0;  // the shape found last (consecutive copies mostly share theirs)
  const auto shape_index = [&](const CopyDesc& d) {
    const auto same = [&](const Shape& x) {
      if (x.rank != d.rank) return false;
      for (int k = 0; k + 1 < d.rank; ++k) {
        if (x.extent[k] != d.extent[k] || x.src_stride[k] != d.src_stride[k]) return false;
      }
      return true;
    };
    if (!shapes.empty() && same(shapes[last])) return last;
    uint64_t h = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(d.rank + 1);
    for (int k = 0; k + 1 < d.rank; ++k) {
      h = (h ^ static_cast<uint64_t>(d.extent[k])) * 0x100000001b3ull;
      h = (h ^ static_cast<uint64_t>(d.src_stride[k])) * 0x100000001b3ull;
    }
    for (auto [it, end] = shape_of.equal_range(h); it != end; ++it) {
      if (same(shapes[it->second])) return last = it->second;
    }
    Shape x{};
    x.rank = d.rank;
    for (int k = 0; k + 1 < d.rank; ++k) {
      x.extent[k] = d.extent[k];
      x.src_stride[k] = d.src_stride[k];
    }
    const auto i = static_cast<uint32_t>(shapes.size());
    shapes.push_back(x);
    shape_of.emplace(h, i);
    return last = i;
  };
  std::vector<Item> items;
  items.reserve(e - b);
  for (size_t i = b; i < e; ++i) {
    const DirectCopy& c = direct[order[i]];
    // A relay reads a destination entry, which copies of the same round
    // may be writing elsewhere (copy_boxes_interleaved reads between rows).
    // A cast converts copy by copy (cast_box).
    if (c.stage != 0 || has_cast(tensors[c.piece->tensor])) continue;
    const CopyDesc d = desc_of(c);
    if (d.rank < 2 || copy_desc_runs(d) < 2) continue;
    const int64_t run = copy_desc_run_length(d);
    items.push_back({uint64_t{c.piece->tensor} << 32 | c.piece->src_entry,
                     uint64_t{c.stage} << 32 | shape_index(d), d.src_offset, i, d.src_offset + run,
                     run, d.src_stride[d.rank - 2], c.piece->tensor});
  }
  if (items.size() < 2) return;
  // Same source buffer and shape (equal keys), then source order. Only the
  // grouping of equal keys matters, not the order of different ones.
  const auto same_key = [](const Item& x, const Item& y) {
    return x.buffer == y.buffer && x.shape == y.shape;
  };
  const auto before = [](const Item& x, const Item& y) {
    return std::tie(x.buffer, x.shape, x.src_offset, x.index) <
           std::tie(y.buffer, y.shape, y.src_offset, y.index);
  };
  // Mostly a few ascending runs: a round's copies by message, each
  // message's in tensor order.
  sort_runs(items, before);
  // Groups: equal keys, first runs within one source row (from the first
  // copy's first element to the last one's end no more than the row
  // stride), at most kMaxInterleavedCopies.
  std::vector<std::pair<size_t, size_t>> groups;  // [first, last) of items
  for (size_t i = 0; i < items.size();) {
    size_t j = i + 1;
    const int64_t start = items[i].src_offset;
    const int64_t row = items[i].row;
    int64_t end = items[i].src_end;
    while (j < items.size() && j - i < static_cast<size_t>(kMaxInterleavedCopies) &&
           same_key(items[i], items[j]) && std::max(end, items[j].src_end) - start <= row) {
      end = std::max(end, items[j].src_end);
      ++j;
    }
    // Long runs (a run of kLongRunBytes reads many lines in a row anyway)
    // are interleaved only in small groups: with many of them at once the
    // destinations' write streams cost more than the strided reads
    // (rows -> columns over 8 devices, 1440-byte runs: 0.73-0.78 of memcpy
    // interleaved, 0.81 not; 2x4 blocks -> columns, two 2 KiB runs per
    // row: 1.11 interleaved, 0.89 not).
    int64_t longest = 0;
    for (size_t k = i; k < j; ++k) longest = std::max(longest, items[k].run);
    const int64_t longest_bytes = longest * dtype_size(tensors[items[i].tensor].dtype);
    const bool long_runs = longest_bytes >= kLongRunBytes;
    // Runs (up to 16 KiB) that abut and make up whole source rows: the
    // group reads its source from end to end, as the hardware prefetchers
    // follow it, in groups of any size (eight 1440-byte runs per row:
    // 1.1-1.3x memcpy interleaved, 0.9-0.95 copy by copy; with one of the
    // eight slices missing, 0.85-0.9 interleaved).
    bool whole_rows = end - start == row && longest_bytes <= kMaxWholeRowRunBytes;
    for (size_t k = i + 1; k < j && whole_rows; ++k) {
      whole_rows = items[k].src_offset == items[k - 1].src_end;
    }
    if (j - i >= 2 && (!long_runs || j - i <= kMaxLongRunGroup || whole_rows)) {
      groups.emplace_back(i, j);
    }
    i = j;
  }
  if (groups.empty()) return;
  // The new order: each group where its first copy (in the old order) was.
  std::vector<int64_t> group_of(e - b, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = groups[g].first; i < groups[g].second; ++i) {
      group_of[items[i].index - b] = static_cast<int64_t>(g);
    }
  }
  std::vector<uint32_t> order_new;
  std::vector<uint32_t> interleave_new;
  order_new.reserve(e - b);
  interleave_new.reserve(e - b);
  std::vector<char> placed(groups.size(), 0);
  for (size_t i = b; i < e; ++i) {
    const int64_t g = group_of[i - b];
    if (g < 0) {
      order_new.push_back(order[i]);
      interleave_new.push_back(0);
      continue;
    }
    if (placed[static_cast<size_t>(g)]) continue;
    placed[static_cast<size_t>(g)] = 1;
    const auto [first, last] = groups[static_cast<size_t>(g)];
    for (size_t k = first; k < last; ++k) {
      order_new.push_back(order[items[k].index]);
      interleave_new.push_back(k == first ? static_cast<uint32_t>(last - first) : 0);
    }
  }
  std::copy(order_new.begin(), order_new.end(), order.begin() + static_cast<std::ptrdiff_t>(b));
  std::copy(interleave_new.begin(), interleave_new.end(),
            interleave.begin() + static_cast<std::ptrdiff_t>(b));
}

}  // namespace reshard::engine_detail
