// The engine's device path (Transport::run_copies, MemoryKind::kCuda) on the
// CPU: a one-process transport that says its memory is not the host's and
// runs each run_copies call's operations on the host, in the order it is
// given them, as one CUDA stream would. A plan executed through it must
// leave what execute_host leaves, so the order in which the engine hands a
// stream-ordered transport its copies (fills, reductions into scratch,
// stores, relays that read what an earlier stage wrote) is tested without a
// GPU; tests/gpu runs the same plans through the cuda and nccl transports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device_path_testing.h"
#include "core/staged_cases.h"
#include "core/thread_transport.h"
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

// Several streams, one per ordinal: run_copies only queues on its ordinal's
// stream. order_streams and finish run what is queued stream after stream
// (ascending ordinals, or descending), and so does freeing staging (as
// cudaFree waits for the device). Copies on one stream keep their order;
// a copy that reads what another stream wrote since the last order_streams
// reads it unwritten in one of the two orders, and the oracle sees it.
class StreamsTransport final : public testing::OneProcessDeviceTransport {
 public:
  explicit StreamsTransport(bool descending)
      : OneProcessDeviceTransport("streams emulation"), descending_(descending) {}
  class Staging final : public StagingBlock {
   public:
    Staging(StreamsTransport& t, int64_t bytes) : t_(t), block_(bytes < 1 ? 1 : bytes) {}
    ~Staging() override { t_.drain(); }
    std::byte* data() override { return block_.data(); }
    int64_t bytes() const override { return block_.bytes(); }

   private:
    StreamsTransport& t_;
    thread_transport::ThreadBlock block_;
  };
  std::unique_ptr<StagingBlock> allocate_staging(int64_t, int32_t, int64_t bytes) override {
    return std::make_unique<Staging>(*this, bytes);
  }
  void run_copies(int64_t, int32_t ordinal, std::span<const CopyOp> ops) override {
    copies += static_cast<int64_t>(ops.size());
    auto& q = streams_[ordinal];
    q.insert(q.end(), ops.begin(), ops.end());
  }
  void order_streams() override {
    ++barriers;
    drain();
  }
  void finish(double) override { drain(); }

  void drain() {
    auto run = [](std::vector<CopyOp>& q) {
      thread_transport::run_copy_ops(q);
      q.clear();
    };
    if (descending_) {
      for (auto it = streams_.rbegin(); it != streams_.rend(); ++it) run(it->second);
    } else {
      for (auto& [ordinal, q] : streams_) run(q);
    }
  }

  int64_t copies = 0;
  int64_t barriers = 0;

 private:
  bool descending_;
  std::map<int32_t, std::vector<CopyOp>> streams_;
};

using testing::expect_same_as_host;

// Invariant: the MPI tests' staged specs (relays, chains and trees of hosts,
// reduce-scatter then gather, pre-reduction in scratch), in one process with
// their hosts kept, unbudgeted and under 64 KiB (below full scale, each spec
// once: staged_case_sampled), leave execute_host's bytes through the device
// path on one stream.
TEST(EngineDevicePath, StagedSpecsMatchExecuteHost) {
  auto transport = std::make_unique<StreamsTransport>(false);
  StreamsTransport* t = transport.get();
  Engine engine(std::move(transport));
  int plans = 0, with_scratch = 0;
  const std::vector<testing::StagedCase> cases = testing::staged_spec_cases(1);
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!testing::staged_case_sampled(i)) continue;
    SCOPED_TRACE(cases[i].name);
    const Plan plan = make_plan(cases[i].input);
    ASSERT_GT(plan.stats().stages, 1);
    expect_same_as_host(engine, plan);
    ++plans;
    with_scratch += plan.stats().max_scratch_bytes > 0;
  }
  const bool all = RESHARD_TEST_SCALE >= 100;  // each spec once below
  EXPECT_GE(plans, all ? 30 : 15);
  EXPECT_GE(with_scratch, all ? 7 : 3);
  EXPECT_GT(t->copies, 0);
}

// Invariant: random cases (ranks 0-5, uneven, replication, partial sources
// and destinations, explicit boxes, budgets) in one process, each of their
// processes a host, staged or not, leave execute_host's bytes through the
// device path on one stream.
TEST(EngineDevicePath, RandomPlansMatchExecuteHost) {
  Engine engine(std::make_unique<StreamsTransport>(false));
  int staged = 0;
  for (uint64_t seed = 2000; seed < 2000 + scaled_cases(400); ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Plan plan = make_plan(testing::random_staged_input(seed, 1));
    expect_same_as_host(engine, plan);
    if (::testing::Test::HasFatalFailure()) return;
    staged += plan.stats().stages > 1;
  }
  EXPECT_GE(staged, least_covered(40));
}

// Invariant: with a stream per GPU (3 GPUs, plan devices spread over them),
// the staged specs and random cases leave execute_host's bytes whichever
// stream runs first: every copy that reads what another GPU's stream wrote
// in an earlier flush comes after an order_streams. Below full scale (the
// sanitizer builds) every (100 / RESHARD_TEST_SCALE)-th staged spec case in
// each order, the descending order from case stride - 1: at the sanitizer
// presets' 10, specs 0, 5, 10 and 15 unbudgeted ascending and 4, 9 and 14
// under the budget descending.
TEST(EngineDevicePath, SeveralStreamsAreOrderedBetweenStages) {
  const std::vector<testing::StagedCase> cases = testing::staged_spec_cases(3);
  const size_t every = RESHARD_TEST_SCALE >= 100 ? 1 : 100 / std::max(RESHARD_TEST_SCALE, 1);
  size_t run = 0;
  for (bool descending : {false, true}) {
    SCOPED_TRACE(descending ? "descending" : "ascending");
    auto transport = std::make_unique<StreamsTransport>(descending);
    StreamsTransport* t = transport.get();
    Engine engine(std::move(transport));
    for (size_t i = descending ? every - 1 : 0; i < cases.size(); i += every) {
      SCOPED_TRACE(cases[i].name);
      expect_same_as_host(engine, make_plan(cases[i].input));
      ++run;
    }
    for (uint64_t seed = 2000; seed < 2000 + scaled_cases(200); ++seed) {
      SCOPED_TRACE("seed " + std::to_string(seed));
      expect_same_as_host(engine, make_plan(testing::random_staged_input(seed, 3)));
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_GT(t->barriers, 0);
  }
  EXPECT_GE(cases.size(), 32u);
  EXPECT_GE(run, 2 * (cases.size() / every)) << "staged spec cases run";
}

// Invariant: the same specs across processes (one thread and engine per
// rank, messages delivered after random delays, a send's bytes read when it
// starts) through the device path, as the nccl transport runs them: packs
// are in staging before a send starts, relays forward only what arrived,
// reductions keep their order; every destination element meets the oracle.
//
// Below half the cases (the sanitizer builds), the budgeted plans only
// (their many rounds are the ones the ranks interleave) of every
// (100 / RESHARD_TEST_SCALE)-th spec: at the sanitizer presets' 10, 2 of
// the 16. All 16 took 250-310 s there, nearly all of it planning
// psum_chain_3_holder_hosts under the 8 KiB budget 9 times (the whole plan
// and each rank's part; 0.9 s each in the dev build, 20-30 s at the ASan
// build's -O0), which is left to the dev build; under ASan the MPI tests
// (tests/mpi) run every spec across processes.
TEST(EngineDevicePath, StagedSpecsAcrossRanksMeetTheOracle) {
  const std::vector<std::filesystem::path> files = testing::staged_spec_files();
  const size_t every = RESHARD_TEST_SCALE >= 50 ? 1 : 100 / std::max(RESHARD_TEST_SCALE, 1);
  int plans = 0;
  for (size_t i = 0; i < files.size(); i += every) {
    const std::filesystem::path& f = files[i];
    for (int64_t budget : {int64_t{0}, int64_t{8192}}) {
      if (budget == 0 && RESHARD_TEST_SCALE < 50) continue;
      SCOPED_TRACE(f.filename().string() + " budget " + std::to_string(budget));
      PlanInput in = load_spec(f.string()).input;
      in.options.staging_budget_bytes = budget;
      EXPECT_EQ(thread_transport::execute_parts_and_check(in, 11 + static_cast<uint64_t>(plans),
                                                          false, true),
                "");
      ++plans;
    }
  }
  const int specs = static_cast<int>(files.size());
  EXPECT_GE(specs, 16) << "tests/mpi/specs";
  EXPECT_EQ(plans, RESHARD_TEST_SCALE < 50
                       ? (specs + static_cast<int>(every) - 1) / static_cast<int>(every)
                       : 2 * specs);
}

}  // namespace
}  // namespace reshard
