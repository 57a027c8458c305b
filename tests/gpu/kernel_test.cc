// The fused copy kernels on a GPU, through the cuda transport's run_copies:
// the cases of kernel_emulation_test.cc, in device memory, must give the
// bytes of the host core (reshard/box_copy.h). Skips without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "copy_cases.h"
#include "gpu_util.h"
#include "reshard/cuda.h"
#include "reshard/error.h"

namespace reshard {
namespace {

using gpu_testing::DeviceBuffer;
using gpu_testing::host_apply;
using gpu_testing::kAllDTypes;
using gpu_testing::kAllOps;
using gpu_testing::RandomCopy;
using gpu_testing::Values;

// A RandomCopy mirrored in device memory (same misalignment).
struct DeviceCopy {
  DeviceBuffer src;
  DeviceBuffer dst;
  CopyOp op;
};

DeviceCopy to_device(const RandomCopy& c) {
  DeviceCopy d;
  d.src = DeviceBuffer(c.src.bytes, c.src.shift);
  d.dst = DeviceBuffer(c.dst.bytes, c.dst.shift);
  d.src.upload(c.src.data());
  d.dst.upload(c.dst.data());
  d.op = c.op;
  d.op.src = c.op.src != nullptr ? d.src.data() : nullptr;
  d.op.dst = d.dst.data();
  return d;
}

std::vector<std::byte> expected_of(const RandomCopy& c) {
  RandomCopy e = c;
  e.op.src = c.op.src != nullptr ? e.src.data() : nullptr;
  e.op.dst = e.dst.data();
  host_apply(e.op, e.src.bytes, e.dst.bytes);
  return e.dst.contents();
}

// Invariant: every kind, dtype and reduce op, strided/packed/unpacked,
// long runs, misaligned device pointers: the GPU writes the host's bytes.
TEST(CudaKernels, EveryKindDtypeAndOpMatchesTheHostCore) {
  RESHARD_REQUIRE_GPU();
  auto transport = make_cuda_local_transport();
  Values values(11);
  int cases = 0;
  for (DType dtype : kAllDTypes) {
    for (int i = 0; i < 30; ++i) {
      const ReduceOp op = kAllOps[i % 3];
      static constexpr CopyOp::Kind kinds[] = {CopyOp::Kind::kCopy, CopyOp::Kind::kReduce,
                                               CopyOp::Kind::kFillAcc, CopyOp::Kind::kFillElements,
                                               CopyOp::Kind::kStore};
      const CopyOp::Kind kind = kinds[i % 5];
      const RandomCopy c = kind == CopyOp::Kind::kCopy || kind == CopyOp::Kind::kReduce
                               ? gpu_testing::random_box_op(values, kind, dtype, op)
                               : gpu_testing::random_linear_op(values, kind, dtype, op);
      DeviceCopy d = to_device(c);
      ASSERT_TRUE(d.dst.ok());
      transport->run_copies(0, 0, std::span(&d.op, 1));
      transport->finish(60);
      ASSERT_EQ(d.dst.download(), expected_of(c)) << c.what;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 15 * 30);
}

// Invariant: sixty independent ops in one run_copies call (one fused launch
// per class) all give the host's bytes.
TEST(CudaKernels, FusedLaunchOfManyOpsMatchesTheHostCore) {
  RESHARD_REQUIRE_GPU();
  auto transport = make_cuda_local_transport();
  Values values(12);
  std::vector<RandomCopy> cs;
  std::vector<DeviceCopy> ds;
  std::vector<CopyOp> ops;
  for (int i = 0; i < 60; ++i) {
    cs.push_back(
        gpu_testing::random_box_op(values, i % 3 == 0 ? CopyOp::Kind::kReduce : CopyOp::Kind::kCopy,
                                   kAllDTypes[i % 15], kAllOps[i % 3]));
  }
  for (const RandomCopy& c : cs) ds.push_back(to_device(c));
  for (const DeviceCopy& d : ds) ops.push_back(d.op);
  transport->run_copies(0, 0, ops);
  transport->finish(60);
  for (size_t i = 0; i < cs.size(); ++i) {
    ASSERT_EQ(ds[i].dst.download(), expected_of(cs[i])) << cs[i].what;
  }
}

// Invariant: ordered sequences of dependent ops in one call (fills, several
// reductions into one accumulator, stores, copies reading what earlier ops
// wrote) give the bytes of applying them one by one on the host.
TEST(CudaKernels, DependentSequencesKeepTheirOrderOnTheGpu) {
  RESHARD_REQUIRE_GPU();
  auto transport = make_cuda_local_transport();
  Values values(13);
  for (int c = 0; c < 90; ++c) {
    const DType dtype = kAllDTypes[c % 15];
    gpu_testing::Scenario s =
        gpu_testing::random_scenario(values, dtype, kAllOps[(c / 15) % 3], 4 + c % 12);
    // Device copies of the buffers, ops remapped onto them.
    std::vector<DeviceBuffer> elems;
    std::vector<DeviceBuffer> accs;
    for (const auto& b : s.elems) {
      elems.emplace_back(b.bytes, b.shift);
      elems.back().upload(b.data());
    }
    for (const auto& b : s.accs) {
      accs.emplace_back(b.bytes, b.shift);
      accs.back().upload(b.data());
    }
    std::vector<CopyOp> ops = s.ops;
    const auto remap = [&](const void* p) -> std::byte* {
      if (p == nullptr) return nullptr;
      for (size_t b = 0; b < s.elems.size(); ++b)
        if (p == s.elems[b].data()) return elems[b].data();
      for (size_t b = 0; b < s.accs.size(); ++b)
        if (p == s.accs[b].data()) return accs[b].data();
      return nullptr;
    };
    for (CopyOp& op : ops) {
      op.src = remap(op.src);
      op.dst = remap(op.dst);
    }
    for (size_t i = 0; i < s.ops.size(); ++i) {
      host_apply(s.ops[i], s.sizes[i].first, s.sizes[i].second);
    }
    transport->run_copies(0, 0, ops);
    transport->finish(60);
    for (size_t b = 0; b < s.elems.size(); ++b) {
      ASSERT_EQ(elems[b].download(), s.elems[b].contents())
          << "case " << c << " " << dtype_name(dtype) << " buffer " << b;
    }
    for (size_t b = 0; b < s.accs.size(); ++b) {
      ASSERT_EQ(accs[b].download(), s.accs[b].contents()) << "case " << c << " acc " << b;
    }
  }
}

// Invariant: a host pointer handed to the GPU is a kInvalidArgument that
// says so, not a CUDA fault; the transport stays usable afterwards.
TEST(CudaKernels, HostPointersAreRejectedBeforeTheKernelRuns) {
  RESHARD_REQUIRE_GPU();
  auto transport = make_cuda_local_transport();
  std::vector<float> host(64, 1.0f);
  DeviceBuffer dev(64 * 4, 0);
  Box box;
  box.rank = 1;
  box.hi[0] = 64;
  CopyOp op;
  op.kind = CopyOp::Kind::kCopy;
  op.dtype = DType::kF32;
  op.desc = make_copy_desc(box, box, box);
  op.src = host.data();
  op.dst = dev.data();
  try {
    transport->run_copies(0, 0, std::span(&op, 1));
    FAIL() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }
  DeviceBuffer src(64 * 4, 0);
  src.upload(host.data());
  op.src = src.data();
  transport->run_copies(0, 0, std::span(&op, 1));
  transport->finish(60);
  EXPECT_EQ(dev.download(), src.download());
}

}  // namespace
}  // namespace reshard
