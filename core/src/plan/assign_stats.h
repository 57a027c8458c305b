// Internal (stats_pass.h, routed_cells.cc): the statistics of the stage-0 pieces a region's
// holders send, as Enumerator::assign and Enumerator::split choose them
// (plan/enumerate/cells.h), without enumerating them: per destination
// entry (AssignStats::assign), or for every entry of a destination cell at
// once (AssignStats::assign_cell; docs/planner.md §8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "plan/context.h"
#include "plan/pair_bytes.h"
#include "plan/stage_cost.h"

namespace reshard::planning {

// A reference to a callable of signature R(A...), valid while the callable
// lives (what C++26 names std::function_ref): the statistics' callbacks
// across files, without std::function's allocation.
template <class Sig>
class FnRef;
template <class R, class... A>
class FnRef<R(A...)> {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FnRef>)
      FnRef(F& f)  // NOLINT(google-explicit-constructor): a lambda passed as is
      : obj_(&f), call_([](void* o, A... a) -> R { return (*static_cast<F*>(o))(a...); }) {}
  R operator()(A... a) const { return call_(obj_, a...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

// What the stage-0 accounting of compute_stats writes, owned by it.
struct StageZero {
  size_t ndev = 0;
  const PlanOptions* o = nullptr;
  std::vector<Acc>* acc = nullptr;              // stage 0's rows, per dense device
  std::vector<DeviceCounts>* counts = nullptr;  // null: not counted
  PlanStats* st = nullptr;
  // Pairs (destination row, source column) that exchange a message: bit
  // rows of `words` words where `dense_pairs`, else pair_set (keyed by
  // device_pair_key, each new one passed to keep_pair).
  bool dense_pairs = false;
  size_t words = 0;
  std::vector<uint64_t>* bits = nullptr;
  std::unordered_set<uint64_t>* pair_set = nullptr;
  // Where the round schedule needs every stream's bytes: pair_bytes, each
  // stream added by add_pair.
  bool track_pairs = false;
  PairBytes* pair_bytes = nullptr;
  FnRef<void()> keep_pair;                            // a new pair kept (refuses past the limit)
  FnRef<void(uint32_t, uint32_t, int64_t)> add_pair;  // (sd, dd, bytes) into pair_bytes
};

// A region's holders' hosts, processes and devices, sorted: whether an
// entry is "far" (none of them on its host, in its process or on its
// device), in time logarithmic in the holders. For a far entry
// Enumerator::assign looks no nearer than every holder.
struct HolderSets {
  std::vector<int32_t> hosts, procs;
  std::vector<int64_t> devices;
  void set(const TensorCtx& t, const uint32_t* R, size_t nr);
  bool far(const TensorCtx& t, uint32_t e) const;
};

class AssignStats {
 public:
  // One piece x of destination entry e of t (a group of `copies` tensors of
  // `esum` bytes per element in all), as compute_stats accounts it.
  using Account =
      FnRef<void(const TensorCtx&, uint32_t, const Emitted&, int64_t, int64_t, int64_t&)>;
  AssignStats(const StageZero& z, Account account) : z_(z), account_(account) {}

  // Enumerator::assign for one summand on both sides: the piece(s) of
  // `region` for entry e from the holders R[0..nr), as stage-0 pieces of
  // band `band`, to account(). False when no holder is listed. `sets`, when
  // given, are R's (HolderSets).
  bool assign(const TensorCtx& t, uint32_t e, const Box& region, const uint32_t* R, size_t nr,
              bool own, uint32_t band, int64_t esum, int64_t copies, int64_t& group_pieces,
              const HolderSets* sets = nullptr);
  // assign for every entry of a destination cell (entries
  // cell_entries[b0..b1) of t) and one region held by R[0..nr) (one
  // summand, band 0), as a whole. An entry with no holder on its device,
  // process or host ("far") takes the m pieces of split from every
  // holder at once (Enumerator::split: piece j from R[(j + e) % nr]), so
  // the far entries differ only in e % nr: each holder's figures add up
  // per residue (a replicated source meets every entry of the cell: an
  // MoE sync's trainer replicas, N/128 to N/2 of them, each sending to
  // N/16 entries a cell), and each entry's own figures are the region's
  // whole bytes, all across hosts and processes. Other entries go through
  // assign one by one.
  void assign_cell(const TensorCtx& t, uint32_t b0, uint32_t b1, const Box& region,
                   const uint32_t* R, size_t nr, bool own, int64_t esum, int64_t copies,
                   int64_t& group_pieces);
  // Adds the stream bytes assign_cell left waiting to pair_bytes' rows
  // (before anything reads them).
  void flush_rows();
  // The holders' sets of the region being accounted (assign's `sets`).
  HolderSets& region_holders() { return region_holders_; }

 private:
  // The m pieces of `region` for entry e split evenly along `dim` over the
  // holders N[0..nn) (piece j from N[(j + e) % nn]; Enumerator::split),
  // stage 0 and band 0, none local: what account() does for each, with
  // the receiver's figures added once (the statistics of a replicated
  // source meet m pieces per entry, m up to the replicas).
  void split(const TensorCtx& t, uint32_t e, const Box& region, int dim, int64_t m,
             const uint32_t* N, size_t nn, int64_t esum, int64_t copies, int64_t& group_pieces);

  StageZero z_;
  Account account_;
  HolderSets region_holders_;
  std::vector<uint32_t> near_;
  std::vector<uint32_t> far_;  // far entries of the cell
  std::vector<int64_t> chunk_, held_bytes_, held_pieces_, residue_count_;
  std::vector<uint32_t> residues_, held_dense_;
  std::vector<std::pair<size_t, uint64_t>> held_mask_;  // (word, bits) of every holder
  // The stage-0 stream bytes of far entries, kept per destination row of
  // pair_bytes' table and added a row at a time (flush_rows, at most
  // kRowsPending waiting): added where they arise, each of a cell's
  // entries' m streams missed the cache (holders and entries are strided
  // over a table of N/2 x N/2 streams), most of the statistics' time at
  // 16,384 devices. A batch: a region's holders' columns (nr, rotated per
  // entry by its residue) and the bytes of its m pieces.
  struct RowBatch {
    size_t cols, chunks, nr, m;
  };
  static constexpr uint32_t kUnbatched = UINT32_MAX;
  static constexpr size_t kRowsPending = size_t{1} << 22;
  std::vector<int32_t> row_cols_;
  std::vector<int64_t> row_chunks_;
  std::vector<RowBatch> row_batches_;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> row_adds_;  // (batch, residue)
  size_t rows_pending_ = 0;
};

}  // namespace reshard::planning
