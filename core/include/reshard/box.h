// reshard — N-d boxes: half-open index ranges [lo, hi) per dimension.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "reshard/hd.h"

namespace reshard {

// The largest tensor rank reshard handles. Fixed so that boxes and copy
// descriptors are plain structs that can live in CUDA constant memory.
inline constexpr int kMaxRank = 8;

struct Box {
  int32_t rank = 0;
  std::array<int64_t, kMaxRank> lo{};
  std::array<int64_t, kMaxRank> hi{};

  RESHARD_HD int64_t extent(int d) const { return hi[d] - lo[d]; }
  // Number of elements; a rank-0 box holds one element. Callers validate
  // sizes first, so this cannot overflow for boxes built by reshard.
  RESHARD_HD int64_t volume() const {
    int64_t v = 1;
    for (int d = 0; d < rank; ++d) v *= (hi[d] > lo[d] ? hi[d] - lo[d] : 0);
    return v;
  }
  RESHARD_HD bool empty() const { return volume() == 0; }
  RESHARD_HD bool contains(const Box& b) const {
    for (int d = 0; d < rank; ++d)
      if (b.lo[d] < lo[d] || b.hi[d] > hi[d]) return false;
    return true;
  }
  friend bool operator==(const Box& a, const Box& b) {
    if (a.rank != b.rank) return false;
    for (int d = 0; d < a.rank; ++d)
      if (a.lo[d] != b.lo[d] || a.hi[d] != b.hi[d]) return false;
    return true;
  }
};

// Intersection; empty (some hi <= lo) when they do not overlap.
RESHARD_HD inline Box intersect(const Box& a, const Box& b) {
  Box r;
  r.rank = a.rank;
  for (int d = 0; d < a.rank; ++d) {
    r.lo[d] = a.lo[d] > b.lo[d] ? a.lo[d] : b.lo[d];
    r.hi[d] = a.hi[d] < b.hi[d] ? a.hi[d] : b.hi[d];
    if (r.hi[d] < r.lo[d]) r.hi[d] = r.lo[d];
  }
  return r;
}

// "[0:4, 2:8]"
std::string to_string(const Box& box);

}  // namespace reshard
