// Internal: the digest of the set of parts a plan buffer carries
// (Plan.parts_digest in schema/plan.fbs), from their processes and digests
// in buffer order. Never 0.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace reshard {

uint64_t parts_digest(uint64_t fingerprint,
                      std::span<const std::pair<int32_t, uint64_t>> process_digests);

}  // namespace reshard
