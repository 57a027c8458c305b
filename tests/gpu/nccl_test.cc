// The nccl transport on one GPU (NCCL refuses two ranks on one GPU, so a
// single-GPU machine runs a one-rank group): creation from a unique id and
// from a caller's communicator, the control-plane allgather, grouped
// send/receive (to itself), a whole plan through the engine, and a group
// that never fills up timing out instead of hanging. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/staged_cases.h"
#include "gpu_util.h"
#include "reshard/cuda.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"

#if defined(RESHARD_TEST_NCCL)
#include <nccl.h>
#endif

namespace reshard {
namespace {

using gpu_testing::DeviceBuffer;

#define RESHARD_REQUIRE_NCCL()                           \
  do {                                                   \
    RESHARD_REQUIRE_GPU();                               \
    std::string reshard_nccl_why_;                       \
    if (!nccl_transport_available(&reshard_nccl_why_)) { \
      GTEST_SKIP() << reshard_nccl_why_;                 \
    }                                                    \
  } while (0)

NcclTransportOptions one_rank() {
  NcclTransportOptions o;
  o.process = 0;
  o.devices = {{0, nullptr, 0}};
  o.unique_id = make_nccl_unique_id();
  o.nccl_ranks = 1;
  o.timeout_seconds = 60;
  return o;
}

// Sends `bytes` from one device buffer to another through a send and a
// receive to this same rank, in one batch; checks they arrived.
void self_send(Transport& t, int64_t bytes) {
  std::vector<std::byte> data(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; ++i)
    data[static_cast<size_t>(i)] = static_cast<std::byte>(i * 7 + 3);
  DeviceBuffer src(bytes, 0);
  DeviceBuffer dst(bytes, 0);
  src.upload(data.data());
  TransferOp send;
  send.kind = TransferOp::Kind::kSend;
  send.peer = 0;
  send.data = src.data();
  send.bytes = bytes;
  TransferOp recv = send;
  recv.kind = TransferOp::Kind::kRecv;
  recv.data = dst.data();
  const TransferOp ops[] = {send, recv};
  auto batch = t.start(ops);
  EXPECT_TRUE(batch->test());
  t.finish(60);
  EXPECT_TRUE(batch->pending_peers().empty());
  EXPECT_EQ(dst.download(), data);
}

// Invariant: a one-rank group created from a unique id reports itself
// (nccl, CUDA memory, stream-ordered), gathers records, and moves bytes
// with grouped ncclSend/ncclRecv.
TEST(Nccl, OneRankGroupFromAUniqueId) {
  RESHARD_REQUIRE_NCCL();
  auto t = make_nccl_transport(one_rank());
  const TransportInfo info = t->info();
  EXPECT_EQ(info.name, "nccl");
  EXPECT_EQ(info.memory, MemoryKind::kCuda);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.size, 1);
  EXPECT_TRUE(info.stream_ordered);
  const uint64_t record = 0x1234567890abcdefull;
  const auto all = t->allgather(std::as_bytes(std::span(&record, 1)), 60);
  ASSERT_EQ(all.size(), 1u);
  ASSERT_EQ(all[0].size(), 8u);
  EXPECT_EQ(std::memcmp(all[0].data(), &record, 8), 0);
  self_send(*t, 1 << 20);
  self_send(*t, 3);
}

// Executes `plan` (every device in process 0) through `engine` on buffers in
// device memory filled as fill_sources fills host ones; the oracle's report
// on the destinations downloaded afterwards.
OracleReport execute_on_gpu(Engine& engine, const Plan& plan) {
  OracleBuffers host = fill_sources(plan);
  std::vector<std::vector<DeviceBuffer>> src(plan.tensors().size());
  std::vector<std::vector<DeviceBuffer>> dst(plan.tensors().size());
  std::vector<TensorBuffers> views(plan.tensors().size());
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    for (const auto& b : host.src[t]) {
      src[t].emplace_back(static_cast<int64_t>(b.size()), 0);
      src[t].back().upload(b.data());
      views[t].src.push_back({src[t].back().data(), src[t].back().bytes()});
    }
    for (const auto& b : host.dst[t]) {
      dst[t].emplace_back(static_cast<int64_t>(b.size()), 0);
      dst[t].back().upload(b.data());
      views[t].dst.push_back({dst[t].back().data(), dst[t].back().bytes()});
    }
  }
  const ExecuteStats stats = engine.execute(plan, 0, views);
  EXPECT_TRUE(stats.agreed);
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    for (size_t e = 0; e < dst[t].size(); ++e) host.dst[t][e] = dst[t][e].download();
  }
  return check_destinations(plan, host);
}

// Invariant: the engine executes a whole plan over the nccl transport (the
// agreement over NCCL, staging in device memory, the fused kernels), and
// every destination element is right.
TEST(Nccl, EngineExecutesAPlanOnOneGpu) {
  RESHARD_REQUIRE_NCCL();
  auto src_mesh = std::make_shared<Mesh>();
  src_mesh->axis_names = {"x"};
  src_mesh->shape = {4};
  src_mesh->devices = {0, 1, 2, 3};
  auto dst_mesh = std::make_shared<Mesh>();
  dst_mesh->axis_names = {"y"};
  dst_mesh->shape = {3};
  dst_mesh->devices = {3, 4, 5};
  PlanInput in;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    TensorSpec t;
    t.name = std::string("t_") + std::string(dtype_name(dtype));
    t.shape = {97, 130};
    t.dtype = dtype;
    NamedSharding s;
    s.mesh = src_mesh;
    s.dims = {{"x"}, {}};
    NamedSharding d;
    d.mesh = dst_mesh;
    d.dims = {{}, {"y"}};
    t.src = Layout::from_named(s, t.shape, "src");
    t.dst = Layout::from_named(d, t.shape, "dst");
    in.tensors.push_back(t);
  }
  const Plan plan = make_plan(in);
  Engine engine(make_nccl_transport(one_rank()));
  const OracleReport report = execute_on_gpu(engine, plan);
  EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches";
  EXPECT_GT(report.elements, 0);
}

// Invariant: staged plans (relays across hosts, chains and trees of hosts,
// reduce-scatter then gather, pre-reduction in scratch; the MPI tests'
// specs in one process, unbudgeted and under a budget) run stage after
// stage through one engine over the nccl transport, and every destination
// element is right. One engine for all: its schedule cache and staging
// serve plan after plan.
TEST(Nccl, EngineExecutesStagedPlansOnOneGpu) {
  RESHARD_REQUIRE_NCCL();
  Engine engine(make_nccl_transport(one_rank()));
  int plans = 0, with_scratch = 0;
  for (const testing::StagedCase& c : testing::staged_spec_cases(1)) {
    SCOPED_TRACE(c.name);
    const Plan plan = make_plan(c.input);
    ASSERT_GT(plan.stats().stages, 1) << "not a staged plan";
    const OracleReport report = execute_on_gpu(engine, plan);
    EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches";
    EXPECT_GT(report.elements, 0);
    ++plans;
    with_scratch += plan.stats().max_scratch_bytes > 0;
  }
  std::cout << plans << " staged plans verified over nccl, " << with_scratch << " with scratch\n";
  EXPECT_GE(plans, 30);
  EXPECT_GE(with_scratch, 7);
}

// Invariant: a group that never fills up (two NCCL ranks expected, one
// joins) is a kTimeout within the deadline, not a hang; the communicator
// reshard created is aborted.
TEST(Nccl, MissingPeerTimesOutInsteadOfHanging) {
  RESHARD_REQUIRE_NCCL();
  NcclTransportOptions o = one_rank();
  o.nccl_ranks = 2;
  o.timeout_seconds = 3;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    make_nccl_transport(o);
    FAIL() << "expected kTimeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 30.0);
}

// Invariant: bad options are kInvalidArgument naming the field.
TEST(Nccl, BadOptionsNameTheField) {
  RESHARD_REQUIRE_NCCL();
  NcclTransportOptions o = one_rank();
  o.devices.clear();
  try {
    make_nccl_transport(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("options.devices"), std::string::npos) << e.what();
  }
  o = one_rank();
  o.devices[0].nccl_rank = 5;
  try {
    make_nccl_transport(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("nccl_rank"), std::string::npos) << e.what();
  }
}

#if defined(RESHARD_TEST_NCCL)
// Invariant: a communicator the caller created (blocking or not) is used
// as is and left to the caller to destroy.
TEST(Nccl, CallerCommunicatorIsUsedAndNotDestroyed) {
  RESHARD_REQUIRE_NCCL();
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  RESHARD_CUDA_OK(cudaSetDevice(0));
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  {
    NcclTransportOptions o;
    o.devices = {{0, comm, -1}};  // process defaults to the comm's rank
    auto t = make_nccl_transport(o);
    EXPECT_EQ(t->info().rank, 0);
    self_send(*t, 4096);
  }
  int count = 0;
  EXPECT_EQ(ncclCommCount(comm, &count), ncclSuccess);  // still alive
  EXPECT_EQ(count, 1);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}
#endif

}  // namespace
}  // namespace reshard
