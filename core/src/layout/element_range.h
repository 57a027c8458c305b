// Internal: a row-major element range of a box as boxes, shared by round
// cutting (plan/rounds.cc) and flat layouts (layout/flat.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "reshard/box.h"

namespace reshard {

// Appends to `out` the boxes covering elements [i0, i1) of `region` in
// row-major order (at most 2 * rank - 1 boxes, ascending; one when i0 and i1
// are whole slabs of the outermost dimension).
void element_range_boxes(const Box& region, int64_t i0, int64_t i1, std::vector<Box>& out);

}  // namespace reshard
