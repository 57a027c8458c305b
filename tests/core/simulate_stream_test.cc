// The streaming simulator (simulate_plan) against the message simulator
// (simulate over plan_messages_by_part / plan_messages), the oracle: the same
// result to the last bit (seconds, events, stages, binding) on the bench
// specs, the staged MPI specs with and without a budget, and random cases on
// clusters with shared NICs and host caps; its memory refusal.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/random_cases.h"
#include "reshard/error.h"
#include "reshard/simulate.h"
#include "reshard/spec.h"
#include "sim/stream_memory.h"
#include "test_scale.h"

namespace reshard {
namespace {

ClusterTopology h100(int32_t nics = 0, double host_link = 0) {
  ClusterTopology c;
  c.alpha_seconds = 5e-6;
  c.intra_host_bytes_per_second = 450e9;
  c.nic_bytes_per_second = 50e9;
  c.nics_per_host = nics;
  c.host_link_bytes_per_second = host_link;
  return c;
}

void expect_same(const SimResult& a, const SimResult& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.seconds, b.seconds);  // bit for bit
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.messages, b.messages);
  EXPECT_EQ(a.bytes, b.bytes);
  ASSERT_EQ(a.per_stage.size(), b.per_stage.size());
  for (size_t i = 0; i < a.per_stage.size(); ++i) {
    EXPECT_EQ(a.per_stage[i].stage, b.per_stage[i].stage);
    EXPECT_EQ(a.per_stage[i].start_seconds, b.per_stage[i].start_seconds);
    EXPECT_EQ(a.per_stage[i].end_seconds, b.per_stage[i].end_seconds);
    EXPECT_EQ(a.per_stage[i].messages, b.per_stage[i].messages);
    EXPECT_EQ(a.per_stage[i].bytes, b.per_stage[i].bytes);
  }
  ASSERT_EQ(a.binding.has_value(), b.binding.has_value());
  if (a.binding) {
    EXPECT_EQ(a.binding->cls, b.binding->cls);
    EXPECT_EQ(a.binding->host, b.binding->host);
    EXPECT_EQ(a.binding->device, b.binding->device);
    EXPECT_EQ(a.binding->nic, b.binding->nic);
    EXPECT_EQ(a.binding->bytes_per_second, b.binding->bytes_per_second);
  }
  EXPECT_EQ(a.binding_saturated_seconds, b.binding_saturated_seconds);
}

// Both simulators on `input`: planned part by part, and from a whole plan.
void check(const PlanInput& input, const ClusterTopology& c, const std::string& what) {
  SimPlanOptions o;
  o.max_bytes = kUnlimitedPlanBytes;
  const SimResult oracle = simulate(input.topology, c, plan_messages_by_part(input));
  expect_same(simulate_plan(input, c, o), oracle, what + " (streamed from the input)");
  o.threads = 2;
  expect_same(simulate_plan(input, c, o), oracle, what + " (2 threads)");
  const Plan plan = make_plan(input);
  expect_same(simulate_plan(plan, c), simulate(input.topology, c, plan_messages(plan)),
              what + " (from a plan)");
}

std::vector<std::filesystem::path> specs_in(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(RESHARD_SOURCE_DIR) + dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  // The sanitizer builds (RESHARD_TEST_SCALE below 100) take every k-th.
  std::vector<std::filesystem::path> taken;
  for (size_t i = 0; i < files.size(); ++i)
    if (i * RESHARD_TEST_SCALE % 100 < RESHARD_TEST_SCALE) taken.push_back(files[i]);
  return taken;
}

// Small enough for the message simulator in a test (a second or less in
// the dev build; the sanitizer builds, 5-50 times slower, take fewer:
// 20,000 messages scaled twice, 1,250 at 25%).
bool small(const PlanInput& in) {
  constexpr int64_t cap = int64_t{20000} * RESHARD_TEST_SCALE * RESHARD_TEST_SCALE / 10000;
  return make_plan(in, {PlanScope::kGlobal}).stats().messages <= cap;
}

TEST(SimulateStream, EqualsTheMessageSimulatorOnTheBenchSpecs) {
  const auto files = specs_in("/bench/specs");
  int checked = 0;
  for (const auto& f : files) {
    PlanInput in = load_spec(f.string()).input;
    if (!small(in)) continue;
    check(in, h100(), f.filename().string());
    // Fewer NICs (groups shared by devices) and a host cap, under a small
    // budget: more rounds.
    in.options.staging_budget_bytes = 1 << 20;
    if (!small(in)) continue;
    check(in, h100(2, 60e9), f.filename().string() + " (1 MiB budget, 2 NICs, host cap)");
    ++checked;
  }
  EXPECT_GE(checked, least_covered(10));
}

TEST(SimulateStream, EqualsTheMessageSimulatorOnStagedSpecs) {
  for (const auto& f : specs_in("/tests/mpi/specs")) {
    PlanInput in = load_spec(f.string()).input;
    check(in, h100(), f.filename().string());
    in.options.staging_budget_bytes = 65536;
    check(in, h100(1), f.filename().string() + " (64 KiB budget, one NIC)");
  }
}

TEST(SimulateStream, EqualsTheMessageSimulatorOnRandomCases) {
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(scaled_cases(60, 12)); ++seed) {
    testing::CaseOptions co;
    co.max_devices = 16;
    testing::CaseGen gen(seed, co);
    PlanInput in = gen.input();
    if (seed % 3 == 0) in.options.staging_budget_bytes = 256 + static_cast<int64_t>(seed) * 64;
    check(in, h100(static_cast<int32_t>(seed % 3), seed % 2 ? 0 : 70e9),
          "random case " + std::to_string(seed));
  }
}

// The estimate bounds what the simulator holds beside its records: counted
// structure by structure (record blocks, lane tables, the loop) as they
// grow, the peak less the records is at most the estimate less its records
// term, and the loop at most its bound from the lanes (which the guard
// adds to the records as they are counted), on the bench specs (with a
// small budget: many rounds, relays cut into bands), the staged specs and
// random cases. The records, whose dependencies vary, are counted and
// guarded rather than bounded: the bench specs' run from 3 to 69 bytes a
// message.
TEST(SimulateStream, EstimateBoundsWhatItHolds) {
  auto bounded = [](const PlanInput& in, const ClusterTopology& c, const std::string& what) {
    SCOPED_TRACE(what);
    SimPlanOptions o;
    o.max_bytes = kUnlimitedPlanBytes;
    sim::StreamBytes counted;
    sim::simulate_plan_counted(in, c, o, counted);
    const PlanStats stats = make_plan(in, {PlanScope::kGlobal}).stats();
    if (stats.messages > 0) {
      EXPECT_GT(counted.records_planned, 0);
    }
    EXPECT_LE(counted.loop, counted.loop_bound);
    EXPECT_LE(counted.peak - counted.records_planned,
              sim_stream_memory_estimate(stats) - stats.messages * kSimStreamBytesPerMessage);
    EXPECT_GE(counted.peak, counted.records_planned + counted.lanes);
  };
  int checked = 0;
  for (const auto& f : specs_in("/bench/specs")) {
    PlanInput in = load_spec(f.string()).input;
    in.options.staging_budget_bytes = 1 << 20;
    if (!small(in)) continue;
    bounded(in, h100(2, 60e9), f.filename().string());
    ++checked;
  }
  EXPECT_GE(checked, least_covered(10));
  for (const auto& f : specs_in("/tests/mpi/specs")) {
    PlanInput in = load_spec(f.string()).input;
    in.options.staging_budget_bytes = 65536;
    bounded(in, h100(1), f.filename().string());
  }
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(scaled_cases(30, 6)); ++seed) {
    testing::CaseOptions co;
    co.max_devices = 16;
    testing::CaseGen gen(seed, co);
    PlanInput in = gen.input();
    if (seed % 2 == 0) in.options.staging_budget_bytes = 256 + static_cast<int64_t>(seed) * 64;
    bounded(in, h100(), "random case " + std::to_string(seed));
  }
}

// simulate_plan refused with kResourceExhausted on max_bytes, `text` in its
// message.
void expect_refused(const PlanInput& in, const SimPlanOptions& o, const std::string& text) {
  try {
    simulate_plan(in, h100(), o);
    FAIL() << "expected kResourceExhausted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_EQ(e.field(), "max_bytes");
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// The guard: records are estimated at kSimStreamBytesPerMessage, but a
// reduction's forwards wait on many summands (psum_dp16_replicated under a
// 1 MiB budget: 69 bytes a message). At a limit of the estimate, planning
// stops after a part, once the records counted pass their term, with
// kResourceExhausted naming what they hold.
TEST(SimulateStream, GuardStopsWhenTheRecordsPassTheirEstimate) {
  PlanInput in =
      load_spec(std::string(RESHARD_SOURCE_DIR) + "/bench/specs/psum_dp16_replicated.json").input;
  in.options.staging_budget_bytes = 1 << 20;
  SimPlanOptions o;
  o.max_bytes = simulate_plan_memory(in, h100(), o);
  int64_t parts = 0;
  o.parts_planned = [&](int64_t, int64_t) { ++parts; };
  expect_refused(in, o, "parts its records hold");
  EXPECT_GT(parts, 0);
  EXPECT_LT(parts, 16);  // stopped before the last part
  o.max_bytes = kUnlimitedPlanBytes;
  EXPECT_GT(simulate_plan(in, h100(), o).messages, 0);
}

// Memory is known before it is spent: above max_bytes simulate_plan refuses
// from the global statistics, naming the estimate, before any part is
// planned; at the estimate it simulates.
TEST(SimulateStream, RefusesAboveItsMemoryLimitNamingTheEstimate) {
  const PlanInput in =
      load_spec(std::string(RESHARD_SOURCE_DIR) + "/bench/specs/rl_sync_fsdp8_to_2x_tp4.json")
          .input;
  const PlanStats stats = make_plan(in, {PlanScope::kGlobal}).stats();
  SimPlanOptions o;
  const int64_t need = simulate_plan_memory(in, h100(), o);
  // The records and flows, and planning one part at a time.
  ASSERT_GT(need, sim_stream_memory_estimate(stats));
  ASSERT_GT(sim_stream_memory_estimate(stats), stats.messages * kSimStreamBytesPerMessage);
  o.max_bytes = need - 1;
  int64_t parts = 0;
  o.parts_planned = [&](int64_t, int64_t) { ++parts; };
  expect_refused(in, o, std::to_string(need) + " bytes");
  EXPECT_EQ(parts, 0);  // refused before planning any part
  o.max_bytes = need;
  EXPECT_EQ(simulate_plan(in, h100(), o).messages, stats.messages);
  EXPECT_GT(parts, 0);
  o.max_bytes = -5;
  try {
    simulate_plan(in, h100(), o);
    FAIL() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.field(), "max_bytes");
  }
  // A bad cluster names its field.
  ClusterTopology bad = h100();
  bad.nic_bytes_per_second = -1;
  try {
    simulate_plan(in, bad);
    FAIL() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "nic_bytes_per_second");
  }
}

}  // namespace
}  // namespace reshard
