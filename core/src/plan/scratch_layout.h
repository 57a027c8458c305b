// Internal: where each scratch buffer (plan.h, Scratch) of a device lives in
// that device's scratch memory, from the stages that write and read it. One
// function for the planner's statistics (PlanStats::max_scratch_bytes), the
// plan decoder's check of that figure and the engine's allocation, so that
// the figure the staging budget is held to is the memory the engine takes.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "reshard/plan.h"

namespace reshard::planning {

// One scratch buffer: `bytes` on `device`, written by messages of stages
// [first, ...] and read by messages of stages [..., last].
struct ScratchLife {
  int64_t device = 0;
  int64_t bytes = 0;
  uint32_t first = 0;  // the lowest stage of a message writing it (0: none)
  uint32_t last = 0;   // the highest stage of a message reading it (first: none)
};

// The lives of part.scratch, in its order. A local piece into a scratch
// (no message, no stage) is combined with the scratch's first received
// write (the engine reduces it in round 0 of stage `first`), so only
// messages count. Pieces that name no scratch of the part, or regions out
// of range, are left to the callers' checks.
std::vector<ScratchLife> scratch_lives(const ProcessPart& part,
                                       const std::vector<TensorSpec>& tensors);

// The lives of the scratch of every part of `parts`, part by part.
std::vector<ScratchLife> scratch_lives(const std::map<int32_t, ProcessPart>& parts,
                                       const std::vector<TensorSpec>& tensors);

struct ScratchPlacement {
  std::vector<int64_t> offset;      // per life, in its device's scratch memory
  std::map<int64_t, int64_t> peak;  // device -> bytes of scratch memory
};

// Places every life at an 8-aligned offset of its device's scratch memory:
// two lives share bytes only if one's last stage is below the other's
// first (its reads of stage s complete before a write of stage s + 1 or
// later is reduced: the engine reduces in (stage, round) order once every
// earlier round completed). In order of (device, first, size descending,
// last), each at the lowest offset free of the lives still live; so the
// peak depends on the lives, not on their order. Sizes saturate.
ScratchPlacement place_scratch(const std::vector<ScratchLife>& lives);

// The largest peak of place_scratch(lives) (0 without lives).
int64_t most_scratch(const std::vector<ScratchLife>& lives);

}  // namespace reshard::planning
