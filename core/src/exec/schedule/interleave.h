// Internal: the interleaved groups of the direct copies of one round
// (DirectCopy::interleave), part of building a schedule (engine_schedule.cc,
// sort_direct).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "exec/schedule/engine_schedule.h"

namespace reshard::engine_detail {

// Positions [b, e) of `order` (indices into `direct`, one round's copies):
// the copies of stage 0 without a cast that read slices of the same rows
// of one source buffer become groups of consecutive positions in source
// order, each placed where its first copy was, with interleave[first] its
// size (else 0); the others keep their order. `desc_of` gives a copy's
// descriptor (DirectCopy::desc is not set yet).
void interleave_round(std::span<const DirectCopy> direct, const std::vector<TensorSpec>& tensors,
                      const std::function<CopyDesc(const DirectCopy&)>& desc_of,
                      std::vector<uint32_t>& order, std::vector<uint32_t>& interleave, size_t b,
                      size_t e);

// Sorts `v` by `before`, a strict total order (no two elements equal):
// when `v` is at most kMaxMergedRuns ascending runs, by merging them
// pairwise (one pass over `v` per halving of the runs), else by std::sort.
// Either gives the same order.
inline constexpr size_t kMaxMergedRuns = 256;
template <class T, class Before>
void sort_runs(std::vector<T>& v, const Before& before) {
  std::vector<size_t> runs{0};  // where each run starts, then v.size()
  for (size_t i = 1; i < v.size() && runs.size() <= kMaxMergedRuns; ++i) {
    if (before(v[i], v[i - 1])) runs.push_back(i);
  }
  if (runs.size() > kMaxMergedRuns) {
    std::sort(v.begin(), v.end(), before);
    return;
  }
  runs.push_back(v.size());
  std::vector<T> merged(v.size());
  while (runs.size() > 2) {
    // Runs 0 and 1, 2 and 3, ... into `merged`; an odd last run copied.
    size_t kept = 1;
    for (size_t r = 0; r + 1 < runs.size(); r += 2) {
      const auto at = [&](size_t k) { return v.begin() + static_cast<std::ptrdiff_t>(k); };
      const size_t end = r + 2 < runs.size() ? runs[r + 2] : runs[r + 1];
      std::merge(at(runs[r]), at(runs[r + 1]), at(runs[r + 1]), at(end),
                 merged.begin() + static_cast<std::ptrdiff_t>(runs[r]), before);
      runs[kept++] = end;
    }
    runs.resize(kept);
    v.swap(merged);
  }
}

}  // namespace reshard::engine_detail
