#include "reshard/layout.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <set>

#include "layout/geometry.h"
#include "reshard/error.h"
#include "util/hash.h"

namespace reshard {

// ---------------------------------------------------------------- ReduceOp

std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMean:
      return "mean";
  }
  return "invalid";
}

ReduceOp parse_reduce_op(std::string_view name, const std::string& field) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "max") return ReduceOp::kMax;
  if (name == "min") return ReduceOp::kMin;
  if (name == "mean") return ReduceOp::kMean;
  fail(ErrorCode::kInvalidArgument, field,
       "unknown reduce op \"" + std::string(name) + "\" (expected sum, max, min or mean)");
}

// ---------------------------------------------------------------- Topology

void Topology::add(const DeviceInfo& info, const std::string& field) {
  if (info.device < 0)
    fail(ErrorCode::kInvalidArgument, field,
         "device id " + std::to_string(info.device) + " is negative");
  if (info.process < 0 || info.host < 0 || info.ordinal < 0)
    fail(ErrorCode::kInvalidArgument, field,
         "process, host and ordinal of device " + std::to_string(info.device) +
             " must be non-negative");
  auto it = std::lower_bound(devices_.begin(), devices_.end(), info.device,
                             [](const DeviceInfo& a, int64_t d) { return a.device < d; });
  if (it != devices_.end() && it->device == info.device) {
    if (!(*it == info))
      fail(ErrorCode::kInvalidArgument, field,
           "device " + std::to_string(info.device) + " given as process " +
               std::to_string(info.process) + " host " + std::to_string(info.host) + " ordinal " +
               std::to_string(info.ordinal) + " but earlier as process " +
               std::to_string(it->process) + " host " + std::to_string(it->host) + " ordinal " +
               std::to_string(it->ordinal));
    return;
  }
  devices_.insert(it, info);
}

DeviceInfo Topology::info(int64_t device) const {
  auto it = std::lower_bound(devices_.begin(), devices_.end(), device,
                             [](const DeviceInfo& a, int64_t d) { return a.device < d; });
  if (it != devices_.end() && it->device == device) return *it;
  DeviceInfo d;
  d.device = device;
  return d;
}

bool Topology::contains(int64_t device) const {
  auto it = std::lower_bound(devices_.begin(), devices_.end(), device,
                             [](const DeviceInfo& a, int64_t d) { return a.device < d; });
  return it != devices_.end() && it->device == device;
}

// ---------------------------------------------------------------- Mesh

int64_t Mesh::size() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int Mesh::axis_index(std::string_view name) const {
  for (size_t i = 0; i < axis_names.size(); ++i)
    if (axis_names[i] == name) return static_cast<int>(i);
  return -1;
}

void Mesh::validate(const std::string& field) const {
  if (axis_names.size() != shape.size())
    fail(ErrorCode::kInvalidArgument, field + ".axis_names",
         std::to_string(axis_names.size()) + " names for a mesh of rank " +
             std::to_string(shape.size()));
  for (size_t i = 0; i < axis_names.size(); ++i) {
    const std::string f = field + ".axis_names[" + std::to_string(i) + "]";
    if (axis_names[i].empty()) fail(ErrorCode::kInvalidArgument, f, "empty axis name");
    for (size_t j = 0; j < i; ++j)
      if (axis_names[j] == axis_names[i])
        fail(ErrorCode::kInvalidArgument, f, "duplicate axis name \"" + axis_names[i] + "\"");
  }
  int64_t n = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1)
      fail(ErrorCode::kInvalidArgument, field + ".shape[" + std::to_string(i) + "]",
           "mesh axis size " + std::to_string(shape[i]) + " must be at least 1");
    overflow = overflow || __builtin_mul_overflow(n, shape[i], &n);
  }
  if (overflow) fail(ErrorCode::kOverflow, field + ".shape", "the device count overflows 64 bits");
  if (n > kMaxDevices)
    fail(
        ErrorCode::kOutOfRange, field + ".shape",
        "mesh has more than " + std::to_string(kMaxDevices) + " devices (the most one plan holds)");
  if (static_cast<int64_t>(devices.size()) != n)
    fail(ErrorCode::kInvalidArgument, field + ".devices",
         std::to_string(devices.size()) + " devices for a mesh of " + std::to_string(n));
  std::vector<int64_t> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i] < 0)
      fail(ErrorCode::kInvalidArgument, field + ".devices[" + std::to_string(i) + "]",
           "device id " + std::to_string(devices[i]) + " is negative");
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) {
    size_t pos =
        static_cast<size_t>(std::find(devices.begin(), devices.end(), *dup) - devices.begin());
    size_t pos2 = static_cast<size_t>(
        std::find(devices.begin() + static_cast<std::ptrdiff_t>(pos) + 1, devices.end(), *dup) -
        devices.begin());
    fail(ErrorCode::kInvalidArgument, field + ".devices[" + std::to_string(pos2) + "]",
         "device " + std::to_string(*dup) + " appears twice (also at [" + std::to_string(pos) +
             "])");
  }
}

// ---------------------------------------------------------------- shapes

void validate_shape(std::span<const int64_t> shape, int64_t element_size,
                    const std::string& field) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    fail(ErrorCode::kOutOfRange, field,
         "rank " + std::to_string(shape.size()) + " exceeds the maximum rank " +
             std::to_string(kMaxRank));
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0)
      fail(ErrorCode::kInvalidArgument, field + "[" + std::to_string(i) + "]",
           "size " + std::to_string(shape[i]) + " is negative");
    if (__builtin_mul_overflow(n, shape[i], &n))
      fail(ErrorCode::kOverflow, field, "element count overflows 64 bits");
  }
  int64_t bytes;
  if (__builtin_mul_overflow(n, std::max<int64_t>(element_size, 1), &bytes))
    fail(ErrorCode::kOverflow, field, "byte count overflows 64 bits");
}

// ---------------------------------------------------------------- Geometry

namespace {

bool box_less(const Box& a, const Box& c) {
  for (int d = 0; d < a.rank; ++d) {
    if (a.lo[d] != c.lo[d]) return a.lo[d] < c.lo[d];
    if (a.hi[d] != c.hi[d]) return a.hi[d] < c.hi[d];
  }
  return false;
}

struct UnionFind {
  std::vector<uint32_t> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0u); }
  uint32_t find(uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(uint32_t a, uint32_t b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

}  // namespace

// Explicit cells from the entries sorted by box (`order`): see geometry.h.
void Geometry::build_explicit_cells(const std::vector<uint32_t>& order) {
  // Distinct boxes, ascending, with their entries (ascending).
  std::vector<uint32_t> dist_begin;  // into order
  for (size_t i = 0; i < order.size(); ++i)
    if (i == 0 || !(boxes[order[i]] == boxes[order[i - 1]]))
      dist_begin.push_back(static_cast<uint32_t>(i));
  const size_t nd = dist_begin.size();
  dist_begin.push_back(static_cast<uint32_t>(order.size()));
  auto dbox = [&](size_t k) -> const Box& { return boxes[order[dist_begin[k]]]; };

  // Groups of mutually overlapping distinct boxes: a sweep along sweep_dim,
  // boxes sorted by their lower bound there and then in a second dimension
  // d2. A box i can only overlap a box j later in that order whose lower
  // bound along sweep_dim is below i's upper bound, and, among the boxes
  // of one lower bound along sweep_dim (sorted by d2), only those whose
  // lower bound along d2 is below i's upper bound: a layout of tiles (rows
  // of boxes sharing their lower bounds) compares each box with a few.
  UnionFind uf(nd);
  bool capped = false;
  if (rank > 0 && nd > 1) {
    std::vector<uint32_t> by(nd);
    std::iota(by.begin(), by.end(), 0u);
    const int sd = sweep_dim;
    const int d2 = rank > 1 ? (sd == 0 ? 1 : 0) : -1;
    std::stable_sort(by.begin(), by.end(), [&](uint32_t a, uint32_t c) {
      if (dbox(a).lo[sd] != dbox(c).lo[sd]) return dbox(a).lo[sd] < dbox(c).lo[sd];
      return d2 >= 0 && dbox(a).lo[d2] < dbox(c).lo[d2];
    });
    std::vector<size_t> run_end(nd);  // end of the run of equal lo[sd]
    for (size_t i = nd; i-- > 0;)
      run_end[i] =
          i + 1 < nd && dbox(by[i + 1]).lo[sd] == dbox(by[i]).lo[sd] ? run_end[i + 1] : i + 1;
    int64_t pairs = 0;
    for (size_t i = 0; i < nd && !capped; ++i) {
      const Box& a = dbox(by[i]);
      if (a.empty()) continue;
      for (size_t j = i + 1; j < nd && dbox(by[j]).lo[sd] < a.hi[sd] && !capped;) {
        const size_t end = run_end[j];
        for (; j < end; ++j) {
          const Box& b = dbox(by[j]);
          if (d2 >= 0 && b.lo[d2] >= a.hi[d2]) break;  // and every later box of the run
          if (++pairs > kMaxOverlapPairs) {
            capped = true;
            break;
          }
          if (!intersect(a, b).empty()) uf.join(by[i], by[j]);
        }
        j = end;
      }
    }
  }

  struct Cell {
    Box box;
    std::vector<uint32_t> entries;
    bool overlaps = false;
  };
  std::vector<Cell> cells;
  auto entries_of = [&](size_t k, std::vector<uint32_t>& out) {
    out.insert(out.end(), order.begin() + dist_begin[k], order.begin() + dist_begin[k + 1]);
  };
  if (capped) {
    // Too many pairs to compare: one cell per distinct box, each of which
    // may overlap another.
    for (size_t k = 0; k < nd; ++k) {
      Cell& c = cells.emplace_back();
      c.box = dbox(k);
      entries_of(k, c.entries);
      c.overlaps = !c.box.empty();
    }
  } else {
    std::vector<std::vector<uint32_t>> members(nd);
    for (size_t k = 0; k < nd; ++k)
      members[uf.find(static_cast<uint32_t>(k))].push_back(static_cast<uint32_t>(k));
    int64_t frag_left = kMaxFragments, work_left = kMaxFragmentWork;
    std::vector<int64_t> coords[kMaxRank];
    std::vector<uint32_t> cover_off, cover;  // per grid cell: the distinct boxes covering it
    std::vector<uint32_t> prev, cur;
    for (size_t root = 0; root < nd; ++root) {
      const std::vector<uint32_t>& g = members[root];
      if (g.empty()) continue;
      if (g.size() == 1) {
        Cell& c = cells.emplace_back();
        c.box = dbox(g[0]);
        entries_of(g[0], c.entries);
        continue;
      }
      // Coordinate compression of the group.
      int64_t G = 1;
      bool fits = true;
      for (int d = 0; d < rank; ++d) {
        coords[d].clear();
        for (uint32_t k : g) {
          coords[d].push_back(dbox(k).lo[d]);
          coords[d].push_back(dbox(k).hi[d]);
        }
        std::sort(coords[d].begin(), coords[d].end());
        coords[d].erase(std::unique(coords[d].begin(), coords[d].end()), coords[d].end());
        const auto n = static_cast<int64_t>(coords[d].size()) - 1;
        if (n > frag_left / G) fits = false;
        if (fits) G *= n;
      }
      // Work: the (grid cell, entry) incidences the fragments will list.
      int64_t work = 0;
      if (fits && G <= frag_left) {
        for (uint32_t k : g) {
          int64_t w = dist_begin[k + 1] - dist_begin[k];
          for (int d = 0; d < rank && w > 0; ++d) {
            const auto a = std::lower_bound(coords[d].begin(), coords[d].end(), dbox(k).lo[d]);
            const auto b = std::lower_bound(coords[d].begin(), coords[d].end(), dbox(k).hi[d]);
            w *= b - a;
          }
          work += w;
          if (work > work_left) break;
        }
      }
      if (!fits || G > frag_left || work > work_left) {
        // Above the caps: one cell per distinct box, as if unrefined.
        for (uint32_t k : g) {
          Cell& c = cells.emplace_back();
          c.box = dbox(k);
          entries_of(k, c.entries);
          c.overlaps = true;
        }
        continue;
      }
      frag_left -= G;
      work_left -= work;
      // The distinct boxes covering each grid cell (row-major), as CSR.
      std::vector<int64_t> stride(static_cast<size_t>(rank), 1);
      for (int d = rank - 2; d >= 0; --d)
        stride[static_cast<size_t>(d)] =
            stride[static_cast<size_t>(d) + 1] * (static_cast<int64_t>(coords[d + 1].size()) - 1);
      cover_off.assign(static_cast<size_t>(G) + 1, 0);
      auto each_cell_of = [&](uint32_t k, auto&& f) {
        std::array<int64_t, kMaxRank> a{}, b{}, i{};
        for (int d = 0; d < rank; ++d) {
          a[d] = std::lower_bound(coords[d].begin(), coords[d].end(), dbox(k).lo[d]) -
                 coords[d].begin();
          b[d] = std::lower_bound(coords[d].begin(), coords[d].end(), dbox(k).hi[d]) -
                 coords[d].begin();
          if (a[d] >= b[d]) return;
          i[d] = a[d];
        }
        while (true) {
          int64_t idx = 0;
          for (int d = 0; d < rank; ++d) idx += i[d] * stride[static_cast<size_t>(d)];
          f(static_cast<size_t>(idx));
          int d = rank - 1;
          while (d >= 0 && ++i[d] == b[d]) {
            i[d] = a[d];
            --d;
          }
          if (d < 0) return;
        }
      };
      for (uint32_t k : g) each_cell_of(k, [&](size_t idx) { ++cover_off[idx + 1]; });
      for (size_t x = 1; x < cover_off.size(); ++x) cover_off[x] += cover_off[x - 1];
      cover.assign(cover_off.back(), 0);
      {
        std::vector<uint32_t> fill(cover_off.begin(), cover_off.end() - 1);
        for (uint32_t k : g) each_cell_of(k, [&](size_t idx) { cover[fill[idx]++] = k; });
      }
      // Fragments: grid cells covered by some box, runs of equal covers
      // along the last dimension merged.
      const int64_t last_n = static_cast<int64_t>(coords[rank - 1].size()) - 1;
      for (int64_t idx = 0; idx < G;) {
        const auto u = static_cast<size_t>(idx);
        if (cover_off[u] == cover_off[u + 1]) {
          ++idx;
          continue;
        }
        int64_t end = idx + 1;
        auto same = [&](size_t x, size_t y) {
          return cover_off[x + 1] - cover_off[x] == cover_off[y + 1] - cover_off[y] &&
                 std::equal(cover.begin() + cover_off[x], cover.begin() + cover_off[x + 1],
                            cover.begin() + cover_off[y]);
        };
        while (end % last_n != 0 && same(u, static_cast<size_t>(end))) ++end;
        Cell& c = cells.emplace_back();
        c.box.rank = rank;
        int64_t rem = idx;
        for (int d = 0; d < rank; ++d) {
          const int64_t i = rem / stride[static_cast<size_t>(d)];
          rem %= stride[static_cast<size_t>(d)];
          c.box.lo[d] = coords[d][static_cast<size_t>(i)];
          c.box.hi[d] = coords[d][static_cast<size_t>(i) + 1];
        }
        c.box.hi[rank - 1] = coords[rank - 1][static_cast<size_t>((end - 1) % last_n) + 1];
        for (uint32_t x = cover_off[u]; x < cover_off[u + 1]; ++x) entries_of(cover[x], c.entries);
        std::sort(c.entries.begin(), c.entries.end());
        idx = end;
      }
    }
  }
  std::stable_sort(cells.begin(), cells.end(),
                   [](const Cell& a, const Cell& b) { return box_less(a.box, b.box); });

  const size_t ne = boxes.size();
  cell_boxes.clear();
  cell_overlaps.clear();
  cell_offsets.assign(1, 0);
  cell_entries.clear();
  std::vector<uint32_t> count(ne + 1, 0);
  for (const Cell& c : cells) {
    cell_boxes.push_back(c.box);
    cell_overlaps.push_back(c.overlaps ? 1 : 0);
    cell_entries.insert(cell_entries.end(), c.entries.begin(), c.entries.end());
    cell_offsets.push_back(static_cast<uint32_t>(cell_entries.size()));
    for (uint32_t e : c.entries) ++count[e + 1];
  }
  fragmented = false;
  for (size_t e = 0; e < ne; ++e) {
    if (count[e + 1] > 1) fragmented = true;
    count[e + 1] += count[e];
  }
  entry_cell_offsets = count;
  entry_cells.assign(count.back(), 0);
  cell_of_entry.assign(ne, 0);
  for (size_t c = 0; c + 1 < cell_offsets.size(); ++c)
    for (uint32_t i = cell_offsets[c]; i < cell_offsets[c + 1]; ++i)
      entry_cells[count[cell_entries[i]]++] = static_cast<uint32_t>(c);
  for (size_t e = 0; e < ne; ++e)
    cell_of_entry[e] = entry_cells.empty() ? 0 : entry_cells[entry_cell_offsets[e]];
}

void Geometry::finalize() {
  Hasher h;
  h.u64(tiled ? 1 : 2);
  h.i64(rank);
  h.i64(num_summands);
  h.i64(static_cast<int64_t>(op));
  h.u64(devices.size());
  for (size_t e = 0; e < devices.size(); ++e) {
    h.i64(devices[e]);
    h.i64(summands[e]);
  }
  if (tiled) {
    for (int d = 0; d < rank; ++d) h.i64(counts[d]);
    for (int64_t s : shard) h.i64(s);
    const int64_t cells = num_cells();
    cell_of_entry.assign(devices.size(), 0);
    std::vector<uint32_t> count(static_cast<size_t>(cells) + 1, 0);
    for (size_t e = 0; e < devices.size(); ++e) {
      int64_t c = 0;
      for (int d = 0; d < rank; ++d) c = c * counts[d] + shard[e * rank + d];
      cell_of_entry[e] = c;
      ++count[static_cast<size_t>(c) + 1];
    }
    for (size_t c = 1; c < count.size(); ++c) count[c] += count[c - 1];
    cell_offsets = count;
    cell_entries.assign(devices.size(), 0);
    for (size_t e = 0; e < devices.size(); ++e)
      cell_entries[count[static_cast<size_t>(cell_of_entry[e])]++] = static_cast<uint32_t>(e);
    unique_cells = true;
    for (size_t c = 0; c + 1 < cell_offsets.size(); ++c)
      if (cell_offsets[c + 1] - cell_offsets[c] != 1) unique_cells = false;
  } else {
    for (const Box& b : boxes)
      for (int d = 0; d < rank; ++d) {
        h.i64(b.lo[d]);
        h.i64(b.hi[d]);
      }
    // Sweep along the dim with the most distinct lower bounds.
    sweep_dim = 0;
    size_t best = 0;
    for (int d = 0; d < rank; ++d) {
      std::set<int64_t> los;
      for (const Box& b : boxes) los.insert(b.lo[d]);
      if (los.size() > best) {
        best = los.size();
        sweep_dim = d;
      }
    }
    by_lo.resize(boxes.size());
    std::iota(by_lo.begin(), by_lo.end(), 0u);
    if (rank > 0) {
      std::stable_sort(by_lo.begin(), by_lo.end(), [&](uint32_t a, uint32_t b) {
        return boxes[a].lo[sweep_dim] < boxes[b].lo[sweep_dim];
      });
      max_sweep_extent = 0;
      for (const Box& b : boxes) max_sweep_extent = std::max(max_sweep_extent, b.extent(sweep_dim));
    }
    // Cells: entries with equal boxes (replicas of one box), numbered in
    // ascending order of their boxes (lo, then hi, dimension by dimension),
    // entries ascending within a cell.
    std::vector<uint32_t> order(boxes.size());
    std::iota(order.begin(), order.end(), 0u);
    auto box_less = [&](const Box& a, const Box& c) {
      for (int d = 0; d < a.rank; ++d) {
        if (a.lo[d] != c.lo[d]) return a.lo[d] < c.lo[d];
        if (a.hi[d] != c.hi[d]) return a.hi[d] < c.hi[d];
      }
      return false;
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t c) { return box_less(boxes[a], boxes[c]); });
    build_explicit_cells(order);
  }
  hash = h.value();
}

namespace {

std::string shape_str(std::span<const int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Lowered NamedSharding geometries are shared between tensors with the same
// mesh and spec; the cache keeps the mesh alive and compares it by value.
struct GeometryKey {
  Mesh mesh;
  std::vector<std::vector<std::string>> dims;
  std::vector<std::string> partial;
  ReduceOp op;
  bool operator<(const GeometryKey& o) const {
    return std::tie(mesh.axis_names, mesh.shape, mesh.devices, dims, partial, op) <
           std::tie(o.mesh.axis_names, o.mesh.shape, o.mesh.devices, o.dims, o.partial, o.op);
  }
};

std::mutex g_cache_mutex;
std::map<GeometryKey, std::shared_ptr<const Geometry>>& geometry_cache() {
  static std::map<GeometryKey, std::shared_ptr<const Geometry>> cache;
  return cache;
}

std::shared_ptr<const Geometry> lower_named(const NamedSharding& s, size_t rank,
                                            const std::string& field) {
  if (!s.mesh) fail(ErrorCode::kInvalidArgument, field + ".mesh", "missing mesh");
  const Mesh& mesh = *s.mesh;
  // A mesh, spec and op equal to a cached key's were checked when it was
  // lowered: only the rank is this tensor's (a mesh of 65,536 devices costs
  // a sort to check, once per tensor otherwise).
  GeometryKey key{mesh, s.dims, s.partial_axes, s.partial_op};
  if (s.dims.size() == rank) {
    std::lock_guard lock(g_cache_mutex);
    auto it = geometry_cache().find(key);
    if (it != geometry_cache().end()) return it->second;
  }
  mesh.validate(field + ".mesh");
  if (s.dims.size() != rank)
    fail(ErrorCode::kInvalidArgument, field + ".spec",
         std::to_string(s.dims.size()) + " entries for a tensor of rank " + std::to_string(rank));
  std::vector<int> used(mesh.shape.size(), 0);
  std::vector<std::vector<int>> dim_axes(rank);
  for (size_t d = 0; d < rank; ++d) {
    for (size_t j = 0; j < s.dims[d].size(); ++j) {
      const std::string f = field + ".spec[" + std::to_string(d) + "]" +
                            (s.dims[d].size() > 1 ? "[" + std::to_string(j) + "]" : "");
      int a = mesh.axis_index(s.dims[d][j]);
      if (a < 0) fail(ErrorCode::kInvalidArgument, f, "unknown mesh axis \"" + s.dims[d][j] + "\"");
      if (used[a]++)
        fail(ErrorCode::kInvalidArgument, f, "mesh axis \"" + s.dims[d][j] + "\" used twice");
      dim_axes[d].push_back(a);
    }
  }
  std::vector<int> partial_axes;
  for (size_t j = 0; j < s.partial_axes.size(); ++j) {
    const std::string f = field + ".partial.axes[" + std::to_string(j) + "]";
    int a = mesh.axis_index(s.partial_axes[j]);
    if (a < 0)
      fail(ErrorCode::kInvalidArgument, f, "unknown mesh axis \"" + s.partial_axes[j] + "\"");
    if (used[a]++)
      fail(ErrorCode::kInvalidArgument, f, "mesh axis \"" + s.partial_axes[j] + "\" used twice");
    partial_axes.push_back(a);
  }
  if (!reduce_op_valid(static_cast<int32_t>(s.partial_op)))
    fail(ErrorCode::kInvalidArgument, field + ".partial.op", "invalid reduce op");

  auto g = std::make_shared<Geometry>();
  g->tiled = true;
  g->rank = static_cast<int32_t>(rank);
  g->op = s.partial_op;
  int64_t summands = 1;
  for (int a : partial_axes) summands *= mesh.shape[a];
  g->num_summands = static_cast<int32_t>(summands);
  for (size_t d = 0; d < rank; ++d) {
    int64_t k = 1;
    for (int a : dim_axes[d]) k *= mesh.shape[a];
    g->counts[d] = k;
  }
  const int64_t n = mesh.size();
  const size_t naxes = mesh.shape.size();
  // Entries sorted by device: order mesh positions by device id.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return mesh.devices[static_cast<size_t>(a)] < mesh.devices[static_cast<size_t>(b)];
  });
  g->devices.resize(static_cast<size_t>(n));
  g->summands.resize(static_cast<size_t>(n));
  g->shard.resize(static_cast<size_t>(n) * rank);
  std::vector<int64_t> coord(naxes);
  for (int64_t e = 0; e < n; ++e) {
    int64_t pos = order[static_cast<size_t>(e)];
    for (size_t a = naxes; a-- > 0;) {
      coord[a] = pos % mesh.shape[a];
      pos /= mesh.shape[a];
    }
    g->devices[static_cast<size_t>(e)] =
        mesh.devices[static_cast<size_t>(order[static_cast<size_t>(e)])];
    for (size_t d = 0; d < rank; ++d) {
      int64_t idx = 0;
      for (int a : dim_axes[d]) idx = idx * mesh.shape[a] + coord[a];
      g->shard[static_cast<size_t>(e) * rank + d] = idx;
    }
    int64_t sm = 0;
    for (int a : partial_axes) sm = sm * mesh.shape[a] + coord[a];
    g->summands[static_cast<size_t>(e)] = static_cast<int32_t>(sm);
  }
  g->finalize();
  std::lock_guard lock(g_cache_mutex);
  auto& cache = geometry_cache();
  if (cache.size() >= 1024) cache.clear();  // bounded; geometries stay alive through layouts
  cache.emplace(std::move(key), g);
  return g;
}

}  // namespace

// ---------------------------------------------------------------- Layout

Layout::Layout() {
  auto g = std::make_shared<Geometry>();
  g->tiled = true;
  g->finalize();
  geometry_ = g;
}

Layout Layout::from_named(const NamedSharding& sharding, std::span<const int64_t> shape,
                          const std::string& field) {
  validate_shape(shape, 1, field + ".shape");
  Layout l;
  l.geometry_ = lower_named(sharding, shape.size(), field);
  l.shape_.assign(shape.begin(), shape.end());
  return l;
}

namespace {
void check_entries_common(const std::vector<int64_t>& devices, const std::vector<int32_t>& summands,
                          int32_t num_summands, ReduceOp op, const std::string& field,
                          const std::vector<size_t>& original_index) {
  if (num_summands < 1)
    fail(ErrorCode::kInvalidArgument, field + ".summands",
         std::to_string(num_summands) + " must be at least 1");
  // Each summand is held by some entry, so there are at most as many
  // summands as entries: a count that the entries do not back would buy
  // work (reductions, oracles loop over summands) that nothing describes.
  if (static_cast<uint64_t>(num_summands) > std::max<uint64_t>(1, devices.size()))
    fail(ErrorCode::kInvalidArgument, field + ".summands",
         std::to_string(num_summands) + " summands but only " + std::to_string(devices.size()) +
             " entries: every summand must be held by some entry");
  if (!reduce_op_valid(static_cast<int32_t>(op)))
    fail(ErrorCode::kInvalidArgument, field + ".op",
         "invalid reduce op " + std::to_string(static_cast<int32_t>(op)));
  for (size_t e = 0; e < devices.size(); ++e) {
    const bool bad = devices[e] < 0 || (e > 0 && devices[e] == devices[e - 1]) || summands[e] < 0 ||
                     summands[e] >= num_summands;
    if (!bad) continue;  // build the message only when there is an error
    const std::string f = field + ".entries[" + std::to_string(original_index[e]) + "]";
    if (devices[e] < 0)
      fail(ErrorCode::kInvalidArgument, f + ".device",
           "device id " + std::to_string(devices[e]) + " is negative");
    if (e > 0 && devices[e] == devices[e - 1])
      fail(ErrorCode::kInvalidArgument, f + ".device",
           "device " + std::to_string(devices[e]) + " holds two entries of one layout");
    if (summands[e] < 0 || summands[e] >= num_summands)
      fail(ErrorCode::kInvalidArgument, f + ".summand",
           std::to_string(summands[e]) + " is outside [0, " + std::to_string(num_summands) + ")");
  }
}
}  // namespace

Layout Layout::from_boxes(std::span<const int64_t> shape, std::vector<LayoutEntry> entries,
                          int32_t num_summands, ReduceOp op, const std::string& field) {
  validate_shape(shape, 1, field + ".shape");
  const int rank = static_cast<int>(shape.size());
  std::vector<size_t> idx(entries.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return entries[a].device < entries[b].device; });
  auto g = std::make_shared<Geometry>();
  g->tiled = false;
  g->rank = rank;
  g->num_summands = num_summands;
  g->op = op;
  for (size_t i = 0; i < idx.size(); ++i) {
    const LayoutEntry& en = entries[idx[i]];
    const std::string f = field + ".entries[" + std::to_string(idx[i]) + "]";
    if (en.box.rank != rank)
      fail(ErrorCode::kInvalidArgument, f + ".box",
           "rank " + std::to_string(en.box.rank) + " for a tensor of rank " + std::to_string(rank));
    for (int d = 0; d < rank; ++d)
      if (en.box.lo[d] < 0 || en.box.lo[d] > en.box.hi[d] || en.box.hi[d] > shape[d])
        fail(ErrorCode::kInvalidArgument, f + ".box",
             to_string(en.box) + " is not inside the tensor shape " + shape_str(shape) + " (dim " +
                 std::to_string(d) + ")");
    g->devices.push_back(en.device);
    g->summands.push_back(en.summand);
    g->boxes.push_back(en.box);
  }
  check_entries_common(g->devices, g->summands, num_summands, op, field, idx);
  if (entries.size() > 0xfffffff0u)
    fail(ErrorCode::kOutOfRange, field + ".entries", "too many entries");
  g->finalize();
  Layout l;
  l.shape_.assign(shape.begin(), shape.end());
  l.geometry_ = std::move(g);
  return l;
}

Layout Layout::from_tiles(std::span<const int64_t> shape, std::span<const int64_t> counts,
                          std::vector<TileEntry> entries, int32_t num_summands, ReduceOp op,
                          const std::string& field) {
  validate_shape(shape, 1, field + ".shape");
  const int rank = static_cast<int>(shape.size());
  if (counts.size() != shape.size())
    fail(ErrorCode::kInvalidArgument, field + ".counts",
         std::to_string(counts.size()) + " shard counts for a tensor of rank " +
             std::to_string(rank));
  int64_t cells = 1;
  for (int d = 0; d < rank; ++d) {
    if (counts[d] < 1 || counts[d] > (int64_t{1} << 31))
      fail(ErrorCode::kInvalidArgument, field + ".counts[" + std::to_string(d) + "]",
           "shard count " + std::to_string(counts[d]) + " is not in [1, 2^31]");
    if (__builtin_mul_overflow(cells, counts[d], &cells) || cells > (int64_t{1} << 31))
      fail(ErrorCode::kOutOfRange, field + ".counts", "more than 2^31 cells");
  }
  if (entries.size() > 0xfffffff0u)
    fail(ErrorCode::kOutOfRange, field + ".entries", "too many entries");
  // Cells are indexed densely: bound them by the entries so a hostile input
  // cannot make a small layout allocate gigabytes.
  if (cells > 4 * static_cast<int64_t>(entries.size()) + 64)
    fail(ErrorCode::kOutOfRange, field + ".counts",
         std::to_string(cells) + " cells for " + std::to_string(entries.size()) + " entries");
  std::vector<size_t> idx(entries.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return entries[a].device < entries[b].device; });
  auto g = std::make_shared<Geometry>();
  g->tiled = true;
  g->rank = rank;
  g->num_summands = num_summands;
  g->op = op;
  for (int d = 0; d < rank; ++d) g->counts[d] = counts[d];
  for (size_t i = 0; i < idx.size(); ++i) {
    const TileEntry& en = entries[idx[i]];
    for (int d = 0; d < rank; ++d)
      if (en.shard[d] < 0 || en.shard[d] >= counts[d])
        fail(ErrorCode::kInvalidArgument,
             field + ".entries[" + std::to_string(idx[i]) + "].shard[" + std::to_string(d) + "]",
             std::to_string(en.shard[d]) + " is outside [0, " + std::to_string(counts[d]) + ")");
    g->devices.push_back(en.device);
    g->summands.push_back(en.summand);
    for (int d = 0; d < rank; ++d) g->shard.push_back(en.shard[d]);
  }
  check_entries_common(g->devices, g->summands, num_summands, op, field, idx);
  g->finalize();
  Layout l;
  l.shape_.assign(shape.begin(), shape.end());
  l.geometry_ = std::move(g);
  return l;
}

Layout Layout::with_shape(std::span<const int64_t> shape, const std::string& field) const {
  if (!tiled()) fail(ErrorCode::kInvalidArgument, field, "with_shape needs a tiled layout");
  if (static_cast<int32_t>(shape.size()) != geometry_->rank)
    fail(ErrorCode::kInvalidArgument, field + ".shape",
         "rank " + std::to_string(shape.size()) + " for a layout of rank " +
             std::to_string(geometry_->rank));
  validate_shape(shape, 1, field + ".shape");
  Layout l;
  l.shape_.assign(shape.begin(), shape.end());
  l.geometry_ = geometry_;
  return l;
}

int64_t Layout::num_elements() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}
size_t Layout::num_entries() const { return geometry_->devices.size(); }
int64_t Layout::device(size_t entry) const { return geometry_->devices[entry]; }
int32_t Layout::summand(size_t entry) const { return geometry_->summands[entry]; }
int32_t Layout::num_summands() const { return geometry_->num_summands; }
ReduceOp Layout::reduce_op() const { return geometry_->op; }
bool Layout::tiled() const { return geometry_->tiled; }

Split Layout::split(int dim) const { return Split{shape_[dim], geometry_->counts[dim]}; }
int64_t Layout::shard_index(size_t entry, int dim) const {
  return geometry_->shard[entry * geometry_->rank + dim];
}
int64_t Layout::shard_count(int dim) const { return geometry_->counts[dim]; }

Box Layout::full_box() const {
  Box b;
  b.rank = rank();
  for (int d = 0; d < b.rank; ++d) b.hi[d] = shape_[d];
  return b;
}

Box Layout::box(size_t entry) const {
  const Geometry& g = *geometry_;
  if (!g.tiled) return g.boxes[entry];
  Box b;
  b.rank = g.rank;
  for (int d = 0; d < g.rank; ++d) {
    // Split{n, k}'s bounds, without its division where the dimension is
    // not split (k = 1: chunk n), as most dimensions of a layout are.
    const int64_t n = shape_[d];
    const int64_t k = g.counts[d];
    const int64_t chunk = k == 1 ? n : Split{n, k}.chunk();
    const int64_t i = g.shard[entry * g.rank + d];
    b.lo[d] = std::min(n, i * chunk);
    b.hi[d] = std::min(n, (i + 1) * chunk);
  }
  return b;
}

std::optional<size_t> Layout::entry_of(int64_t device) const {
  const auto& devs = geometry_->devices;
  auto it = std::lower_bound(devs.begin(), devs.end(), device);
  if (it == devs.end() || *it != device) return std::nullopt;
  return static_cast<size_t>(it - devs.begin());
}

std::vector<LayoutEntry> Layout::entries() const {
  std::vector<LayoutEntry> out(num_entries());
  for (size_t e = 0; e < out.size(); ++e) out[e] = {device(e), summand(e), box(e)};
  return out;
}

bool operator==(const Layout& a, const Layout& b) {
  if (a.shape_ != b.shape_ || a.num_summands() != b.num_summands() ||
      a.num_entries() != b.num_entries())
    return false;
  if (a.num_summands() > 1 && a.reduce_op() != b.reduce_op()) return false;
  if (a.geometry_ == b.geometry_) return true;
  for (size_t e = 0; e < a.num_entries(); ++e)
    if (a.device(e) != b.device(e) || a.summand(e) != b.summand(e) || !(a.box(e) == b.box(e)))
      return false;
  return true;
}

uint64_t Layout::hash() const {
  Hasher h;
  h.u64(shape_.size());
  for (int64_t s : shape_) h.i64(s);
  h.i64(num_summands());
  h.i64(num_summands() > 1 ? static_cast<int64_t>(reduce_op()) : 0);
  h.u64(num_entries());
  for (size_t e = 0; e < num_entries(); ++e) {
    h.i64(device(e));
    h.i64(summand(e));
    Box b = box(e);
    for (int d = 0; d < b.rank; ++d) {
      h.i64(b.lo[d]);
      h.i64(b.hi[d]);
    }
  }
  return h.value();
}

uint64_t Layout::fingerprint_hash() const {
  Hasher h;
  h.u64(shape_.size());
  for (int64_t s : shape_) h.i64(s);
  h.u64(geometry_->hash);
  return h.value();
}

}  // namespace reshard
