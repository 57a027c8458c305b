// Execution of scratch buffers (plan.h, Scratch): reduction trees whose
// summands are combined on their holders' host before they cross to the
// destination's reducer. The plans are built by hand (the planner does not
// emit scratch yet) and checked against the oracle through execute_host,
// the engine over the local transport, and per-process engines on a
// transport of threads that delivers every message late and in random order
// (thread_transport.h): a send that read a scratch before its last
// contribution was combined and stored, a reducer forwarding before its
// scratch contributions arrived, or a scratch that did not start at the
// identity of the reduce op leaves wrong elements the oracle sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/oracle_describe.h"
#include "plan/plan_builder.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/simulate.h"
#include "reshard/wire.h"
#include "scratch_plans.h"
#include "thread_transport.h"

namespace reshard {
namespace {

using namespace thread_transport;  // NOLINT(google-build-using-namespace)

using namespace scratch_plans;  // NOLINT(google-build-using-namespace)

using testing::describe;

OracleReport run_host(const Plan& plan, int32_t threads) {
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  HostExecuteOptions o;
  o.threads = threads;
  execute_host(plan, views, o);
  return check_destinations(plan, buffers);
}

// Per-process engines on a transport of threads, every message delivered
// after up to `max_delay` polls.
struct ThreadsResult {
  std::string error;
  OracleReport report;
  std::vector<ExecuteStats> stats;
};
// `device_path`: the transport takes the engine's copies through run_copies
// (as the nccl transport does; thread_transport.h).
ThreadsResult run_threads(const Plan& plan, uint64_t seed, int32_t max_delay, bool gather,
                          int32_t threads, int32_t last_stage = -1, bool device_path = false) {
  int32_t n = 0;
  for (int32_t p : plan.processes()) n = std::max(n, p + 1);
  Hub hub(n, seed, max_delay);
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  ThreadsResult out;
  out.error = run_ranks(
      hub, gather,
      [&](Engine& engine, int32_t r) {
        ExecuteOptions o;
        o.timeout_seconds = 60;
        o.threads = threads;
        o.last_stage = last_stage;
        o.packing = gather ? ExecuteOptions::Packing::kAuto : ExecuteOptions::Packing::kStaging;
        return engine.execute(plan, r, views, o);
      },
      out.stats, device_path);
  out.report = last_stage < 0 ? check_destinations(plan, buffers)
                              : check_destinations_through_stage(plan, buffers,
                                                                 static_cast<uint32_t>(last_stage));
  return out;
}

std::vector<TreeCase> tree_cases() {
  std::vector<TreeCase> cases;
  std::mt19937_64 rng(7);
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kMean};
  for (int i = 0; i < 40; ++i) {
    TreeCase c;
    c.op = ops[i % 4];
    c.dtype = (i / 4) % 2 == 0 ? DType::kF32 : DType::kBF16;
    const int hosts = 2 + static_cast<int>(rng() % 2);
    c.per_host.clear();
    for (int h = 0; h < hosts; ++h) c.per_host.push_back(1 + static_cast<int>(rng() % 3));
    c.two_level = (i / 8) % 2 == 1 && i < 32;
    c.late = i >= 32 ? 1 + static_cast<uint32_t>(i % 2) : 0;  // summands crossing in stage 1 or 2
    c.rounds = 1 + static_cast<int>(rng() % 2);
    c.host_process = rng() % 2 == 0;
    c.raw_first_host = i >= 16 && rng() % 2 == 0;
    if (c.late > 0) {
      // Hosts of 2-3 holders (a leader receiving, whose halves may share
      // bytes), f32 and bf16 in turn (bf16 accumulates in f32 apart).
      c.dtype = (i / 2) % 2 == 0 ? DType::kF32 : DType::kBF16;
      c.op = ops[(i / 2) % 4];  // sum and min among the f32 halves that share
      for (int& k : c.per_host) k = std::max(k, 2);
      c.raw_first_host = false;
    }
    cases.push_back(c);
  }
  return cases;
}

// Reduction trees of every reduce op, f32 and bf16, 1-3 summands per host,
// one or two levels of scratch, one or two rounds, holders in one process
// per host or per device, and 8 trees whose second half's summands cross in
// stage 1 or 2 (plan.h, reads_source; in stage 2 the halves share the
// leader's scratch bytes): execute_host on 1-3 threads matches the oracle.
// (execute_host keeps every scratch apart; the per-process engines below
// share them.)
TEST(EngineScratch, TreesMatchTheOracleInProcess) {
  int checked = 0;
  for (const TreeCase& c : tree_cases()) {
    const Plan plan = tree_plan(c);
    for (int32_t threads : {1, 2, 3}) {
      const OracleReport r = run_host(plan, threads);
      EXPECT_TRUE(r.ok()) << c.label() << " threads " << threads << ": " << describe(r);
      EXPECT_GT(r.elements, 0);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 120);
}

// The same trees on per-process engines, messages delivered late and in
// random order, staged or gathered, 1-3 copy threads; and staged through the
// device path (every copy through run_copies, as over NCCL).
TEST(EngineScratch, TreesMatchTheOracleUnderRandomDeliveryDelays) {
  int checked = 0, shared = 0;
  uint64_t seed = 1;
  for (const TreeCase& c : tree_cases()) {
    const Plan plan = tree_plan(c);
    // Halves sharing a leader's bytes (late 2), in f32 (whose scratch is
    // its accumulator).
    shared += c.dtype == DType::kF32 &&
              plan.stats().max_scratch_bytes < kRows * kCols * dtype_size(c.dtype);
    for (int mode = 0; mode < 3; ++mode) {
      const bool gather = mode == 1, device_path = mode == 2;
      const int32_t threads = 1 + static_cast<int32_t>(seed % 3);
      const ThreadsResult r = run_threads(plan, seed++, 30, gather, threads, -1, device_path);
      const char* how = gather ? " gather" : device_path ? " device path" : " staging";
      EXPECT_TRUE(r.error.empty()) << c.label() << how << ": " << r.error;
      EXPECT_TRUE(r.report.ok()) << c.label() << how << ": " << describe(r.report);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 120);
  EXPECT_GE(shared, 2);
}

// Halves written two stages apart (late 2: stages 0-1 and 2-3) share the
// leader's scratch bytes in a per-process engine: one half's worth, where
// halves whose stages overlap (late 1) take two. The trees above check the
// values under random delays (the second half's identity fill and the
// leader's own summand wait for stage 2, after the first half was sent).
TEST(EngineScratch, HalvesTwoStagesApartShareTheLeadersScratch) {
  for (uint32_t late : {1u, 2u}) {
    TreeCase c;
    c.per_host = {2, 3};
    c.late = late;
    c.host_process = true;
    const Plan plan = tree_plan(c);
    const int64_t half = kRows / 2 * kCols * 4;
    EXPECT_EQ(plan.stats().max_scratch_bytes, late == 2 ? half : 2 * half);
    const ThreadsResult r = run_threads(plan, 5, 10, false, 1);
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_TRUE(r.report.ok()) << describe(r.report);
    int64_t most = 0;
    for (const ExecuteStats& s : r.stats) most = std::max(most, s.scratch_bytes);
    EXPECT_EQ(most, plan.stats().max_scratch_bytes) << "late " << late;
    // The plan's bytes carry the same figure, which the decoder checks.
    EXPECT_EQ(decode_plan(encode_plan(plan)).stats().max_scratch_bytes, most);
  }
}

// The simulator reads late summands (plan.h, reads_source) as summands:
// their messages wait for nothing, and the leader's send of the scratch
// they write waits for them.
TEST(EngineScratch, SimulatorTakesLateSummandsFromTheSources) {
  TreeCase c;
  c.per_host = {2, 3};
  c.late = 1;
  c.host_process = true;
  const Plan plan = tree_plan(c);
  const std::vector<SimMessage> msgs = plan_messages(plan);
  int late = 0, waiting = 0;
  for (const SimMessage& m : msgs) {
    if (m.stage != 1) continue;
    const auto& t = plan.tensors()[0];
    // From a holder to its host's leader (both holders of the source).
    if (t.src.entry_of(m.src_device) && t.src.entry_of(m.dst_device)) {
      ++late;
      EXPECT_TRUE(m.after.empty()) << m.src_device << " -> " << m.dst_device;
    }
  }
  for (const SimMessage& m : msgs) waiting += m.stage == 2 && !m.after.empty();
  EXPECT_GT(late, 0);
  EXPECT_GT(waiting, 0);
}

// The scratch buffers are allocated on their devices and counted: two
// halves of 4 x 6 f32 on each holder host's leader; for bf16 also their f32
// accumulators.
TEST(EngineScratch, ScratchBytesAreCounted) {
  TreeCase c;
  c.per_host = {2, 3};
  const Plan f32 = tree_plan(c);
  ExecuteStats host_stats;
  {
    OracleBuffers buffers = fill_sources(f32);
    const std::vector<TensorBuffers> views = buffers.views();
    Engine engine(make_local_transport());
    host_stats = engine.execute(f32, kAllProcesses, views);
    EXPECT_TRUE(check_destinations(f32, buffers).ok());
  }
  EXPECT_EQ(host_stats.scratch_bytes, 2 * 2 * 4 * 6 * 4);
  const ThreadsResult r = run_threads(f32, 3, 5, false, 1);
  ASSERT_TRUE(r.error.empty()) << r.error;
  int64_t total = 0;
  for (const ExecuteStats& s : r.stats) total += s.scratch_bytes;
  EXPECT_EQ(total, 2 * 2 * 4 * 6 * 4);
  c.dtype = DType::kBF16;
  const Plan bf16 = tree_plan(c);
  const ThreadsResult b = run_threads(bf16, 4, 5, false, 1);
  ASSERT_TRUE(b.error.empty()) << b.error;
  int64_t scratch = 0, acc = 0;
  for (const ExecuteStats& s : b.stats) {
    scratch += s.scratch_bytes;
    acc += s.accumulator_bytes;
  }
  EXPECT_EQ(scratch, 2 * 2 * 4 * 6 * 2);
  // The leaders' scratch accumulators (f32), and the two reducers' entries.
  EXPECT_EQ(acc, 2 * 2 * 4 * 6 * 4 + 2 * 8 * 6 * 4);
}

// ExecuteOptions::last_stage stops after a stage: the oracle checks what
// the stages so far finished (scratch contributions of later stages leave
// their regions unchecked), and no contribution is left unreduced in error.
TEST(EngineScratch, LastStageStopsAfterThatStage) {
  TreeCase c;
  c.per_host = {2, 1, 3};
  c.raw_first_host = true;
  c.rounds = 2;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    c.dtype = dtype;
    c.op = dtype == DType::kF32 ? ReduceOp::kMean : ReduceOp::kSum;
    const Plan plan = tree_plan(c);
    for (int32_t last : {0, 1, 2}) {
      const ThreadsResult r =
          run_threads(plan, 11 + static_cast<uint64_t>(last), 10, false, 2, last);
      EXPECT_TRUE(r.error.empty()) << "last stage " << last << ": " << r.error;
      EXPECT_TRUE(r.report.ok()) << "last stage " << last << ": " << describe(r.report);
      OracleBuffers buffers = fill_sources(plan);
      const std::vector<TensorBuffers> views = buffers.views();
      Engine engine(make_local_transport());
      ExecuteOptions o;
      o.last_stage = last;
      engine.execute(plan, kAllProcesses, views, o);
      const OracleReport h =
          check_destinations_through_stage(plan, buffers, static_cast<uint32_t>(last));
      EXPECT_TRUE(h.ok()) << "in process, last stage " << last << ": " << describe(h);
    }
  }
}

// ----------------------------------------------------------- bad plans

std::string execute_error(const Plan& plan, ErrorCode* code) {
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  try {
    execute_host(plan, views);
  } catch (const Error& e) {
    *code = e.code();
    return e.what();
  }
  *code = ErrorCode::kOk;
  return "";
}

// Edits the first piece of `list` ("local", "recv") of the part of
// `process` that names a scratch.
Piece* scratch_piece(Plan& plan, bool local) {
  for (auto& [p, part] : Plan::Builder::parts(plan)) {
    for (Piece& piece : local ? part.local : part.recv_pieces) {
      if (piece.dst_entry == kScratchEntry || piece.src_entry == kScratchEntry) return &piece;
    }
  }
  return nullptr;
}

TEST(EngineScratch, BadScratchIsRefusedNamingThePiece) {
  TreeCase c;
  c.per_host = {2, 2};
  c.host_process = true;
  ErrorCode code = ErrorCode::kOk;
  {
    // No scratch held where a piece writes: the part's scratch removed.
    Plan plan = tree_plan(c);
    for (auto& [p, part] : Plan::Builder::parts(plan)) part.scratch.clear();
    const std::string what = execute_error(plan, &code);
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(what.find("local[0]"), std::string::npos) << what;
    EXPECT_NE(what.find("piece.dst_entry"), std::string::npos) << what;
  }
  {
    // A scratch box that does not contain the piece's region.
    Plan plan = tree_plan(c);
    for (auto& [p, part] : Plan::Builder::parts(plan)) {
      for (Scratch& s : part.scratch) s.box.hi[1] = kCols - 1;
    }
    const std::string what = execute_error(plan, &code);
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(what.find("piece.dst_entry"), std::string::npos) << what;
  }
  {
    // A piece naming a scratch without a region.
    Plan plan = tree_plan(c);
    Piece* piece = scratch_piece(plan, true);
    ASSERT_NE(piece, nullptr);
    piece->region = kOverlapRegion;
    const std::string what = execute_error(plan, &code);
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(what.find("names no region"), std::string::npos) << what;
  }
  {
    // A stage-0 piece reading a scratch.
    Plan plan = tree_plan(c);
    Piece* piece = scratch_piece(plan, true);
    ASSERT_NE(piece, nullptr);
    piece->src_entry = kScratchEntry;
    const std::string what = execute_error(plan, &code);
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(what.find("stage 0 reads a scratch"), std::string::npos) << what;
  }
  {
    // A scratch read in the stage that writes it: two levels, the
    // aggregator's sends to the reducers moved from stage 2 to stage 1.
    TreeCase two = c;
    two.two_level = true;
    Plan plan = tree_plan(two);
    for (auto& [p, part] : Plan::Builder::parts(plan)) {
      for (Message& m : part.sends) m.stage = m.stage == 2 ? 1 : m.stage;
      for (Message& m : part.recvs) m.stage = m.stage == 2 ? 1 : m.stage;
    }
    const std::string what = execute_error(plan, &code);
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(what.find("which a piece of stage 1 writes"), std::string::npos) << what;
  }
  {
    // A scratch on a device of another process.
    Plan plan = tree_plan(c);
    auto& parts = Plan::Builder::parts(plan);
    parts.begin()->second.scratch.front().device = 2;  // on host (process) 1
    const std::string what = execute_error(plan, &code);
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(what.find("scratch[0]"), std::string::npos) << what;
  }
}

// A reducer forwarding in the stage (and round) of its scratch
// contributions cannot wait for its reduction: refused in one process and
// by the per-process schedule (which would otherwise wait forever).
TEST(EngineScratch, ForwardingInTheStageOfTheContributionsIsRefused) {
  TreeCase c;
  c.per_host = {2, 2};
  c.relay_same_stage = true;
  const Plan plan = tree_plan(c);
  ErrorCode code = ErrorCode::kOk;
  const std::string what = execute_error(plan, &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported) << what;
  EXPECT_NE(what.find("before its reduction ends"), std::string::npos) << what;
  // The first reducer (device 4, process 4) alone: its schedule is refused
  // before the agreement.
  int32_t n = 0;
  for (int32_t p : plan.processes()) n = std::max(n, p + 1);
  Hub hub(n, 1, 0);
  Engine engine(std::make_unique<ThreadTransport>(hub, 4, false));
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  try {
    engine.execute(plan, 4, views);
    ADD_FAILURE() << "executed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("forwards from a destination entry"), std::string::npos)
        << e.what();
  }
}

TEST(EngineScratch, BadScratchIsRefusedForTensorsWithoutPartialSource) {
  // A whole source: its scratch is a copy staging (staging_test.cc), read
  // into destination entries only; one read into another scratch is
  // refused.
  const std::vector<int64_t> shape = {4, 2};
  TensorSpec t;
  t.name = "w";
  t.shape = shape;
  t.src = Layout::from_boxes(shape, {{0, 0, rows(0, 4, 2)}}, 1, ReduceOp::kSum, "src");
  t.dst = Layout::from_boxes(shape, {{1, 0, rows(0, 4, 2)}}, 1, ReduceOp::kSum, "dst");
  PlanInput in;
  in.tensors.push_back(t);
  Plan plan = make_plan(in);
  set_parts(plan,
            {{0, 0, 0, 0, 0, kScratchEntry, rows(0, 4, 2)},
             {0, 1, 1, 0, kScratchEntry, kScratchEntry, rows(0, 4, 2)}},
            {{0, 0, rows(0, 4, 2)}, {0, 1, rows(0, 4, 2)}});
  ErrorCode code = ErrorCode::kOk;
  const std::string what = execute_error(plan, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << what;
  EXPECT_NE(what.find("names a staging scratch"), std::string::npos) << what;
}

TEST(EngineScratch, PlanLooksUpScratchBoxes) {
  TreeCase c;
  c.per_host = {2, 2};
  c.host_process = true;
  const Plan plan = tree_plan(c);
  const ProcessPart& part = plan.part(0);
  ASSERT_EQ(part.scratch.size(), 2u);
  const Box lower = rows(0, 4, kCols);
  const Box upper = rows(4, 8, kCols);
  EXPECT_EQ(find_scratch(part, 0, 0, rows(1, 3, kCols)), 0);
  EXPECT_EQ(find_scratch(part, 0, 0, upper), 1);
  EXPECT_EQ(find_scratch(part, 0, 0, rows(3, 5, kCols)), -1);  // spans both
  EXPECT_EQ(find_scratch(part, 0, 1, lower), -1);              // another device
  EXPECT_EQ(find_scratch(part, 1, 0, lower), -1);              // another tensor
  const Piece* local = &part.local.front();
  ASSERT_EQ(local->dst_entry, kScratchEntry);
  EXPECT_EQ(plan.destination_box(part, *local, 0), lower);
  try {
    (void)plan.destination_box(part, *local, 1);
    ADD_FAILURE() << "no scratch on device 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    EXPECT_EQ(e.field(), "piece.dst_entry");
  }
  Piece read = *local;
  read.src_entry = kScratchEntry;
  read.dst_entry = 0;
  EXPECT_EQ(plan.source_box(part, read, 1, 0), lower);
  for (uint32_t stage : {0u, 1u}) {
    try {
      (void)plan.source_box(read, stage);
      ADD_FAILURE() << "source_box without a part";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
      EXPECT_EQ(e.field(), "piece.src_entry");
    }
  }
  try {
    (void)plan.source_box(part, read, 0, 0);
    ADD_FAILURE() << "a stage-0 piece reading a scratch";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "piece.src_entry");
  }
  EXPECT_EQ(plan.piece_bytes(part, read), 4 * kCols * 4);
}

}  // namespace
}  // namespace reshard
