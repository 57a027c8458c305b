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

using gpu_testing::dense_copy;
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
  CopyOp op = dense_copy(DType::kF32, host.data(), dev.data(), 64);
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

std::vector<std::byte> pattern(int64_t n, int seed) {
  std::vector<std::byte> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>(i * 37 + seed * 101 + 1);
  return v;
}

// Invariant (the launch cache of a GPU, device_context.h): a call equal to
// an earlier one reuses its launches and moves the data the buffers hold
// now; a call differing in any field (a pointer, an offset, an extent) is
// planned anew; more distinct calls than the cache holds, and calls too
// large for it, still move the right bytes; cached entries survive eviction
// of others in the right order.
TEST(CudaKernels, RepeatedCallsReuseLaunchesAndNeverConfuseTwoCalls) {
  RESHARD_REQUIRE_GPU();
  auto transport = make_cuda_local_transport();
  constexpr int64_t kBytes = 1 << 16;
  DeviceBuffer src(kBytes, 0);
  DeviceBuffer dst1(kBytes, 0);
  DeviceBuffer dst2(kBytes, 0);
  ASSERT_TRUE(src.ok() && dst1.ok() && dst2.ok());
  const auto run = [&](const std::vector<CopyOp>& ops) {
    transport->run_copies(0, 0, ops);
    transport->finish(60);
  };
  // 64 pieces of 1 KiB, reversed.
  const auto pieces = [&](std::byte* dst, int64_t shift) {
    std::vector<CopyOp> ops;
    for (int64_t i = 0; i < 64; ++i) {
      ops.push_back(dense_copy(DType::kU8, src.data() + i * 1024, dst + (63 - i) * 1024 + shift,
                               1024 - shift));
    }
    return ops;
  };
  const auto reversed = [](const std::vector<std::byte>& in, int64_t shift) {
    std::vector<std::byte> out(in.size(), std::byte{0});
    for (int64_t i = 0; i < 64; ++i) {
      std::copy_n(in.begin() + i * 1024, 1024 - shift, out.begin() + (63 - i) * 1024 + shift);
    }
    return out;
  };
  const std::vector<CopyOp> a = pieces(dst1.data(), 0);
  for (int round = 0; round < 3; ++round) {  // the first plans, the others hit
    const std::vector<std::byte> data = pattern(kBytes, round);
    src.upload(data.data());
    run(a);
    ASSERT_EQ(dst1.download(), reversed(data, 0)) << "round " << round;
  }
  // Another destination pointer: not the cached call.
  const std::vector<std::byte> zeros(kBytes, std::byte{0});
  dst2.upload(zeros.data());
  const std::vector<std::byte> data = pattern(kBytes, 7);
  src.upload(data.data());
  run(pieces(dst2.data(), 0));
  EXPECT_EQ(dst2.download(), reversed(data, 0));
  // Only offsets and extents differ (same pointers as a's first op): not cached.
  dst1.upload(zeros.data());
  run(pieces(dst1.data(), 8));
  EXPECT_EQ(dst1.download(), reversed(data, 8));
  // More distinct calls than the cache keeps (16), then the first again.
  std::vector<std::vector<CopyOp>> calls;
  for (int64_t k = 0; k < 40; ++k) calls.push_back(pieces(dst2.data(), k % 20));
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < calls.size(); ++k) {
      const int64_t shift = static_cast<int64_t>(k % 20);
      dst2.upload(zeros.data());
      run(calls[k]);
      ASSERT_EQ(dst2.download(), reversed(data, shift)) << "pass " << pass << " call " << k;
    }
  }
  // A call larger than the cache (150,000 ops, about 80 MiB of ops and
  // descriptors against 64 MiB): planned and run uncached, twice.
  constexpr int64_t kOps = 150000;
  DeviceBuffer big_src(kOps * 4, 0);
  DeviceBuffer big_dst(kOps * 4, 0);
  ASSERT_TRUE(big_src.ok() && big_dst.ok());
  std::vector<CopyOp> many;
  for (int64_t i = 0; i < kOps; ++i) {
    many.push_back(
        dense_copy(DType::kU8, big_src.data() + i * 4, big_dst.data() + (kOps - 1 - i) * 4, 4));
  }
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<std::byte> in = pattern(kOps * 4, 20 + pass);
    big_src.upload(in.data());
    run(many);
    const std::vector<std::byte> out = big_dst.download();
    for (int64_t i = 0; i < kOps; ++i) {
      ASSERT_TRUE(
          std::equal(in.begin() + i * 4, in.begin() + i * 4 + 4, out.begin() + (kOps - 1 - i) * 4))
          << "pass " << pass << ", op " << i;
    }
  }
}

}  // namespace
}  // namespace reshard
