#include "plan/rounds.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>

#include "layout/element_range.h"
#include "reshard/dtype.h"
#include "reshard/error.h"
#include "util/parallel.h"

namespace reshard::planning {

int64_t round_chunk(int64_t budget, DeviceLoad a, DeviceLoad b, int64_t stream_bytes) {
  const int64_t reserve = 16 * std::max(a.peers, b.peers);
  const int64_t total = std::max({a.bytes, b.bytes, stream_bytes, int64_t{1}});
  if (budget <= reserve || stream_bytes <= 0) return 8;  // rejected by the planner's validation
  uint64_t w = static_cast<uint64_t>(budget - reserve);
  if constexpr (kCutWindowDiv > 0) {
    // floor(w * D / (D + 1)) without overflow.
    constexpr uint64_t D = kCutWindowDiv;
    w = w / (D + 1) * D + w % (D + 1) * D / (D + 1);
  }
  // floor(w * stream_bytes / total); 64-bit arithmetic when the product fits
  // (the common case: a 128-bit division is several times slower).
  const uint64_t sb = static_cast<uint64_t>(stream_bytes);
  uint64_t product, share;
  if (!__builtin_mul_overflow(w, sb, &product))
    share = product / static_cast<uint64_t>(total);
  else
    share = static_cast<uint64_t>(static_cast<unsigned __int128>(w) * sb /
                                  static_cast<uint64_t>(total));
  return static_cast<int64_t>(share) + 8;
}

int64_t RoundRule::chunk(uint32_t stage, DeviceLoad a, DeviceLoad b, int64_t stream_bytes) const {
  int64_t c =
      budget > 0 ? round_chunk(budget, a, b, stream_bytes) : std::max<int64_t>(stream_bytes, 8);
  const int64_t p = stage < pipeline.size() ? pipeline[stage] : 0;
  if (p <= 0 || stream_bytes <= 0) return c;
  const int64_t total = std::max({a.bytes, b.bytes, stream_bytes, int64_t{1}});
  const auto share =
      static_cast<int64_t>(static_cast<unsigned __int128>(p) * static_cast<uint64_t>(stream_bytes) /
                           static_cast<uint64_t>(total));
  return std::min(c, std::max(share + 8, std::min(stream_bytes, min_chunk)));
}

namespace {

// Piece p's region: its own, or the overlap of its entries' boxes where it
// names none (kOverlapRegion).
Box piece_region(const Piece& p, const TensorSpec& t, const Regions& regions) {
  return p.region == kOverlapRegion ? intersect(t.src.box(p.src_entry), t.dst.box(p.dst_entry))
                                    : regions[p.region];
}

// Piece p, of region `region`, restricted to [x0, x1) along dimension d,
// put into `bucket` and its bytes (per_index an index of d) into `bytes`:
// p itself where that is all of it, else a copy naming a new region.
void bucket_run(const Piece& p, const Box& region, int d, int64_t x0, int64_t x1, int64_t per_index,
                Regions& regions, std::vector<Piece>& bucket, int64_t& bytes) {
  bytes += (x1 - x0) * per_index;
  if (x0 == region.lo[d] && x1 == region.hi[d]) {
    bucket.push_back(p);
    return;
  }
  Box sub = region;
  sub.lo[d] = x0;
  sub.hi[d] = x1;
  if (regions.size() >= kOverlapRegion)
    fail(ErrorCode::kOutOfRange, "plan: more than 2^32 regions");
  Piece q = p;
  q.region = static_cast<uint32_t>(regions.size());
  regions.push_back(sub);
  bucket.push_back(q);
}

// Where a round of a stream starts: element `elem` of piece `piece` (an index
// into the direction's piece array), at byte `pos` of the stream. A cut
// inside a piece (elem > 0) also names the regions of the piece's fragments
// on either side of it: `before` ends at the cut (it starts at the piece's
// previous cut or at 0), `after` starts at it.
struct Bound {
  uint64_t piece;
  int64_t elem;
  int64_t pos;
  uint32_t before, before_n, after, after_n;
};

// Chunk and round count of every segment of one direction (a message of
// build_part: one band of a stream, rounds.h); segment i has rounds[i] - 1
// cuts, from first_bound[i] on, and starts at its stream's round offset[i];
// its stream has all[i] rounds.
// Spread cuts (RoundRule::spread): per cut (indexed like the bounds) its
// byte x_k and key bound k, and per segment whether it takes them.
struct Streams {
  std::vector<int64_t> chunks, rounds, offset, all;
  std::vector<size_t> first_bound;
  std::vector<char> spread;
  std::vector<int64_t> target;
  std::vector<int32_t> key;
};

// The spread cuts of the stream of message m (RoundRule::spread): appends
// each kept cut's byte and key bound; returns its rounds.
int64_t spread_cuts(const Message& m, const RoundRule& rule, const std::vector<Piece>& pieces,
                    std::span<const int64_t> pbytes, const std::vector<double>& shares,
                    Streams& s) {
  std::vector<SpreadRun> runs;  // a run of one tensor's pieces
  for (uint64_t j = m.first_piece; j < m.first_piece + m.num_pieces; ++j) {
    const uint32_t t = pieces[j].tensor;
    if (j == m.first_piece || pieces[j - 1].tensor != t)
      runs.push_back({0, shares[2 * t], shares[2 * t + 1]});
    runs.back().bytes += pbytes[j];
  }
  return spread_stream_cuts(rule, m.stage, m.bytes, runs, &s.target, &s.key).kept + 1;
}

bool same_stream(const Message& a, const Message& b) {
  return a.stage == b.stage && a.src_device == b.src_device && a.dst_device == b.dst_device;
}

Streams size_streams(const std::vector<Message>& msgs, const RoundRule& rule,
                     const std::function<DeviceLoad(int64_t, uint32_t)>& load,
                     const std::vector<Piece>& pieces, std::span<const int64_t> pbytes,
                     const std::vector<double>& shares) {
  const size_t n = msgs.size();
  Streams s{std::vector<int64_t>(n),
            std::vector<int64_t>(n),
            std::vector<int64_t>(n),
            std::vector<int64_t>(n),
            std::vector<size_t>(n + 1, 0),
            std::vector<char>(n, 0),
            {},
            {}};
  for (size_t a = 0; a < n;) {
    // The stream's segments [a, b) share the chunk of its whole bytes.
    size_t b = a + 1;
    int64_t bytes = msgs[a].bytes;
    while (b < n && same_stream(msgs[b], msgs[a])) bytes += msgs[b++].bytes;
    const Message& m = msgs[a];
    const bool spread = b == a + 1 && m.num_pieces > 0 && rule.spread_stage(m.stage);
    const int64_t chunk =
        spread
            ? std::max<int64_t>(1, bytes / (static_cast<int64_t>(rule.spread.size()) + 1))
            : rule.chunk(m.stage, load(m.src_device, m.stage), load(m.dst_device, m.stage), bytes);
    int64_t offset = 0;
    for (size_t i = a; i < b; ++i) {
      s.chunks[i] = chunk;
      s.spread[i] = spread;
      if (spread) {
        s.rounds[i] = spread_cuts(m, rule, pieces, pbytes, shares, s);
      } else {
        s.rounds[i] =
            std::max<int64_t>(stream_rounds(msgs[i].bytes, chunk), msgs[i].num_pieces > 0 ? 1 : 0);
        if (!rule.spread.empty()) {  // keep target and key indexed like the bounds
          s.target.resize(s.target.size() +
                          static_cast<size_t>(std::max<int64_t>(s.rounds[i] - 1, 0)));
          s.key.resize(s.target.size());
        }
      }
      s.offset[i] = offset;
      offset += s.rounds[i];
      if (offset - 1 >= int64_t{1} << 31)
        fail(ErrorCode::kOutOfRange, "options.staging_budget_bytes: more than 2^31 rounds");
      s.first_bound[i + 1] =
          s.first_bound[i] + static_cast<size_t>(std::max<int64_t>(s.rounds[i] - 1, 0));
    }
    for (size_t i = a; i < b; ++i) s.all[i] = offset;
    a = b;
  }
  return s;
}

// Where find_cuts puts fragment regions: appended to a vector, counted
// only, or written from a given index on into storage sized beforehand.
struct AppendSink {
  Regions& v;
  size_t size() const { return v.size(); }
  void push(const Box& b) { v.push_back(b); }
};
struct CountSink {
  size_t n = 0;
  size_t size() const { return n; }
  void push(const Box&) { ++n; }
};
struct PlaceSink {
  Regions& v;  // sized, its stride the highest rank: slots are only placed
  size_t next;
  size_t size() const { return next; }
  void push(const Box& b) { v.place(next++, b); }
};

// Phase 1 of cutting one direction: the cuts of streams [s0, s1) (rules 1-3
// of rounds.h), written to their slots of `bounds`, and the regions of the
// pieces they split, stream by stream, handed to `frags` (a Sink: size() is
// the region index the next push(box) gets). `regions` are the part's
// regions before cutting. Work is proportional to the pieces plus the cuts:
// the region of a piece is only computed when a cut falls inside it.
template <class Sink>
void find_cuts(const std::vector<Message>& msgs, const std::vector<Piece>& pieces,
               std::span<const int64_t> bytes, const Streams& streams, const Regions& regions,
               const std::vector<TensorSpec>& tensors, size_t s0, size_t s1,
               std::vector<Bound>& bounds, Sink& frags) {
  const auto& chunks = streams.chunks;
  const auto& rounds = streams.rounds;
  const auto& first_bound = streams.first_bound;
  std::vector<Box> boxes;
  auto add_fragment = [&](const Box& region, int64_t a, int64_t b, uint32_t& first, uint32_t& n) {
    first = static_cast<uint32_t>(frags.size());
    // Whole slabs of the outermost dimension (rule 2's usual outcome): one box.
    const int64_t slab0 = region.rank > 0 ? region.volume() / region.extent(0) : 1;
    if (region.rank > 0 && a % slab0 == 0 && b % slab0 == 0) {
      Box box = region;
      box.lo[0] = region.lo[0] + a / slab0;
      box.hi[0] = region.lo[0] + b / slab0;
      frags.push(box);
      n = 1;
      return;
    }
    boxes.clear();
    element_range_boxes(region, a, b, boxes);
    n = static_cast<uint32_t>(boxes.size());
    for (const Box& box : boxes) frags.push(box);
  };
  for (size_t mi = s0; mi < s1; ++mi) {
    const int64_t chunk = chunks[mi], window = round_window(chunk);
    Bound* bound = bounds.data() + first_bound[mi];
    uint64_t j = msgs[mi].first_piece;
    int64_t o = 0;  // stream offset of piece j
    // The piece holding the previous cut inside a piece, its region and
    // that cut's bound.
    uint64_t split_piece = ~uint64_t{0};
    Box region;
    Bound* prev = nullptr;
    int64_t e = 1;
    for (int64_t k = 1; k < rounds[mi]; ++k, ++bound) {
      const int64_t x = streams.spread[mi] ? streams.target[first_bound[mi] + k - 1] : k * chunk;
      while (o + bytes[j] <= x) o += bytes[j++];
      if (o > x - window) {  // 1. a piece boundary in the window
        *bound = {j, 0, o, 0, 0, 0, 0};
        continue;
      }
      if (split_piece != j) {
        if (prev) {  // the last fragment of the previous split piece
          const int64_t n = bytes[split_piece] / e;
          add_fragment(region, prev->elem, n, prev->after, prev->after_n);
          prev = nullptr;
        }
        const Piece& p = pieces[j];
        const TensorSpec& t = tensors[p.tensor];
        e = wire_size(t);
        region = piece_region(p, t, regions);
        split_piece = j;
      }
      const int64_t rel = x - o;
      int64_t y = -1;
      int64_t slab = bytes[j] / e;  // elements of the region
      for (int d = 0; d < region.rank && y < 0; ++d) {
        slab /= region.extent(d);  // elements of one slab of dimension d
        const int64_t step = slab * e;
        const int64_t cand = rel / step * step;
        if (o + cand > x - window) y = cand;  // 2. a slab boundary in the window
      }
      if (y < 0) y = rel / e * e;  // 3. the last element boundary
      if (y == 0) {                // rules 2-3 landed on the piece's start
        *bound = {j, 0, o, 0, 0, 0, 0};
        continue;
      }
      *bound = {j, y / e, o + y, 0, 0, 0, 0};
      if (prev) {
        add_fragment(region, prev->elem, bound->elem, prev->after, prev->after_n);
        bound->before = prev->after;
        bound->before_n = prev->after_n;
      } else {
        add_fragment(region, 0, bound->elem, bound->before, bound->before_n);
      }
      prev = bound;
    }
    if (prev) add_fragment(region, prev->elem, bytes[split_piece] / e, prev->after, prev->after_n);
  }
}

// Phase 2: the messages of one direction stage by stage and round by round,
// in each round the streams of the stage still running in stream order
// (messages come one per segment, sorted by (stage, peer, own, band); the
// output is sorted by (stage, round, peer, own)). The output messages are
// laid out stream by stream (emit_stream_major), or round by round where a
// segment has no round (emit_round_major, which set_stream_major_rounds(false)
// forces); then the pieces are copied, ranges of segments or of messages on
// up to `threads` threads.
namespace {
std::atomic<bool> stream_major_on{true};
}  // namespace

// Round r of segment i runs from cut r - 1 (or the segment's start) to cut r
// (or its end).
struct RoundRanges {
  const std::vector<Message>& msgs;
  const Streams& streams;
  const std::vector<Bound>& bounds;
  void operator()(size_t i, uint32_t r, Bound& cur, Bound& end) const {
    const Message& m = msgs[i];
    const size_t f = streams.first_bound[i];
    cur = r == 0 ? Bound{m.first_piece, 0, 0, 0, 0, 0, 0} : bounds[f + r - 1];
    end = r + 1 == streams.rounds[i] ? Bound{m.first_piece + m.num_pieces, 0, m.bytes, 0, 0, 0, 0}
                                     : bounds[f + r];
  }
  // Round r of segment i as a message of stage round `round` (first_piece
  // left to the caller).
  Message message(size_t i, uint32_t r, uint32_t round) const {
    Bound cur, end;
    (*this)(i, r, cur, end);
    Message mr = msgs[i];
    mr.round = round;
    mr.bytes = end.pos - cur.pos;
    // The fragment after the round's first cut, the whole pieces, and the
    // fragment before the round's last cut unless that piece's fragment is
    // the first one (both cuts in one piece).
    uint64_t n = 0, j = cur.piece;
    if (cur.elem > 0) {
      n += cur.after_n;
      ++j;
    }
    if (end.piece > j) n += end.piece - j;
    if (end.elem > 0 && !(cur.elem > 0 && cur.piece == end.piece)) n += end.before_n;
    mr.num_pieces = n;
    return mr;
  }
};

// The output messages, their segments and segment rounds, in output order
// (first_piece set): stage by stage, round by round, the streams still
// running in stream order (a stream's segments one after the other: the
// next takes the place of the last, which stays in segment order). Reads
// the bounds round-major: at 16,384 devices, 16 K streams of 234 rounds, one
// page and a cache miss a message.
void emit_round_major(const std::vector<Message>& msgs, const Streams& streams,
                      const RoundRanges& ranges, std::vector<Message>& out_msgs,
                      std::vector<uint32_t>& stream_of, std::vector<uint32_t>& local_of) {
  const size_t nmsg = msgs.size();
  const auto& rounds = streams.rounds;
  std::vector<uint32_t> active;
  active.reserve(nmsg);
  uint64_t total = 0;
  for (uint32_t first = 0; first < nmsg;) {
    uint32_t last = first;
    while (last < nmsg && msgs[last].stage == msgs[first].stage) ++last;
    active.clear();
    for (uint32_t i = first; i < last; ++i)
      if (i == first || !same_stream(msgs[i], msgs[i - 1])) active.push_back(i);
    for (uint32_t r = 0; !active.empty(); ++r) {
      size_t still = 0;
      for (uint32_t i : active) {
        const auto local = static_cast<uint32_t>(r - streams.offset[i]);
        Message mr = ranges.message(i, local, r);
        mr.first_piece = total;
        total += mr.num_pieces;
        out_msgs.push_back(mr);
        stream_of.push_back(i);
        local_of.push_back(local);
        if (local + 1 != rounds[i])
          active[still++] = i;
        else if (i + 1 < last && same_stream(msgs[i + 1], msgs[i]))
          active[still++] = i + 1;
      }
      active.resize(still);
    }
    first = last;
  }
}

// emit_round_major's output, written stream by stream: stream s is running
// in rounds [0, all[s]), so its message of round r goes after those of
// rounds below r and of the streams before s running in round r (a cursor
// per round). Bounds and messages are read in order and written to one
// place per round. `out_of[seg_base[i] + r]`: the output message of round r
// of segment i; stream_of and local_of only where `segments` asks for them
// (to renumber late forwards). Every segment has a round (streams.rounds[i]
// >= 1).
void emit_stream_major(const std::vector<Message>& msgs, const Streams& streams,
                       const RoundRanges& ranges, const std::vector<size_t>& seg_base,
                       bool segments, std::vector<Message>& out_msgs,
                       std::vector<uint32_t>& stream_of, std::vector<uint32_t>& local_of,
                       std::vector<uint32_t>& out_of) {
  const size_t nmsg = msgs.size(), nout = seg_base[nmsg];
  const auto& rounds = streams.rounds;
  out_msgs.resize(nout);
  stream_of.resize(segments ? nout : 0);
  local_of.resize(segments ? nout : 0);
  out_of.resize(nout);
  std::vector<uint32_t> heads;
  std::vector<size_t> cursor;
  size_t at = 0;  // the stage's first output message
  for (size_t first = 0; first < nmsg;) {
    size_t last = first;
    while (last < nmsg && msgs[last].stage == msgs[first].stage) ++last;
    heads.clear();
    int64_t most = 0;
    for (size_t i = first; i < last; ++i) {
      if (i != first && same_stream(msgs[i], msgs[i - 1])) continue;
      heads.push_back(static_cast<uint32_t>(i));
      most = std::max(most, streams.all[i]);
    }
    // cursor[r]: where round r's next message goes (streams running in
    // round r: those with more than r rounds).
    cursor.assign(static_cast<size_t>(most) + 1, 0);
    for (uint32_t h : heads) ++cursor[static_cast<size_t>(streams.all[h])];
    size_t running = heads.size(), next = at;
    for (size_t r = 0; r < cursor.size(); ++r) {
      const size_t ending = cursor[r];  // streams of exactly r rounds
      running -= ending;
      cursor[r] = next;
      next += running;
    }
    for (uint32_t h : heads) {
      size_t i = h;
      for (int64_t r = 0; r < streams.all[h]; ++r) {
        while (r >= streams.offset[i] + rounds[i]) ++i;
        const auto local = static_cast<uint32_t>(r - streams.offset[i]);
        const size_t pos = cursor[static_cast<size_t>(r)]++;
        out_msgs[pos] = ranges.message(i, local, static_cast<uint32_t>(r));
        if (segments) {
          stream_of[pos] = static_cast<uint32_t>(i);
          local_of[pos] = local;
        }
        out_of[seg_base[i] + local] = static_cast<uint32_t>(pos);
      }
    }
    at = next;
    first = last;
  }
  uint64_t total = 0;
  for (Message& m : out_msgs) {
    m.first_piece = total;
    total += m.num_pieces;
  }
}

void emit_rounds(std::vector<Message>& msgs, std::vector<Piece>& pieces, const Streams& streams,
                 const std::vector<Bound>& bounds, const RoundRule& rule, int threads) {
  const size_t nmsg = msgs.size();
  const auto& rounds = streams.rounds;
  const RoundRanges range_of{msgs, streams, bounds};
  // 1. The output messages and where their pieces go.
  std::vector<Message> out_msgs;
  std::vector<uint32_t> stream_of, local_of;  // per output message: segment, its round
  std::vector<uint32_t> out_of;               // stream-major: per segment round, its message
  std::vector<size_t> seg_base(nmsg + 1, 0);  // stream-major: segment i's first round
  bool stream_major = stream_major_on.load(std::memory_order_relaxed);
  for (size_t i = 0; i < nmsg; ++i) {
    stream_major &= rounds[i] >= 1;
    seg_base[i + 1] = seg_base[i] + static_cast<size_t>(std::max<int64_t>(rounds[i], 0));
  }
  stream_major &= seg_base[nmsg] < (size_t{1} << 32);
  if (stream_major) {
    emit_stream_major(msgs, streams, range_of, seg_base, !rule.spans.empty(), out_msgs, stream_of,
                      local_of, out_of);
  } else {
    out_msgs.reserve(nmsg + bounds.size());
    stream_of.reserve(nmsg + bounds.size());
    local_of.reserve(nmsg + bounds.size());
    emit_round_major(msgs, streams, range_of, out_msgs, stream_of, local_of);
  }
  uint64_t total = 0;
  for (const Message& m : out_msgs) total += m.num_pieces;
  // Forwards of a pipelined plan numbered late (RoundRule::round_number):
  // renumbered, and the messages sorted by (stage, round, stream) again.
  if (!rule.spans.empty()) {
    bool renumbered = false;
    for (size_t mi = 0; mi < out_msgs.size(); ++mi) {
      const size_t i = stream_of[mi];
      int64_t r =
          rule.round_number(out_msgs[mi].stage, streams.offset[i] + local_of[mi], streams.all[i]);
      if (streams.spread[i]) {  // by the key bound it starts (stage 0) or ends (forwards) at
        const int64_t l = local_of[mi];
        const size_t f = streams.first_bound[i];
        if (out_msgs[mi].stage == 0)
          r = l == 0 ? 0 : streams.key[f + static_cast<size_t>(l) - 1];
        else
          r = l + 1 < streams.rounds[i] ? streams.key[f + static_cast<size_t>(l)] - 1
                                        : static_cast<int64_t>(rule.spread.size());
      }
      renumbered |= r != out_msgs[mi].round;
      out_msgs[mi].round = static_cast<uint32_t>(r);
    }
    if (renumbered) {
      std::vector<uint32_t> order(out_msgs.size());
      for (size_t mi = 0; mi < order.size(); ++mi) order[mi] = static_cast<uint32_t>(mi);
      std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        const Message &x = out_msgs[a], &y = out_msgs[b];
        if (x.stage != y.stage) return x.stage < y.stage;
        return x.round != y.round ? x.round < y.round : stream_of[a] < stream_of[b];
      });
      std::vector<Message> m2(order.size());
      std::vector<uint32_t> s2(order.size()), l2(order.size());
      uint64_t at = 0;
      for (size_t mi = 0; mi < order.size(); ++mi) {
        m2[mi] = out_msgs[order[mi]];
        m2[mi].first_piece = at;
        at += m2[mi].num_pieces;
        s2[mi] = stream_of[order[mi]];
        l2[mi] = local_of[order[mi]];
      }
      out_msgs = std::move(m2);
      stream_of = std::move(s2);
      local_of = std::move(l2);
      if (stream_major)
        for (size_t mi = 0; mi < out_msgs.size(); ++mi)
          out_of[seg_base[stream_of[mi]] + local_of[mi]] = static_cast<uint32_t>(mi);
    }
  }
  if (stream_major) {  // phase 2 goes by segment and round
    stream_of = {};
    local_of = {};
  }
  // 2. The pieces.
  // Round r of segment i's pieces, handed to put(piece) and append(first, last).
  auto fill = [&](size_t i, uint32_t r, auto&& put, auto&& append) {
    Bound cur, end;
    range_of(i, r, cur, end);
    auto emit_fragment = [&](uint64_t j, uint32_t first, uint32_t n) {
      Piece q = pieces[j];
      for (uint32_t k = 0; k < n; ++k) {
        q.region = first + k;
        put(q);
      }
    };
    uint64_t j = cur.piece;
    if (cur.elem > 0) {
      emit_fragment(j, cur.after, cur.after_n);
      ++j;
    }
    if (end.piece > j)
      append(pieces.begin() + static_cast<ptrdiff_t>(j),
             pieces.begin() + static_cast<ptrdiff_t>(end.piece));
    if (end.elem > 0 && !(cur.elem > 0 && cur.piece == end.piece))
      emit_fragment(end.piece, end.before, end.before_n);
  };
  // Output message mi's pieces from `o` on.
  auto fill_at = [&](size_t i, uint32_t r, Piece* o) {
    fill(
        i, r, [&](const Piece& q) { *o++ = q; },
        [&](auto first, auto last) { o = std::copy(first, last, o); });
  };
  std::vector<Piece> out;
  if (stream_major) {  // segment by segment, each round to its message's place
    grow_to(out, total, threads);
    auto segments = [&](size_t i0, size_t i1) {
      for (size_t i = i0; i < i1; ++i)
        for (size_t r = 0; r < seg_base[i + 1] - seg_base[i]; ++r)
          fill_at(i, static_cast<uint32_t>(r),
                  out.data() + out_msgs[out_of[seg_base[i] + r]].first_piece);
    };
    if (threads <= 1) {
      segments(0, nmsg);
    } else {
      const std::vector<size_t> ranges = even_ranges(nmsg, 8 * static_cast<size_t>(threads));
      parallel_for(threads, ranges.size() - 1,
                   [&](size_t k) { segments(ranges[k], ranges[k + 1]); });
    }
  } else if (threads <= 1) {  // appending writes each piece once
    out.reserve(total);
    for (size_t mi = 0; mi < out_msgs.size(); ++mi)
      fill(
          stream_of[mi], local_of[mi], [&](const Piece& q) { out.push_back(q); },
          [&](auto first, auto last) { out.insert(out.end(), first, last); });
  } else {  // ranges of about equally many pieces
    grow_to(out, total, threads);
    const size_t parts = 8 * static_cast<size_t>(threads);
    std::vector<size_t> ranges{0};
    for (size_t k = 1; k < parts; ++k)
      ranges.push_back(static_cast<size_t>(std::partition_point(out_msgs.begin(), out_msgs.end(),
                                                                [&](const Message& m) {
                                                                  return m.first_piece <
                                                                         total * k / parts;
                                                                }) -
                                           out_msgs.begin()));
    ranges.push_back(out_msgs.size());
    parallel_for(threads, parts, [&](size_t k) {
      for (size_t mi = ranges[k]; mi < ranges[k + 1]; ++mi)
        fill_at(stream_of[mi], local_of[mi], out.data() + out_msgs[mi].first_piece);
    });
  }
  msgs = std::move(out_msgs);
  pieces = std::move(out);
}

}  // namespace

namespace {
void number_direction(std::vector<Message>& msgs, std::vector<Piece>& pieces) {
  bool banded = false;
  for (const Message& m : msgs) banded |= m.round > 0;
  if (!banded) return;  // one message per stream, round 0
  for (size_t i = 0; i < msgs.size(); ++i)
    msgs[i].round = i > 0 && same_stream(msgs[i], msgs[i - 1]) ? msgs[i - 1].round + 1 : 0;
  std::stable_sort(msgs.begin(), msgs.end(), [](const Message& a, const Message& b) {
    return a.stage != b.stage ? a.stage < b.stage : a.round < b.round;
  });
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Message& m : msgs) {
    const auto b = pieces.begin() + static_cast<ptrdiff_t>(m.first_piece);
    m.first_piece = out.size();
    out.insert(out.end(), b, b + static_cast<ptrdiff_t>(m.num_pieces));
  }
  pieces = std::move(out);
}
}  // namespace

KeyBlocks sub_blocks(std::span<const int64_t> shape, int64_t block) {
  KeyBlocks k;
  k.dim = static_cast<int>(std::max_element(shape.begin(), shape.end()) - shape.begin());
  k.block = std::max<int64_t>(block, 1);
  return k;
}

uint32_t sub_volumes(const Box& region, KeyBlocks k, int64_t subs, int64_t* out) {
  if (subs <= 0) return 0;
  if (region.rank == 0 || k.dim >= region.rank) {
    out[0] += region.volume();
    return 1;
  }
  const int64_t lo = region.lo[k.dim], hi = region.hi[k.dim];
  if (hi <= lo) return 0;
  const int64_t per = region.volume() / region.extent(k.dim);
  const int64_t total = subs * (subs + 1) / 2, b = k.block;
  auto at = [&](int64_t j) { return b * (j * (j + 1) / 2) / total; };
  // Indices of sub j in [0, n) of a block: [at(j), at(j + 1)) clipped.
  auto in_prefix = [&](int64_t j, int64_t n) {
    return std::max<int64_t>(0, std::min(n, at(j + 1)) - std::min(n, at(j)));
  };
  uint32_t mask = 0;
  const int64_t b0 = lo / b, b1 = (hi - 1) / b;
  for (int64_t j = 0; j < subs; ++j) {
    int64_t n;
    if (b0 == b1) {
      n = in_prefix(j, hi - b0 * b) - in_prefix(j, lo - b0 * b);
    } else {
      n = (at(j + 1) - at(j)) - in_prefix(j, lo - b0 * b)  // the first block from lo
          + (b1 - b0 - 1) * (at(j + 1) - at(j))            // the whole blocks
          + in_prefix(j, hi - b1 * b);                     // the last block up to hi
    }
    if (n <= 0) continue;
    out[j] += n * per;
    mask |= uint32_t{1} << j;
  }
  return mask;
}

namespace {
// Calls f(j, a, b) for each run [a, b) of sub j within one block of the
// indices [lo, hi) along D, in index order.
template <class F>
void each_sub_run(int64_t lo, int64_t hi, KeyBlocks k, int64_t subs, F&& f) {
  const int64_t total = subs * (subs + 1) / 2, b = k.block;
  for (int64_t bl = lo / b; bl * b < hi; ++bl)
    for (int64_t j = 0; j < subs; ++j) {
      const int64_t x0 = std::max(lo, bl * b + b * (j * (j + 1) / 2) / total);
      const int64_t x1 = std::min(hi, bl * b + b * ((j + 1) * (j + 2) / 2) / total);
      if (x1 > x0) f(j, x0, x1);
    }
}
}  // namespace

int64_t sub_pieces(const Box& region, KeyBlocks k, int64_t subs) {
  if (subs <= 0) return 0;
  if (region.rank == 0 || k.dim >= region.rank) return 1;
  const int64_t lo = region.lo[k.dim], hi = region.hi[k.dim], b = k.block;
  if (hi <= lo) return 0;
  const int64_t b0 = lo / b, b1 = (hi - 1) / b;
  int64_t n = 0;
  auto one = [&](int64_t, int64_t, int64_t) { ++n; };
  if (b1 - b0 <= 2) {
    each_sub_run(lo, hi, k, subs, one);
    return n;
  }
  // The two edge blocks, then the whole ones between them, alike.
  each_sub_run(lo, (b0 + 1) * b, k, subs, one);
  each_sub_run(b1 * b, hi, k, subs, one);
  const int64_t edges = n;
  n = 0;
  each_sub_run(0, b, k, subs, one);
  return edges + n * (b1 - b0 - 1);
}

void split_subs(ProcessPart& part, const std::vector<TensorSpec>& tensors, const RoundRule& rule,
                std::span<const int64_t> send_bytes, std::span<const int64_t> recv_bytes) {
  if (rule.subs > 32) fail(ErrorCode::kInternal, "split_subs: more than 32 subs");
  std::vector<KeyBlocks> blocks(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    blocks[i] = sub_blocks(tensors[i].shape, rule.sub_block);
  auto direction = [&](std::vector<Message>& msgs, std::vector<Piece>& pieces,
                       std::span<const int64_t> bytes) {
    const auto nsubs = static_cast<size_t>(rule.subs);
    std::vector<Message> out_msgs;
    std::vector<Piece> out_pieces;
    std::vector<std::vector<Piece>> bucket(nsubs);
    std::vector<int64_t> bucket_bytes(nsubs, 0);
    for (const Message& m : msgs) {
      for (uint64_t i = m.first_piece; i < m.first_piece + m.num_pieces; ++i) {
        const Piece& p = pieces[i];
        const TensorSpec& t = tensors[p.tensor];
        const KeyBlocks k = blocks[p.tensor];
        const Box region = piece_region(p, t, part.regions);
        if (region.rank == 0 || k.dim >= region.rank) {
          bucket[0].push_back(p);
          bucket_bytes[0] += bytes[i];
          continue;
        }
        const int64_t lo = region.lo[k.dim], hi = region.hi[k.dim];
        const int64_t per_index = bytes[i] / region.extent(k.dim);
        each_sub_run(lo, hi, k, rule.subs, [&](int64_t j, int64_t x0, int64_t x1) {
          const auto js = static_cast<size_t>(j);
          bucket_run(p, region, k.dim, x0, x1, per_index, part.regions, bucket[js],
                     bucket_bytes[js]);
        });
      }
      for (size_t j = 0; j < nsubs; ++j) {
        if (bucket[j].empty()) continue;
        Message mj = m;
        mj.round = 0;
        mj.sub = static_cast<uint32_t>(j);
        mj.bytes = bucket_bytes[j];
        mj.first_piece = out_pieces.size();
        mj.num_pieces = bucket[j].size();
        out_pieces.insert(out_pieces.end(), bucket[j].begin(), bucket[j].end());
        out_msgs.push_back(mj);
        bucket[j].clear();
        bucket_bytes[j] = 0;
      }
    }
    msgs = std::move(out_msgs);
    pieces = std::move(out_pieces);
  };
  direction(part.sends, part.send_pieces, send_bytes);
  direction(part.recvs, part.recv_pieces, recv_bytes);
}

KeyBlocks key_blocks(std::span<const int64_t> shape, int64_t esize, int64_t granule) {
  KeyBlocks k;
  if (shape.empty()) return k;
  // Bytes of one slab of dimension d: the elements of one index of d.
  int64_t slab = std::max<int64_t>(esize, 1);
  for (size_t d = 1; d < shape.size(); ++d) slab *= std::max<int64_t>(shape[d], 1);
  while (k.dim + 1 < static_cast<int>(shape.size()) && slab > granule) {
    ++k.dim;
    slab /= std::max<int64_t>(shape[static_cast<size_t>(k.dim)], 1);
  }
  k.block = std::max<int64_t>(1, granule / std::max<int64_t>(slab, 1));
  return k;
}

int64_t KeyOffsets::next(std::span<const int64_t> shape, int64_t esize) {
  return seen_[{std::vector<int64_t>(shape.begin(), shape.end()), esize}]++;
}

namespace {

// The shortest non-empty extent along `dim` of the layout's shards (a
// tiled layout's chunk), 0 where it holds none.
int64_t shortest_shard(const Layout& l, int dim) {
  if (dim >= l.rank()) return 0;
  if (l.tiled()) return l.split(dim).chunk();
  int64_t least = 0;
  for (size_t e = 0; e < l.num_entries(); ++e) {
    const Box b = l.box(e);
    if (b.empty()) continue;
    const int64_t x = b.extent(dim);
    least = least == 0 ? x : std::min(least, x);
  }
  return least;
}

}  // namespace

std::vector<KeyBlocks> tensor_key_blocks(const std::vector<TensorSpec>& tensors, int64_t granule,
                                         int64_t keys, bool fine) {
  std::vector<KeyBlocks> blocks(tensors.size());
  KeyOffsets offsets;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    const int64_t esize = wire_size(t);
    KeyBlocks& k = blocks[i];
    k = key_blocks(t.shape, esize, granule);
    int64_t shard = shortest_shard(t.src, k.dim);
    const int64_t d = shortest_shard(t.dst, k.dim);
    if (d > 0 && (shard == 0 || d < shard)) shard = d;
    if (fine && shard > 0 && keys > 0)
      k.block = std::clamp<int64_t>(shard / (kKeyBlocksPerShard * keys), 1, k.block);
    k.offset = offsets.next(t.shape, esize);
  }
  return blocks;
}

uint32_t key_mask(const Box& region, KeyBlocks k, int64_t keys) {
  if (keys <= 0) return 0;
  if (region.rank == 0) return uint32_t{1} << (k.offset % keys);
  const int64_t b0 = region.lo[k.dim] / k.block, b1 = (region.hi[k.dim] - 1) / k.block;
  if (b1 - b0 + 1 >= keys) return keys >= 32 ? ~uint32_t{0} : (uint32_t{1} << keys) - 1;
  uint32_t m = 0;
  for (int64_t b = b0; b <= b1; ++b) m |= uint32_t{1} << ((b + k.offset) % keys);
  return m;
}

int64_t key_volumes(const Box& region, KeyBlocks k, int64_t keys, int64_t* out) {
  if (keys <= 0) return 0;
  if (region.rank == 0) {
    out[k.offset % keys] += 1;
    return 1;
  }
  const int64_t lo = region.lo[k.dim], hi = region.hi[k.dim];
  if (hi <= lo) return 0;
  const int64_t per = region.volume() / region.extent(k.dim);  // elements of one index of D
  const int64_t b0 = lo / k.block, b1 = (hi - 1) / k.block;
  auto part = [&](int64_t b) {
    out[(b + k.offset) % keys] +=
        (std::min(hi, (b + 1) * k.block) - std::max(lo, b * k.block)) * per;
  };
  if (b1 - b0 <= 2 * keys) {
    for (int64_t b = b0; b <= b1; ++b) part(b);
    return b1 - b0 + 1;
  }
  // The two edge blocks, then the whole blocks between them: n of them
  // from block b0 + 1 on, n / K of each key and one more of the first n % K.
  part(b0);
  part(b1);
  const int64_t n = b1 - b0 - 1, whole = n / keys, extra = n % keys;
  for (int64_t i = 0; i < keys; ++i) {
    const int64_t r = (b0 + 1 + i + k.offset) % keys;
    out[r] += (whole + (i < extra ? 1 : 0)) * k.block * per;
  }
  return b1 - b0 + 1;
}

namespace {
// Keyed cuts of one direction (rounds.h): messages come one per stream (a
// pipelined plan's, order_pieces); each becomes one message per key it
// holds, its pieces split at block boundaries (a box restricted along one
// dimension stays one box), kept in their order. Messages are then sorted
// by (stage, round), streams in their order within.
void keyed_direction(std::vector<Message>& msgs, std::vector<Piece>& pieces,
                     std::span<const int64_t> bytes, Regions& regions,
                     const std::vector<TensorSpec>& tensors, const std::vector<KeyBlocks>& blocks,
                     int64_t nkeys) {
  struct Out {
    Message m;
    std::vector<Piece> p;
  };
  std::vector<Out> out;
  std::vector<std::vector<Piece>> bucket(static_cast<size_t>(nkeys));
  std::vector<int64_t> bucket_bytes(static_cast<size_t>(nkeys));
  for (const Message& m : msgs) {
    for (uint64_t j = m.first_piece; j < m.first_piece + m.num_pieces; ++j) {
      const Piece& p = pieces[j];
      const TensorSpec& t = tensors[p.tensor];
      const KeyBlocks k = blocks[p.tensor];
      const Box region = piece_region(p, t, regions);
      const int64_t b0 = region.rank == 0 ? 0 : region.lo[k.dim] / k.block;
      const int64_t b1 = region.rank == 0 ? 0 : (region.hi[k.dim] - 1) / k.block;
      if (b0 == b1) {
        const auto r = static_cast<size_t>((b0 + k.offset) % nkeys);
        bucket[r].push_back(p);
        bucket_bytes[r] += bytes[j];
        continue;
      }
      const int64_t per_index = bytes[j] / region.extent(k.dim);
      for (int64_t bl = b0; bl <= b1; ++bl) {
        const auto r = static_cast<size_t>((bl + k.offset) % nkeys);
        bucket_run(p, region, k.dim, std::max(region.lo[k.dim], bl * k.block),
                   std::min(region.hi[k.dim], (bl + 1) * k.block), per_index, regions, bucket[r],
                   bucket_bytes[r]);
      }
    }
    for (int64_t r = 0; r < nkeys; ++r) {
      auto& b = bucket[static_cast<size_t>(r)];
      if (b.empty()) continue;
      Message mr = m;
      mr.round = static_cast<uint32_t>(r);
      mr.bytes = bucket_bytes[static_cast<size_t>(r)];
      out.push_back({mr, std::move(b)});
      b = {};
      bucket_bytes[static_cast<size_t>(r)] = 0;
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Out& a, const Out& b) {
    return a.m.stage != b.m.stage ? a.m.stage < b.m.stage : a.m.round < b.m.round;
  });
  msgs.clear();
  pieces.clear();
  for (Out& o : out) {
    o.m.first_piece = pieces.size();
    o.m.num_pieces = o.p.size();
    pieces.insert(pieces.end(), o.p.begin(), o.p.end());
    msgs.push_back(o.m);
  }
}
}  // namespace

std::vector<double> spread_bounds(int64_t even) {
  std::vector<double> q;
  if (even < 1) return q;
  const auto e = static_cast<double>(even);
  for (int64_t i = 1; i < even; ++i) q.push_back(static_cast<double>(i) / e);
  q.push_back(1 - 1 / (2 * e));
  q.push_back(1 - 1 / (4 * e));
  return q;
}

double spread_forward_bound(const std::vector<double>& q, size_t k) {
  const double before = k >= 2 ? q[k - 2] : 0.0;
  return q[k - 1] - (q[k - 1] - before) / 2;
}

std::vector<double> key_shares(const std::vector<TensorSpec>& tensors) {
  const size_t n = tensors.size();
  std::map<std::pair<int64_t, size_t>, double> total;
  std::vector<std::pair<int64_t, size_t>> group(n);
  std::vector<double> bytes(n), before(n), out(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const TensorSpec& t = tensors[i];
    const size_t entries = t.src.num_entries();
    group[i] = {entries > 0 ? t.src.device(0) : -1, entries};
    bytes[i] = static_cast<double>(std::max<int64_t>(t.src.num_elements(), 0)) *
               static_cast<double>(std::max<int64_t>(dtype_size(t.dtype), 1));
    double& sum = total[group[i]];
    before[i] = sum;
    sum += bytes[i];
  }
  for (size_t i = 0; i < n; ++i) {
    const double t = std::max(total.at(group[i]), 1.0);
    out[2 * i] = before[i] / t;
    out[2 * i + 1] = (before[i] + bytes[i]) / t;
  }
  return out;
}

SpreadCuts spread_stream_cuts(const RoundRule& rule, uint32_t stage, int64_t bytes,
                              std::span<const SpreadRun> runs, std::vector<int64_t>* x,
                              std::vector<int32_t>* key) {
  SpreadCuts out;
  const auto k_all = static_cast<int64_t>(rule.spread.size()) + 1;
  const int64_t w = std::max<int64_t>(round_window(std::max<int64_t>(1, bytes / k_all)), 8);
  int64_t last = 0;
  for (size_t k = 1; k <= rule.spread.size(); ++k) {
    const double q = stage == 0 ? rule.spread[k - 1] : spread_forward_bound(rule.spread, k);
    double at = 0;
    for (const SpreadRun& r : runs)
      at += static_cast<double>(r.bytes) * (r.hi > r.lo
                                                ? std::clamp((q - r.lo) / (r.hi - r.lo), 0.0, 1.0)
                                                : (q >= r.lo ? 1.0 : 0.0));
    const auto xi = static_cast<int64_t>(at);
    if (xi > last + w && xi < bytes - 8) {
      if (x) x->push_back(xi);
      if (key) key->push_back(static_cast<int32_t>(k));
      last = xi;
      ++out.kept;
      out.last_key = static_cast<int32_t>(k);
    }
  }
  return out;
}

std::vector<uint32_t> pipeline_ranks(const std::vector<TensorSpec>& tensors) {
  const size_t n = tensors.size();
  // Groups: (first source device, source entries) -> total bytes.
  std::map<std::pair<int64_t, size_t>, unsigned __int128> total;
  std::vector<std::pair<int64_t, size_t>> group(n);
  std::vector<unsigned __int128> bytes(n), before(n);
  for (size_t i = 0; i < n; ++i) {
    const TensorSpec& t = tensors[i];
    const size_t entries = t.src.num_entries();
    group[i] = {entries > 0 ? t.src.device(0) : -1, entries};
    bytes[i] = static_cast<unsigned __int128>(std::max<int64_t>(t.src.num_elements(), 0)) *
               static_cast<uint64_t>(std::max<int64_t>(dtype_size(t.dtype), 1));
    unsigned __int128& sum = total[group[i]];
    before[i] = sum;
    sum += bytes[i];
  }
  // Key of tensor i: (2 before + bytes) / (2 total), compared exactly.
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
  auto num = [&](uint32_t i) { return 2 * before[i] + bytes[i]; };
  auto den = [&](uint32_t i) { return std::max<unsigned __int128>(2 * total.at(group[i]), 1); };
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    // num(a) / den(a) < num(b) / den(b): exactly, in 128 bits, while the
    // denominators are below 2^63 (num <= den, so each product is below
    // 2^126); in long double beyond (groups of more than 4 EiB).
    const unsigned __int128 na = num(a), da = den(a), nb = num(b), db = den(b);
    constexpr unsigned __int128 kExact = static_cast<unsigned __int128>(1) << 63;
    if (da < kExact && db < kExact) {
      if (na * db != nb * da) return na * db < nb * da;
    } else {
      const long double ka = static_cast<long double>(na) / static_cast<long double>(da);
      const long double kb = static_cast<long double>(nb) / static_cast<long double>(db);
      if (ka != kb) return ka < kb;
    }
    return a < b;
  });
  std::vector<uint32_t> rank(n);
  for (size_t r = 0; r < n; ++r) rank[order[r]] = static_cast<uint32_t>(r);
  return rank;
}

namespace {
void order_direction(std::vector<Message>& msgs, std::vector<Piece>& pieces,
                     std::vector<int64_t>& sizes, std::span<const uint32_t> rank) {
  // One message per stream: its band segments (consecutive, their pieces
  // back to back) merged.
  std::vector<Message> merged;
  merged.reserve(msgs.size());
  for (const Message& m : msgs) {
    if (!merged.empty() && same_stream(merged.back(), m)) {
      Message& w = merged.back();
      if (w.first_piece + w.num_pieces != m.first_piece)
        fail(ErrorCode::kInternal, "order_pieces: a stream's segments are not back to back");
      w.num_pieces += m.num_pieces;
      w.bytes += m.bytes;
      continue;
    }
    merged.push_back(m);
    merged.back().round = 0;
  }
  msgs = std::move(merged);
  std::vector<uint32_t> idx;
  std::vector<Piece> p2;
  std::vector<int64_t> s2;
  for (const Message& m : msgs) {
    if (m.num_pieces < 2) continue;
    const auto b = static_cast<size_t>(m.first_piece), n = static_cast<size_t>(m.num_pieces);
    if (b + n > pieces.size()) fail(ErrorCode::kInternal, "order_pieces: pieces out of range");
    idx.resize(n);
    for (size_t k = 0; k < n; ++k) idx[k] = static_cast<uint32_t>(k);
    std::stable_sort(idx.begin(), idx.end(), [&](uint32_t x, uint32_t y) {
      return rank[pieces[b + x].tensor] < rank[pieces[b + y].tensor];
    });
    p2.resize(n);
    for (size_t k = 0; k < n; ++k) p2[k] = pieces[b + idx[k]];
    std::copy(p2.begin(), p2.end(), pieces.begin() + static_cast<ptrdiff_t>(b));
    if (sizes.empty()) continue;
    s2.resize(n);
    for (size_t k = 0; k < n; ++k) s2[k] = sizes[b + idx[k]];
    std::copy(s2.begin(), s2.end(), sizes.begin() + static_cast<ptrdiff_t>(b));
  }
}
}  // namespace

void order_pieces(ProcessPart& part, std::span<const uint32_t> rank,
                  std::vector<int64_t>& send_bytes, std::vector<int64_t>& recv_bytes) {
  order_direction(part.sends, part.send_pieces, send_bytes, rank);
  order_direction(part.recvs, part.recv_pieces, recv_bytes, rank);
}

void set_stream_major_rounds(bool on) { stream_major_on.store(on, std::memory_order_relaxed); }

void number_band_rounds(ProcessPart& part) {
  number_direction(part.sends, part.send_pieces);
  number_direction(part.recvs, part.recv_pieces);
}

void split_rounds(ProcessPart& part, const std::vector<TensorSpec>& tensors, const RoundRule& rule,
                  std::span<const int64_t> send_bytes, std::span<const int64_t> recv_bytes,
                  const std::function<DeviceLoad(int64_t, uint32_t)>& load, int threads) {
  if (!rule.cuts()) return;
  if (send_bytes.size() != part.send_pieces.size() || recv_bytes.size() != part.recv_pieces.size())
    fail(ErrorCode::kInternal, "split_rounds: piece sizes do not match the pieces");
  if (rule.subs > 0) {
    split_subs(part, tensors, rule, send_bytes, recv_bytes);
    return;
  }
  if (rule.keys > 0) {
    if (rule.keys > 32) fail(ErrorCode::kInternal, "split_rounds: more than 32 keys");
    const std::vector<KeyBlocks> blocks =
        tensor_key_blocks(tensors, rule.key_granule, rule.keys, rule.key_fine);
    keyed_direction(part.sends, part.send_pieces, send_bytes, part.regions, tensors, blocks,
                    rule.keys);
    keyed_direction(part.recvs, part.recv_pieces, recv_bytes, part.regions, tensors, blocks,
                    rule.keys);
    return;
  }
  const std::vector<double> shares =
      rule.spread.empty() ? std::vector<double>{} : key_shares(tensors);
  const Streams sends = size_streams(part.sends, rule, load, part.send_pieces, send_bytes, shares);
  const Streams recvs = size_streams(part.recvs, rule, load, part.recv_pieces, recv_bytes, shares);
  std::vector<Bound> send_bounds(sends.first_bound.back()), recv_bounds(recvs.first_bound.back());
  const size_t cuts = sends.first_bound.back() + recvs.first_bound.back();
  if (threads <= 1) {
    // One pass over the send streams, then the receive streams, appending
    // the fragments to the part's regions, reserved for the most a cut adds
    // (2r boxes at rank r; the estimate's cut_growth): the list never
    // grows, which copied the regions and touched their
    // pages twice, and the pages past the fragments are never touched.
    int max_rank = 1;
    for (const TensorSpec& t : tensors)
      max_rank = std::max(max_rank, static_cast<int>(t.shape.size()));
    part.regions.reserve(part.regions.size() + 2 * static_cast<size_t>(max_rank) * cuts, max_rank);
    AppendSink sink{part.regions};
    find_cuts(part.sends, part.send_pieces, send_bytes, sends, part.regions, tensors, 0,
              part.sends.size(), send_bounds, sink);
    find_cuts(part.recvs, part.recv_pieces, recv_bytes, recvs, part.regions, tensors, 0,
              part.recvs.size(), recv_bounds, sink);
  } else {
    // Ranges of streams, send streams first. A first pass counts each
    // range's fragments, a second writes them where one pass over the send
    // streams, then the receive streams, would have appended them.
    const size_t per = 8 * static_cast<size_t>(threads);
    const std::vector<size_t> sr = even_ranges(part.sends.size(), per);
    const std::vector<size_t> rr = even_ranges(part.recvs.size(), per);
    const size_t ns = sr.size() - 1, nr = rr.size() - 1;
    auto run = [&](size_t k, auto& sink) {
      if (k < ns)
        find_cuts(part.sends, part.send_pieces, send_bytes, sends, part.regions, tensors, sr[k],
                  sr[k + 1], send_bounds, sink);
      else
        find_cuts(part.recvs, part.recv_pieces, recv_bytes, recvs, part.regions, tensors,
                  rr[k - ns], rr[k - ns + 1], recv_bounds, sink);
    };
    std::vector<size_t> base(ns + nr + 1, 0);
    parallel_for(threads, ns + nr, [&](size_t k) {
      CountSink count;
      run(k, count);
      base[k + 1] = count.n;
    });
    base[0] = part.regions.size();
    for (size_t k = 0; k < ns + nr; ++k) base[k + 1] += base[k];
    if (base.back() >= kOverlapRegion) fail(ErrorCode::kOutOfRange, "plan: more than 2^32 regions");
    int max_rank = 1;
    for (const TensorSpec& t : tensors)
      max_rank = std::max(max_rank, static_cast<int>(t.shape.size()));
    part.regions.resize(base.back(), max_rank);
    // The pieces' own regions (indices below base[0]) are read, not moved.
    parallel_for(threads, ns + nr, [&](size_t k) {
      PlaceSink place{part.regions, base[k]};
      run(k, place);
    });
  }
  emit_rounds(part.sends, part.send_pieces, sends, send_bounds, rule, threads);
  emit_rounds(part.recvs, part.recv_pieces, recvs, recv_bounds, rule, threads);
}

}  // namespace reshard::planning
