// reshard — in-process host execution (docs/design.md §3.2): the engine over
// the `local` transport.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reshard/buffers.h"  // ConstBuffer, MutableBuffer, TensorBuffers (here before)
#include "reshard/plan.h"

namespace reshard {

struct HostExecuteOptions {
  // Threads copying: 0 (the default) one per usable core, N >= 1 up to
  // min(N, 256), the calling thread included: ExecuteOptions::threads
  // (reshard/engine.h), whose meaning every `threads` field shares.
  // Negative: kInvalidArgument ("options.threads: ...").
  int32_t threads = 0;
  // Deadline of the whole execution, in seconds (> 0; default 300): a plan
  // (untrusted bytes, say) that keeps the copies busy longer ends with
  // kTimeout ("execute: ran past its deadline (timeout_seconds 300 s) in
  // ..."), its destinations holding unspecified data; checked between
  // tasks of a few MiB each. ExecuteOptions::timeout_seconds.
  double timeout_seconds = 300;
};

// Fills every destination buffer of every tensor of `plan`, which must hold
// every process part (PlanScope::kAll). Validates all buffers first (count
// per tensor, byte size per entry, null data for a non-empty box, source and
// destination overlapping in memory): on error throws kInvalidArgument
// naming the buffer ("tensors[1].dst[3]") and writes nothing.
// The engine over the `local` transport (Engine::execute with
// kAllProcesses, reshard/engine.h) does the work: every piece is a direct
// copy between buffers, round by round, no staging.
// Partial sources are reduced on the destination; f16/bf16/f8 accumulate in
// f32 and round once. Thread-safe for distinct destination buffers.
void execute_host(const Plan& plan, std::span<const TensorBuffers> buffers,
                  const HostExecuteOptions& options = {});

}  // namespace reshard
