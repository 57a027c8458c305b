// Internal: an upper bound of encode_plan's output size (wire/encode.cc),
// checked before encoding so that a plan too large for one FlatBuffer
// (2 GiB) is an error instead of a corrupt buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "reshard/plan.h"
#include "reshard/wire.h"

namespace reshard {

// Bytes encode_plan(plan, options) writes at most (before a MAC): the
// tensors, their layouts (a tiled layout's entries once per geometry: equal
// tilings are written once), the topology, the statistics and the selected
// parts' pieces, messages, regions and scratch. Throws kOutOfRange when
// options name a process the plan holds no part of.
uint64_t encode_size_bound(const Plan& plan, const EncodeOptions& options);

// encode_plan without its size check and MAC, the builder's first buffer
// initial_size bytes (encode_plan passes encode_size_bound). Where the
// builder outgrows it, it grows by new[] and the result is a copy: the same
// bytes either way.
std::vector<uint8_t> encode_plan_unsigned(const Plan& plan, const EncodeOptions& options,
                                          size_t initial_size);

}  // namespace reshard
