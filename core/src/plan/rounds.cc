#include "plan/rounds.h"

#include <algorithm>

#include "reshard/error.h"

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

namespace {
// Elements [i0, i1) of the sub-box of `region` starting at dim `d` with the
// outer coordinates fixed in `base`.
void range_rec(const Box& base, int d, int64_t i0, int64_t i1, std::vector<Box>& out) {
  if (i0 >= i1) return;
  if (d == base.rank) {
    out.push_back(base);
    return;
  }
  int64_t slab = 1;
  for (int k = d + 1; k < base.rank; ++k) slab *= base.extent(k);
  const int64_t a = i0 / slab, b = i1 / slab;
  Box sub = base;
  if (a == b) {
    sub.lo[d] = base.lo[d] + a;
    sub.hi[d] = sub.lo[d] + 1;
    range_rec(sub, d + 1, i0 - a * slab, i1 - a * slab, out);
    return;
  }
  int64_t first_whole = a;
  if (i0 % slab != 0) {
    sub.lo[d] = base.lo[d] + a;
    sub.hi[d] = sub.lo[d] + 1;
    range_rec(sub, d + 1, i0 - a * slab, slab, out);
    first_whole = a + 1;
  }
  if (b > first_whole) {
    Box mid = base;
    mid.lo[d] = base.lo[d] + first_whole;
    mid.hi[d] = base.lo[d] + b;
    out.push_back(mid);
  }
  if (i1 % slab != 0) {
    sub = base;
    sub.lo[d] = base.lo[d] + b;
    sub.hi[d] = sub.lo[d] + 1;
    range_rec(sub, d + 1, 0, i1 - b * slab, out);
  }
}
}  // namespace

void element_range_boxes(const Box& region, int64_t i0, int64_t i1, std::vector<Box>& out) {
  range_rec(region, 0, i0, i1, out);
}

namespace {

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

// Chunk and round count of every stream of one direction; stream i has
// rounds[i] - 1 cuts, from first_bound[i] on.
struct Streams {
  std::vector<int64_t> chunks, rounds;
  std::vector<size_t> first_bound;
};

Streams size_streams(const std::vector<Message>& msgs, int64_t budget,
                     const std::function<DeviceLoad(int64_t)>& load) {
  const size_t n = msgs.size();
  Streams s{std::vector<int64_t>(n), std::vector<int64_t>(n), std::vector<size_t>(n + 1, 0)};
  for (size_t i = 0; i < n; ++i) {
    const Message& m = msgs[i];
    s.chunks[i] = round_chunk(budget, load(m.src_device), load(m.dst_device), m.bytes);
    s.rounds[i] = std::max<int64_t>(stream_rounds(m.bytes, s.chunks[i]), m.num_pieces > 0 ? 1 : 0);
    if (s.rounds[i] - 1 >= int64_t{1} << 31)
      fail(ErrorCode::kOutOfRange, "options.staging_budget_bytes: more than 2^31 rounds");
    s.first_bound[i + 1] =
        s.first_bound[i] + static_cast<size_t>(std::max<int64_t>(s.rounds[i] - 1, 0));
  }
  return s;
}

// Cuts the messages of one direction. Messages come one per stream, sorted by
// (peer, own); the output is sorted by (round, peer, own). Work is
// proportional to the pieces plus the cuts: a whole piece is only copied,
// the region of a piece is only computed when a cut falls inside it.
void cut(std::vector<Message>& msgs, std::vector<Piece>& pieces, std::span<const int64_t> bytes,
         const Streams& streams, ProcessPart& part, const std::vector<TensorSpec>& tensors) {
  if (bytes.size() != pieces.size())
    fail(ErrorCode::kInternal, "split_rounds: piece sizes do not match the pieces");
  const size_t nmsg = msgs.size();
  const auto& chunks = streams.chunks;
  const auto& rounds = streams.rounds;
  const auto& first_bound = streams.first_bound;
  // 1. Every stream's cuts (rules 1-3 of rounds.h), and the regions of the
  // pieces they split, stream by stream.
  std::vector<Bound> bounds(first_bound[nmsg]);
  std::vector<Box> boxes;
  size_t nfragments = 0;
  auto add_fragment = [&](const Box& region, int64_t a, int64_t b, uint32_t& first, uint32_t& n) {
    first = static_cast<uint32_t>(part.regions.size());
    // Whole slabs of the outermost dimension (rule 2's usual outcome): one box.
    const int64_t slab0 = region.rank > 0 ? region.volume() / region.extent(0) : 1;
    if (region.rank > 0 && a % slab0 == 0 && b % slab0 == 0) {
      Box& box = part.regions.emplace_back(region);
      box.lo[0] = region.lo[0] + a / slab0;
      box.hi[0] = region.lo[0] + b / slab0;
      n = 1;
      ++nfragments;
      return;
    }
    boxes.clear();
    element_range_boxes(region, a, b, boxes);
    first = static_cast<uint32_t>(part.regions.size());
    n = static_cast<uint32_t>(boxes.size());
    part.regions.insert(part.regions.end(), boxes.begin(), boxes.end());
    nfragments += boxes.size();
  };
  for (size_t mi = 0; mi < nmsg; ++mi) {
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
      const int64_t x = k * chunk;
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
        e = dtype_size(t.dtype);
        region = p.region == kOverlapRegion
                     ? intersect(t.src.box(p.src_entry), t.dst.box(p.dst_entry))
                     : part.regions[p.region];
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
  // 2. Round by round, the streams still running, in stream order.
  std::vector<Piece> out;
  out.reserve(pieces.size() + nfragments);
  std::vector<Message> out_msgs;
  out_msgs.reserve(nmsg + bounds.size());
  auto emit_fragment = [&](uint64_t j, uint32_t first, uint32_t n) {
    Piece q = pieces[j];
    for (uint32_t i = 0; i < n; ++i) {
      q.region = first + i;
      out.push_back(q);
    }
  };
  std::vector<Bound> cursor(nmsg);
  std::vector<uint32_t> active;
  active.reserve(nmsg);
  for (uint32_t i = 0; i < nmsg; ++i) {
    if (rounds[i] == 0) continue;
    cursor[i] = {msgs[i].first_piece, 0, 0, 0, 0, 0, 0};
    active.push_back(static_cast<uint32_t>(i));
  }
  for (uint32_t r = 0; !active.empty(); ++r) {
    size_t still = 0;
    for (uint32_t i : active) {
      const Message& m = msgs[i];
      const bool last = r + 1 == rounds[i];
      const Bound end = last ? Bound{m.first_piece + m.num_pieces, 0, m.bytes, 0, 0, 0, 0}
                             : bounds[first_bound[i] + r];
      const Bound& cur = cursor[i];
      Message mr = m;
      mr.round = r;
      mr.first_piece = out.size();
      mr.bytes = end.pos - cur.pos;
      uint64_t j = cur.piece;
      if (cur.elem > 0) {  // the fragment after the round's first cut
        emit_fragment(j, cur.after, cur.after_n);
        ++j;
      }
      for (; j < end.piece; ++j) out.push_back(pieces[j]);
      // The fragment before the round's last cut, unless that piece's
      // fragment was emitted above (both cuts in one piece).
      if (end.elem > 0 && !(cur.elem > 0 && cur.piece == end.piece))
        emit_fragment(end.piece, end.before, end.before_n);
      mr.num_pieces = out.size() - mr.first_piece;
      out_msgs.push_back(mr);
      cursor[i] = end;
      if (!last) active[still++] = i;
    }
    active.resize(still);
  }
  msgs = std::move(out_msgs);
  pieces = std::move(out);
}

}  // namespace

void split_rounds(ProcessPart& part, const std::vector<TensorSpec>& tensors, int64_t budget,
                  std::span<const int64_t> send_bytes, std::span<const int64_t> recv_bytes,
                  const std::function<DeviceLoad(int64_t)>& load) {
  if (budget <= 0) return;
  const Streams sends = size_streams(part.sends, budget, load);
  const Streams recvs = size_streams(part.recvs, budget, load);
  // Most cuts split a piece in two one-box fragments: one allocation for the
  // regions of both directions.
  part.regions.reserve(part.regions.size() +
                       2 * (sends.first_bound.back() + recvs.first_bound.back()));
  cut(part.sends, part.send_pieces, send_bytes, sends, part, tensors);
  cut(part.recvs, part.recv_pieces, recv_bytes, recvs, part, tensors);
}

}  // namespace reshard::planning
