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
#include <memory>
#include <vector>

#include "copy_plan.h"
#include "core/device_path_testing.h"
#include "core/random_cases.h"
#include "core/staged_cases.h"
#include "emulate_launches.h"
#include "kernel_body.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

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
      }
    }
  }
  int64_t fused = 0;
  int64_t fused_stores = 0;  // the store in the dtype folded in (engine.cc flushes
                             // summands and stores together)
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
  for (uint64_t seed = 5000; seed < 6000; ++seed) {
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
  EXPECT_GT(partial, 50);
  EXPECT_GT(t->fused, 0);
  EXPECT_GT(t->fused_stores, 0);
}

// Invariant: the MPI tests' staged specs (relays, reduce-scatter then
// gather, pre-reduction in scratch) in one process do too.
TEST(EngineEmulation, StagedSpecsMatchExecuteHost) {
  Engine engine(std::make_unique<EmulatedCuda>());
  for (const testing::StagedCase& c : testing::staged_spec_cases(1)) {
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
  // Plans without messages replay (one process, all of them here).
  EXPECT_EQ(replayed, 2 * plans);
  // Other buffers: the engine runs again.
  const Plan plan = make_plan(testing::random_staged_input(7000, 1));
  OracleBuffers a = fill_sources(plan);
  OracleBuffers b = fill_sources(plan);
  const ExecuteOptions o{.agreement = ExecuteOptions::Agreement::kSkip};
  engine.execute(plan, 0, a.views(), o);
  EXPECT_TRUE(engine.execute(plan, 0, a.views(), o).replayed);
  EXPECT_FALSE(engine.execute(plan, 0, b.views(), o).replayed);
}

}  // namespace
}  // namespace reshard
