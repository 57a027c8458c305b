// Internal (compute_stats, stats.cc): the statistics of a tiled
// destination's cells with one summand on both sides, as Enumerator::recv
// enumerates each of their entries, but with the cover and each region's
// route computed once for the cell (both depend on the cell and the region
// alone) and each relay part's bands accounted at once instead of piece
// by piece (docs/planner.md §8). The cells of the device rule (an
// all-to-all among their entries) take each relay part once for every
// entry (all_to_all_cell.{h,cc}).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "plan/all_to_all_cell.h"
#include "plan/stats_pass.h"

namespace reshard::planning {

// Tests: the most (entry, source) pairs of a cell whose routed statistics
// index them (beyond it hashed, RoutedCells::pair_map_), 2^23 unless set;
// returns the limit before.
size_t set_pair_index_max(size_t pairs);
// Hashed cells that kept the PassSlots of the cell before (all processes'
// plans, for tests).
int64_t& hashed_cells_kept();

class RoutedCells {
 public:
  explicit RoutedCells(StatsPass& p) : p_(p) {}
  RoutedCells(const RoutedCells&) = delete;
  RoutedCells& operator=(const RoutedCells&) = delete;

  // Destination cell c of t (tiled, one summand on both sides; a group of
  // `copies` tensors of `esum` bytes per element in all). Returns false,
  // having accounted nothing, when a region has no holder (the caller
  // enumerates, which reports it).
  bool cell(const TensorCtx& t, size_t c, int64_t esum, int64_t copies, int64_t& group_pieces);
  // Every cell of t by cell(), stopping where the guard stops the pass.
  void cells(const TensorCtx& t, int64_t esum, int64_t copies, int64_t& group_pieces);
  // Adds the all-to-all cells' stream tables (A2aStreams) to relay_bytes[1]
  // and empties them: once a pass, before its finish.
  void drain();

 private:
  // A routed part's bands (relay_bands), worked out once per region for
  // every entry of the cell: their count, the elements of band 0, the band
  // numbers above 0 (the k-th of n is numbered k * kRelayBands / n) as a
  // mask and the last one's. The other bands' elements and the first and
  // last bands' boxes (what merging looks at) follow from the part
  // (band_volumes, with_edges): kept per part, they were 384 bytes a part,
  // and a region of the 16,384-device MoE sync has 222,080 parts
  // (docs/planner.md §8).
  struct PartBands {
    Bands bands;
    int64_t n = 1;
    int64_t plain = 0;  // elements of band 0
    uint32_t mask = 0, last_band = 0;
  };
  // `chunk`: band_bytes of t (relay_bands_of).
  void part_bands_of(const Box& part, const TensorCtx& t, int64_t chunk, PartBands& pb) const;
  // f(band number, elements) for each band of `part` above 0, ascending.
  template <class F>
  static void band_volumes(const Box& part, const PartBands& pb, F&& f) {
    if (pb.n == 1) return;
    const Bands& b = pb.bands;
    const int64_t slab = part.volume() / part.extent(b.dim);
    for (int64_t k = 1; k < b.n; ++k)
      f(static_cast<size_t>(k * kRelayBands / b.n), slab * (b.start(k + 1) - b.start(k)));
  }
  // f(first, last): the first and last bands' boxes of `part` (the part
  // itself, not copied, where it has one band).
  template <class F>
  static decltype(auto) with_edges(const Box& part, const PartBands& pb, F&& f) {
    if (pb.n == 1) return f(part, part);
    Box first = part, last = part;
    first.hi[pb.bands.dim] = pb.bands.start(1);
    last.lo[pb.bands.dim] = pb.bands.start(pb.n - 1);
    return f(first, last);
  }
  // A relay stream (stage, destination entry src -> the entry being
  // enumerated) as relay_part found it: its keys, counted in relay_pairs
  // and band_streams (kept by keep_pair) the first time, and where its bytes
  // add up (indices into relay_bytes[stage] and band_streams). Looked up
  // once per cell instead of once per part.
  static constexpr uint32_t kUnset = UINT32_MAX;
  struct StreamRef {
    uint32_t src = 0, stage = 0;
    bool counted = false;
    bool known = false;        // counted, as PassSlots had it
    uint32_t plain = kUnset;   // relay_bytes[stage] (with track_pairs)
    uint32_t banded = kUnset;  // band_streams
  };
  // The relay pieces of `part` from destination entry `src` to e in stage
  // `stage`, cut into `bands` (relay_bands of the part): what account() does
  // for each band's piece, at once. `added`: the pieces they make after
  // merging (Enumerator::recv's RelayMerger; see merge_part).
  void relay_part(const TensorCtx& t, StreamRef& ref, uint32_t e, const Box& part,
                  const PartBands& pb, int64_t added, int64_t esum, int64_t copies,
                  int64_t& group_pieces);
  // Enumerator::recv merges the relay pieces of each (relay, receiver) pair
  // (RelayMerger): per entry of the cell being enumerated, the pending piece
  // from each relay. A part's bands have distinct band numbers, so only its
  // first band can extend the pending piece (of band 0), and its last band
  // is pending after it (cell() counts the pieces a part adds).
  struct Pending {
    uint32_t src = 0, stage = 0, band = 0;
    Box box;
  };
  // The pair (entry at position i of the cell of m, source entry src):
  // where its pending piece and its streams in stages 1 and 2 are, side by
  // side (one lookup a pair, not one for the piece and one per stream);
  // by index where `indexed`, else hashed. find_pair: null where the pair
  // has none of them yet; pair: made (all kUnset) where absent.
  struct PairSlots {
    uint32_t pending = kUnset;                       // in pending_[i]
    std::array<uint32_t, 2> stream{kUnset, kUnset};  // in streams_[i], stage 1 and 2
  };
  PairSlots* find_pair(size_t i, uint32_t src, size_t m, bool indexed);
  PairSlots& pair(size_t i, uint32_t src, size_t m, bool indexed);
  // A hashed pair's streams as an earlier cell of the pass with the same
  // entries on the same devices left them (the MoE sync's 24 replicated
  // groups share one cell of N/2 entries): per stage, counted in
  // relay_pairs where not kUnset, its slot in relay_bytes (stable for the
  // pass, stream_map.h; any other value where pairs are not tracked). A
  // pair's first part in such a cell then looks neither up again
  // (StreamMap::index and the pair sets' misses were a tenth of `reshard
  // plan` on the 8,192-device MoE sync). 32-byte slots in pair_map_ (with
  // the band streams' slots kept too, 48: 17 MB more at 8,192 devices).
  using PassSlots = std::array<uint32_t, 2>;
  struct HashedSlots {  // pair_map_'s value: the cell's slots (tick: its cell's), the pass's
    PairSlots slots;
    uint32_t tick = 0;
    PassSlots pass{kUnset, kUnset};
  };
  // ps's PassSlots where ps is hashed (pair_map_'s), else null.
  static PassSlots* pass_of(PairSlots& ps, bool indexed) {
    static_assert(std::is_standard_layout_v<HashedSlots> && offsetof(HashedSlots, slots) == 0);
    return indexed ? nullptr : &reinterpret_cast<HashedSlots*>(&ps)->pass;
  }
  // Keeps pair_map_ from the cell before where this cell (entries
  // cell_entries[b0 .. b0 + m) of t) has the same entries on the same
  // devices, else clears it.
  void hashed_cell(const TensorCtx& t, uint32_t b0, size_t m);
  std::vector<std::pair<uint32_t, uint32_t>> hashed_sig_, sig_;  // (entry, dense device)
  // The streams the cell counted that its PassSlots lacked, kept there (at
  // the cell's end).
  void keep_pass_slots(size_t m);
  // Asks for the pair's slot ahead of pair().
  void prefetch_pair(size_t i, uint32_t src, size_t m, bool indexed) const {
    if (indexed)
      __builtin_prefetch(&pair_at_[i * m + pos_in_cell_[src]], 1);
    else
      pair_map_.prefetch(pair_key(i, src));
  }
  // The pair's pending piece (null: none yet), and its stream in `stage`
  // (added where new).
  Pending* pending_of(size_t i, const PairSlots& ps) {
    return ps.pending == kUnset ? nullptr : &pending_[i][ps.pending];
  }
  // `pass`: the pair's PassSlots (hashed cells), null where none.
  StreamRef& stream_of(size_t i, PairSlots& ps, uint32_t src, uint32_t stage,
                       const PassSlots* pass) {
    uint32_t& at = ps.stream[stage == 1 ? 0 : 1];
    std::vector<StreamRef>& se = streams_[i];
    if (at != kUnset) return se[at];
    at = static_cast<uint32_t>(se.size());
    StreamRef& ref = se.emplace_back(StreamRef{src, stage});
    if (pass && (*pass)[stage == 1 ? 0 : 1] != kUnset) {
      ref.counted = ref.known = true;
      ref.plain = (*pass)[stage == 1 ? 0 : 1];
    }
    return ref;
  }
  // The pair's pending piece set to x.
  void set_pending(size_t i, PairSlots& ps, const Pending& x) {
    if (ps.pending != kUnset) {
      pending_[i][ps.pending] = x;
      return;
    }
    ps.pending = static_cast<uint32_t>(pending_[i].size());
    pending_[i].push_back(x);
  }
  // Part j of the region from src to entry e (at position i of m) in
  // `stage`: merged into the pair's pending piece, accounted by
  // relay_part.
  void take_part(const TensorCtx& t, size_t i, uint32_t e, uint32_t src, uint32_t stage, size_t j,
                 size_t m, bool indexed, int64_t esum, int64_t copies, int64_t& group_pieces);
  // Part j of the region being accounted for entry e (at cell_entries[i]),
  // in stage 0.
  using Stage0 = FnRef<void(uint32_t, uint32_t, size_t)>;

  // A host of several entries of the cell (by_host_cell_[g .. g_end),
  // host slot hi, receiving index idx) and the region's parts: each part
  // taken in by its leader on the host (stage 0, or stage 1 from the
  // leader of the host it entered), and forwarded to the host's other
  // entries, which all take a leader's parts alike: the parts it leads on
  // the host, in part order. So one pending piece and one sum per
  // (leader, stage) stand for every other entry's, added to each at the
  // end of the region: a part visited once rather than once per entry
  // (an MoE sync's replicated tensors: 8 entries a host).
  void host_forwards(const TensorCtx& t, uint32_t b0, size_t m, size_t g, size_t g_end, size_t hi,
                     size_t idx, bool indexed, int64_t esum, int64_t copies, int64_t& group_pieces,
                     Stage0 stage0);
  struct ForwardSums {  // what relay_part adds for a pair, summed over parts
    bool touched = false, banded = false;
    int64_t added = 0, bytes = 0, plain = 0, late = 0;
    uint32_t mask = 0;
    std::array<int64_t, kRelayBands> band{};
  };
  struct HostForward {  // a leader's forwards inside its host
    bool touched = false, has_pending = false;
    Pending pending;
    std::array<ForwardSums, 2> sums;  // stage 1 (entered here), stage 2
  };
  std::vector<HostForward> forwards_;
  std::vector<uint32_t> fwd_refs_;  // the pairs' streams, by index in streams_[entry]
  std::vector<std::pair<uint32_t, uint32_t>> fwd_parts_;  // per part: (leader's q, source)

  // The all-to-all cell (all_to_all_cell.h; all_to_all_cell.cc).
  // a2a's sums since the last flush, added to every (entry, source) pair
  // of the cell with entries cell_entries[b0 .. b0 + m) of t: what
  // relay_part does for each part of each pair.
  void a2a_flush(const TensorCtx& t, uint32_t b0, size_t m, int64_t copies, int64_t& group_pieces);
  // A region of such a cell (route_, recv_index_, recv_host_, slot_ and
  // part_bands_ set for it): each entry's stage-0 parts by stage0(b0 + i,
  // entry, part), in part order, and each relay part once for every entry.
  // False, having done nothing, where the region is not one: it does not
  // enter every host of the cell, or a part's leader is not its host's
  // entry.
  // `cut`: the region's stage-0 pieces have their own region (stage0's).
  bool a2a_region(const TensorCtx& t, uint32_t b0, size_t m, size_t np, bool cut, int64_t esum,
                  int64_t copies, int64_t& group_pieces, Stage0 stage0);
  // The region's direct parts (sent from the holders' hosts to every
  // entry, no relay) where each has one holder on its host: every entry
  // takes each of them as one stage-0 piece from that holder (assign of
  // one holder), alike but for the entry. Grouped by holder (part order
  // within one): per holder its parts, their bytes and count, so an entry
  // takes a holder's parts as one sum (one stream) instead of a piece at
  // a time. False, direct_ unset, where a direct part has several holders
  // on its host or none (assign's choice of holder then depends on the
  // entry) or the pass is keyed (count_keys sees every piece).
  struct DirectHolder {
    uint32_t src = 0;
    int64_t bytes = 0, pieces = 0;
    std::vector<uint32_t> parts;
  };
  std::vector<DirectHolder> direct_;
  size_t direct_used_ = 0;
  bool a2a_direct(size_t np, int64_t esum);
  // Entry e (at cell_entries[i]) takes direct_ as StatsPass::account
  // takes each piece (a holder on e's device: its parts by stage0).
  void a2a_direct_entry(const TensorCtx& t, uint32_t i, uint32_t e, bool cut, int64_t copies,
                        int64_t& group_pieces, Stage0 stage0);
  // The region's entered parts (each taken in by its host's entry in stage
  // 0, cut into the part's bands, from the holders on the part's host)
  // where every holder is far from the entry taking the part in (on
  // another host, process and device: Enumerator::assign then splits
  // each band over all of them, piece q from holder (q + e) mod n): an
  // entry's pieces summed per holder (bytes by band, pieces, regions) and
  // accounted once per (entry, holder), as StatsPass::account adds them
  // piece by piece. a2a_entered_ok: whether the region is such (and the
  // pass not keyed, and the entry's direct parts, if any, taken apart:
  // a2a_direct); a2a_entered_part sums part j of entry e; a2a_entered_flush
  // accounts entry e's sums, the direct streams and band streams in the
  // order the pieces would have named them first.
  struct EnteredHolder {
    int64_t pieces = 0, regions = 0, plain = 0;  // plain: elements of band 0
    uint32_t mask = 0;                           // bands above 0
    bool touched = false, plain_seen = false;
    std::array<int64_t, kRelayBands> band{};  // elements by band
  };
  std::vector<EnteredHolder> entered_;  // per position in part_holders_
  std::vector<uint32_t> entered_touched_, entered_plain_, entered_late_;
  bool a2a_entered_ok(const TensorCtx& t, uint32_t b0, size_t np, bool direct) const;
  void a2a_entered_part(const TensorCtx& t, uint32_t e, size_t j, bool cut);
  void a2a_entered_flush(const TensorCtx& t, uint32_t e, int64_t esum, int64_t copies,
                         int64_t& group_pieces);
  // Enumerator::assign of each band's box of `part` (entering at entry e)
  // over its nn holders, none near e: split evenly along split_dim where
  // at least split_min_bytes (piece q from holder (q + e) mod nn, each its
  // own region), else one piece from holder e mod nn. add(holder k of the
  // nn, elements, band, own region) for each piece.
  template <class Add>
  void entered_pieces(const TensorCtx& t, uint32_t e, const Box& part, const Bands& bands,
                      size_t nn, bool cut, Add&& add) const {
    bands.each(part, [&](const Box& sub, uint32_t band) {
      const int64_t volume = sub.volume();
      if (nn > 1 && volume * t.esize >= p_.o.split_min_bytes && sub.rank > 0) {
        const int dim = split_dim(sub, nn);
        const int64_t ext = sub.extent(dim);
        const int64_t m = std::min<int64_t>(ext, static_cast<int64_t>(nn));
        if (m > 1) {
          const int64_t slab = volume / ext;
          for (int64_t q = 0, k = static_cast<int64_t>(e % nn); q < m;
               ++q, k = k + 1 == static_cast<int64_t>(nn) ? 0 : k + 1)
            add(static_cast<size_t>(k), (ext * (q + 1) / m - ext * q / m) * slab, band, true);
          return;
        }
      }
      add(e % nn, volume, band, cut || !(sub == part));
    });
  }
  // A piece added to h's sums; what it names first: bit 0 the holder, bit
  // 1 its band-0 stream, bit 2 its band stream.
  static unsigned enter(EnteredHolder& h, int64_t volume, uint32_t band, bool own) {
    unsigned first = 0;
    if (!h.touched) {
      h.touched = true;
      first |= 1;
    }
    ++h.pieces;
    h.regions += own ? 1 : 0;
    if (band == 0) {
      h.plain += volume;
      if (!h.plain_seen) {
        h.plain_seen = true;
        first |= 2;
      }
      return first;
    }
    if (h.mask == 0) first |= 4;
    h.mask |= 1u << band;
    h.band[band] += volume;
    return first;
  }
  // Entry e's entered sums accounted (a2a_entered_flush): `touched`,
  // `plain` and `late` name them in the order their first piece, first
  // band-0 piece and first piece above band 0 came; at(x) is x's sums,
  // holder(x) its position in part_holders_.
  // bands(x): x's elements by band (nullptr where it has none above 0).
  using BandSums = std::array<int64_t, kRelayBands>;
  template <class At, class Holder, class Bands>
  void entered_account(const TensorCtx& t, uint32_t e, int64_t esum, int64_t copies,
                       int64_t& group_pieces, const std::vector<uint32_t>& touched,
                       const std::vector<uint32_t>& plain, const std::vector<uint32_t>& late,
                       At&& at, Holder&& holder, Bands&& bands);

  // The all-to-all region from its runs (Route::runs, the route taken
  // with want_runs): what a2a_region does from its parts, each run's parts
  // (linear_boxes) made where they are read instead of kept for the
  // region. The parts are visited once, in order: each entered part's
  // stage-0 pieces summed per (entry, holder) and its relay sums per
  // source, each entry's sums then accounted entry by entry, after its
  // direct sums, as a2a_region accounts them. False, having done nothing,
  // where a2a_region would not take the region, or would not take its
  // direct and entered parts as sums (the caller then routes the region
  // into parts). Off where set_a2a_runs(false) (tests).
  bool a2a_runs(const TensorCtx& t, uint32_t b0, size_t m, const Box& region, bool own,
                int64_t esum, int64_t copies, int64_t& group_pieces);
  struct RunAt {  // per run: its holders in part_holders_, its source's position
    uint32_t lo = 0, hi = 0, p = 0;
  };
  std::vector<RunAt> run_at_;
  std::vector<Box> run_boxes_;
  // An (entry, holder) pair's sums from runs (EnteredHolder's, made where
  // the pair takes its first piece): 48 bytes, those of bands above 0
  // apart (EnteredBands, where the pair has any). A region has one a run
  // (16 MB of EnteredHolder-sized records at 16,384 devices), read again
  // by entry.
  static constexpr uint64_t kNoSeq = ~uint64_t{0};
  struct EnteredRec {
    int64_t pieces = 0, regions = 0, plain = 0;  // plain: elements of band 0
    uint64_t plain_seq = kNoSeq;                 // its first band-0 piece's place
    uint32_t i = 0, pos = 0;                     // entry position, holder position
    uint32_t mask = 0;                           // bands above 0
    uint32_t bands = 0;                          // where mask != 0: in ent_bands_
  };
  struct EnteredBands {
    std::array<int64_t, kRelayBands> band{};  // elements by band
    uint64_t late_seq = 0;                    // its first piece above band 0's place
  };
  // enter() on a record: the piece's place counted from `seq`.
  void enter_rec(EnteredRec& rec, int64_t volume, uint32_t band, bool own, uint64_t& seq) {
    ++rec.pieces;
    rec.regions += own ? 1 : 0;
    if (band == 0) {
      rec.plain += volume;
      if (rec.plain_seq == kNoSeq) rec.plain_seq = seq++;
      return;
    }
    if (rec.mask == 0) {
      rec.bands = static_cast<uint32_t>(ent_bands_.size());
      ent_bands_.emplace_back().late_seq = seq++;
    }
    rec.mask |= 1u << band;
    ent_bands_[rec.bands].band[band] += volume;
  }
  // entered_account for entry e (at i) on its records ent_touched_,
  // ent_plain_, ent_late_.
  void ent_account(const TensorCtx& t, uint32_t e, int64_t esum, int64_t copies,
                   int64_t& group_pieces);
  std::vector<EnteredRec> ent_recs_;
  std::vector<EnteredBands> ent_bands_;
  struct EnteredAt {  // per (entry, holder position): its record, where tick is the region's
    uint32_t tick = 0, rec = 0;
  };
  std::vector<EnteredAt> ent_at_;
  uint32_t ent_tick_ = 0;
  static constexpr size_t kEnteredAtMax = size_t{1} << 23;  // 64 MiB of EnteredAt
  std::vector<uint32_t> ent_begin_, ent_order_, ent_touched_, ent_plain_, ent_late_;
  int64_t a2a_runs_ = 0;  // a2a_runs_taken()
  // The relay part `part` (bands pb) of source position p, taken for
  // every entry of the cell (a2a_region, a2a_runs).
  void a2a_relay_part(uint32_t p, const Box& part, const PartBands& pb, int64_t esum);
  // Each pair's relay streams counted at its source's first part (and
  // first banded one), entry by entry (a2a_.events).
  void a2a_count_events(const TensorCtx& t, uint32_t b0, size_t m);
  // The region's holders by host (part_holders_, holder_hosts_), and the
  // range of them on `host`.
  void sort_holders(const TensorCtx& t, const uint32_t* h, size_t n);
  std::pair<size_t, size_t> holders_on(int32_t host) const {
    const auto lo = std::lower_bound(holder_hosts_.begin(), holder_hosts_.end(),
                                     std::make_pair(host, uint32_t{0}));
    const auto hi =
        std::lower_bound(lo, holder_hosts_.end(), std::make_pair(host + 1, uint32_t{0}));
    return {static_cast<size_t>(lo - holder_hosts_.begin()),
            static_cast<size_t>(hi - holder_hosts_.begin())};
  }
  int64_t entered_sums_ = 0;  // entered_sums_taken()
  // A region's stage-0 parts of one entry (a2a_region), visited in order
  // with the figures of the part kPrefetchAhead on asked for ahead: an
  // entry's parts are strided over the region's, and each visit missed
  // the cache (about a sixth of `reshard plan` on the 4,096-device MoE
  // sync of bench/plan_scale.py).
  static constexpr size_t kPrefetchAhead = 8;
  std::vector<uint32_t> stage0_parts_;
  void prefetch_part(size_t j) const;
  // The same for the relay part j of the region: its bands and its
  // source's sums (a2a_region).
  void prefetch_relay_part(size_t j) const;
  // Hands the cell's pending pieces and streams, taken alike so far, to
  // every (entry, source) pair, to go on one by one (after a2a_flush).
  void a2a_leave(const TensorCtx& t, uint32_t b0, size_t m, bool indexed);

  // The all-to-all cells' stage-1 streams (entry of source position p ->
  // entry at position i) kept per cell in a table of the cell's pairs
  // rather than in relay_bytes[1]: each source's pairs counted in
  // relay_pairs once per pass, their band-0 bytes summed in place,
  // p-major, and added to relay_bytes[1] once per pass by drain(). The
  // groups that share a cell's devices (an MoE sync's 32 groups over tp
  // share 8 cells) looked each pair up in a table of millions of streams
  // once per group and added to it once per flush, each a cache miss
  // (`reshard plan` on the MoE sync: 17.6 -> 14.8 CPU s at 8,192 devices,
  // 68.5 -> 54.1 at 16,384). relay_bytes is read only at the pass's end
  // (its order of insertion matters to nothing: stream_map.h), so the
  // figures are the same. Tables beyond kA2aStreamBytes in all go on in
  // relay_bytes as before. A source's first part in the cell counts its
  // pairs with every other entry at once (a2a_region), so `counted` is
  // kept per source.
  struct A2aStreams {
    std::vector<uint32_t> dense;   // per position: the entry's dense device
    std::vector<int64_t> plain;    // per (p, i), at p * m + i: band-0 bytes (track_pairs)
    std::vector<uint8_t> counted;  // per source p: its pairs in relay_pairs[1]
  };
  static constexpr size_t kA2aStreamBytes = size_t{256} << 20;
  // The table of the cell with entries cell_entries[b0 .. b0 + m) of t,
  // made where absent; null where it would pass kA2aStreamBytes.
  A2aStreams* a2a_streams(const TensorCtx& t, uint32_t b0, size_t m);
  std::deque<A2aStreams> a2a_tables_;
  std::unordered_multimap<uint64_t, size_t> a2a_table_at_;  // by the dense devices' hash
  size_t a2a_table_bytes_ = 0;
  A2aStreams* a2a_cur_ = nullptr;  // the cell's, while a2a_.on

  StatsPass& p_;
  int64_t part_visits_ = 0;  // relay_parts_visited()
  int64_t direct_sums_ = 0;  // direct_sums_taken()
  Route route_;
  std::vector<std::vector<Pending>> pending_;
  std::vector<std::vector<StreamRef>> streams_;  // per entry of the cell
  std::vector<uint8_t> several_;                 // per entry of the cell: another entry on its host
  std::vector<size_t> slot_;                     // per entry of the cell: Enumerator::host_slot
  std::vector<PartBands> part_bands_;            // per part of the region's route
  std::vector<uint32_t> part_holders_;           // the region's holders by host
  std::vector<std::pair<int32_t, uint32_t>> holder_hosts_;  // (host, position in the holders)
  std::vector<std::pair<size_t, size_t>> holder_range_;  // per part: its holders in part_holders_
  std::vector<std::pair<int32_t, uint32_t>> by_host_cell_;
  std::vector<int64_t> recv_index_;  // per host of the cell (Enumerator::receiving_table)
  std::vector<size_t> recv_host_;    // per receiving host
  // Per cell: each entry's position in it, and per (entry, source entry)
  // of the cell its PairSlots, valid where its stamp is the cell's tick.
  // Stamp and slots side by side (one cache miss a lookup), 16 bytes a
  // pair: the pending piece's and the streams' indices in separate tables
  // took 24 bytes a pair and a miss on each (find_pending and stream_ref
  // were about a tenth of `reshard plan` on the 4,096-device MoE sync).
  struct StampedSlots {
    uint32_t tick = 0;
    PairSlots slots;
  };
  std::vector<uint32_t> pos_in_cell_;
  std::vector<StampedSlots> pair_at_;
  uint32_t cell_tick_ = 0;
  // Where a cell is too large for the table: the same slots hashed, keyed
  // by the entry's position in the cell and the source entry.
  static uint64_t pair_key(size_t i, uint32_t src) { return uint64_t{i} << 32 | src; }
  // Open addressing, cleared where a cell's entries or their devices differ
  // from the cell before (hashed_cell; each value stamped with its cell,
  // HashedSlots) (std::unordered_map took a node per
  // entry: its lookups, allocations and frees were about a tenth of the
  // statistics of the 16,384-device MoE sync). Its values sit in the slots:
  // a StreamMap<uint32_t> (values in a vector of their own, named by an
  // index in the slot) measured 2% slower and 10 MB larger at 8,192
  // devices.
  template <class V>
  class CellIndex {
   public:
    void clear() {
      if (used_ == 0) return;
      std::fill(slots_.begin(), slots_.end(), Slot{});
      used_ = 0;
    }
    void prefetch(uint64_t key) const {
      if (!slots_.empty()) __builtin_prefetch(&slots_[slot_of(key)], 1);
    }
    V* find(uint64_t key) {
      if (slots_.empty()) return nullptr;
      for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
        if (slots_[s].key == key) return &slots_[s].value;
        if (slots_[s].key == kNone) return nullptr;
      }
    }
    // key's value, V{} inserted where absent; valid until the next
    // emplace.
    V& emplace(uint64_t key) {
      if ((used_ + 1) * 2 > slots_.size()) grow();
      for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
        Slot& x = slots_[s];
        if (x.key == key) return x.value;
        if (x.key == kNone) {
          x = Slot{key, V{}};
          ++used_;
          return x.value;
        }
      }
    }

   private:
    static constexpr uint64_t kNone = ~uint64_t{0};
    struct Slot {
      uint64_t key = kNone;
      V value{};
    };
    size_t slot_of(uint64_t key) const {
      return static_cast<size_t>((key * 0x9e3779b97f4a7c15ull) >> shift_);
    }
    void grow() {
      std::vector<Slot> old(slots_.empty() ? 64 : slots_.size() * 2);
      old.swap(slots_);
      mask_ = slots_.size() - 1;
      shift_ = 64 - __builtin_ctzll(slots_.size());
      for (const Slot& x : old) {
        if (x.key == kNone) continue;
        size_t s = slot_of(x.key);
        while (slots_[s].key != kNone) s = (s + 1) & mask_;
        slots_[s] = x;
      }
    }
    std::vector<Slot> slots_;
    size_t used_ = 0, mask_ = 0;
    int shift_ = 64;
  };
  CellIndex<HashedSlots> pair_map_;
  // A cell whose entries take each source's relay parts alike.
  AllToAllCell a2a_;
};

}  // namespace reshard::planning
