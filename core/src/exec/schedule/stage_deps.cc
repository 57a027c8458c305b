#include "exec/schedule/stage_deps.h"

#include <algorithm>

namespace reshard::stage_deps {

WriterIndex::WriterIndex(const Plan& plan, const ProcessPart& part, bool skip_reduced) {
  const auto& tensors = plan.tensors();
  bool staged = false;
  for (const Message& m : part.sends) staged |= m.stage > 0;
  for (const Message& m : part.recvs) staged |= m.stage > 0;
  if (!staged) return;  // single-hop: nothing reads a destination entry
  for (size_t i = 0; i < part.recvs.size(); ++i) {
    const Message& m = part.recvs[i];
    if (m.first_piece > part.recv_pieces.size() ||
        m.num_pieces > part.recv_pieces.size() - m.first_piece) {
      continue;  // the schedule builder reports damaged parts
    }
    for (uint64_t k = 0; k < m.num_pieces; ++k) {
      const Piece& p = part.recv_pieces[m.first_piece + k];
      if (p.tensor >= tensors.size()) continue;
      if (skip_reduced && m.stage == 0 && tensors[p.tensor].src.partial()) continue;
      // Pieces into or out of a scratch of a partial source are
      // contributions to a reduction (the engine waits for the finished
      // reduction); the simulator indexes scratch writers under
      // kScratchEntry. Copies out of a copy-staging scratch write their
      // destination entries like relays.
      if (skip_reduced && tensors[p.tensor].src.partial() &&
          (p.src_entry == kScratchEntry || p.dst_entry == kScratchEntry))
        continue;
      Writer w;
      w.recv = static_cast<uint32_t>(i);
      w.stage = m.stage;
      w.region = plan.region(part, p);
      if (w.region.empty()) continue;
      entries_[uint64_t{p.tensor} << 32 | p.dst_entry].writers.push_back(w);
    }
  }
  for (auto& [key, e] : entries_) {
    // Index the dimension in which the writers are thinnest relative to
    // their extent (round cutting makes slabs of rows).
    const int rank = e.writers.front().region.rank;
    double best = 2;
    for (int d = 0; d < rank; ++d) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      double sum = 0;
      for (const Writer& w : e.writers) {
        lo = std::min(lo, w.region.lo[d]);
        hi = std::max(hi, w.region.hi[d]);
        sum += static_cast<double>(w.region.extent(d));
      }
      if (hi - lo <= 1) continue;
      const double fraction =
          sum / (static_cast<double>(e.writers.size()) * static_cast<double>(hi - lo));
      if (fraction < best) {
        best = fraction;
        e.dim = d;
      }
    }
    for (Writer& w : e.writers) {
      w.lo = e.dim < 0 ? 0 : w.region.lo[e.dim];
      w.hi = e.dim < 0 ? 1 : w.region.hi[e.dim];
      e.max_len = std::max(e.max_len, w.hi - w.lo);
    }
    std::sort(e.writers.begin(), e.writers.end(),
              [](const Writer& a, const Writer& b) { return a.lo < b.lo; });
  }
}

void WriterIndex::writers(uint32_t tensor, uint32_t entry, const Box& region, uint32_t stage,
                          std::vector<uint32_t>& out) const {
  const auto it = entries_.find(uint64_t{tensor} << 32 | entry);
  if (it == entries_.end() || region.empty()) return;
  const Entry& e = it->second;
  const int64_t a = e.dim < 0 ? 0 : region.lo[e.dim];
  const int64_t b = e.dim < 0 ? 1 : region.hi[e.dim];
  // Writers overlapping [a, b) in the indexed dimension start in
  // [a - max_len + 1, b).
  auto w = std::lower_bound(e.writers.begin(), e.writers.end(), a - e.max_len + 1,
                            [](const Writer& x, int64_t v) { return x.lo < v; });
  for (; w != e.writers.end() && w->lo < b; ++w) {
    if (w->hi <= a || w->stage >= stage) continue;
    if (!intersect(w->region, region).empty()) out.push_back(w->recv);
  }
}

void sort_unique(std::vector<uint32_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace reshard::stage_deps
