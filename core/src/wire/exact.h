// Structural validation of a decoded process part (issue 37): a part the
// decoder accepts executes exactly or not at all, whatever bytes an editor
// wrote and whatever digests it recomputed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reshard/plan.h"

namespace reshard::wire {

// The box of entry `entry` of tensor `tensor`'s source (`source`) or
// destination layout; the decoder passes its cached boxes.
using EntryBox = std::function<const Box&(uint32_t tensor, bool source, uint32_t entry)>;

// Checks, in time O(n log n) in the part's pieces for the plans the planner
// writes (a work budget bounds the rest), where every index of `part` was
// already checked (decode.cc):
//  - every destination entry on the part's devices whose element receives
//    at least one summand is written exactly once per element by the part's
//    local and received pieces: once by a copy (a summand when the entry
//    takes one, a relay's reduced value) or, for a reduction, once by each
//    summand the entry takes (source summand s goes to a destination of
//    summand s mod T, T its summands); no piece writes a summand the entry
//    does not take;
//  - a scratch receives each raw summand at most once per element, and no
//    copy;
//  - the part's sent pieces into one destination buffer (per summand) are
//    disjoint: no piece sent twice;
//  - a piece of stage s > 0 that reads a destination entry or a scratch
//    reads no element a piece of stage s or later writes (per buffer and
//    stage, a sweep of the reads and the writes of stage >= s along the
//    dimension where the fewest pairs overlap; those pairs are counted and
//    charged to the budget first).
// Not checked here: which summands a scratch of another part carries (a
// reduction with scratch contributions is checked for duplicates, not for
// completeness). Throws kCorrupt naming `field` (the part), the tensor, the
// entry or scratch and the first bad element range.
// `entries`: the (tensor, destination entry) pairs on the part's devices.
void check_part_exact(const ProcessPart& part, const std::vector<TensorSpec>& tensors,
                      const std::vector<std::pair<uint32_t, uint32_t>>& entries,
                      const EntryBox& entry_box, const std::string& field);

// The reductions that take scratch contributions, in a buffer holding the
// parts that write those scratches: each scratch holds the same summands at
// every element (check_part_exact checks that each summand and each source
// covers its box once), resolved through the chain of scratches; then every
// summand a destination element takes arrives exactly once, directly or
// through a scratch, as check_part_exact checks without scratch. Reductions
// whose sources lie in parts the buffer lacks stay checked for duplicates
// only. Throws kCorrupt naming `field`[i] (the part).
void check_scratch_reductions(const std::map<int32_t, ProcessPart>& parts,
                              const std::vector<TensorSpec>& tensors,
                              const std::function<int32_t(int64_t device)>& process_of,
                              const EntryBox& entry_box, const std::string& field);

// Parts held together must agree on every message between them: the
// sending part's pieces of a message are the receiving part's, piece by
// piece (tensor, entries, region), and every message one sends the other
// receives. (An in-process execution reads the received pieces only; a
// distributed one packs the sent ones and unpacks the received ones.)
// Throws kCorrupt naming `field`, both processes and the message.
void check_parts_agree(const std::map<int32_t, ProcessPart>& parts,
                       const std::function<int32_t(int64_t device)>& process_of,
                       const std::string& field);

}  // namespace reshard::wire
