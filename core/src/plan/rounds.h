// Internal: bounded staging (DESIGN.md §2.6). Every (source, destination)
// stream of messages is cut into rounds of at most chunk(a, b) bytes, where
// chunk(a, b) = budget / max(peers(a), peers(b)) - 8 and peers(x) counts the
// devices x sends to or receives from. An element belongs to the round in
// which its last byte falls, so a stream of B bytes spans exactly
// ceil(B / chunk) non-empty rounds, a round of a stream holds fewer than
// chunk + 8 bytes and a device stages less than `budget` per round. The rule
// depends only on the stream's pieces (identical for sender and receiver)
// and on per-device peer counts from the global statistics, so every
// process cuts its streams the same way on its own.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "reshard/plan.h"

namespace reshard::planning {

// Chunk size of a stream between devices with these peer counts.
int64_t round_chunk(int64_t budget, int64_t peers_a, int64_t peers_b);

// Rounds a stream of `bytes` spans.
inline int64_t stream_rounds(int64_t bytes, int64_t chunk) {
  return bytes <= 0 ? 0 : (bytes + chunk - 1) / chunk;
}

// Re-cuts the messages of `part` (each holding one whole stream in round 0)
// into rounds. `peers(device)` gives the peer count of a device.
void split_rounds(ProcessPart& part, const std::vector<TensorSpec>& tensors, int64_t budget,
                  const std::function<int64_t(int64_t)>& peers);

// Appends to `out` the boxes covering elements [i0, i1) of `region` in
// row-major order (at most 2 * rank + 1 boxes).
void element_range_boxes(const Box& region, int64_t i0, int64_t i1, std::vector<Box>& out);

}  // namespace reshard::planning
