// Benchmark inputs: a 405B-class transformer (126 layers, hidden 16384, 8 KV
// heads, MLP 53248, vocab 128256, bf16) moving from FSDP training to a
// tensor-parallel inference layout, as docs/design.md §2.8 describes.
#pragma once

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "reshard/plan.h"

namespace reshard::bench {

struct ModelShape {
  int layers = 126;
  int64_t hidden = 16384;
  int64_t kv = 1024;  // 8 KV heads x 128
  int64_t mlp = 53248;
  int64_t vocab = 128256;
};

// FSDP over `train_devices` (dp on dim 0), one process per device, `per_host`
// devices per host. Destination: dp x tp on `infer_first`.. (same devices when
// infer_first == 0), column-parallel q/k/v/w1/w3/embedding/lm_head on dim 0,
// row-parallel o/w2 on dim 1, norms replicated.
inline PlanInput transformer_case(const ModelShape& m, int64_t train_devices, int64_t infer_first,
                                  int64_t infer_devices, int64_t tp, int64_t per_host) {
  PlanInput in;
  auto train = std::make_shared<Mesh>();
  train->axis_names = {"dp"};
  train->shape = {train_devices};
  train->devices.resize(static_cast<size_t>(train_devices));
  std::iota(train->devices.begin(), train->devices.end(), 0);
  auto infer = std::make_shared<Mesh>();
  infer->axis_names = {"dp", "tp"};
  infer->shape = {infer_devices / tp, tp};
  infer->devices.resize(static_cast<size_t>(infer_devices));
  std::iota(infer->devices.begin(), infer->devices.end(), infer_first);
  const int64_t last = std::max(train_devices, infer_first + infer_devices);
  for (int64_t d = 0; d < last; ++d)
    in.topology.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d / per_host),
                     static_cast<int32_t>(d % per_host)});
  auto add = [&](const std::string& name, std::vector<int64_t> shape, int kind) {
    // kind: 0 column-parallel, 1 row-parallel, 2 replicated (norm)
    TensorSpec t;
    t.name = name;
    t.shape = shape;
    t.dtype = DType::kBF16;
    NamedSharding src{train, {}, {}, ReduceOp::kSum};
    NamedSharding dst{infer, {}, {}, ReduceOp::kSum};
    src.dims.assign(shape.size(), {});
    src.dims[0] = {"dp"};
    dst.dims.assign(shape.size(), {});
    if (kind == 0) dst.dims[0] = {"tp"};
    if (kind == 1) dst.dims[1] = {"tp"};
    t.src = Layout::from_named(src, t.shape, name + ".src");
    t.dst = Layout::from_named(dst, t.shape, name + ".dst");
    in.tensors.push_back(std::move(t));
  };
  add("embed", {m.vocab, m.hidden}, 0);
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "attn_norm", {m.hidden}, 2);
    add(p + "wq", {m.hidden, m.hidden}, 0);
    add(p + "wk", {m.kv, m.hidden}, 0);
    add(p + "wv", {m.kv, m.hidden}, 0);
    add(p + "wo", {m.hidden, m.hidden}, 1);
    add(p + "mlp_norm", {m.hidden}, 2);
    add(p + "w1", {m.mlp, m.hidden}, 0);
    add(p + "w3", {m.mlp, m.hidden}, 0);
    add(p + "w2", {m.hidden, m.mlp}, 1);
  }
  add("final_norm", {m.hidden}, 2);
  add("lm_head", {m.vocab, m.hidden}, 0);
  return in;
}

}  // namespace reshard::bench
