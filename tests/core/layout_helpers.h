// Test support: small builders for meshes, named shardings and tensors.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reshard/layout.h"
#include "reshard/plan.h"

namespace reshard::testing {

// A box from (lo, hi) per dimension: make_box({{0, 4}, {2, 6}}).
inline Box make_box(std::initializer_list<std::pair<int64_t, int64_t>> dims) {
  Box b;
  for (const auto& [lo, hi] : dims) {
    b.lo[b.rank] = lo;
    b.hi[b.rank] = hi;
    ++b.rank;
  }
  return b;
}

// A one-axis mesh over `devices`.
inline std::shared_ptr<Mesh> mesh_1d(std::vector<int64_t> devices, const std::string& axis = "x") {
  auto m = std::make_shared<Mesh>();
  m->axis_names = {axis};
  m->shape = {static_cast<int64_t>(devices.size())};
  m->devices = std::move(devices);
  return m;
}

// A mesh of `shape` over consecutive devices from `first`.
inline std::shared_ptr<Mesh> mesh(std::vector<std::string> axes, std::vector<int64_t> shape,
                                  int64_t first) {
  auto m = std::make_shared<Mesh>();
  m->axis_names = std::move(axes);
  m->shape = std::move(shape);
  for (int64_t i = 0; i < m->size(); ++i) m->devices.push_back(first + i);
  return m;
}

inline NamedSharding sharding(std::shared_ptr<Mesh> mesh,
                              std::vector<std::vector<std::string>> dims,
                              std::vector<std::string> partial = {}, ReduceOp op = ReduceOp::kSum) {
  NamedSharding s;
  s.mesh = std::move(mesh);
  s.dims = std::move(dims);
  s.partial_axes = std::move(partial);
  s.partial_op = op;
  return s;
}

// A tensor with named source and destination layouts.
inline TensorSpec tensor(const std::string& name, std::vector<int64_t> shape, DType dtype,
                         const NamedSharding& src, const NamedSharding& dst) {
  TensorSpec t;
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.src = Layout::from_named(src, t.shape, name + ".src");
  t.dst = Layout::from_named(dst, t.shape, name + ".dst");
  return t;
}

}  // namespace reshard::testing
