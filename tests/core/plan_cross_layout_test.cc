// Relays across hosts at element granularity (core/src/plan/enumerate/cross_layout.h,
// CrossLayout): the row-major runs a region is cut into, and layouts that
// follow each tensor's shape although tensors of several shapes share one
// Geometry.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "plan/all_to_all_cell.h"
#include "plan/enumerate.h"
#include "random_cases.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "test_scale.h"

namespace reshard {
namespace {

// The row-major index of `at` inside `B`.
int64_t linear_index(const Box& B, const std::vector<int64_t>& at) {
  int64_t x = 0;
  for (int d = 0; d < B.rank; ++d) x = x * B.extent(d) + (at[static_cast<size_t>(d)] - B.lo[d]);
  return x;
}

// Elements [s, e) of a box in row-major order are exactly the union of the
// boxes linear_boxes gives, which are disjoint, inside the box and at most
// 2 rank - 1.
TEST(CrossLayout, LinearBoxesCoverExactlyTheRun) {
  std::mt19937_64 rng(7);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int checked = 0;
  for (int c = 0; c < scaled_cases(3000); ++c) {
    Box B;
    B.rank = static_cast<int>(uni(0, 4));
    for (int d = 0; d < B.rank; ++d) {
      B.lo[d] = uni(0, 5);
      B.hi[d] = B.lo[d] + uni(1, 6);
    }
    const int64_t n = B.volume();
    const int64_t s = uni(0, n), e = uni(s, n);
    std::vector<Box> out;
    planning::linear_boxes(B, s, e, out);
    SCOPED_TRACE("case " + std::to_string(c) + ": " + to_string(B) + " [" + std::to_string(s) +
                 ", " + std::to_string(e) + ")");
    if (s == e) {
      EXPECT_TRUE(out.empty());
      continue;
    }
    EXPECT_LE(static_cast<int>(out.size()), std::max(1, 2 * B.rank - 1));
    std::set<int64_t> seen;
    for (const Box& b : out) {
      ASSERT_EQ(b.rank, B.rank);
      ASSERT_FALSE(b.empty());
      ASSERT_TRUE(B.contains(b)) << to_string(b);
      std::vector<int64_t> at(static_cast<size_t>(b.rank));
      for (int d = 0; d < b.rank; ++d) at[static_cast<size_t>(d)] = b.lo[d];
      while (true) {
        const int64_t x = linear_index(B, at);
        EXPECT_GE(x, s);
        EXPECT_LT(x, e);
        EXPECT_TRUE(seen.insert(x).second) << "element " << x << " twice";
        int d = b.rank - 1;
        for (; d >= 0; --d) {
          if (++at[static_cast<size_t>(d)] < b.hi[d]) break;
          at[static_cast<size_t>(d)] = b.lo[d];
        }
        if (d < 0) break;
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), e - s);
    ++checked;
  }
  EXPECT_GT(checked, least_covered(1500));
}

// The recursive statement of linear_boxes (row by row: the first partial
// row's rest, the whole rows, the last partial row's start, each partial
// row cut the same way one dimension down), which the planner's
// iterative one must give box for box, in the same order: the routes'
// parts, and so the plans, follow it.
void linear_boxes_reference(const Box& B, int64_t s, int64_t e, std::vector<Box>& out) {
  if (s >= e) return;
  if (B.rank == 0) {
    out.push_back(B);
    return;
  }
  int64_t inner = 1;
  for (int d = 1; d < B.rank; ++d) inner *= B.extent(d);
  auto sub = [&](int64_t r, int64_t a, int64_t b) {
    Box rest = B;
    rest.lo[0] = B.lo[0] + r;
    rest.hi[0] = rest.lo[0] + 1;
    if ((a == 0 && b == inner) || B.rank == 1) {
      out.push_back(rest);
      return;
    }
    Box inner_box;
    inner_box.rank = B.rank - 1;
    for (int d = 1; d < B.rank; ++d) {
      inner_box.lo[d - 1] = B.lo[d];
      inner_box.hi[d - 1] = B.hi[d];
    }
    const size_t first = out.size();
    linear_boxes_reference(inner_box, a, b, out);
    for (size_t i = first; i < out.size(); ++i) {
      Box x = rest;
      for (int d = 1; d < B.rank; ++d) {
        x.lo[d] = out[i].lo[d - 1];
        x.hi[d] = out[i].hi[d - 1];
      }
      out[i] = x;
    }
  };
  int64_t r0 = s / inner;
  const int64_t r1 = e / inner;
  if (r0 == r1) {
    sub(r0, s % inner, e % inner);
    return;
  }
  if (s % inner != 0) sub(r0++, s % inner, inner);
  if (r0 < r1) {
    Box mid = B;
    mid.lo[0] = B.lo[0] + r0;
    mid.hi[0] = B.lo[0] + r1;
    out.push_back(mid);
  }
  if (e % inner != 0) sub(r1, 0, e % inner);
}

// linear_boxes gives the reference's boxes in the reference's order, every
// coordinate (the unused ones beyond the rank too), on random boxes of
// rank 0-6 and runs, and on runs of whole and partial rows.
TEST(CrossLayout, LinearBoxesMatchTheRecursiveStatement) {
  std::mt19937_64 rng(20261130);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int multi = 0;
  for (int c = 0; c < scaled_cases(20000); ++c) {
    Box B;
    B.rank = static_cast<int>(uni(0, 6));
    for (int d = 0; d < B.rank; ++d) {
      B.lo[d] = uni(-3, 40);
      B.hi[d] = B.lo[d] + uni(1, d == 0 ? 50 : 7);
    }
    const int64_t n = B.volume();
    int64_t s = uni(0, n), e = uni(s, n);
    if (uni(0, 3) == 0 && B.rank > 0) {  // whole rows of some dimension at one end
      const int64_t row = n / B.extent(0) / std::max<int64_t>(1, uni(1, 3));
      if (row > 0) (uni(0, 1) ? s : e) = std::min(n, row * uni(0, n / row));
      if (s > e) std::swap(s, e);
    }
    std::vector<Box> got, want;
    planning::linear_boxes(B, s, e, got);
    linear_boxes_reference(B, s, e, want);
    SCOPED_TRACE("case " + std::to_string(c) + ": " + to_string(B) + " [" + std::to_string(s) +
                 ", " + std::to_string(e) + ")");
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].rank, want[i].rank) << "box " << i;
      EXPECT_EQ(got[i].lo, want[i].lo) << "box " << i << ": " << to_string(got[i]);
      EXPECT_EQ(got[i].hi, want[i].hi) << "box " << i << ": " << to_string(got[i]);
    }
    multi += got.size() >= 3;
  }
  EXPECT_GT(multi, scaled_cases(20000) / 4) << "runs of three boxes or more";
}

// LinearCover (all_to_all_cell.h) tells linear_boxes' count, first and
// last box from the range's row digits, the end's digits reused where the
// next range starts there (a share's runs, consecutive); and no box of a
// cover extends the box before it (RelayMerger::extends), which the
// all-to-all runs' relay merges rest on.
TEST(CrossLayout, LinearCoverTellsTheBoxesLinearBoxesMakes) {
  std::mt19937_64 rng(20261201);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int multi = 0, chained = 0;
  const int cases = scaled_cases(3000);
  for (int c = 0; c < cases; ++c) {
    Box B;
    B.rank = static_cast<int>(uni(0, 5));
    for (int d = 0; d < B.rank; ++d) {
      B.lo[d] = uni(-3, 40);
      B.hi[d] = B.lo[d] + uni(1, d == 0 ? 30 : 6);
    }
    const int64_t n = B.volume();
    planning::LinearCover cover(B);
    int64_t s = uni(0, n);
    for (int r = 0; r < 6; ++r) {  // consecutive ranges, sometimes a jump
      if (uni(0, 4) == 0) s = uni(0, n);
      const int64_t e = uni(0, 2) == 0 ? uni(s, n) : std::min(n, s + uni(0, 8));
      std::vector<Box> want;
      planning::linear_boxes(B, s, e, want);
      SCOPED_TRACE("case " + std::to_string(c) + ": " + to_string(B) + " [" + std::to_string(s) +
                   ", " + std::to_string(e) + ")");
      Box first, last;
      const bool boxes = uni(0, 3) != 0;
      const int64_t got = cover.run(s, e, boxes ? &first : nullptr, boxes ? &last : nullptr);
      ASSERT_EQ(got, static_cast<int64_t>(want.size()));
      chained += r > 0;
      for (size_t i = 1; i < want.size(); ++i) {
        Box a = want[i - 1];
        EXPECT_FALSE(planning::RelayMerger::extends(a, want[i])) << "box " << i;
      }
      s = e;
      if (want.empty() || !boxes) continue;
      multi += want.size() >= 3;
      EXPECT_EQ(first, want.front()) << to_string(first);
      EXPECT_EQ(first.lo, want.front().lo);
      EXPECT_EQ(first.hi, want.front().hi);
      EXPECT_EQ(last, want.back()) << to_string(last);
      EXPECT_EQ(last.lo, want.back().lo);
      EXPECT_EQ(last.hi, want.back().hi);
    }
  }
  EXPECT_GT(multi, cases / 4) << "ranges of three boxes or more";
  EXPECT_GT(chained, cases) << "ranges starting where the one before ended";
}

// Bytes each host sends to other hosts (hosts[d]: device d's host).
std::map<int32_t, int64_t> host_sends(const Plan& plan, const std::vector<int32_t>& hosts) {
  std::map<int32_t, int64_t> out;
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.recvs) {
      const int32_t a = hosts[static_cast<size_t>(m.src_device)];
      const int32_t b = hosts[static_cast<size_t>(m.dst_device)];
      if (a != b) out[a] += m.bytes;
    }
  return out;
}

// Two tensors on the same meshes and specs share their Geometry; their
// shapes (uneven shards of different proportions) give each its own
// layout: planned together, each host sends what it sends for each tensor
// alone, whatever the order the planner meets them in (threads, one
// process's part), and the plan delivers every element.
TEST(CrossLayout, TensorsSharingAGeometryKeepTheirOwnLayouts) {
  // Holders: devices 0 and 2 on host 0, device 1 on host 1; four receiving
  // hosts of two devices.
  std::vector<int32_t> hosts = {0, 1, 0};
  for (int32_t i = 0; i < 8; ++i) hosts.push_back(2 + i / 2);
  auto src_mesh = std::make_shared<Mesh>();
  src_mesh->axis_names = {"a"};
  src_mesh->shape = {3};
  src_mesh->devices = {0, 1, 2};
  auto dst_mesh = std::make_shared<Mesh>();
  dst_mesh->axis_names = {"r", "k"};
  dst_mesh->shape = {4, 2};
  for (int64_t d = 3; d < 11; ++d) dst_mesh->devices.push_back(d);
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape) {
    TensorSpec t;
    t.name = name;
    t.shape = shape;
    t.dtype = DType::kF32;
    NamedSharding src, dst;
    src.mesh = src_mesh;
    src.dims = {{"a"}, {}};
    dst.mesh = dst_mesh;
    dst.dims = {{}, {}};
    t.src = Layout::from_named(src, shape, "src");
    t.dst = Layout::from_named(dst, shape, "dst");
    return t;
  };
  auto input = [&](std::vector<TensorSpec> ts) {
    PlanInput in;
    in.tensors = std::move(ts);
    for (size_t d = 0; d < hosts.size(); ++d)
      in.topology.add({static_cast<int64_t>(d), static_cast<int32_t>(d), hosts[d], 0});
    in.options.split_min_bytes = 256;
    in.options.alpha_seconds = 0;
    return in;
  };
  // Host 0 holds 2/3 of the first tensor's rows (20 + 20 of 60) and 41 of
  // the second's 61 (21 + 20), host 1 the rest.
  const TensorSpec a = tensor("a", {60, 40}), b = tensor("b", {61, 36});
  ASSERT_EQ(a.src.geometry(), b.src.geometry());
  const Plan both = make_plan(input({a, b}));
  const Plan alone_a = make_plan(input({a}));
  const Plan alone_b = make_plan(input({b}));
  EXPECT_EQ(both.stats().stages, 3);  // across hosts, then inside them
  std::map<int32_t, int64_t> sum = host_sends(alone_a, hosts);
  for (const auto& [h, bytes] : host_sends(alone_b, hosts)) sum[h] += bytes;
  EXPECT_EQ(host_sends(both, hosts), sum);
  EXPECT_EQ(both.stats().network_bytes,
            alone_a.stats().network_bytes + alone_b.stats().network_bytes);
  // Planned on two threads (a chunk of tensors each, each chunk with its
  // own enumerator) and by each process alone: the same parts.
  PlanRequest two;
  two.threads = 2;
  const Plan threaded = make_plan(input({a, b}), two);
  EXPECT_EQ(threaded.parts(), both.parts());
  for (int32_t p : both.processes()) {
    const Plan one = make_plan(input({a, b}), {PlanScope::kProcess, p, false});
    ASSERT_EQ(one.part(p), both.part(p)) << "process " << p;
  }
  OracleBuffers buffers = fill_sources(both);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(both, views);
  const OracleReport report = check_destinations(both, buffers);
  EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches";
}

}  // namespace
}  // namespace reshard
