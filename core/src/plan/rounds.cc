#include "plan/rounds.h"

#include <algorithm>

#include "reshard/error.h"

namespace reshard::planning {

int64_t round_chunk(int64_t budget, DeviceLoad a, DeviceLoad b, int64_t stream_bytes) {
  const int64_t reserve = 16 * std::max(a.peers, b.peers);
  const int64_t total = std::max({a.bytes, b.bytes, stream_bytes, int64_t{1}});
  if (budget <= reserve) return 8;  // rejected by the planner's validation
  const unsigned __int128 share = static_cast<unsigned __int128>(budget - reserve) *
                                  static_cast<uint64_t>(stream_bytes) /
                                  static_cast<uint64_t>(total);
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

struct Cut {
  uint32_t round;
  uint32_t stream;  // index of the original message
  Piece piece;
  int64_t bytes;
};

// Cuts the messages of one direction. Messages come one per stream, sorted by
// (peer, own); the output is sorted by (round, peer, own), which a stable
// counting sort by round gives directly.
void cut(std::vector<Message>& msgs, std::vector<Piece>& pieces, ProcessPart& part,
         const std::vector<TensorSpec>& tensors, int64_t budget,
         const std::function<DeviceLoad(int64_t)>& load) {
  part.regions.reserve(part.regions.size() + msgs.size() * 4);
  std::vector<Cut> cuts;
  cuts.reserve(pieces.size() + msgs.size() * 2);
  std::vector<Box> boxes;
  uint32_t max_round = 0;
  for (uint32_t mi = 0; mi < msgs.size(); ++mi) {
    const Message& m = msgs[mi];
    const int64_t chunk = round_chunk(budget, load(m.src_device), load(m.dst_device), m.bytes);
    int64_t s = 0;  // stream offset of the current piece
    for (uint64_t i = 0; i < m.num_pieces; ++i) {
      const Piece& p = pieces[m.first_piece + i];
      const TensorSpec& t = tensors[p.tensor];
      const int64_t e = dtype_size(t.dtype);
      const Box region = p.region == kOverlapRegion
                             ? intersect(t.src.box(p.src_entry), t.dst.box(p.dst_entry))
                             : part.regions[p.region];
      const int64_t n = region.volume();
      // Element i occupies bytes [s + i*e, s + (i+1)*e) of the stream and
      // belongs to the round holding its last byte.
      const int64_t r0 = (s + e - 1) / chunk, r1 = (s + n * e - 1) / chunk;
      if (r1 >= int64_t{1} << 31)
        fail(ErrorCode::kOutOfRange, "options.staging_budget_bytes: more than 2^31 rounds");
      max_round = std::max(max_round, static_cast<uint32_t>(r1));
      if (r0 == r1) {
        cuts.push_back({static_cast<uint32_t>(r0), mi, p, n * e});
      } else {
        // Elements whose last byte is below x: clamp(floor((x - s) / e), 0, n).
        auto below = [&](int64_t x) { return std::clamp<int64_t>((x - s) / e, 0, n); };
        for (int64_t r = r0; r <= r1; ++r) {
          boxes.clear();
          element_range_boxes(region, below(r * chunk), below((r + 1) * chunk), boxes);
          for (const Box& b : boxes) {
            Piece q = p;
            q.region = static_cast<uint32_t>(part.regions.size());
            part.regions.push_back(b);
            cuts.push_back({static_cast<uint32_t>(r), mi, q, b.volume() * e});
          }
        }
      }
      s += n * e;
    }
  }
  std::vector<size_t> start(size_t{max_round} + 2, 0);
  for (const Cut& c : cuts) ++start[c.round + 1];
  for (size_t r = 1; r < start.size(); ++r) start[r] += start[r - 1];
  std::vector<uint32_t> order(cuts.size());
  for (uint32_t i = 0; i < cuts.size(); ++i) order[start[cuts[i].round]++] = i;
  std::vector<Piece> new_pieces;
  new_pieces.reserve(cuts.size());
  std::vector<Message> new_msgs;
  for (uint32_t idx : order) {
    const Cut& c = cuts[idx];
    if (new_msgs.empty() || new_msgs.back().round != c.round ||
        new_msgs.back().src_device != msgs[c.stream].src_device ||
        new_msgs.back().dst_device != msgs[c.stream].dst_device) {
      Message m = msgs[c.stream];
      m.round = c.round;
      m.first_piece = new_pieces.size();
      m.num_pieces = 0;
      m.bytes = 0;
      new_msgs.push_back(m);
    }
    new_pieces.push_back(c.piece);
    ++new_msgs.back().num_pieces;
    new_msgs.back().bytes += c.bytes;
  }
  msgs = std::move(new_msgs);
  pieces = std::move(new_pieces);
}

}  // namespace

void split_rounds(ProcessPart& part, const std::vector<TensorSpec>& tensors, int64_t budget,
                  const std::function<DeviceLoad(int64_t)>& load) {
  if (budget <= 0) return;
  cut(part.sends, part.send_pieces, part, tensors, budget, load);
  cut(part.recvs, part.recv_pieces, part, tensors, budget, load);
}

}  // namespace reshard::planning
