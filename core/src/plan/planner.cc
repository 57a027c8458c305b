// make_plan: validation, per-process parts, global statistics, fingerprint.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "plan/checked.h"
#include "plan/context.h"
#include "plan/each_part.h"
#include "plan/enumerate.h"
#include "plan/estimate.h"
#include "plan/plan_builder.h"
#include "plan/rounds.h"
#include "plan/stats_work.h"
#include "reshard/block_scales.h"
#include "reshard/cast.h"
#include "reshard/error.h"
#include "reshard/wait.h"
#include "util/hash.h"
#include "util/parallel.h"
#include "util/utf8.h"

#if defined(__unix__)
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace reshard {

namespace planning {
namespace {
std::atomic<bool> replay_like_on{true};
std::atomic<size_t> replay_cap{0};  // 0: kReplayPieces
}  // namespace
bool replay_like() { return replay_like_on.load(std::memory_order_relaxed); }
void set_replay_like(bool on) { replay_like_on.store(on, std::memory_order_relaxed); }
size_t replay_pieces_cap() { return replay_cap.load(std::memory_order_relaxed); }
void set_replay_pieces_cap(size_t pieces) { replay_cap.store(pieces, std::memory_order_relaxed); }
}  // namespace planning

using planning::available_memory;
using planning::Context;
using planning::DeviceCounts;
using planning::Emitted;
using planning::entries_on;
using planning::Enumerator;
using planning::estimate_parts;
using planning::kReplayBytes;
using planning::refuse;
using planning::resolve_limit;
using planning::TensorCtx;

namespace {

// Bump when any planning rule changes (2: cut windows; 3: large pieces split
// across the replicas of the destination's process or host too; 4: relays
// for replicated destinations, stages; 5: the holders' hosts share the
// forwarding of relays across hosts, entry parts balanced, the α–β model
// keeps small regions single-hop; 6: relay streams cut into bands, one
// message each, so relays forward band k while band k + 1 arrives; the
// holders' direct fractions water-filled over all cells on the same hosts,
// shares and entry parts cut where their sizes differ least, entry parts'
// rotation by the hosts left above the least loaded; 7: relays across hosts
// cut at element granularity over each cell group — shares, direct and
// entry elements counted along row-major sequences — for regions of at
// least split_min_bytes per receiving host and share; 8: relays and
// reduce-scatter for explicit destination layouts, whose entries with
// equal boxes form a cell; 9: distinct overlapping explicit boxes refined
// into disjoint fragments, each a cell of every entry containing it; 10:
// relays across hosts lay out the regions below that size too, in contiguous
// chunks of at least cross_min_bytes (the lesser of split_min_bytes and the
// reduce-scatter floor), one per receiving host where the holders already
// reach every one, and cut the regions held on several hosts into shares
// water-filled against each host's own volume; 11: relays across hosts also
// where the receiving hosts are no more than the source spans, for a group
// whose single-hop plan would load a holder host above kCrossGain times what
// each receiving host takes in; 12: partial sources
// pre-reduced on the holders' hosts into planner-sized scratch, the gather
// of such parts a stage later; 13: a part's summands on 2 or more holder
// hosts besides the reducer's reduced along a chain of those hosts, scratch
// into scratch, rotated over parts, where the α–β model says the stages it
// adds cost less than the copies it saves into the reducer's host; 14: the
// reduce-scatter's reducers round-robin over the cell's hosts, cells below
// two parts reduced as one part where the α–β model says so, and parts
// fewer than the cell's hosts gathered along a chain or a tree of hosts;
// 15: the gather's offset is the destination cell's largest pre-reduction
// shift, so each entry's reductions end before its gather, whatever
// regions it reduces; fragmented destinations do not pre-reduce; 16: a
// host's gather leaders and pre-reduction owners rotate by the part's rank
// among the parts reduced on other hosts, which spreads them over every
// device of the host where j + rot aliased with the reducer's host; cells
// of one entry rotate owners by cell and start their chains so that each
// owner starts one: a psum in place at the all-reduce's volume on every
// device; relays inside hosts cut regions that do not fall evenly on a
// host's entries at equal slots, each part led by its slot's entry; 17:
// relays across hosts cut each run into a sub-run per entry of the busiest
// host (each at least cross_min_bytes), each led by a different entry,
// unless a staging budget cannot stage the peers that adds; the chunked
// sequence of small regions counts the bytes of every tensor with the same
// layouts, whose chunks share its messages; 18: relays across hosts also
// for groups of like tensors whose single-hop plan loads a holder device
// above kCrossGain times what a receiving device takes in, where that
// lowers the whole plan's α–β estimate, which models the hosts' NICs,
// PlanOptions::nics_per_host; 19: a reduce-scatter with at least as many
// parts as the cell's hosts cuts a whole number of parts per host; 20:
// under a staging budget below the scratch pre-reduction needs, its parts
// are cut into bands written and sent on stage by stage, whose scratch
// reuses bytes two stages apart, and max_scratch_bytes is that placement's
// peak, 8-aligned; 21: rounds are cut with each device's messages and bytes
// of the stream's stage, not of every stage, plan/rounds.h; 22: the
// single-hop guard, Context::decide_single_hop: groups of like tensors
// whose routes make the whole plan slower by its estimate go single-hop,
// and the plan is never slower by it than the single-hop plan; 23: the
// estimate on the fleet simulator's links (a device's intra-host port and
// its NIC group side by side, one α per round, stages overlapping by
// rounds), and the routes' local choices, Enumerator::cross_slower,
// gather_fanout and one_part, on the same model); 24: plans of several
// stages are cut into rounds for pipelining, with or without a staging
// budget (plan/rounds.h, RoundRule), and the estimate counts those rounds;
// 25: the estimate's forward lag; 26: under the device rule, cross_layout
// counts a host's sending devices by what its busiest holder device holds;
// 27: the estimate's stall of a stage behind earlier stages on the links
// they share, by its share of their messages; a pipelined plan numbers its
// forwards' rounds late, RoundRule::round_number; the device rule also lays
// out cells on more receiving hosts than the source spans); 28: relays
// inside a host whose devices hold some of the cell lead blocks of the
// regions that enter the host (Enumerator::lead_block); the estimate's link
// from a later stage's start (what is left of earlier stages then), a banded
// stage's long first round (Acc::send_late) and a drain of 1 + lag rounds
// per later stage (plan/stage_cost.h); 29: a pipelined plan of few pieces
// takes keyed cuts (plan/rounds.h, RoundRule::keys) where the estimate is
// faster for them and the budget allows; relays inside a host cut regions
// into lead parts down to cross_min_bytes a part for groups of like tensors
// where that lowers the whole plan's α–β estimate (TensorCtx::fine_lead,
// Context::decide_lead_cut); 30: a pipelined plan of more pieces than keyed
// cuts are tried on may take up to 64 rounds (kMaxPipelineRounds), where
// the estimate is faster for them than for at most 16; 31: a plan with a
// reduce route whose pipelined rule loses to the unpipelined plan also
// prices keyed cuts on it and takes them where the estimate is faster; 32:
// where every device of the plan shares a NIC group of g >= 2 NICs, relay
// bands of g, 2g, ... times relay_chunk_bytes while the whole plan's
// estimate drops (TensorCtx::band_scale, Context::decide_band_scale); 33:
// a pipelined plan without a staging budget takes spread cuts
// (plan/rounds.h, RoundRule::spread, kSpreadEven even bounds) where the
// estimate is faster for them by more than kSpreadMinGain, the global
// statistics counting them from each stream's pieces; 34: transit relays
// (TensorCtx::transit, Context::decide_transit): a crossing piece into a
// device whose NIC group takes in more than its share of the host's
// crossing bytes is cut, parts entering other devices of the host into a
// copy-staging scratch and forwarded inside the host, where the whole
// plan's estimate drops; 35: a transit donor's excess spread over every
// transit of its host in proportion to its room (transit.cc's fill); 37:
// a keyed pass also prices sub-messages (plan/rounds.h, RoundRule::subs)
// and takes them where the estimate gains more than 5% on plans of at most
// 3 stages; 38: subs priced by following each sub through every link
// (stage_cost's sub_pipeline), on plans of any number of stages; 39: keyed
// cuts shift each tensor's keys by its offset among like tensors
// (plan/rounds.h, KeyOffsets), the device rule (decide_device_cross) is
// tried for sources on one host too, and reduce routes' parts rotate over
// the cells (c m + j; Enumerator::offset_hash within a cell); 40: a cross
// layout's entry runs count the bytes of every like tensor against
// split_min_bytes a run, and its sub-runs against cross_min_bytes, where
// the pieces stay bounded and the estimate agrees (TensorCtx::joint_entry,
// Context::decide_joint_entry); a piece both of whose sides' transit
// shares would overlap takes both, shrunk to fill it; 41: keyed cuts and
// sub-messages are tried on every plan whose pipelined rule was priced
// and lost (not only those with a reduce route), and a plan of several
// moving stages is priced pipelined at 2 rounds at least; 44: a transit
// may be a device of the other layout (a source device of the receiving
// host, a destination device of the sending host; TransitShare::cross);
// 45: a leader of a cell of several entries on its host may pass part of
// what it takes in through transits that forward to it and its mates
// (TransitTable::lead_shares), and the device rule crosses cells a host of
// theirs holds part of (cross_parts); 46: the device rule's yardstick is a
// cell over the fewest entries it has on one host (what a receiving device
// takes in); 47: on cells of unlike hosts, the device rule sums a holder
// device's load over the cells (Enumerator::device_overloaded); 48: a
// group whose cells cross by cross_gate tries crossing off with a transit
// table of its own (TensorCtx::cross_off, Context::decide_transit).
constexpr uint64_t kPlannerVersion = 48;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// A cast (TensorSpec::dst_dtype): a supported pair, neither side partial.
void validate_cast(const TensorSpec& t, const std::string& f) {
  const std::string field = f + ".dst.dtype";
  if (!dtype_valid(static_cast<int32_t>(t.dst_dtype)))
    fail(ErrorCode::kInvalidArgument, field,
         "invalid dtype value " + std::to_string(static_cast<int32_t>(t.dst_dtype)));
  if (t.dst_dtype == t.dtype) return;
  validate_shape(t.shape, dtype_size(t.dst_dtype), f + ".shape");
  if (!cast_supported(t.dtype, t.dst_dtype))
    fail(ErrorCode::kUnsupported, field,
         "no cast from " + std::string(dtype_name(t.dtype)) + " to " +
             std::string(dtype_name(t.dst_dtype)) +
             " (casts are between f32, f16, bf16, f8e4m3 and f8e5m2)");
  if (t.src.partial() || t.dst.partial())
    fail(ErrorCode::kUnsupported, field,
         std::string("a cast needs a source and a destination that are not partial (the ") +
             (t.src.partial() ? "source" : "destination") + " has " +
             std::to_string(t.src.partial() ? t.src.num_summands() : t.dst.num_summands()) +
             " summands)");
}

void validate_tensor(const TensorSpec& t, size_t i) {
  const std::string f = "tensors[" + std::to_string(i) + "]";
  if (!valid_utf8(t.name)) fail(ErrorCode::kInvalidArgument, f + ".name", "not valid UTF-8");
  // C callers see names as NUL-terminated strings: "w\0x" would read as "w".
  if (t.name.find('\0') != std::string::npos)
    fail(ErrorCode::kInvalidArgument, f + ".name", "contains a NUL character");
  if (!dtype_valid(static_cast<int32_t>(t.dtype)))
    fail(ErrorCode::kInvalidArgument, f + ".dtype",
         "invalid dtype value " + std::to_string(static_cast<int32_t>(t.dtype)));
  validate_shape(t.shape, dtype_size(t.dtype), f + ".shape");
  if (t.src.shape() != t.shape)
    fail(ErrorCode::kMismatch, f + ".src",
         "layout shape " + shape_str(t.src.shape()) + " does not match tensor shape " +
             shape_str(t.shape));
  if (t.dst.shape() != t.shape)
    fail(ErrorCode::kMismatch, f + ".dst",
         "layout shape " + shape_str(t.dst.shape()) + " does not match tensor shape " +
             shape_str(t.shape));
  if (t.dst.partial() && t.dst.reduce_op() == ReduceOp::kMean)
    fail(ErrorCode::kInvalidArgument, f + ".dst.partial.op",
         "\"mean\" is supported on sources only (a partial destination's summands combine with "
         "sum, max or min)");
  if (t.src.partial() && t.src.reduce_op() == ReduceOp::kMean && !dtype_is_float(t.dtype))
    fail(ErrorCode::kInvalidArgument, f + ".src.partial.op",
         "\"mean\" needs a floating-point dtype, not " + std::string(dtype_name(t.dtype)));
  if (t.src.partial() && t.dst.partial() && t.src.reduce_op() != t.dst.reduce_op())
    fail(ErrorCode::kMismatch, f + ".dst.partial.op",
         "\"" + std::string(reduce_op_name(t.dst.reduce_op())) + "\" differs from the source's \"" +
             std::string(reduce_op_name(t.src.reduce_op())) + "\"");
  if (t.src.num_entries() == 0 && t.dst.num_entries() > 0 && t.src.num_elements() > 0)
    fail(ErrorCode::kInvalidArgument, f + ".src", "layout has no devices");
  if (t.dst_dtype != DType{}) validate_cast(t, f);
}

uint64_t fingerprint_of(const PlanInput& in) {
  Hasher h;
  h.str("reshard-plan");
  h.u64(kPlannerVersion);
  h.u64(in.tensors.size());
  for (const auto& t : in.tensors) {
    h.str(t.name);
    h.u64(t.shape.size());
    for (int64_t s : t.shape) h.i64(s);
    h.i64(static_cast<int64_t>(t.dtype));
    // Plans without casts keep their fingerprints.
    if (has_cast(t)) {
      h.str("cast");
      h.i64(static_cast<int64_t>(t.dst_dtype));
    }
    // Plans without block scales keep their fingerprints.
    if (has_block_scales(t)) {
      h.str("scales");
      h.i64(t.scale_tensor);
      for (int64_t b : t.scale_block) h.i64(b);
    }
    h.u64(t.src.fingerprint_hash());
    h.u64(t.dst.fingerprint_hash());
  }
  h.u64(in.topology.devices().size());
  for (const auto& d : in.topology.devices()) {
    h.i64(d.device);
    h.i64(d.process);
    h.i64(d.host);
    h.i64(d.ordinal);
  }
  const auto& o = in.options;
  h.i64(o.split_min_bytes);
  h.f64(o.alpha_seconds);
  h.f64(o.intra_host_bytes_per_second);
  h.f64(o.inter_host_bytes_per_second);
  h.i64(o.staging_budget_bytes);
  h.u64(o.relays ? 1 : 0);
  h.u64(o.reduce_scatter ? 1 : 0);
  h.i64(o.nics_per_host);
  h.u64(o.single_hop_guard ? 1 : 0);
  return h.value();
}

// ------------------------------------------------------------- process part

// Collects the pieces of one direction (sends or receives) of a range of
// tensors of a part, each tagged with its message's bucket, keeping
// generation order (tensor-major, canonical within a tensor) inside each
// bucket, and, when `sized` (round cutting needs them), each piece's size.
// The pieces are appended in generation order and placed by bucket once,
// in merge(): a vector per bucket wrote each piece into one of thousands of
// growing vectors (a cache miss and, as it doubled, copies) and then copied
// it again.
class MessageBuckets {
 public:
  MessageBuckets(size_t ndev, bool sized) : ndev_(ndev), sized_(sized) {}

  // The bucket slots of one own device, stage and band, indexed by peer: a dense
  // row over all devices while the rows fit kDenseCells, else a hash map
  // (a process owning 30,000 devices of a 30,000-device plan would
  // otherwise need 3.6 GB of rows that are almost all empty).
  struct Table {
    uint32_t* dense = nullptr;
    uint32_t id = kNone;
    explicit operator bool() const { return id != kNone; }
  };
  static constexpr size_t kDenseCells = planning::kDenseBucketCells;

  // Slot table for one own device, stage and band (relay chunk,
  // enumerate/types.h); call once per own entry, stage and band, then add().
  Table table_for(uint32_t own_dense, uint32_t stage = 0, uint32_t band = 0) {
    auto [it, fresh] = own_.emplace(uint64_t{stage} << 40 | uint64_t{band} << 32 | own_dense,
                                    static_cast<uint32_t>(tables_.size()));
    if (fresh) {
      const bool dense = (tables_.size() + 1) * ndev_ <= kDenseCells;
      tables_.emplace_back(dense ? ndev_ : 0, kNone);
    }
    std::vector<uint32_t>& row = tables_[it->second];
    return {row.empty() ? nullptr : row.data(), it->second};
  }
  void add(Table table, uint32_t own_dense, uint32_t peer_dense, const Piece& piece, int64_t bytes,
           uint32_t stage = 0, uint32_t band = 0) {
    uint32_t& slot =
        table.dense
            ? table.dense[peer_dense]
            : sparse_.try_emplace(uint64_t{table.id} << 32 | peer_dense, kNone).first->second;
    if (slot == kNone) {
      slot = static_cast<uint32_t>(keys_.size());
      keys_.push_back((uint64_t{stage} << 48) | (uint64_t{peer_dense} << 28) |
                      (uint64_t{own_dense} << 8) | band);
      bytes_.push_back(0);
      counts_.push_back(0);
    }
    pieces_.push_back(piece);
    slots_.push_back(slot);
    if (sized_) sizes_.push_back(bytes);
    bytes_[slot] += bytes;
    ++counts_[slot];
  }

  // Merges the buckets of consecutive tensor ranges (chunks[0] holding the
  // first tensors) into messages sorted by key — (stage, peer, own, band),
  // a message's `round` its band (order_bands / split_rounds number the
  // rounds) — each message's pieces chunk
  // by chunk, so the result does not depend on how the tensors were cut into
  // chunks. A chunk's region indices are local to it: region_base[c] is
  // added to those of chunk c. The chunks are placed on `threads` threads.
  static void merge(const std::vector<const MessageBuckets*>& chunks,
                    const std::vector<uint32_t>& region_base, int threads,
                    std::vector<Piece>& pieces, std::vector<int64_t>& piece_bytes,
                    std::vector<Message>& msgs, bool send, const std::vector<int64_t>& devices) {
    struct Src {
      uint64_t key;
      uint32_t chunk, slot;
    };
    std::vector<Src> srcs;
    size_t nsrcs = 0;
    for (const MessageBuckets* c : chunks) nsrcs += c->keys_.size();
    srcs.reserve(nsrcs);
    for (uint32_t c = 0; c < chunks.size(); ++c)
      for (uint32_t i = 0; i < chunks[c]->keys_.size(); ++i)
        srcs.push_back({chunks[c]->keys_[i], c, i});
    std::sort(srcs.begin(), srcs.end(), [](const Src& a, const Src& b) {
      return a.key != b.key ? a.key < b.key : a.chunk < b.chunk;
    });
    const bool sized = !chunks.empty() && chunks.front()->sized_;
    // Where each chunk's buckets begin in the output.
    std::vector<std::vector<uint64_t>> cursor(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) cursor[c].resize(chunks[c]->keys_.size());
    uint64_t total = 0;
    msgs.clear();
    msgs.reserve(chunks.size() == 1 ? srcs.size() : 0);
    for (size_t k = 0; k < srcs.size(); ++k) {
      const MessageBuckets& b = *chunks[srcs[k].chunk];
      cursor[srcs[k].chunk][srcs[k].slot] = total;
      // key = (stage << 48) | (peer dense << 28) | (own dense << 8) | band;
      // both dense indices < 2^20, bands < 2^8.
      const uint64_t key = srcs[k].key;
      if (msgs.empty() || k == 0 || srcs[k - 1].key != key) {
        Message& m = msgs.emplace_back();
        m.stage = static_cast<uint32_t>(key >> 48);
        m.round = static_cast<uint32_t>(key & 0xff);
        const int64_t peer = devices[(key >> 28) & 0xfffff];
        const int64_t own = devices[(key >> 8) & 0xfffff];
        m.src_device = send ? own : peer;
        m.dst_device = send ? peer : own;
        m.first_piece = total;
      }
      msgs.back().num_pieces += b.counts_[srcs[k].slot];
      msgs.back().bytes += b.bytes_[srcs[k].slot];
      total += b.counts_[srcs[k].slot];
    }
    pieces.clear();
    piece_bytes.clear();
    grow_to(pieces, total, threads);
    if (sized) grow_to(piece_bytes, total, threads);
    // Chunk c's pieces, region indices rebased, each to its bucket's next
    // place (the chunks' buckets fill disjoint ranges).
    parallel_for(threads, chunks.size(), [&](size_t c) {
      const MessageBuckets& b = *chunks[c];
      const uint32_t base = region_base[c];
      std::vector<uint64_t>& at = cursor[c];
      for (size_t i = 0; i < b.pieces_.size(); ++i) {
        const uint64_t to = at[b.slots_[i]]++;
        Piece& out = pieces[to];
        out = b.pieces_[i];
        if (out.region != kOverlapRegion) out.region += base;
        if (sized) piece_bytes[to] = b.sizes_[i];
      }
    });
  }

 private:
  static constexpr uint32_t kNone = 0xffffffffu;
  size_t ndev_;
  bool sized_;
  std::unordered_map<uint64_t, uint32_t> own_;
  std::vector<std::vector<uint32_t>> tables_;      // dense rows (empty: sparse_)
  std::unordered_map<uint64_t, uint32_t> sparse_;  // table id << 32 | peer -> slot
  // Per piece, in generation order: the piece, its bucket and (sized_) size.
  std::vector<Piece> pieces_;
  std::vector<uint32_t> slots_;
  std::vector<int64_t> sizes_;
  // Per bucket: its key, bytes and number of pieces.
  std::vector<uint64_t> keys_;
  std::vector<int64_t> bytes_;
  std::vector<uint64_t> counts_;
};

constexpr size_t kReplayPieces = kReplayBytes / sizeof(Emitted);

// A process part before round cutting, with each network piece's size.
struct BuiltPart {
  ProcessPart part;
  // Parallel to send_pieces / recv_pieces; empty where rounds are not cut.
  std::vector<int64_t> send_bytes, recv_bytes;
};

// The pieces of process p for tensors [t0, t1), in generation order; region
// indices are local to the chunk.
struct PartChunk {
  std::vector<Piece> local;
  std::vector<Scratch> scratch;
  Regions regions;
  MessageBuckets sends, recvs;
  PartChunk(size_t ndev, bool sized) : sends(ndev, sized), recvs(ndev, sized) {}
};

void build_chunk(Context& ctx, int32_t p, const PlanOptions& options, size_t t0, size_t t1,
                 PartChunk& out) {
  Enumerator en(options, ctx.pre_reduce, ctx.relay_split);
  // Pre-reduction pieces (Emitted::scratch) of the tensor, from both loops:
  // added after the tensor's other pieces, sorted, so that the two ends of a
  // message, which meet them in different loops, list them alike.
  struct Deferred {
    int kind;  // 0: send, 1: receive, 2: local
    uint32_t own, peer;
    Emitted x;
  };
  std::vector<Deferred> deferred;
  // Like tensors emit like pieces: the enumeration reads a tensor's
  // geometries, shape, element size and the reduction and crossing
  // decisions (made per group of like tensors), never its index, and
  // depends on no earlier call. So of the tensors of the range alike in all
  // of those (405B: 1,137 tensors, a few kinds), the first records every
  // call's pieces and the others replay them (set_replay_like(false):
  // each enumerates, what the tests compare with).
  using LikeKey =
      std::tuple<const Geometry*, const Geometry*, std::vector<int64_t>, int64_t, uint8_t, bool,
                 uint32_t, bool, bool, const planning::TransitTable*, bool>;
  struct Recording {
    std::vector<Emitted> pieces;
    std::vector<size_t> ends;    // per call, in call order
    size_t total = 0, left = 0;  // tensors of the kind in the range, and still to come
    bool recorded = false;
    bool abandoned = false;  // past kReplayBytes: its tensors enumerate
  };
  size_t recorded_pieces = 0;  // in every live recording of the range
  const size_t cap =
      planning::replay_pieces_cap() > 0 ? planning::replay_pieces_cap() : kReplayPieces;
  std::map<LikeKey, size_t> kinds;
  std::vector<Recording> recordings;
  std::vector<size_t> kind_of;
  if (planning::replay_like() && t1 - t0 >= 2) {
    kind_of.resize(t1 - t0);
    for (size_t ti = t0; ti < t1; ++ti) {
      const TensorCtx& t = ctx.tensors[ti];
      const auto [it, fresh] = kinds.try_emplace(
          LikeKey(t.sg, t.dg, t.src->shape(), t.esize, t.reduce, t.device_cross, t.reduce_bands,
                  t.single_hop, t.fine_lead, t.transit, t.cross_off),
          recordings.size());
      if (fresh) recordings.emplace_back();
      ++recordings[it->second].total;
      ++recordings[it->second].left;
      kind_of[ti - t0] = it->second;
    }
  }
  Recording* rec = nullptr;  // the current tensor's, when it has like ones
  bool replaying = false;
  size_t call = 0, at = 0;
  auto stream = [&](auto&& enumerate, auto&& f) {
    if (rec == nullptr) {
      enumerate(f);
    } else if (replaying) {
      for (const size_t end = rec->ends[call++]; at < end; ++at) f(rec->pieces[at]);
    } else {
      enumerate([&](const Emitted& x) {
        if (!rec->abandoned) {
          if (recorded_pieces < cap) {
            rec->pieces.push_back(x);
            ++recorded_pieces;
          } else {  // too large to keep: this kind enumerates every tensor
            recorded_pieces -= rec->pieces.size();
            rec->abandoned = true;
            rec->pieces = {};
            rec->ends = {};
          }
        }
        f(x);
      });
      if (!rec->abandoned) rec->ends.push_back(rec->pieces.size());
    }
  };
  auto add_region = [&](const TensorCtx& t, const Emitted& x, Piece& piece) {
    if (!x.own_region) return;
    if (x.region == intersect(t.src->box(x.src_entry), t.dst->box(x.dst_entry))) return;
    piece.region = static_cast<uint32_t>(out.regions.size());
    out.regions.push_back(x.region);
  };
  // Slot tables per (stage, band), fetched when first needed; as many
  // stages as the pieces name.
  constexpr size_t kBands = static_cast<size_t>(planning::kRelayBands);
  std::vector<std::array<MessageBuckets::Table, kBands>> tables;
  for (size_t ti = t0; ti < t1; ++ti) {
    const TensorCtx& t = ctx.tensors[ti];
    rec = nullptr;
    if (!kind_of.empty() && recordings[kind_of[ti - t0]].total >= 2 &&
        !recordings[kind_of[ti - t0]].abandoned) {
      rec = &recordings[kind_of[ti - t0]];
      replaying = rec->recorded;
      call = at = 0;
    }
    // Receiver side: every piece whose destination is on p.
    auto [db, de] = entries_on(*t.dt, p);
    auto table_of = [&](MessageBuckets& b, uint32_t own, uint32_t stage, uint32_t band) {
      if (tables.size() <= stage) tables.resize(stage + 1);
      MessageBuckets::Table& tb = tables[stage][band];
      if (!tb) tb = b.table_for(own, stage, band);
      return tb;
    };
    auto reset = [&] {
      for (auto& row : tables)
        for (auto& tb : row) tb = {};
    };
    // A transit piece on device `own`: into its scratch (`into`: 4 on the
    // receiving side, 6 on the sending side), received from the holder and
    // kept as the part's scratch, or out of it (into + 1), sent on.
    auto transit_piece = [&](uint32_t own, const Emitted& x, uint8_t into) {
      if (x.scratch == into) {
        deferred.push_back({1, own, t.st->dense[x.src_entry], x});
        out.scratch.push_back({t.index, ctx.devices[own], x.region});
      } else {
        deferred.push_back({0, own, t.dt->dense[x.dst_entry], x});
      }
    };
    for (const uint32_t* it = db; it != de; ++it) {
      const uint32_t own = t.dt->dense[*it];
      reset();
      const auto table = out.recvs.table_for(own);  // stage 0, band 0: most pieces
      stream([&](auto&& g) { en.recv(t, *it, g); },
             [&](const Emitted& x) {
               if (x.scratch == 1 || x.scratch == 3 || x.scratch == 4 || x.scratch == 6)
                 return;              // into a holder's or a transit's scratch: its process's
               if (x.scratch == 5) {  // from a transit's scratch
                 deferred.push_back({1, own, t.dt->dense[x.src_entry], x});
                 return;
               }
               if (x.scratch == 2 || x.scratch == 7) {
                 // A holder host's scratch, reduced, or a sending-side
                 // transit's scratch: from its source entry's device.
                 deferred.push_back({1, own, t.st->dense[x.src_entry], x});
                 return;
               }
               Piece piece{t.index, x.src_entry, x.dst_entry, kOverlapRegion};
               if (x.relay()) {  // a later stage, from a relay's destination buffer
                 piece.region = static_cast<uint32_t>(out.regions.size());
                 out.regions.push_back(x.region);
                 out.recvs.add(table_of(out.recvs, own, x.stage, x.band), own,
                               t.dt->dense[x.src_entry], piece, x.region.volume() * t.esize,
                               x.stage, x.band);
                 return;
               }
               add_region(t, x, piece);
               if (x.local)
                 out.local.push_back(piece);
               else if (x.band == 0)
                 out.recvs.add(table, own, t.st->dense[x.src_entry], piece,
                               x.region.volume() * t.esize);
               else
                 out.recvs.add(table_of(out.recvs, own, 0, x.band), own, t.st->dense[x.src_entry],
                               piece, x.region.volume() * t.esize, 0, x.band);
             });
      // Relay side: what this destination entry forwards in later stages.
      reset();
      stream([&](auto&& g) { en.forward(t, *it, g); },
             [&](const Emitted& x) {
               Piece piece{t.index, x.src_entry, x.dst_entry,
                           static_cast<uint32_t>(out.regions.size())};
               out.regions.push_back(x.region);
               out.sends.add(table_of(out.sends, own, x.stage, x.band), own,
                             t.dt->dense[x.dst_entry], piece, x.region.volume() * t.esize, x.stage,
                             x.band);
             });
      // Transit side: what this destination entry's device takes into its
      // scratch and forwards from it for other entries of its host.
      en.transit_in(t, *it, [&](const Emitted& x) { transit_piece(own, x, 4); });
    }
    // Sender side: network pieces whose source is on p.
    auto [sb, se] = entries_on(*t.st, p);
    for (const uint32_t* it = sb; it != se; ++it) {
      const uint32_t own = t.st->dense[*it];
      reset();
      const auto table = out.sends.table_for(own);
      stream([&](auto&& g) { en.send(t, *it, g); },
             [&](const Emitted& x) {
               if (x.scratch == 1) {  // a summand into a scratch: this entry's or another's
                 if (x.local) {
                   if (x.dst_entry == *it)
                     deferred.push_back({2, own, own, x});  // once, by its owner
                 } else if (x.src_entry == *it)
                   deferred.push_back({0, own, t.st->dense[x.dst_entry], x});
                 else
                   deferred.push_back({1, own, t.st->dense[x.src_entry], x});
                 return;
               }
               if (x.scratch == 3) {  // a chain's link: from this entry's scratch or into it
                 if (x.src_entry == *it) {
                   deferred.push_back({0, own, t.st->dense[x.dst_entry], x});
                   out.scratch.push_back({t.index, ctx.devices[own], x.region});
                 } else {
                   deferred.push_back({1, own, t.st->dense[x.src_entry], x});
                 }
                 return;
               }
               if (x.scratch == 4) {  // into a transit's scratch
                 deferred.push_back({0, own, t.dt->dense[x.dst_entry], x});
                 return;
               }
               if (x.scratch == 6) {  // into a sending-side transit's scratch
                 deferred.push_back({0, own, t.st->dense[x.dst_entry], x});
                 return;
               }
               if (x.scratch == 2) {  // this entry's scratch to the part's reducer
                 deferred.push_back({0, own, t.dt->dense[x.dst_entry], x});
                 out.scratch.push_back({t.index, ctx.devices[own], x.region});
                 return;
               }
               Piece piece{t.index, x.src_entry, x.dst_entry, kOverlapRegion};
               add_region(t, x, piece);
               if (x.band == 0)
                 out.sends.add(table, own, t.dt->dense[x.dst_entry], piece,
                               x.region.volume() * t.esize);
               else
                 out.sends.add(table_of(out.sends, own, 0, x.band), own, t.dt->dense[x.dst_entry],
                               piece, x.region.volume() * t.esize, 0, x.band);
             });
    }
    // Sending-side transit: what this source entry's device takes into its
    // scratch and sends out from it for other source entries of its host.
    for (const uint32_t* it = sb; it != se; ++it) {
      const uint32_t own = t.st->dense[*it];
      en.send_transit_in(t, *it, [&](const Emitted& x) { transit_piece(own, x, 6); });
      // And what it takes in from other hosts for destination entries of
      // its own host (a receiving-side transit on a source device).
      en.cross_transit_in(t, *it, [&](const Emitted& x) { transit_piece(own, x, 6); });
    }
    if (!kind_of.empty()) {
      Recording& r = recordings[kind_of[ti - t0]];
      r.recorded = !r.abandoned;
      if (--r.left == 0) {  // the last of its kind: free its pieces
        recorded_pieces -= r.pieces.size();
        r.pieces = {};
        r.ends = {};
      }
    }
    if (deferred.empty()) continue;
    std::sort(deferred.begin(), deferred.end(), [](const Deferred& a, const Deferred& b) {
      const Emitted &x = a.x, &y = b.x;
      if (x.stage != y.stage) return x.stage < y.stage;
      for (int d = 0; d < x.region.rank; ++d)
        if (x.region.lo[d] != y.region.lo[d]) return x.region.lo[d] < y.region.lo[d];
      if (x.src_entry != y.src_entry) return x.src_entry < y.src_entry;
      if (x.dst_entry != y.dst_entry) return x.dst_entry < y.dst_entry;
      return a.kind < b.kind;
    });
    for (const Deferred& d : deferred) {
      const Emitted& x = d.x;
      const bool reads_scratch =
          x.scratch == 2 || x.scratch == 3 || x.scratch == 5 || x.scratch == 7;
      const bool writes_scratch =
          x.scratch == 1 || x.scratch == 3 || x.scratch == 4 || x.scratch == 6;
      Piece piece{t.index, reads_scratch ? kScratchEntry : x.src_entry,
                  writes_scratch ? kScratchEntry : x.dst_entry,
                  static_cast<uint32_t>(out.regions.size())};
      out.regions.push_back(x.region);
      const int64_t bytes = x.region.volume() * t.esize;
      if (d.kind == 2)
        out.local.push_back(piece);
      else if (d.kind == 0)
        out.sends.add(out.sends.table_for(d.own, x.stage, x.band), d.own, d.peer, piece, bytes,
                      x.stage, x.band);
      else
        out.recvs.add(out.recvs.table_for(d.own, x.stage, x.band), d.own, d.peer, piece, bytes,
                      x.stage, x.band);
    }
    deferred.clear();
  }
}

// Process p's part. With several threads the tensors are cut into ranges
// enumerated concurrently, each into its own buffers, which are then
// concatenated in tensor order: the part is the same for any thread count.
BuiltPart build_part(Context& ctx, int32_t p, const PlanOptions& options, bool sized, int threads) {
  static_assert(kMaxDevices < (1 << 20), "devices are indexed densely in 20 bits");
  BuiltPart built;
  ProcessPart& part = built.part;
  part.process = p;
  // Several ranges per thread: tensors differ in work, and a thread that
  // finishes early takes the next range.
  const std::vector<size_t> ranges =
      even_ranges(ctx.tensors.size(), threads > 1 ? 8 * static_cast<size_t>(threads) : 1);
  std::vector<PartChunk> chunks;
  chunks.reserve(ranges.size() - 1);
  for (size_t c = 0; c + 1 < ranges.size(); ++c) chunks.emplace_back(ctx.devices.size(), sized);
  parallel_for(threads, chunks.size(), [&](size_t c) {
    build_chunk(ctx, p, options, ranges[c], ranges[c + 1], chunks[c]);
  });
  std::vector<uint32_t> region_base(chunks.size());
  size_t nregions = 0, nlocal = 0;
  int stride = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    region_base[c] = static_cast<uint32_t>(nregions);
    nregions += chunks[c].regions.size();
    nlocal += chunks[c].local.size();
    stride = std::max(stride, chunks[c].regions.stride());
  }
  if (nregions >= kOverlapRegion) fail(ErrorCode::kOutOfRange, "plan: more than 2^32 regions");
  // The first chunk's buffers become the part's (its region base is 0).
  part.regions = std::move(chunks.front().regions);
  part.local = std::move(chunks.front().local);
  for (const PartChunk& c : chunks)
    part.scratch.insert(part.scratch.end(), c.scratch.begin(), c.scratch.end());
  std::sort(part.scratch.begin(), part.scratch.end(), [](const Scratch& a, const Scratch& b) {
    if (a.tensor != b.tensor) return a.tensor < b.tensor;
    if (a.device != b.device) return a.device < b.device;
    return std::lexicographical_compare(a.box.lo.begin(), a.box.lo.begin() + a.box.rank,
                                        b.box.lo.begin(), b.box.lo.begin() + b.box.rank);
  });
  part.regions.reserve(nregions, stride);
  part.local.reserve(nlocal);
  std::vector<const MessageBuckets*> sends, recvs;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (c > 0) {
      part.regions.append(chunks[c].regions);
      chunks[c].regions = {};
      for (Piece piece : chunks[c].local) {
        if (piece.region != kOverlapRegion) piece.region += region_base[c];
        part.local.push_back(piece);
      }
    }
    sends.push_back(&chunks[c].sends);
    recvs.push_back(&chunks[c].recvs);
  }
  MessageBuckets::merge(sends, region_base, threads, part.send_pieces, built.send_bytes, part.sends,
                        true, ctx.devices);
  MessageBuckets::merge(recvs, region_base, threads, part.recv_pieces, built.recv_bytes, part.recvs,
                        false, ctx.devices);
  return built;
}

}  // namespace

// ------------------------------------------------------------- public

std::string_view bound_kind_name(BoundKind kind) noexcept {
  switch (kind) {
    case BoundKind::kNone:
      return "none";
    case BoundKind::kDeviceRecv:
      return "device receive";
    case BoundKind::kDeviceSend:
      return "device send";
    case BoundKind::kHostRecv:
      return "host receive";
    case BoundKind::kHostSend:
      return "host send";
  }
  return "unknown";
}

uint64_t plan_fingerprint(const PlanInput& input) { return fingerprint_of(input); }

namespace {

// The checks make_plan and estimate_plan share; returns the threads.
int validate_request(const PlanInput& input, const PlanRequest& request) {
  validate(input.options);
  if (input.tensors.size() >= 0xfffffff0u)
    fail(ErrorCode::kOutOfRange, "tensors", "too many tensors");
  {
    std::unordered_map<std::string_view, size_t> names;
    for (size_t i = 0; i < input.tensors.size(); ++i) {
      validate_tensor(input.tensors[i], i);
      auto [it, fresh] = names.emplace(input.tensors[i].name, i);
      if (!fresh)
        fail(ErrorCode::kInvalidArgument, "tensors[" + std::to_string(i) + "].name",
             "duplicate name \"" + input.tensors[i].name + "\" (also tensors[" +
                 std::to_string(it->second) + "])");
    }
    validate_block_scales(input.tensors, ErrorCode::kInvalidArgument);
  }
  if (request.scope != PlanScope::kAll && request.scope != PlanScope::kGlobal &&
      request.scope != PlanScope::kProcess)
    fail(ErrorCode::kInvalidArgument, "request.scope", "invalid value");
  if (request.threads < 0)
    fail(ErrorCode::kInvalidArgument, "request.threads",
         std::to_string(request.threads) + " is negative");
  if (request.max_stats_pieces < -1)
    fail(ErrorCode::kInvalidArgument, "request.max_stats_pieces",
         std::to_string(request.max_stats_pieces) + " is below -1 (-1: no limit)");
  return resolve_threads(request.threads);
}

// request.max_stats_pieces resolved (Context::max_stats_pieces): -1 where
// nothing is checked (also with no memory limit: no estimate).
int64_t stats_piece_limit(const PlanRequest& request) {
  if (request.max_plan_bytes == kUnlimitedPlanBytes || request.max_stats_pieces == -1) return -1;
  return request.max_stats_pieces == 0 ? kDefaultMaxStatsPieces : request.max_stats_pieces;
}

}  // namespace

int64_t default_max_plan_bytes() { return available_memory() / 2; }

PlanEstimate estimate_plan(const PlanInput& input, const PlanRequest& request) {
  return estimate_plan(input, request, nullptr);
}

namespace {

// Context::build and the deciders before the global statistics (make_plan
// and estimate_plan alike).
void build_and_decide(Context& ctx, const PlanRequest& request, int64_t limit) {
  ctx.max_stats_pieces = stats_piece_limit(request);
  ctx.build();
  planning::check_stats_work(ctx, limit);
  ctx.decide_pre_reduce(limit);
  ctx.decide_reductions(limit);
  ctx.decide_device_cross(limit);
  ctx.decide_lead_cut(limit);
  ctx.decide_transit(limit);
  ctx.decide_band_scale(limit);
  ctx.decide_joint_entry(limit);
}

// estimate_plan on a context built and decided (build_and_decide); leaves
// it with every decision made and its last whole pass kept
// (Context::scheduled_stats).
PlanEstimate estimate_decided(Context& ctx, const PlanRequest& request, int threads, int64_t limit,
                              PlanStats* stats, WaitClock::time_point t0) {
  PlanStats own;
  PlanStats& st = stats ? *stats : own;
  std::vector<DeviceCounts> counts;
  planning::RoundRule rule;
  const bool want_stats = request.scope != PlanScope::kProcess || request.global_stats;
  auto global = [&](planning::GuardStop* stop) {
    st = PlanStats{};
    counts.clear();
    if (want_stats)
      ctx.scheduled_stats(st, limit, &counts, nullptr, &rule, stop);
    else
      planning::compute_stats(ctx, st, ctx.staging_options(), false, &counts, limit, false, nullptr,
                              &rule, stop);
  };
  // The routed statistics stop early where the guard rejects them
  // (planning::GuardStop); it then changes the plan, and they are computed
  // again.
  std::optional<planning::GuardStop> stop = ctx.guard_stop(limit);
  global(stop ? &*stop : nullptr);
  if (ctx.decide_single_hop(limit, &st))
    global(nullptr);
  else if (stop && stop->stopped)
    fail(ErrorCode::kInternal, "statistics: the single-hop guard kept a pass it stopped");
  PlanEstimate e = estimate_parts(ctx, counts, request, threads, rule.cuts());
  e.limit_bytes = limit;
  e.available_bytes = available_memory();
  st.plan_seconds = seconds_since(t0);
  return e;
}

// estimate_plan on `ctx` (a Context of the input, not yet built), which it
// leaves as estimate_decided does.
PlanEstimate estimate_on(Context& ctx, const PlanInput& input, const PlanRequest& request,
                         PlanStats* stats) {
  const auto t0 = WaitClock::now();
  const int threads = validate_request(input, request);
  const int64_t limit = resolve_limit(request.max_plan_bytes);
  build_and_decide(ctx, request, limit);
  return estimate_decided(ctx, request, threads, limit, stats, t0);
}

}  // namespace

PlanEstimate estimate_plan(const PlanInput& input, const PlanRequest& request, PlanStats* stats) {
  Context ctx(input);
  return estimate_on(ctx, input, request, stats);
}

namespace {

// make_plan, or with `sink` (scope kAll) every part handed to sink->each one
// batch at a time (plan_each_part). With `decided`, on that context as
// estimate_decided left it (its decisions and its last whole pass, which
// the global statistics below take instead of computing them again; the
// single-hop guard has decided).
Plan make_plan_impl(const PlanInput& input, const PlanRequest& request,
                    const planning::PartSink* sink, Context* decided = nullptr) {
  const auto t0 = WaitClock::now();
  const int threads = validate_request(input, request);
  const int64_t limit = resolve_limit(request.max_plan_bytes);
  // Parts are what can outgrow memory; the statistics alone never do.
  const bool guarded = limit != kUnlimitedPlanBytes && request.scope != PlanScope::kGlobal;
  std::optional<Context> own;
  Context& ctx = decided ? *decided : own.emplace(input);
  if (!decided) build_and_decide(ctx, request, limit);
  Plan plan;
  Plan::Builder::tensors(plan) = input.tensors;
  Plan::Builder::topology(plan) = input.topology;
  Plan::Builder::options(plan) = input.options;
  Plan::Builder::fingerprint(plan) = fingerprint_of(input);
  Plan::Builder::processes(plan) = ctx.processes;
  auto& parts = Plan::Builder::parts(plan);
  const bool budgeted = input.options.staging_budget_bytes > 0;
  // Cutting streams into rounds needs every device's peer count, which the
  // global statistics provide; so does the memory estimate.
  const bool want_stats = request.scope != PlanScope::kProcess || request.global_stats;
  // Each device's messages and bytes per stage, which round cutting needs.
  std::vector<planning::DeviceLoad> stage_loads;
  std::vector<DeviceCounts> counts;
  // How rounds are cut (a staging budget, pipelined stages: rounds.h).
  planning::RoundRule rule;
  auto global = [&](planning::GuardStop* stop) {
    Plan::Builder::stats(plan) = PlanStats{};
    stage_loads.clear();
    counts.clear();
    if (want_stats)
      ctx.scheduled_stats(Plan::Builder::stats(plan), limit, guarded ? &counts : nullptr,
                          &stage_loads, &rule, stop);
    else
      planning::compute_stats(ctx, Plan::Builder::stats(plan), ctx.staging_options(), false,
                              guarded ? &counts : nullptr, limit, false, &stage_loads, &rule, stop);
  };
  // The single-hop guard weighs the routed plan's statistics where they
  // are computed anyway (and its own estimate where not); the statistics
  // follow its choice. A plan that may relay or reduce in stages needs them
  // too: its stages are pipelined by the global figures (rounds.h).
  const bool staged = input.options.relays || input.options.reduce_scatter;
  const bool with_stats = budgeted || want_stats || guarded || staged;
  // The routed statistics stop early where the guard rejects them
  // (planning::GuardStop); it then changes the plan, and they are computed
  // again.
  std::optional<planning::GuardStop> stop;
  if (with_stats && !decided) stop = ctx.guard_stop(limit);
  int64_t sink_batch_bytes = 0;
  if (with_stats) global(stop ? &*stop : nullptr);
  const bool changed =
      !decided && ctx.decide_single_hop(limit, with_stats ? &Plan::Builder::stats(plan) : nullptr);
  // The parts read the device rule of every tensor with a route.
  ctx.settle_device_cross(limit);
  if (changed && with_stats) global(nullptr);
  if (!changed && stop && stop->stopped)
    fail(ErrorCode::kInternal, "statistics: the single-hop guard kept a pass it stopped");
  // Rounds are cut at the budget less what scratch may hold (Context's
  // staging_options, which the rule's budget comes from).
  if (with_stats) {
    Plan::Builder::has_stats(plan) = want_stats;
    if (guarded) {
      int64_t largest = 0;
      PlanEstimate e = estimate_parts(ctx, counts, request, threads, rule.cuts(), &largest);
      // Streamed, the parts of one batch at a time (one per thread), which
      // the sink weighs with its own memory.
      if (sink)
        sink_batch_bytes =
            largest * static_cast<int64_t>(planning::part_batch(threads, ctx.processes.size()));
      else if (e.memory_bytes > limit) {
        e.limit_bytes = limit;
        e.available_bytes = available_memory();
        refuse(e, request, largest);
      }
    }
  }
  const size_t ndev = ctx.devices.size();
  auto load = [&](int64_t device, uint32_t stage) -> planning::DeviceLoad {
    const size_t d = ctx.dense(device);
    const size_t at = static_cast<size_t>(stage) * ndev + d;
    if (d >= ndev || ctx.devices[d] != device || at >= stage_loads.size()) return {};
    return stage_loads[at];
  };
  const int64_t nparts = request.scope == PlanScope::kAll
                             ? static_cast<int64_t>(ctx.processes.size())
                         : request.scope == PlanScope::kProcess ? 1
                                                                : 0;
  std::mutex progress_mutex;
  int64_t parts_done = 0;
  const std::vector<uint32_t> ranks =
      rule.pipeline.empty() ? std::vector<uint32_t>{} : planning::pipeline_ranks(input.tensors);
  auto make_part = [&](int32_t p, int part_threads) {
    BuiltPart built = build_part(ctx, p, input.options, rule.cuts(), part_threads);
    if (!rule.pipeline.empty())
      planning::order_pieces(built.part, ranks, built.send_bytes, built.recv_bytes);
    if (rule.cuts())
      planning::split_rounds(built.part, input.tensors, rule, built.send_bytes, built.recv_bytes,
                             load, part_threads);
    else
      planning::number_band_rounds(built.part);
    if (request.progress) {
      std::lock_guard<std::mutex> lock(progress_mutex);
      request.progress(++parts_done, nparts);
    }
    return std::move(built.part);
  };
  if (sink) {
    Plan::Builder::stats(plan).plan_seconds = seconds_since(t0);
    if (sink->stats) sink->stats(plan, sink_batch_bytes);
    // One batch of parts at a time, each part on one thread, handed over in
    // process order and dropped before the next batch is planned.
    const size_t np = ctx.processes.size();
    const size_t batch = planning::part_batch(threads, np);
    std::vector<ProcessPart> built(batch);
    for (size_t b0 = 0; b0 < np; b0 += batch) {
      const size_t n = std::min(batch, np - b0);
      parallel_for(n > 1 ? threads : 1, n, [&](size_t i) {
        built[i] = make_part(ctx.processes[b0 + i], n > 1 ? 1 : threads);
      });
      for (size_t i = 0; i < n; ++i) {
        parts.emplace(ctx.processes[b0 + i], std::move(built[i]));
        sink->each(plan);
        parts.clear();
        built[i] = ProcessPart{};
      }
    }
  } else if (request.scope == PlanScope::kAll) {
    // Parts are independent: one per task, each on one thread, when there
    // are enough of them to keep the threads busy.
    const size_t np = ctx.processes.size();
    const bool per_part = threads > 1 && np >= static_cast<size_t>(threads);
    std::vector<ProcessPart> built(np);
    parallel_for(per_part ? threads : 1, np,
                 [&](size_t i) { built[i] = make_part(ctx.processes[i], per_part ? 1 : threads); });
    for (size_t i = 0; i < np; ++i) parts.emplace(ctx.processes[i], std::move(built[i]));
  } else if (request.scope == PlanScope::kProcess) {
    if (!std::binary_search(ctx.processes.begin(), ctx.processes.end(), request.process))
      fail(ErrorCode::kOutOfRange, "request.process",
           "process " + std::to_string(request.process) + " owns no device of this plan");
    parts.emplace(request.process, make_part(request.process, threads));
  }
  if (!Plan::Builder::has_stats(plan)) Plan::Builder::stats(plan) = PlanStats{};
  Plan::Builder::stats(plan).plan_seconds = seconds_since(t0);
  return plan;
}

}  // namespace

Plan make_plan(const PlanInput& input, const PlanRequest& request) {
  return make_plan_impl(input, request, nullptr);
}

Plan plan_part_after_estimate(const PlanInput& input, const PlanRequest& estimate_request,
                              const PlanRequest& part_request, PlanStats* stats,
                              const std::function<void(const PlanEstimate&)>& check) {
  // One context only where the two calls would decide alike and the part
  // takes the scheduled pass the estimate keeps; else the two calls.
  const bool share =
      part_request.scope == PlanScope::kProcess && part_request.global_stats &&
      (estimate_request.scope != PlanScope::kProcess || estimate_request.global_stats) &&
      resolve_limit(estimate_request.max_plan_bytes) ==
          resolve_limit(part_request.max_plan_bytes) &&
      stats_piece_limit(estimate_request) == stats_piece_limit(part_request);
  if (!share) {
    const PlanEstimate e = estimate_plan(input, estimate_request, stats);
    if (check) check(e);
    return make_plan(input, part_request);
  }
  Context ctx(input);
  const PlanEstimate e = estimate_on(ctx, input, estimate_request, stats);
  if (check) check(e);
  return make_plan_impl(input, part_request, nullptr, &ctx);
}

namespace planning {

size_t part_batch(int threads, size_t parts) {
  return threads > 1 && parts >= static_cast<size_t>(threads) ? static_cast<size_t>(threads) : 1;
}

Plan plan_each_part(const PlanInput& input, const PlanRequest& request, const PartSink& sink) {
  if (request.scope != PlanScope::kAll)
    fail(ErrorCode::kInvalidArgument, "request.scope",
         "plan_each_part plans every part (PlanScope::kAll)");
  return make_plan_impl(input, request, &sink);
}

}  // namespace planning

const ProcessPart& Plan::part(int32_t process) const {
  auto it = parts_.find(process);
  if (it == parts_.end())
    fail(ErrorCode::kOutOfRange, "process",
         "this plan holds no part for process " + std::to_string(process));
  return it->second;
}

Box Plan::region(const ProcessPart& part, const Piece& piece) const {
  if (piece.region != kOverlapRegion) {
    if (piece.region >= part.regions.size())
      fail(ErrorCode::kOutOfRange, "piece.region",
           std::to_string(piece.region) + " but the part has " +
               std::to_string(part.regions.size()) + " regions");
    return part.regions[piece.region];
  }
  if (piece.tensor >= tensors_.size())
    fail(ErrorCode::kOutOfRange, "piece.tensor",
         std::to_string(piece.tensor) + " but the plan has " + std::to_string(tensors_.size()) +
             " tensors");
  const TensorSpec& t = tensors_[piece.tensor];
  if (piece.src_entry >= t.src.num_entries() || piece.dst_entry >= t.dst.num_entries())
    fail(ErrorCode::kOutOfRange, "piece",
         "entry index out of range for tensor " + std::to_string(piece.tensor));
  return intersect(t.src.box(piece.src_entry), t.dst.box(piece.dst_entry));
}

Box Plan::source_box(const Piece& piece, uint32_t stage) const {
  if (piece.tensor >= tensors_.size())
    fail(ErrorCode::kOutOfRange, "piece.tensor",
         std::to_string(piece.tensor) + " but the plan has " + std::to_string(tensors_.size()) +
             " tensors");
  if (piece.src_entry == kScratchEntry)
    fail(ErrorCode::kOutOfRange, "piece.src_entry",
         "names a scratch, whose box depends on the part and the sending device");
  const Layout& l =
      reads_source(piece, stage) ? tensors_[piece.tensor].src : tensors_[piece.tensor].dst;
  if (piece.src_entry >= l.num_entries())
    fail(ErrorCode::kOutOfRange, "piece.src_entry",
         "out of range for tensor " + std::to_string(piece.tensor));
  return l.box(piece.src_entry);
}

// The box of the scratch a piece names on `device` (its `field`), or
// kOutOfRange naming that field.
Box Plan::scratch_box(const ProcessPart& part, const Piece& piece, int64_t device,
                      const char* field) const {
  if (piece.tensor >= tensors_.size())
    fail(ErrorCode::kOutOfRange, "piece.tensor",
         std::to_string(piece.tensor) + " but the plan has " + std::to_string(tensors_.size()) +
             " tensors");
  const int64_t i = find_scratch(part, piece.tensor, device, region(part, piece));
  if (i < 0)
    fail(ErrorCode::kOutOfRange, field,
         "part " + std::to_string(part.process) + " holds no scratch of tensor " +
             std::to_string(piece.tensor) + " on device " + std::to_string(device) +
             " containing the piece's region");
  return part.scratch[static_cast<size_t>(i)].box;
}

Box Plan::source_box(const ProcessPart& part, const Piece& piece, uint32_t stage,
                     int64_t device) const {
  if (piece.src_entry != kScratchEntry) return source_box(piece, stage);
  if (stage == 0)
    fail(ErrorCode::kOutOfRange, "piece.src_entry",
         "a piece of stage 0 reads a source entry, not a scratch");
  return scratch_box(part, piece, device, "piece.src_entry");
}

Box Plan::destination_box(const ProcessPart& part, const Piece& piece, int64_t device) const {
  if (piece.dst_entry == kScratchEntry) return scratch_box(part, piece, device, "piece.dst_entry");
  if (piece.tensor >= tensors_.size())
    fail(ErrorCode::kOutOfRange, "piece.tensor",
         std::to_string(piece.tensor) + " but the plan has " + std::to_string(tensors_.size()) +
             " tensors");
  const Layout& l = tensors_[piece.tensor].dst;
  if (piece.dst_entry >= l.num_entries())
    fail(ErrorCode::kOutOfRange, "piece.dst_entry",
         "out of range for tensor " + std::to_string(piece.tensor));
  return l.box(piece.dst_entry);
}

int64_t find_scratch(const ProcessPart& part, uint32_t tensor, int64_t device, const Box& region) {
  const auto& v = part.scratch;
  auto it = std::lower_bound(v.begin(), v.end(), std::pair(tensor, device),
                             [](const Scratch& s, const std::pair<uint32_t, int64_t>& k) {
                               return std::pair(s.tensor, s.device) < k;
                             });
  for (; it != v.end() && it->tensor == tensor && it->device == device; ++it) {
    if (it->box.rank == region.rank && it->box.contains(region)) return it - v.begin();
  }
  return -1;
}

int64_t Plan::piece_bytes(const ProcessPart& part, const Piece& piece) const {
  const Box r = region(part, piece);
  return r.volume() * wire_size(tensors_[piece.tensor]);
}

NaivePlanResult naive_plan(const PlanInput& input) {
  validate(input.options);
  for (size_t i = 0; i < input.tensors.size(); ++i) validate_tensor(input.tensors[i], i);
  validate_block_scales(input.tensors, ErrorCode::kInvalidArgument);
  Context ctx(input);
  ctx.build();
  Enumerator en(input.options);
  NaivePlanResult r;
  for (auto& t : ctx.tensors)
    for (uint32_t e = 0; e < t.dst->num_entries(); ++e)
      en.recv_naive(t, e, [&](const Emitted& x) {
        ++r.pieces;
        if (!x.local)
          planning::add_to(r.network_bytes,
                           planning::mul_of(x.region.volume(), t.esize, "network_bytes"),
                           "network_bytes");
      });
  return r;
}

}  // namespace reshard
