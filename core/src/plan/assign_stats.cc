// The statistics of stage-0 pieces assigned among a region's holders
// (assign_stats.h), without enumerating them.
#include "plan/assign_stats.h"

#include <algorithm>

#include "plan/checked.h"
#include "plan/stream_map.h"

namespace reshard::planning {

void HolderSets::set(const TensorCtx& t, const uint32_t* R, size_t nr) {
  hosts.clear();
  procs.clear();
  devices.clear();
  for (size_t k = 0; k < nr; ++k) {
    hosts.push_back(t.st->host[R[k]]);
    procs.push_back(t.st->process[R[k]]);
    devices.push_back(t.sg->devices[R[k]]);
  }
  std::sort(hosts.begin(), hosts.end());
  std::sort(procs.begin(), procs.end());
  std::sort(devices.begin(), devices.end());
}

bool HolderSets::far(const TensorCtx& t, uint32_t e) const {
  auto has = [](const auto& v, auto x) { return std::binary_search(v.begin(), v.end(), x); };
  return !has(hosts, t.dt->host[e]) && !has(procs, t.dt->process[e]) &&
         !has(devices, t.dg->devices[e]);
}

bool AssignStats::assign(const TensorCtx& t, uint32_t e, const Box& region, const uint32_t* R,
                         size_t nr, bool own, uint32_t band, int64_t esum, int64_t copies,
                         int64_t& group_pieces, const HolderSets* sets) {
  const PlanOptions& o = *z_.o;
  if (nr == 0) return false;
  const Geometry& sg = *t.sg;
  const int64_t dev = t.dg->devices[e];
  Emitted x{R[0], e, region, own, sg.devices[R[0]] == dev, true};
  x.band = band;
  if (nr == 1) {
    account_(t, e, x, esum, copies, group_pieces);
    return true;
  }
  x.forced = false;
  const bool far = sets && sets->far(t, e);
  for (size_t i = 0; i < nr && !far; ++i)
    if (sg.devices[R[i]] == dev) {
      x.src_entry = R[i];
      x.local = true;
      account_(t, e, x, esum, copies, group_pieces);
      return true;
    }
  x.local = false;
  const uint32_t* N = R;
  size_t nn = nr;
  for (int level = 0; level < 2 && !far; ++level) {
    near_.clear();
    for (size_t i = 0; i < nr; ++i)
      if (level == 0 ? t.st->process[R[i]] == t.dt->process[e] : t.st->host[R[i]] == t.dt->host[e])
        near_.push_back(R[i]);
    if (!near_.empty()) {
      N = near_.data();
      nn = near_.size();
      break;
    }
  }
  // Enumerator::split: evenly along the first dimension with nn elements
  // (else the longest) when the piece is at least split_min_bytes.
  if (nn > 1 && region.volume() * t.esize >= o.split_min_bytes && region.rank > 0) {
    const int dim = split_dim(region, nn);
    const int64_t ext = region.extent(dim);
    const int64_t m = std::min<int64_t>(ext, static_cast<int64_t>(nn));
    if (m > 1 && band == 0) {
      split(t, e, region, dim, m, N, nn, esum, copies, group_pieces);
      return true;
    }
    if (m > 1) {
      x.own_region = true;
      for (int64_t j = 0; j < m; ++j) {
        x.region = region;
        x.region.lo[dim] = region.lo[dim] + ext * j / m;
        x.region.hi[dim] = region.lo[dim] + ext * (j + 1) / m;
        x.src_entry = N[(static_cast<size_t>(j) + e) % nn];
        account_(t, e, x, esum, copies, group_pieces);
      }
      return true;
    }
  }
  x.src_entry = N[e % nn];
  account_(t, e, x, esum, copies, group_pieces);
  return true;
}

void AssignStats::split(const TensorCtx& t, uint32_t e, const Box& region, int dim, int64_t m,
                        const uint32_t* N, size_t nn, int64_t esum, int64_t copies,
                        int64_t& group_pieces) {
  std::vector<Acc>& acc = *z_.acc;
  std::vector<DeviceCounts>* counts = z_.counts;
  PlanStats& st = *z_.st;
  const bool dense_pairs = z_.dense_pairs, track_pairs = z_.track_pairs;
  const size_t words = z_.words;
  std::vector<uint64_t>& bits = *z_.bits;
  std::unordered_set<uint64_t>& pair_set = *z_.pair_set;
  const auto& keep_pair = z_.keep_pair;
  const auto& add_pair = z_.add_pair;
  const uint32_t dd = t.dt->dense[e];
  const int32_t host = t.dt->host[e], proc = t.dt->process[e];
  const int64_t ext = region.extent(dim);
  const int64_t slab = mul_of(region.volume() / ext, esum, "network_bytes");
  int64_t recv = 0, recv_inter = 0, cross_proc = 0;
  uint64_t* row = dense_pairs ? bits.data() + size_t{dd} * words : nullptr;
  for (int64_t j = 0; j < m; ++j) {
    const uint32_t src = N[(static_cast<size_t>(j) + e) % nn];
    const uint32_t sd = t.st->dense[src];
    const int64_t bytes = mul_of(ext * (j + 1) / m - ext * j / m, slab, "network_bytes");
    add_to(acc[sd].send, bytes, "max_send_bytes");
    add_to(recv, bytes, "max_recv_bytes");
    if (t.st->host[src] != host) {
      add_to(acc[sd].send_inter, bytes, "max_host_send_bytes");
      add_to(recv_inter, bytes, "max_host_recv_bytes");
    }
    if (t.st->process[src] != proc) add_to(cross_proc, bytes, "cross_process_bytes");
    if (counts) {
      (*counts)[sd].send_pieces += copies;
      (*counts)[sd].regions += copies;
    }
    if (track_pairs) add_pair(sd, dd, bytes);
    if (row)
      row[sd >> 6] |= uint64_t{1} << (sd & 63);
    else if (pair_set.insert(device_pair_key(sd, dd)).second)
      keep_pair();
  }
  add_to(acc[dd].recv, recv, "max_recv_bytes");
  add_to(acc[dd].recv_inter, recv_inter, "max_host_recv_bytes");
  add_to(st.cross_host_bytes, recv_inter, "cross_host_bytes");
  add_to(st.cross_process_bytes, cross_proc, "cross_process_bytes");
  if (counts) {
    (*counts)[dd].recv_pieces += copies * m;
    (*counts)[dd].regions += copies * m;
  }
  group_pieces += m;
}

void AssignStats::flush_rows() {
  PairBytes& pair_bytes = *z_.pair_bytes;
  for (size_t dd = 0; dd < row_adds_.size(); ++dd) {
    if (row_adds_[dd].empty()) continue;
    uint32_t* row = pair_bytes.row(static_cast<uint32_t>(dd));
    for (const auto& [b, r] : row_adds_[dd]) {
      const RowBatch& rb = row_batches_[b];
      const int32_t* cols = row_cols_.data() + rb.cols;
      const int64_t* bytes = row_chunks_.data() + rb.chunks;
      for (size_t j = 0, k = r; j < rb.m; ++j, k = k + 1 == rb.nr ? 0 : k + 1)
        (void)pair_bytes.add_cell(row, static_cast<uint32_t>(dd), cols[k], bytes[j]);
    }
    row_adds_[dd].clear();
  }
  row_cols_.clear();
  row_chunks_.clear();
  row_batches_.clear();
  rows_pending_ = 0;
}

void AssignStats::assign_cell(const TensorCtx& t, uint32_t b0, uint32_t b1, const Box& region,
                              const uint32_t* R, size_t nr, bool own, int64_t esum, int64_t copies,
                              int64_t& group_pieces) {
  const PlanOptions& o = *z_.o;
  const size_t ndev = z_.ndev;
  std::vector<Acc>& acc = *z_.acc;
  std::vector<DeviceCounts>* counts = z_.counts;
  PlanStats& st = *z_.st;
  const bool dense_pairs = z_.dense_pairs, track_pairs = z_.track_pairs;
  const size_t words = z_.words;
  std::vector<uint64_t>& bits = *z_.bits;
  PairBytes& pair_bytes = *z_.pair_bytes;
  const auto& add_pair = z_.add_pair;
  const Geometry& dg = *t.dg;
  // Entries one by one, far ones without a scan of the holders (a
  // replicated norm from every trainer of a stage, too small to split,
  // to every inference device scanned N/8 holders per entry).
  const bool sets = nr >= 8 && b1 - b0 >= 2;
  if (sets) region_holders_.set(t, R, nr);
  auto one_by_one = [&] {
    for (uint32_t i = b0; i < b1; ++i)
      assign(t, dg.cell_entries[i], region, R, nr, own, 0, esum, copies, group_pieces,
             sets ? &region_holders_ : nullptr);
  };
  // Enumerator::split's cut for nn = nr holders (the far entries').
  if (nr < 2 || !dense_pairs || b1 - b0 < 2 || region.rank == 0 ||
      region.volume() * t.esize < o.split_min_bytes)
    return one_by_one();
  const int dim = split_dim(region, nr);
  const int64_t ext = region.extent(dim);
  const int64_t m = std::min<int64_t>(ext, static_cast<int64_t>(nr));
  if (m <= 1) return one_by_one();
  if (!sets) region_holders_.set(t, R, nr);
  far_.clear();
  for (uint32_t i = b0; i < b1; ++i) {
    const uint32_t e = dg.cell_entries[i];
    if (!region_holders_.far(t, e))
      assign(t, e, region, R, nr, own, 0, esum, copies, group_pieces);
    else
      far_.push_back(e);
  }
  if (far_.empty()) return;
  const auto K = static_cast<int64_t>(far_.size());
  const int64_t slab = mul_of(region.volume() / ext, esum, "network_bytes");
  const int64_t total = mul_of(ext, slab, "network_bytes");
  // Every sum below is at most the far entries' bytes together.
  const int64_t all = mul_of(total, K, "network_bytes");
  chunk_.resize(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j)
    chunk_[static_cast<size_t>(j)] = (ext * (j + 1) / m - ext * j / m) * slab;
  // Per holder k: the bytes and pieces it sends, from each residue's
  // count of entries (piece j of residue r from holder (j + r) % nr).
  residue_count_.assign(nr, 0);
  residues_.clear();
  for (uint32_t e : far_)
    if (residue_count_[e % nr]++ == 0) residues_.push_back(static_cast<uint32_t>(e % nr));
  held_bytes_.assign(nr, 0);
  held_pieces_.assign(nr + 1, 0);  // differences over k
  const auto mm = static_cast<size_t>(m);
  for (uint32_t r : residues_) {
    const int64_t cr = residue_count_[r];
    const size_t first = std::min(mm, nr - r);  // pieces before the wrap
    int64_t* to = held_bytes_.data() + r;
    for (size_t j = 0; j < first; ++j) to[j] += cr * chunk_[j];
    for (size_t j = first; j < mm; ++j) held_bytes_[j - first] += cr * chunk_[j];
    held_pieces_[r] += cr;
    held_pieces_[r + first] -= cr;
    if (first < mm) {
      held_pieces_[0] += cr;
      held_pieces_[mm - first] -= cr;
    }
  }
  held_dense_.resize(nr);
  int64_t pieces_of = 0;
  for (size_t k = 0; k < nr; ++k) {
    const uint32_t sd = t.st->dense[R[k]];
    held_dense_[k] = sd;
    pieces_of += held_pieces_[k];
    add_to(acc[sd].send, held_bytes_[k], "max_send_bytes");
    add_to(acc[sd].send_inter, held_bytes_[k], "max_host_send_bytes");
    if (counts) {
      (*counts)[sd].send_pieces += copies * pieces_of;
      (*counts)[sd].regions += copies * pieces_of;
    }
  }
  add_to(st.cross_host_bytes, all, "cross_host_bytes");
  add_to(st.cross_process_bytes, all, "cross_process_bytes");
  // The streams' bytes into the table's rows later (flush_rows), where
  // every holder has a column.
  uint32_t batch = kUnbatched;
  if (track_pairs && pair_bytes.dense()) {
    const size_t at = row_cols_.size();
    for (uint32_t sd : held_dense_) row_cols_.push_back(pair_bytes.column(sd));
    if (std::all_of(row_cols_.begin() + static_cast<std::ptrdiff_t>(at), row_cols_.end(),
                    [](int32_t col) { return col >= 0; })) {
      batch = static_cast<uint32_t>(row_batches_.size());
      row_batches_.push_back({at, row_chunks_.size(), nr, mm});
      row_chunks_.insert(row_chunks_.end(), chunk_.begin(), chunk_.end());
      if (row_adds_.empty()) row_adds_.resize(ndev);
    } else {
      row_cols_.resize(at);
    }
  }
  // Every holder sends to every far entry where m = nr: one mask.
  held_mask_.clear();
  if (mm == nr) {
    std::vector<uint32_t> sorted(held_dense_);
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t sd : sorted) {
      if (held_mask_.empty() || held_mask_.back().first != sd >> 6)
        held_mask_.emplace_back(sd >> 6, 0);
      held_mask_.back().second |= uint64_t{1} << (sd & 63);
    }
  }
  for (uint32_t e : far_) {
    const uint32_t dd = t.dt->dense[e];
    add_to(acc[dd].recv, total, "max_recv_bytes");
    add_to(acc[dd].recv_inter, total, "max_host_recv_bytes");
    if (counts) {
      (*counts)[dd].recv_pieces += copies * m;
      (*counts)[dd].regions += copies * m;
    }
    uint64_t* row = bits.data() + size_t{dd} * words;
    const size_t r = e % nr;
    if (mm == nr)
      for (const auto& [w, v] : held_mask_) row[w] |= v;
    else
      for (size_t j = 0, k = r; j < mm; ++j, k = k + 1 == nr ? 0 : k + 1)
        row[held_dense_[k] >> 6] |= uint64_t{1} << (held_dense_[k] & 63);
    if (!track_pairs) continue;
    if (batch != kUnbatched && pair_bytes.row(dd)) {
      row_adds_[dd].emplace_back(batch, static_cast<uint32_t>(r));
      ++rows_pending_;
      continue;
    }
    for (size_t j = 0, k = r; j < mm; ++j, k = k + 1 == nr ? 0 : k + 1)
      add_pair(held_dense_[k], dd, chunk_[j]);
  }
  if (rows_pending_ >= kRowsPending) flush_rows();
  group_pieces += K * m;
}

}  // namespace reshard::planning
