// Internal: the interleaved groups of the direct copies of one round
// (DirectCopy::interleave), part of building a schedule (engine_schedule.cc,
// sort_direct).
#pragma once

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

}  // namespace reshard::engine_detail
