// Internal: the digest of the set of parts a plan buffer carries
// (Plan.parts_digest in schema/plan.fbs), from their processes and digests
// in buffer order. Never 0. Over every process of a plan it is the
// whole-plan digest ranks agree on before executing (docs/design.md §3.5).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "reshard/plan.h"

namespace reshard {

uint64_t parts_digest(uint64_t fingerprint,
                      std::span<const std::pair<int32_t, uint64_t>> process_digests);

// The digest of every process's part, in the order of plan.processes():
// computed from the parts when the plan holds them all (so an edit made in
// memory is seen), else the list the plan was decoded with
// (Plan::part_digests), else empty (a plan made for one process).
std::vector<uint64_t> listed_part_digests(const Plan& plan);

// parts_digest over every process of the plan and `listed` (as above); 0
// when `listed` is empty.
uint64_t whole_plan_digest(const Plan& plan, std::span<const uint64_t> listed);

}  // namespace reshard
