// Internal: bounded staging (DESIGN.md §2.6). Every (source, destination)
// stream of B bytes is cut into rounds of at most
//   chunk = floor((budget - 16 * max(peers(a), peers(b))) * B / max(T(a), T(b))) + 8
// bytes, where peers(x) counts the devices x exchanges messages with and T(x)
// is the bytes x sends plus receives. An element belongs to the round in
// which its last byte falls, so a stream spans exactly ceil(B / chunk)
// non-empty rounds and stages fewer than chunk + 8 bytes per round; summed
// over a device's streams that stays under the budget, and every stream of a
// device ends after about T / budget rounds (big streams get big chunks). The
// rule depends only on the stream (identical for sender and receiver) and on
// per-device figures of the global statistics, so every process cuts its
// streams the same way on its own.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "reshard/plan.h"

namespace reshard::planning {

// Per-device figures the rule needs.
struct DeviceLoad {
  int64_t peers = 0;
  int64_t bytes = 0;  // sent + received
};

// Chunk size of a stream of `stream_bytes` between devices a and b.
int64_t round_chunk(int64_t budget, DeviceLoad a, DeviceLoad b, int64_t stream_bytes);

// Rounds a stream of `bytes` spans.
inline int64_t stream_rounds(int64_t bytes, int64_t chunk) {
  return bytes <= 0 ? 0 : (bytes + chunk - 1) / chunk;
}

// Re-cuts the messages of `part` (each holding one whole stream in round 0)
// into rounds. `load(device)` gives a device's figures.
void split_rounds(ProcessPart& part, const std::vector<TensorSpec>& tensors, int64_t budget,
                  const std::function<DeviceLoad(int64_t)>& load);

// Appends to `out` the boxes covering elements [i0, i1) of `region` in
// row-major order (at most 2 * rank + 1 boxes).
void element_range_boxes(const Box& region, int64_t i0, int64_t i1, std::vector<Box>& out);

}  // namespace reshard::planning
