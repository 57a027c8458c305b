#include "layout/element_range.h"

namespace reshard {

namespace {
// Elements [i0, i1) of the sub-box of `region` starting at dim `d` with the
// outer coordinates fixed in `base`.
void range_rec(const Box& base, int d, int64_t i0, int64_t i1, std::vector<Box>& out) {
  if (i0 >= i1) return;
  if (d == base.rank) {
    out.push_back(base);
    return;
  }
  int64_t slab = 1;
  for (int k = d + 1; k < base.rank; ++k) slab *= base.extent(k);
  const int64_t a = i0 / slab, b = i1 / slab;
  Box sub = base;
  if (a == b) {
    sub.lo[d] = base.lo[d] + a;
    sub.hi[d] = sub.lo[d] + 1;
    range_rec(sub, d + 1, i0 - a * slab, i1 - a * slab, out);
    return;
  }
  int64_t first_whole = a;
  if (i0 % slab != 0) {
    sub.lo[d] = base.lo[d] + a;
    sub.hi[d] = sub.lo[d] + 1;
    range_rec(sub, d + 1, i0 - a * slab, slab, out);
    first_whole = a + 1;
  }
  if (b > first_whole) {
    Box mid = base;
    mid.lo[d] = base.lo[d] + first_whole;
    mid.hi[d] = base.lo[d] + b;
    out.push_back(mid);
  }
  if (i1 % slab != 0) {
    sub = base;
    sub.lo[d] = base.lo[d] + b;
    sub.hi[d] = sub.lo[d] + 1;
    range_rec(sub, d + 1, 0, i1 - b * slab, out);
  }
}
}  // namespace

void element_range_boxes(const Box& region, int64_t i0, int64_t i1, std::vector<Box>& out) {
  range_rec(region, 0, i0, i1, out);
}

}  // namespace reshard
