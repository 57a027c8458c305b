// reshard — planning (docs/design.md §2).
//
// make_plan() turns tensors with source and destination layouts into a Plan:
// which device sends which box of which tensor to whom, fused into one
// message per (source device, destination device, round). A Plan has a
// global part (inputs, options, statistics, fingerprint), identical on every
// process, and one part per process holding that process's pieces. A
// process can plan just its own part, in time proportional to its pieces.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/box.h"
#include "reshard/dtype.h"
#include "reshard/error.h"
#include "reshard/layout.h"
#include "reshard/regions.h"

namespace reshard {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;  // the source's (and, without a cast, the destination's)
  Layout src;
  Layout dst;
  // A cast in flight (docs/spec.md "Casts"): the destination's dtype when it
  // differs from `dtype`; DType{} (0) when it does not. Between f32, f16,
  // bf16, f8e4m3 and f8e5m2 (reshard/cast.h), with a source and a
  // destination that are not partial.
  DType dst_dtype{};
  // Block scales (docs/spec.md "Block scales", reshard/block_scales.h): the
  // index in the plan's tensors of this tensor's scale tensor, -1 for none,
  // and the block's extent per dim. The destination (f8e4m3 or f8e5m2)
  // holds cast(x / s) with s the scale of x's block, the scale tensor (one
  // element per block) holds s. Its source is computed by the executor
  // from this tensor's source, never given by a caller.
  int32_t scale_tensor = -1;
  std::vector<int64_t> scale_block;
  // The scale tensor's dtype, which names the rule (reshard/block_scales.h):
  // f32 (amax / M) or e8m0 (MXFP8). Derived from tensors[scale_tensor]
  // (add_block_scales, derive_scale_dtypes), not stored in a plan.
  DType scale_dtype = DType::kF32;
};
inline bool has_block_scales(const TensorSpec& t) { return t.scale_tensor >= 0; }

// The destination's dtype: dst_dtype, or dtype without a cast.
inline DType out_dtype(const TensorSpec& t) {
  return t.dst_dtype == DType{} ? t.dtype : t.dst_dtype;
}
inline bool has_cast(const TensorSpec& t) { return out_dtype(t) != t.dtype; }
// The dtype of a piece of `t` in a message. A cast happens on the sending
// side when it shrinks the element, on the receiving side otherwise: stage 0
// (reading the source) carries the destination's dtype when it is smaller,
// the source's otherwise. A relay (reading a destination entry) carries the
// destination's dtype when it is not larger than the source's, else the
// source's (the sender narrows back, exactly: widening casts are exact).
// Either way every piece of `t` has wire_size(t) bytes per element.
inline DType wire_dtype(const TensorSpec& t, bool reads_source) {
  const DType out = out_dtype(t);
  const int64_t s = dtype_size(t.dtype), d = dtype_size(out);
  if (d < s) return out;
  if (d > s) return t.dtype;
  return reads_source ? t.dtype : out;
}
// Bytes per element of `t` in messages: the smaller of the two dtypes.
inline int64_t wire_size(const TensorSpec& t) {
  const int64_t s = dtype_size(t.dtype), d = dtype_size(out_dtype(t));
  return s < d ? s : d;
}

struct PlanOptions {
  // A piece held by several remote replicas (none on the destination's
  // device, process or host) is split evenly across them when it has at least
  // this many bytes; smaller pieces go to one replica chosen by rotation.
  // Relays across hosts cut their smaller regions into chunks of at least
  // the lesser of this and a quarter of what one α buys between hosts (at
  // least 4 KiB), or one per receiving host where the holders reach every
  // one anyway (docs/design.md §2.4).
  int64_t split_min_bytes = 1 << 20;
  // α–β cost model: seconds per message, bytes per second inside a host and
  // between hosts.
  double alpha_seconds = 5e-6;
  double intra_host_bytes_per_second = 100e9;
  double inter_host_bytes_per_second = 25e9;
  // Staging memory per device per round; 0 means unbounded.
  // Each (src, dst) stream is cut into rounds of about its share of the
  // budget (its bytes over the busier endpoint's traffic), cuts placed at a
  // piece or row boundary when one lies within 1/16 of a round, so no device
  // stages more than the budget in a round (see core/src/plan/rounds.h).
  // A plan of several stages (relays, reductions) is also cut into up to 16
  // rounds for pipelining, with or without a budget.
  // The default, 1 GiB, is ~1% of an 80 GiB GPU. The in-process executor
  // stages nothing and ignores rounds.
  int64_t staging_budget_bytes = int64_t{1} << 30;
  // Relays for replicated destinations (docs/design.md §2.4): when several
  // devices of one host need the same box and no device of that host holds
  // it, one of them (the leader, rotating over the box's regions) receives
  // each region over the network in stage 0 and forwards it to the others
  // inside the host in stage 1, so the region enters the host once. False:
  // every device fetches what it lacks directly (single-hop, one stage).
  bool relays = true;
  // Reduce-scatter then gather for partial sources (docs/design.md §2.4):
  // the entries of one destination cell (all needing the same reduced box)
  // split it into parts; each part's reducer receives every summand of its
  // part only (stage 0) and forwards the reduced part to the other entries
  // (stage 1). False: every entry receives every summand it lacks.
  bool reduce_scatter = true;
  // NICs per host for the α–β estimate and its bound (PlanStats::
  // cost_seconds): 0, the default, means one per device, each at
  // inter_host_bytes_per_second. With n NICs and m plan devices on a host,
  // the NICs form min(n, m) groups and device i (by id order) uses group
  // i·G/m (the fleet simulator's model, docs/simulate.md): a device moves
  // its cross-host bytes over its whole group, and the group carries every
  // device's of it. Decisions made by the whole plan's estimate (the device
  // rule of relays, reductions with α > 0) follow it.
  int32_t nics_per_host = 0;
  // The single-hop guard (docs/planner.md): groups of like tensors whose
  // routes (relays, reduce routes) make the whole plan slower by its α–β
  // estimate go single-hop, and a plan is never slower by it than the
  // single-hop plan. False: every route the other choices take is kept
  // (to exercise the routes, or where the model misjudges the network).
  bool single_hop_guard = true;
  friend bool operator==(const PlanOptions&, const PlanOptions&) = default;
};

// The one rule for option values, applied wherever options enter: make_plan,
// the spec parser, the plan decoder (with kCorrupt) and, through make_plan,
// the C ABI. split_min_bytes and staging_budget_bytes are >= 0,
// nics_per_host is in [0, 2^20],
// alpha_seconds is finite and in [0, kMaxAlphaSeconds], the bandwidths are
// finite and in [kMinBytesPerSecond, kMaxBytesPerSecond] (a plan must decode
// from the bytes it encodes to, so its cost estimate must be finite: with
// alpha_seconds 1e308 or a bandwidth of 5e-324 it was not). Throws Error(code, field,
// detail) with field `prefix` + the member's name, e.g.
// "options.alpha_seconds: must be non-negative and finite, got -1".
inline constexpr double kMaxAlphaSeconds = 1e9;
inline constexpr double kMinBytesPerSecond = 1;
inline constexpr double kMaxBytesPerSecond = 1e18;
void validate(const PlanOptions& options, const std::string& prefix = "options.",
              ErrorCode code = ErrorCode::kInvalidArgument);

struct PlanInput {
  std::vector<TensorSpec> tensors;
  Topology topology;
  PlanOptions options;
};

// A box of one tensor moving from a source entry to a destination entry.
// The moved region is box(src_entry) ∩ box(dst_entry) unless `region` names
// an entry of the owning ProcessPart::regions (a split or refined piece).
// In a message of stage s > 0, `src_entry` indexes the tensor's
// *destination* layout: the piece forwards what an earlier stage wrote into
// that destination buffer (a relay), and `region` always names its region.
// One exception (reads_source below): a piece of stage s > 0 writing a
// scratch from an entry (not from another scratch) reads a summand, a
// *source* entry, as in stage 0: a band of a pre-reduction under a staging
// budget, whose scratch is written in stage s and read in s + 1.
struct Piece {
  uint32_t tensor = 0;
  uint32_t src_entry = 0;
  uint32_t dst_entry = 0;
  uint32_t region = 0xffffffffu;
  friend bool operator==(const Piece&, const Piece&) = default;
};
inline constexpr uint32_t kOverlapRegion = 0xffffffffu;

// Piece::dst_entry (or, in a message of stage > 0, Piece::src_entry) value
// naming a scratch buffer in place of a layout entry: the Scratch of the
// piece's tensor on the device that writes (dst_entry) or reads (src_entry)
// the piece, the one whose box contains the piece's region. A piece naming
// a scratch always names its region (never kOverlapRegion).
inline constexpr uint32_t kScratchEntry = 0xfffffffeu;

// Whether piece `p` of a message of `stage` (0 for local pieces) reads the
// tensor's source layout: every piece of stage 0, and a piece of a later
// stage that writes a scratch from an entry (Piece). Other pieces of a later
// stage read a destination entry (a relay) or a scratch (kScratchEntry).
inline bool reads_source(const Piece& p, uint32_t stage) {
  return stage == 0 || (p.dst_entry == kScratchEntry && p.src_entry != kScratchEntry);
}

// Planner-sized staging (docs/design.md §2.4): a buffer the executor
// allocates on `device` for one execution and frees when it ends, holding
// `box` of tensor `tensor` in the tensor's dtype, row-major like a
// destination entry of that box. Scratch of a partial source serves reductions
// (reduction trees: summands reduced on their holders' host before they
// cross to the destination's reducer, and chains across holder hosts,
// where a piece reads one host's scratch into the next host's). It starts at the identity of the
// source's reduce op; every piece written into it is combined into it with
// that op (in the executors' accumulator precision, stored in the dtype
// once its last contribution arrived); a piece that reads it (stage > 0)
// is one contribution to the buffer it writes, combined like a summand.
// Pieces that read a destination entry copy reduced values.
//
// A scratch of a tensor whose source is not partial is a copy-staging
// buffer (required_features bit 64, kPlanFeatureStaging): pieces of stage 0
// copy source entries into it, each element exactly once (local pieces or
// received ones), and pieces of later stages copy it into destination
// entries (messages from its device). It holds copies, bit for bit (-0.0 and
// NaN payloads included): no identity, no accumulator; its tensor has no
// cast and no block scales. It lets a device outside a destination's cell
// relay bytes to it (docs/planner.md §11). The scratch boxes of one
// (tensor, device) are disjoint and non-empty.
struct Scratch {
  uint32_t tensor = 0;
  int64_t device = 0;
  Box box;
  friend bool operator==(const Scratch&, const Scratch&) = default;
};

// All pieces from one device to another in one round of one stage, packed
// back to back in piece order. `bytes` is the packed size. Stages run in
// order, each one's rounds in order; a message of stage s > 0 reads
// destination buffers that stages before s completed (see Piece).
struct Message {
  int64_t src_device = 0;
  int64_t dst_device = 0;
  uint32_t round = 0;  // within its stage
  uint32_t stage = 0;
  uint64_t first_piece = 0;  // index into send_pieces / recv_pieces
  uint64_t num_pieces = 0;
  int64_t bytes = 0;
  // Sub-message: messages of one (stage, round, destination, source) carry
  // disjoint pieces under sub 0, 1, 2, ...; they flow side by side in the
  // round, and a later stage's message reading what one of them wrote waits
  // only for that one (required_features bit 128, kPlanFeatureSubMessages).
  uint32_t sub = 0;
  // Always 0: keeps Message free of padding, so that messages compare as
  // bytes (engine_cache.cc).
  uint32_t reserved = 0;
  friend bool operator==(const Message&, const Message&) = default;
};

struct ProcessPart {
  int32_t process = 0;
  // Pieces whose source and destination are the same device of this process
  // (stage 0).
  std::vector<Piece> local;
  // Messages this process sends (ordered by stage, round, then destination
  // device, then source device, then sub) and the pieces they carry, grouped
  // per message.
  std::vector<Message> sends;
  std::vector<Piece> send_pieces;
  // Messages this process receives (ordered by stage, round, source,
  // destination, sub).
  std::vector<Message> recvs;
  std::vector<Piece> recv_pieces;
  Regions regions;
  // Scratch buffers on this process's devices, sorted by (tensor, device,
  // box.lo): the ones its pieces write (dst_entry == kScratchEntry) or its
  // sends read (src_entry == kScratchEntry).
  std::vector<Scratch> scratch;
  friend bool operator==(const ProcessPart&, const ProcessPart&) = default;
};

// The index in `part.scratch` (sorted as ProcessPart says) of the scratch of
// `tensor` on `device` whose box contains `region`; -1 when the part holds
// none. O(log n + the scratch of that tensor on that device).
int64_t find_scratch(const ProcessPart& part, uint32_t tensor, int64_t device, const Box& region);

struct DeviceTraffic {
  int64_t device = 0;
  int64_t send_bytes = 0;
  int64_t recv_bytes = 0;
  int64_t local_bytes = 0;
  int64_t send_messages = 0;  // devices this one sends to (streams)
  int64_t recv_messages = 0;  // devices this one receives from
  friend bool operator==(const DeviceTraffic&, const DeviceTraffic&) = default;
};

// Which lower bound limits a plan's α–β cost (PlanStats::lower_bound_binding).
// Stable values shared with the C ABI and the plan format.
enum class BoundKind : int32_t {
  kNone = 0,
  kDeviceRecv = 1,  // a device's bytes to receive
  kDeviceSend = 2,  // a device's bytes only it holds
  kHostRecv = 3,    // a host's bytes to take in over its NICs
  kHostSend = 4,    // a host's bytes only it holds, or the hosts holding copies together
};
std::string_view bound_kind_name(BoundKind kind) noexcept;

struct PlanStats {
  int64_t network_bytes = 0;  // bytes that leave their device
  int64_t local_bytes = 0;    // bytes copied within a device
  int64_t cross_host_bytes = 0;
  int64_t cross_process_bytes = 0;
  int64_t max_send_bytes = 0;
  int64_t max_recv_bytes = 0;
  int64_t messages = 0;            // (src, dst, round) messages
  int64_t pieces = 0;              // network + local pieces before round cutting
  int32_t rounds = 0;              // rounds of all stages together
  int64_t peak_staging_bytes = 0;  // max over devices and rounds of staged bytes
  // Lower bounds over every possible plan, relays, trees and reductions in
  // any order included (docs/design.md §2.2): a figure over its bound is the
  // plan's gap, never a gap only to the plans this planner can make.
  //  network: Σ over devices of the bytes each needs and lacks (one value
  //    per element, however many summands it lacks);
  //  max send: the most bytes one device alone holds and others need (sent
  //    once), and the total over the number of devices;
  //  max recv: the most bytes one device needs and lacks.
  int64_t lower_bound_network_bytes = 0;
  int64_t lower_bound_max_send_bytes = 0;
  int64_t lower_bound_max_recv_bytes = 0;
  double cost_seconds = 0;  // α–β estimate of the busiest device
  double lower_bound_cost_seconds = 0;
  double plan_seconds = 0;  // wall time make_plan took here; not encoded (0 after decode)
  // Steps of the plan, each reading only what earlier ones wrote: 0 for no
  // work, 1 for a single-hop plan, 2 when relays forward (stage 1), more
  // for relays across hosts, pre-reductions and chains across holder hosts
  // (no limit).
  int32_t stages = 0;
  // Host level. A host's network traffic is what its devices send to, or
  // receive from, devices of other hosts. Bounds: the bytes a host needs
  // and none of its devices holds (all summands of), taken in once; the
  // bytes only it holds and another host needs, sent out once; the cross-
  // host total is at least the sum of either; the busiest sender at least
  // the total over the number of hosts.
  int64_t max_host_send_bytes = 0;
  int64_t max_host_recv_bytes = 0;
  int64_t lower_bound_cross_host_bytes = 0;
  int64_t lower_bound_max_host_send_bytes = 0;
  int64_t lower_bound_max_host_recv_bytes = 0;
  // The bound that gives lower_bound_cost_seconds (each device's NIC runs at
  // options.inter_host_bytes_per_second, so a host takes in or sends out at
  // that rate times its devices in the plan), and the device or host it
  // concerns (-1 with kNone).
  BoundKind lower_bound_binding = BoundKind::kNone;
  int64_t lower_bound_binding_id = -1;
  // Bytes of stages after the first: what relays forward from a destination
  // buffer (part of network_bytes).
  int64_t forwarded_bytes = 0;
  // The most scratch bytes (Scratch) allocated on one device.
  int64_t max_scratch_bytes = 0;
  std::vector<DeviceTraffic> per_device;  // sorted by device

  // figure / bound; 1.0 when both are 0.
  static double ratio(double figure, double bound) {
    return bound == 0 ? (figure == 0 ? 1.0 : 0.0) : figure / bound;
  }
};

enum class PlanScope : int32_t {
  kAll = 0,      // every process part (small plans, in-process execution)
  kGlobal = 1,   // statistics and fingerprint only, no parts
  kProcess = 2,  // one process's part (PlanRequest::process)
};

struct PlanRequest {
  PlanScope scope = PlanScope::kAll;
  int32_t process = 0;
  // Compute global statistics (skipped for kProcess when false: a worker
  // planning only its part need not pay for the fleet's statistics).
  bool global_stats = true;
  // Threads planning the requested parts: 1 (the default) plans on the
  // calling thread only; 0 one per core this process may use (affinity
  // mask, cgroup CPU quota, or RESHARD_CORES; see ExecuteOptions::threads); N > 1
  // uses up to min(N, 256) threads (the caller's and the rest started for
  // the call). Not
  // part of the plan's identity: the Plan, its encoding and fingerprint are
  // the same for every value. Negative values are rejected.
  int32_t threads = 1;
  // Memory limit for the process parts. Before building any part, make_plan
  // estimates the peak memory the requested parts need (estimate_plan: from
  // the global statistics, without enumerating pieces) and, when the
  // estimate is above the limit, throws kResourceExhausted with the estimate,
  // the limit and a way out (PlanScope::kProcess). Values:
  //   0 (the default): default_max_plan_bytes(), half the memory available;
  //   N > 0: N bytes;
  //   kUnlimitedPlanBytes (-1): no limit and no estimate;
  //   below -1: kInvalidArgument.
  // kGlobal builds no parts; it is refused only when the global statistics
  // themselves would need more than the limit and more than 64 MiB (their
  // bookkeeping of device pairs that exchange data, quadratic in the devices
  // when every device talks to every other: 65,536 devices all-gathering),
  // up front, before enumerating anything, when a lower bound on the pairs
  // computed from the layouts is already above it.
  // With a limit in force,
  // kProcess without global_stats and without a staging budget still
  // computes the per-device figures the estimate needs (which it otherwise
  // skips). Not part of the plan's identity.
  int64_t max_plan_bytes = 0;
  // Work limit of the global statistics (every scope that computes them).
  // Before computing them, the planner counts from the layouts, per
  // dimension and without enumerating anything, the piece visits one pass
  // takes (one tensor per group of like tensors: for each destination cell
  // whose pieces are enumerated, its entries times the source cells it
  // overlaps) and, above the limit, throws kResourceExhausted naming the
  // estimate, the limit and this field. Values:
  //   0 (the default): kDefaultMaxStatsPieces;
  //   N > 0: N visits;
  //   -1: no limit;
  //   below -1: kInvalidArgument.
  // With max_plan_bytes = kUnlimitedPlanBytes (no limit and no estimate)
  // nothing is checked either. Not part of the plan's identity.
  int64_t max_stats_pieces = 0;
  // Progress of the parts: called after each part is built with (parts
  // built, parts requested). Calls may come from any planning thread but
  // never concurrently. Empty: none. Not part of the plan's identity.
  std::function<void(int64_t done, int64_t total)> progress = nullptr;
};

// PlanRequest::max_plan_bytes: no limit.
inline constexpr int64_t kUnlimitedPlanBytes = -1;

// PlanRequest::max_stats_pieces = 0: 2^31 piece visits, minutes of one core
// (bench/plan_scale.py's plans count 9.0 x 10^8 (405B dense, 23 CPU s) and
// 7.4 x 10^8 (DeepSeek-V3 MoE, 108 CPU s) at 16,384 devices; at 65,536,
// 4.3 x 10^9 and 9.7 x 10^9, refused within seconds).
inline constexpr int64_t kDefaultMaxStatsPieces = int64_t{1} << 31;

// The limit PlanRequest::max_plan_bytes = 0 stands for: half the memory
// available to this process, i.e. of the physical memory
// (sysconf(_SC_PHYS_PAGES) * page size) or of the cgroup's memory limit when
// one is set and lower (cgroup v2 memory.max, v1 memory.limit_in_bytes), or
// of the process's address-space limit (RLIMIT_AS) when that is lower.
// Computed once per process.
int64_t default_max_plan_bytes();

// What make_plan(input, request) would build, estimated from the global
// statistics without enumerating the parts' pieces. Figures are meant for
// admission control: sized to err on the high side (round cutting is
// assumed to split a piece at every cut, vectors to have grown by doubling).
struct PlanEstimate {
  int64_t parts = 0;     // process parts requested
  int64_t pieces = 0;    // pieces in those parts (a network piece is in two)
  int64_t messages = 0;  // messages in those parts (sends and receives)
  int64_t regions = 0;   // region boxes (split, refined and cut pieces)
  // Peak memory of make_plan for the request: the parts it returns plus the
  // buffers of the parts being built at the time.
  int64_t memory_bytes = 0;
  // Size of encode_plan of those parts (a plan buffer holds at most 2 GiB).
  int64_t encoded_bytes = 0;
  // The limit request.max_plan_bytes resolves to; kUnlimitedPlanBytes: none.
  int64_t limit_bytes = 0;
  // The memory default_max_plan_bytes() is half of (physical or cgroup).
  int64_t available_bytes = 0;
  // Process request.process's part alone, where request.process owns a
  // device of the plan (any scope but kGlobal; else all 0): the same
  // figures, its size as encode_plan of that part, and the least that size
  // can be (its pieces, messages and regions before rounds cut any, rows
  // of the fewest columns, regions of the smallest rank: the records of the
  // part alone).
  int64_t process_pieces = 0;
  int64_t process_messages = 0;
  int64_t process_regions = 0;
  int64_t process_encoded_bytes = 0;
  int64_t process_least_encoded_bytes = 0;
};

// The estimate make_plan checks against request.max_plan_bytes, for any
// limit (the limit does not change the estimate). Costs one computation of
// the global statistics (what PlanScope::kGlobal costs). Throws what
// make_plan throws for invalid inputs.
PlanEstimate estimate_plan(const PlanInput& input, const PlanRequest& request = {});
// The same, and into *stats (when not null) the global statistics the
// estimate was computed from: what make_plan(input, {PlanScope::kGlobal})
// .stats() holds, plan_seconds being the time this call took, so that a
// caller wanting both computes them once. With PlanScope::kProcess and
// global_stats = false only the per-device figures are computed (no
// rounds, messages or peak staging of a schedule).
PlanEstimate estimate_plan(const PlanInput& input, const PlanRequest& request, PlanStats* stats);

class Plan {
 public:
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const Topology& topology() const { return topology_; }
  const PlanOptions& options() const { return options_; }
  const PlanStats& stats() const { return stats_; }
  bool has_stats() const { return has_stats_; }
  // Hash of the canonical inputs and options; equal on every process that
  // planned the same inputs.
  uint64_t fingerprint() const { return fingerprint_; }
  // Processes owning at least one device of the plan, sorted.
  const std::vector<int32_t>& processes() const { return processes_; }
  const std::map<int32_t, ProcessPart>& parts() const { return parts_; }
  // The digest (part_digest in reshard/wire.h) of every process's part, in
  // the order of processes(): what every rank executing this plan must
  // hold. Set when the plan was made or decoded holding every part, or
  // decoded from a buffer that lists them (Plan.part_digests); empty when
  // the plan was made for one process only.
  const std::vector<uint64_t>& part_digests() const { return part_digests_; }
  // Throws kOutOfRange if this plan does not hold that part.
  const ProcessPart& part(int32_t process) const;
  // The region a piece of `part` moves.
  // (A piece of a stage > 0 message always names its region.)
  Box region(const ProcessPart& part, const Piece& piece) const;
  int64_t piece_bytes(const ProcessPart& part, const Piece& piece) const;
  // The buffer box a piece reads: its tensor's source entry's box, or, in a
  // message of stage > 0, the destination entry's box it forwards from
  // (unless it writes a scratch from a summand: reads_source).
  // A piece reading a scratch (src_entry == kScratchEntry) has no such box
  // without its part and device: kOutOfRange naming piece.src_entry (use
  // the overload below).
  Box source_box(const Piece& piece, uint32_t stage) const;
  // The same, and for a piece of stage > 0 reading a scratch the box of the
  // scratch of `part` on `device` (the sending device) that contains its
  // region; kOutOfRange naming piece.src_entry when there is none.
  Box source_box(const ProcessPart& part, const Piece& piece, uint32_t stage, int64_t device) const;
  // The buffer box a piece writes: its destination entry's box, or for
  // dst_entry == kScratchEntry the box of the scratch of `part` on `device`
  // (the receiving device) that contains its region; kOutOfRange naming
  // piece.dst_entry when there is none.
  Box destination_box(const ProcessPart& part, const Piece& piece, int64_t device) const;

  // Internal: used by the planner and the wire decoder.
  struct Builder;

 private:
  friend struct Builder;
  // The box of the scratch that `piece` names on `device`; kOutOfRange
  // naming `field` when `part` holds none containing its region.
  Box scratch_box(const ProcessPart& part, const Piece& piece, int64_t device,
                  const char* field) const;
  std::vector<TensorSpec> tensors_;
  Topology topology_;
  PlanOptions options_;
  PlanStats stats_;
  bool has_stats_ = false;
  uint64_t fingerprint_ = 0;
  std::vector<int32_t> processes_;
  std::map<int32_t, ProcessPart> parts_;
  std::vector<uint64_t> part_digests_;
};

// Validates the inputs (ranks, shapes, dtypes, layouts match each tensor,
// partial ops compatible, source covers what destinations need) and plans.
// Deterministic: equal inputs give equal plans. Throws reshard::Error.
Plan make_plan(const PlanInput& input, const PlanRequest& request = {});

// estimate_plan(input, estimate_request, stats), then `check` (when set)
// with its estimate, which may throw to stop before the part, then
// make_plan(input, part_request): the same plan, planned on the decisions
// and the global statistics of the estimate instead of computing them
// again, where part_request is PlanScope::kProcess with global_stats and
// both requests take the same max_plan_bytes and max_stats_pieces (else
// the two calls). `reshard plan --process P --out F` runs it.
Plan plan_part_after_estimate(const PlanInput& input, const PlanRequest& estimate_request,
                              const PlanRequest& part_request, PlanStats* stats,
                              const std::function<void(const PlanEstimate&)>& check);

// The fingerprint make_plan would give, without planning.
uint64_t plan_fingerprint(const PlanInput& input);

// Reference planner for tests and benchmarks: intersects every source entry
// with every destination entry (the quadratic loop docs/design.md §2.1 avoids)
// and returns the number of non-empty pieces and the network bytes it finds
// using the same source choice.
struct NaivePlanResult {
  int64_t pieces = 0;
  int64_t network_bytes = 0;
};
NaivePlanResult naive_plan(const PlanInput& input);

}  // namespace reshard
