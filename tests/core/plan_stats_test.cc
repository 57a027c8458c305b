// The global statistics' fast paths (core/src/plan/stats.cc: per-cell
// arithmetic, and tiled destination cells enumerated once per cell with
// each relay part's bands accounted at once) against the reference that
// enumerates every piece as the parts do, field by field, on cases with
// relay bands (inside and across hosts), replicas and staging budgets. The
// per-device counts behind estimate_plan are compared too; the property
// tests (check_stats) compare the statistics with the parts themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "layout_helpers.h"
#include "plan/context.h"
#include "plan/routed_cells.h"
#include "random_cases.h"
#include "reshard/error.h"
#include "reshard/plan.h"
#include "test_scale.h"

namespace reshard {
namespace {

struct StatsRun {
  PlanStats st;
  std::vector<planning::DeviceCounts> counts;
};

// device_cross: every tensor crosses by the device rule where it applies
// (TensorCtx::device_cross, what Context::decide_device_cross sets).
StatsRun run_stats(const PlanInput& in, bool schedule, bool reference, bool device_cross = false) {
  planning::Context ctx(in);
  ctx.build();
  for (planning::TensorCtx& t : ctx.tensors) t.device_cross = device_cross;
  StatsRun r;
  planning::compute_stats(ctx, r.st, in.options, schedule, &r.counts, -1, reference);
  return r;
}

// Every figure of the statistics and every device's counts, exactly (the
// α–β figures are sums of the same integers in the same order).
void expect_same(const StatsRun& fast, const StatsRun& ref) {
  const PlanStats &a = fast.st, &b = ref.st;
#define RESHARD_SAME(f) EXPECT_EQ(a.f, b.f) << #f
  RESHARD_SAME(network_bytes);
  RESHARD_SAME(local_bytes);
  RESHARD_SAME(cross_host_bytes);
  RESHARD_SAME(cross_process_bytes);
  RESHARD_SAME(max_send_bytes);
  RESHARD_SAME(max_recv_bytes);
  RESHARD_SAME(messages);
  RESHARD_SAME(pieces);
  RESHARD_SAME(rounds);
  RESHARD_SAME(peak_staging_bytes);
  RESHARD_SAME(cost_seconds);
  RESHARD_SAME(stages);
  RESHARD_SAME(max_host_send_bytes);
  RESHARD_SAME(max_host_recv_bytes);
  RESHARD_SAME(forwarded_bytes);
  RESHARD_SAME(lower_bound_network_bytes);
  RESHARD_SAME(lower_bound_cost_seconds);
#undef RESHARD_SAME
  EXPECT_EQ(a.per_device, b.per_device);
  ASSERT_EQ(fast.counts.size(), ref.counts.size());
  for (size_t d = 0; d < ref.counts.size(); ++d) {
    SCOPED_TRACE("device index " + std::to_string(d));
    const planning::DeviceCounts &x = fast.counts[d], &y = ref.counts[d];
    EXPECT_EQ(x.local_pieces, y.local_pieces);
    EXPECT_EQ(x.send_pieces, y.send_pieces);
    EXPECT_EQ(x.recv_pieces, y.recv_pieces);
    EXPECT_EQ(x.regions, y.regions);
    EXPECT_EQ(x.streams, y.streams);
    EXPECT_EQ(x.messages, y.messages);
    EXPECT_EQ(x.cuts, y.cuts);
  }
}

// Both ways of computing the statistics, with the schedule (what the
// global statistics do) and without (what a worker's estimate does).
void check_fast_path(const PlanInput& in, bool device_cross = false) {
  for (bool schedule : {true, false}) {
    SCOPED_TRACE(schedule ? "with the schedule" : "without the schedule");
    ASSERT_NO_FATAL_FAILURE(expect_same(run_stats(in, schedule, false, device_cross),
                                        run_stats(in, schedule, true, device_cross)));
  }
}

using testing::mesh;

NamedSharding named(std::shared_ptr<Mesh> m, std::vector<std::vector<std::string>> dims) {
  NamedSharding s;
  s.mesh = std::move(m);
  s.dims = std::move(dims);
  return s;
}

struct FleetLayouts {
  std::vector<int64_t> shape;
  NamedSharding src, dst;
};

// After the holders' devices 0 .. holders - 1 (added by the caller):
// receiving x members devices (member m of receiving host i on host
// holder_hosts + i), a random rank-1..3 shape, the source over (a, c) =
// (shards, copies) sharded along a random dimension, the destination over
// (r, k) = (receiving, members), k along a random dimension half the time.
template <class Uni>
FleetLayouts subset_fleet_layouts(PlanInput& in, Uni& uni, int64_t shards, int64_t copies,
                                  int64_t holder_hosts, int64_t receiving, int64_t members) {
  const int64_t holders = shards * copies;
  for (int64_t i = 0; i < receiving * members; ++i) {
    const auto h = static_cast<int32_t>(holder_hosts + i / members);
    in.topology.add({holders + i, h, h, 0});
  }
  const int rank = static_cast<int>(uni(1, 3));
  std::vector<int64_t> shape;
  for (int d = 0; d < rank; ++d) shape.push_back(uni(5, 120));
  std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
  src_dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
  std::vector<std::vector<std::string>> dst_dims(static_cast<size_t>(rank));
  if (members > 1 && uni(0, 1)) dst_dims[static_cast<size_t>(uni(0, rank - 1))] = {"k"};
  return {shape, named(mesh({"a", "c"}, {shards, copies}, 0), src_dims),
          named(mesh({"r", "k"}, {receiving, members}, holders), dst_dims)};
}

// Tensors w0, w1, ... of the fleet's layouts, one per dtype.
void add_tensors(PlanInput& in, const FleetLayouts& f, const std::vector<DType>& dtypes) {
  for (size_t i = 0; i < dtypes.size(); ++i) {
    TensorSpec t;
    t.name = "w" + std::to_string(i);
    t.shape = f.shape;
    t.dtype = dtypes[i];
    t.src = Layout::from_named(f.src, f.shape, t.name + ".src");
    t.dst = Layout::from_named(f.dst, f.shape, t.name + ".dst");
    in.tensors.push_back(std::move(t));
  }
}

// The random cases of the property tests (relays inside hosts, replicas,
// explicit layouts, partial sums) with alpha 0, so that relay parts are cut
// into bands, without a budget, with one that never cuts them and with the
// generated one; and single-hop.
TEST(PlanStatsFastPath, RandomCasesWithRelayBandsMatchTheEnumeration) {
  const int cases = scaled_cases(600);
  int banded = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    testing::CaseGen gen(90000 + static_cast<uint64_t>(c), {5, 64, 3, c % 2 ? 13 : 40, true, true});
    PlanInput in = gen.input();
    in.options.alpha_seconds = 0;
    const int64_t generated = in.options.staging_budget_bytes;
    for (int64_t budget : {int64_t{0}, int64_t{1} << 30, generated}) {
      SCOPED_TRACE("budget " + std::to_string(budget));
      in.options.staging_budget_bytes = budget;
      ASSERT_NO_FATAL_FAILURE(check_fast_path(in));
    }
    // Single-hop (no route anywhere: every cell's regions assigned entry by
    // entry, replicas split or rotated).
    PlanInput single = in;
    single.options.relays = false;
    single.options.reduce_scatter = false;
    ASSERT_NO_FATAL_FAILURE(check_fast_path(single));
    const PlanStats st = run_stats(in, true, false).st;
    banded += st.forwarded_bytes > 0 && st.rounds > st.stages;
  }
  EXPECT_GT(banded, cases / 50) << "cases with relay streams in several messages";
}

// Few regions for a host's entries (planner version 16: each region cut
// into parts led by different entries, Enumerator::relay_split): 1-3
// holders on host 0 to one host of 2-8 entries, replicated or sharded
// along another dimension, region parts at split_min_bytes of 256 and of
// 1 MiB (then whole regions, where the cell is below relay bands: the
// per-cell arithmetic).
TEST(PlanStatsFastPath, RegionsCutForMoreLeadersMatchTheEnumeration) {
  int cases = 0;
  for (int64_t holders : {1, 2, 3})
    for (int64_t members : {2, 3, 5, 8})
      for (bool sharded : {false, true})
        for (int64_t split : {int64_t{256}, int64_t{1} << 20}) {
          SCOPED_TRACE(std::to_string(holders) + " holders, " + std::to_string(members) +
                       " members, split_min_bytes " + std::to_string(split));
          PlanInput in;
          for (int64_t d = 0; d < holders; ++d) in.topology.add({d, 0, 0, 0});
          for (int64_t i = 0; i < members; ++i)
            in.topology.add({holders + i, static_cast<int32_t>(1 + i), 1, 0});
          FleetLayouts f{
              {96, 40},
              named(mesh({"a"}, {holders}, 0), {{"a"}, {}}),
              named(mesh({"k"}, {members}, holders),
                    {{}, sharded ? std::vector<std::string>{"k"} : std::vector<std::string>{}})};
          add_tensors(in, f, {DType::kF32, DType::kBF16});
          in.options.split_min_bytes = split;
          in.options.alpha_seconds = 0;
          ASSERT_NO_FATAL_FAILURE(check_fast_path(in));
          ++cases;
        }
  EXPECT_EQ(cases, 48);
}

// Source and destination on the same devices (FSDP over H hosts of 8 ->
// dp x tp on them, tp 2 or 4, column- and row-parallel cells): a host's
// entries lead blocks of the regions that enter it, the regions it holds
// left out (Enumerator::lead_block), in the per-cell arithmetic (cells
// below relay bands) and in the enumeration alike.
TEST(PlanStatsFastPath, CellsPartlyHeldOnTheirHostsMatchTheEnumeration) {
  int cases = 0;
  for (int64_t H : {2, 4})
    for (int64_t tp : {2, 4})
      for (int d : {0, 1})
        for (int64_t rows : {int64_t{256}, int64_t{2048}}) {
          SCOPED_TRACE(std::to_string(H) + " hosts, tp " + std::to_string(tp) + ", dim " +
                       std::to_string(d) + ", rows " + std::to_string(rows));
          const int64_t n = 8 * H;
          PlanInput in;
          for (int64_t i = 0; i < n; ++i)
            in.topology.add({i, static_cast<int32_t>(i), static_cast<int32_t>(i / 8),
                             static_cast<int32_t>(i % 8)});
          std::vector<std::vector<std::string>> dst_dims(2);
          dst_dims[static_cast<size_t>(d)] = {"tp"};
          FleetLayouts f{{rows, 512},
                         named(mesh({"a"}, {n}, 0), {{"a"}, {}}),
                         named(mesh({"dp", "tp"}, {n / tp, tp}, 0), dst_dims)};
          add_tensors(in, f, {DType::kF32, DType::kBF16});
          for (int64_t budget : {int64_t{0}, int64_t{1} << 30}) {
            in.options.staging_budget_bytes = budget;
            ASSERT_NO_FATAL_FAILURE(check_fast_path(in));
          }
          ++cases;
        }
  EXPECT_EQ(cases, 16);
}

// Relays across hosts (Route::cross): few holders on one or two hosts —
// replicas, one per host or several (split across replicas, in bands), or
// shards — feeding 3-7 receiving hosts of 1-3 devices each; two tensors of
// the same geometry and shape (one group, scaled) and one of another dtype
// (relay bands follow the bytes); alpha 0 or 5 µs, budgets.
TEST(PlanStatsFastPath, RandomCrossHostFleetsMatchTheEnumeration) {
  std::mt19937_64 rng(20261124);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(300);
  int crossed = 0, banded = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t holders = uni(1, 4), holder_hosts = uni(1, 2);
    const int64_t receiving = uni(3, 7), members = uni(1, 3);
    PlanInput in;
    for (int64_t d = 0; d < holders; ++d)
      in.topology.add(
          {d, static_cast<int32_t>(uni(0, 1) ? d : 0), static_cast<int32_t>(d % holder_hosts), 0});
    for (int64_t i = 0; i < receiving * members; ++i)
      in.topology.add({holders + i, static_cast<int32_t>(holders + i),
                       static_cast<int32_t>(holder_hosts + i / members), 0});
    const int rank = static_cast<int>(uni(1, 3));
    std::vector<int64_t> shape;
    for (int d = 0; d < rank; ++d) shape.push_back(uni(5, 120));
    std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
    if (uni(0, 1)) src_dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
    std::vector<std::vector<std::string>> dst_dims(static_cast<size_t>(rank));
    if (members > 1 && uni(0, 1)) dst_dims[static_cast<size_t>(uni(0, rank - 1))] = {"k"};
    const NamedSharding src = named(mesh({"a"}, {holders}, 0), src_dims);
    const NamedSharding dst = named(mesh({"r", "k"}, {receiving, members}, holders), dst_dims);
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF64};
    const DType first = dtypes[uni(0, 2)], other = dtypes[uni(0, 2)];
    for (int i = 0; i < 3; ++i) {
      TensorSpec t;
      t.name = "w" + std::to_string(i);
      t.shape = shape;
      t.dtype = i < 2 ? first : other;
      t.src = Layout::from_named(src, shape, t.name + ".src");
      t.dst = Layout::from_named(dst, shape, t.name + ".dst");
      in.tensors.push_back(std::move(t));
    }
    in.options.split_min_bytes = uni(0, 1) ? 256 : 1024;
    in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
    // Budgets that cut the streams into several rounds (bands beside
    // rounds), and one that never does.
    const int64_t budgets[] = {0, 16000, 64000, int64_t{1} << 30};
    in.options.staging_budget_bytes = budgets[uni(0, 3)];
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in));
    const PlanStats st = run_stats(in, true, true).st;
    crossed += st.stages == 3 || (st.stages == 2 && members == 1);
    banded += st.forwarded_bytes > 0 && st.rounds > st.stages;
  }
  EXPECT_GT(crossed, cases / 4) << "cases relayed across hosts";
  EXPECT_GT(banded, cases / 4) << "cases with relay streams in several messages";
}

// Relays across hosts from shards held on subsets of the holder hosts
// (planner version 9: water-filled shares, small regions in chunks): 1-3
// shards × 2-3 copies, each device on a random one of 2-3 holder hosts,
// feeding 4-7 receiving hosts of 1-3 devices; two tensors of one geometry
// and one of another dtype; alpha 0 or 5 µs, split_min_bytes 256 or 1 MiB
// (everything in chunks of at least 31,250 bytes), budgets.
TEST(PlanStatsFastPath, RandomSubsetFleetsMatchTheEnumeration) {
  std::mt19937_64 rng(20261126);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(150);
  int crossed = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t shards = uni(1, 3), copies = uni(2, 3), holder_hosts = uni(2, 3);
    const int64_t holders = shards * copies, receiving = uni(4, 7), members = uni(1, 3);
    PlanInput in;
    for (int64_t d = 0; d < holders; ++d) {
      const auto h = static_cast<int32_t>(uni(0, holder_hosts - 1));
      in.topology.add({d, h, h, 0});
    }
    const FleetLayouts f =
        subset_fleet_layouts(in, uni, shards, copies, holder_hosts, receiving, members);
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF64};
    const DType first = dtypes[uni(0, 2)], other = dtypes[uni(0, 2)];
    add_tensors(in, f, {first, first, other});
    in.options.split_min_bytes = uni(0, 1) ? 256 : 1 << 20;
    in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
    const int64_t budgets[] = {0, 16000, 64000, int64_t{1} << 30};
    in.options.staging_budget_bytes = budgets[uni(0, 3)];
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in));
    const PlanStats st = run_stats(in, true, true).st;
    crossed += st.stages == 3 || (st.stages == 2 && members == 1);
  }
  EXPECT_GT(crossed, cases / 4) << "cases relayed across hosts";
}

// The device rule's cells (TensorCtx::device_cross on every tensor): every
// region enters every receiving host, whose entry forwards it to the
// others, an all-to-all among the cell's entries that the statistics take
// once per source (stats.cc, A2aSource). 1-4 holders on 1-2 hosts, now
// and then the last on a receiving host (its regions, last in a cell, go
// one by one after the others were taken alike), feeding 3-9 receiving hosts of 1 device (sometimes
// 2: one by one again), replicated or sharded; alpha 0 or 5 µs, split_min_bytes 256 or 1 KiB,
// budgets.
TEST(PlanStatsFastPath, DeviceRuleCellsMatchTheEnumeration) {
  std::mt19937_64 rng(20261129);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(200);
  int crossed = 0, banded = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t holders = uni(1, 4), holder_hosts = uni(1, 2);
    const int64_t receiving = uni(3, 9), members = uni(0, 4) == 0 ? 2 : 1;
    const bool holder_on_receiver = uni(0, 5) == 0;
    PlanInput in;
    for (int64_t d = 0; d < holders; ++d) {
      const auto h = static_cast<int32_t>(
          holder_on_receiver && d == holders - 1 ? holder_hosts : d % holder_hosts);
      in.topology.add({d, static_cast<int32_t>(d), h, 0});
    }
    const int rank = static_cast<int>(uni(1, 3));
    std::vector<int64_t> shape;
    for (int d = 0; d < rank; ++d) shape.push_back(uni(5, 120));
    std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
    if (uni(0, 1)) src_dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
    std::vector<std::vector<std::string>> dst_dims(static_cast<size_t>(rank));
    for (int64_t i = 0; i < receiving * members; ++i)
      in.topology.add({holders + i, static_cast<int32_t>(holders + i),
                       static_cast<int32_t>(holder_hosts + i / members), 0});
    if (members > 1 && uni(0, 1)) dst_dims[static_cast<size_t>(uni(0, rank - 1))] = {"k"};
    const FleetLayouts f{shape, named(mesh({"a"}, {holders}, 0), src_dims),
                         named(mesh({"r", "k"}, {receiving, members}, holders), dst_dims)};
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF64};
    const DType first = dtypes[uni(0, 2)], other = dtypes[uni(0, 2)];
    add_tensors(in, f, {first, first, other});
    in.options.split_min_bytes = uni(0, 1) ? 256 : 1024;
    in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
    const int64_t budgets[] = {0, 16000, 64000, int64_t{1} << 30};
    in.options.staging_budget_bytes = budgets[uni(0, 3)];
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in, true));
    const PlanStats st = run_stats(in, true, true, true).st;
    crossed += st.forwarded_bytes > 0;
    banded += st.forwarded_bytes > 0 && st.rounds > st.stages;
  }
  EXPECT_GT(crossed, cases / 2) << "cases relayed across hosts";
  EXPECT_GT(banded, cases / 8) << "cases with relay streams in several messages";
}

// Relay parts the statistics visit (planning::relay_parts_visited) with the
// device rule: 4 holder devices on 2 hosts, each a row block of a 4096 x 64
// f32 tensor, into `hosts` receiving hosts of `per_host` entries, each
// taking the whole tensor, unbudgeted; the statistics checked against the
// enumeration, and the plan forwards (in 3 stages or more where a host has
// several entries).
int64_t relay_part_visits(int64_t hosts, int64_t per_host) {
  PlanInput in;
  for (int64_t d = 0; d < 4; ++d)
    in.topology.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d / 2), 0});
  for (int64_t i = 0; i < hosts * per_host; ++i)
    in.topology.add(
        {4 + i, static_cast<int32_t>(4 + i), static_cast<int32_t>(2 + i / per_host), 0});
  const NamedSharding dst = per_host == 1 ? named(mesh({"r"}, {hosts}, 4), {{}, {}})
                                          : named(mesh({"r", "k"}, {hosts, per_host}, 4), {{}, {}});
  const FleetLayouts f{{4096, 64}, named(mesh({"a"}, {4}, 0), {{"a"}, {}}), dst};
  add_tensors(in, f, {DType::kF32});
  in.options.staging_budget_bytes = 0;
  EXPECT_NO_FATAL_FAILURE(check_fast_path(in, true));
  const int64_t before = planning::relay_parts_visited();
  const StatsRun r = run_stats(in, true, false, true);
  EXPECT_GT(r.st.forwarded_bytes, 0) << hosts << " hosts of " << per_host;
  if (per_host > 1) {
    EXPECT_GE(r.st.stages, 3) << per_host << " entries a host";
  }
  return planning::relay_parts_visited() - before;
}

// The device rule's cells are visited once per relay part, not once per
// (entry, part) (planning::relay_parts_visited): 4 holder devices on 2
// hosts, each a row block, into R receiving hosts of 1 device, each
// taking the whole tensor. Every region enters every receiving host (R
// parts a region), so the parts grow like R and the (entry, part) pairs
// like R^2: from R = 8 to 32, 4x the parts against 17.7x the pairs (each
// part goes to R - 1 entries). The statistics match the enumeration.
TEST(PlanStatsFastPath, DeviceRuleCellsVisitEachRelayPartOnce) {
  auto visits = [](int64_t R) { return relay_part_visits(R, 1); };
  const int64_t at8 = visits(8), at32 = visits(32);
  std::printf("relay parts visited: %lld at 8 receiving hosts, %lld at 32\n",
              static_cast<long long>(at8), static_cast<long long>(at32));
  EXPECT_GT(at8, 0);
  EXPECT_LE(at32, 5 * at8);
}

// MoE-like tensors for the fast-path tests below: random rank (1-3) and
// dims (8 to max_dim), sharded over mesh (a, c) = (shards, copies) of the
// holders (devices 0..) along one dim, replicated over mesh r of the
// receiving entries (devices after the holders), two dtypes; the split size
// one of `split`, α 0 unless uni(0, alpha_odds) draws 0, a budget of none,
// 16 KB, 64 KB or 1 GiB.
struct MoeLikeFleet {
  int64_t shards, copies, receiving;
};
template <class Uni>
void add_moe_like_tensors(PlanInput& in, Uni& uni, MoeLikeFleet m, int64_t max_dim,
                          std::array<int64_t, 2> split, int64_t alpha_odds) {
  const int rank = static_cast<int>(uni(1, 3));
  std::vector<int64_t> shape;
  for (int d = 0; d < rank; ++d) shape.push_back(uni(8, max_dim));
  std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
  src_dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
  const FleetLayouts f{shape, named(mesh({"a", "c"}, {m.shards, m.copies}, 0), src_dims),
                       named(mesh({"r"}, {m.receiving}, m.shards * m.copies),
                             std::vector<std::vector<std::string>>(static_cast<size_t>(rank)))};
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF64};
  add_tensors(in, f, {dtypes[uni(0, 2)], dtypes[uni(0, 2)]});
  in.options.split_min_bytes = uni(0, 1) ? split[0] : split[1];
  in.options.alpha_seconds = uni(0, alpha_odds) ? 0 : 5e-6;
  const int64_t budgets[] = {0, 16000, 64000, int64_t{1} << 30};
  in.options.staging_budget_bytes = budgets[uni(0, 3)];
}

// The devices of a MoE-like fleet over several holder hosts: holder d
// (copy d mod copies of its shard) on host (d mod copies) mod holder_hosts,
// so a shard's copies spread over the holder hosts, then one device a
// receiving host.
void add_holder_hosts(PlanInput& in, MoeLikeFleet m, int64_t holder_hosts) {
  const int64_t holders = m.shards * m.copies;
  for (int64_t d = 0; d < holders; ++d)
    in.topology.add(
        {d, static_cast<int32_t>(d), static_cast<int32_t>(d % m.copies % holder_hosts), 0});
  for (int64_t i = 0; i < m.receiving; ++i)
    in.topology.add({holders + i, static_cast<int32_t>(holders + i),
                     static_cast<int32_t>(holder_hosts + i), 0});
}

// The device rule's cells with MoE-like holders, one a host (a trainer's
// replicas on hosts of their own): each direct part of a region (sent from
// its holder's host to every receiving host) has one holder there, so
// every entry takes a holder's direct parts as one sum
// (planning::direct_sums_taken). 1-3 shards x 1-3 copies, one holder
// device a host, into 3-10 receiving hosts of one entry, random rank,
// dims, dtypes, split size and budgets, every field against the
// enumeration; most cases take such sums.
TEST(PlanStatsFastPath, DirectPartsOfOneHolderMatchTheEnumeration) {
  std::mt19937_64 rng(20261130);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(120);
  int summed = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t shards = uni(1, 3), copies = uni(1, 3), holders = shards * copies;
    const int64_t receiving = uni(3, 10);
    PlanInput in;
    for (int64_t d = 0; d < holders + receiving; ++d)
      in.topology.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d), 0});
    add_moe_like_tensors(in, uni, {shards, copies, receiving}, 160, {256, 1024}, 1);
    const int64_t before = planning::direct_sums_taken();
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in, true));
    summed += planning::direct_sums_taken() > before;
  }
  EXPECT_GT(summed, cases / 2) << "cases whose direct parts were summed per holder";
}

// The device rule's cells with MoE-like holders, several a host (a shard's
// replicas spread over the holder hosts): each part a region's route enters
// a receiving host by is split over the holders on the part's host, band by
// band, piece q from holder (q + e) mod n, so every entry takes its entered
// parts' stage-0 pieces as one sum per holder
// (planning::entered_sums_taken). 1-3 shards x 2-6 copies, one process a
// holder device, over 1-3 holder hosts (copy c of a shard on host
// c mod hosts), into 3-8 receiving hosts of one entry, random rank, dims,
// dtypes, split size, budgets and α (bands or none), every field against
// the enumeration; most cases take such sums.
TEST(PlanStatsFastPath, EnteredPartsOfSeveralHoldersMatchTheEnumeration) {
  std::mt19937_64 rng(20261201);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(120);
  int summed = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t shards = uni(1, 3), copies = uni(2, 6);
    const int64_t holder_hosts = uni(1, 3), receiving = uni(3, 8);
    PlanInput in;
    add_holder_hosts(in, {shards, copies, receiving}, holder_hosts);
    add_moe_like_tensors(in, uni, {shards, copies, receiving}, 200, {64, 512}, 2);
    const int64_t before = planning::entered_sums_taken();
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in, true));
    summed += planning::entered_sums_taken() > before;
  }
  EXPECT_GT(summed, cases / 2) << "cases whose entered parts were summed per holder";
}

// The device rule's cells taken from their regions' runs
// (RoutedCells::a2a_runs: each run's parts made where read, stage 0 and the
// relay sums in one visit) against the same cells taken part by part
// (planning::set_a2a_runs(false)) and against the enumeration: MoE-like
// holders, 1-3 shards x 1-6 copies over 1-3 holder hosts (one holder a host
// too: direct parts), into 3-9 receiving hosts of one entry, random rank,
// dims (uneven splits), dtypes, split size, budgets (none among them) and
// α (bands or none), every field; most cases take runs.
TEST(PlanStatsFastPath, AllToAllRunsMatchThePartPath) {
  std::mt19937_64 rng(20261203);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  struct On {
    ~On() { planning::set_a2a_runs(true); }
  } restore;
  const int cases = scaled_cases(100);
  int taken = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t shards = uni(1, 3), copies = uni(1, 6);
    const int64_t holder_hosts = uni(1, 3), receiving = uni(3, 9);
    PlanInput in;
    if (uni(0, 3) == 0) {  // one holder a host
      for (int64_t d = 0; d < shards * copies + receiving; ++d)
        in.topology.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d), 0});
    } else {
      add_holder_hosts(in, {shards, copies, receiving}, holder_hosts);
    }
    add_moe_like_tensors(in, uni, {shards, copies, receiving}, 180, {64, 512}, 2);
    for (bool schedule : {true, false}) {
      SCOPED_TRACE(schedule ? "with the schedule" : "without the schedule");
      const int64_t before = planning::a2a_runs_taken();
      planning::set_a2a_runs(true);
      const StatsRun runs = run_stats(in, schedule, false, true);
      taken += schedule && planning::a2a_runs_taken() > before;
      planning::set_a2a_runs(false);
      const int64_t off = planning::a2a_runs_taken();
      const StatsRun parts = run_stats(in, schedule, false, true);
      ASSERT_EQ(planning::a2a_runs_taken(), off) << "runs taken with them off";
      ASSERT_NO_FATAL_FAILURE(expect_same(runs, parts));
      ASSERT_NO_FATAL_FAILURE(expect_same(runs, run_stats(in, schedule, true, true)));
    }
  }
  EXPECT_GT(taken, cases / 2) << "cases with a region taken from its runs";
}

// Groups of like tensors that share the device rule's cell (an MoE sync's
// groups over tp share its cells): each all-to-all cell keeps its pairs'
// stage-1 streams in one table for the pass (RoutedCells::A2aStreams,
// planning::a2a_tables_shared counts the cells that found it made), their
// bytes added to the pass's streams at its end. 1-3 shards x 2-5 copies
// over 1-3 holder hosts into 3-8 receiving hosts of one entry, 2-3 calls
// of add_moe_like_tensors (2 tensors of a random shape each, so 2-6 groups
// into the same cell), random dtypes, split size, budgets and α, every
// field (the messages and rounds read every stream's bytes) against the
// enumeration; most cases share a table.
TEST(PlanStatsFastPath, AllToAllStreamsOfGroupsSharingACellMatchTheEnumeration) {
  std::mt19937_64 rng(20261202);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(80);
  int shared = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t shards = uni(1, 3), copies = uni(2, 5);
    const int64_t holder_hosts = uni(1, 3), receiving = uni(3, 8);
    PlanInput in;
    add_holder_hosts(in, {shards, copies, receiving}, holder_hosts);
    for (int64_t k = uni(2, 3); k > 0; --k) {
      const size_t first = in.tensors.size();
      add_moe_like_tensors(in, uni, {shards, copies, receiving}, 120, {64, 512}, 2);
      for (size_t i = first; i < in.tensors.size(); ++i)  // names unique over the calls
        in.tensors[i].name = "g" + std::to_string(k) + "." + in.tensors[i].name;
    }
    const int64_t before = planning::a2a_tables_shared();
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in, true));
    shared += planning::a2a_tables_shared() > before;
  }
  EXPECT_GT(shared, cases / 2) << "cases whose groups shared a cell's stream table";
}

// Cells of several entries a host whose regions cross hosts (an MoE sync's
// replicated tensors: 8 entries a host): a leader's forwards inside its
// host are summed once for the host's other entries (RoutedCells::
// host_forwards). 1-4 holder devices on 1-2 hosts into 3-7 receiving hosts
// of 2-5 entries, with and without the device rule, every field against
// the enumeration.
TEST(PlanStatsFastPath, HostsOfSeveralEntriesMatchTheEnumeration) {
  std::mt19937_64 rng(20261130);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(150);
  int crossed = 0, banded = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t holders = uni(1, 4), holder_hosts = uni(1, 2);
    const int64_t receiving = uni(3, 7), members = uni(2, 5);
    PlanInput in;
    for (int64_t d = 0; d < holders; ++d)
      in.topology.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d % holder_hosts), 0});
    const int rank = static_cast<int>(uni(1, 3));
    std::vector<int64_t> shape;
    for (int d = 0; d < rank; ++d) shape.push_back(uni(5, 120));
    std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
    if (uni(0, 1)) src_dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
    std::vector<std::vector<std::string>> dst_dims(static_cast<size_t>(rank));
    for (int64_t i = 0; i < receiving * members; ++i)
      in.topology.add({holders + i, static_cast<int32_t>(holders + i),
                       static_cast<int32_t>(holder_hosts + i / members), 0});
    if (uni(0, 2) == 0) dst_dims[static_cast<size_t>(uni(0, rank - 1))] = {"k"};
    const FleetLayouts f{shape, named(mesh({"a"}, {holders}, 0), src_dims),
                         named(mesh({"r", "k"}, {receiving, members}, holders), dst_dims)};
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF64};
    const DType first = dtypes[uni(0, 2)], other = dtypes[uni(0, 2)];
    add_tensors(in, f, {first, first, other});
    in.options.split_min_bytes = uni(0, 1) ? 256 : 1024;
    in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
    const int64_t budgets[] = {0, 16000, 64000, int64_t{1} << 30};
    in.options.staging_budget_bytes = budgets[uni(0, 3)];
    const bool device_cross = uni(0, 1) == 1;
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in, device_cross));
    const PlanStats st = run_stats(in, true, true, device_cross).st;
    crossed += st.forwarded_bytes > 0 && st.stages > 2;
    banded += st.forwarded_bytes > 0 && st.rounds > st.stages;
  }
  EXPECT_GT(crossed, cases / 4) << "cases forwarded inside hosts after crossing";
  EXPECT_GT(banded, cases / 8) << "cases with relay streams in several messages";
}

// Hashed cells (planning::set_pair_index_max(0): every cell's pairs hashed,
// as an MoE sync's replicated cells of N/2 entries are) of groups whose
// cells have the same entries on the same devices: a pair's streams found
// in an earlier group's cell are not looked up again (RoutedCells::
// PassSlots; planning::hashed_cells_kept). 1-4 holder devices on 1-2
// hosts, 2-3 tensors of random shapes replicated over 3-6 receiving hosts
// of 2-4 entries, with and without the device rule, every field against
// the enumeration; most cases keep a cell's slots.
TEST(PlanStatsFastPath, HashedCellsOfLikeDevicesMatchTheEnumeration) {
  std::mt19937_64 rng(20261201);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  struct Restore {
    size_t old = planning::set_pair_index_max(0);
    ~Restore() { planning::set_pair_index_max(old); }
  } restore;
  const int cases = scaled_cases(60);
  int kept = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t holders = uni(1, 4), holder_hosts = uni(1, 2);
    const int64_t receiving = uni(3, 6), members = uni(2, 4);
    PlanInput in;
    for (int64_t d = 0; d < holders; ++d)
      in.topology.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d % holder_hosts), 0});
    for (int64_t i = 0; i < receiving * members; ++i)
      in.topology.add({holders + i, static_cast<int32_t>(holders + i),
                       static_cast<int32_t>(holder_hosts + i / members), 0});
    const int64_t tensors = uni(2, 3);
    for (int64_t x = 0; x < tensors; ++x) {
      const int rank = static_cast<int>(uni(1, 3));
      std::vector<int64_t> shape;
      for (int d = 0; d < rank; ++d) shape.push_back(uni(5, 120));
      std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
      if (uni(0, 1)) src_dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
      const FleetLayouts f{shape, named(mesh({"a"}, {holders}, 0), src_dims),
                           named(mesh({"r", "k"}, {receiving, members}, holders),
                                 std::vector<std::vector<std::string>>(static_cast<size_t>(rank)))};
      const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF64};
      add_tensors(in, f, {dtypes[uni(0, 2)]});
    }
    in.options.split_min_bytes = uni(0, 1) ? 256 : 1024;
    in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
    const int64_t budgets[] = {0, 16000, 64000, int64_t{1} << 30};
    in.options.staging_budget_bytes = budgets[uni(0, 3)];
    const bool device_cross = uni(0, 1) == 1;
    const int64_t before = planning::hashed_cells_kept();
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in, device_cross));
    kept += planning::hashed_cells_kept() > before;
  }
  EXPECT_GT(kept, cases / 2) << "cases whose hashed cells kept the slots of the cell before";
}

// A leader's forwards inside a host are visited once per part, not once
// per (entry, part) (planning::relay_parts_visited): 4 holder devices on
// 2 hosts, each a row block, into 8 receiving hosts of K entries, each
// taking the whole tensor (the device rule). From K = 2 to 8 the (entry,
// part) pairs grow 6.4x (784 and 4,984 visits one entry at a time), the
// parts and their forwards 1.5x (784 and 1,144: the regions are cut into
// more lead parts for more leaders). The statistics match the enumeration.
TEST(PlanStatsFastPath, HostsOfSeveralEntriesVisitEachForwardOnce) {
  auto visits = [](int64_t K) { return relay_part_visits(8, K); };
  const int64_t at2 = visits(2), at8 = visits(8);
  std::printf("relay parts visited: %lld at 2 entries a host, %lld at 8\n",
              static_cast<long long>(at2), static_cast<long long>(at8));
  EXPECT_GT(at2, 0);
  EXPECT_LE(at8, 2 * at2);
}

// A cell too large for the routed statistics' index tables (more than
// 2,896 entries: its pending pieces and streams hashed, RoutedCells::
// pair_map_): 4 holder devices on 2 hosts into 375 receiving hosts of 8
// entries, each taking the whole (small) tensor. Below full scale (the
// sanitizer builds, where it took 105 s, then 97 s) one dtype instead of
// two, under the device rule alone (the index tables are the same).
TEST(PlanStatsFastPath, CellsBeyondTheIndexTablesMatchTheEnumeration) {
  PlanInput in;
  for (int64_t d = 0; d < 4; ++d)
    in.topology.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d / 2), 0});
  constexpr int64_t kHosts = 375, kMembers = 8;
  for (int64_t i = 0; i < kHosts * kMembers; ++i)
    in.topology.add(
        {4 + i, static_cast<int32_t>(4 + i), static_cast<int32_t>(2 + i / kMembers), 0});
  const FleetLayouts f{{64, 48},
                       named(mesh({"a"}, {4}, 0), {{"a"}, {}}),
                       named(mesh({"r", "k"}, {kHosts, kMembers}, 4), {{}, {}})};
  if (RESHARD_TEST_SCALE >= 100)
    add_tensors(in, f, {DType::kF32, DType::kBF16});
  else
    add_tensors(in, f, {DType::kF32});
  in.options.split_min_bytes = 64;
  for (bool device_cross : {false, true}) {
    if (RESHARD_TEST_SCALE < 100 && !device_cross) continue;
    SCOPED_TRACE(device_cross ? "device rule" : "host rule");
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in, device_cross));
    EXPECT_GT(run_stats(in, true, false, device_cross).st.forwarded_bytes, 0);
  }
}

// No more receiving hosts than the source spans (planner version 11: relays
// across hosts where single-hop may overload a holder host): 1-4 shards x
// 1-2 copies (one copy: every cell held once, the per-cell arithmetic's
// case), each device on one of 2-6 holder hosts, host 0 often holding most,
// feeding 2-3 receiving hosts of 1-3 devices. Both ways must agree on which
// tensors cross.
TEST(PlanStatsFastPath, UnevenHolderFleetsMatchTheEnumeration) {
  std::mt19937_64 rng(20261128);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(150);
  int crossed = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t shards = uni(1, 4), copies = uni(1, 2), holder_hosts = uni(2, 6);
    const int64_t holders = shards * copies, members = uni(1, 3);
    const int64_t receiving = uni(2, std::min<int64_t>(3, holder_hosts));
    const bool skewed = uni(0, 1) == 1;
    PlanInput in;
    for (int64_t d = 0; d < holders; ++d) {
      const auto h = static_cast<int32_t>(skewed && uni(0, 1) ? 0 : uni(0, holder_hosts - 1));
      in.topology.add({d, h, h, 0});
    }
    const FleetLayouts f =
        subset_fleet_layouts(in, uni, shards, copies, holder_hosts, receiving, members);
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF64};
    const DType d0 = dtypes[uni(0, 2)], d1 = dtypes[uni(0, 2)];
    add_tensors(in, f, {d0, d1});
    in.options.split_min_bytes = 256;
    in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
    const int64_t budgets[] = {0, 16000, 64000, int64_t{1} << 30};
    in.options.staging_budget_bytes = budgets[uni(0, 3)];
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in));
    const PlanStats st = run_stats(in, true, true).st;
    crossed += st.stages == 3 || (st.stages == 2 && members == 1);
  }
  EXPECT_GT(crossed, cases / 4) << "cases relayed across hosts";
}

// A replicated source split over many destination entries (stats.cc,
// assign_cell_stats: the entries of a cell with no holder on their device,
// process or host taken together, per residue of the entry modulo the
// holders): 1-3 shards x 2-9 copies, 1-3 devices a host, to an r x k mesh
// of up to 12 x 3 that starts inside the holders (entries local, in a
// holder's process or on its host, beside far ones) or past them; extents
// of 3-40 (pieces cut unevenly, fewer pieces than holders), single-hop and
// relayed, budgets.
TEST(PlanStatsFastPath, ReplicasSplitOverManyEntriesMatchTheEnumeration) {
  std::mt19937_64 rng(20261129);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(200);
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t shards = uni(1, 3), copies = uni(2, 9), per_host = uni(1, 3);
    const int64_t holders = shards * copies, receiving = uni(2, 12), members = uni(1, 3);
    const int64_t first = uni(0, 1) ? uni(0, holders - 1) : holders + uni(0, 2);
    PlanInput in;
    const bool shared_procs = uni(0, 1) == 1;
    for (int64_t d = 0; d < std::max(holders, first + receiving * members); ++d) {
      const auto h = static_cast<int32_t>(d / per_host);
      in.topology.add({d, shared_procs ? h : static_cast<int32_t>(d), h, 0});
    }
    const int rank = static_cast<int>(uni(1, 3));
    std::vector<int64_t> shape;
    for (int d = 0; d < rank; ++d) shape.push_back(uni(3, 40));
    std::vector<std::vector<std::string>> src_dims(static_cast<size_t>(rank));
    src_dims[static_cast<size_t>(uni(0, rank - 1))] = {"a"};
    std::vector<std::vector<std::string>> dst_dims(static_cast<size_t>(rank));
    if (members > 1) dst_dims[static_cast<size_t>(uni(0, rank - 1))] = {"k"};
    const FleetLayouts f{shape, named(mesh({"a", "c"}, {shards, copies}, 0), src_dims),
                         named(mesh({"r", "k"}, {receiving, members}, first), dst_dims)};
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF64};
    add_tensors(in, f, {dtypes[uni(0, 2)], dtypes[uni(0, 2)]});
    in.options.split_min_bytes = uni(0, 3) == 0 ? 1024 : 16;
    in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
    in.options.relays = uni(0, 1) == 1;
    const int64_t budgets[] = {0, 16000, 64000, int64_t{1} << 30};
    in.options.staging_budget_bytes = budgets[uni(0, 3)];
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in));
  }
}

// Partial sources on 2-3 holder hosts (planner version 13: chains across
// them, scratch into scratch, more than 4 stages): the statistics of two
// tensors of one shape and different element sizes (grouped, scaled by
// bytes per element; the chain's choice depends on them) against the
// enumeration of every piece.
TEST(PlanStatsFastPath, PsumChainFleetsMatchTheEnumeration) {
  std::mt19937_64 rng(20261129);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int cases = scaled_cases(120);
  int chained = 0;
  for (int c = 0; c < cases; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const int64_t holder_hosts = uni(2, 3), holders = uni(holder_hosts, 6);
    const int64_t receiving = uni(1, 3), members = uni(1, 3);
    PlanInput in;
    for (int64_t d = 0; d < holders; ++d) {
      const auto h = static_cast<int32_t>(d < holder_hosts ? d : uni(0, holder_hosts - 1));
      in.topology.add({d, h, h, 0});
    }
    for (int64_t i = 0; i < receiving * members; ++i) {
      const auto h = static_cast<int32_t>(holder_hosts + i / members);
      in.topology.add({holders + i, h, h, 0});
    }
    const int rank = static_cast<int>(uni(1, 2));
    std::vector<int64_t> shape;
    for (int d = 0; d < rank; ++d) shape.push_back(rank == 1 ? uni(2000, 200000) : uni(40, 400));
    NamedSharding src = named(mesh({"a"}, {holders}, 0),
                              std::vector<std::vector<std::string>>(static_cast<size_t>(rank)));
    src.partial_axes = {"a"};
    std::vector<std::vector<std::string>> dst_dims(static_cast<size_t>(rank));
    if (members > 1 && uni(0, 1)) dst_dims[static_cast<size_t>(uni(0, rank - 1))] = {"k"};
    const FleetLayouts f{shape, src,
                         named(mesh({"r", "k"}, {receiving, members}, holders), dst_dims)};
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF64};
    add_tensors(in, f, {dtypes[uni(0, 2)], dtypes[uni(0, 2)]});
    in.options.split_min_bytes = 256;
    in.options.alpha_seconds = uni(0, 1) ? 0 : 5e-6;
    const int64_t budgets[] = {0, 16000, 64000, int64_t{1} << 30};
    in.options.staging_budget_bytes = budgets[uni(0, 3)];
    ASSERT_NO_FATAL_FAILURE(check_fast_path(in));
    const PlanStats st = run_stats(in, true, true).st;
    chained += st.stages >= 5;
  }
  std::printf("%d of %d psum fleets in 5 stages or more (chains)\n", chained, cases);
  EXPECT_GT(chained, cases / 4) << "cases that chain across 2 or more holder hosts";
}

// A region no source device holds: both ways report the piece the
// enumeration meets first (entry order), with the same message.
TEST(PlanStatsFastPath, UncoveredRegionIsReportedAsTheEnumerationReportsIt) {
  const std::vector<int64_t> shape = {8, 6};
  auto box = [](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    return testing::make_box({{r0, r1}, {c0, c1}});
  };
  PlanInput in;
  for (int64_t d = 0; d < 8; ++d)
    in.topology.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d / 2), 0});
  TensorSpec t;
  t.name = "w";
  t.shape = shape;
  t.dtype = DType::kF32;
  // Rows 4..8, columns 3..6 are held by nobody.
  t.src = Layout::from_boxes(shape, {{0, 0, box(0, 4, 0, 6)}, {1, 0, box(4, 8, 0, 3)}}, 1,
                             ReduceOp::kSum, "w.src");
  t.dst = Layout::from_named(named(mesh({"r", "k"}, {3, 2}, 2), {{"k"}, {}}), shape, "w.dst");
  in.tensors.push_back(std::move(t));
  std::string fast, ref;
  try {
    (void)run_stats(in, true, false);
  } catch (const Error& e) {
    fast = e.what();
  }
  try {
    (void)run_stats(in, true, true);
  } catch (const Error& e) {
    ref = e.what();
  }
  EXPECT_NE(ref.find("is held by no source device"), std::string::npos) << ref;
  EXPECT_EQ(fast, ref);
}

// FSDP(N) (4 rows per device) -> DP(N/8) x TP8 (a column block per device
// of each host's 8) on the same N devices, relays off: every device takes
// its column block of every device's rows, so each sends to and receives
// from the N - 1 others, one stream each (hand-computed: N x (N - 1)
// messages without a budget). N = 200 spans four words of the stage-0
// pair rows and counts of 8 bits (the columns' counts are bit-sliced).
TEST(PlanStatsStreams, AllToAllDevicesCountEveryPeer) {
  constexpr int64_t n = 200;
  PlanInput in;
  for (int64_t d = 0; d < n; ++d)
    in.topology.add({d, static_cast<int32_t>(d), static_cast<int32_t>(d / 8), 0});
  const FleetLayouts f{{4 * n, 64},
                       named(mesh({"fsdp"}, {n}, 0), {{"fsdp"}, {}}),
                       named(mesh({"dp", "tp"}, {n / 8, 8}, 0), {{}, {"tp"}})};
  add_tensors(in, f, {DType::kBF16});
  in.options.relays = false;
  in.options.staging_budget_bytes = 0;
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "every piece enumerated" : "per-cell arithmetic");
    const StatsRun r = run_stats(in, true, reference);
    ASSERT_EQ(r.st.per_device.size(), static_cast<size_t>(n));
    for (const DeviceTraffic& t : r.st.per_device) {
      EXPECT_EQ(t.send_messages, n - 1) << "device " << t.device;
      EXPECT_EQ(t.recv_messages, n - 1) << "device " << t.device;
    }
    EXPECT_EQ(r.st.messages, n * (n - 1));
  }
}

// Issue 37 finding 6: all-gathering a 2^62-byte tensor onto 2 devices
// reported network bytes of -2^63 (signed overflow in the statistics) and
// saturated `rounds` silently. Figures that fit are exact; one that does not
// is kOverflow naming it; rounds past 2^31 - 1 name the budget.
TEST(PlanStatsOverflow, HugeAllGatherIsExactOrAnErrorNamingTheFigure) {
  const int64_t n = int64_t{1} << 60;  // f32: 2^62 bytes
  auto a = testing::mesh_1d({0, 1});
  auto b = testing::mesh_1d({2, 3});
  auto replicated = [](std::shared_ptr<Mesh> m) {
    return testing::sharding(std::move(m), std::vector<std::vector<std::string>>(1));
  };
  auto expect_error = [](const PlanInput& in, ErrorCode code, const std::string& field,
                         const std::string& detail) {
    try {
      make_plan(in, {PlanScope::kGlobal});
      ADD_FAILURE() << "planned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_NE(std::string(e.detail()).find(detail), std::string::npos) << e.what();
    }
  };
  {
    // In place: each device takes in the other's half, 2^61 bytes; 2^62 in all.
    PlanInput in;
    in.tensors.push_back(
        testing::tensor("huge", {n}, DType::kF32, testing::sharding(a, {{"x"}}), replicated(a)));
    in.options.staging_budget_bytes = 0;
    const Plan plan = make_plan(in, {PlanScope::kGlobal});
    EXPECT_EQ(plan.stats().network_bytes, int64_t{1} << 62);
    EXPECT_EQ(plan.stats().max_recv_bytes, int64_t{1} << 61);
    EXPECT_EQ(plan.stats().local_bytes, int64_t{1} << 62);
    EXPECT_EQ(plan.stats().lower_bound_network_bytes, int64_t{1} << 62);
    EXPECT_GT(plan.stats().cost_seconds, 0);
    // Under the default 1 GiB budget that is 2^31 rounds: never saturated.
    in.options.staging_budget_bytes = int64_t{1} << 30;
    expect_error(in, ErrorCode::kOverflow, "stats.rounds", "options.staging_budget_bytes");
  }
  {
    // Onto two other devices: each takes in 2^62 bytes, 2^63 in all.
    PlanInput in;
    in.tensors.push_back(
        testing::tensor("huge", {n}, DType::kF32, testing::sharding(a, {{"x"}}), replicated(b)));
    in.options.staging_budget_bytes = 0;
    for (bool relays : {true, false}) {
      in.options.relays = relays;
      try {
        const Plan plan = make_plan(in, {PlanScope::kGlobal});
        ADD_FAILURE() << "network bytes " << plan.stats().network_bytes;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kOverflow) << e.what();
        EXPECT_TRUE(e.field().starts_with("stats.")) << e.what();
        EXPECT_NE(std::string(e.detail()).find("exceeds 2^63 - 1"), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace reshard
