// Test support: random reshard cases (ranks 0-5, uneven sizes, meshes of
// 1-64 devices, equal/overlapping/disjoint device sets, multi-axis dims,
// replication, partial sources and destinations, explicit box layouts).
#pragma once

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "reshard/plan.h"

namespace reshard::testing {

struct CaseOptions {
  int max_rank = 5;
  int max_devices = 64;
  int max_tensors = 3;
  int64_t max_dim = 13;
  bool allow_partial = true;
  bool allow_explicit = true;
};

class CaseGen {
 public:
  explicit CaseGen(uint64_t seed, CaseOptions o = {}) : rng_(seed), o_(o) {}

  int64_t uni(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }

  std::shared_ptr<Mesh> mesh(std::vector<int64_t> devices_pool, int max_devices) {
    auto m = std::make_shared<Mesh>();
    max_devices = std::min(max_devices, static_cast<int>(devices_pool.size()));
    const int naxes = static_cast<int>(uni(0, 3));
    int64_t total = 1;
    for (int a = 0; a < naxes; ++a) {
      int64_t s = uni(1, 4);
      while (total * s > max_devices) --s;
      m->axis_names.push_back(std::string(1, static_cast<char>('a' + a)));
      m->shape.push_back(s);
      total *= s;
    }
    std::shuffle(devices_pool.begin(), devices_pool.end(), rng_);
    devices_pool.resize(static_cast<size_t>(total));
    m->devices = devices_pool;
    return m;
  }

  NamedSharding sharding(const std::shared_ptr<Mesh>& m, int rank, bool partial) {
    NamedSharding s;
    s.mesh = m;
    s.dims.resize(static_cast<size_t>(rank));
    std::vector<std::string> axes = m->axis_names;
    std::shuffle(axes.begin(), axes.end(), rng_);
    for (const auto& a : axes) {
      const int64_t r = uni(0, 3);
      if (r == 0 || rank == 0) {
        if (partial && coin(0.6)) s.partial_axes.push_back(a);
        continue;  // replicated
      }
      s.dims[static_cast<size_t>(uni(0, rank - 1))].push_back(a);
    }
    const int64_t op = uni(0, 2);
    s.partial_op = op == 0 ? ReduceOp::kSum : op == 1 ? ReduceOp::kMax : ReduceOp::kMin;
    return s;
  }

  Layout maybe_explicit(const Layout& l, const std::vector<int64_t>& shape) {
    if (!o_.allow_explicit || !coin(0.25)) return l;
    return Layout::from_boxes(shape, l.entries(), l.num_summands(), l.reduce_op(), "explicit");
  }

  Box random_box(const std::vector<int64_t>& shape) {
    Box box;
    box.rank = static_cast<int32_t>(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t a = uni(0, shape[i]), b = uni(0, shape[i]);
      box.lo[i] = std::min(a, b);
      box.hi[i] = std::max(a, b);
    }
    return box;
  }

  // A random sub-box of `b` (possibly empty, possibly b itself).
  Box sub_box(const Box& b) {
    Box r = b;
    for (int d = 0; d < b.rank; ++d) {
      const int64_t x = uni(b.lo[d], b.hi[d]), y = uni(b.lo[d], b.hi[d]);
      r.lo[d] = std::min(x, y);
      r.hi[d] = std::max(x, y);
    }
    return r;
  }

  // A destination of arbitrary (possibly overlapping, non-covering) boxes.
  // Half the time as drawn: every device its own random box, or (half of
  // those) 1-4 random boxes, each device holding one of them
  // (checkpoint-style replicas spread over processes and hosts, relayed
  // inside each host; distinct ones overlap partially or nest by chance).
  // Else boxes that overlap by construction, each held by the devices in
  // turn (replicas of overlapping boxes, across hosts): halos (ragged
  // blocks along one dimension widened by 1-2 on each side), or nested
  // boxes (a box and 1-3 random boxes inside it, and boxes shifted from it
  // that overlap it partially).
  Layout random_boxes(const std::vector<int64_t>& shape, const std::vector<int64_t>& devices) {
    std::vector<LayoutEntry> entries;
    std::vector<Box> replicated;
    const int64_t mode = uni(0, 3);
    if (mode == 1 && !shape.empty()) {
      const auto dim = static_cast<size_t>(uni(0, static_cast<int64_t>(shape.size()) - 1));
      const int64_t k = uni(1, 4), halo = uni(1, 2);
      std::vector<int64_t> cuts = {0, shape[dim]};
      for (int64_t i = 1; i < k; ++i) cuts.push_back(uni(0, shape[dim]));
      std::sort(cuts.begin(), cuts.end());
      for (int64_t i = 0; i < k; ++i) {
        Box b;
        b.rank = static_cast<int32_t>(shape.size());
        for (size_t d = 0; d < shape.size(); ++d) b.hi[d] = shape[d];
        b.lo[dim] = std::max<int64_t>(0, cuts[static_cast<size_t>(i)] - halo);
        b.hi[dim] = std::min(shape[dim], cuts[static_cast<size_t>(i) + 1] + halo);
        replicated.push_back(b);
      }
    } else if (mode == 2) {
      const Box base = random_box(shape);
      replicated.push_back(base);
      const int64_t k = uni(1, 3);
      for (int64_t i = 0; i < k; ++i) replicated.push_back(sub_box(base));
      Box shifted = base;
      for (int d = 0; d < base.rank; ++d) {
        const int64_t n = shape[static_cast<size_t>(d)];
        const int64_t off = uni(-base.extent(d) / 2, base.extent(d) / 2);
        shifted.lo[d] = std::clamp<int64_t>(base.lo[d] + off, 0, n);
        shifted.hi[d] = std::clamp<int64_t>(base.hi[d] + off, shifted.lo[d], n);
      }
      replicated.push_back(shifted);
    } else if (coin()) {
      const int64_t k = uni(1, 4);
      for (int64_t i = 0; i < k; ++i) replicated.push_back(random_box(shape));
    }
    size_t turn = static_cast<size_t>(uni(0, 3));
    for (int64_t d : devices) {
      if (!coin(0.7)) continue;
      LayoutEntry e;
      e.device = d;
      if (replicated.empty())
        e.box = random_box(shape);
      else if (mode > 0)
        e.box = replicated[turn++ % replicated.size()];
      else
        e.box =
            replicated[static_cast<size_t>(uni(0, static_cast<int64_t>(replicated.size()) - 1))];
      entries.push_back(e);
    }
    return Layout::from_boxes(shape, entries, 1, ReduceOp::kSum, "random");
  }

  PlanInput input() {
    PlanInput in;
    std::vector<int64_t> pool(80);
    std::iota(pool.begin(), pool.end(), 0);
    auto src_mesh = mesh(pool, o_.max_devices);
    std::shared_ptr<Mesh> dst_mesh;
    const int64_t rel = uni(0, 2);  // 0 same devices, 1 overlapping, 2 disjoint
    if (rel == 0 && coin()) {
      dst_mesh = mesh(src_mesh->devices, static_cast<int>(src_mesh->devices.size()));
      // Use all of the source's devices when the counts allow.
    } else if (rel == 2) {
      std::vector<int64_t> rest;
      for (int64_t d : pool)
        if (std::find(src_mesh->devices.begin(), src_mesh->devices.end(), d) ==
            src_mesh->devices.end())
          rest.push_back(d);
      dst_mesh = mesh(rest, o_.max_devices);
    } else {
      dst_mesh = mesh(pool, o_.max_devices);
    }
    const int nproc = static_cast<int>(uni(1, 4));
    for (int64_t d : pool) {
      DeviceInfo info;
      info.device = d;
      info.process = static_cast<int32_t>((d * 7 + 3) % nproc);
      info.host = info.process / 2;
      in.topology.add(info);
    }
    const int ntensors = static_cast<int>(uni(1, o_.max_tensors));
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kI64,
                            DType::kU8,  DType::kF64,  DType::kI16};
    for (int i = 0; i < ntensors; ++i) {
      TensorSpec t;
      t.name = "t" + std::to_string(i);
      const int rank = static_cast<int>(uni(0, o_.max_rank));
      int64_t elements = 1;
      for (int d = 0; d < rank; ++d) {
        int64_t n = uni(0, o_.max_dim) == 0 ? 0 : uni(1, o_.max_dim);
        while (n > 1 && elements * n > 20000) n /= 2;
        t.shape.push_back(n);
        elements *= std::max<int64_t>(n, 1);
      }
      t.dtype = dtypes[uni(0, 5)];
      const bool partial = o_.allow_partial && coin(0.3);
      NamedSharding ss = sharding(src_mesh, rank, partial);
      t.src = maybe_explicit(Layout::from_named(ss, t.shape, "src"), t.shape);
      if (!partial && coin(0.15)) {
        t.dst = random_boxes(t.shape, dst_mesh->devices);
      } else {
        NamedSharding ds = sharding(dst_mesh, rank, o_.allow_partial && coin(0.2));
        if (partial && !ds.partial_axes.empty()) ds.partial_op = ss.partial_op;
        if (!partial && !ds.partial_axes.empty() && coin()) ds.partial_op = ReduceOp::kSum;
        t.dst = maybe_explicit(Layout::from_named(ds, t.shape, "dst"), t.shape);
      }
      // Means: floating-point partial sources into non-partial destinations.
      if (partial && t.src.partial() && !t.dst.partial() && dtype_is_float(t.dtype) && coin(0.3)) {
        ss.partial_op = ReduceOp::kMean;
        t.src = maybe_explicit(Layout::from_named(ss, t.shape, "src"), t.shape);
      }
      in.tensors.push_back(std::move(t));
    }
    const int64_t split = uni(0, 2);
    in.options.split_min_bytes = split == 0 ? 0 : split == 1 ? 64 : (1 << 20);
    const int64_t budgets[] = {0, 3000, 20000, int64_t{1} << 30};
    const int64_t budget = uni(0, 3);
    in.options.staging_budget_bytes = budgets[budget];
    // The cost model's NICs per host (0: one per device) from the draws
    // above, so the cases before this option was added stay the same.
    const int32_t nics[] = {0, 0, 1, 2, 8};
    in.options.nics_per_host = nics[(split * 4 + budget) % 5];
    return in;
  }

 private:
  std::mt19937_64 rng_;
  CaseOptions o_;
};

}  // namespace reshard::testing
