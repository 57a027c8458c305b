// Host executor throughput against memcpy of the same bytes, in one run
// (issue 2 benchmark): 1 GiB of f32, row-sharded -> column-sharded over 8
// devices in one process. Also prints the other layouts tried.
//   bench_exec [--repeat N] [--gib G] [--csv]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "reshard/exec.h"
#include "reshard/plan.h"

using namespace reshard;

namespace {

bool g_csv = false;

using bench::median_seconds;

struct Buffers {
  std::vector<std::unique_ptr<char[]>> storage;
  std::vector<TensorBuffers> tensors;
};

Buffers allocate(const Plan& plan) {
  Buffers b;
  for (const auto& t : plan.tensors()) {
    TensorBuffers tb;
    const int64_t e = dtype_size(t.dtype);
    for (size_t i = 0; i < t.src.num_entries(); ++i) {
      const int64_t bytes = t.src.box(i).volume() * e;
      b.storage.emplace_back(new char[static_cast<size_t>(bytes)]);
      std::memset(b.storage.back().get(), static_cast<int>(i), static_cast<size_t>(bytes));
      tb.src.push_back({b.storage.back().get(), bytes});
    }
    for (size_t i = 0; i < t.dst.num_entries(); ++i) {
      const int64_t bytes = t.dst.box(i).volume() * e;
      b.storage.emplace_back(new char[static_cast<size_t>(bytes)]);
      std::memset(b.storage.back().get(), 0, static_cast<size_t>(bytes));
      tb.dst.push_back({b.storage.back().get(), bytes});
    }
    b.tensors.push_back(std::move(tb));
  }
  return b;
}

// memcpy of `bytes` split into `threads` contiguous slices, one per thread.
double memcpy_seconds(int repeat, int64_t bytes, int threads) {
  std::unique_ptr<char[]> a(new char[static_cast<size_t>(bytes)]),
      b(new char[static_cast<size_t>(bytes)]);
  std::memset(a.get(), 1, static_cast<size_t>(bytes));
  std::memset(b.get(), 0, static_cast<size_t>(bytes));
  return median_seconds(repeat, [&] {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const int64_t lo = bytes * t / threads, hi = bytes * (t + 1) / threads;
        std::memcpy(b.get() + lo, a.get() + lo, static_cast<size_t>(hi - lo));
      });
  });
}

void run_case(const char* name, int64_t rows, int64_t cols,
              std::vector<std::vector<std::string>> src_dims,
              std::vector<std::vector<std::string>> dst_dims, int repeat) {
  auto mesh = std::make_shared<Mesh>();
  mesh->axis_names = {"x"};
  mesh->shape = {8};
  mesh->devices = {0, 1, 2, 3, 4, 5, 6, 7};
  auto mesh2 = std::make_shared<Mesh>();
  mesh2->axis_names = {"a", "b"};
  mesh2->shape = {2, 4};
  mesh2->devices = {0, 1, 2, 3, 4, 5, 6, 7};
  PlanInput in;
  in.options.staging_budget_bytes = 0;
  TensorSpec t;
  t.name = "w";
  t.shape = {rows, cols};
  t.dtype = DType::kF32;
  auto pick = [&](const std::vector<std::vector<std::string>>& dims) {
    for (const auto& d : dims)
      for (const auto& a : d)
        if (a == "a" || a == "b") return mesh2;
    return mesh;
  };
  t.src = Layout::from_named({pick(src_dims), src_dims, {}, ReduceOp::kSum}, t.shape, "src");
  t.dst = Layout::from_named({pick(dst_dims), dst_dims, {}, ReduceOp::kSum}, t.shape, "dst");
  in.tensors.push_back(t);
  Plan plan = make_plan(in);
  Buffers bufs = allocate(plan);
  const int64_t bytes = plan.stats().network_bytes + plan.stats().local_bytes;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int threads : {1, hw}) {
    HostExecuteOptions o;
    o.threads = threads;
    execute_host(plan, bufs.tensors, o);  // warm up (page faults)
    const double te = median_seconds(repeat, [&] { execute_host(plan, bufs.tensors, o); });
    const double tm = memcpy_seconds(repeat, bytes, threads);
    if (g_csv) {
      std::printf("%s\t%d\t%lld\t%.6f\t%.6f\n", name, threads, (long long)bytes, te, tm);
      continue;
    }
    std::printf(
        "%-44s threads=%d  %.2f GiB moved: reshard %.1f ms (%.2f GB/s), memcpy %.1f ms (%.2f "
        "GB/s), "
        "ratio %.2f of memcpy\n",
        name, threads, bytes / 1073741824.0, te * 1e3, bytes / te / 1e9, tm * 1e3, bytes / tm / 1e9,
        tm / te);
    if (hw == 1) break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  double gib = 1.0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--gib") && i + 1 < argc) gib = std::atof(argv[++i]);
    if (!std::strcmp(argv[i], "--csv")) g_csv = true;
  }
  const int64_t n = static_cast<int64_t>(std::sqrt(gib * 1073741824.0 / 4));
  const int64_t side = n / 8 * 8;
  run_case("rows -> columns, 8 devices", side, side, {{"x"}, {}}, {{}, {"x"}}, repeat);
  run_case("2x4 blocks -> columns, 8 devices", side, side, {{"a"}, {"b"}}, {{}, {"a", "b"}},
           repeat);
  run_case("columns -> rows, 8 devices", side, side, {{}, {"x"}}, {{"x"}, {}}, repeat);
  return 0;
}
