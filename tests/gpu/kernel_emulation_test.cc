// The fused copy kernels' logic on the CPU, without a GPU: the launches that
// copy_plan.h makes from run_copies' CopyOps, executed thread by thread with
// the very device code of kernels.cu (kernel_body.h is RESHARD_HD), must
// give the bytes of the box-copy core's host functions. Runs everywhere; the
// GPU runs the same cases in kernel_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "copy_cases.h"
#include "copy_plan.h"
#include "emulate_launches.h"
#include "kernel_body.h"
#include "reshard/error.h"

namespace reshard {
namespace {

using cuda_backend::Footprint;
using cuda_backend::kThreads;
using cuda_backend::Launch;
using cuda_backend::plan_launches;
using cuda_backend::Work;
using gpu_testing::dense_copy;
using gpu_testing::emulate;
using gpu_testing::host_apply;
using gpu_testing::kAllDTypes;
using gpu_testing::kAllOps;
using gpu_testing::RandomCopy;
using gpu_testing::Values;

// Invariant: for random strided copies and reductions of every dtype and
// reduce op (ranks 0-4, packed, unpacked, general, runs beyond a chunk,
// misaligned pointers, empty regions) the kernel code writes exactly the
// bytes the host core writes.
TEST(KernelEmulation, BoxCopiesAndReductionsMatchTheHostCore) {
  Values values(1);
  int cases = 0;
  for (DType dtype : kAllDTypes) {
    for (int i = 0; i < 40; ++i) {
      const ReduceOp op = kAllOps[i % 3];
      const auto kind = i % 2 == 0 ? CopyOp::Kind::kCopy : CopyOp::Kind::kReduce;
      RandomCopy c = gpu_testing::random_box_op(values, kind, dtype, op);
      RandomCopy expected = c;
      expected.op.src = expected.src.data();
      expected.op.dst = expected.dst.data();
      host_apply(expected.op, expected.src.bytes, expected.dst.bytes);
      emulate(plan_launches(std::span(&c.op, 1)), i % 4 == 1);
      ASSERT_EQ(c.dst.contents(), expected.dst.contents()) << c.what;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 15 * 40);
}

// Invariant: casts in flight (CopyOp::kCast) of every supported pair, on
// random strided boxes with misaligned pointers, give the bytes of the host's
// cast_box (reshard/cast.h) bit for bit.
TEST(KernelEmulation, CastsMatchTheHostCore) {
  const DType floats[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2};
  Values values(7);
  int cases = 0;
  for (DType from : floats) {
    for (DType to : floats) {
      if (from == to) continue;
      for (int i = 0; i < 12; ++i) {
        RandomCopy c =
            gpu_testing::random_box_op(values, CopyOp::Kind::kCopy, from, ReduceOp::kSum);
        const int64_t elements = c.dst.bytes / dtype_size(from);
        c.dst = gpu_testing::make_buffer(elements * dtype_size(to), i % 3);
        // Half the cases from random bits: NaN, infinities, subnormals, overflow.
        if (i % 2 == 1)
          for (int64_t b = 0; b < c.src.bytes; ++b)
            c.src.data()[b] = static_cast<std::byte>(values.rng()() & 0xff);
        c.op.kind = CopyOp::Kind::kCast;
        c.op.to_dtype = to;
        c.op.dst = c.dst.data();
        RandomCopy expected = c;
        expected.op.src = expected.src.data();
        expected.op.dst = expected.dst.data();
        host_apply(expected.op, expected.src.bytes, expected.dst.bytes);
        emulate(plan_launches(std::span(&c.op, 1)), i % 4 == 1);
        ASSERT_EQ(c.dst.contents(), expected.dst.contents())
            << "cast to " << dtype_name(to) << ": " << c.what;
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 20 * 12);
}

// Invariant: identity fills (accumulator and elements) and stores from f32
// accumulators give the host core's bytes for every dtype and op.
TEST(KernelEmulation, FillsAndStoresMatchTheHostCore) {
  Values values(2);
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllOps) {
      for (auto kind :
           {CopyOp::Kind::kFillAcc, CopyOp::Kind::kFillElements, CopyOp::Kind::kStore}) {
        RandomCopy c = gpu_testing::random_linear_op(values, kind, dtype, op);
        RandomCopy expected = c;
        expected.op.src = expected.src.data();
        expected.op.dst = expected.dst.data();
        host_apply(expected.op, expected.src.bytes, expected.dst.bytes);
        emulate(plan_launches(std::span(&c.op, 1)));
        ASSERT_EQ(c.dst.contents(), expected.dst.contents()) << c.what;
      }
    }
  }
}

// Invariant: a mean's store (CopyOp::divisor > 1) divides in the
// accumulation type and rounds once, as the host core does, for every
// floating-point dtype (f32 and f64 included, whose plain stores are copies),
// also in place; integer dtypes and a divisor below 1 are refused by name.
TEST(KernelEmulation, MeanStoresDivideLikeTheHostCore) {
  Values values(3);
  int cases = 0;
  for (DType dtype : kAllDTypes) {
    if (!dtype_is_float(dtype)) continue;
    for (int32_t divisor : {2, 3, 7, 16}) {
      RandomCopy c =
          gpu_testing::random_linear_op(values, CopyOp::Kind::kStore, dtype, ReduceOp::kSum);
      c.op.divisor = divisor;
      RandomCopy expected = c;
      expected.op.src = expected.src.data();
      expected.op.dst = expected.dst.data();
      host_apply(expected.op, expected.src.bytes, expected.dst.bytes);
      emulate(plan_launches(std::span(&c.op, 1)));
      ASSERT_EQ(c.dst.contents(), expected.dst.contents()) << c.what << " divisor " << divisor;
      if (acc_is_elem(dtype)) {
        // In place: the destination is its own accumulator.
        RandomCopy in_place =
            gpu_testing::random_linear_op(values, CopyOp::Kind::kStore, dtype, ReduceOp::kSum);
        in_place.op.divisor = divisor;
        in_place.op.src = in_place.op.dst;
        // The host reference reads an aligned copy (the kernels take any
        // alignment; the host functions need aligned accumulators).
        const size_t bytes = static_cast<size_t>(in_place.op.count * dtype_size(dtype));
        std::vector<uint64_t> acc(bytes / 8 + 1);
        std::memcpy(acc.data(), in_place.op.dst, bytes);
        std::vector<uint64_t> want_words(bytes / 8 + 1);
        store_mean_from_acc(dtype, acc.data(), want_words.data(), in_place.op.count, divisor);
        std::vector<std::byte> want(bytes);
        std::memcpy(want.data(), want_words.data(), bytes);
        emulate(plan_launches(std::span(&in_place.op, 1)));
        ASSERT_EQ(0, std::memcmp(want.data(), in_place.op.dst, want.size())) << in_place.what;
      }
      ++cases;
    }
  }
  EXPECT_EQ(cases, 6 * 4);
  RandomCopy bad =
      gpu_testing::random_linear_op(values, CopyOp::Kind::kStore, DType::kI32, ReduceOp::kSum);
  bad.op.divisor = 2;
  try {
    (void)plan_launches(std::span(&bad.op, 1));
    ADD_FAILURE() << "an integer mean store was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".divisor: a mean needs a floating-point dtype"),
              std::string::npos)
        << e.what();
  }
  bad.op.dtype = DType::kF32;
  bad.op.divisor = 0;
  try {
    (void)plan_launches(std::span(&bad.op, 1));
    ADD_FAILURE() << "divisor 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".divisor: 0 is below 1"), std::string::npos) << e.what();
  }
}

// Invariant: many independent ops of one call become one fused launch per
// class (copies, element ops), and still give the host bytes.
TEST(KernelEmulation, IndependentOpsFuseIntoOneLaunchPerClass) {
  Values values(3);
  std::vector<RandomCopy> cs;
  for (int i = 0; i < 60; ++i) {
    const DType dtype = kAllDTypes[i % 15];
    cs.push_back(gpu_testing::random_box_op(
        values, i % 3 == 0 ? CopyOp::Kind::kReduce : CopyOp::Kind::kCopy, dtype, kAllOps[i % 3]));
  }
  std::vector<CopyOp> ops;
  std::vector<std::vector<std::byte>> expected;
  for (RandomCopy& c : cs) {
    ops.push_back(c.op);
    RandomCopy e = c;
    e.op.src = e.src.data();
    e.op.dst = e.dst.data();
    host_apply(e.op, e.src.bytes, e.dst.bytes);
    expected.push_back(e.dst.contents());
  }
  const std::vector<Launch> launches = plan_launches(ops);
  EXPECT_LE(launches.size(), 2u);
  emulate(launches, true);
  for (size_t i = 0; i < cs.size(); ++i) ASSERT_EQ(cs[i].dst.contents(), expected[i]) << cs[i].what;
}

// Invariant (kernel_detail::copy_bytes_realigned): runs between pointers of
// every pair of offsets modulo 16, of lengths around and far above the
// realigning threshold, single and in rows (an uneven split's columns,
// 2,730-byte runs whose row offsets differ by 2 modulo 16), copy exactly
// their bytes and nothing around them.
TEST(KernelEmulation, MisalignedRunsAreRealignedExactly) {
  Values values(31);
  int cases = 0;
  for (const int64_t len : {int64_t{15}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{100},
                            int64_t{1000}, int64_t{20000}}) {
    for (int so = 0; so < 16; ++so) {
      for (int d_o = 0; d_o < 16; ++d_o) {
        gpu_testing::Buffer src = gpu_testing::make_buffer(len + 32, so);
        gpu_testing::Buffer dst = gpu_testing::make_buffer(len + 32, d_o);
        values.fill(DType::kU8, false, src.data(), src.bytes);
        values.fill(DType::kU8, false, dst.data(), dst.bytes);
        gpu_testing::Buffer want = dst;
        std::memcpy(want.data() + 16, src.data() + 7, static_cast<size_t>(len));
        const CopyOp op = dense_copy(DType::kU8, src.data() + 7, dst.data() + 16, len);
        emulate(plan_launches(std::span(&op, 1)), (so + d_o) % 2 == 1);
        ASSERT_EQ(dst.contents(), want.contents()) << len << " bytes, shifts " << so << "/" << d_o;
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 7 * 256);
  // Columns [1365 k, 1365 (k + 1)) of a 6 x 8190 bf16 matrix into a dense
  // 6 x 1365 shard and back.
  const Box full = [] {
    Box b;
    b.rank = 2;
    b.hi[0] = 6;
    b.hi[1] = 8190;
    return b;
  }();
  for (int k = 0; k < 6; ++k) {
    for (const bool pack : {true, false}) {
      Box region = full;
      region.lo[1] = 1365 * k;
      region.hi[1] = 1365 * (k + 1);
      gpu_testing::Buffer matrix = gpu_testing::make_buffer(full.volume() * 2, k % 3);
      gpu_testing::Buffer shard = gpu_testing::make_buffer(region.volume() * 2, 2 * (k % 2));
      values.fill(DType::kBF16, false, matrix.data(), full.volume());
      values.fill(DType::kBF16, false, shard.data(), region.volume());
      CopyOp op;
      op.kind = CopyOp::Kind::kCopy;
      op.dtype = DType::kBF16;
      op.desc = pack ? make_copy_desc(region, full, region) : make_copy_desc(region, region, full);
      op.src = pack ? static_cast<const void*>(matrix.data()) : shard.data();
      op.dst = pack ? static_cast<void*>(shard.data()) : matrix.data();
      gpu_testing::Buffer want_m = matrix;
      gpu_testing::Buffer want_s = shard;
      for (int64_t r = 0; r < 6; ++r) {
        std::byte* m = want_m.data() + (r * 8190 + 1365 * k) * 2;
        std::byte* sh = want_s.data() + r * 1365 * 2;
        if (pack) {
          std::memcpy(sh, m, 1365 * 2);
        } else {
          std::memcpy(m, sh, 1365 * 2);
        }
      }
      emulate(plan_launches(std::span(&op, 1)), k % 2 == 0);
      ASSERT_EQ(matrix.contents(), want_m.contents()) << "column block " << k;
      ASSERT_EQ(shard.contents(), want_s.contents()) << "column block " << k;
    }
  }
}

// Invariant (copy_plan.cc, index_tiles): a launch of many small Works
// carries each tile's Work, the one the binary search finds; a launch whose
// Works have many tiles each carries none; both move the bytes exactly.
TEST(KernelEmulation, TileIndexNamesEachTilesWork) {
  for (const int64_t count : {int64_t{300}, int64_t{400000}}) {
    const int n = count < 1000 ? 200 : 3;
    gpu_testing::Buffer src = gpu_testing::make_buffer(n * count, 0);
    gpu_testing::Buffer dst = gpu_testing::make_buffer(n * count, 0);
    for (int64_t i = 0; i < src.bytes; ++i) src.data()[i] = static_cast<std::byte>(i * 7 + 3);
    std::vector<CopyOp> ops;
    for (int i = 0; i < n; ++i) {
      // Piece i into slot (i * 37) mod n: scattered, independent.
      ops.push_back(dense_copy(DType::kU8, src.data() + i * count,
                               dst.data() + ((i * 37) % n) * count, count));
    }
    const std::vector<Launch> launches = plan_launches(ops);
    ASSERT_EQ(launches.size(), 1u);
    const Launch& l = launches[0];
    const int works = static_cast<int>(l.works.size());
    if (count < 1000) {
      ASSERT_EQ(static_cast<int64_t>(l.tile_work.size()), l.tiles());
      for (int64_t t = 0; t < l.tiles(); ++t) {
        ASSERT_EQ(l.tile_work[t], cuda_backend::find_work(l.tile_start.data(), works, t)) << t;
      }
    } else {
      EXPECT_TRUE(l.tile_work.empty()) << l.tiles() << " tiles of " << works << " works";
    }
    emulate(launches, true);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(dst.data() + ((i * 37) % n) * count, src.data() + i * count, count), 0)
          << "piece " << i << " of " << count << " bytes";
    }
  }
}

// Invariant (the whole-call fast path of plan_launches): thousands of
// independent dense copies, scattered over one staging buffer, are one
// launch with the bytes of copying them in turn; and every kind of hazard
// between two ops whose byte spans merely meet (a read of what an earlier
// op wrote, a write over what an earlier op read, a write over an earlier
// write, the later span starting before or inside the earlier one) splits
// the call into ordered phases.
TEST(KernelEmulation, WholeCallCheckFusesIndependentOpsAndOrdersEveryHazard) {
  constexpr int64_t kPiece = 48;
  constexpr int64_t kPieces = 3000;
  std::vector<std::byte> src(kPiece * kPieces);
  std::vector<std::byte> dst(kPiece * kPieces);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
  std::vector<CopyOp> ops;
  for (int64_t i = 0; i < kPieces; ++i) {
    const int64_t to = (i * 1237) % kPieces;  // a permutation (1237 and 3000 are coprime)
    ops.push_back(
        dense_copy(DType::kU8, src.data() + i * kPiece, dst.data() + to * kPiece, kPiece));
  }
  const std::vector<Launch> fused = plan_launches(ops);
  ASSERT_EQ(fused.size(), 1u);
  emulate(fused, true);
  for (int64_t i = 0; i < kPieces; ++i) {
    const int64_t to = (i * 1237) % kPieces;
    ASSERT_TRUE(std::equal(src.begin() + i * kPiece, src.begin() + (i + 1) * kPiece,
                           dst.begin() + to * kPiece))
        << "piece " << i;
  }

  struct Hazard {
    const char* what;
    int64_t first_src, first_dst, first_len;  // offsets into a (src) and b (dst)
    int second_src_buffer;                    // 0: a, 1: b, 2: c
    int64_t second_src, second_len;
    int second_dst_buffer;
    int64_t second_dst;
  };
  const Hazard hazards[] = {
      {"read inside an earlier write", 0, 0, 100, 1, 10, 10, 2, 0},
      {"read starting before an earlier write", 0, 40, 20, 1, 0, 100, 2, 0},
      {"write inside an earlier read", 0, 0, 100, 2, 0, 10, 0, 50},
      {"write starting before an earlier read", 30, 0, 40, 2, 0, 50, 0, 0},
      {"write over an earlier write", 0, 0, 100, 2, 0, 10, 1, 95},
  };
  for (const Hazard& h : hazards) {
    std::vector<std::byte> bufs[3];
    for (int k = 0; k < 3; ++k) {
      bufs[k].resize(256);
      for (size_t i = 0; i < 256; ++i) bufs[k][i] = static_cast<std::byte>(i + 64 * k);
    }
    std::vector<std::byte> expected[3] = {bufs[0], bufs[1], bufs[2]};
    const CopyOp pair[2] = {
        dense_copy(DType::kU8, bufs[0].data() + h.first_src, bufs[1].data() + h.first_dst,
                   h.first_len),
        dense_copy(DType::kU8, bufs[h.second_src_buffer].data() + h.second_src,
                   bufs[h.second_dst_buffer].data() + h.second_dst, h.second_len)};
    std::copy_n(expected[0].begin() + h.first_src, h.first_len, expected[1].begin() + h.first_dst);
    std::copy_n(expected[h.second_src_buffer].begin() + h.second_src, h.second_len,
                expected[h.second_dst_buffer].begin() + h.second_dst);
    const std::vector<Launch> launches = plan_launches(pair);
    EXPECT_EQ(launches.size(), 2u) << h.what;
    emulate(launches, true);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(bufs[k], expected[k]) << h.what << ", buffer " << k;
    // The same pair among the thousands of independent copies (the spans
    // of many ops are sorted by a radix sort): still ordered.
    std::vector<CopyOp> many(ops.begin(), ops.begin() + kPieces / 2);
    many.push_back(pair[0]);
    many.insert(many.end(), ops.begin() + kPieces / 2, ops.end());
    many.push_back(pair[1]);
    EXPECT_GE(plan_launches(many).size(), 2u) << h.what << ", among " << kPieces << " copies";
  }
}

// Invariant (writes_isolated, the whole-call check): the answer of
// comparing every pair of spans, on hundreds to a few thousand spans over
// a range that takes the radix sort of their starts three passes: disjoint
// writes among reads (some reads meeting reads, some spans empty), and
// the same with one span moved onto a write.
TEST(KernelEmulation, WholeCallCheckMatchesEveryPair) {
  using cuda_backend::Span;
  std::mt19937_64 rng(39);
  const auto every_pair = [](const std::vector<Span>& v) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].write || v[i].lo >= v[i].hi) continue;
      for (size_t j = 0; j < v.size(); ++j) {
        if (j == i || v[j].lo >= v[j].hi) continue;
        if (v[i].lo < v[j].hi && v[j].lo < v[i].hi) return false;
      }
    }
    return true;
  };
  int isolated = 0, met = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const size_t n = 600 + rng() % 600;
    const uintptr_t base = uintptr_t{0x7f0000000000} + (rng() % 4096) * 4096;
    std::vector<size_t> slot(n);
    for (size_t k = 0; k < n; ++k) slot[k] = k;
    std::shuffle(slot.begin(), slot.end(), rng);
    std::vector<Span> spans;
    for (size_t k = 0; k < n; ++k) {
      const uintptr_t lo = base + slot[k] * 4096 + rng() % 64;
      const bool write = rng() % 3 == 0;
      spans.push_back({lo, rng() % 50 == 0 ? lo : lo + 1 + rng() % 2000, write});
      if (!write && rng() % 4 == 0) spans.push_back({lo + 100, lo + 3000, false});
    }
    if (trial % 2 == 1) {
      size_t w = rng() % spans.size();
      while (!spans[w].write || spans[w].lo >= spans[w].hi) w = (w + 1) % spans.size();
      const size_t s = (w + 1 + rng() % (spans.size() - 1)) % spans.size();
      spans[s].lo = spans[w].lo + (spans[w].hi - spans[w].lo) / 2;
      spans[s].hi = spans[s].lo + 10;
    }
    const bool want = every_pair(spans);
    std::vector<Span> checked = spans;
    EXPECT_EQ(cuda_backend::writes_isolated(checked), want) << "trial " << trial;
    ++(want ? isolated : met);
  }
  EXPECT_GE(isolated, 10);
  EXPECT_GE(met, 10);
}

// Every byte address a Work touches on one side.
// Bytes a Work reads (src) or writes: a kReduceN Work reads its summands
// (the launch's sources) and, unless it starts from the identity, its
// accumulator.
std::set<uintptr_t> touched(const Launch& l, const Work& w, bool src) {
  std::set<uintptr_t> out;
  const bool multi =
      static_cast<cuda_backend::WorkKind>(w.kind) == cuda_backend::WorkKind::kReduceN;
  const auto add = [&](const unsigned char* base, int64_t size, bool src_side,
                       const cuda_backend::SrcRef* ref) {
    if (base == nullptr) return;
    for (int64_t r = 0; r < w.runs; ++r) {
      int64_t so = 0;
      int64_t to = 0;
      run_offsets(w.desc, r, &so, &to);
      if (ref != nullptr) so = cuda_backend::kernel_detail::src_run_offset(w.desc, *ref, r);
      const int64_t o = src_side ? so : to;
      for (int64_t b = 0; b < w.run_len * size; ++b) {
        out.insert(reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(o * size + b));
      }
    }
  };
  if (!src) {
    add(w.dst, w.dst_size, false, nullptr);
  } else if (!multi) {
    add(w.src, w.src_size, true, nullptr);
  } else {
    for (int j = 0; j < w.nsrc; ++j) {
      const cuda_backend::SrcRef& r = l.sources[static_cast<size_t>(w.src_begin + j)];
      add(r.ptr, w.src_size, true, &r);
    }
    if ((w.flags & cuda_backend::kFromIdentity) == 0) {
      add(w.acc, acc_size(static_cast<DType>(w.dtype)), false, nullptr);
    }
  }
  return out;
}

bool intersects(const std::set<uintptr_t>& a, const std::set<uintptr_t>& b) {
  for (uintptr_t x : a)
    if (b.contains(x)) return true;
  return false;
}

// Invariant: ordered op sequences whose ops read and overwrite each other's
// results (copies, reductions of several summands, identity fills, stores)
// give the bytes of applying the ops one after another on the host, even
// with tiles run in reverse; and no launch holds two works where one writes
// bytes the other reads or writes (the phases are race free).
TEST(KernelEmulation, DependentSequencesKeepTheirOrder) {
  Values values(4);
  int launches_total = 0;
  int ops_total = 0;
  for (int c = 0; c < 150; ++c) {
    const DType dtype = kAllDTypes[c % 15];
    const ReduceOp op = kAllOps[(c / 15) % 3];
    gpu_testing::Scenario s = gpu_testing::random_scenario(values, dtype, op, 4 + c % 12);
    gpu_testing::Scenario expected = s;
    // The expected scenario's ops point at its own buffers.
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const auto remap = [&](const void* p) -> std::byte* {
        if (p == nullptr) return nullptr;
        for (size_t b = 0; b < s.elems.size(); ++b)
          if (p == s.elems[b].data()) return expected.elems[b].data();
        for (size_t b = 0; b < s.accs.size(); ++b)
          if (p == s.accs[b].data()) return expected.accs[b].data();
        return nullptr;
      };
      expected.ops[i].src = remap(s.ops[i].src);
      expected.ops[i].dst = remap(s.ops[i].dst);
      host_apply(expected.ops[i], s.sizes[i].first, s.sizes[i].second);
    }
    const std::vector<Launch> launches = plan_launches(s.ops);
    for (const Launch& l : launches) {
      std::vector<std::set<uintptr_t>> reads;
      std::vector<std::set<uintptr_t>> writes;
      for (const Work& w : l.works) {
        reads.push_back(touched(l, w, true));
        writes.push_back(touched(l, w, false));
      }
      for (size_t i = 0; i < l.works.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          ASSERT_FALSE(intersects(writes[i], writes[j]) || intersects(writes[i], reads[j]) ||
                       intersects(reads[i], writes[j]))
              << "case " << c << ": works " << j << " and " << i << " of one launch conflict";
        }
      }
    }
    emulate(launches, true);
    for (size_t b = 0; b < s.elems.size(); ++b) {
      ASSERT_EQ(s.elems[b].contents(), expected.elems[b].contents())
          << "case " << c << " " << dtype_name(dtype) << " buffer " << b;
    }
    for (size_t b = 0; b < s.accs.size(); ++b) {
      // An accumulator whose last use is a store is dead (transport.h):
      // a fused reduction may never write it.
      const std::byte* acc = s.accs[b].data();
      const CopyOp* last = nullptr;
      for (const CopyOp& o : s.ops)
        if (o.src == acc || o.dst == acc) last = &o;
      if (last != nullptr && last->kind == CopyOp::Kind::kStore && last->src == acc &&
          last->dst != acc) {
        continue;
      }
      ASSERT_EQ(s.accs[b].contents(), expected.accs[b].contents()) << "case " << c << " acc " << b;
    }
    launches_total += static_cast<int>(launches.size());
    ops_total += static_cast<int>(s.ops.size());
  }
  // Dependent sequences need several launches, but far fewer than one per op.
  EXPECT_LT(launches_total, ops_total);
}

// Invariant: the engine's common patterns fuse: many pieces unpacked into
// disjoint (interleaved) regions of one buffer, or packed from one buffer,
// are one launch; an unpack followed by a pack overwriting the same staging
// bytes is two.
TEST(KernelEmulation, PiecesOfOneBufferFuseAndStagingReuseIsOrdered) {
  // A 64 x 96 f32 destination receiving 8 column blocks of 64 x 12.
  Box full;
  full.rank = 2;
  full.hi[0] = 64;
  full.hi[1] = 96;
  std::vector<float> dst(64 * 96, 0.0f);
  std::vector<std::vector<float>> staging(8, std::vector<float>(64 * 12));
  std::vector<CopyOp> unpack;
  for (int b = 0; b < 8; ++b) {
    Box region = full;
    region.lo[1] = 12 * b;
    region.hi[1] = 12 * (b + 1);
    for (size_t i = 0; i < staging[b].size(); ++i) staging[b][i] = static_cast<float>(b * 1000 + i);
    CopyOp op;
    op.kind = CopyOp::Kind::kCopy;
    op.dtype = DType::kF32;
    op.desc = make_copy_desc(region, region, full);
    op.src = staging[b].data();
    op.dst = dst.data();
    unpack.push_back(op);
  }
  EXPECT_EQ(plan_launches(unpack).size(), 1u);
  // Packing the same blocks back out of `dst` into the staging buffers the
  // unpack read: the packs must wait for the unpacks.
  std::vector<CopyOp> both = unpack;
  for (int b = 0; b < 8; ++b) {
    CopyOp op = unpack[static_cast<size_t>(b)];
    Box region = full;
    region.lo[1] = 12 * ((b + 1) % 8);
    region.hi[1] = region.lo[1] + 12;
    op.desc = make_copy_desc(region, full, region);
    op.src = dst.data();
    op.dst = staging[static_cast<size_t>(b)].data();
    both.push_back(op);
  }
  const std::vector<Launch> launches = plan_launches(both);
  EXPECT_EQ(launches.size(), 2u);
  emulate(launches, true);
  for (int b = 0; b < 8; ++b) {
    const int from = (b + 1) % 8;  // staging b now holds block b+1's original values
    for (size_t i = 0; i < staging[b].size(); ++i) {
      ASSERT_EQ(staging[b][i], static_cast<float>(from * 1000 + i)) << b << " " << i;
    }
  }
}

// Invariant: for copies into random regions of one buffer (what a shard
// receiving pieces sees), the phases are exactly the greedy phases of true
// region overlaps: no false conflicts (fewer launches are impossible, more
// would be needless), whatever the regions' merged strides; and 1,024
// interleaved column blocks into one buffer are one launch.
TEST(KernelEmulation, PhasesOfPiecesIntoOneBufferAreExact) {
  std::mt19937_64 rng(6);
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<float> src(1 << 12);
  for (int c = 0; c < 400; ++c) {
    Box shape;
    shape.rank = static_cast<int32_t>(uni(1, 3));
    for (int k = 0; k < shape.rank; ++k) shape.hi[k] = uni(1, 7);
    std::vector<float> dst(static_cast<size_t>(shape.volume()));
    std::vector<Box> regions;
    std::vector<CopyOp> ops;
    const int n = static_cast<int>(uni(2, 24));
    for (int i = 0; i < n; ++i) {
      const Box r = gpu_testing::random_sub_box(rng, shape, false);
      regions.push_back(r);
      CopyOp op;
      op.kind = CopyOp::Kind::kCopy;
      op.dtype = DType::kF32;
      op.desc = make_copy_desc(r, r, shape);
      op.src = src.data() + i;  // read-only, never written
      op.dst = dst.data();
      ops.push_back(op);
    }
    size_t phases = 1;
    std::vector<Box> current;
    for (const Box& r : regions) {
      bool conflict = false;
      for (const Box& q : current) conflict = conflict || !intersect(r, q).empty();
      if (conflict) {
        ++phases;
        current.clear();
      }
      current.push_back(r);
    }
    ASSERT_EQ(plan_launches(ops).size(), phases) << "case " << c << " in " << to_string(shape);
  }
  Box full;
  full.rank = 2;
  full.hi[0] = 16;
  full.hi[1] = 4096;
  std::vector<CopyOp> ops;
  for (int b = 0; b < 1024; ++b) {
    Box r = full;
    r.lo[1] = 4 * b;
    r.hi[1] = 4 * b + 4;
    CopyOp op;
    op.kind = CopyOp::Kind::kCopy;
    op.dtype = DType::kF32;
    op.desc = make_copy_desc(r, r, full);
    op.src = src.data();
    op.dst = reinterpret_cast<void*>(0x10000);  // planning only: never run
    ops.push_back(op);
  }
  EXPECT_EQ(plan_launches(ops).size(), 1u);
}

// Invariant: footprints_overlap is exact for boxes of one row-major buffer
// (the engine's pieces of one shard) and never misses an overlap otherwise.
TEST(KernelEmulation, FootprintOverlapIsExactOnOneBufferAndConservativeElsewhere) {
  std::mt19937_64 rng(5);
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int exact_checks = 0;
  for (int c = 0; c < 3000; ++c) {
    Box shape;
    shape.rank = static_cast<int32_t>(uni(1, 4));
    for (int k = 0; k < shape.rank; ++k) shape.hi[k] = uni(1, 6);
    const Box ra = gpu_testing::random_sub_box(rng, shape, false);
    const Box rb = gpu_testing::random_sub_box(rng, shape, false);
    const bool same_grid = c % 4 != 0;
    const int64_t elem_a = 4;
    const int64_t elem_b = same_grid ? 4 : (c % 8 == 0 ? 2 : 4);
    const uintptr_t base = 0x100000;
    const uintptr_t base_b = same_grid ? base : base + static_cast<uintptr_t>(uni(0, 9));
    // Destination sides of two copies into the buffer.
    const Footprint fa = cuda_backend::make_footprint(make_copy_desc(ra, ra, shape), false,
                                                      reinterpret_cast<void*>(base), elem_a);
    const Footprint fb = cuda_backend::make_footprint(make_copy_desc(rb, rb, shape), false,
                                                      reinterpret_cast<void*>(base_b), elem_b);
    // Brute force over bytes.
    const auto bytes_of = [](const Footprint& f) {
      std::set<uintptr_t> s;
      CopyDesc d{};
      d.rank = f.rank;
      for (int k = 0; k < f.rank; ++k) {
        d.extent[k] = f.extent[k];
        d.dst_stride[k] = f.stride[k];
        d.src_stride[k] = f.stride[k];
      }
      d.dst_offset = f.offset;
      for_each_run(d, [&](int64_t, int64_t o, int64_t n) {
        for (int64_t b = 0; b < n * f.elem; ++b)
          s.insert(f.base + static_cast<uintptr_t>(o * f.elem + b));
      });
      return s;
    };
    const bool truth = intersects(bytes_of(fa), bytes_of(fb));
    const bool got = cuda_backend::footprints_overlap(fa, fb);
    if (same_grid) {
      ASSERT_EQ(got, truth) << "case " << c << ": " << to_string(ra) << " vs " << to_string(rb)
                            << " in " << to_string(shape);
      ++exact_checks;
    } else if (truth) {
      ASSERT_TRUE(got) << "case " << c << ": a missed overlap";
    }
  }
  EXPECT_GT(exact_checks, 2000);
}

// Invariant: run_copies rejects malformed ops with kInvalidArgument naming
// the op and the field, before anything runs.
TEST(KernelEmulation, MalformedOpsAreRejectedNamingTheField) {
  float a[16] = {};
  float b[16] = {};
  const CopyOp good = gpu_testing::dense_copy(DType::kF32, a, b, 16);
  const auto expect_error = [&](CopyOp bad, const std::string& needle) {
    std::vector<CopyOp> ops = {good, bad};
    try {
      plan_launches(ops);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string m = e.what();
      EXPECT_NE(m.find("ops[1]"), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  CopyOp bad = good;
  bad.dtype = static_cast<DType>(99);
  expect_error(bad, "dtype");
  bad = good;
  bad.kind = CopyOp::Kind::kReduce;
  bad.op = static_cast<ReduceOp>(7);
  expect_error(bad, "op");
  bad = good;
  bad.desc.rank = 9;
  expect_error(bad, "rank");
  bad = good;
  bad.src = nullptr;
  expect_error(bad, "src");
  bad = good;
  bad.desc.src_stride[0] = 2;
  expect_error(bad, "innermost");
  bad = good;
  bad.kind = CopyOp::Kind::kFillAcc;
  bad.count = -1;
  expect_error(bad, "count");
  bad = good;
  bad.kind = static_cast<CopyOp::Kind>(42);
  expect_error(bad, "kind");
}

// The engine's reduction pattern (Run::fill, reduce_ready, finish_accs):
// every accumulator filled with the identity, then each accumulator's
// summands in reduction order, then the stores; `later_read` adds a copy
// out of accumulator 0 after its store (so it must still be written).
struct ReductionCall {
  std::vector<gpu_testing::Buffer> sources;  // per accumulator, its summands
  std::vector<gpu_testing::Buffer> accs;
  std::vector<gpu_testing::Buffer> dsts;
  gpu_testing::Buffer extra;
  std::vector<CopyOp> ops;
  std::vector<std::pair<int64_t, int64_t>> sizes;  // per op: src, dst bytes
};

ReductionCall reduction_call(Values& values, DType dtype, ReduceOp op, int accs, int summands,
                             bool later_read, bool mean) {
  std::mt19937_64& rng = values.rng();
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t es = dtype_size(dtype);
  const int64_t as = acc_size(dtype);
  const bool separate = !acc_is_elem(dtype);
  ReductionCall c;
  Box shape;
  shape.rank = static_cast<int32_t>(uni(1, 3));
  for (int k = 0; k < shape.rank; ++k) shape.hi[k] = uni(2, 40);
  const int64_t n = shape.volume();
  c.sources.reserve(static_cast<size_t>(accs * summands));
  for (int a = 0; a < accs; ++a) {
    c.accs.push_back(gpu_testing::make_buffer(n * as, 0));
    values.fill(dtype, !separate ? false : true, c.accs.back().data(), n);
    c.dsts.push_back(gpu_testing::make_buffer(n * es, static_cast<int>(uni(0, 1)) * 2));
  }
  c.extra = gpu_testing::make_buffer(n * as, 0);
  for (int a = 0; a < accs; ++a) {
    CopyOp f;
    f.kind = CopyOp::Kind::kFillAcc;
    f.dtype = dtype;
    f.op = op;
    f.count = n;
    f.dst = c.accs[static_cast<size_t>(a)].data();
    c.ops.push_back(f);
    c.sizes.push_back({0, n * as});
  }
  for (int a = 0; a < accs; ++a) {
    for (int k = 0; k < summands; ++k) {
      // A source box holding the accumulator's box at a random place.
      Box src_box = shape;
      for (int d = 0; d < shape.rank; ++d) {
        src_box.lo[d] = -uni(0, 3);
        src_box.hi[d] = shape.hi[d] + uni(0, 3);
      }
      c.sources.push_back(gpu_testing::make_buffer(src_box.volume() * es, 0));
      values.fill(dtype, false, c.sources.back().data(), src_box.volume());
      CopyOp r;
      r.kind = CopyOp::Kind::kReduce;
      r.dtype = dtype;
      r.op = op;
      r.desc = make_copy_desc(shape, src_box, shape);
      r.src = c.sources.back().data();
      r.dst = c.accs[static_cast<size_t>(a)].data();
      c.ops.push_back(r);
      c.sizes.push_back({src_box.volume() * es, n * as});
    }
  }
  for (int a = 0; a < accs; ++a) {
    if (!separate && !mean) continue;  // the accumulator is the destination
    CopyOp st;
    st.kind = CopyOp::Kind::kStore;
    st.dtype = dtype;
    st.count = n;
    st.divisor = mean ? summands : 1;
    st.src = c.accs[static_cast<size_t>(a)].data();
    st.dst = separate ? static_cast<void*>(c.dsts[static_cast<size_t>(a)].data())
                      : static_cast<void*>(c.accs[static_cast<size_t>(a)].data());
    c.ops.push_back(st);
    c.sizes.push_back({n * as, n * es});
  }
  if (later_read) {
    CopyOp cp = gpu_testing::dense_copy(DType::kU8, c.accs[0].data(), c.extra.data(), n * as);
    c.ops.push_back(cp);
    c.sizes.push_back({n * as, n * as});
  }
  return c;
}

// Invariant (fused reductions, copy_plan.cc fuse_reductions): the engine's
// reduction calls -- identity fills, every accumulator's summands from
// sources of different strides, stores in the dtype (means divided) -- give
// the destination bytes of applying the ops one by one on the host, for
// every dtype and reduce op and 1-19 summands; each accumulator's summands
// run as kReduceN Works (at most kMaxFusedSources each), the fill and the
// store folded in (a bf16 partial sum is one element launch: each summand
// read once, the destination written once); an accumulator read after its
// store is still written.
TEST(KernelEmulation, ReductionsFoldEverySummandInOnePass) {
  Values values(11);
  int fused_stores = 0;
  for (int c = 0; c < 180; ++c) {
    const DType dtype = kAllDTypes[c % 15];
    const ReduceOp op = kAllOps[(c / 15) % 3];
    const int summands = 1 + static_cast<int>((c * 7) % 19);
    const int accs = 1 + c % 3;
    const bool later_read = c % 5 == 4;
    const bool mean = dtype_is_float(dtype) && op == ReduceOp::kSum && c % 4 == 1;
    SCOPED_TRACE("case " + std::to_string(c) + " " + std::string(dtype_name(dtype)) + " " +
                 std::to_string(summands) + " summands");
    ReductionCall call = reduction_call(values, dtype, op, accs, summands, later_read, mean);
    // The reference: the ops one by one on copies of the buffers.
    ReductionCall ref = call;
    const auto remap = [&](const void* p) -> std::byte* {
      if (p == nullptr) return nullptr;
      for (size_t b = 0; b < call.sources.size(); ++b)
        if (p == call.sources[b].data()) return ref.sources[b].data();
      for (size_t b = 0; b < call.accs.size(); ++b) {
        if (p == call.accs[b].data()) return ref.accs[b].data();
        if (p == call.dsts[b].data()) return ref.dsts[b].data();
      }
      if (p == call.extra.data()) return ref.extra.data();
      return nullptr;
    };
    for (size_t i = 0; i < ref.ops.size(); ++i) {
      ref.ops[i].src = remap(call.ops[i].src);
      ref.ops[i].dst = remap(call.ops[i].dst);
      host_apply(ref.ops[i], call.sizes[i].first, call.sizes[i].second);
    }
    const std::vector<Launch> launches = plan_launches(call.ops);
    int multi = 0;
    int stores = 0;
    int max_sources = 0;
    for (const Launch& l : launches) {
      for (const Work& w : l.works) {
        if (static_cast<cuda_backend::WorkKind>(w.kind) != cuda_backend::WorkKind::kReduceN) {
          continue;
        }
        ++multi;
        stores += (w.flags & cuda_backend::kStoreOut) != 0;
        max_sources = std::max(max_sources, w.nsrc);
      }
    }
    emulate(launches, true);
    for (size_t b = 0; b < call.dsts.size(); ++b) {
      ASSERT_EQ(call.dsts[b].contents(), ref.dsts[b].contents()) << "destination " << b;
    }
    const bool separate = !acc_is_elem(dtype);
    for (size_t b = 0; b < call.accs.size(); ++b) {
      // A separate accumulator is dead after its store, unless read later.
      if (separate && !(later_read && b == 0)) continue;
      ASSERT_EQ(call.accs[b].contents(), ref.accs[b].contents()) << "accumulator " << b;
    }
    ASSERT_EQ(call.extra.contents(), ref.extra.contents());
    const int chunks =
        (summands + cuda_backend::kMaxFusedSources - 1) / cuda_backend::kMaxFusedSources;
    EXPECT_EQ(multi, accs * chunks);
    EXPECT_LE(max_sources, cuda_backend::kMaxFusedSources);
    if (separate) {
      EXPECT_EQ(stores, accs - (later_read ? 1 : 0));
      fused_stores += stores;
    }
    if (separate && !later_read && summands <= cuda_backend::kMaxFusedSources) {
      EXPECT_EQ(launches.size(), 1u) << "one element launch";
    }
  }
  EXPECT_GT(fused_stores, 50);
}

// Invariant (append_copy): narrow copies of one shape whose starts step by a
// constant -- column blocks packed into consecutive staging or unpacked
// from it, 1-64 bytes per run, every dtype size, misaligned buffers too --
// merge into one Work per launch and give the bytes of the ops one by one;
// a block of another shape or step starts a new Work.
TEST(KernelEmulation, NarrowCopiesSideBySideMergeIntoOneWork) {
  Values values(21);
  int swizzles = 0;
  std::mt19937_64& rng = values.rng();
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int c = 0; c < 120; ++c) {
    const DType dtype = kAllDTypes[c % 15];
    const int64_t es = dtype_size(dtype);
    const int64_t rows = uni(1, 300);
    const int64_t width = uni(1, std::max<int64_t>(1, 64 / es));
    const int64_t blocks = uni(2, 24);
    const bool odd_last = c % 3 == 2;  // the last block narrower: not merged
    const int64_t cols = width * blocks - (odd_last && width > 1 ? 1 : 0);
    const bool pack = c % 2 == 0;
    gpu_testing::Buffer matrix =
        gpu_testing::make_buffer(rows * cols * es, static_cast<int>(c % 4));
    gpu_testing::Buffer staging =
        gpu_testing::make_buffer(rows * cols * es, static_cast<int>(c % 3));
    values.fill(dtype, false, pack ? matrix.data() : staging.data(), rows * cols);
    const Box full = [&] {
      Box b;
      b.rank = 2;
      b.hi[0] = rows;
      b.hi[1] = cols;
      return b;
    }();
    std::vector<CopyOp> ops;
    std::byte* at = staging.data();
    for (int64_t c0 = 0; c0 < cols; c0 += width) {
      Box region = full;
      region.lo[1] = c0;
      region.hi[1] = std::min(cols, c0 + width);
      CopyOp op;
      op.kind = CopyOp::Kind::kCopy;
      op.dtype = dtype;
      op.desc = pack ? make_copy_desc(region, full, region) : make_copy_desc(region, region, full);
      op.src = pack ? static_cast<const void*>(matrix.data()) : at;
      op.dst = pack ? static_cast<void*>(at) : matrix.data();
      at += region.volume() * es;
      ops.push_back(op);
    }
    gpu_testing::Buffer want_m = matrix;
    gpu_testing::Buffer want_s = staging;
    for (const CopyOp& op : ops) {
      CopyOp o = op;
      const auto remap = [&](const void* p) -> std::byte* {
        const auto* b = static_cast<const std::byte*>(p);
        if (b >= matrix.data() && b < matrix.data() + matrix.bytes) {
          return want_m.data() + (b - matrix.data());
        }
        return want_s.data() + (b - staging.data());
      };
      o.src = remap(op.src);
      o.dst = remap(op.dst);
      // host_apply reads and writes whole buffers from its pointers: the
      // bytes from each pointer to its buffer's end.
      const auto left = [&](const void* p) -> int64_t {
        const auto* b = static_cast<const std::byte*>(p);
        if (b >= want_m.data() && b < want_m.data() + want_m.bytes) {
          return want_m.data() + want_m.bytes - b;
        }
        return want_s.data() + want_s.bytes - b;
      };
      host_apply(o, left(o.src), left(o.dst));
    }
    const std::vector<Launch> launches = plan_launches(ops);
    // Runs under a 32-byte sector merge only where they land side by side
    // (unpacking, or packing single rows), or from 8 bytes where they lie
    // side by side in the source (packing), then in swizzled warps wherever
    // a warp's rows exist, in a launch of their own (swizzled copies only).
    const int64_t run_bytes = width * es;
    const bool merges = run_bytes >= 32 || !pack || rows == 1 || run_bytes >= 8;
    const size_t expected_works = !merges ? ops.size() : odd_last && width > 1 ? 2 : 1;
    std::vector<Work> works;
    for (const Launch& l : launches) {
      for (const Work& w : l.works) {
        EXPECT_EQ(w.swizzle > 0, l.swizzled) << "case " << c;
        works.push_back(w);
      }
    }
    ASSERT_LE(launches.size(), 2u);
    EXPECT_EQ(works.size(), expected_works)
        << "case " << c << ": " << blocks << " blocks of " << width << " columns, " << rows
        << " rows, " << (pack ? "pack" : "unpack");
    // k: the largest power of two with k runs in a 128-byte line, at most 16.
    const int32_t k = run_bytes >= 32 || run_bytes < 8 ? 0
                      : run_bytes <= 8                 ? 16
                      : run_bytes <= 16                ? 8
                                                       : 4;
    const bool first_merged = merges && (!odd_last || width == 1 || blocks > 2);
    if (first_merged) {
      // One dimension of rows: the matrix's (rows > 1) when blocks are
      // narrower than its rows.
      const bool swizzled = k > 0 && rows >= 32 / k && cols > width;
      const auto merged =
          std::max_element(works.begin(), works.end(),
                           [](const Work& a, const Work& b) { return a.desc.rank < b.desc.rank; });
      EXPECT_EQ(merged->swizzle, swizzled ? k : 0) << "case " << c;
      swizzles += swizzled;
    }
    emulate(launches, true);
    ASSERT_EQ(matrix.contents(), want_m.contents()) << "case " << c;
    ASSERT_EQ(staging.contents(), want_s.contents()) << "case " << c;
  }
  EXPECT_GE(swizzles, 10);
}

}  // namespace
}  // namespace reshard
