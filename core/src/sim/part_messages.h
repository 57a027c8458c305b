// Internal: a process part's messages as the simulator reads them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "reshard/plan.h"

namespace reshard::sim {

// Calls `each(i, part.sends[i], after)` for every send of `part` (a part
// of `plan`) in order, `after` the indices in part.recvs (sorted, distinct)
// of the messages it waits for: for a send of a later stage, the messages
// the sending process received in earlier stages that wrote what its pieces
// read (the engine's dependencies, engine_schedule.h; for a partial source,
// the summands of the region rather than the whole reduction).
void part_sends(const Plan& plan, const ProcessPart& part,
                const std::function<void(size_t, const Message&, std::span<const uint32_t>)>& each);

}  // namespace reshard::sim
