// Test support: flat layouts (reshard/flat.h) written out element by element
// by the framework rules, independent of the lowering, and random flat cases
// (tests/core/flat_layout_test.cc, tests/mpi/engine_mpi_test.cc flat).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "reshard/flat.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"

namespace reshard::testing {

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// ------------------------------------------------------------ reference

// The framework rules written out element by element, independent of the
// lowering: per rank, per position of its flat buffer, the (tensor, element)
// it holds or {-1, -1} for padding.
struct Slot {
  int64_t tensor = -1, element = -1;
};

// The row-major element indices (in a tensor of `shape`) of `box`, in the
// box's own row-major order.
inline std::vector<int64_t> box_elements(const std::vector<int64_t>& shape, const Box& box) {
  std::vector<int64_t> out;
  if (box.volume() == 0) return out;
  const size_t rank = shape.size();
  std::vector<int64_t> idx(rank);
  for (size_t d = 0; d < rank; ++d) idx[d] = box.lo[d];
  for (;;) {
    int64_t lin = 0;
    for (size_t d = 0; d < rank; ++d) lin = lin * shape[d] + idx[d];
    out.push_back(lin);
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++idx[d] < box.hi[d]) break;
      idx[d] = box.lo[d];
      if (d == 0) return out;
    }
    if (rank == 0) return out;
  }
}

// vLLM's fused parameters (QKVParallelLinear, MergedColumnParallelLinear):
// per rank, each member's box of its own layout, dense and row-major, in a
// slot the size of the member's largest box on any rank.
inline std::vector<std::vector<Slot>> reference_fused(const FlatLayout& f) {
  const size_t w = f.devices.size();
  auto up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  std::vector<std::vector<Slot>> out(w);
  int64_t pos = 0;
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const Layout& m = f.members[i];
    std::vector<std::vector<int64_t>> elems(w);
    int64_t slot = 0;
    for (size_t r = 0; r < w; ++r)
      for (size_t e = 0; e < m.num_entries(); ++e)
        if (m.device(e) == f.devices[r]) {
          elems[r] = box_elements(f.tensors[i].shape, m.box(e));
          slot = std::max(slot, static_cast<int64_t>(elems[r].size()));
        }
    const int64_t start = f.offsets.empty() ? up(pos, f.align_elements) : f.offsets[i];
    for (size_t r = 0; r < w; ++r) {
      out[r].resize(static_cast<size_t>(start + slot));
      for (size_t k = 0; k < elems[r].size(); ++k)
        out[r][static_cast<size_t>(start) + k] = Slot{static_cast<int64_t>(i), elems[r][k]};
    }
    pos = start + slot;
  }
  for (auto& buf : out) buf.resize(static_cast<size_t>(up(pos, f.pad_multiple)));
  return out;
}

inline std::vector<std::vector<Slot>> reference(const FlatLayout& f) {
  if (f.partition == FlatPartition::kFused) return reference_fused(f);
  const int64_t w = static_cast<int64_t>(f.devices.size());
  auto up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  std::vector<std::vector<Slot>> out(static_cast<size_t>(w));
  if (f.partition == FlatPartition::kConcat) {
    std::vector<Slot> flat;
    int64_t pos = 0;
    for (size_t i = 0; i < f.tensors.size(); ++i) {
      const int64_t start = f.offsets.empty() ? up(pos, f.align_elements) : f.offsets[i];
      const int64_t n = numel(f.tensors[i].shape);
      if (static_cast<int64_t>(flat.size()) < start + n)
        flat.resize(static_cast<size_t>(start + n));
      for (int64_t k = 0; k < n; ++k)
        flat[static_cast<size_t>(start + k)] = Slot{static_cast<int64_t>(i), k};
      pos = start + n;
    }
    const int64_t total = f.total_elements >= 0
                              ? f.total_elements
                              : up(pos, w / std::gcd(w, f.pad_multiple) * f.pad_multiple);
    flat.resize(static_cast<size_t>(total));
    const int64_t s = total / w;
    for (int64_t r = 0; r < w; ++r)
      out[static_cast<size_t>(r)].assign(flat.begin() + r * s, flat.begin() + (r + 1) * s);
  } else {
    for (int64_t r = 0; r < w; ++r) {
      std::vector<Slot>& buf = out[static_cast<size_t>(r)];
      int64_t pos = 0;
      for (size_t i = 0; i < f.tensors.size(); ++i) {
        const int64_t n = numel(f.tensors[i].shape);
        const int64_t p = (n + w - 1) / w;
        const int64_t start = up(pos, f.align_elements);
        buf.resize(static_cast<size_t>(start + p));
        for (int64_t k = 0; k < p; ++k)
          if (r * p + k < n)
            buf[static_cast<size_t>(start + k)] = Slot{static_cast<int64_t>(i), r * p + k};
        pos = start + p;
      }
      buf.resize(static_cast<size_t>(up(pos, f.pad_multiple)));
    }
  }
  return out;
}

// The oracle's source values of the whole of tensor `t` (position
// `index` in the plan), row-major.
inline std::vector<std::byte> whole_values(const TensorSpec& t, uint32_t index) {
  TensorSpec whole = t;
  Box b;
  b.rank = static_cast<int32_t>(t.shape.size());
  for (size_t d = 0; d < t.shape.size(); ++d) b.hi[d] = t.shape[d];
  whole.src = Layout::from_boxes(t.shape, {LayoutEntry{0, 0, b}}, 1, ReduceOp::kSum, "whole");
  std::vector<std::byte> out(static_cast<size_t>(numel(t.shape) * dtype_size(t.dtype)));
  fill_source_shard(whole, index, 0, out);
  return out;
}

inline constexpr std::byte kPad{0xA5};

// ------------------------------------------------------------ random cases

// Random member layouts for a fused flat layout's tensors: named
// shardings over a 2-axis mesh of its ranks (uneven splits and replicas
// included) or, for a quarter, vLLM's padded split of dim 0 as explicit
// boxes (chunks of ceil(n / W) rounded up to a multiple of 1-3 rows, the
// ranks past the end holding nothing, with no entry or an empty box).
inline std::vector<Layout> random_members(const FlatLayout& f, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  const int64_t w = static_cast<int64_t>(f.devices.size());
  std::vector<int64_t> divisors;
  for (int64_t a = 1; a <= w; ++a)
    if (w % a == 0) divisors.push_back(a);
  auto mesh = std::make_shared<Mesh>();
  mesh->axis_names = {"p", "q"};
  const int64_t a = divisors[rng() % divisors.size()];
  mesh->shape = {a, w / a};
  mesh->devices = f.devices;
  std::vector<Layout> out;
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const std::vector<int64_t>& shape = f.tensors[i].shape;
    const std::string field = "member" + std::to_string(i);
    if (!shape.empty() && rng() % 4 == 0) {
      const int64_t m = pick(1, 3);
      const int64_t c = ((shape[0] + w - 1) / w + m - 1) / m * m;
      std::vector<LayoutEntry> entries;
      for (int64_t r = 0; r < w; ++r) {
        Box b;
        b.rank = static_cast<int32_t>(shape.size());
        for (size_t d = 0; d < shape.size(); ++d) b.hi[d] = shape[d];
        b.lo[0] = std::min(shape[0], r * c);
        b.hi[0] = std::min(shape[0], (r + 1) * c);
        if (b.volume() > 0 || rng() % 2)
          entries.push_back(LayoutEntry{f.devices[static_cast<size_t>(r)], 0, b});
      }
      out.push_back(Layout::from_boxes(shape, std::move(entries), 1, ReduceOp::kSum, field));
      continue;
    }
    NamedSharding s;
    s.mesh = mesh;
    s.dims.resize(shape.size());
    for (const char* axis : {"p", "q"})
      if (!shape.empty() && rng() % 4 != 0) s.dims[rng() % shape.size()].push_back(axis);
    out.push_back(Layout::from_named(s, shape, field));
  }
  return out;
}

struct FlatCase {
  PlanInput input;
  FlatLayout flat;
  FlatLowered lowered;
  bool flat_is_source = true;
};

// A random flat layout (1-6 ranks, 1-5 tensors of rank 0-3 with empty ones,
// any partition, alignments 1-8, pad multiples 1-5, explicit offsets and
// totals on a third of the concat cases, explicit offsets on a third of the
// fused ones, fused members from random_members) as the source (or destination) of
// every tensor, the other side named shardings on a 2-axis mesh sharing the
// device pool; devices on `nproc` processes (0: 1-3 at random), slot
// devices on their device's.
inline FlatCase random_case(uint64_t seed, bool flat_is_source, int32_t nproc = 0) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  FlatCase c;
  c.flat_is_source = flat_is_source;
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kU8, DType::kF64};
  const DType dtype = dtypes[rng() % 4];
  const int64_t w = pick(1, 6);
  // Flat devices: distinct ids from 0..11; the other side's mesh may share them.
  std::vector<int64_t> pool(12);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  c.flat.devices.assign(pool.begin(), pool.begin() + w);
  const FlatPartition partitions[] = {FlatPartition::kConcat, FlatPartition::kPerTensor,
                                      FlatPartition::kFused};
  c.flat.partition = partitions[rng() % 3];
  c.flat.align_elements = pick(1, 8);
  c.flat.pad_multiple = pick(1, 5);
  const int nt = static_cast<int>(pick(1, 5));
  for (int i = 0; i < nt; ++i) {
    FlatTensor t;
    t.dtype = dtype;
    const int rank = static_cast<int>(pick(0, 3));
    for (int d = 0; d < rank; ++d) t.shape.push_back(pick(0, 6) == 0 ? 0 : pick(1, 7));
    c.flat.tensors.push_back(t);
  }
  if (c.flat.partition == FlatPartition::kConcat && rng() % 3 == 0) {
    // Explicit offsets with gaps, and an explicit total.
    int64_t pos = 0;
    for (const FlatTensor& t : c.flat.tensors) {
      const int64_t start = (pos + pick(0, 9) + c.flat.align_elements - 1) / c.flat.align_elements *
                            c.flat.align_elements;
      c.flat.offsets.push_back(start);
      pos = start + numel(t.shape);
    }
    const int64_t m = w / std::gcd(w, c.flat.pad_multiple) * c.flat.pad_multiple;
    c.flat.total_elements = ((pos + m - 1) / m + pick(0, 2)) * m;
  }
  if (c.flat.partition == FlatPartition::kFused) {
    c.flat.members = random_members(c.flat, rng());
    if (rng() % 3 == 0) {
      // Explicit offsets with gaps, past each member's largest box.
      int64_t pos = 0;
      for (const Layout& m : c.flat.members) {
        const int64_t start = (pos + pick(0, 9) + c.flat.align_elements - 1) /
                              c.flat.align_elements * c.flat.align_elements;
        c.flat.offsets.push_back(start);
        int64_t slot = 0;
        for (size_t e = 0; e < m.num_entries(); ++e) slot = std::max(slot, m.box(e).volume());
        pos = start + slot;
      }
    }
  }
  c.lowered = lower_flat(c.flat, "flat");

  // The other side: a mesh of 1-6 devices from the same pool, named
  // shardings over its two axes (or one), uneven splits included.
  std::shuffle(pool.begin(), pool.end(), rng);
  const int64_t a = pick(1, 3), b = pick(1, 2);
  auto mesh = std::make_shared<Mesh>();
  mesh->axis_names = {"x", "y"};
  mesh->shape = {a, b};
  mesh->devices.assign(pool.begin(), pool.begin() + a * b);
  const int64_t processes = nproc > 0 ? nproc : pick(1, 3);
  for (int64_t d = 0; d < 12; ++d)
    c.input.topology.add(
        DeviceInfo{d, static_cast<int32_t>(d % processes), static_cast<int32_t>(d % processes), 0});
  add_flat_slots(c.input.topology, c.lowered, "flat");
  for (int i = 0; i < nt; ++i) {
    TensorSpec t;
    t.name = "t" + std::to_string(i);
    t.shape = c.flat.tensors[static_cast<size_t>(i)].shape;
    t.dtype = dtype;
    NamedSharding s;
    s.mesh = mesh;
    s.dims.resize(t.shape.size());
    for (const char* axis : {"x", "y"})
      if (!t.shape.empty() && rng() % 3 != 0) s.dims[rng() % t.shape.size()].push_back(axis);
    Layout other = Layout::from_named(s, t.shape, t.name + ".other");
    t.src = flat_is_source ? c.lowered.layouts[static_cast<size_t>(i)] : other;
    t.dst = flat_is_source ? other : c.lowered.layouts[static_cast<size_t>(i)];
    c.input.tensors.push_back(std::move(t));
  }
  if (rng() % 2) c.input.options.staging_budget_bytes = 4096;
  return c;
}

// Rank r's flat buffer as the reference rule fills it from the oracle's
// values of `tensors` (padding: kPad).
inline std::vector<std::byte> reference_buffer(const FlatCase& c,
                                               const std::vector<TensorSpec>& tensors, size_t r) {
  const auto ref = reference(c.flat);
  const int64_t es = c.lowered.element_size;
  std::vector<std::byte> out(static_cast<size_t>(c.lowered.shard_bytes), kPad);
  for (size_t t = 0; t < tensors.size(); ++t) {
    const std::vector<std::byte> v = whole_values(tensors[t], static_cast<uint32_t>(t));
    for (size_t k = 0; k < ref[r].size(); ++k)
      if (ref[r][k].tensor == static_cast<int64_t>(t))
        std::memcpy(out.data() + static_cast<int64_t>(k) * es, v.data() + ref[r][k].element * es,
                    static_cast<size_t>(es));
  }
  return out;
}

}  // namespace reshard::testing
