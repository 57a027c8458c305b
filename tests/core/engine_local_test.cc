// The engine over the `local` transport (Engine::execute with
// kAllProcesses): whole plans in one process, round by round, on any number
// of threads; the thread pool; the whole-plan schedule; and bad inputs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/layout_helpers.h"
#include "core/random_cases.h"
#include "exec/engine/direct_copies.h"
#include "exec/schedule/engine_schedule.h"
#include "plan/plan_builder.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/numeric.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "test_scale.h"

namespace reshard {
namespace {

using testing::mesh_1d;
using testing::sharding;
using testing::tensor;

// Every device on its own process: every piece between two devices is a
// message of the plan, with a round.
void one_process_per_device(PlanInput& in, int64_t devices) {
  for (int64_t d = 0; d < devices; ++d) in.topology.add({d, static_cast<int32_t>(d), 0, 0});
}

ExecuteStats run_local(const Plan& plan, std::span<const TensorBuffers> views, int32_t threads) {
  Engine engine(make_local_transport());
  ExecuteOptions o;
  o.threads = threads;
  return engine.execute(plan, kAllProcesses, views, o);
}

// The plan executed whole on each thread count gives the oracle's values,
// the same bytes every time.
void expect_oracle_values_on(const Plan& plan, std::initializer_list<int32_t> thread_counts) {
  std::vector<std::vector<std::vector<std::byte>>> first;
  for (int32_t threads : thread_counts) {
    OracleBuffers buffers = fill_sources(plan);
    const std::vector<TensorBuffers> views = buffers.views();
    run_local(plan, views, threads);
    const OracleReport report = check_destinations(plan, buffers);
    ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches, threads " << threads;
    if (first.empty()) {
      first = buffers.dst;
    } else {
      EXPECT_EQ(first, buffers.dst) << "threads " << threads;
    }
  }
}

// Invariant: random plans (several processes, staging budgets that cut
// messages into rounds, partial sources and destinations) executed whole by
// the engine give the oracle's values, and identical bytes for 1, 3 and
// every hardware thread.
TEST(EngineLocal, RandomWholePlansMatchOracleForAnyThreadCount) {
  int64_t multi_round = 0;
  for (int c = 0; c < scaled_cases(300); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    testing::CaseGen gen(91000 + static_cast<uint64_t>(c), {5, 32, 3, c % 2 ? 9 : 40, true, true});
    const Plan plan = make_plan(gen.input());
    multi_round += plan.stats().rounds > 1;
    std::vector<std::vector<std::vector<std::vector<std::byte>>>> results;
    for (int32_t threads : {1, 3, 0}) {
      OracleBuffers buffers = fill_sources(plan);
      const std::vector<TensorBuffers> views = buffers.views();
      run_local(plan, views, threads);
      const OracleReport report = check_destinations(plan, buffers);
      ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches, threads " << threads;
      results.push_back(buffers.dst);
    }
    ASSERT_EQ(results[0], results[1]);
    ASSERT_EQ(results[0], results[2]);
  }
  EXPECT_GT(multi_round, least_covered(20))
      << "the generator must exercise plans of several rounds";
}

// Values whose sum depends on the order of the summands: f32 2^24 + 1 + 1
// is 2^24 in summand order (each +1 a tie rounding to even) and 2^24 + 2
// otherwise; bf16 1 + 2^-8 + 2^-8 is 1 + 2^-7 accumulated in f32 and
// rounded once, 1 if rounded after each add.
std::vector<std::byte> order_sensitive(DType dtype, int32_t summand, int64_t n) {
  std::vector<std::byte> out(static_cast<size_t>(n * dtype_size(dtype)));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::kF32) {
      const float v = summand == 0 ? 16777216.0f : 1.0f;
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      const uint16_t v = numeric::f32_to_bf16(summand == 0 ? 1.0f : std::ldexp(1.0f, -8));
      std::memcpy(out.data() + i * 2, &v, 2);
    }
  }
  return out;
}

// Invariant: reductions keep the summand order and round once when a
// destination entry's contributions arrive over many rounds (a tight
// staging budget; each device its own process, so every summand is a
// message): the result equals that of the one-round plan bit for bit, for
// every thread count. Every contribution of a whole plan reads a source
// buffer, so each entry is reduced in one pass over all its summands, in
// the thread's scratch: no f32 accumulator is kept between rounds.
TEST(EngineLocal, ReductionsOverManyRoundsKeepSummandOrderAndRoundOnce) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<std::vector<std::byte>> outputs;
    for (int64_t budget : {int64_t{0}, int64_t{4096}}) {
      PlanInput in;
      one_process_per_device(in, 6);
      in.options.staging_budget_bytes = budget;
      // Summand i on device {4, 0, 2}[i]; destination rows on devices 1, 3, 5.
      in.tensors.push_back(tensor("s", {24, 256}, dtype,
                                  sharding(mesh_1d({4, 0, 2}), {{}, {}}, {"x"}),
                                  sharding(mesh_1d({1, 3, 5}), {{"x"}, {}})));
      const Plan plan = make_plan(in);
      if (budget > 0) {
        ASSERT_GT(plan.stats().rounds, 3);
      }
      const TensorSpec& t = plan.tensors()[0];
      std::vector<std::vector<std::byte>> src;
      for (size_t e = 0; e < t.src.num_entries(); ++e) {
        src.push_back(order_sensitive(dtype, t.src.summand(e), t.src.box(e).volume()));
      }
      for (int32_t threads : {1, 4}) {
        std::vector<std::vector<std::byte>> dst;
        std::vector<TensorBuffers> views(1);
        for (auto& s : src) views[0].src.push_back({s.data(), static_cast<int64_t>(s.size())});
        for (size_t e = 0; e < t.dst.num_entries(); ++e) {
          dst.emplace_back(static_cast<size_t>(t.dst.box(e).volume() * dtype_size(dtype)),
                           std::byte{0x5a});
        }
        for (auto& d : dst) views[0].dst.push_back({d.data(), static_cast<int64_t>(d.size())});
        const ExecuteStats stats = run_local(plan, views, threads);
        EXPECT_EQ(stats.accumulator_bytes, 0);
        std::vector<std::byte> all;
        for (auto& d : dst) all.insert(all.end(), d.begin(), d.end());
        outputs.push_back(all);
      }
    }
    ASSERT_EQ(outputs.size(), 4u);
    for (size_t i = 1; i < outputs.size(); ++i) EXPECT_EQ(outputs[0], outputs[i]) << i;
    // And the value is the summand-order one.
    if (dtype == DType::kF32) {
      float v = 0;
      std::memcpy(&v, outputs[0].data(), 4);
      EXPECT_EQ(v, 16777216.0f);
    } else {
      uint16_t v = 0;
      std::memcpy(&v, outputs[0].data(), 2);
      EXPECT_EQ(numeric::bf16_to_f32(v), 1.0f + std::ldexp(1.0f, -7));
    }
  }
}

// Invariant: the whole-plan schedule holds every piece once, its direct
// copies in ascending round (local pieces in the first round of stage 0's
// messages, see SlicesOfOneSourceRowAreInterleavedInSourceOrder) and its
// reduction groups in ascending round, each group one destination entry's
// contributions of one round in summand order.
TEST(EngineLocal, WholeScheduleIsOrderedByRound) {
  PlanInput in;
  one_process_per_device(in, 8);
  in.options.staging_budget_bytes = 1000;
  in.tensors.push_back(tensor("copy", {64, 40}, DType::kF32,
                              sharding(mesh_1d({0, 1, 2, 3}), {{"x"}, {}}),
                              sharding(mesh_1d({0, 1, 4, 5, 6, 7}), {{}, {"x"}})));
  in.tensors.push_back(tensor("sum", {16, 30}, DType::kF16,
                              sharding(mesh_1d({0, 1, 2}), {{}, {}}, {"x"}),
                              sharding(mesh_1d({2, 3}), {{"x"}, {}})));
  const Plan plan = make_plan(in);
  ASSERT_GT(plan.stats().rounds, 2);
  const engine_detail::Schedule s = engine_detail::build_whole_schedule(plan);
  size_t pieces = 0;
  for (const auto& [p, part] : plan.parts()) pieces += part.local.size() + part.recv_pieces.size();
  EXPECT_EQ(s.direct.size() + s.contributions.size(), pieces);
  EXPECT_TRUE(s.messages.empty());
  for (size_t i = 1; i < s.direct.size(); ++i) EXPECT_LE(s.direct[i - 1].round, s.direct[i].round);
  size_t covered = 0;
  for (size_t r = 0; r < s.direct_rounds.size(); ++r) {
    if (r > 0) {
      EXPECT_LT(s.direct_rounds[r - 1].round, s.direct_rounds[r].round);
    }
    EXPECT_EQ(s.direct_rounds[r].begin, covered);
    covered = s.direct_rounds[r].end;
  }
  EXPECT_EQ(covered, s.direct.size());
  EXPECT_GT(s.direct_rounds.size(), 2u);
  std::set<std::pair<size_t, int64_t>> seen;
  size_t contributions = 0;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const engine_detail::ReduceGroup& group = s.groups[g];
    if (g > 0) {
      EXPECT_LE(s.groups[g - 1].round, group.round);
    }
    EXPECT_TRUE(seen.insert({group.acc, group.round}).second)
        << "two groups of one entry and round";
    for (size_t i = group.begin; i < group.end; ++i) {
      EXPECT_EQ(s.contributions[i].acc, group.acc);
      EXPECT_EQ(s.contributions[i].ready, group.round);
      if (i > group.begin) {
        EXPECT_LE(s.contributions[i - 1].summand, s.contributions[i].summand);
      }
    }
    contributions += group.end - group.begin;
  }
  EXPECT_EQ(contributions, s.contributions.size());
}

// Invariant: direct copies that read column slices of the same source rows
// (row-sharded sources to column-sharded destinations, even and uneven
// splits, rank 2 and 3; runs of 1 KiB or more two to four per row, or any
// number where they abut, make up whole source rows and are at most 16 KiB
// long) form interleaved
// groups (DirectCopy::interleave):
// consecutive copies of one round, source entry and stage, in increasing
// source order, whose first runs lie within one source row; every copy of
// the schedule stays once. A source's local slice (a local piece) runs in
// the round of the other slices (whole-plan schedules put local pieces in
// the first round of stage 0), so that its group has no hole. Executed (1,
// 2 and 3 threads; 9 MiB, so that the copies stream and groups are cut
// into run ranges across threads), the values are the oracle's.
TEST(EngineLocal, SlicesOfOneSourceRowAreInterleavedInSourceOrder) {
  auto grid = std::make_shared<Mesh>();
  grid->axis_names = {"a", "b"};
  grid->shape = {2, 4};
  grid->devices = {0, 1, 2, 3, 4, 5, 6, 7};
  PlanInput in;
  in.tensors.push_back(tensor("even", {2048, 2304}, DType::kBF16,
                              sharding(mesh_1d({0, 1, 2, 3}), {{"x"}, {}}),
                              sharding(mesh_1d({0, 1, 2, 3, 4, 5, 6, 7, 8}), {{}, {"x"}})));
  in.tensors.push_back(tensor("uneven", {101, 203}, DType::kBF16,
                              sharding(mesh_1d({0, 1, 2}), {{"x"}, {}}),
                              sharding(mesh_1d({3, 4, 5, 6, 7}), {{}, {"x"}})));
  in.tensors.push_back(tensor("rank3", {4, 30, 48}, DType::kF32,
                              sharding(mesh_1d({0, 1}), {{"x"}, {}, {}}),
                              sharding(grid, {{}, {"a"}, {"b"}})));
  // Runs of 2 KiB: two per source row are interleaved; eight that make up
  // whole rows (one of them each source's local slice) too; eight of a
  // source replicated twice, each replica read for some of the slices of
  // its rows only, are not.
  in.tensors.push_back(tensor("long_few", {64, 1024}, DType::kF32,
                              sharding(mesh_1d({0, 1}), {{"x"}, {}}),
                              sharding(mesh_1d({2, 3}), {{}, {"x"}})));
  in.tensors.push_back(tensor("long_many", {16, 4096}, DType::kF32,
                              sharding(mesh_1d({0, 1}), {{"x"}, {}}),
                              sharding(mesh_1d({0, 1, 2, 3, 4, 5, 6, 7}), {{}, {"x"}})));
  in.tensors.push_back(tensor("long_holes", {16, 8192}, DType::kF32,
                              sharding(testing::mesh({"x", "r"}, {2, 2}, 0), {{"x"}, {}}),
                              sharding(testing::mesh({"x"}, {16}, 4), {{}, {"x"}})));
  // Eight 32 KiB runs that make up whole rows: long reads each, not
  // interleaved.
  in.tensors.push_back(tensor("very_long", {4, 65536}, DType::kF32,
                              sharding(mesh_1d({0, 1}), {{"x"}, {}}),
                              sharding(mesh_1d({0, 1, 2, 3, 4, 5, 6, 7}), {{}, {"x"}})));
  const Plan plan = make_plan(in);
  const engine_detail::Schedule s = engine_detail::build_whole_schedule(plan);
  std::set<const Piece*> pieces;
  for (const engine_detail::DirectCopy& d : s.direct) {
    EXPECT_TRUE(pieces.insert(d.piece).second) << "a copy twice";
  }
  size_t expected = 0;
  for (const auto& [p, part] : plan.parts())
    expected += part.local.size() + part.recv_pieces.size();
  EXPECT_EQ(pieces.size(), expected);
  auto desc = [&](const engine_detail::DirectCopy& d) {
    const Piece& p = *d.piece;
    return make_copy_desc(plan.region(*d.part, p), plan.source_box(p, d.stage),
                          plan.tensors()[p.tensor].dst.box(p.dst_entry));
  };
  // Each copy's descriptor (kept apart, in the copies' order) is the one
  // its boxes give.
  ASSERT_EQ(s.direct_descs.size(), s.direct.size());
  for (size_t i = 0; i < s.direct.size(); ++i) {
    const CopyDesc want = desc(s.direct[i]);
    const CopyDesc& got = *s.direct[i].desc;
    EXPECT_EQ(s.direct[i].desc, &s.direct_descs[i]);
    ASSERT_EQ(got.rank, want.rank) << "copy " << i;
    EXPECT_EQ(got.src_offset, want.src_offset) << "copy " << i;
    EXPECT_EQ(got.dst_offset, want.dst_offset) << "copy " << i;
    for (int k = 0; k < got.rank; ++k) {
      EXPECT_EQ(got.extent[k], want.extent[k]) << "copy " << i;
      EXPECT_EQ(got.src_stride[k], want.src_stride[k]) << "copy " << i;
      EXPECT_EQ(got.dst_stride[k], want.dst_stride[k]) << "copy " << i;
    }
  }
  const size_t long_many = 4;
  const size_t long_holes = 5;
  const size_t very_long = 6;
  // Both replicas of long_holes' source rows are read (else its rows have
  // no holes and the case tests nothing).
  std::set<uint32_t> replicas_read;
  for (const engine_detail::DirectCopy& d : s.direct) {
    EXPECT_GE(d.round, 0) << "a local piece outside the messages' round";
    if (d.piece->tensor == long_holes) replicas_read.insert(d.piece->src_entry);
  }
  EXPECT_EQ(replicas_read.size(), 4u);
  std::vector<size_t> grouped(in.tensors.size(), 0);
  for (size_t i = 0; i < s.direct.size(); ++i) {
    const size_t n = s.direct[i].interleave;
    if (n < 2) continue;
    ASSERT_LE(i + n, s.direct.size());
    const engine_detail::DirectCopy& first = s.direct[i];
    const CopyDesc d0 = desc(first);
    const int64_t row = d0.src_stride[d0.rank - 2];
    bool whole_rows = true;
    for (size_t k = i + 1; k < i + n; ++k) {
      const engine_detail::DirectCopy& c = s.direct[k];
      EXPECT_EQ(c.interleave, 0u);
      EXPECT_EQ(c.round, first.round);
      EXPECT_EQ(c.stage, first.stage);
      EXPECT_EQ(c.piece->tensor, first.piece->tensor);
      EXPECT_EQ(c.piece->src_entry, first.piece->src_entry);
      const CopyDesc d = desc(c);
      EXPECT_TRUE(copy_descs_interleavable(d0, d));
      EXPECT_GT(d.src_offset, desc(s.direct[k - 1]).src_offset) << "not in source order";
      EXPECT_LE(d.src_offset + copy_desc_run_length(d) - d0.src_offset, row)
          << "first runs beyond one source row";
      const CopyDesc before = desc(s.direct[k - 1]);
      whole_rows = whole_rows && d.src_offset == before.src_offset + copy_desc_run_length(before);
    }
    const CopyDesc last = desc(s.direct[i + n - 1]);
    whole_rows = whole_rows && last.src_offset + copy_desc_run_length(last) - d0.src_offset == row;
    const int64_t elem = dtype_size(plan.tensors()[first.piece->tensor].dtype);
    if (copy_desc_run_length(d0) * elem >= 1024 && n > 4) {
      EXPECT_TRUE(whole_rows) << "more than four long runs interleaved, with holes in the rows";
      EXPECT_LE(copy_desc_run_length(d0) * elem, 16 << 10) << "more than four runs of 16+ KiB";
    }
    grouped[first.piece->tensor] += n;
  }
  // Every tensor has its source rows sliced by several destinations; long
  // runs with holes are interleaved in small groups only.
  for (size_t t = 0; t < grouped.size(); ++t) {
    if (t == long_holes || t == very_long) continue;
    EXPECT_GE(grouped[t], 4u) << "tensor " << t;
  }
  EXPECT_EQ(grouped[long_many], 16u) << "whole rows of 2 KiB runs not interleaved";
  EXPECT_EQ(grouped[long_holes], 0u) << "eight 2 KiB runs per row, with holes, interleaved";
  EXPECT_EQ(grouped[very_long], 0u) << "eight 32 KiB runs per row interleaved";
  expect_oracle_values_on(plan, {1, 2, 3});
}

// A message between two devices of one process is a direct copy made from
// its receive; its send, where it equals the receive (pieces included), is
// checked as the receive. A send that differs from every receive is
// checked on its own: a damaged one is refused, naming it.
TEST(EngineLocal, SendsBetweenDevicesOfOneProcessAreCheckedUnlessTheyEqualTheReceive) {
  PlanInput in;
  for (int64_t d = 0; d < 4; ++d) in.topology.add({d, 0, 0, static_cast<int32_t>(d)});
  in.tensors.push_back(tensor("t", {32, 24}, DType::kF32,
                              sharding(mesh_1d({0, 1, 2, 3}), {{"x"}, {}}),
                              sharding(mesh_1d({0, 1, 2, 3}), {{}, {"x"}})));
  const Plan plan = make_plan(in);
  TransportInfo info;
  info.memory = MemoryKind::kCuda;
  info.stream_ordered = true;
  const ExecuteOptions options;
  const ProcessPart& part = plan.part(0);
  ASSERT_FALSE(part.sends.empty());
  ASSERT_EQ(part.send_pieces.size(), part.recv_pieces.size());
  const engine_detail::Schedule s = engine_detail::build_schedule(plan, 0, part, info, options);
  EXPECT_TRUE(s.messages.empty());
  EXPECT_EQ(s.direct.size(), part.local.size() + part.recv_pieces.size());
  const auto refused = [&](const Plan& damaged, const std::string& field) {
    try {
      engine_detail::build_schedule(damaged, 0, damaged.part(0), info, options);
      ADD_FAILURE() << "a damaged " << field << " was not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  // A piece of the last send names a tensor the plan lacks.
  Plan damaged = plan;
  ProcessPart& edited = Plan::Builder::parts(damaged).at(0);
  const size_t bad = edited.sends.back().first_piece;
  edited.send_pieces[bad].tensor = 7;
  refused(damaged, "send_pieces[" + std::to_string(bad) + "]: tensor or entry index out of range");
  // The same damage on the receive side is refused too.
  Plan damaged_recv = plan;
  ProcessPart& edited_recv = Plan::Builder::parts(damaged_recv).at(0);
  const size_t bad_recv = edited_recv.recvs.back().first_piece;
  edited_recv.recv_pieces[bad_recv].tensor = 7;
  refused(damaged_recv,
          "recv_pieces[" + std::to_string(bad_recv) + "]: tensor or entry index out of range");
}

// Invariant: destination entries of a tensor that hold the same box are
// written once by pieces (or reductions) and the others are whole copies
// of that first entry after the last round (Schedule::replicas); the
// values are the oracle's for every thread count. Cases: column halves to
// 4 replicas, rows replicated over the second axis of a 2x3 mesh (two
// boxes, three replicas each), a bf16 partial sum to 3 replicas (reduced
// once), and a partial destination (whose replicas hold different
// summands, so nothing is copied).
TEST(EngineLocal, ReplicatedDestinationsAreGatheredOnceThenCopied) {
  auto grid = std::make_shared<Mesh>();
  grid->axis_names = {"a", "b"};
  grid->shape = {2, 3};
  grid->devices = {6, 7, 8, 9, 10, 11};
  PlanInput in;
  in.tensors.push_back(tensor("halves", {64, 96}, DType::kF32,
                              sharding(mesh_1d({0, 1}), {{}, {"x"}}),
                              sharding(mesh_1d({2, 3, 4, 5}), {{}, {}})));
  in.tensors.push_back(tensor("rows", {40, 50}, DType::kF16,
                              sharding(mesh_1d({0, 1, 2, 3}), {{}, {"x"}}),
                              sharding(grid, {{"a"}, {}})));
  in.tensors.push_back(tensor("psum", {24, 700}, DType::kBF16,
                              sharding(mesh_1d({0, 1, 2, 3}), {{}, {}}, {"x"}),
                              sharding(mesh_1d({4, 5, 6}), {{}, {}})));
  in.tensors.push_back(tensor("partial_dst", {16, 16}, DType::kF32,
                              sharding(mesh_1d({0, 1}), {{"x"}, {}}),
                              sharding(grid, {{}, {}}, {"b"})));
  const Plan plan = make_plan(in);
  const engine_detail::Schedule s = engine_detail::build_whole_schedule(plan);
  std::vector<int> replicas(in.tensors.size(), 0);
  std::set<std::pair<uint32_t, uint32_t>> copied;
  for (const engine_detail::ReplicaCopy& r : s.replicas) {
    ++replicas[r.tensor];
    const Layout& dst = plan.tensors()[r.tensor].dst;
    EXPECT_EQ(dst.box(r.from), dst.box(r.to));
    EXPECT_LT(r.from, r.to);
    EXPECT_EQ(r.bytes, dst.box(r.to).volume() * dtype_size(plan.tensors()[r.tensor].dtype));
    copied.insert({r.tensor, r.to});
  }
  EXPECT_EQ(replicas, (std::vector<int>{3, 4, 2, 0}));
  for (const engine_detail::DirectCopy& d : s.direct) {
    EXPECT_FALSE(copied.contains({d.piece->tensor, d.piece->dst_entry}))
        << "a replica is also gathered";
  }
  for (const engine_detail::Contribution& c : s.contributions) {
    EXPECT_FALSE(copied.contains({c.tensor, c.dst_entry})) << "a replica is also reduced";
  }
  expect_oracle_values_on(plan, {1, 3});
}

// Invariant: reductions of entries larger than one cache chunk, reduced
// chunk by chunk (rank 1 to 3, a chunk inside the rows of the innermost dim
// or spanning several of them, summands covering parts of the entry), keep
// the summand order and round once: order-sensitive values give the
// summand-order result in every element, for 1 and 3 threads, and the
// oracle's values elsewhere.
TEST(EngineLocal, ChunkedReductionsKeepSummandOrderAndRoundOnce) {
  const std::vector<std::vector<int64_t>> shapes = {{3 * 9000}, {3 * 40, 3001}, {3, 7, 1203}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const auto& shape : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " rank " + std::to_string(shape.size()));
      PlanInput in;
      std::vector<std::vector<std::string>> src_dims(shape.size());
      src_dims.back() = {"y"};  // summands split along the last dim: partial regions
      std::vector<std::vector<std::string>> dst_dims(shape.size());
      dst_dims[0] = {"x"};
      auto src_mesh = std::make_shared<Mesh>();
      src_mesh->axis_names = {"x", "y"};
      src_mesh->shape = {3, 2};
      src_mesh->devices = {5, 0, 3, 1, 4, 2};
      in.tensors.push_back(tensor("s", shape, dtype, sharding(src_mesh, src_dims, {"x"}),
                                  sharding(mesh_1d({6, 7, 8}), dst_dims)));
      const Plan plan = make_plan(in);
      const TensorSpec& t = plan.tensors()[0];
      for (int32_t threads : {1, 3}) {
        std::vector<std::vector<std::byte>> src;
        for (size_t e = 0; e < t.src.num_entries(); ++e) {
          src.push_back(order_sensitive(dtype, t.src.summand(e), t.src.box(e).volume()));
        }
        std::vector<std::vector<std::byte>> dst;
        std::vector<TensorBuffers> views(1);
        for (auto& b : src) views[0].src.push_back({b.data(), static_cast<int64_t>(b.size())});
        for (size_t e = 0; e < t.dst.num_entries(); ++e) {
          dst.emplace_back(static_cast<size_t>(t.dst.box(e).volume() * dtype_size(dtype)),
                           std::byte{0x5a});
        }
        for (auto& b : dst) views[0].dst.push_back({b.data(), static_cast<int64_t>(b.size())});
        run_local(plan, views, threads);
        for (const auto& b : dst) {
          for (size_t i = 0; i < b.size(); i += static_cast<size_t>(dtype_size(dtype))) {
            if (dtype == DType::kF32) {
              float v = 0;
              std::memcpy(&v, b.data() + i, 4);
              ASSERT_EQ(v, 16777216.0f) << "element " << i / 4;
            } else {
              uint16_t v = 0;
              std::memcpy(&v, b.data() + i, 2);
              ASSERT_EQ(numeric::bf16_to_f32(v), 1.0f + std::ldexp(1.0f, -7))
                  << "element " << i / 2;
            }
          }
        }
        OracleBuffers buffers = fill_sources(plan);
        const std::vector<TensorBuffers> oracle_views = buffers.views();
        run_local(plan, oracle_views, threads);
        const OracleReport report = check_destinations(plan, buffers);
        ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches, threads " << threads;
      }
    }
  }
}

// Invariant: a mean (sum, then one division by the number of summands)
// reduced chunk by chunk, into a sharded and into a replicated destination,
// gives the oracle's values for 1 and 3 threads.
TEST(EngineLocal, ChunkedMeanMatchesOracle) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    PlanInput in;
    in.tensors.push_back(tensor("rows", {3 * 40, 3001}, dtype,
                                sharding(mesh_1d({0, 1, 2, 3}), {{}, {}}, {"x"}, ReduceOp::kMean),
                                sharding(mesh_1d({4, 5, 6}), {{"x"}, {}})));
    in.tensors.push_back(tensor("replicated", {9000}, dtype,
                                sharding(mesh_1d({0, 1, 2}), {{}}, {"x"}, ReduceOp::kMean),
                                sharding(mesh_1d({3, 4}), {{}})));
    const Plan plan = make_plan(in);
    for (int32_t threads : {1, 3}) {
      OracleBuffers buffers = fill_sources(plan);
      const std::vector<TensorBuffers> views = buffers.views();
      run_local(plan, views, threads);
      const OracleReport report = check_destinations(plan, buffers);
      ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches, threads " << threads;
    }
  }
}

// Invariant: the pool runs every task once, on several threads when asked
// (the caller is worker 0 and alone calls `after`), on the caller alone
// for one thread, and rethrows a task's exception after the others
// stopped; it is reusable after an exception.
TEST(EngineLocal, WorkerPoolRunsEveryTaskOnceAndRethrows) {
  for (int threads : {1, 4}) {
    engine_detail::WorkerPool pool(threads);
    for (int round = 0; round < 3; ++round) {
      std::vector<std::atomic<int>> runs(200);
      std::mutex mutex;
      std::set<int> workers;
      std::atomic<int> afters{0};
      const std::thread::id caller = std::this_thread::get_id();
      std::atomic<bool> after_elsewhere{false};
      const std::function<void(size_t, int)> task = [&](size_t i, int worker) {
        ++runs[i];
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        std::lock_guard<std::mutex> lock(mutex);
        workers.insert(worker);
      };
      pool.run(runs.size(), task, [&] {
        ++afters;
        if (std::this_thread::get_id() != caller) after_elsewhere = true;
      });
      for (const auto& r : runs) ASSERT_EQ(r.load(), 1);
      EXPECT_FALSE(after_elsewhere.load());
      EXPECT_GE(afters.load(), 1);
      EXPECT_TRUE(workers.contains(0));
      if (threads == 1) {
        EXPECT_EQ(workers.size(), 1u);
      }
      if (threads == 4) {
        EXPECT_GT(workers.size(), 1u) << "no helper thread took a task";
      }
    }
    const std::function<void(size_t, int)> failing = [](size_t i, int) {
      if (i == 7) throw std::runtime_error("task 7");
    };
    EXPECT_THROW(pool.run(50, failing), std::runtime_error);
    std::atomic<int> count{0};
    pool.run(10, [&](size_t, int) { ++count; });
    EXPECT_EQ(count.load(), 10);
  }
}

// Regression (per-call latency of small executions): run() waited for
// every helper to wake up, even once the calling thread had done every
// task, so on a busy machine a small execution took as long as the
// scheduler needed to run a woken thread. A helper that wakes late now
// skips the run; it still helps later runs.
TEST(EngineLocal, WorkerPoolDoesNotWaitForHelpersThatWakeLate) {
  using Clock = std::chrono::steady_clock;
  engine_detail::WorkerPool pool(2);
  std::atomic<int> wakes{0};
  std::atomic<bool> delayed_done{false};
  pool.on_wake = [&](int) {
    if (wakes++ == 0) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      delayed_done = true;
    }
  };
  std::vector<std::atomic<int>> runs(2);
  std::atomic<int> by_helper{0};
  const auto t0 = Clock::now();
  pool.run(runs.size(), [&](size_t i, int worker) {
    ++runs[i];
    if (worker != 0) ++by_helper;
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
  EXPECT_EQ(by_helper.load(), 0);
  EXPECT_LT(seconds, 1.0) << "run() waited for a helper that had not woken up";
  EXPECT_FALSE(delayed_done.load());
  // Once awake, the helper takes tasks of later runs again.
  while (!delayed_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::set<int> workers;
  std::mutex mutex;
  for (int attempt = 0; attempt < 50 && !workers.contains(1); ++attempt) {
    std::vector<std::atomic<int>> more(64);
    pool.run(more.size(), [&](size_t i, int worker) {
      ++more[i];
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      std::lock_guard<std::mutex> lock(mutex);
      workers.insert(worker);
    });
    for (const auto& r : more) ASSERT_EQ(r.load(), 1);
  }
  EXPECT_TRUE(workers.contains(1)) << "the helper never took a task after waking late";
}

// A transport of one rank that does not hold every process.
class OneRank final : public Transport {
 public:
  TransportInfo info() const override {
    TransportInfo i;
    i.name = "one-rank";
    return i;
  }
  std::unique_ptr<StagingBlock> allocate_staging(int64_t, int32_t, int64_t) override {
    return nullptr;
  }
  std::unique_ptr<TransferBatch> start(std::span<const TransferOp>) override { return nullptr; }
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> r, double) override {
    return {std::vector<std::byte>(r.begin(), r.end())};
  }
  [[noreturn]] void abort(int) noexcept override { std::abort(); }
};

class EngineLocalErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    PlanInput in;
    one_process_per_device(in, 4);
    in.tensors.push_back(tensor("t", {6, 4}, DType::kF32, sharding(mesh_1d({0, 1}), {{"x"}, {}}),
                                sharding(mesh_1d({2, 3}), {{}, {"x"}})));
    plan_ = make_plan(in);
    oracle_ = fill_sources(plan_);
    views_ = oracle_.views();
    before_ = oracle_.dst;
  }

  template <class F>
  void expect_error(F&& call, ErrorCode code, std::vector<std::string> parts) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      for (const std::string& p : parts) {
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
            << "message \"" << e.what() << "\" lacks \"" << p << "\"";
      }
    }
    EXPECT_EQ(oracle_.dst, before_) << "a failed call wrote into a destination";
  }

  Plan plan_;
  OracleBuffers oracle_;
  std::vector<TensorBuffers> views_;
  std::vector<std::vector<std::vector<std::byte>>> before_;
};

TEST_F(EngineLocalErrors, NegativeThreadsNameTheField) {
  Engine engine(make_local_transport());
  ExecuteOptions o;
  o.threads = -1;
  expect_error([&] { engine.execute(plan_, kAllProcesses, views_, o); },
               ErrorCode::kInvalidArgument, {"options.threads", "-1"});
  expect_error([&] { execute_host(plan_, views_, {-3}); }, ErrorCode::kInvalidArgument,
               {"options.threads", "-3"});
}

TEST_F(EngineLocalErrors, LastStageBelowMinusOneNamesTheField) {
  Engine engine(make_local_transport());
  ExecuteOptions o;
  o.last_stage = -2;
  expect_error([&] { engine.execute(plan_, kAllProcesses, views_, o); },
               ErrorCode::kInvalidArgument, {"options.last_stage", "-2"});
  VerifyOptions v;
  v.last_stage = -5;
  expect_error([&] { verify_plan(engine, plan_, kAllProcesses, {}, v); },
               ErrorCode::kInvalidArgument, {"last_stage", "-5"});
}

TEST_F(EngineLocalErrors, AllProcessesNeedsAWholePlanTransport) {
  Engine engine(std::make_unique<OneRank>());
  expect_error([&] { engine.execute(plan_, kAllProcesses, views_); }, ErrorCode::kInvalidArgument,
               {"process", "kAllProcesses", "one-rank"});
}

TEST_F(EngineLocalErrors, PartOfOneProcessIsNotAWholePlan) {
  PlanInput in;
  one_process_per_device(in, 4);
  in.tensors = plan_.tensors();
  const Plan part = make_plan(in, {PlanScope::kProcess, 2, false});
  Engine engine(make_local_transport());
  expect_error([&] { engine.execute(part, kAllProcesses, views_); }, ErrorCode::kInvalidArgument,
               {"plan: lacks the part of process 0", "PlanScope::kAll"});
}

TEST_F(EngineLocalErrors, BuffersAreCheckedBeforeAnythingIsWritten) {
  Engine engine(make_local_transport());
  views_[0].dst[1].bytes -= 4;
  expect_error([&] { engine.execute(plan_, kAllProcesses, views_); }, ErrorCode::kInvalidArgument,
               {"tensors[0].dst[1]", "bytes"});
}

TEST_F(EngineLocalErrors, ValidCallPassesAndReportsLocalBytes) {
  Engine engine(make_local_transport());
  const ExecuteStats stats = engine.execute(plan_, kAllProcesses, views_);
  EXPECT_TRUE(check_destinations(plan_, oracle_).ok());
  EXPECT_EQ(stats.local_bytes, plan_.stats().network_bytes + plan_.stats().local_bytes);
  EXPECT_EQ(stats.messages_sent, 0);
  EXPECT_EQ(stats.staging_bytes, 0);
  EXPECT_TRUE(stats.agreed);  // with itself, on first use
}

// Invariant: the local transport moves nothing itself: one rank holding
// every process, an allgather that returns its own record, and a batch
// with operations refused.
// Invariant: whole-plan schedules come from the engine's cache on later
// executions of an equal plan (its own object, or one planned again) and
// give the oracle's values; a plan with the same fingerprint and an edited
// part is validated afresh (its bad piece refused), never served the
// cached schedule; cache_schedule = false and a cache of 0 entries build
// every time.
TEST(EngineLocal, WholeSchedulesAreCachedForEqualPlansOnly) {
  Engine engine(make_local_transport());
  std::vector<Plan> plans;
  std::vector<PlanInput> inputs;
  for (int c = 0; c < 12; ++c) {
    testing::CaseGen gen(93000 + static_cast<uint64_t>(c), {5, 32, 3, c % 2 ? 9 : 40, true, true});
    inputs.push_back(gen.input());
    plans.push_back(make_plan(inputs.back()));
  }
  ExecuteOptions o;
  o.threads = 2;
  const auto run = [&](const Plan& plan, ExecuteOptions opt) {
    OracleBuffers buffers = fill_sources(plan);
    const std::vector<TensorBuffers> views = buffers.views();
    const ExecuteStats s = engine.execute(plan, kAllProcesses, views, opt);
    const OracleReport report = check_destinations(plan, buffers);
    EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches";
    return s.schedule_cached;
  };
  // Fewer plans than entries (8): first a miss, then hits, interleaved.
  for (size_t k = 0; k < 4; ++k) EXPECT_FALSE(run(plans[k], o)) << k;
  for (size_t k = 0; k < 4; ++k) EXPECT_TRUE(run(plans[k], o)) << k;
  const Plan again = make_plan(inputs[1]);
  EXPECT_TRUE(run(again, o));
  ExecuteOptions uncached = o;
  uncached.cache_schedule = false;
  EXPECT_FALSE(run(plans[2], uncached));
  // More plans than entries: the least recently used are evicted.
  for (size_t k = 4; k < 12; ++k) EXPECT_FALSE(run(plans[k], o)) << k;
  EXPECT_FALSE(run(plans[0], o));
  EXPECT_TRUE(run(plans[11], o));

  // The same fingerprint, an edited part: refused as an uncached plan is.
  Plan edited = plans[11];
  bool changed = false;
  for (auto& [process, part] : Plan::Builder::parts(edited)) {
    std::vector<Piece>& pieces = part.local.empty() ? part.recv_pieces : part.local;
    if (!pieces.empty()) {
      pieces.front().dst_entry = 1u << 30;
      changed = true;
      break;
    }
  }
  ASSERT_TRUE(changed);
  ASSERT_EQ(edited.fingerprint(), plans[11].fingerprint());
  {
    OracleBuffers buffers = fill_sources(edited);
    const std::vector<TensorBuffers> views = buffers.views();
    EXPECT_THROW(engine.execute(edited, kAllProcesses, views, o), Error);
  }
  EXPECT_FALSE(run(plans[11], o)) << "the edited plan's lookup dropped the entry";
  EXPECT_TRUE(run(plans[11], o));

  Engine no_cache(make_local_transport(), EngineOptions{.schedule_cache_entries = 0});
  OracleBuffers buffers = fill_sources(plans[0]);
  const std::vector<TensorBuffers> views = buffers.views();
  for (int i = 0; i < 2; ++i)
    EXPECT_FALSE(no_cache.execute(plans[0], kAllProcesses, views, o).schedule_cached);
}

// Thread ids of this process (Linux: /proc/self/task), empty where unknown.
std::set<std::string> process_threads() {
  std::error_code ec;
  std::set<std::string> ids;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ids.insert(it->path().filename().string());
  return ids;
}

// The thread ids once `done(ids)` holds, waiting up to 5 s for it: a joined
// thread's id leaves /proc/self/task a moment after join() returns (the
// kernel wakes the joiner before it reaps the thread), so a count taken at
// once can still hold a thread that has ended.
template <class Done>
std::set<std::string> threads_once(Done done) {
  std::set<std::string> ids = process_threads();
  for (int i = 0; i < 500 && !done(ids); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ids = process_threads();
  }
  return ids;
}

// The thread ids after one thread has started and ended (so that threads a
// runtime starts with the first one, ThreadSanitizer's background thread,
// are among them) and that thread has left /proc/self/task.
std::set<std::string> threads_before() {
  std::string id;
  std::thread([&id] { id = std::to_string(::gettid()); }).join();
  return threads_once([&](const std::set<std::string>& ids) { return !ids.contains(id); });
}

// Invariant: an engine starts its copy threads once and keeps them between
// executions (the same thread ids; the pool grows when a call asks for
// more threads, and a call asking for fewer uses fewer of them); they end
// with the engine. Every execution matches the oracle.
TEST(EngineLocal, CopyThreadsOutliveAnExecutionAndEndWithTheEngine) {
  const std::set<std::string> before = threads_before();
  if (before.empty()) GTEST_SKIP() << "no /proc/self/task";
  PlanInput in;  // 8 MiB between buffers: above kParallelMinBytes
  in.tensors.push_back(tensor("w", {1024, 2048}, DType::kF32,
                              sharding(mesh_1d({0, 1, 2, 3}), {{"x"}, {}}),
                              sharding(mesh_1d({0, 1, 2, 3}), {{}, {"x"}})));
  const Plan plan = make_plan(in);
  ASSERT_GE(plan.stats().network_bytes + plan.stats().local_bytes,
            engine_detail::kParallelMinBytes);
  {
    Engine engine(make_local_transport());
    const auto run = [&](int32_t threads) {
      OracleBuffers buffers = fill_sources(plan);
      const std::vector<TensorBuffers> views = buffers.views();
      ExecuteOptions o;
      o.threads = threads;
      engine.execute(plan, kAllProcesses, views, o);
      const OracleReport report = check_destinations(plan, buffers);
      EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches, threads " << threads;
    };
    run(3);
    const std::set<std::string> started = process_threads();
    EXPECT_EQ(started.size(), before.size() + 2) << "two helpers started and kept";
    run(3);
    EXPECT_EQ(process_threads(), started) << "the same helpers reused";
    run(2);
    run(1);
    EXPECT_EQ(process_threads(), started) << "fewer threads asked: the pool stays";
    run(4);
    EXPECT_EQ(process_threads().size(), before.size() + 3) << "more threads asked: it grows";
  }
  const auto same = [&](const std::set<std::string>& ids) { return ids == before; };
  EXPECT_EQ(threads_once(same), before) << "the helpers end with the engine";
}

// Regression (per-call latency of small executions): a 2 MiB execution
// woke copy threads (the threshold was 1 MiB), which on a busy machine
// cost more than the copy; below kParallelMinBytes (4 MiB) it runs on the
// calling thread whatever ExecuteOptions::threads asks.
TEST(EngineLocal, SmallExecutionsStartNoCopyThread) {
  const std::set<std::string> before = threads_before();
  if (before.empty()) GTEST_SKIP() << "no /proc/self/task";
  PlanInput in;  // 2 MiB between buffers
  in.tensors.push_back(tensor("w", {512, 1024}, DType::kF32,
                              sharding(mesh_1d({0, 1, 2, 3}), {{"x"}, {}}),
                              sharding(mesh_1d({0, 1, 2, 3}), {{}, {"x"}})));
  const Plan plan = make_plan(in);
  ASSERT_EQ(plan.stats().network_bytes + plan.stats().local_bytes, int64_t{2} << 20);
  Engine engine(make_local_transport());
  for (int i = 0; i < 2; ++i) {
    OracleBuffers buffers = fill_sources(plan);
    const std::vector<TensorBuffers> views = buffers.views();
    ExecuteOptions o;
    o.threads = 4;
    engine.execute(plan, kAllProcesses, views, o);
    const OracleReport report = check_destinations(plan, buffers);
    EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches";
  }
  EXPECT_EQ(process_threads(), before) << "a small execution started copy threads";
}

// Invariant: an engine whose copy threads were started before fork() works
// in the child (the parent's threads do not exist there: it starts its
// own) and is destroyed there without waiting for them.
TEST(EngineLocal, AForkedChildStartsCopyThreadsOfItsOwn) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support threads started after a threaded fork";
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  GTEST_SKIP() << "ThreadSanitizer does not support threads started after a threaded fork";
#endif
#endif
  PlanInput in;  // 8 MiB between buffers: above kParallelMinBytes
  in.tensors.push_back(tensor("w", {1024, 2048}, DType::kF32,
                              sharding(mesh_1d({0, 1, 2, 3}), {{"x"}, {}}),
                              sharding(mesh_1d({0, 1, 2, 3}), {{}, {"x"}})));
  const Plan plan = make_plan(in);
  auto engine = std::make_unique<Engine>(make_local_transport());
  ExecuteOptions o;
  o.threads = 3;
  const auto run = [&] {
    OracleBuffers buffers = fill_sources(plan);
    const std::vector<TensorBuffers> views = buffers.views();
    engine->execute(plan, kAllProcesses, views, o);
    return check_destinations(plan, buffers).ok();
  };
  ASSERT_TRUE(run());  // the helpers exist now
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(60);  // a hang ends the child by SIGALRM
    int code = 1;
    try {
      code = run() && run() ? 0 : 2;
      engine.reset();
    } catch (...) {
      code = 3;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  if (WIFEXITED(status)) {
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1 or 3: threw; 2: wrong data";
  }
  EXPECT_TRUE(run()) << "the parent's engine still works";
}

TEST(EngineLocal, LocalTransportHoldsEveryProcessAndTransfersNothing) {
  auto t = make_local_transport();
  const TransportInfo info = t->info();
  EXPECT_EQ(info.name, "local");
  EXPECT_TRUE(info.whole_plan);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.size, 1);
  EXPECT_EQ(info.memory, MemoryKind::kHost);
  const std::vector<std::byte> record = {std::byte{1}, std::byte{2}};
  const auto all = t->allgather(record, 1);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], record);
  EXPECT_TRUE(t->start({})->test());
  TransferOp op;
  try {
    t->start(std::span<const TransferOp>(&op, 1));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
  }
  auto block = t->allocate_staging(0, 0, 1000);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->bytes(), 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block->data()) % 64, 0u);
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

// Invariant: verify_plan in one process (kAllProcesses) passes random plans
// (partial destinations included) and counts every destination element; on
// the per-process path (process 0 of a one-process plan) it counts the same
// elements and bytes.
TEST(VerifyPlan, WholeAndPerProcessPathsAgree) {
  for (int c = 0; c < 40; ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    testing::CaseGen gen(77000 + static_cast<uint64_t>(c), {4, 16, 2, 12, true, false});
    PlanInput in = gen.input();
    const Plan whole_plan = make_plan(in);
    Engine engine(make_local_transport());
    ExecuteOptions o;
    o.threads = c % 3;
    const OracleReport whole = verify_plan(engine, whole_plan, kAllProcesses, o);
    EXPECT_TRUE(whole.ok()) << whole.mismatches;
    int64_t elements = 0;
    for (const TensorSpec& t : whole_plan.tensors()) {
      for (size_t e = 0; e < t.dst.num_entries(); ++e) elements += t.dst.box(e).volume();
    }
    EXPECT_EQ(whole.elements, elements);
    bool partial_dst = false;
    for (const TensorSpec& t : whole_plan.tensors()) partial_dst = partial_dst || t.dst.partial();
    // One process holding every device: the per-process path.
    in.topology = Topology();
    const Plan one = make_plan(in);
    if (partial_dst) {
      try {
        verify_plan(engine, one, 0, o);
        ADD_FAILURE() << "no error for a partial destination";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
        EXPECT_NE(std::string(e.what()).find("partial destination"), std::string::npos);
      }
      continue;
    }
    const OracleReport part = verify_plan(engine, one, 0, o);
    EXPECT_TRUE(part.ok());
    EXPECT_EQ(part.elements, whole.elements);
    EXPECT_EQ(part.bytes, whole.bytes);
    EXPECT_EQ(part.tensors, whole.tensors);
  }
}

}  // namespace
}  // namespace reshard
