// Internal: the distributed engine's schedule for one process — what the
// engine does with its part of a plan, derived from the plan alone (so that
// every rank orders its batches the same way), before any byte moves.
//
//  - Direct copies: local pieces and pieces between two devices of this
//    process (no transport involved), each with the round of its message
//    (-1 for local pieces): the engine runs them round by round, so that a
//    later round may read what an earlier one wrote (multi-stage plans).
//  - A whole-plan schedule (build_whole_schedule, kAllProcesses on a
//    transport that holds every process, the `local` transport): every
//    piece of every part is a direct copy or a contribution read straight
//    from its source buffer; no messages, no staging. Its local pieces run
//    in the first round of stage 0's messages where there is one (so that
//    they join the interleaved groups of their source rows).
//  - Messages to and from other processes, each sent or received in place
//    (one contiguous piece), staged (packed with the box-copy core), or
//    gathered (Segment lists, for transports that support them).
//  - Rounds, each cut into steps: step k pairs this rank with rank+k (sends)
//    and rank-k (receives), so a step's operations match its peers' step k;
//    the batches of a round are these steps, in ascending k.
//  - Overlap of rounds and stages: a step is the unit the engine posts, and
//    it may be posted before earlier rounds and stages completed, as soon as
//    (a) the events it depends on are done — for the pieces a relay forwards
//    (stage > 0), the receives and direct copies of earlier stages that wrote
//    the regions they read (stage_deps.h), or the finished reduction of a
//    partial source; for writes into an entry whose reduction is stored over
//    it, that store; (b) its staging is free (conflicts below); (c) every
//    earlier step (in (stage, round) order) with the same peer and direction
//    was posted, so that both ends start the operations between two ranks in
//    the same order. The engine tries steps in `priority` order: by
//    stage + round, so that a relay forwards round r of stage 1 before it
//    receives round r + 2 of stage 0.
//  - Staging: one arena per local device, each round's staged messages at
//    consecutive offsets in step order, even rounds upwards from the
//    arena's start, odd rounds downwards from its end. Round r+1's first
//    steps thus land in what round r leaves free and its later steps over
//    round r's first steps, which complete first: round r+1 is packed
//    message by message as round r's steps release the space, while round r
//    is in flight. The arena holds the largest round (two consecutive rounds
//    when they fit the budget together) and never exceeds the plan's
//    staging budget.
//  - Replicated destinations (whole-plan schedules): of the destination
//    entries of a tensor that hold the same box, the first is written by
//    its pieces and the others are copied from it after the last round
//    (Schedule::replicas), not gathered again from the sources.
//  - No buffer addresses: buffers are named by (tensor, entry), so a schedule
//    serves every execution of its plan (the engine caches schedules,
//    engine_cache.h); pieces point into the part the schedule was built from.
//  - Scratch (plan.h, Scratch): each scratch buffer of the part lives in
//    Schedule::work on its device (in the tensor's dtype, plus an
//    accumulator for f16/bf16/f8) and is a reduction target like a
//    destination entry of a partial source (AccTarget::scratch): every piece
//    writing it, and every piece reading it (one contribution to the buffer
//    it writes), is a Contribution. A send reading a scratch waits for its
//    finished (stored) reduction; a scratch is read only by pieces of a
//    later stage than every piece writing it (checked), so each target's
//    contributions are reduced after what they read was stored.
//  - Reductions: every contribution to a destination entry of a tensor with
//    a partial source, with the round after which it can be reduced without
//    breaking the summand order (exec_common.h) — later than its arrival
//    when a lower summand of an overlapping region arrives later; such a
//    contribution is copied aside (deferred) when it arrives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "reshard/box.h"
#include "reshard/box_copy.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/plan.h"
#include "reshard/transport.h"
#include "util/large_alloc.h"

namespace reshard::engine_detail {

// The engine orders work by (stage, round): this key, increasing with both
// (stages run one after the other, each one's rounds in order). -1: before
// the first.
inline int64_t round_key(uint32_t stage, uint32_t round) {
  return static_cast<int64_t>(uint64_t{stage} << 32 | round);
}
// The last key of stage `last_stage` (ExecuteOptions::last_stage; -1: every
// stage).
inline int64_t last_key(int32_t last_stage) {
  return last_stage < 0 ? INT64_MAX : round_key(static_cast<uint32_t>(last_stage) + 1, 0) - 1;
}

// Messages that gather are at most this large (MPI counts are int).
inline constexpr int64_t kMaxGatherBytes = int64_t{1} << 30;

// A shard buffer of this process: local_buffers[tensor].src or .dst[entry].
struct BufferRef {
  uint32_t tensor = 0;
  uint32_t entry = 0;
  bool src = false;
};

inline constexpr uint32_t kNoScratch = 0xffffffffu;

// Whether piece `p` of a message of `stage` (0 for local pieces) is a
// contribution to a reduction rather than a copy: it writes or reads a
// scratch of a partial source, or is a summand of one (stage 0). Pieces
// writing or reading a copy-staging scratch (of a tensor whose source is
// not partial) are copies.
inline bool is_contribution(const TensorSpec& t, const Piece& p, uint32_t stage) {
  return t.src.partial() &&
         (p.dst_entry == kScratchEntry || p.src_entry == kScratchEntry || stage == 0);
}

struct EngineMessage {
  enum class Mode : uint8_t { kInPlace, kStaged, kGather };
  bool send = false;
  Mode mode = Mode::kStaged;
  bool has_reduce = false;  // receives pieces of a tensor with a partial source
  int32_t peer = 0;
  uint32_t round = 0;  // the plan round, within its stage
  uint32_t stage = 0;  // > 0: its pieces read destination buffers (relays)
  uint32_t sub = 0;    // Message::sub: messages of one round and devices, in order
  int64_t key = 0;     // round_key(stage, round)
  int64_t src_device = 0;
  int64_t dst_device = 0;
  int64_t local_device = 0;
  int32_t ordinal = 0;
  int32_t remote_ordinal = 0;  // of the device on the peer
  size_t slot = 0;             // index of the local device in Schedule::devices
  int64_t bytes = 0;
  std::span<const Piece> pieces;  // of Schedule::part's send_pieces or recv_pieces
  // Per piece (empty when none reads one): the Schedule::scratch index of
  // the scratch a send's piece reads, else kNoScratch.
  std::vector<uint32_t> scratch_src;
  // Per piece (empty when none writes one): the Schedule::scratch index of
  // the copy-staging scratch a receive's piece is unpacked into, else
  // kNoScratch (a reduction's scratch takes contributions instead).
  std::vector<uint32_t> scratch_dst;
  BufferRef in_place;           // kInPlace: the buffer ...
  int64_t in_place_offset = 0;  // ... and the byte offset in it
  int64_t offset = 0;           // kStaged: offset in its device's staging arena
  size_t round_index = 0;       // index in Schedule::rounds
  // kStaged: the staged messages of the previous round (Schedule::rounds)
  // on the same device whose staging overlaps this one's:
  // Schedule::conflicts[conflict_begin, conflict_end).
  uint32_t conflict_begin = 0;
  uint32_t conflict_end = 0;
  // kGather: one segment per piece, `buffer` null (set from the piece's
  // buffer when the message is posted).
  std::vector<Segment> segments;
  // kGather: what the transport keeps for this message (TransferOp::state).
  std::unique_ptr<TransferState> transfer_state;
};

struct DeviceSlot {
  int64_t device = 0;
  int32_t ordinal = 0;
  int64_t capacity = 0;  // staging arena bytes
};

struct RoundPlan {
  uint32_t stage = 0;
  uint32_t round = 0;
  int64_t key = 0;  // round_key(stage, round)
  // Message indices per step, receives first, each ordered by (source
  // device, destination device); empty steps are dropped.
  std::vector<std::vector<size_t>> steps;
  std::vector<int64_t> staged;  // per slot: staged bytes of the round
};

// A step: the unit the engine posts (one batch), Schedule::steps in
// (stage, round, step) order.
struct StepPlan {
  size_t round = 0;  // index in Schedule::rounds
  size_t step = 0;   // index in RoundPlan::steps
  uint32_t stage = 0;
  // Events that must be done before it is posted: Schedule::deps[begin, end).
  uint32_t dep_begin = 0;
  uint32_t dep_end = 0;
  // Its channels (2 * peer + 1 for sends, 2 * peer for receives):
  // Schedule::step_channels[begin, end).
  uint32_t chan_begin = 0;
  uint32_t chan_end = 0;
};

// A piece copied between two buffers of this process.
struct DirectCopy {
  const ProcessPart* part = nullptr;
  const Piece* piece = nullptr;
  int64_t round = -1;  // round_key of its message; -1: a local piece (see above)
  uint32_t stage = 0;  // > 0: reads the destination entry src_entry (a relay)
  int64_t bytes = 0;   // the piece's
  // A copy-staging scratch (Schedule::scratch index) it reads (stage > 0)
  // or writes (stage 0) in place of an entry; kNoScratch: none.
  uint32_t src_scratch = kNoScratch;
  uint32_t dst_scratch = kNoScratch;
  // The copy from its source buffer to its destination buffer
  // (Schedule::direct_descs, in the same order), derived once when the
  // schedule is built (a cached schedule's executions read it instead of
  // deriving the piece's boxes again, which dominated the time of small
  // executions). Kept apart so that ordering the copies moves small
  // records, and derived once they are in order, so that it is written and
  // read in order.
  const CopyDesc* desc = nullptr;
  // On the first copy of an interleaved group: copies [this, this + n) of
  // its round read the same rows of one source buffer, each a slice of
  // them (copy_descs_interleavable), in source order; the executor copies
  // them together, run by run (copy_boxes_interleaved), so that the rows
  // are read once, in order. 0 elsewhere.
  uint32_t interleave = 0;
};

// The direct copies of one round: Schedule::direct[begin, end).
struct DirectRound {
  int64_t round = -1;
  size_t begin = 0;
  size_t end = 0;
  // Events that must be done before its copies run (Schedule::deps).
  uint32_t dep_begin = 0;
  uint32_t dep_end = 0;
};

// Whole-plan schedules: the contributions to one destination entry that are
// reduced in one round (Schedule::contributions[begin, end), in reduction
// order), run as one task.
struct ReduceGroup {
  size_t acc = 0;  // Schedule::accs index
  int64_t round = -1;
  size_t begin = 0;
  size_t end = 0;
  bool fill = false;     // the entry's first group: start from the identity
  bool store = false;    // the entry's last group: round a separate accumulator
  bool scratch = false;  // the entry's only group, accumulating in the thread's scratch
  int64_t bytes = 0;     // read by its contributions
};

// One summand's contribution to a destination entry with a partial source,
// or to a scratch, or a scratch's contribution to what it feeds.
struct Contribution {
  uint32_t tensor = 0;
  uint32_t dst_entry = 0;  // kScratchEntry: the target is a scratch (see acc)
  // The reduction order's key: the source summand of a raw summand; after
  // every summand (kScratchSummand) for what reads a scratch or a
  // destination entry (already combined values).
  int32_t summand = 0;
  uint64_t seq = 0;  // tie-break: discovery order
  size_t acc = 0;    // index in Schedule::accs
  Box region;
  int64_t arrival = -1;  // round of its message; -1: a local piece
  int64_t ready = -1;    // reduced after this round (-1: before the first)
  // Source: entry `src_entry` of the tensor's source, a buffer of this
  // process (`from_buffer`) ...
  bool from_buffer = false;
  uint32_t src_entry = 0;
  // ... which is, in a stage > 0, destination entry src_entry (src_dst) or
  // scratch src_scratch (Schedule::scratch index; kNoScratch: none).
  bool src_dst = false;
  uint32_t src_scratch = kNoScratch;
  Box src_box;
  // ... or bytes [msg_offset, +bytes) of message `msg`, copied to
  // `deferred_offset` of work block `deferred_block` when ready > arrival.
  size_t msg = 0;
  int64_t msg_offset = 0;
  int64_t bytes = 0;
  size_t deferred_block = 0;
  int64_t deferred_offset = -1;
};

inline constexpr int32_t kScratchSummand = INT32_MAX;

// A destination entry with a partial source, or a scratch: its accumulator.
struct AccTarget {
  uint32_t tensor = 0;
  uint32_t dst_entry = 0;         // kScratchEntry for a scratch
  uint32_t scratch = kNoScratch;  // Schedule::scratch index of a scratch
  Box box;                        // the target buffer's box
  int64_t device = 0;             // and device
  int64_t elements = 0;
  // Accumulates in f32 beside the destination, in Schedule::work (in a
  // whole-plan schedule only when its contributions span several rounds;
  // otherwise the thread's scratch serves).
  bool separate = false;
  size_t acc_block = 0;  // when separate: where, in Schedule::work
  int64_t acc_offset = 0;
  // Whole-plan schedules: a replica of another entry (ReplicaCopy), not
  // reduced itself.
  bool replica = false;
  // Per-process schedules: the last round key in which a contribution is
  // reduced (INT64_MIN: none), after which the reduction is finished (and
  // stored); the store writes the whole destination entry (a separate
  // accumulator, or a mean's division), so writes of later stages into the
  // entry wait for it.
  int64_t last_ready = INT64_MIN;
  bool store_writes = false;
};

// Whole-plan schedules: destination entry `to` of a tensor copied whole
// from entry `from`, which holds the same box and is written by the pieces
// (or reductions) of every round: a replicated destination is gathered once
// with the strided pass and the other replicas are contiguous copies.
struct ReplicaCopy {
  uint32_t tensor = 0;
  uint32_t from = 0;
  uint32_t to = 0;
  int64_t bytes = 0;
};

// Memory besides staging on one device: separate accumulators, or summands
// deferred for order (ExecuteStats::accumulator_bytes, deferred_bytes).
struct WorkBlock {
  int64_t device = 0;
  int32_t ordinal = 0;
  int64_t bytes = 0;
};

inline constexpr size_t kNoAcc = ~size_t{0};

// A scratch buffer of the part (plan.h, Scratch): `box` of `tensor` in its
// dtype, bytes [offset, + volume x size) of work block `block`; its
// reduction is accs[acc], or, for a copy-staging scratch (a tensor whose
// source is not partial), acc is kNoAcc: direct copies and unpacked
// receives write it, a read waits for its writers (the receives and direct
// rounds of stage 0 that write it).
struct ScratchBuffer {
  uint32_t tensor = 0;
  int64_t device = 0;
  Box box;
  size_t block = 0;
  int64_t offset = 0;
  size_t acc = 0;
  bool staging() const { return acc == kNoAcc; }
};

struct Schedule {
  // The part the pieces below point into: the plan's own, or a copy the
  // schedule owns (cached schedules outlive the plan they were built from).
  // Null in a whole-plan schedule, whose pieces point into the plan's parts.
  const ProcessPart* part = nullptr;
  std::shared_ptr<const ProcessPart> owned_part;
  std::vector<EngineMessage> messages;
  std::vector<RoundPlan> rounds;  // ascending round
  // Overlap (see the head of this file). Events: [0, messages) a message
  // completed (a receive: and unpacked), then one per direct round (run),
  // then one per accumulator (reduction finished and stored).
  std::vector<StepPlan> steps;     // (stage, round, step) order
  std::vector<uint32_t> priority;  // step indices in the order the engine tries them
  std::vector<uint32_t> deps;      // event indices
  std::vector<uint32_t> step_channels;
  std::vector<std::vector<uint32_t>> channel_steps;  // per channel: its steps, in order
  std::vector<uint32_t> conflicts;                   // message indices
  size_t direct_event(size_t direct_round) const { return messages.size() + direct_round; }
  size_t acc_event(size_t acc) const { return messages.size() + direct_rounds.size() + acc; }
  size_t events() const { return messages.size() + direct_rounds.size() + accs.size(); }
  std::vector<DeviceSlot> slots;
  std::vector<DirectCopy> direct;           // tensors without a partial source, by round
  std::vector<CopyDesc> direct_descs;       // DirectCopy::desc of each, in its order
  std::vector<DirectRound> direct_rounds;   // ascending round
  std::vector<Contribution> contributions;  // sorted by (ready, tensor, entry, summand, seq)
  std::vector<AccTarget> accs;
  std::vector<WorkBlock> work;
  // Destination entries of tensors with a partial destination and a whole
  // source: filled with the identity first.
  std::vector<std::pair<uint32_t, uint32_t>> fills;
  // Whole-plan schedules: the reductions as tasks, sorted by round.
  std::vector<ReduceGroup> groups;
  // Whole-plan schedules: replicas filled after the last round.
  std::vector<ReplicaCopy> replicas;
  // Scratch buffers (of every part in a whole-plan schedule), in part
  // order, each part's in its order.
  std::vector<ScratchBuffer> scratch;
  int64_t accumulator_bytes = 0;
  int64_t deferred_bytes = 0;
  int64_t scratch_bytes = 0;  // of the scratch buffers themselves (in work)
  int64_t local_bytes = 0;
  // A cached schedule's last execution on device memory without messages
  // (one process: the cuda local transport, or a part that only copies
  // within its GPUs), kept to be replayed (engine.cc, Replay).
  std::shared_ptr<struct Replay> replay;
  // Block scales: the quantised sources' scratch, kept for the next
  // execution of this schedule (exec/engine/scaled_sources.h).
  std::shared_ptr<class ScaledSources> scaled_sources;
};

// What an execution handed the transport, to hand it again when the next
// execution of the same cached schedule has the same buffers and options:
// every run_copies call and order_streams in order, and the accumulator
// and scratch blocks those copies point into (kept allocated between
// executions). Each copy call has a key of its own (next_call_key), with
// which it is handed to the transport every time (run_keyed_copies): its
// launch cache then finds the call without comparing its ops; the engine
// does no per-piece work.
// A copy call's ops: one op per piece for the device path, filled once,
// the lists of one execution in one block (util/large_alloc.h, LargeArena).
using OpList = std::vector<CopyOp, ArenaAllocator<CopyOp>>;

struct Replay {
  struct Call {
    bool order = false;  // order_streams(), else run_keyed_copies(device, ordinal, ops, key)
    int64_t device = 0;
    int32_t ordinal = 0;
    uint64_t key = 0;
    OpList ops;
  };
  std::vector<uint64_t> buffers;  // buffer_list of the buffers it ran on
  int32_t last_stage = -1;
  std::vector<Call> calls;
  std::deque<CopyOp::Shard> shards;  // those the calls' kQuantise ops point to
  std::vector<std::unique_ptr<StagingBlock>> blocks;
  ExecuteStats stats;  // of the recorded execution (seconds and cache flags aside)
};

// The buffers of an execution as a list two executions share exactly when
// they have the same buffers: per tensor its numbers of source and
// destination buffers, then each buffer's address and size (Replay).
std::vector<uint64_t> buffer_list(std::span<const TensorBuffers> buffers);
// Whether `list` is buffer_list(buffers), without building it.
bool same_buffers(std::span<const uint64_t> list, std::span<const TensorBuffers> buffers);

// A key for a kept copy call (Transport::run_keyed_copies), drawn from a
// process-wide counter: never 0, never drawn twice.
uint64_t next_call_key();

// Checks `part` (process `process`'s part of `plan`, or an equal copy that
// outlives the schedule) against the plan (pieces in range, sizes, devices
// on the right processes, peers inside the group) and builds the schedule.
// Depends on the plan, the part, the transport's size and `gather`, and on
// options.packing (staging or not) and options.overlap; on no buffer.
// Throws kInvalidArgument for a damaged or foreign plan.
Schedule build_schedule(const Plan& plan, int32_t process, const ProcessPart& part,
                        const TransportInfo& transport, const ExecuteOptions& options);

// The schedule of every part of `plan` executed in one process (the plan
// holds them all: the caller checked). Checks every part's local and
// received pieces and messages (pieces in range, sizes, devices on the
// right processes); sent messages are the same pieces seen from the sender
// and are not read. Throws kInvalidArgument for a damaged plan.
Schedule build_whole_schedule(const Plan& plan);

}  // namespace reshard::engine_detail
