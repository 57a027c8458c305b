// reshard — distributed execution (docs/design.md §3.3): one engine over
// transports. Each process executes its own part of a plan: local copies,
// then round by round pack, send/receive, unpack or reduce, with bounded
// staging and deadlines on every wait. docs/distributed.md has the guide.
//
//   auto engine = reshard::Engine(reshard::make_mpi_transport());
//   const int rank = engine.transport().info().rank;
//   Plan plan = make_plan(input, {PlanScope::kProcess, rank});
//   engine.execute(plan, rank, my_buffers);   // on every rank of the group
//
// Collective: every rank of the transport's group calls execute() with a
// plan of the same inputs (ranks owning no device of the plan too; they
// only take part in the agreement below). Plan process p is transport rank
// p; a plan naming a process >= the group size is rejected.
//
// In one process, over the `local` transport (make_local_transport), the
// engine executes a whole plan — every process part — at once:
//
//   reshard::Engine engine(reshard::make_local_transport());
//   engine.execute(plan, reshard::kAllProcesses, buffers, {.threads = 0});
//
// (what execute_host does, reshard/exec.h).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reshard/buffers.h"
#include "reshard/exec.h"
// Source compatibility: MpiTransportOptions, make_mpi_transport and
// mpi_transport_available were declared here; they live in reshard/mpi.h now.
#include "reshard/mpi.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

namespace reshard {

// Engine::execute's `process` on a transport holding every process of a
// plan (TransportInfo::whole_plan, the `local` transport): execute every
// part of the plan in this process.
inline constexpr int32_t kAllProcesses = -1;

struct ExecuteOptions {
  // Longest wait for any one step: the agreement, one batch of transfers,
  // the final flush. On expiry execute() throws kTimeout naming the ranks
  // still missing. After a timeout the group's communicator may hold
  // unmatched operations and must not be used again: abort the job
  // (Transport::abort). With kAllProcesses (the `local` transport), where
  // nothing waits, it is the deadline of the whole call instead: copies
  // still running past it end with kTimeout (checked between tasks of a
  // few MiB), the destinations holding unspecified data.
  double timeout_seconds = 300;
  // Batches (one round's messages to and from at most two peers, see
  // docs/distributed.md) of one stage in flight at once (receives of later
  // rounds in flight do not hold back what relays forward); at least 1.
  int32_t max_batches_in_flight = 8;
  // When ranks agree on the plan before executing (fingerprints, dtypes,
  // part digests; execute below): before the first execution of a plan
  // (its fingerprint and the digest of this rank's part) on this engine
  // (default), before every execution, or never (the caller guarantees
  // agreement).
  enum class Agreement : int32_t { kFirstUse = 0, kEveryCall = 1, kSkip = 2 };
  Agreement agreement = Agreement::kFirstUse;
  // Overlap rounds and stages: a batch starts as soon as what it reads has
  // arrived (a relay forwards round r of stage 1 while it receives round
  // r + 1 of stage 0), its staging is free and at most
  // max_batches_in_flight batches are in flight; round r+1 is packed while
  // round r is in flight when both fit the staging budget together. False:
  // each round starts after the previous one (of every stage) completed.
  // Stream-ordered transports (NCCL, CUDA) issue batches in (stage, round)
  // order either way; their streams order the work.
  bool overlap = true;
  // How a message that is not one contiguous run of one buffer is built:
  // packed into staging with the box-copy core (kStaging), or described in
  // place for transports that gather (MPI derived datatypes, kGather).
  // kAuto gathers where the transport can (measured faster with Open MPI
  // 4.1, see docs/distributed.md) and stages otherwise. Messages that reduce
  // are always staged; so are messages above 1 GiB.
  enum class Packing : int32_t { kAuto = 0, kStaging = 1, kGather = 2 };
  Packing packing = Packing::kAuto;
  // Runs stages 0..last_stage of a staged plan and stops (-1: every stage),
  // leaving later stages' destination regions unwritten: for checking what
  // each stage writes (check_destinations_through_stage). Every rank must
  // pass the same value.
  int32_t last_stage = -1;
  // Take the schedule from the engine's schedule cache (EngineOptions), and
  // put it there after building it. False: build it (and the transport's
  // per-message state, such as MPI datatypes) afresh for this call and keep
  // nothing, as for a plan's first execution. Whole-plan executions
  // (kAllProcesses) are cached too, under one entry holding a copy of the
  // whole plan.
  bool cache_schedule = true;
  // Threads copying between buffers of this process (local pieces, pieces
  // between two devices of the process and, with kAllProcesses, every
  // piece and reduction), round by round; messages to and from other
  // processes, and the reductions of what they carry, stay on the calling
  // thread. The meaning every `threads` field of the C++ API shares
  // (PlanRequest::threads, HostExecuteOptions::threads): 0 is one thread
  // per core this process may use (its affinity mask and cgroup CPU quota;
  // the environment variable RESHARD_CORES, a positive integer, overrides
  // the detection; any other value is kInvalidArgument naming it), and
  // over a transport whose ranks share a host (mpi) no more than the host's
  // cores divided by those ranks; N >= 1 up to min(N, 256) threads, the calling
  // thread included (1: the calling thread only, the default); negative is
  // kInvalidArgument. Executions moving less than 1 MiB between buffers
  // run on the calling thread whatever the value. Results are identical
  // for every value. Ignored by transports whose memory the host cannot
  // touch (copies then run on the transport, Transport::run_copies).
  int32_t threads = 1;
};

struct ExecuteStats {
  bool agreed = false;  // the agreement ran in this call
  int32_t rounds = 0;   // rounds in which this process moved data
  int64_t batches = 0;
  int64_t messages_sent = 0;  // to other processes
  int64_t messages_received = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t in_place_messages = 0;  // sent or received without staging
  int64_t gathered_messages = 0;  // sent or received through Segment lists
  int64_t local_bytes = 0;        // copied between buffers of this process
  // Staging, as allocated through Transport::allocate_staging: the largest
  // allocation for one device (never above the plan's staging budget when it
  // has one) and the sum over this process's devices.
  int64_t staging_peak_bytes = 0;
  int64_t staging_bytes = 0;
  // Rounds with a batch posted (its staged sends packed) while an earlier
  // round of this process was still in flight or not yet posted.
  int32_t overlapped_rounds = 0;
  // Memory outside the staging budget: f32 accumulators of f16/bf16/f8
  // destinations with partial sources, and summands that arrived before a
  // lower summand of the same elements and wait to be reduced in order.
  int64_t accumulator_bytes = 0;
  int64_t deferred_bytes = 0;
  // Scratch buffers (plan.h, Scratch) allocated for this execution on this
  // process's devices, in the tensors' dtypes (their f32 accumulators, for
  // f16/bf16/f8, are counted in accumulator_bytes).
  int64_t scratch_bytes = 0;
  double seconds = 0;  // wall time of execute()
  // The schedule came from the engine's cache (validation of the part and
  // the schedule's construction were skipped; buffers were checked as ever).
  bool schedule_cached = false;
  // Batches of a stage s > 0 posted while a batch of a stage below s of this
  // process had not completed yet: relays forwarding while still receiving
  // (ExecuteOptions::overlap).
  int64_t overlapped_stage_batches = 0;
  // Time with batches in flight and nothing else to do: waiting for peers
  // (where a rank waits, for profiling).
  double wait_seconds = 0;
  // This execution replayed the copies of the previous one (a cached
  // schedule on device memory without messages, the same buffers): the
  // engine did no per-piece work (docs/engine.md).
  bool replayed = false;
};

struct EngineOptions {
  // Schedules kept for later executions: those of the most recently executed
  // (plan, process, ExecuteOptions::packing/overlap) combinations, least
  // recently used evicted first; 0 disables the cache. A schedule is what
  // execute() derives from the plan alone before any byte moves (messages,
  // rounds, steps, staging offsets, reductions) plus the transport's state
  // per message (MPI datatypes), and it holds no buffer address, so one entry
  // serves every set of buffers. An entry holds a copy of the plan's part
  // for this process (of the whole plan, for kAllProcesses) and its inputs
  // (layouts shared, not copied), so it costs about the part's size again
  // plus the schedule: some hundred bytes
  // per message, and per piece tens of bytes, a few hundred for pieces of
  // gathered or reduced messages; for a plan with block scales, also the
  // quantised copy of this process's source shards of the scaled tensors
  // (docs/spec.md "Block scales"), which its next execution reuses. A
  // cached schedule is used only for a plan
  // whose fingerprint, inputs, options and part equal those it was built
  // from: the fingerprint alone is never trusted.
  int32_t schedule_cache_entries = 8;
};

namespace engine_detail {
class ScheduleCache;
class WorkerPool;
}  // namespace engine_detail

// Executes plans over one transport. Not thread-safe: one execute() at a
// time per engine (its schedule cache and agreement record are unguarded,
// as is the transport).
class Engine {
 public:
  explicit Engine(std::unique_ptr<Transport> transport);
  Engine(std::unique_ptr<Transport> transport, const EngineOptions& options);
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  Transport& transport() { return *transport_; }

  // Executes the part of `plan` that belongs to `process` (which must equal
  // transport().info().rank): `plan` must hold that part (PlanScope::kAll or
  // kProcess) unless the process owns no device of the plan.
  //
  // `process` == kAllProcesses (transports with TransportInfo::whole_plan
  // only, the `local` transport): executes every part, so `plan` must hold
  // them all (PlanScope::kAll) and `local_buffers` every entry. Every
  // message is then a direct copy from its source buffer to its
  // destination buffer, round by round; nothing is staged or sent.
  //
  // `local_buffers` is indexed by tensor; in it, the src/dst lists are
  // indexed by layout entry as for execute_host, and only entries on this
  // process are used (the others may be null/0; a list may also be empty
  // when the process has no entry of it).
  //
  // Order of events: (1) the buffers and the part are validated — a
  // problem is kInvalidArgument before any communication (the other ranks
  // then time out naming this one); buffers on every call (but a replay's
  // on device memory with the very buffers, addresses and sizes, of the
  // cached schedule's kept execution, which passed then: docs/engine.md),
  // the part when its schedule is built (not when it comes from the cache,
  // see EngineOptions: a cached part is one that passed); (2) the agreement:
  // ranks exchange plan fingerprint, tensor dtypes, the digest of the whole
  // plan's list of part digests (where their plan lists every part) and the
  // digest of the part each executes, recomputed from the part in memory; a
  // difference is kMismatch on every rank, naming the ranks that differ
  // (docs/design.md §3.5); (3) execution.
  // Partial sources are reduced with the semantics of execute_host, bit for
  // bit (f16/bf16/f8 accumulate in f32 and round once; summands are reduced
  // in source summand order).
  //
  // Errors: kInvalidArgument, kMismatch, kTimeout (ranks still missing),
  // kTransport, kOutOfMemory. After kTimeout or kTransport destination
  // buffers hold unspecified data and may still be written by the transport
  // until the job ends.
  ExecuteStats execute(const Plan& plan, int32_t process,
                       std::span<const TensorBuffers> local_buffers,
                       const ExecuteOptions& options = {});

 private:
  std::unique_ptr<Transport> transport_;
  // (fingerprint, digest of the part executed) of the plans agreed on this
  // transport.
  std::set<std::pair<uint64_t, uint64_t>> agreed_;
  // Declared after transport_: destroyed first (it holds transport state).
  std::unique_ptr<engine_detail::ScheduleCache> cache_;
  // The threads of host copies (ExecuteOptions::threads), started by the
  // first execution that needs them and kept (asleep between executions)
  // until the engine is destroyed; grown when a call asks for more. In a
  // fork()ed child the parent's threads do not exist: the child's first
  // execution starts its own (the parent's pool is let go, not joined).
  std::unique_ptr<engine_detail::WorkerPool> pool_;
};

// -------------------------------------------------------------- local

// Creates the `local` transport: host memory, one process holding every
// device of a plan (TransportInfo::whole_plan; rank 0 of a group of 1).
// Engine::execute(plan, kAllProcesses, buffers) then executes whole plans.
// It transfers nothing: a batch with operations is kInternal.
std::unique_ptr<Transport> make_local_transport();

}  // namespace reshard
