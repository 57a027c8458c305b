// reshard — the transport interface the distributed engine drives
// (docs/design.md §3.4). The engine (reshard/engine.h) decides what moves when; a
// transport moves bytes between the ranks of one group and owns the memory
// it moves them through.
//
// Implementations: `local` (host memory, one process holds every device:
// make_local_transport, reshard/engine.h), `mpi` (host memory,
// backends/mpi, loaded at run time by make_mpi_transport) and, built on the
// same interface, device transports (`cuda` local, NCCL). The interface is what a device transport
// needs as well:
//
//  - Staging memory is allocated by the transport (allocate_staging), on the
//    device that stages, so a CUDA transport returns device memory.
//  - Transfers are issued in batches (start): the engine groups the
//    operations of one round with one or two peers into a batch, in an order
//    every rank derives from the plan, and never has more than a bounded
//    number of batches in flight. A NCCL transport issues a batch as one
//    ncclGroupStart/ncclGroupEnd group.
//  - Copies (pack, unpack, reduce, identity fills) on memory the host cannot
//    touch are handed to the transport as descriptor arrays (run_copies), one
//    call per device per phase, so a device transport launches one fused
//    kernel of the box-copy core (reshard/box_copy.h) per call.
//  - A stream-ordered transport (TransportInfo::stream_ordered) orders the
//    copies and batches it is given on its streams: the engine then issues a
//    whole round without waiting and calls finish() once at the end; a host
//    transport reports completion through TransferBatch::test() and the
//    engine waits, with a deadline, before it reads what a batch received.
//
// Errors: implementations throw reshard::Error (kTransport for failures of
// the underlying library, kTimeout for expired deadlines naming the ranks
// still missing, kInvalidArgument for bad requests). Thread safety: a
// transport is used by one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reshard/box.h"
#include "reshard/box_copy.h"
#include "reshard/dtype.h"
#include "reshard/error.h"
#include "reshard/layout.h"

namespace reshard {

// Bumped whenever this header changes incompatibly; a backend built against
// another version is refused by the loader.
// Version 2: TransferOp::remote_ordinal and TransferOp::state.
// Version 3: TransportInfo::whole_plan.
// Version 4: CopyOp::divisor (kStore of ReduceOp::kMean).
// Version 5: Transport::order_streams.
// Version 6: TransportInfo::host_ranks.
// Version 7: Transport::run_keyed_copies.
// Version 8: CopyOp::Kind::kCast and CopyOp::to_dtype (casts in flight).
// Version 9: CopyOp::Kind::kBlockScales, kQuantise and CopyOp::shard
// (block scales on device memory).
// Version 10: CopyOp::shard points to the shard (CopyOp 272 bytes, not 480).
inline constexpr uint32_t kTransportInterfaceVersion = 10;

enum class MemoryKind : int32_t {
  kHost = 0,  // ordinary host memory: the engine runs copies itself
  kCuda = 1,  // CUDA device memory: copies go through Transport::run_copies
};

struct TransportInfo {
  std::string name;  // "mpi", "nccl", ...
  MemoryKind memory = MemoryKind::kHost;
  int32_t rank = 0;  // this process's rank in the group (= plan process)
  int32_t size = 1;  // ranks in the group
  // Copies and batches are ordered by the transport (CUDA streams): the
  // engine does not wait between phases and calls finish() at the end.
  bool stream_ordered = false;
  // TransferOp::segments are accepted: the transport sends from and
  // receives into the shard buffers directly (MPI derived datatypes), so
  // such messages need no staging.
  bool gather = false;
  // One process holds every device of a plan (the `local` transport): the
  // engine may execute whole plans (Engine::execute with kAllProcesses),
  // every message a direct copy between buffers.
  bool whole_plan = false;
  // Ranks of the group on this rank's host, itself included (interface 6):
  // they share its cores, so ExecuteOptions::threads = 0 gives each its
  // share of the host rather than every core.
  int32_t host_ranks = 1;
};

// Staging memory owned by the transport, on one device; freed (or returned
// to the transport's pool) by its destructor.
class StagingBlock {
 public:
  virtual ~StagingBlock() = default;
  // Host or device memory according to TransportInfo::memory; at least
  // 64-byte aligned.
  virtual std::byte* data() = 0;
  virtual int64_t bytes() const = 0;
};

// One piece of a message described in place: `region` (global tensor
// coordinates) of a dense row-major buffer shaped like `buffer_box`.
struct Segment {
  void* buffer = nullptr;  // const for sends
  Box buffer_box;
  Box region;
  int64_t elem_size = 0;
};

// What a transport derived from one message and keeps between executions
// of a cached schedule (the MPI transport: the derived datatype of its
// segments). Created by the transport, owned by the engine (see
// TransferOp::state), destroyed with the schedule: possibly after the
// transport that created it, and possibly while an abandoned operation
// still uses what it describes, so its destructor must cope with both.
class TransferState {
 public:
  virtual ~TransferState() = default;
};

// One point-to-point operation of a batch.
struct TransferOp {
  enum class Kind : int32_t { kSend = 0, kRecv = 1 };
  Kind kind = Kind::kSend;
  int32_t peer = 0;            // rank in the transport's group
  uint32_t round = 0;          // plan round (transports may derive tags from it)
  int64_t local_device = 0;    // the plan device on this rank (sender or receiver)
  int32_t local_ordinal = 0;   // its local ordinal (CUDA device index)
  int64_t remote_device = 0;   // the plan device on the peer
  int32_t remote_ordinal = 0;  // its local ordinal on the peer (Topology::info().ordinal)
  // The message bytes: a contiguous buffer (staging or a shard buffer, sent
  // or received in place) ...
  void* data = nullptr;
  int64_t bytes = 0;
  // ... or, when `data` is null and the transport reports `gather`, the
  // concatenation of these segments (their volumes times elem sizes sum to
  // `bytes`). Valid until start() returns.
  std::span<const Segment> segments;
  // Null, or a slot the engine keeps for this message of a cached schedule
  // across executions (the same slot comes back with every later execution
  // of that message). A transport may store what it derived from the
  // operation there and reuse it later; it must check that what it reuses
  // still fits the operation (segment addresses change when the caller's
  // buffers do). Transports that keep nothing ignore it.
  std::unique_ptr<TransferState>* state = nullptr;
};

// Operations started together. Destroying a batch that has not completed
// abandons it: the transport cancels what it can, and memory the operations
// use may still be read or written until the process ends (see the
// transport's documentation; after a timeout the caller should abort).
class TransferBatch {
 public:
  virtual ~TransferBatch() = default;
  // Makes progress without blocking; true once every operation completed
  // (for a stream-ordered transport: once it is ordered before later work).
  virtual bool test() = 0;
  // Ranks with operations not yet complete, sorted, without duplicates.
  virtual std::vector<int32_t> pending_peers() const = 0;
};

// A copy for a transport whose memory the host cannot touch. Semantics of
// the host functions of reshard/box_copy.h with the same names. The source
// of a kCopy or kReduce that reads staging may be misaligned for its dtype
// (pieces of several dtypes share a message, packed back to back).
// Accumulators and deferred summands live in memory from allocate_staging
// too (ExecuteStats::accumulator_bytes, deferred_bytes). A separate
// accumulator (kStore with src != dst) is dead after its store: the engine
// stores each accumulator once per execution and never reads it again, so a
// transport may fold an accumulator's fill, reductions and store into one
// pass that never writes it (the CUDA backend does).
struct CopyOp {
  enum class Kind : int32_t {
    kCopy = 0,          // copy_box(desc, dtype_size(dtype), src, dst)
    kReduce = 1,        // reduce_into(desc, dtype, op, src, dst = accumulator)
    kFillAcc = 2,       // fill_identity(dtype, op, dst, count) on an accumulator
    kFillElements = 3,  // the identity stored as `dtype` into count elements of dst
    kStore = 4,         // store_from_acc(dtype, src = accumulator, dst, count), or
                        // store_mean_from_acc(..., divisor) when divisor > 1
                        // (src may equal dst when acc_is_elem(dtype))
    kCast = 5,          // cast_box(desc, dtype, to_dtype, src, dst) (reshard/cast.h;
                        // interface 8): a pack or unpack converting elements
    // Block scales (docs/spec.md "Block scales"; interface 9), on a source
    // shard of `dtype` elements at src, row-major in shard.box, with blocks
    // shard.block, cast to `to_dtype` (f8e4m3 or f8e5m2):
    kBlockScales = 6,  // the scales of every block of the shard into dst
                       // (shard.scale_dtype, blocks_touched(shard.box) row-major):
                       // block_scales_part(..., box, box, src, dst); desc unused
    kQuantise = 7,     // a copy out of the shard (desc's source offsets index
                       // shard.box) quantised straight to `to_dtype` at dst with
                       // the shard's scales at shard.scales: quantise_runs
  };
  Kind kind = Kind::kCopy;
  CopyDesc desc{};
  DType dtype = DType::kU8;
  ReduceOp op = ReduceOp::kSum;
  int64_t count = 0;
  const void* src = nullptr;
  void* dst = nullptr;
  int32_t divisor = 1;          // kStore: the mean's number of summands (interface 4)
  DType to_dtype = DType::kU8;  // kCast, kBlockScales, kQuantise: the destination's dtype
  // A scaled source shard (interface 9).
  struct Shard {
    Box box;                                // the shard's box (global coordinates)
    std::array<int64_t, kMaxRank> block{};  // the block's extent per dim
    DType scale_dtype = DType::kF32;        // kF32 (amax / M) or kE8M0 (MXFP8)
    const void* scales = nullptr;           // kQuantise: the shard's scales
  };
  // kBlockScales, kQuantise: the scaled source shard, valid while the op
  // is (the engine keeps it with the op, so that the many ops out of one
  // shard share it and every other op stays small; interface 10); null for
  // other kinds. Ops are equal when their shards are, wherever they lie.
  const Shard* shard = nullptr;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual TransportInfo info() const = 0;

  // Allocates `bytes` of staging memory for plan device `device` (local
  // ordinal `ordinal`). Throws kOutOfMemory.
  virtual std::unique_ptr<StagingBlock> allocate_staging(int64_t device, int32_t ordinal,
                                                         int64_t bytes) = 0;

  // Starts the operations (receives are posted before sends). Memory they
  // use must stay valid until the batch completed. Operations between the
  // same two ranks are matched in the order they are started on each side.
  virtual std::unique_ptr<TransferBatch> start(std::span<const TransferOp> ops) = 0;

  // Gives outstanding batches a chance to progress (host transports whose
  // library progresses only inside its calls); the engine calls it between
  // copies while transfers are in flight.
  virtual void progress() {}

  // Runs (or, stream-ordered, enqueues) copies on the memory of device
  // `device`; only called when info().memory is not kHost.
  virtual void run_copies(int64_t device, int32_t ordinal, std::span<const CopyOp> ops) {
    (void)device;
    (void)ordinal;
    (void)ops;
    throw Error(ErrorCode::kUnsupported, info().name + " transport: run_copies not implemented");
  }

  // run_copies of a call that may be handed again (interface 7): `key`,
  // nonzero, names these ops among every call handed to this transport:
  // each call with the same key has ops equal field by field (the engine
  // draws keys from a process-wide counter for the calls of an execution it
  // keeps to replay, and never changes a kept call). A transport that plans
  // its copies (the CUDA backend's launch cache) can remember the plan
  // under the key and find it again without comparing the ops; it must
  // still accept the ops when it has forgotten the key. By default,
  // run_copies(device, ordinal, ops).
  virtual void run_keyed_copies(int64_t device, int32_t ordinal, std::span<const CopyOp> ops,
                                uint64_t key) {
    (void)key;
    run_copies(device, ordinal, ops);
  }

  // Orders everything run_copies and start issued so far, on every stream
  // of this transport, before anything issued after this call. The engine
  // calls it before a batch of copies that may read what earlier copies or
  // transfers wrote on another device's stream (a relay reading a
  // destination an earlier stage wrote, a reduction reading another
  // device's scratch). Stream-ordered transports with several streams make
  // every stream wait for the others (events); a no-op for the others
  // (interface 5).
  virtual void order_streams() {}

  // Waits until everything issued so far has completed (stream-ordered
  // transports; a no-op for the others). kTimeout after `timeout_seconds`.
  virtual void finish(double timeout_seconds) { (void)timeout_seconds; }

  // Control plane: every rank contributes `record` (the same size on every
  // rank) and receives every rank's record, indexed by rank. Throws
  // kTimeout naming the ranks whose records did not arrive within
  // `timeout_seconds`, kMismatch when a rank sent a record of another size.
  virtual std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> record,
                                                        double timeout_seconds) = 0;

  // Ends the whole job (MPI_Abort, ncclCommAbort + exit): what a caller does
  // after a timeout, when peers may be gone. Does not return.
  [[noreturn]] virtual void abort(int exit_code) noexcept = 0;
};

}  // namespace reshard
