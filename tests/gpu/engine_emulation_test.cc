// The engine over the CUDA backend's launch planning on the CPU: a
// one-process transport whose run_copies plans each call's launches with
// copy_plan.h (fused reductions included) and runs them thread by thread
// with the device code of kernel_body.h, on host memory. Every plan must
// leave what execute_host leaves, so the way the engine hands the backend
// its fills, summands and stores (and what copy_plan fuses of them) is
// tested without a GPU; tests/gpu runs the same plans on one.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "copy_plan.h"
#include "core/device_path_testing.h"
#include "core/random_cases.h"
#include "core/staged_cases.h"
#include "emulate_launches.h"
#include "kernel_body.h"
#include "launch_cache.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/spec.h"
#include "reshard/transport.h"
#include "test_scale.h"

namespace reshard {
namespace {

// One stream: each run_copies call is planned and emulated at once.
class EmulatedCuda final : public testing::OneProcessDeviceTransport {
 public:
  EmulatedCuda() : OneProcessDeviceTransport("cuda emulation") {}
  void run_copies(int64_t, int32_t, std::span<const CopyOp> ops) override {
    const std::vector<cuda_backend::Launch> launches = cuda_backend::plan_launches(ops);
    // Tiles last to first: a missed dependency inside a launch shows.
    gpu_testing::emulate(launches, true);
    for (const cuda_backend::Launch& l : launches) {
      for (const cuda_backend::Work& w : l.works) {
        const bool multi =
            static_cast<cuda_backend::WorkKind>(w.kind) == cuda_backend::WorkKind::kReduceN;
        fused += multi;
        fused_stores += multi && (w.flags & cuda_backend::kStoreOut) != 0;
        const auto k = static_cast<cuda_backend::WorkKind>(w.kind);
        scale_works += k == cuda_backend::WorkKind::kBlockScales;
        quantise_works += k == cuda_backend::WorkKind::kQuantise;
      }
    }
  }
  // The contract of keyed calls (Transport::run_keyed_copies): every call
  // with a key has the ops of the first call with it.
  void run_keyed_copies(int64_t device, int32_t ordinal, std::span<const CopyOp> ops,
                        uint64_t key) override {
    EXPECT_NE(key, 0u);
    auto [it, fresh] = keyed_ops.try_emplace(key, ops.begin(), ops.end());
    if (!fresh) {
      EXPECT_TRUE(cuda_backend::same_ops(it->second, ops)) << "key " << key << " with other ops";
      ++keyed_again;
    }
    run_copies(device, ordinal, ops);
  }
  int64_t fused = 0;
  int64_t fused_stores = 0;    // the store in the dtype folded in (engine.cc flushes
                               // summands and stores together)
  int64_t scale_works = 0;     // kBlockScales: a shard's scales
  int64_t quantise_works = 0;  // kQuantise: a copy out of a scaled shard
  std::map<uint64_t, std::vector<CopyOp>> keyed_ops;
  int64_t keyed_again = 0;  // keyed calls handed again (replays)
};

using testing::expect_same_as_host;

// Invariant: random plans in one process (uneven, replication, partial
// sources of narrow floats accumulated in f32, budgets), each of their
// processes a host, leave execute_host's bytes through the engine over the
// emulated backend; partial sums run as fused reductions.
TEST(EngineEmulation, RandomPlansMatchExecuteHost) {
  auto transport = std::make_unique<EmulatedCuda>();
  EmulatedCuda* t = transport.get();
  Engine engine(std::move(transport));
  int partial = 0;
  const uint64_t seeds = static_cast<uint64_t>(scaled_cases(1000));
  for (uint64_t seed = 5000; seed < 5000 + seeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    PlanInput in = testing::random_staged_input(seed, 1);
    // Narrow floats where the source is partial: f32 accumulators.
    const DType narrow[] = {DType::kBF16, DType::kF16, DType::kF32};
    for (size_t k = 0; k < in.tensors.size(); ++k) {
      if (in.tensors[k].src.partial()) {
        in.tensors[k].dtype = narrow[(seed + k) % 3];
        ++partial;
      }
    }
    expect_same_as_host(engine, make_plan(in));
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(partial, least_covered(50));
  EXPECT_GT(t->fused, 0);
  EXPECT_GT(t->fused_stores, 0);
}

// Invariant: the MPI tests' staged specs (relays, reduce-scatter then
// gather, pre-reduction in scratch) in one process do too (below full
// scale, each spec once: staged_case_sampled).
TEST(EngineEmulation, StagedSpecsMatchExecuteHost) {
  Engine engine(std::make_unique<EmulatedCuda>());
  const std::vector<testing::StagedCase> cases = testing::staged_spec_cases(1);
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!testing::staged_case_sampled(i)) continue;
    const testing::StagedCase& c = cases[i];
    SCOPED_TRACE(c.name);
    expect_same_as_host(engine, make_plan(c.input));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Invariant (Replay, engine.cc): a repeated execution of a cached schedule
// with the same buffers replays the previous execution's calls, and reads
// the sources' current contents: each execution, with new source values,
// leaves execute_host's bytes; new buffers run the engine again.
TEST(EngineEmulation, RepeatedExecutionsReplayWithCurrentContents) {
  auto transport = std::make_unique<EmulatedCuda>();
  EmulatedCuda* t = transport.get();
  Engine engine(std::move(transport));
  int replayed = 0;
  int plans = 0;
  for (uint64_t seed = 7000; seed < 7060; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    PlanInput in = testing::random_staged_input(seed, 1);
    for (size_t k = 0; k < in.tensors.size(); ++k) {
      if (in.tensors[k].src.partial()) in.tensors[k].dtype = DType::kBF16;
    }
    const Plan plan = make_plan(in);
    OracleBuffers dev = fill_sources(plan);
    const std::vector<TensorBuffers> views = dev.views();
    for (int run = 0; run < 3; ++run) {
      // New source values in the same buffers.
      for (auto& t : dev.src) {
        for (auto& e : t) {
          for (size_t i = 0; i < e.size(); ++i) e[i] = std::byte((i * 7 + run * 13 + seed) % 61);
        }
      }
      OracleBuffers host = dev;
      execute_host(plan, host.views());
      const ExecuteStats stats =
          engine.execute(plan, 0, views, {.agreement = ExecuteOptions::Agreement::kSkip});
      if (run > 0) replayed += stats.replayed;
      if (run == 0) {
        EXPECT_FALSE(stats.replayed);
      }
      for (size_t t = 0; t < plan.tensors().size(); ++t) {
        for (size_t e = 0; e < host.dst[t].size(); ++e) {
          ASSERT_EQ(dev.dst[t][e], host.dst[t][e])
              << "run " << run << " tensor " << t << " entry " << e;
        }
      }
    }
    ++plans;
  }
  // Plans without messages replay (one process, all of them here), handing
  // the transport the calls it saw, with their keys.
  EXPECT_EQ(replayed, 2 * plans);
  EXPECT_GT(t->keyed_again, 0);
  // Other buffers: the engine runs again.
  const Plan plan = make_plan(testing::random_staged_input(7000, 1));
  OracleBuffers a = fill_sources(plan);
  OracleBuffers b = fill_sources(plan);
  const ExecuteOptions o{.agreement = ExecuteOptions::Agreement::kSkip};
  engine.execute(plan, 0, a.views(), o);
  EXPECT_TRUE(engine.execute(plan, 0, a.views(), o).replayed);
  EXPECT_FALSE(engine.execute(plan, 0, b.views(), o).replayed);
}

// Tensors of 8 x 8 f32 on 4 devices of one process, sources row-sharded,
// destinations row-sharded (`rows`) or column-sharded: either way every
// buffer holds 16 elements, so the two plans run on the same buffers.
PlanInput rows_to(bool rows, int tensors) {
  auto mesh = std::make_shared<Mesh>();
  mesh->axis_names = {"x"};
  mesh->shape = {4};
  mesh->devices = {0, 1, 2, 3};
  PlanInput in;
  for (int64_t d = 0; d < 4; ++d) in.topology.add({d, 0, 0, static_cast<int32_t>(d)});
  for (int i = 0; i < tensors; ++i) {
    TensorSpec t;
    t.name = "t" + std::to_string(i);
    t.shape = {8, 8};
    t.dtype = DType::kF32;
    t.src = Layout::from_named({mesh, {{"x"}, {}}, {}, ReduceOp::kSum}, t.shape, "src");
    const std::vector<std::vector<std::string>> dims =
        rows ? std::vector<std::vector<std::string>>{{"x"}, {}}
             : std::vector<std::vector<std::string>>{{}, {"x"}};
    t.dst = Layout::from_named({mesh, dims, {}, ReduceOp::kSum}, t.shape, "dst");
    in.tensors.push_back(std::move(t));
  }
  return in;
}

// New source values in the same buffers, then the plan through the engine
// and on the host: the destinations must match. Returns whether it replayed.
bool run_and_compare(Engine& engine, const Plan& plan, OracleBuffers& dev, int run) {
  for (auto& t : dev.src) {
    for (auto& e : t) {
      for (size_t i = 0; i < e.size(); ++i) e[i] = std::byte((i * 5 + run * 11) % 67);
    }
  }
  OracleBuffers host = dev;
  execute_host(plan, host.views());
  const ExecuteStats stats =
      engine.execute(plan, 0, dev.views(), {.agreement = ExecuteOptions::Agreement::kSkip});
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    for (size_t e = 0; e < host.dst[t].size(); ++e) {
      EXPECT_EQ(dev.dst[t][e], host.dst[t][e])
          << "run " << run << " tensor " << t << " entry " << e;
    }
  }
  return stats.replayed;
}

// Invariant: a replay (Replay, engine.cc) serves only the plan and buffers
// it was recorded for: a different plan of the same shape on the same
// buffers, and a plan object assigned another plan, run the engine (each
// execution leaves execute_host's bytes), and a plan executed again after
// another replays its own calls.
TEST(EngineEmulation, ReplayIsNeverStale) {
  Engine engine(std::make_unique<EmulatedCuda>());
  const Plan to_cols = make_plan(rows_to(false, 3));
  const Plan to_rows = make_plan(rows_to(true, 3));
  OracleBuffers dev = fill_sources(to_cols);
  EXPECT_FALSE(run_and_compare(engine, to_cols, dev, 0));
  EXPECT_TRUE(run_and_compare(engine, to_cols, dev, 1));
  EXPECT_FALSE(run_and_compare(engine, to_rows, dev, 2)) << "another plan, the same buffers";
  EXPECT_TRUE(run_and_compare(engine, to_rows, dev, 3));
  EXPECT_TRUE(run_and_compare(engine, to_cols, dev, 4)) << "each schedule keeps its own replay";
  // One plan object, assigned another plan in place.
  Plan plan = to_cols;
  EXPECT_TRUE(run_and_compare(engine, plan, dev, 5)) << "an equal copy is the same plan";
  plan = make_plan(rows_to(true, 2));
  OracleBuffers fewer = fill_sources(plan);
  EXPECT_FALSE(run_and_compare(engine, plan, fewer, 6));
  plan = to_rows;
  EXPECT_TRUE(run_and_compare(engine, plan, dev, 7));
}

// Invariant: buffers are validated on every execution but a replay on the
// very buffers of the recorded one: after replays, a buffer of another size
// at the same address, and a destination moved onto another, are refused
// (kInvalidArgument naming the buffer) and nothing is replayed.
TEST(EngineEmulation, ReplayDoesNotSkipValidationOfOtherBuffers) {
  Engine engine(std::make_unique<EmulatedCuda>());
  const Plan plan = make_plan(rows_to(false, 2));
  OracleBuffers dev = fill_sources(plan);
  EXPECT_FALSE(run_and_compare(engine, plan, dev, 0));
  EXPECT_TRUE(run_and_compare(engine, plan, dev, 1));
  const ExecuteOptions o{.agreement = ExecuteOptions::Agreement::kSkip};
  std::vector<TensorBuffers> views = dev.views();
  views[1].dst[2].bytes -= 4;
  try {
    engine.execute(plan, 0, views, o);
    ADD_FAILURE() << "a short buffer was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tensors[1].dst[2]"), std::string::npos) << e.what();
  }
  views = dev.views();
  views[0].dst[1].data = views[0].dst[0].data;
  try {
    engine.execute(plan, 0, views, o);
    ADD_FAILURE() << "overlapping destinations were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("overlaps"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(run_and_compare(engine, plan, dev, 2)) << "the recorded buffers again";
}

// Invariant: plans with block scales (f32 scales of 32x32 to 32x128
// blocks, cut by destination boxes, short edge blocks, f8e4m3 and f8e5m2;
// MXFP8 e8m0 scales of 32 elements beside them) leave execute_host's
// bytes through the emulated kernels, values and scale tensors alike: the
// scales computed by kBlockScales Works in staging, every copy out of a
// scaled source a kQuantise Work. Each plan runs twice with new source
// values in the same buffers (the scales follow them; the second replays
// the first's calls), unbudgeted and in
// 16 KiB rounds, with the devices of each spec on 2 GPUs of one process.
TEST(EngineEmulation, BlockScaleSpecsMatchExecuteHost) {
  auto transport = std::make_unique<EmulatedCuda>();
  EmulatedCuda* t = transport.get();
  Engine engine(std::move(transport));
  for (const char* name : {"zero3_fp8_scales_small.json", "zero3_mxfp8_small.json"}) {
    for (const int64_t budget : {int64_t{0}, int64_t{16384}}) {
      SCOPED_TRACE(std::string(name) + " budget " + std::to_string(budget));
      PlanInput in = testing::in_one_process(
          load_spec(std::string(RESHARD_SOURCE_DIR) + "/tests/data/" + name).input, 2, false);
      in.options.staging_budget_bytes = budget;
      const Plan plan = make_plan(in);
      expect_same_as_host(engine, plan);
      if (::testing::Test::HasFatalFailure()) return;
      OracleBuffers dev = fill_sources(plan);
      // The second execution replays the first's calls (the scales
      // computed anew before it).
      for (int run = 0; run < 2; ++run)
        EXPECT_EQ(run_and_compare(engine, plan, dev, run), run == 1);
    }
  }
  EXPECT_GT(t->scale_works, 0);
  EXPECT_GT(t->quantise_works, 0);
}

// Sources cut along their last dim (shards starting at a column inside
// the tensor, so a shard's first block is not the scale tensor's first),
// rank 3, f32/bf16/f16 sources; the special values below are put into
// every source shard.
constexpr const char* kColumnShards = R"({
  "meshes": {
    "train": {"axis_names": ["dp"], "shape": [4], "devices": [0, 1, 2, 3]},
    "infer": {"axis_names": ["tp"], "shape": [2], "devices": [4, 5]}
  },
  "tensors": [
    {"name": "a", "shape": [64, 256], "dtype": "bf16", "src": {"mesh": "train", "spec": [null, "dp"]},
     "dst": {"mesh": "infer", "spec": ["tp", null], "dtype": "f8e4m3",
             "scales": {"name": "a.scale", "block": [32, 32]}}},
    {"name": "b", "shape": [8, 512], "dtype": "f32", "src": {"mesh": "train", "spec": [null, "dp"]},
     "dst": {"mesh": "infer", "spec": [null, "tp"], "dtype": "f8e5m2",
             "scales": {"name": "b.scale", "block": [1, 32], "dtype": "e8m0"}}},
    {"name": "c", "shape": [4, 6, 128], "dtype": "f16", "src": {"mesh": "train", "spec": [null, null, "dp"]},
     "dst": {"mesh": "infer", "spec": ["tp", null, null], "dtype": "f8e4m3",
             "scales": {"name": "c.scale", "block": [1, 1, 32], "dtype": "e8m0"}}},
    {"name": "d", "shape": [96, 64], "dtype": "f16", "src": {"mesh": "train", "spec": ["dp", null]},
     "dst": {"mesh": "infer", "spec": [null, "tp"], "dtype": "f8e5m2",
             "scales": {"name": "d.scale", "block": [24, 16]}}}
  ]
})";

// Writes special values into the first elements of every source shard of
// a scaled tensor: a NaN, both infinities, the least subnormal, a
// negative zero, and (from element 64) a run of zeros.
void put_specials(const Plan& plan, OracleBuffers& buf) {
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& v = plan.tensors()[t];
    if (v.scale_tensor < 0 || buf.src[t].empty()) continue;
    const bool f32 = v.dtype == DType::kF32;
    const bool bf16 = v.dtype == DType::kBF16;
    const uint32_t specials[] = {f32    ? 0x7fc00000u
                                 : bf16 ? 0x7fc0u
                                        : 0x7e00u,
                                 f32    ? 0x7f800000u
                                 : bf16 ? 0x7f80u
                                        : 0x7c00u,
                                 f32    ? 0xff800000u
                                 : bf16 ? 0xff80u
                                        : 0xfc00u,
                                 1u, f32 ? 0x80000000u : 0x8000u};
    const size_t es = f32 ? 4 : 2;
    for (auto& e : buf.src[t]) {
      for (size_t k = 0; k < 5 && (k + 1) * es <= e.size(); ++k)
        std::memcpy(e.data() + k * es, &specials[k], es);
      for (size_t k = 64; k < 96 && (k + 1) * es <= e.size(); ++k)
        std::memset(e.data() + k * es, 0, es);
    }
  }
}

// Invariant: the same with sources cut along the last dim, rank 3, and
// NaN, infinities, subnormals and zero blocks in every source shard (a
// block with a NaN or an infinity: the NaN E8M0 scale; f32 scales from the
// finite values only): execute_host's bytes, scales included.
TEST(EngineEmulation, BlockScalesOfColumnShardsAndSpecialValues) {
  Engine engine(std::make_unique<EmulatedCuda>());
  const Plan plan = make_plan(parse_spec(kColumnShards).input);
  OracleBuffers dev = fill_sources(plan);
  put_specials(plan, dev);
  OracleBuffers host = dev;
  execute_host(plan, host.views());
  engine.execute(plan, 0, dev.views(), {.agreement = ExecuteOptions::Agreement::kSkip});
  int nan_scales = 0;
  int zero_scales = 0;
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    for (size_t e = 0; e < host.dst[t].size(); ++e) {
      EXPECT_EQ(dev.dst[t][e], host.dst[t][e])
          << "tensor " << t << " (" << plan.tensors()[t].name << ") dst entry " << e;
      if (plan.tensors()[t].dtype != DType::kE8M0) continue;
      for (std::byte b : host.dst[t][e]) {
        nan_scales += b == std::byte{255};
        zero_scales += b == std::byte{0};
      }
    }
  }
  // The specials reached the scales: NaN blocks and blocks of zeros.
  EXPECT_GT(nan_scales, 0);
  EXPECT_GT(zero_scales, 0);
}

}  // namespace
}  // namespace reshard
