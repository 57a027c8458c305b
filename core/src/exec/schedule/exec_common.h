// Internal: the checks and the reduction rule the engine applies to every
// plan and set of buffers (per process and whole plans alike), so that every
// path accepts the same buffers, rejects the same damaged plans and reduces
// partial sources in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reshard/buffers.h"
#include "reshard/plan.h"

namespace reshard::exec_detail {

// "tensors[1].dst[3]"
std::string buffer_name(size_t tensor, const char* side, size_t entry);

// Checks the shard buffers against the plan's layouts: per tensor a buffer
// per layout entry, each of exactly its box's bytes, non-null when
// non-empty, no destination overlapping any other buffer in memory. Throws
// kInvalidArgument naming the buffer.
//
// With `process` < 0 every entry is checked (the in-process executor). With
// `process` >= 0 only entries whose device the plan's topology puts on that
// process are checked; the others are ignored, and a tensor's src or dst
// list may then also be empty when none of its entries is on the process.
// A scale tensor's src list (block scales, reshard/block_scales.h) may be
// empty: the executor computes it (engine_detail::ScaledSources) and reads
// no buffer given there.
void validate_buffers(const Plan& plan, std::span<const TensorBuffers> buffers,
                      int32_t process = -1);

// Checks that `pieces` (the list named `list` of `part`) index only existing
// tensors and entries and that each region lies inside both boxes, so that a
// damaged plan cannot make a copy loop leave its buffers. Throws
// kInvalidArgument ("plan: part 2 recv_pieces[7]: ...").
// `messages` (when given) are the messages that group `pieces`: a piece of
// a message of stage > 0 reads a destination entry (Piece; or a source
// entry into a scratch: reads_source). `skip` (when given, one flag per
// piece): pieces the caller checks otherwise (engine_schedule.cc: sends
// equal to a checked receive), not checked here.
void validate_pieces(const Plan& plan, const ProcessPart& part, const std::vector<Piece>& pieces,
                     const char* list, const std::vector<Message>* messages = nullptr,
                     const std::vector<uint8_t>* skip = nullptr);

// The order in which the contributions to a destination entry of a tensor
// with a partial source are reduced: ascending source summand, ties (which
// touch disjoint elements) in any fixed order. Every executor reduces in this
// order, so results agree bit for bit whichever process or round a summand
// came from.
inline bool reduce_before(int32_t summand_a, int32_t summand_b) { return summand_a < summand_b; }

// What the reduced value of a destination entry is divided by once every
// summand is in: the number of summands for a partial kMean source, else 1.
inline int32_t mean_divisor(const TensorSpec& t) {
  return t.src.partial() && t.src.reduce_op() == ReduceOp::kMean ? t.src.num_summands() : 1;
}

}  // namespace reshard::exec_detail
