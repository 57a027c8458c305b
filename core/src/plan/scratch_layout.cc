#include "plan/scratch_layout.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace reshard::planning {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t add_sat(int64_t a, int64_t b) { return b > kMax - a ? kMax : a + b; }
int64_t align8(int64_t v) { return v > kMax - 7 ? kMax : (v + 7) & ~int64_t{7}; }

// Applies f(scratch index, stage) to every message piece of `pieces` that
// names a scratch of the part on the message's `device` side.
template <class F>
void each_scratch_piece(const ProcessPart& part, const std::vector<Message>& messages,
                        const std::vector<Piece>& pieces, bool reads, F&& f) {
  for (const Message& m : messages) {
    if (m.first_piece > pieces.size() || m.num_pieces > pieces.size() - m.first_piece) continue;
    for (uint64_t k = m.first_piece; k < m.first_piece + m.num_pieces; ++k) {
      const Piece& p = pieces[k];
      if ((reads ? p.src_entry : p.dst_entry) != kScratchEntry) continue;
      if (p.region >= part.regions.size()) continue;
      const int64_t s =
          find_scratch(part, p.tensor, reads ? m.src_device : m.dst_device, part.regions[p.region]);
      if (s >= 0) f(static_cast<size_t>(s), m.stage);
    }
  }
}

}  // namespace

std::vector<ScratchLife> scratch_lives(const ProcessPart& part,
                                       const std::vector<TensorSpec>& tensors) {
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::vector<ScratchLife> lives(part.scratch.size());
  std::vector<uint32_t> first(part.scratch.size(), kNone);
  std::vector<uint32_t> last(part.scratch.size(), 0);
  for (size_t k = 0; k < part.scratch.size(); ++k) {
    const Scratch& s = part.scratch[k];
    lives[k].device = s.device;
    const int64_t esize = s.tensor < tensors.size() ? dtype_size(tensors[s.tensor].dtype) : 1;
    const int64_t v = s.box.volume();
    lives[k].bytes = v > kMax / esize ? kMax : v * esize;
  }
  // Writes are received (the part's recvs: from other processes or from
  // devices of this one); reads are sent.
  each_scratch_piece(part, part.recvs, part.recv_pieces, false,
                     [&](size_t s, uint32_t stage) { first[s] = std::min(first[s], stage); });
  each_scratch_piece(part, part.sends, part.send_pieces, true,
                     [&](size_t s, uint32_t stage) { last[s] = std::max(last[s], stage); });
  for (size_t k = 0; k < lives.size(); ++k) {
    lives[k].first = first[k] == kNone ? 0 : first[k];
    lives[k].last = std::max(last[k], lives[k].first);
  }
  return lives;
}

std::vector<ScratchLife> scratch_lives(const std::map<int32_t, ProcessPart>& parts,
                                       const std::vector<TensorSpec>& tensors) {
  std::vector<ScratchLife> lives;
  for (const auto& [p, part] : parts) {
    const std::vector<ScratchLife> l = scratch_lives(part, tensors);
    lives.insert(lives.end(), l.begin(), l.end());
  }
  return lives;
}

ScratchPlacement place_scratch(const std::vector<ScratchLife>& lives) {
  ScratchPlacement out;
  out.offset.assign(lives.size(), 0);
  std::vector<size_t> order(lives.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const ScratchLife& x = lives[a];
    const ScratchLife& y = lives[b];
    if (x.device != y.device) return x.device < y.device;
    if (x.first != y.first) return x.first < y.first;
    const int64_t bx = align8(x.bytes), by = align8(y.bytes);
    if (bx != by) return bx > by;
    return x.last < y.last;
  });
  struct Live {
    int64_t offset, size;
    uint32_t last;
  };
  std::vector<Live> live;  // sorted by offset
  for (size_t i = 0; i < order.size(); ++i) {
    const ScratchLife& l = lives[order[i]];
    if (i == 0 || lives[order[i - 1]].device != l.device) live.clear();
    // Lives whose last read is below this one's first write are over.
    live.erase(
        std::remove_if(live.begin(), live.end(), [&](const Live& o) { return o.last < l.first; }),
        live.end());
    const int64_t size = align8(l.bytes);
    int64_t at = 0;
    size_t pos = 0;
    for (; pos < live.size(); ++pos) {
      if (live[pos].offset >= add_sat(at, size)) break;
      at = std::max(at, add_sat(live[pos].offset, live[pos].size));
    }
    live.insert(live.begin() + static_cast<std::ptrdiff_t>(pos), Live{at, size, l.last});
    out.offset[order[i]] = at;
    int64_t& peak = out.peak[l.device];
    peak = std::max(peak, add_sat(at, size));
  }
  return out;
}

int64_t most_scratch(const std::vector<ScratchLife>& lives) {
  int64_t most = 0;
  for (const auto& [d, b] : place_scratch(lives).peak) most = std::max(most, b);
  return most;
}

}  // namespace reshard::planning
