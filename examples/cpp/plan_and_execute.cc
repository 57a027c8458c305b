// The C example (examples/c/plan_and_execute.c) through the C++ API:
// reshard a few transformer weights from a training layout to an inference
// layout with make_plan, print the statistics, write encode_plan's bytes to a
// file, decode them again, run execute_host on host buffers and check every
// destination element.
//
//   training:  mesh (dp=2, tp=2) on devices 0-3, processes 0 and 1
//   inference: mesh (tp=4) on devices 4-7, process 2
//
// Usage: plan_and_execute_cpp [plan-file]   (default: plan.bin)
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/layout.h"
#include "reshard/plan.h"
#include "reshard/wire.h"

namespace {

using Dims = std::vector<std::vector<std::string>>;

struct TensorDef {
  std::string name;
  std::vector<int64_t> shape;
  Dims src;  // per dim, the mesh axes splitting it (major first)
  Dims dst;
};

reshard::NamedSharding named(std::shared_ptr<const reshard::Mesh> mesh, const Dims& dims) {
  reshard::NamedSharding sharding;
  sharding.mesh = std::move(mesh);
  sharding.dims = dims;
  return sharding;
}

// The value every element starts with: its row-major global index.
float value_at(const std::vector<int64_t>& shape, const reshard::Box& box, int64_t local) {
  int64_t global = 0;
  int64_t stride = 1;
  for (int d = box.rank - 1; d >= 0; --d) {
    const int64_t extent = box.extent(d);
    global += (box.lo[d] + local % extent) * stride;
    local /= extent;
    stride *= shape[static_cast<size_t>(d)];
  }
  return static_cast<float>(global);
}

int run(const std::string& path) {
  auto train = std::make_shared<reshard::Mesh>(reshard::Mesh{{"dp", "tp"}, {2, 2}, {0, 1, 2, 3}});
  auto infer = std::make_shared<reshard::Mesh>(reshard::Mesh{{"tp"}, {4}, {4, 5, 6, 7}});
  const std::vector<TensorDef> defs = {
      {"layers.0.attn.q", {256, 256}, {{"dp"}, {"tp"}}, {{}, {"tp"}}},    // column-parallel
      {"layers.0.mlp.w2", {512, 256}, {{"tp", "dp"}, {}}, {{"tp"}, {}}},  // row-parallel
      {"layers.0.norm", {256}, {{"dp"}}, {{}}},                           // FSDP -> replicated
  };

  reshard::PlanInput input;
  for (int64_t device = 0; device < 8; ++device) {
    const int32_t process = device < 4 ? static_cast<int32_t>(device / 2) : 2;
    input.topology.add({device, process, process, static_cast<int32_t>(device % 4)});
  }
  for (const TensorDef& def : defs) {
    reshard::TensorSpec tensor;
    tensor.name = def.name;
    tensor.shape = def.shape;
    tensor.dtype = reshard::DType::kF32;
    tensor.src = reshard::Layout::from_named(named(train, def.src), def.shape, def.name + ".src");
    tensor.dst = reshard::Layout::from_named(named(infer, def.dst), def.shape, def.name + ".dst");
    input.tensors.push_back(std::move(tensor));
  }
  const reshard::Plan plan = reshard::make_plan(input);

  const reshard::PlanStats& s = plan.stats();
  std::printf("plan %016llx: %lld pieces in %lld messages, %d round(s)\n",
              static_cast<unsigned long long>(plan.fingerprint()), static_cast<long long>(s.pieces),
              static_cast<long long>(s.messages), s.rounds);
  std::printf("  network bytes  %10lld (lower bound %lld)\n",
              static_cast<long long>(s.network_bytes),
              static_cast<long long>(s.lower_bound_network_bytes));
  std::printf("  max send/recv  %10lld / %lld\n", static_cast<long long>(s.max_send_bytes),
              static_cast<long long>(s.max_recv_bytes));
  std::printf("  cost estimate  %10.3g s (lower bound %.3g s)\n", s.cost_seconds,
              s.lower_bound_cost_seconds);
  if (s.network_bytes != s.lower_bound_network_bytes) {
    std::fprintf(stderr, "network bytes above the lower bound\n");
    return 1;
  }

  // The bytes a coordinator ships to its workers; decoding verifies them.
  const std::vector<uint8_t> bytes = reshard::encode_plan(plan);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  std::printf("wrote %zu plan bytes to %s\n", bytes.size(), path.c_str());
  const reshard::Plan decoded = reshard::decode_plan(bytes);
  if (decoded.fingerprint() != plan.fingerprint()) {
    std::fprintf(stderr, "fingerprint changed by the round trip\n");
    return 1;
  }

  // One buffer per layout entry, in entry order; sources hold their global
  // index, destinations -1.
  std::vector<std::vector<std::vector<float>>> src(defs.size()), dst(defs.size());
  std::vector<reshard::TensorBuffers> buffers(defs.size());
  for (size_t t = 0; t < defs.size(); ++t) {
    const reshard::TensorSpec& tensor = decoded.tensors()[t];
    for (size_t e = 0; e < tensor.src.num_entries(); ++e) {
      const reshard::Box box = tensor.src.box(e);
      std::vector<float>& shard = src[t].emplace_back(static_cast<size_t>(box.volume()));
      for (int64_t i = 0; i < box.volume(); ++i) {
        shard[static_cast<size_t>(i)] = value_at(tensor.shape, box, i);
      }
    }
    for (size_t e = 0; e < tensor.dst.num_entries(); ++e) {
      dst[t].emplace_back(static_cast<size_t>(tensor.dst.box(e).volume()), -1.0f);
    }
    for (auto& shard : src[t]) {
      buffers[t].src.push_back({shard.data(), static_cast<int64_t>(shard.size() * sizeof(float))});
    }
    for (auto& shard : dst[t]) {
      buffers[t].dst.push_back({shard.data(), static_cast<int64_t>(shard.size() * sizeof(float))});
    }
  }
  reshard::execute_host(decoded, buffers);

  int64_t checked = 0;
  int64_t wrong = 0;
  for (size_t t = 0; t < defs.size(); ++t) {
    const reshard::TensorSpec& tensor = decoded.tensors()[t];
    for (size_t e = 0; e < tensor.dst.num_entries(); ++e) {
      const reshard::Box box = tensor.dst.box(e);
      for (int64_t i = 0; i < box.volume(); ++i, ++checked) {
        if (dst[t][e][static_cast<size_t>(i)] != value_at(tensor.shape, box, i)) ++wrong;
      }
      if (e == 1 && box.volume() > 0) {
        std::printf("  %s on device %lld: first element %g (expected %g)\n", tensor.name.c_str(),
                    static_cast<long long>(tensor.dst.device(e)), dst[t][e][0],
                    value_at(tensor.shape, box, 0));
      }
    }
  }
  std::printf("checked %lld destination elements: %lld wrong\n", static_cast<long long>(checked),
              static_cast<long long>(wrong));
  return wrong == 0 && checked > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc > 1 ? argv[1] : "plan.bin");
  } catch (const reshard::Error& e) {
    std::fprintf(stderr, "error [%s]: %s\n", reshard::error_code_name(e.code()), e.what());
    return 1;
  }
}
