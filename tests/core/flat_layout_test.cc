// Flat layouts (reshard/flat.h): the range decomposition, lowering checked
// against an independent reference of the FSDP1 / Megatron (concat) and
// ZeRO-3 (per_tensor) rules, execution with one flat buffer per rank as
// source and as destination (every element against the oracle, padding
// untouched), and every validation error.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/flat_cases.h"
#include "core/layout_helpers.h"
#include "core/oracle_describe.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/flat.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/spec.h"
#include "test_scale.h"

namespace reshard {
namespace {

using testing::FlatCase;
using testing::kPad;
using testing::numel;
using testing::random_case;
using testing::reference;
using testing::Slot;
using testing::whole_values;

// Global row-major index of a multi-index.
int64_t linear(const std::vector<int64_t>& shape, const std::vector<int64_t>& idx) {
  int64_t k = 0;
  for (size_t d = 0; d < shape.size(); ++d) k = k * shape[d] + idx[d];
  return k;
}

// Invariant: the boxes of [lo, hi) are at most 2R - 1 (1 for a scalar), in
// row-major order, each contiguous, together exactly the range.
TEST(FlatRangeBoxes, RandomRangesDecomposeIntoFewContiguousBoxes) {
  std::mt19937_64 rng(41);
  for (int c = 0; c < scaled_cases(3000); ++c) {
    const int rank = static_cast<int>(rng() % 5);
    std::vector<int64_t> shape;
    for (int d = 0; d < rank; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 5));
    const int64_t n = numel(shape);
    int64_t lo = static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
    int64_t hi = static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
    if (lo > hi) std::swap(lo, hi);
    const std::vector<Box> boxes = flat_range_boxes(shape, lo, hi);
    SCOPED_TRACE("case " + std::to_string(c) + " [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + ")");
    ASSERT_LE(static_cast<int64_t>(boxes.size()), rank == 0 ? 1 : 2 * rank - 1);
    int64_t next = lo;
    for (const Box& b : boxes) {
      ASSERT_EQ(b.rank, rank);
      ASSERT_FALSE(b.empty());
      // Walk the box in its own row-major order: global indices consecutive.
      std::vector<int64_t> idx(static_cast<size_t>(rank));
      for (int d = 0; d < rank; ++d) idx[static_cast<size_t>(d)] = b.lo[static_cast<size_t>(d)];
      for (int64_t k = 0; k < b.volume(); ++k) {
        ASSERT_EQ(linear(shape, idx), next);
        ++next;
        for (int d = rank; d-- > 0;) {
          const size_t u = static_cast<size_t>(d);
          if (++idx[u] < b.hi[u]) break;
          idx[u] = b.lo[u];
        }
      }
    }
    ASSERT_EQ(next, hi);
  }
}

using testing::describe;

// Invariant: the lowering holds exactly the reference's elements at the
// reference's offsets: flat buffers built from the reference rule, cut into
// views, hold for every entry the oracle's values of its box.
TEST(FlatLayout, LoweringMatchesTheFrameworkRules) {
  int64_t slot_entries = 0, per_tensor = 0, fused = 0, with_offsets = 0;
  for (int c = 0; c < scaled_cases(400); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    FlatCase fc = random_case(7000 + static_cast<uint64_t>(c), true);
    const auto ref = reference(fc.flat);
    ASSERT_EQ(static_cast<int64_t>(ref.size()), fc.lowered.world_size);
    const int64_t es = fc.lowered.element_size;
    std::vector<std::vector<std::byte>> bufs;
    for (const auto& r : ref) {
      ASSERT_EQ(static_cast<int64_t>(r.size()), fc.lowered.shard_elements);
      bufs.emplace_back(static_cast<size_t>(fc.lowered.shard_bytes), kPad);
    }
    for (size_t t = 0; t < fc.input.tensors.size(); ++t) {
      const std::vector<std::byte> v = whole_values(fc.input.tensors[t], static_cast<uint32_t>(t));
      for (size_t r = 0; r < ref.size(); ++r)
        for (size_t k = 0; k < ref[r].size(); ++k)
          if (ref[r][k].tensor == static_cast<int64_t>(t))
            std::memcpy(bufs[r].data() + static_cast<int64_t>(k) * es,
                        v.data() + ref[r][k].element * es, static_cast<size_t>(es));
    }
    std::vector<ConstBuffer> flat;
    for (const auto& b : bufs)
      flat.push_back(ConstBuffer{b.data(), static_cast<int64_t>(b.size())});
    int64_t covered = 0;
    for (size_t t = 0; t < fc.input.tensors.size(); ++t) {
      const std::vector<ConstBuffer> views = flat_views(fc.lowered, t, flat);
      for (size_t e = 0; e < views.size(); ++e) {
        std::vector<std::byte> want(static_cast<size_t>(views[e].bytes));
        if (want.empty()) continue;  // a fused member's empty box (memcmp takes no null)
        fill_source_shard(fc.input.tensors[t], static_cast<uint32_t>(t), e, want);
        ASSERT_EQ(0, std::memcmp(want.data(), views[e].data, want.size()))
            << "tensor " << t << " entry " << e;
        covered += views[e].bytes / es;
      }
      // Each device's entries of one tensor: at most 2R - 1.
      std::map<int64_t, int> per_device;
      const Layout& l = fc.lowered.layouts[t];
      for (size_t e = 0; e < l.num_entries(); ++e) {
        ++per_device[flat_physical_device(l.device(e))];
        slot_entries += flat_slot(l.device(e)) > 0;
      }
      for (const auto& [d, n] : per_device)
        EXPECT_LE(n, std::max<int>(1, 2 * static_cast<int>(fc.input.tensors[t].shape.size()) - 1));
    }
    // Every element once; a fused member's replicas once per rank holding one.
    int64_t total = 0;
    for (const TensorSpec& t : fc.input.tensors) {
      if (fc.flat.partition != FlatPartition::kFused) {
        total += numel(t.shape);
        continue;
      }
      for (size_t e = 0; e < t.src.num_entries(); ++e) total += t.src.box(e).volume();
    }
    EXPECT_EQ(covered, total);
    per_tensor += fc.flat.partition == FlatPartition::kPerTensor;
    fused += fc.flat.partition == FlatPartition::kFused;
    with_offsets += !fc.flat.offsets.empty();
  }
  // The cases reach devices holding several boxes of one tensor, every
  // partition and explicit offsets.
  EXPECT_GT(slot_entries, least_covered(200));
  EXPECT_GT(per_tensor, least_covered(100));
  EXPECT_GT(fused, least_covered(100));
  EXPECT_GT(with_offsets, least_covered(30));
}

// Invariant: with the flat layout as source, one flat buffer per rank (built
// by the reference rule) moved to random named layouts gives every
// destination element its oracle value.
TEST(FlatLayout, FlatSourceExecutesOnHostElementByElement) {
  int64_t elements = 0;
  for (int c = 0; c < scaled_cases(300); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    FlatCase fc = random_case(9000 + static_cast<uint64_t>(c), true);
    const Plan plan = make_plan(fc.input);
    const auto ref = reference(fc.flat);
    const int64_t es = fc.lowered.element_size;
    std::vector<std::vector<std::byte>> bufs(
        ref.size(), std::vector<std::byte>(static_cast<size_t>(fc.lowered.shard_bytes), kPad));
    for (size_t t = 0; t < plan.tensors().size(); ++t) {
      const std::vector<std::byte> v = whole_values(plan.tensors()[t], static_cast<uint32_t>(t));
      for (size_t r = 0; r < ref.size(); ++r)
        for (size_t k = 0; k < ref[r].size(); ++k)
          if (ref[r][k].tensor == static_cast<int64_t>(t))
            std::memcpy(bufs[r].data() + static_cast<int64_t>(k) * es,
                        v.data() + ref[r][k].element * es, static_cast<size_t>(es));
    }
    std::vector<ConstBuffer> flat;
    for (const auto& b : bufs)
      flat.push_back(ConstBuffer{b.data(), static_cast<int64_t>(b.size())});
    std::vector<TensorBuffers> tb(plan.tensors().size());
    std::vector<std::vector<std::vector<std::byte>>> dst(plan.tensors().size());
    for (size_t t = 0; t < plan.tensors().size(); ++t) {
      const TensorSpec& ts = plan.tensors()[t];
      tb[t].src = flat_views(fc.lowered, t, flat);
      for (size_t e = 0; e < ts.dst.num_entries(); ++e) {
        dst[t].emplace_back(static_cast<size_t>(ts.dst.box(e).volume() * es));
        poison_destination_shard(ts, static_cast<uint32_t>(t), e, dst[t].back());
      }
      for (auto& d : dst[t])
        tb[t].dst.push_back(MutableBuffer{d.data(), static_cast<int64_t>(d.size())});
    }
    execute_host(plan, tb, {static_cast<int32_t>(1 + c % 3)});
    OracleReport report;
    for (size_t t = 0; t < plan.tensors().size(); ++t)
      for (size_t e = 0; e < dst[t].size(); ++e)
        check_destination_shard(plan.tensors()[t], static_cast<uint32_t>(t), e, dst[t][e], report);
    ASSERT_TRUE(report.ok()) << describe(report);
    elements += report.elements;
  }
  EXPECT_GT(elements, 1000);
}

// Invariant: with the flat layout as destination, every element of every
// rank's flat buffer holds the reference's element and padding is never
// written.
TEST(FlatLayout, FlatDestinationExecutesOnHostElementByElement) {
  int64_t elements = 0;
  for (int c = 0; c < scaled_cases(300); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    FlatCase fc = random_case(11000 + static_cast<uint64_t>(c), false);
    const Plan plan = make_plan(fc.input);
    const auto ref = reference(fc.flat);
    const int64_t es = fc.lowered.element_size;
    std::vector<std::vector<std::byte>> bufs(
        ref.size(), std::vector<std::byte>(static_cast<size_t>(fc.lowered.shard_bytes), kPad));
    std::vector<MutableBuffer> flat;
    for (auto& b : bufs) flat.push_back(MutableBuffer{b.data(), static_cast<int64_t>(b.size())});
    std::vector<TensorBuffers> tb(plan.tensors().size());
    std::vector<std::vector<std::vector<std::byte>>> src(plan.tensors().size());
    for (size_t t = 0; t < plan.tensors().size(); ++t) {
      const TensorSpec& ts = plan.tensors()[t];
      for (size_t e = 0; e < ts.src.num_entries(); ++e) {
        src[t].emplace_back(static_cast<size_t>(ts.src.box(e).volume() * es));
        fill_source_shard(ts, static_cast<uint32_t>(t), e, src[t].back());
      }
      for (auto& s : src[t])
        tb[t].src.push_back(ConstBuffer{s.data(), static_cast<int64_t>(s.size())});
      tb[t].dst = flat_views(fc.lowered, t, flat);
    }
    execute_host(plan, tb, {static_cast<int32_t>(1 + c % 3)});
    std::vector<std::vector<std::byte>> values;
    for (size_t t = 0; t < plan.tensors().size(); ++t)
      values.push_back(whole_values(plan.tensors()[t], static_cast<uint32_t>(t)));
    for (size_t r = 0; r < ref.size(); ++r)
      for (size_t k = 0; k < ref[r].size(); ++k) {
        const std::byte* got = bufs[r].data() + static_cast<int64_t>(k) * es;
        const Slot& s = ref[r][k];
        if (s.tensor < 0) {
          for (int64_t b = 0; b < es; ++b)
            ASSERT_EQ(got[b], kPad) << "padding written, rank " << r << " at " << k;
        } else {
          ASSERT_EQ(0,
                    std::memcmp(got, values[static_cast<size_t>(s.tensor)].data() + s.element * es,
                                static_cast<size_t>(es)))
              << "rank " << r << " position " << k << " tensor " << s.tensor << " element "
              << s.element;
          ++elements;
        }
      }
  }
  EXPECT_GT(elements, 1000);
}

// Invariant: flat to flat (an FSDP1 or Megatron buffer to a ZeRO-3 one, or
// any pair): every position of every destination rank's buffer holds the
// element its rule puts there, read from source buffers built by the
// source's rule, and padding is never written. The two layouts share
// devices, so a device's slot may send to the same device's slot.
TEST(FlatLayout, FlatToFlatExecutesOnHostElementByElement) {
  int64_t elements = 0;
  for (int c = 0; c < scaled_cases(200); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    FlatCase src = random_case(13000 + static_cast<uint64_t>(c), true);
    FlatCase dst = random_case(17000 + static_cast<uint64_t>(c), false);
    dst.flat.tensors = src.flat.tensors;  // the source's tensors, another rule
    dst.flat.offsets.clear();
    dst.flat.total_elements = -1;
    if (dst.flat.partition == FlatPartition::kFused)
      dst.flat.members = testing::random_members(dst.flat, 19000 + static_cast<uint64_t>(c));
    dst.lowered = lower_flat(dst.flat, "dst");
    PlanInput in = src.input;
    add_flat_slots(in.topology, dst.lowered, "dst");
    for (size_t t = 0; t < in.tensors.size(); ++t) in.tensors[t].dst = dst.lowered.layouts[t];
    const Plan plan = make_plan(in);
    std::vector<std::vector<std::byte>> sbufs, dbufs;
    std::vector<ConstBuffer> sflat;
    std::vector<MutableBuffer> dflat;
    for (size_t r = 0; r < static_cast<size_t>(src.lowered.world_size); ++r)
      sbufs.push_back(testing::reference_buffer(src, plan.tensors(), r));
    for (size_t r = 0; r < static_cast<size_t>(dst.lowered.world_size); ++r)
      dbufs.emplace_back(static_cast<size_t>(dst.lowered.shard_bytes), kPad);
    for (auto& b : sbufs) sflat.push_back(ConstBuffer{b.data(), static_cast<int64_t>(b.size())});
    for (auto& b : dbufs) dflat.push_back(MutableBuffer{b.data(), static_cast<int64_t>(b.size())});
    std::vector<TensorBuffers> tb(plan.tensors().size());
    for (size_t t = 0; t < tb.size(); ++t) {
      tb[t].src = flat_views(src.lowered, t, sflat);
      tb[t].dst = flat_views(dst.lowered, t, dflat);
    }
    execute_host(plan, tb, {static_cast<int32_t>(1 + c % 3)});
    for (size_t r = 0; r < dbufs.size(); ++r) {
      ASSERT_EQ(dbufs[r], testing::reference_buffer(dst, plan.tensors(), r)) << "rank " << r;
      elements += dst.lowered.shard_elements;
    }
  }
  EXPECT_GT(elements, 1000);
}

// ------------------------------------------------------------ errors

FlatLayout valid() {
  FlatLayout f;
  f.devices = {0, 1, 2, 3};
  f.tensors = {FlatTensor{{5, 3}, DType::kBF16}, FlatTensor{{7}, DType::kBF16}};
  return f;
}

void expect_error(const FlatLayout& f, ErrorCode code, const std::string& field,
                  const std::string& words) {
  try {
    lower_flat(f, "flat");
    ADD_FAILURE() << "no error for " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(FlatLayout, BadInputsNameTheirField) {
  {
    FlatLayout f = valid();
    f.devices.clear();
    expect_error(f, ErrorCode::kInvalidArgument, "flat.devices", "no devices");
  }
  {
    FlatLayout f = valid();
    f.devices = {0, 1, 0};
    expect_error(f, ErrorCode::kInvalidArgument, "flat.devices[2]", "appears twice");
  }
  {
    FlatLayout f = valid();
    f.devices = {0, -1};
    expect_error(f, ErrorCode::kInvalidArgument, "flat.devices[1]", "negative");
  }
  {
    FlatLayout f = valid();
    f.devices = {0, kFlatSlotStride};
    expect_error(f, ErrorCode::kOutOfRange, "flat.devices[1]", "2^40");
  }
  {
    FlatLayout f = valid();
    f.align_elements = 0;
    expect_error(f, ErrorCode::kInvalidArgument, "flat.align_elements", "at least 1");
  }
  {
    FlatLayout f = valid();
    f.pad_multiple = -3;
    expect_error(f, ErrorCode::kInvalidArgument, "flat.pad_multiple", "at least 1");
  }
  {
    FlatLayout f = valid();
    f.partition = static_cast<FlatPartition>(9);
    expect_error(f, ErrorCode::kInvalidArgument, "flat.partition", "invalid partition");
  }
  {
    FlatLayout f = valid();
    f.tensors.clear();
    expect_error(f, ErrorCode::kInvalidArgument, "flat.tensors", "no tensors");
  }
  {
    FlatLayout f = valid();
    f.tensors[1].dtype = DType::kF32;
    expect_error(f, ErrorCode::kInvalidArgument, "flat.tensors[1].dtype", "one dtype");
  }
  {
    FlatLayout f = valid();
    f.tensors[0].shape = {4, -1};
    expect_error(f, ErrorCode::kInvalidArgument, "flat.tensors[0].shape[1]", "negative");
  }
  {  // overlapping tensors
    FlatLayout f = valid();
    f.offsets = {0, 14};
    expect_error(f, ErrorCode::kInvalidArgument, "flat.offsets[1]", "overlaps tensor 0");
  }
  {  // misaligned
    FlatLayout f = valid();
    f.align_elements = 8;
    f.offsets = {0, 20};
    expect_error(f, ErrorCode::kInvalidArgument, "flat.offsets[1]", "not a multiple of align");
  }
  {
    FlatLayout f = valid();
    f.offsets = {-2, 20};
    expect_error(f, ErrorCode::kOutOfRange, "flat.offsets[0]", "negative");
  }
  {
    FlatLayout f = valid();
    f.offsets = {0};
    expect_error(f, ErrorCode::kInvalidArgument, "flat.offsets", "1 offsets for 2 tensors");
  }
  {
    FlatLayout f = valid();
    f.partition = FlatPartition::kPerTensor;
    f.offsets = {0, 16};
    expect_error(f, ErrorCode::kInvalidArgument, "flat.offsets",
                 "concat and fused partitions only");
  }
  {  // out of range: the total ends before the last tensor
    FlatLayout f = valid();
    f.total_elements = 20;
    expect_error(f, ErrorCode::kOutOfRange, "flat.total_elements", "below the end");
  }
  {
    FlatLayout f = valid();
    f.total_elements = 26;
    expect_error(f, ErrorCode::kInvalidArgument, "flat.total_elements", "world size 4");
  }
  {
    FlatLayout f = valid();
    f.pad_multiple = 3;
    f.total_elements = 28;
    expect_error(f, ErrorCode::kInvalidArgument, "flat.total_elements", "pad_multiple");
  }
  {
    FlatLayout f = valid();
    f.tensors = {FlatTensor{{int64_t{1} << 62}, DType::kU8},
                 FlatTensor{{int64_t{1} << 62}, DType::kU8}};
    expect_error(f, ErrorCode::kOverflow, "flat.tensors", "overflows");
  }
}

// A named sharding of `shape` over a 1-axis mesh "tp" of `devices`, `dims`
// giving, per dim, whether tp splits it.
Layout tp_layout(const std::vector<int64_t>& devices, const std::vector<int64_t>& shape,
                 const std::vector<bool>& split) {
  auto mesh = std::make_shared<Mesh>();
  mesh->axis_names = {"tp"};
  mesh->shape = {static_cast<int64_t>(devices.size())};
  mesh->devices = devices;
  NamedSharding s;
  s.mesh = mesh;
  s.dims.resize(shape.size());
  for (size_t d = 0; d < split.size(); ++d)
    if (split[d]) s.dims[d] = {"tp"};
  return Layout::from_named(s, shape, "member");
}

// vLLM's QKVParallelLinear (GQA) on tp = 2: q [8, 4], k and v [2, 4] in
// bf16, rows over tp; rank r's buffer is [q_r; k_r; v_r]: 16 + 4 + 4
// elements.
FlatLayout qkv() {
  FlatLayout f;
  f.devices = {4, 5};
  f.partition = FlatPartition::kFused;
  f.tensors = {FlatTensor{{8, 4}, DType::kBF16}, FlatTensor{{2, 4}, DType::kBF16},
               FlatTensor{{2, 4}, DType::kBF16}};
  for (const FlatTensor& t : f.tensors) f.members.push_back(tp_layout(f.devices, t.shape, {true}));
  return f;
}

TEST(FlatLayout, VllmQkvExampleByHand) {
  const FlatLowered l = lower_flat(qkv(), "qkv");
  EXPECT_EQ(l.shard_elements, 24);
  EXPECT_EQ(l.shard_bytes, 48);
  EXPECT_EQ(l.tensor_offsets, (std::vector<int64_t>{0, 16, 20}));
  ASSERT_EQ(l.layouts[1].num_entries(), 2u);
  EXPECT_EQ(l.layouts[1].device(1), 5);
  EXPECT_EQ(to_string(l.layouts[1].box(1)), "[1:2, 0:4]");
  EXPECT_EQ(l.entry_ranks[1], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(l.entry_offsets[2], (std::vector<int64_t>{40, 40}));
  // Aligned to 8 elements and padded to 16: q at 0, k at 16, v at 24, 32.
  FlatLayout a = qkv();
  a.align_elements = 8;
  a.pad_multiple = 16;
  const FlatLowered la = lower_flat(a, "qkv");
  EXPECT_EQ(la.tensor_offsets, (std::vector<int64_t>{0, 16, 24}));
  EXPECT_EQ(la.shard_elements, 32);
}

// vLLM's VocabParallelEmbedding: 50 rows padded to 64 over tp = 2, 32 rows
// per rank (rank 1 holds rows 32-49 and 14 rows of padding): explicit
// boxes, as vLLM's split is not a named sharding's ceil(50 / 2) = 25.
TEST(FlatLayout, VllmPaddedVocabularyByHand) {
  FlatLayout f;
  f.devices = {4, 5};
  f.partition = FlatPartition::kFused;
  f.tensors = {FlatTensor{{50, 3}, DType::kF32}};
  Box b0, b1;
  b0.rank = b1.rank = 2;
  b0.hi[0] = 32;
  b1.lo[0] = 32;
  b1.hi[0] = 50;
  b0.hi[1] = b1.hi[1] = 3;
  f.members.push_back(
      Layout::from_boxes(f.tensors[0].shape, {{4, 0, b0}, {5, 0, b1}}, 1, ReduceOp::kSum, "vocab"));
  const FlatLowered l = lower_flat(f, "vocab");
  EXPECT_EQ(l.shard_elements, 96);  // 32 rows of 3 on every rank
  EXPECT_EQ(l.entry_offsets[0], (std::vector<int64_t>{0, 0}));
  const auto ref = reference(f);
  EXPECT_EQ(ref[1][53].element, 149);  // rank 1's last row, last column
  EXPECT_EQ(ref[1][54].tensor, -1);    // padding
}

TEST(FlatLayout, FusedBadInputsNameTheirField) {
  {
    FlatLayout f = qkv();
    f.members.pop_back();
    expect_error(f, ErrorCode::kInvalidArgument, "flat.members", "2 member layouts for 3");
  }
  {
    FlatLayout f = valid();
    f.members = qkv().members;
    expect_error(f, ErrorCode::kInvalidArgument, "flat.members", "fused partition only");
  }
  {
    FlatLayout f = qkv();
    f.members[1] = tp_layout(f.devices, {2, 5}, {true});
    expect_error(f, ErrorCode::kInvalidArgument, "flat.members[1]",
                 "shape [2, 5] is not the tensor's [2, 4]");
  }
  {  // a member on a device that is not a rank
    FlatLayout f = qkv();
    f.members[2] = tp_layout({4, 9}, {2, 4}, {true});
    expect_error(f, ErrorCode::kInvalidArgument, "flat.members[2]", "device 9 is not one of flat");
  }
  {  // partial sums
    FlatLayout f = qkv();
    Box b;
    b.rank = 2;
    b.hi[0] = 2;
    b.hi[1] = 4;
    f.members[1] = Layout::from_boxes(std::vector<int64_t>{2, 4}, {{4, 0, b}, {5, 1, b}}, 2,
                                      ReduceOp::kSum, "m");
    expect_error(f, ErrorCode::kInvalidArgument, "flat.members[1]", "partial sums");
  }
  {  // overlapping: k's slot (4 elements) ends at 20
    FlatLayout f = qkv();
    f.offsets = {0, 16, 18};
    expect_error(f, ErrorCode::kInvalidArgument, "flat.offsets[2]",
                 "overlaps tensor 1, whose largest box ends at 20");
  }
  {
    FlatLayout f = qkv();
    f.align_elements = 8;
    f.offsets = {0, 16, 20};
    expect_error(f, ErrorCode::kInvalidArgument, "flat.offsets[2]", "not a multiple of align");
  }
  {
    FlatLayout f = qkv();
    f.total_elements = 48;
    expect_error(f, ErrorCode::kInvalidArgument, "flat.total_elements", "concat partition only");
  }
  {
    FlatLayout f = qkv();
    f.tensors[2].dtype = DType::kF32;
    expect_error(f, ErrorCode::kInvalidArgument, "flat.tensors[2].dtype", "one dtype");
  }
}

// Invariant: a flat layout whose layouts would hold more than
// kMaxFlatEntries entries is refused before they are built (a few lines of
// spec: a large mesh, many tensors).
TEST(FlatLayout, TooManyEntriesAreRefusedUpFront) {
  FlatLayout f;
  f.partition = FlatPartition::kPerTensor;
  for (int64_t d = 0; d < (int64_t{1} << 20) - 1; ++d) f.devices.push_back(d);
  for (int i = 0; i < 17; ++i) f.tensors.push_back(FlatTensor{{int64_t{1} << 20}, DType::kU8});
  expect_error(f, ErrorCode::kResourceExhausted, "flat.tensors", "split the flat layout");
}

TEST(FlatLayout, ViewsCheckTheFlatBuffers) {
  const FlatLowered l = lower_flat(valid(), "flat");
  EXPECT_EQ(l.shard_elements, 6);  // 22 elements padded to 24, over 4 ranks
  std::vector<std::byte> mem(static_cast<size_t>(l.shard_bytes * 4));
  std::vector<ConstBuffer> flat;
  for (int r = 0; r < 4; ++r)
    flat.push_back(ConstBuffer{mem.data() + r * l.shard_bytes, l.shard_bytes});
  EXPECT_EQ(flat_views(l, 0, flat).size(), l.layouts[0].num_entries());
  auto expect = [&](std::vector<ConstBuffer> bufs, const std::string& field, const char* words) {
    try {
      flat_views(l, 0, bufs, "flat");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect({flat.begin(), flat.begin() + 3}, "flat", "3 flat buffers for a world size of 4");
  auto small = flat;
  small[2].bytes -= 1;
  expect(small, "flat[2]", "below the shard's 12");
  auto null = flat;
  null[1].data = nullptr;
  expect(null, "flat[1]", "null data");
  // {null, 0}: a rank held by another process; its entries get empty views.
  auto remote = flat;
  remote[1] = {};
  const std::vector<ConstBuffer> v = flat_views(l, 0, remote);
  for (size_t e = 0; e < v.size(); ++e)
    EXPECT_EQ(v[e].data == nullptr, l.entry_ranks[0][e] == 1) << "entry " << e;
}

// An FSDP1 FlatParameter by hand: 2 ranks, tensors w [3, 4] and b [5] in
// f32 with use_orig_params alignment (16 bytes: 4 elements): offsets 0 and
// 12, total 17 padded to 18, 9 per rank. Rank 0 holds flat [0, 9): w's rows
// 0-1 and w[2, 0]; rank 1 holds w[2, 1:4] and b.
TEST(FlatLayout, Fsdp1ExampleByHand) {
  FlatLayout f;
  f.devices = {10, 11};
  f.align_elements = 4;
  f.tensors = {FlatTensor{{3, 4}, DType::kF32}, FlatTensor{{5}, DType::kF32}};
  const FlatLowered l = lower_flat(f, "fsdp");
  EXPECT_EQ(l.tensor_offsets, (std::vector<int64_t>{0, 12}));
  EXPECT_EQ(l.shard_elements, 9);
  const Layout& w = l.layouts[0];
  ASSERT_EQ(w.num_entries(), 3u);
  // Sorted by (slot) device: rank 0's rows 0-1, rank 1's [2, 1:4], then
  // rank 0's slot 1: w[2, 0:1].
  EXPECT_EQ(w.device(0), 10);
  EXPECT_EQ(to_string(w.box(0)), "[0:2, 0:4]");
  EXPECT_EQ(l.entry_offsets[0][0], 0);
  EXPECT_EQ(w.device(1), 11);
  EXPECT_EQ(to_string(w.box(1)), "[2:3, 1:4]");
  EXPECT_EQ(l.entry_offsets[0][1], 0);
  EXPECT_EQ(w.device(2), 10 + kFlatSlotStride);
  EXPECT_EQ(to_string(w.box(2)), "[2:3, 0:1]");
  EXPECT_EQ(l.entry_offsets[0][2], 8 * 4);
  const Layout& b = l.layouts[1];
  ASSERT_EQ(b.num_entries(), 1u);
  EXPECT_EQ(b.device(0), 11);
  EXPECT_EQ(to_string(b.box(0)), "[0:5]");
  EXPECT_EQ(l.entry_offsets[1][0], 3 * 4);
}

// ZeRO-3: each tensor split on its own; 3 ranks, tensors of 7 and 2
// elements: parts of 3 and 1, rank 2 holds w[6] and padding, and nothing of
// b (its part is all padding).
TEST(FlatLayout, Zero3ExampleByHand) {
  FlatLayout f;
  f.devices = {0, 1, 2};
  f.partition = FlatPartition::kPerTensor;
  f.tensors = {FlatTensor{{7}, DType::kBF16}, FlatTensor{{2}, DType::kBF16}};
  const FlatLowered l = lower_flat(f, "zero3");
  EXPECT_EQ(l.shard_elements, 4);
  EXPECT_EQ(l.tensor_offsets, (std::vector<int64_t>{0, 3}));
  ASSERT_EQ(l.layouts[1].num_entries(), 2u);
  EXPECT_EQ(to_string(l.layouts[1].box(1)), "[1:2]");
  EXPECT_EQ(l.entry_offsets[1][1], 3 * 2);
  EXPECT_EQ(to_string(l.layouts[0].box(2)), "[6:7]");
}

}  // namespace
}  // namespace reshard
