// What a round cut adds to a part (PlanEstimate::process_*, plan/estimate.cc
// cut_growth) and the encoder's size bound (wire/encode_bound.h): the
// figures the up-front refusals of `reshard plan --process P --out` and
// encode_plan compare with the 2 GiB a plan buffer holds.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <span>
#include <string>

#include "fsdp_to_tp8.h"
#include "reshard/layout.h"
#include "reshard/plan.h"
#include "reshard/wire.h"
#include "wire/encode_bound.h"

namespace reshard {
namespace {

// `copies` f32 tensors of `shape` on devices 0..n-1 (one process each),
// sharded `src_shards` ways along dimension 0 -> `dst_shards` ways along
// the last dimension.
PlanInput tensors_of_rank(std::vector<int64_t> shape, int64_t src_shards, int64_t dst_shards,
                          int copies) {
  PlanInput in;
  const int64_t n = std::max(src_shards, dst_shards);
  auto m = std::make_shared<Mesh>();
  m->axis_names = {"x"};
  m->shape = {n};
  m->devices.resize(static_cast<size_t>(n));
  std::iota(m->devices.begin(), m->devices.end(), 0);
  for (int64_t d = 0; d < n; ++d)
    in.topology.add(DeviceInfo{d, static_cast<int32_t>(d), static_cast<int32_t>(d), 0});
  for (int c = 0; c < copies; ++c) {
    TensorSpec t;
    t.name = "w" + std::to_string(c);
    t.shape = shape;
    t.dtype = DType::kF32;
    NamedSharding s;
    s.mesh = m;
    s.dims.assign(shape.size(), {});
    if (src_shards > 1) s.dims.front() = {"x"};
    t.src = Layout::from_named(s, t.shape, "t");
    s.dims.assign(shape.size(), {});
    if (dst_shards > 1) s.dims.back() = {"x"};
    t.dst = Layout::from_named(s, t.shape, "t");
    in.tensors.push_back(t);
  }
  return in;
}

// CutGrowthByHand's input: one rank-3 tensor, 16 x 4 x 256 f32, whole on
// device 0 (process 0) and whole on device 1 (process 1), under a 10,641-byte
// staging budget.
PlanInput one_cut_tensor() {
  PlanInput in;
  for (int64_t d : {0, 1}) in.topology.add(DeviceInfo{d, static_cast<int32_t>(d), 0, 0});
  TensorSpec t;
  t.name = "w";
  t.shape = {16, 4, 256};
  t.dtype = DType::kF32;
  for (int64_t d : {0, 1}) {
    auto m = std::make_shared<Mesh>();
    m->axis_names = {"x"};
    m->shape = {1};
    m->devices = {d};
    NamedSharding s;
    s.mesh = m;
    s.dims.assign(3, {});
    (d == 0 ? t.src : t.dst) = Layout::from_named(s, t.shape, "t");
  }
  in.tensors.push_back(t);
  in.options.staging_budget_bytes = 10641;
  return in;
}

// Hand-computed: a 16 x 4 x 256 f32 tensor (64 KiB; planes of 4 KiB, rows
// of 1 KiB) from device 0 to device 1, one stream of B = 65,536 bytes.
// Budget 10,641: W = floor((10,641 - 16 * 1 peer) * 16 / 17) = 10,000,
// chunk c = W * B / max(T, B) + 8 = 10,008 (T = B: the stream is the
// device's traffic), R = ceil(65,536 / 10,008) = 7 rounds, 6 cuts, window
// 625 bytes (narrower than a row, so cuts fall mid-row). Process 0's part:
// 1 piece uncut, without a region of its own (the whole tensor is the
// overlap); a cut adds at most 2r - 1 = 5 pieces and 2r = 6 regions at
// rank 3: 1 + 5 * 6 = 31 pieces, 0 + 6 * 6 = 36 regions, 7 messages. The
// part's real figures are at most those.
TEST(PartBytes, CutGrowthByHand) {
  PlanInput in = one_cut_tensor();
  PlanRequest one{PlanScope::kProcess, 0, true};
  one.max_plan_bytes = kUnlimitedPlanBytes;
  const PlanEstimate e = estimate_plan(in, one);
  EXPECT_EQ(e.process_messages, 7);
  EXPECT_EQ(e.process_pieces, 31);
  EXPECT_EQ(e.process_regions, 36);
  const Plan plan = make_plan(in, one);
  const ProcessPart& p = plan.parts().at(0);
  EXPECT_EQ(p.sends.size(), 7u);
  EXPECT_LE(static_cast<int64_t>(p.send_pieces.size()), e.process_pieces);
  EXPECT_LE(static_cast<int64_t>(p.regions.size()), e.process_regions);
  EXPECT_GT(p.send_pieces.size(), 7u);  // some cut mid-row: more than a piece a round
}

// Invariant, where a cut makes the most boxes: rank-4 tensors whose rows
// (256 B) are wider than the cut window and whose planes are narrower than
// a round, so a round's fragment is a partial row, rows, planes, ...: the
// estimate of each part still brackets its plan bytes (3 pieces and 3
// regions a cut, enough at rank 2, put it below).
TEST(PartBytes, EstimateBracketsPartsOfManyBoxesPerCut) {
  for (int64_t budget : {6000, 9000, 20000}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    PlanInput in = tensors_of_rank({8, 3, 4, 256}, 4, 4, 5);
    in.options.staging_budget_bytes = budget;
    in.options.split_min_bytes = 64;
    for (int32_t proc = 0; proc < 4; ++proc) {
      PlanRequest one{PlanScope::kProcess, proc, true};
      one.max_plan_bytes = kUnlimitedPlanBytes;
      const PlanEstimate e = estimate_plan(in, one);
      const Plan part = make_plan(in, one);
      const ProcessPart& pp = part.parts().at(proc);
      EncodeOptions eo;
      eo.all_parts = false;
      eo.process = proc;
      const int64_t bytes = static_cast<int64_t>(encode_plan(part, eo).size());
      EXPECT_LE(e.process_least_encoded_bytes, bytes);
      EXPECT_GE(e.process_encoded_bytes, bytes) << "process " << proc;
      EXPECT_GE(e.process_regions, static_cast<int64_t>(pp.regions.size()));
      EXPECT_GE(e.process_pieces, static_cast<int64_t>(pp.local.size() + pp.send_pieces.size() +
                                                       pp.recv_pieces.size()));
    }
  }
}

// encode_plan's bound counts a tiling's entries once however many tensors
// share it: 300 tensors over one 1,024-device tiling each way; a bound per
// layout added 300 x 2 x 1,024 entries of 44 bytes (27 MB) that the bytes
// do not hold. The bound stays above the bytes, within 2x and 4 MiB.
TEST(PartBytes, EncodeBoundCountsATilingOnce) {
  PlanInput one = fsdp_to_tp8(1024);
  PlanInput in = one;
  in.tensors.clear();
  for (int c = 0; c < 300; ++c) {
    TensorSpec t = one.tensors[0];
    t.name = "w" + std::to_string(c);
    in.tensors.push_back(t);
  }
  in.options.staging_budget_bytes = 0;
  const Plan plan = make_plan(in, PlanRequest{PlanScope::kProcess, 3, true});
  EncodeOptions eo;
  eo.all_parts = false;
  eo.process = 3;
  const uint64_t bytes = encode_plan(plan, eo).size();
  const uint64_t bound = encode_size_bound(plan, eo);
  EXPECT_GE(bound, bytes);
  EXPECT_LE(bound, 2 * bytes);
  EXPECT_LT(bound, bytes + (uint64_t{4} << 20)) << bytes;
}

// The encoder's path where the builder outgrows its first buffer (the size
// bound errs high, so encode_plan never takes it): from first buffers of 1
// byte up to the bound, the bytes are encode_plan's, and they decode.
TEST(PartBytes, EncoderThatOutgrowsItsFirstBufferWritesTheSameBytes) {
  PlanInput in = tensors_of_rank({8, 3, 4, 256}, 4, 4, 3);
  in.options.staging_budget_bytes = 9000;
  const Plan plan = make_plan(in);
  for (bool all : {true, false}) {
    EncodeOptions eo;
    eo.all_parts = all;
    eo.process = 2;
    const std::vector<uint8_t> bytes = encode_plan(plan, eo);
    const uint64_t bound = encode_size_bound(plan, eo);
    ASSERT_GT(bound, bytes.size());
    for (size_t first :
         {size_t{1}, size_t{64}, bytes.size() / 3, bytes.size() - 1, static_cast<size_t>(bound)}) {
      SCOPED_TRACE("all parts " + std::to_string(all) + ", first buffer " + std::to_string(first));
      EXPECT_EQ(encode_plan_unsigned(plan, eo, first), bytes);
    }
    const Plan back = decode_plan(bytes);
    EXPECT_EQ(back.parts().size(), all ? plan.parts().size() : 1u);
  }
}

// encode_plan_to (what `reshard plan --out` writes with) hands over
// encode_plan's bytes, once, for every part or one, signed or not; its
// builder memory is never zeroed, so every byte it hands over was written.
TEST(PartBytes, EncodePlanToHandsOverEncodePlansBytes) {
  PlanInput in = tensors_of_rank({8, 3, 4, 256}, 4, 4, 3);
  in.options.staging_budget_bytes = 9000;
  const Plan plan = make_plan(in);
  for (bool all : {true, false}) {
    for (bool sign : {false, true}) {
      SCOPED_TRACE("all parts " + std::to_string(all) + ", signed " + std::to_string(sign));
      EncodeOptions eo;
      eo.all_parts = all;
      eo.process = 1;
      if (sign) eo.mac_key = std::vector<uint8_t>(32, 7);
      std::vector<std::vector<uint8_t>> handed;
      encode_plan_to(plan, eo,
                     [&](std::span<const uint8_t> b) { handed.emplace_back(b.begin(), b.end()); });
      ASSERT_EQ(handed.size(), 1u);
      EXPECT_EQ(handed[0], encode_plan(plan, eo));
    }
  }
}

// On one thread, split_rounds reserves the part's regions for the most its
// cuts can add (2r boxes a cut at the highest rank r) before appending the
// fragments, so the list never grows (a growth copied the regions and
// touched their pages twice). CutGrowthByHand's part:
// no region before cutting, 6 cuts at rank 3: a capacity of 36, 24 used.
TEST(PartBytes, OneThreadReservesTheMostTheCutsAdd) {
  PlanRequest one{PlanScope::kProcess, 0, true};
  one.max_plan_bytes = kUnlimitedPlanBytes;
  const Plan plan = make_plan(one_cut_tensor(), one);
  const ProcessPart& p = plan.parts().at(0);
  EXPECT_EQ(p.sends.size(), 7u);
  EXPECT_EQ(p.regions.size(), 24u);
  EXPECT_EQ(p.regions.capacity(), 36u);
  EXPECT_EQ(p.regions.stride(), 3);
  EXPECT_EQ(p.regions.bytes(), 24u * (1 + 16 * 3));
}

Box box_of(std::vector<int64_t> lo, std::vector<int64_t> hi) {
  Box b;
  b.rank = static_cast<int32_t>(lo.size());
  for (size_t d = 0; d < lo.size(); ++d) {
    b.lo[d] = lo[d];
    b.hi[d] = hi[d];
  }
  return b;
}

// Regions keep each box exactly (rank, lo, hi) in 1 + 16 × stride bytes,
// the stride the highest rank pushed: widening moves the boxes already
// stored, set/place replace one, append copies another list whatever its
// stride, and lists of equal boxes compare equal at any stride.
TEST(PartBytes, RegionsKeepEachBoxAtTheHighestRank) {
  const std::vector<Box> boxes = {box_of({3}, {9}),       box_of({}, {}),
                                  box_of({1, 2}, {4, 5}), box_of({7, 8, 9}, {10, 11, 12}),
                                  box_of({0}, {1}),       box_of({5, 6, 7, 8}, {9, 10, 11, 12})};
  Regions r;
  for (const Box& b : boxes) r.push_back(b);
  ASSERT_EQ(r.size(), boxes.size());
  EXPECT_EQ(r.stride(), 4);
  EXPECT_EQ(r.bytes(), boxes.size() * (1 + 16 * 4));
  size_t i = 0;
  for (const Box& b : r) EXPECT_EQ(b, boxes[i++]) << i;
  for (size_t k = 0; k < boxes.size(); ++k) {
    EXPECT_EQ(r.rank(k), boxes[k].rank);
    for (int d = 0; d < boxes[k].rank; ++d) {
      EXPECT_EQ(r.lo(k)[d], boxes[k].lo[d]);
      EXPECT_EQ(r.hi(k)[d], boxes[k].hi[d]);
    }
  }
  // A box replaced, then one of a higher rank (widens to 5).
  r.set(1, box_of({2, 2}, {3, 3}));
  EXPECT_EQ(r[1], box_of({2, 2}, {3, 3}));
  r.set(4, box_of({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}));
  EXPECT_EQ(r.stride(), 5);
  EXPECT_EQ(r[4], box_of({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}));
  EXPECT_EQ(r[3], boxes[3]);
  EXPECT_EQ(r[5], boxes[5]);
  // A lower-rank box over a higher one leaves no coordinate behind.
  r.place(4, box_of({1}, {2}));
  EXPECT_EQ(r[4], box_of({1}, {2}));
  // Slots sized for place(), and a narrower list appended.
  Regions s;
  s.resize(2, 3);
  EXPECT_EQ(s.stride(), 3);
  s.place(1, boxes[3]);
  s.place(0, boxes[0]);
  Regions narrow;
  narrow.push_back(boxes[2]);
  s.append(narrow);
  s.append(Regions{});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], boxes[0]);
  EXPECT_EQ(s[1], boxes[3]);
  EXPECT_EQ(s[2], boxes[2]);
  // Equal boxes, equal lists: strides 2 and 4.
  Regions a, b;
  b.reserve(2, 4);
  for (const Box& x : {boxes[0], boxes[2]}) {
    a.push_back(x);
    b.push_back(x);
  }
  EXPECT_EQ(a.stride(), 2);
  EXPECT_EQ(b.stride(), 4);
  EXPECT_TRUE(a == b);
  b.set(0, box_of({3}, {8}));
  EXPECT_FALSE(a == b);
}

}  // namespace
}  // namespace reshard
