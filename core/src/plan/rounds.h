// Internal: bounded staging (docs/design.md §2.6).
//
// The rule. A (source, destination) stream of stage t — its pieces back to
// back in message order, B bytes — between devices a and b has a chunk
//   c = floor(W * B / max(T(a), T(b), B)) + 8,
//   W = floor((budget - 16 * max(peers(a), peers(b))) * kCutWindowDiv / (kCutWindowDiv + 1)),
// where peers(x) counts x's messages of stage t before cutting (a stream of
// each peer it exchanges data with in stage t, a message per relay band
// above the first) and T(x) is the bytes x sends plus receives in stage t,
// and a cut window s = floor(c / kCutWindowDiv). A round belongs to one
// stage, so only a device's streams of that stage share its budget (planner
// version 21; until version 20 its streams of every stage did, as if all
// stages were staged at once, which cut a plan of many stages — reduction
// bands — ever finer). A stream in relay bands (plan/enumerate/types.h, Bands) is cut
// band by band, each band a segment of B_k bytes cut as below with the
// whole stream's c, its rounds after the previous band's (the stream spans
// sum_k ceil(B_k / c) rounds). A segment of B bytes spans exactly
// R = ceil(B / c) rounds. Round k (0 < k < R) starts
// at a cut x_k chosen among the element boundaries in (k*c - s, k*c]:
//   1. the last piece boundary there (no piece is split), else
//   2. inside the piece covering the window, the last offset there at which
//      a slab of its coarsest possible dimension starts (whole rows, planes,
//      ... of the row-major region, so each side is one box), else
//   3. (window narrower than an element) the last element boundary at or
//      before k*c.
// Cuts fall on element boundaries in (k*c - max(s, 8), k*c] and increase
// strictly, so every round of the stream is non-empty and holds fewer than
// c + max(s, 8) bytes (round_cap). Summed over a device's streams of one stage that is at
// most (budget - 16 * peers) + 15 * peers < budget: the budget is strict.
// Compared with cutting at element granularity (s = 0, W = budget - 16 P),
// the window costs about 1 / kCutWindowDiv more rounds and saves most of the
// split pieces (each of which is a separate box to pack and encode).
//
// The rule depends only on the stream (identical for sender and receiver) and
// on per-(device, stage) figures of the global statistics, so every process cuts its
// streams the same way on its own; the global statistics get each stream's
// round count and staging from its bands' B_k and c alone, without its
// pieces.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "layout/element_range.h"  // element_range_boxes: a cut inside a piece
#include "reshard/plan.h"

namespace reshard::planning {

// Window = chunk / kCutWindowDiv (see above); 0 disables the window (cuts at
// element granularity, the rule before planner version 2).
inline constexpr int64_t kCutWindowDiv = 16;

// Per-(device, stage) figures the rule needs.
struct DeviceLoad {
  int64_t peers = 0;  // messages of the stage before cutting
  int64_t bytes = 0;  // sent + received in the stage
};

// Chunk size c of a stream of `stream_bytes` between devices a and b.
int64_t round_chunk(int64_t budget, DeviceLoad a, DeviceLoad b, int64_t stream_bytes);

// The most rounds a plan of several stages is cut into for pipelining.
// Above kFewPipelineRounds the estimate chooses between the two counts
// (compute_stats): it does not model how rounds couple the processes that
// share a message (simulate.md, "Order"), which makes stage 0 of
// bench/weight_sync.py's qwen3_m2n on GB200 end later with every doubling
// (0.1526 s at 16 rounds, 0.1534 at 64, 0.1541 at 128), so the count stops
// at 64.
inline constexpr int64_t kMaxPipelineRounds = 64;
inline constexpr int64_t kFewPipelineRounds = 16;

// The granule of keyed cuts (RoundRule::keys, key_blocks) in bytes.
inline constexpr int64_t kKeyGranule = 65536;

// Pipelined stages (planner version 24). A plan of several stages is also
// cut for pipelining, with or without a staging budget: a relay forwards
// round r while it receives round r + 1, so stages overlap only as far as
// their rounds are small. The plan takes k rounds (pipeline_rounds, from
// the estimate's stage times), and stage t a pipeline budget
//   P_t = ceil(max over devices of T(x) / k),
// so the busiest device of each stage sends and receives its traffic of the
// stage in about k rounds. A stream of B bytes of stage t between a and b
// then has the chunk
//   c = min(c_budget, max(floor(P_t * B / max(T(a), T(b), B)) + 8, min(B, m)))
// where c_budget is round_chunk's (none without a budget) and m the
// smallest pipelined round (cross_min_bytes: a round's α at most 4 times its
// bandwidth time). The chunk is never above the budget's, so the staging
// bound holds; P_t and m are figures of the global statistics, so every
// process cuts alike. k = 1 (one stage, or nothing to overlap) cuts nothing
// for pipelining.
//
// Rounds of a forward (stage t > 0 of a pipelined plan) are numbered late.
// Stage t takes K_t = min(k, most bytes a device sends and receives in t /
// m + 1) rounds (the estimate's count, RoundRule::spans); a stream of n <= K_t
// rounds numbers its round l as ceil((l + 1) K_t / n) - 1, the last of the
// K_t rounds its share [l / n, (l + 1) / n) of its bytes covers, so its last
// round is round K_t - 1 (a stream of more rounds keeps 0, 1, ...). Pieces
// come in the same order in every stream (order_pieces), so what a forward
// sends in its share arrives, in the streams that fed it, about over the
// same share of their rounds: numbered from 0 on, a forward of one round
// would be round 0 and wait, at the head of its device's lane, for the last
// round of the stage before. Stage 0 keeps 0, 1, ... (sent as early as it
// can). The numbering depends on n and K_t alone, so the global statistics
// count it (a stage of pipelined forwards has max(K_t, most rounds of a
// stream) rounds) and sender and receiver agree.
struct RoundRule {
  int64_t budget = 0;             // staging budget; 0: none
  std::vector<int64_t> pipeline;  // per stage: P_t (0 or absent: not pipelined)
  std::vector<int64_t> spans;     // per stage: K_t (0 or absent: numbered from 0)
  int64_t min_chunk = 1;          // m
  // K in (0, 32]: keyed cuts of granule g (key_blocks); 0: each stream
  // cut by its own bytes.
  int64_t keys = 0;
  int64_t key_granule = kKeyGranule;
  // Blocks shrunk to spread a narrow shard over the keys
  // (tensor_key_blocks' `fine`), where the estimate chose them.
  bool key_fine = false;
  // Spread cuts (spread_bounds): the key bounds q_1 < ... < q_(K-1) every
  // stream of a pipelined stage is cut at; empty: cut by its bytes.
  std::vector<double> spread;
  // P in (0, 32]: sub-messages (sub_blocks of block sub_block): each stage
  // one round, a stream's pieces cut into its subs; 0: none.
  int64_t subs = 0;
  int64_t sub_block = 0;
  bool cuts() const { return budget > 0 || !pipeline.empty() || keys > 0 || subs > 0; }
  // The chunk of a stream of `stream_bytes` of stage `stage` (at least the
  // stream's bytes when nothing cuts it).
  int64_t chunk(uint32_t stage, DeviceLoad a, DeviceLoad b, int64_t stream_bytes) const;
  // Whether stage `stage`'s streams take spread cuts.
  bool spread_stage(uint32_t stage) const {
    return !spread.empty() && stage < pipeline.size() && pipeline[stage] > 0;
  }
  // The number of round l of a stream of `n` rounds in stage `stage`.
  int64_t round_number(uint32_t stage, int64_t l, int64_t n) const {
    const int64_t k = stage > 0 && stage < spans.size() ? spans[stage] : 0;
    if (k <= 0 || n <= 0 || n > k) return l;
    return ((l + 1) * k + n - 1) / n - 1;
  }
  // The rounds stage `stage` takes when its streams span at most `most`
  // rounds each (at least one stream); not for spread cuts, whose rounds
  // are numbered by their keys (round_schedule counts them).
  int64_t stage_rounds(uint32_t stage, int64_t most) const {
    const int64_t k = stage > 0 && stage < spans.size() ? spans[stage] : 0;
    return std::max(most, k);
  }
};

// Spread cuts (issue 35; chosen by the global statistics where the estimate
// is faster for them, stage_cost.h spread_rounds, and only without a staging
// budget). Tensor t covers the share [lo_t, hi_t) of its source group's
// bytes (the group of pipeline_ranks; its middle is the key order_pieces
// sorts by). A stream of a pipelined stage holding B_t bytes of tensor t
// has its cut k (0 < k < K) at the byte
//   x_k = sum_t B_t clamp((q_k - lo_t) / (hi_t - lo_t), 0, 1)
// (rounded down to a byte, then placed as find_cuts places k c: in the
// window below it, c = B / K), where q_k is spread_bounds' k-th bound for
// stage 0 and spread_forward_bound's for a forward. A cut not more than the
// cut window (at least 8 bytes) above the last kept one, or within 8 bytes
// of the stream's end, is dropped. Rounds are numbered by their keys: a
// stage-0 round by the bound its bytes start at (round 0 from 0, a round
// after cut k is round k), a forward's by the one it ends at (a round
// ending at cut k is round k - 1, the last round K - 1); so a forward's
// round r reads the keys of stage-0 rounds r - 1 and r, and waits for no
// later one. Both ends compute the cuts from the stream's pieces and the
// tensors alone.
// The bounds: `even` even ones (i / even, 0 < i < even) and a tail of two
// (1 - 1/(2 even), 1 - 1/(4 even)), so the last even round and the two
// after it take a half and two quarters of an even round's keys. Empty for
// even < 1.
std::vector<double> spread_bounds(int64_t even);
// The bound of a forward's cut k (1 <= k <= q.size()): q_k moved back by half
// the key width of round k - 1 (q_0 = 0), so that a forward's round r ends
// inside the stage-0 round r it reads from.
double spread_forward_bound(const std::vector<double>& q, size_t k);
// Per tensor its share [lo, hi) of its source group's bytes (the groups of
// pipeline_ranks): [2t] lo, [2t + 1] hi.
std::vector<double> key_shares(const std::vector<TensorSpec>& tensors);
// A run of one tensor's pieces in a stream cut by spread cuts: its bytes and
// the tensor's share [lo, hi) (key_shares).
struct SpreadRun {
  int64_t bytes = 0;
  double lo = 0, hi = 0;
};
// The kept spread cuts of a stream of stage `stage` of `bytes` bytes whose
// pieces form `runs` (one per tensor, in the order of the stream's pieces:
// pipeline_ranks'), the one function by which the plan cuts a stream
// (split_rounds) and the global statistics count its rounds
// (round_schedule), so the two cannot differ. Appends each kept cut's byte
// x_k to `x` and its bound k to `key` where not null; returns the cuts kept
// (the stream spans that many rounds plus one) and the last kept bound (0
// where none is kept).
struct SpreadCuts {
  int64_t kept = 0;
  int32_t last_key = 0;
};
SpreadCuts spread_stream_cuts(const RoundRule& rule, uint32_t stage, int64_t bytes,
                              std::span<const SpreadRun> runs, std::vector<int64_t>* x,
                              std::vector<int32_t>* key);

// Cut window s of a stream with chunk c.
inline int64_t round_window(int64_t chunk) { return kCutWindowDiv > 0 ? chunk / kCutWindowDiv : 0; }

// Rounds a stream of `bytes` spans.
inline int64_t stream_rounds(int64_t bytes, int64_t chunk) {
  return bytes <= 0 ? 0 : (bytes + chunk - 1) / chunk;
}

// Most bytes one round of a stream of `bytes` with chunk c can hold.
inline int64_t round_cap(int64_t bytes, int64_t chunk) {
  return std::min(bytes, chunk + std::max<int64_t>(round_window(chunk), 8) - 1);
}

// The order of pieces in the messages of a pipelined plan. A relay fed by
// several sources (the stages of a pipeline-parallel trainer, each holding
// its own layers) receives round r of every source's stream together, the
// r-th share of each source's tensors; it forwards in round r what its
// forward stream holds there. In tensor order that would be the first
// source's tensors alone, most of which arrive in later rounds. So in a
// pipelined plan the pieces of every message are ordered by their tensor's
// place among the tensors of its source (the tensors whose source layout
// starts on the same device with as many entries): tensor t of such a
// group, after tensors of B bytes of a group of T bytes in all, has the key
// (2B + bytes(t)) / 2T, the middle of its share; ties go to the lower tensor
// index. pipeline_ranks gives each tensor its place in that order (the same
// in every process: it depends on the tensors alone). order_pieces merges
// each stream's relay bands into one message (the rounds pipeline it, and
// bands cut separately would put a band at a different round in each
// stream a relay reads and writes) and sorts its pieces by rank (stably:
// sender and receiver generate a message's pieces in the same order, so
// they order them alike; a tensor's bands stay in band order).
std::vector<uint32_t> pipeline_ranks(const std::vector<TensorSpec>& tensors);
void order_pieces(ProcessPart& part, std::span<const uint32_t> rank,
                  std::vector<int64_t>& send_bytes, std::vector<int64_t>& recv_bytes);

// Re-cuts the messages of `part` into rounds. They come from build_part
// sorted by (stage, peer, own, band), one per segment — a stream's pieces of
// one relay band (plan/enumerate/types.h, Bands), `round` the band — and a
// stream's segments are cut one after the other, each at the chunk of the
// whole stream (its rounds never share a round with the next segment's). `send_bytes` /
// `recv_bytes` give each piece's size (parallel to part.send_pieces / part.recv_pieces);
// `load(device, stage)` a device's figures in a stage (make_plan may cut several parts at once, so
// it must be safe to call concurrently). Streams are cut on up to `threads` threads; the result is
// the same for any thread count.
void split_rounds(ProcessPart& part, const std::vector<TensorSpec>& tensors, const RoundRule& rule,
                  std::span<const int64_t> send_bytes, std::span<const int64_t> recv_bytes,
                  const std::function<DeviceLoad(int64_t, uint32_t)>& load, int threads = 1);

// Tests: split_rounds lays out the cut messages round by round (false), the
// path the stream-by-stream layout (true, the default) must match.
void set_stream_major_rounds(bool on);

// Keyed cuts (planner version 29; chosen by the global statistics where
// the estimate is faster for them, compute_stats). Every element of a
// tensor has a key in [0, K) that depends on the element alone: along one
// dimension D of the tensor (key_blocks: the outermost whose slab, the
// elements of one index of D, is at most the granule g bytes), indices fall
// in blocks of b = max(1, floor(g / slab bytes)), and block i has the key
// (i + o) mod K, o the tensor's key offset (KeyOffsets: like tensors take
// turns, so that where each stream holds fewer than K blocks, a device's
// streams of many like tensors still spread over the K rounds). Round r of
// every stream, of every stage, carries exactly its elements of key r, its
// pieces split at block boundaries (a box cut along one dimension stays one
// box). So a forward's round r reads only what arrived in round r of the
// stage before (lag 0), and any stream longer than K blocks along D spreads
// evenly over the K rounds. A stream spans the rounds of the keys it holds:
// the OR of key_mask over its pieces' boxes (the residues of a run of
// consecutive blocks, the same for every tensor of one shape but for the
// offset), which the global statistics count, with each round's bytes
// (key_volumes). The staging budget is not applied to the cuts: keyed cuts
// are chosen only where every device's bytes of one round of one stage stay
// below it.
struct KeyBlocks {
  int dim = 0;         // D
  int64_t block = 1;   // b
  int64_t offset = 0;  // o (KeyOffsets)
};
// Key offsets (planner version 39): a tensor's offset o is the number of
// tensors before it in the plan with its shape and element size, so that
// keys of like tensors start in turn (24 FSDP shards of 16 blocks at K = 10:
// without offsets, keys 0-5 hold two blocks of every shard and keys 6-9
// one, in every tensor, and each round some sources send twice what others
// do). Every process and the global statistics number them alike.
class KeyOffsets {
 public:
  // The next tensor's offset (tensors in plan order).
  int64_t next(std::span<const int64_t> shape, int64_t esize);

 private:
  std::map<std::pair<std::vector<int64_t>, int64_t>, int64_t> seen_;
};
KeyBlocks key_blocks(std::span<const int64_t> shape, int64_t esize, int64_t granule);
// Fine blocks (planner version 43): where the shortest shard of a
// tensor's source or destination along D spans fewer than
// kKeyBlocksPerShard × K blocks of the granule's size, its blocks shrink
// to ⌊shard / (kKeyBlocksPerShard × K)⌋ indices (one at least), so that a
// stream inside one shard still spreads over the K rounds. A stream of a
// few granule blocks holds a window of a few keys, and the streams of one
// round then load some devices twice the mean and others not at all (a
// MoE layer EP8 on one host → 3 × tp8 hosts, H100: 964 µs simulated with
// 23-row blocks, 806 with 1-row blocks). The keyed estimate scales each
// round's busiest link and prices both at 793 µs, so it cannot see that
// imbalance. The global statistics price both (compute_stats) and keep
// fine blocks unless the granule's are more than 1% cheaper by the
// estimate, which does see forwards that end sooner where their keys come
// first (an elastic grow FSDP16 → 24: 99.8 µs simulated with granule
// blocks, 123.2 with blocks of shard / 16 K, estimated 105.7 and 111.0).
inline constexpr int64_t kKeyBlocksPerShard = 32;
// The keyed blocks of each of the plan's tensors for K = `keys` rounds
// (key_blocks; with `fine`, shrunk by the shortest shard along D,
// kKeyBlocksPerShard), their offsets numbered (KeyOffsets).
std::vector<KeyBlocks> tensor_key_blocks(const std::vector<TensorSpec>& tensors, int64_t granule,
                                         int64_t keys, bool fine);
// Bit r set for each key r (r < K <= 32) a box of the tensor holds.
uint32_t key_mask(const Box& region, KeyBlocks k, int64_t keys);
// Adds to out[r] the elements of the box with key r (r < K <= 32); returns
// the blocks along D the box spans (the pieces a piece of it becomes).
int64_t key_volumes(const Box& region, KeyBlocks k, int64_t keys, int64_t* out);

// Sub-message keys (Message::sub; RoundRule::subs, chosen by the global
// statistics where the estimate is faster for them): along
// the tensor's longest dimension D (sub_blocks), indices fall in blocks of
// b, and within each block sub j of P takes the indices
// [b T_j / T, b T_(j+1) / T) (integer division), T_j = j (j + 1) / 2, T =
// P (P + 1) / 2: widths in the proportions 1, 2, ..., P, small first, the
// same in every block (bench_forward_lag --subs P --key-block b
// --band-dim -1 cuts plans so). Adds to out[j] the elements of the box with
// sub j (j < P <= 32); returns the bit mask of the subs it holds.
KeyBlocks sub_blocks(std::span<const int64_t> shape, int64_t block);
uint32_t sub_volumes(const Box& region, KeyBlocks k, int64_t subs, int64_t* out);
// The pieces a box becomes under subs: its runs of one sub within one
// block along D (each run one box).
int64_t sub_pieces(const Box& region, KeyBlocks k, int64_t subs);
// Sub cuts (RoundRule::subs): each stream's message (one per stream: a
// pipelined plan's, order_pieces) becomes one message per sub it holds,
// round 0, `sub` j, each piece cut into its runs (sub_pieces) in order,
// a piece inside one run kept whole. Messages sorted by (stage, sub order
// within each stream), streams in their order.

void split_subs(ProcessPart& part, const std::vector<TensorSpec>& tensors, const RoundRule& rule,
                std::span<const int64_t> send_bytes, std::span<const int64_t> recv_bytes);

// Without a staging budget: a stream's k-th segment (see split_rounds) is
// its round k; messages sorted by (stage, round, peer, own).
void number_band_rounds(ProcessPart& part);

}  // namespace reshard::planning
