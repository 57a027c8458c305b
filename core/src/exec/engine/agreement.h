// Internal: the agreement of the ranks of one execution on the plan they
// execute together (docs/design.md §3.5), before any byte moves.
#pragma once

#include <cstdint>

#include "reshard/plan.h"
#include "reshard/transport.h"

namespace reshard::engine_detail {

// What one rank will execute: the plan's identity and the digest of the
// part it runs, computed from the part in memory (what it decoded), never
// read from a field of the bytes.
struct AgreeSubject {
  // The process whose part this rank executes; kAllProcesses (every part,
  // the local transport); or -2 (kNoPart): a rank of the transport that owns
  // no device of the plan.
  int32_t process = 0;
  // part_digest(fingerprint, part) of that part; for kAllProcesses the
  // whole-plan digest; 0 for kNoPart.
  uint64_t part_digest = 0;
};
inline constexpr int32_t kNoPart = -2;

// The subject of an execution of `plan` by `process` (kAllProcesses, a
// process of the plan, or one owning none of its devices).
AgreeSubject agree_subject(const Plan& plan, int32_t process);

// Ranks exchange one fixed-size record each (magic, fingerprint, tensor
// count, dtype hash, whole-plan digest, executed process and its part's
// digest) and check, in this order, that they hold plans of as many
// tensors, of the same dtypes, of the same fingerprint, listing the same
// part digests (where a rank's plan lists every part's digest:
// Plan::part_digests), and that each rank's part is the one those lists
// name. A difference is kMismatch on every rank naming the ranks that
// differ; every rank decides from the same records, so no rank goes on
// while another stops. kTimeout when a rank does not take part.
void agree(Transport& transport, const Plan& plan, const AgreeSubject& subject, double timeout);

}  // namespace reshard::engine_detail
