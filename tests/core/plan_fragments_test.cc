// Overlapping explicit destination boxes (halos, nested boxes, ragged
// splits): distinct boxes that overlap are refined into disjoint fragments,
// each a cell of every entry containing it (Geometry, docs/design.md §2.4),
// so relays bring each element into each host once and the host-level
// bounds count the union. Above Geometry's fragment caps a group keeps one
// cell per distinct box: the plan relays each box on its own and the
// bounds count the overlap by its maximum.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "cell_ingress.h"
#include "layout/geometry.h"
#include "layout_helpers.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"

namespace reshard {
namespace {

using testing::make_box;

// Cross-host bytes when each host takes in each distinct destination box on
// it once, unless a device of the host holds the element: the overlap of
// distinct boxes counts once per box containing it (the plan of a group left
// unrefined).
int64_t per_box_ingress(const Topology& topo, const TensorSpec& t) {
  std::map<int32_t, std::vector<Box>> boxes;
  for (size_t e = 0; e < t.dst.num_entries(); ++e) {
    std::vector<Box>& v = boxes[topo.info(t.dst.device(e)).host];
    if (std::find(v.begin(), v.end(), t.dst.box(e)) == v.end()) v.push_back(t.dst.box(e));
  }
  int64_t bytes = 0;
  for (const auto& [host, v] : boxes) {
    bool held = false;
    for (size_t r = 0; r < t.src.num_entries(); ++r)
      held |= topo.info(t.src.device(r)).host == host && !t.src.box(r).empty();
    if (held) continue;  // the cases below hold the whole tensor on one host
    for (const Box& b : v) bytes += b.volume() * dtype_size(t.dtype);
  }
  return bytes;
}

// Executes `plan` in process and checks every element after every stage,
// and every process's own part against the whole plan's.
void check_plan(const PlanInput& in, const Plan& plan) {
  for (int32_t p : plan.processes()) {
    const Plan one = make_plan(in, {PlanScope::kProcess, p, false});
    ASSERT_EQ(one.part(p), plan.part(p)) << "process " << p;
  }
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(plan, views, {2});
  const OracleReport report = check_destinations(plan, buffers);
  ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches";
  Engine engine(make_local_transport());
  int64_t before = 0;
  for (int32_t k = 0; k < plan.stats().stages; ++k) {
    VerifyOptions v;
    v.last_stage = k;
    const OracleReport r = verify_plan(engine, plan, kAllProcesses, {}, v);
    ASSERT_TRUE(r.ok()) << r.mismatches << " mismatches after stage " << k;
    ASSERT_GT(r.elements, before) << "stage " << k << " wrote nothing";
    before = r.elements;
  }
  ASSERT_EQ(before, report.elements);
}

// Above a fragment cap: the `n` boxes of `in`'s destination are not
// refined, each keeps its own cell, marked as possibly overlapping. Returns
// the global statistics.
PlanStats unrefined_stats(const PlanInput& in, int64_t n) {
  const Geometry& g = *in.tensors[0].dst.geometry();
  EXPECT_FALSE(g.fragmented);
  EXPECT_EQ(g.num_cells(), n);
  EXPECT_EQ(std::count(g.cell_overlaps.begin(), g.cell_overlaps.end(), 1), n);
  return make_plan(in, {PlanScope::kGlobal}).stats();
}

// One tensor of `shape` held whole by device 0 (host 0), to the entries
// `boxes` (device 1 + i), device 1 + i on host 1 + i % hosts, one process
// per device.
PlanInput fleet(std::vector<int64_t> shape, const std::vector<Box>& boxes, int32_t hosts) {
  PlanInput in;
  TensorSpec t;
  t.name = "halo";
  t.shape = shape;
  t.dtype = DType::kF32;
  Box whole;
  whole.rank = static_cast<int32_t>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) whole.hi[d] = shape[d];
  LayoutEntry holder;
  holder.box = whole;
  t.src = Layout::from_boxes(shape, {holder}, 1, ReduceOp::kSum, "src");
  std::vector<LayoutEntry> entries(boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i) {
    entries[i].device = static_cast<int64_t>(i) + 1;
    entries[i].box = boxes[i];
  }
  t.dst = Layout::from_boxes(shape, entries, 1, ReduceOp::kSum, "dst");
  in.tensors.push_back(std::move(t));
  in.topology.add({0, 0, 0, 0});
  for (size_t i = 0; i < boxes.size(); ++i)
    in.topology.add({static_cast<int64_t>(i) + 1, static_cast<int32_t>(i) + 1,
                     1 + static_cast<int32_t>(i % static_cast<size_t>(hosts)), 0});
  in.options.split_min_bytes = 256;
  return in;
}

// Halo boxes of a 1-D tensor: rows [0, 24), [16, 40), [32, 64), each on two
// devices of different hosts. The fragments are [0, 16), [16, 24), [24, 32),
// [32, 40), [40, 64): the overlaps [16, 24) and [32, 40) are cells of the
// four entries containing them, and enter each host once.
TEST(PlanFragments, HaloBoxesEnterEachHostOnce) {
  const std::vector<Box> halos = {make_box({{0, 24}}),  make_box({{16, 40}}), make_box({{32, 64}}),
                                  make_box({{16, 40}}), make_box({{32, 64}}), make_box({{0, 24}})};
  const PlanInput in = fleet({64}, halos, 3);
  const Geometry& g = *in.tensors[0].dst.geometry();
  ASSERT_TRUE(g.fragmented);
  ASSERT_EQ(g.num_cells(), 5);
  const int64_t lo[] = {0, 16, 24, 32, 40}, hi[] = {16, 24, 32, 40, 64};
  const size_t entries[] = {2, 4, 2, 4, 2};
  for (size_t c = 0; c < 5; ++c) {
    EXPECT_EQ(g.cell_boxes[c], make_box({{lo[c], hi[c]}})) << c;
    EXPECT_EQ(g.cell_offsets[c + 1] - g.cell_offsets[c], entries[c]) << c;
    EXPECT_FALSE(g.cell_overlaps[c]);
  }
  // Entry 0 ([0, 24)) has the cells [0, 16) and [16, 24).
  ASSERT_EQ(g.entry_cell_offsets[1] - g.entry_cell_offsets[0], 2u);
  const Plan plan = make_plan(in);
  const PlanStats& st = plan.stats();
  // Hosts 1-3 hold [0, 24) and [16, 40), [16, 40) and [32, 64), [32, 64)
  // and [0, 24): the unions [0, 40), [16, 64), [0, 24) + [32, 64), 40 + 48 +
  // 56 elements of 4 bytes.
  EXPECT_EQ(st.lower_bound_cross_host_bytes, (40 + 56 + 48) * 4);
  EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
  EXPECT_EQ(st.max_host_recv_bytes, st.lower_bound_max_host_recv_bytes);
  EXPECT_EQ(st.cross_host_bytes, testing::cell_ingress_bytes(in.topology, in.tensors[0]));
  EXPECT_LT(st.cross_host_bytes, per_box_ingress(in.topology, in.tensors[0]));
  EXPECT_GT(st.forwarded_bytes, 0);
  ASSERT_NO_FATAL_FAILURE(check_plan(in, plan));
  // With a staging budget too.
  PlanInput budget = in;
  budget.options.staging_budget_bytes = 100;
  const Plan staged = make_plan(budget);
  EXPECT_GT(staged.stats().rounds, plan.stats().rounds);
  EXPECT_EQ(staged.stats().cross_host_bytes, st.cross_host_bytes);
  ASSERT_NO_FATAL_FAILURE(check_plan(budget, staged));
}

// Nested and partially overlapping 2-D boxes, replicated over hosts: the
// union of each host's boxes enters it once.
TEST(PlanFragments, NestedAndPartialBoxesMeetTheHostBound) {
  const std::vector<Box> boxes = {make_box({{0, 20}, {0, 20}}),   make_box({{4, 8}, {5, 15}}),
                                  make_box({{10, 30}, {10, 30}}), make_box({{0, 20}, {0, 20}}),
                                  make_box({{4, 8}, {5, 15}}),    make_box({{10, 30}, {10, 30}}),
                                  make_box({{4, 8}, {5, 15}}),    make_box({{0, 20}, {0, 20}})};
  for (int32_t hosts : {1, 2, 3}) {
    SCOPED_TRACE("hosts " + std::to_string(hosts));
    const PlanInput in = fleet({30, 30}, boxes, hosts);
    ASSERT_TRUE(in.tensors[0].dst.geometry()->fragmented);
    const Plan plan = make_plan(in);
    const PlanStats& st = plan.stats();
    EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
    EXPECT_EQ(st.cross_host_bytes, testing::cell_ingress_bytes(in.topology, in.tensors[0]));
    EXPECT_EQ(st.network_bytes, st.lower_bound_network_bytes);
    ASSERT_NO_FATAL_FAILURE(check_plan(in, plan));
  }
}

// Layouts whose distinct boxes do not overlap keep one cell per box: the
// cells (and so the plans) of before.
TEST(PlanFragments, DisjointBoxesAreNotRefined) {
  const std::vector<Box> boxes = {make_box({{0, 16}}), make_box({{16, 40}}), make_box({{0, 16}}),
                                  make_box({{40, 64}})};
  const PlanInput in = fleet({64}, boxes, 2);
  const Geometry& g = *in.tensors[0].dst.geometry();
  EXPECT_FALSE(g.fragmented);
  ASSERT_EQ(g.num_cells(), 3);
  EXPECT_EQ(g.cell_offsets[1], 2u);  // [0, 16) on entries 0 and 2
}

// Many boxes: 512 x 512 one-element tiles given as boxes (disjoint: the
// sweep compares each with its neighbour in its row, not with the whole
// row, so the pair cap is far away and no cell is marked overlapping), and
// 64 x 64 tiles of 8 x 8 widened by a halo of 1 (every tile overlapping its
// eight neighbours: one group, refined).
TEST(PlanFragments, ManyTilesAsBoxes) {
  std::vector<LayoutEntry> tiles;
  for (int64_t i = 0; i < 512; ++i)
    for (int64_t j = 0; j < 512; ++j) {
      LayoutEntry e;
      e.device = i * 512 + j;
      e.box = make_box({{i, i + 1}, {j, j + 1}});
      tiles.push_back(e);
    }
  const Layout disjoint =
      Layout::from_boxes(std::vector<int64_t>{512, 512}, tiles, 1, ReduceOp::kSum, "dst");
  const Geometry& g = *disjoint.geometry();
  EXPECT_FALSE(g.fragmented);
  EXPECT_EQ(g.num_cells(), 512 * 512);
  EXPECT_EQ(std::count(g.cell_overlaps.begin(), g.cell_overlaps.end(), 1), 0);
  std::vector<LayoutEntry> halos;
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 64; ++j) {
      LayoutEntry e;
      e.device = i * 64 + j;
      e.box = make_box({{std::max<int64_t>(0, 8 * i - 1), std::min<int64_t>(512, 8 * i + 9)},
                        {std::max<int64_t>(0, 8 * j - 1), std::min<int64_t>(512, 8 * j + 9)}});
      halos.push_back(e);
    }
  const Layout halo =
      Layout::from_boxes(std::vector<int64_t>{512, 512}, halos, 1, ReduceOp::kSum, "dst");
  const Geometry& h = *halo.geometry();
  EXPECT_TRUE(h.fragmented);
  EXPECT_EQ(std::count(h.cell_overlaps.begin(), h.cell_overlaps.end(), 1), 0);
  // Per dimension 64 interiors of 6 and 63 seams of 2, plus the two edges
  // of 1 merged with them: 127 intervals; runs merge along the last
  // dimension only where the covering boxes agree, which they never do.
  EXPECT_EQ(h.num_cells(), 127 * 127);
  int64_t volume = 0;
  for (const Box& b : h.cell_boxes) volume += b.volume();
  EXPECT_EQ(volume, 512 * 512) << "fragments are disjoint and cover the boxes";
}

// The fragment cap: boxes [2i, 2i + 3)^2 on one host, each overlapping the
// next one in a corner, one chain. 100 of them compress to a grid of 199^2 cells, which
// is refined; 300 to 599^2 = 358,801, above Geometry::kMaxFragments, which
// is not: each box keeps its own cell, relays it on its own (its overlaps
// enter a host once per box containing them), and the bounds count the
// overlapping boxes by their maximum — still bounds, below the union. The
// plans are exact either way.
TEST(PlanFragments, AboveTheCapEachBoxKeepsItsCell) {
  for (int64_t n : {100, 300}) {
    SCOPED_TRACE("boxes " + std::to_string(n));
    std::vector<Box> boxes;
    for (int64_t i = 0; i < n; ++i)
      boxes.push_back(make_box({{2 * i, 2 * i + 3}, {2 * i, 2 * i + 3}}));
    const std::vector<int64_t> shape = {2 * n + 1, 2 * n + 1};
    const PlanInput in = fleet(shape, boxes, 1);
    const Geometry& g = *in.tensors[0].dst.geometry();
    const bool refined = (2 * n - 1) * (2 * n - 1) <= Geometry::kMaxFragments;
    EXPECT_EQ(g.fragmented, refined);
    EXPECT_EQ(g.num_cells() == n, !refined);
    EXPECT_EQ(std::count(g.cell_overlaps.begin(), g.cell_overlaps.end(), 1), refined ? 0 : n);
    const Plan plan = make_plan(in);
    const PlanStats& st = plan.stats();
    const int64_t union_bytes = testing::cell_ingress_bytes(in.topology, in.tensors[0]);
    if (refined) {
      EXPECT_EQ(st.cross_host_bytes, union_bytes);
      EXPECT_EQ(st.cross_host_bytes, st.lower_bound_cross_host_bytes);
    } else {
      EXPECT_EQ(st.cross_host_bytes, per_box_ingress(in.topology, in.tensors[0]));
      EXPECT_GT(st.cross_host_bytes, union_bytes);
      EXPECT_LT(st.lower_bound_cross_host_bytes, union_bytes);
    }
    ASSERT_NO_FATAL_FAILURE(check_plan(in, plan));
  }
}

// The incidence cap: 3,000 nested boxes [i, 6000 - i) compress to 5,999
// grid cells (below kMaxFragments) but list about 9 M (grid cell, entry)
// incidences, above kMaxFragmentWork: no box is refined, each keeps its
// own cell, marked overlapping, and the bounds count them by their
// maximum (the largest box).
TEST(PlanFragments, AboveTheIncidenceCapEachBoxKeepsItsCell) {
  const int64_t n = 3000;
  std::vector<Box> boxes;
  for (int64_t i = 0; i < n; ++i) boxes.push_back(make_box({{i, 2 * n - i}}));
  ASSERT_LE(2 * n - 1, Geometry::kMaxFragments);
  ASSERT_GT(n * n, Geometry::kMaxFragmentWork);
  const PlanInput in = fleet({2 * n}, boxes, 1);
  const PlanStats st = unrefined_stats(in, n);
  EXPECT_EQ(st.cross_host_bytes, per_box_ingress(in.topology, in.tensors[0]));
  EXPECT_EQ(st.lower_bound_cross_host_bytes, 2 * n * 4) << "the largest box";
}

// The pair cap: 6,000 boxes [i, i + 6000) x [5999 - i, 6000 - i), each
// overlapping all the others along the sweep dimension and none along the
// second one, which does not rule them out either (every later box starts
// below its end there): 18 M pairs to compare, above
// Geometry::kMaxOverlapPairs. The sweep stops at the cap and no box is
// refined: each keeps its own cell, marked as possibly overlapping, and
// the bounds count them by their maximum (here the plan could meet the
// union: the boxes are disjoint).
TEST(PlanFragments, PastThePairCapNoBoxIsRefined) {
  const int64_t n = 6000;
  std::vector<Box> boxes;
  for (int64_t i = 0; i < n; ++i) boxes.push_back(make_box({{i, i + n}, {n - 1 - i, n - i}}));
  ASSERT_GT(n * (n - 1) / 2, Geometry::kMaxOverlapPairs);
  const PlanInput in = fleet({2 * n, n}, boxes, 1);
  const PlanStats st = unrefined_stats(in, n);
  EXPECT_EQ(st.cross_host_bytes, n * n * 4);
  EXPECT_EQ(st.lower_bound_cross_host_bytes, n * 4) << "one box: the maximum rule";
}

}  // namespace
}  // namespace reshard
