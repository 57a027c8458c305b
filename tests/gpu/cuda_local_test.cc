// In-process execution on CUDA (reshard/cuda.h, execute_cuda_local): random
// plans whose devices all live in this process, buffers in device memory,
// must leave exactly the bytes execute_host leaves. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/random_cases.h"
#include "core/staged_cases.h"
#include "gpu_util.h"
#include "reshard/cuda.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/spec.h"

namespace reshard {
namespace {

using gpu_testing::DeviceBuffer;

// A plan's shard buffers in device memory, filled like fill_sources fills
// the host ones (sources and poisoned destinations).
struct DeviceShards {
  std::vector<std::vector<DeviceBuffer>> src;
  std::vector<std::vector<DeviceBuffer>> dst;
  std::vector<TensorBuffers> views;
};

DeviceShards upload(const Plan& plan, const OracleBuffers& host) {
  DeviceShards d;
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& spec = plan.tensors()[t];
    d.src.emplace_back();
    d.dst.emplace_back();
    TensorBuffers v;
    for (size_t e = 0; e < host.src[t].size(); ++e) {
      const int ordinal = plan.topology().info(spec.src.device(e)).ordinal;
      d.src[t].emplace_back(static_cast<int64_t>(host.src[t][e].size()), 0, ordinal);
      d.src[t][e].upload(host.src[t][e].data());
      v.src.push_back({d.src[t][e].data(), d.src[t][e].bytes()});
    }
    for (size_t e = 0; e < host.dst[t].size(); ++e) {
      const int ordinal = plan.topology().info(spec.dst.device(e)).ordinal;
      d.dst[t].emplace_back(static_cast<int64_t>(host.dst[t][e].size()), 0, ordinal);
      d.dst[t][e].upload(host.dst[t][e].data());
      v.dst.push_back({d.dst[t][e].data(), d.dst[t][e].bytes()});
    }
    d.views.push_back(std::move(v));
  }
  return d;
}

// A random case's inputs with every device on process 0, spread over the
// visible GPUs by ordinal.
PlanInput one_process(PlanInput in, int gpus) {
  Topology t;
  for (const DeviceInfo& d : in.topology.devices()) {
    DeviceInfo info = d;
    info.process = 0;
    info.host = 0;
    info.ordinal = static_cast<int32_t>(d.device % gpus);
    t.add(info);
  }
  in.topology = t;
  return in;
}

bool has_narrow_partial_sums(const Plan& plan) {
  for (const TensorSpec& t : plan.tensors()) {
    if (t.src.partial() && !acc_is_elem(t.dtype)) return true;
  }
  return false;
}

// Runs `plan` on the host and on the GPU(s); the destinations must match
// byte for byte. False (with a test failure) otherwise.
// With `oracle`, the host's bytes (so the GPU's) are also checked against
// the oracle.
bool matches_host(const Plan& plan, const CudaLocalOptions& options = {},
                  cudaStream_t sync_stream = nullptr, bool oracle = false) {
  OracleBuffers host = fill_sources(plan);
  const std::vector<TensorBuffers> host_views = host.views();
  const OracleBuffers start = host;  // sources and poisoned destinations
  execute_host(plan, host_views);
  DeviceShards dev = upload(plan, start);
  try {
    execute_cuda_local(plan, dev.views, options);
  } catch (const Error& e) {
    ADD_FAILURE() << error_code_name(e.code()) << ": " << e.what();
    return false;
  }
  if (sync_stream != nullptr) {
    EXPECT_EQ(cudaStreamSynchronize(sync_stream), cudaSuccess);
  }
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    for (size_t e = 0; e < host.dst[t].size(); ++e) {
      EXPECT_EQ(dev.dst[t][e].download(), host.dst[t][e])
          << "tensor " << t << " (" << plan.tensors()[t].name << ", "
          << dtype_name(plan.tensors()[t].dtype) << ") dst entry " << e;
      if (::testing::Test::HasFailure()) return false;
    }
  }
  if (oracle) {
    const OracleReport report = check_destinations(plan, host);
    EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches";
    if (!report.ok()) return false;
  }
  return true;
}

// Invariant (random plans: ranks 0-5, uneven, cross-mesh, replication,
// partial sources and destinations, explicit boxes, many logical devices
// sharing the GPU(s)): the GPU leaves execute_host's bytes in every
// destination buffer.
TEST(CudaLocal, RandomPlansMatchExecuteHostByteForByte) {
  RESHARD_REQUIRE_GPU();
  std::string why;
  const int gpus = gpu_testing::gpu_count(&why);
  int verified = 0;
  int narrow_partial = 0;
  for (uint64_t c = 0; c < 150; ++c) {
    testing::CaseOptions o;
    o.max_devices = 16;
    testing::CaseGen gen(1000 + c, o);
    const PlanInput in = one_process(gen.input(), gpus);
    const Plan plan = make_plan(in);
    ASSERT_TRUE(matches_host(plan)) << "case " << c;
    ++verified;
    if (has_narrow_partial_sums(plan)) ++narrow_partial;
  }
  std::cout << verified << " plans verified, " << narrow_partial
            << " of them with bf16 partial sums (f32 accumulators on the GPU)\n";
  EXPECT_EQ(verified, 150);
}

// Invariant (staged plans: relays across hosts, chains and trees of hosts,
// reduce-scatter then gather, pre-reduction in scratch; the MPI tests'
// specs and random cases in one process with their hosts kept, with and
// without a staging budget): the cuda transport runs the stages in order,
// leaves execute_host's bytes in every destination, and the oracle accepts
// them.
TEST(CudaLocal, StagedPlansMatchExecuteHostByteForByte) {
  RESHARD_REQUIRE_GPU();
  std::string why;
  const int gpus = gpu_testing::gpu_count(&why);
  int specs = 0, random = 0, with_scratch = 0, max_stages = 0;
  for (const testing::StagedCase& c : testing::staged_spec_cases(gpus)) {
    SCOPED_TRACE(c.name);
    const Plan plan = make_plan(c.input);
    ASSERT_GT(plan.stats().stages, 1) << "not a staged plan";
    EXPECT_TRUE(matches_host(plan, {}, nullptr, true));
    ++specs;
    with_scratch += plan.stats().max_scratch_bytes > 0;
    max_stages = std::max(max_stages, plan.stats().stages);
  }
  // About one random case in six is staged with its processes as hosts.
  for (uint64_t seed = 2000; random < 60 && seed < 4000; ++seed) {
    const Plan plan = make_plan(testing::random_staged_input(seed, gpus));
    if (plan.stats().stages < 2) continue;
    ASSERT_TRUE(matches_host(plan, {}, nullptr, true)) << "seed " << seed;
    ++random;
    with_scratch += plan.stats().max_scratch_bytes > 0;
  }
  std::cout << specs << " spec plans and " << random << " random plans verified in stages (up to "
            << max_stages << "), " << with_scratch << " with scratch\n";
  EXPECT_GE(specs, 30);
  EXPECT_EQ(random, 60);
  EXPECT_GE(with_scratch, 7);
}

// Invariant (block scales: the two small scale specs, f32 scales of
// blocks that destination boxes cut, short edge blocks, f8e4m3 and
// f8e5m2, MXFP8 e8m0 scales beside them; unbudgeted and in 16 KiB rounds):
// the scales computed on the GPU (kBlockScales) and every copy quantised
// there (kQuantise) leave execute_host's bytes, values and scale tensors,
// and the oracle accepts them.
TEST(CudaLocal, BlockScaleSpecsMatchExecuteHostByteForByte) {
  RESHARD_REQUIRE_GPU();
  std::string why;
  const int gpus = gpu_testing::gpu_count(&why);
  for (const char* name : {"zero3_fp8_scales_small.json", "zero3_mxfp8_small.json"}) {
    for (const int64_t budget : {int64_t{0}, int64_t{16384}}) {
      SCOPED_TRACE(std::string(name) + " budget " + std::to_string(budget));
      PlanInput in = testing::in_one_process(
          load_spec(std::string(RESHARD_SOURCE_DIR) + "/tests/data/" + name).input, gpus, false);
      in.options.staging_budget_bytes = budget;
      EXPECT_TRUE(matches_host(make_plan(in), {}, nullptr, true));
    }
  }
}

TensorSpec bf16_tensor(int64_t rows, int64_t cols, const std::shared_ptr<Mesh>& src_mesh,
                       const std::shared_ptr<Mesh>& dst_mesh) {
  TensorSpec t;
  t.name = "w";
  t.shape = {rows, cols};
  t.dtype = DType::kBF16;
  NamedSharding s;
  s.mesh = src_mesh;
  s.dims = {{"x"}, {}};
  NamedSharding d;
  d.mesh = dst_mesh;
  d.dims = {{}, {"y"}};
  t.src = Layout::from_named(s, t.shape, "src");
  t.dst = Layout::from_named(d, t.shape, "dst");
  return t;
}

std::shared_ptr<Mesh> mesh_1d(const std::string& axis, std::vector<int64_t> devices) {
  auto m = std::make_shared<Mesh>();
  m->axis_names = {axis};
  m->shape = {static_cast<int64_t>(devices.size())};
  m->devices = std::move(devices);
  return m;
}

// Invariant: a large bf16 row-block to column-block reshard between four
// logical devices on one GPU (strided packs of long runs) matches the host.
TEST(CudaLocal, LargeRowToColumnBlocksMatchTheHost) {
  RESHARD_REQUIRE_GPU();
  PlanInput in;
  in.tensors.push_back(
      bf16_tensor(2048, 3000, mesh_1d("x", {0, 1, 2, 3}), mesh_1d("y", {4, 5, 6, 7})));
  EXPECT_TRUE(matches_host(make_plan(in)));
}

// Invariant: with a caller stream and wait = false, execute returns with the
// work enqueued on that stream, and after synchronising it the result is
// the host's.
TEST(CudaLocal, CallerStreamWithoutWaiting) {
  RESHARD_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  RESHARD_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> owner(stream, &cudaStreamDestroy);
  CudaLocalOptions options;
  options.streams = {{0, stream}};
  options.wait = false;
  PlanInput in;
  in.tensors.push_back(bf16_tensor(300, 500, mesh_1d("x", {0, 1, 2}), mesh_1d("y", {3, 1})));
  EXPECT_TRUE(matches_host(make_plan(in), options, stream));
}

// Invariant: plan devices spread over two GPUs copy through peer access and
// match the host (needs two GPUs).
TEST(CudaLocal, TwoGpusMatchTheHost) {
  RESHARD_REQUIRE_GPU();
  std::string why;
  if (gpu_testing::gpu_count(&why) < 2) GTEST_SKIP() << "needs two GPUs";
  PlanInput in;
  in.tensors.push_back(
      bf16_tensor(512, 640, mesh_1d("x", {0, 1, 2, 3}), mesh_1d("y", {4, 5, 6, 7})));
  for (int64_t d = 0; d < 8; ++d) in.topology.add({d, 0, 0, static_cast<int32_t>(d % 2)});
  EXPECT_TRUE(matches_host(make_plan(in)));
}

// Invariant: a plan with a device on another process is refused (the cuda
// transport has one rank), naming the process.
TEST(CudaLocal, PlansSpanningProcessesAreRejected) {
  RESHARD_REQUIRE_GPU();
  PlanInput in;
  in.tensors.push_back(bf16_tensor(8, 8, mesh_1d("x", {0, 1}), mesh_1d("y", {2, 3})));
  in.topology.add({3, 1, 0, 0});
  const Plan plan = make_plan(in);
  OracleBuffers host = fill_sources(plan);
  DeviceShards dev = upload(plan, host);
  try {
    execute_cuda_local(plan, dev.views);
    FAIL() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("process 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace reshard
