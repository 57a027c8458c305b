// Internal: the data dependencies between the stages of one process part.
// A piece of a message of stage s > 0 reads a destination entry (a relay
// forwarding what it received); it may start once the messages of earlier
// stages that write the region it reads have arrived, not when the whole
// earlier stage has. The engine (engine_schedule.cc) and the simulator
// (core/src/sim) both derive "what waits for what" from this index, so that
// they model the same overlap.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "reshard/box.h"
#include "reshard/plan.h"

namespace reshard::stage_deps {

// The messages of a part's `recvs` that write each destination entry of
// this process, with their regions and stages. Built in O(pieces log
// pieces); a query costs O(log n + writers it finds + writers of the query's
// entry whose span in the indexed dimension overlaps it).
class WriterIndex {
 public:
  // `skip_reduced`: leave out stage-0 pieces of tensors with a partial
  // source and pieces reading or writing a scratch (contributions to a
  // reduction; the engine waits for the finished reduction instead).
  // Otherwise pieces writing a scratch are indexed under entry
  // kScratchEntry (of every device of the part).
  WriterIndex(const Plan& plan, const ProcessPart& part, bool skip_reduced);

  // Appends to `out` the indices in part.recvs of the messages of stage <
  // `stage` that write a region overlapping `region` of destination entry
  // `entry` of `tensor` (possibly with duplicates).
  void writers(uint32_t tensor, uint32_t entry, const Box& region, uint32_t stage,
               std::vector<uint32_t>& out) const;

  bool empty() const { return entries_.empty(); }

 private:
  struct Writer {
    int64_t lo = 0;  // span in the indexed dimension
    int64_t hi = 0;
    uint32_t recv = 0;
    uint32_t stage = 0;
    Box region;
  };
  struct Entry {
    int dim = -1;  // indexed dimension (-1: scan every writer)
    int64_t max_len = 0;
    std::vector<Writer> writers;  // sorted by lo
  };
  std::unordered_map<uint64_t, Entry> entries_;  // (tensor << 32 | entry)
};

// Sorts `v` and removes duplicates.
void sort_unique(std::vector<uint32_t>& v);

}  // namespace reshard::stage_deps
