// Host executor throughput against memcpy of the same bytes, in one run
// (issue 2 benchmark): 1 GiB of f32, row-sharded -> column-sharded over 8
// devices in one process. Also prints the other layouts tried.
//   bench_exec [--repeat N] [--gib G] [--csv]
// With --spec, the plans of spec files instead (bench/layout_bench.py
// --dump-specs DIR writes its families' specs), on 1 and 2 threads,
// interleaved with memcpy of the bytes written (partial sums: of half the
// bytes read and written, their memory bound), for profiling the copy
// kernels without Python around them:
//   bench_exec --spec a.json [--spec b.json ...] [--repeat N] [--pause-ms P]
//              [--after-memcpy]
// --pause-ms sleeps P ms before each timed call (what a training loop's
// weight sync between steps sees: caches cold, copy threads asleep).
// Each timed call (memcpy or ours) follows an untimed call of the same
// operation, so that it pays for what that leaves in the caches, as in a
// loop of it: glibc's memcpy of 64 MiB here uses plain stores (its
// non-temporal threshold comes from the L3 size the VM reports, 384 MiB)
// and leaves up to a last-level cache of dirty destination lines, whose
// write-backs the next call pays (the executor timed right after a memcpy
// ran ~10% slower than after itself). --after-memcpy times the old way:
// ours right after memcpy, memcpy right after ours.
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
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/spec.h"
#include "reshard/wait.h"

using namespace reshard;

namespace {

bool g_csv = false;
int g_pause_ms = 0;
bool g_after_memcpy = false;

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

// 64-byte aligned storage, as the Python benchmark's slabs.
struct Aligned {
  std::vector<std::byte> raw;
  std::byte* data = nullptr;
  explicit Aligned(int64_t bytes) : raw(static_cast<size_t>(bytes) + 64) {
    const auto a = reinterpret_cast<uintptr_t>(raw.data());
    data = raw.data() + ((64 - a % 64) % 64);
  }
};

void run_spec(const std::string& path, int repeat) {
  const Spec spec = load_spec(path);
  const Plan plan = make_plan(spec.input);
  std::vector<Aligned> storage;
  std::vector<TensorBuffers> buffers;
  int64_t written = 0;
  int64_t read = 0;
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& ts = plan.tensors()[t];
    const int64_t e = dtype_size(ts.dtype);
    TensorBuffers tb;
    for (size_t i = 0; i < ts.src.num_entries(); ++i) {
      const int64_t bytes = ts.src.box(i).volume() * e;
      storage.emplace_back(bytes);
      fill_source_shard(ts, static_cast<uint32_t>(t), i,
                        std::span<std::byte>(storage.back().data, static_cast<size_t>(bytes)));
      tb.src.push_back({storage.back().data, bytes});
      if (ts.src.partial()) read += bytes;
    }
    for (size_t i = 0; i < ts.dst.num_entries(); ++i) {
      const int64_t bytes = ts.dst.box(i).volume() * e;
      storage.emplace_back(bytes);
      std::memset(storage.back().data, 1, static_cast<size_t>(bytes));
      tb.dst.push_back({storage.back().data, bytes});
      written += bytes;
    }
    buffers.push_back(std::move(tb));
  }
  // Partial sums: the memory bound moves (read + written) bytes; memcpy
  // reads and writes each byte once.
  const int64_t copy = read > 0 ? (read + written) / 2 : written;
  Aligned a(copy);
  Aligned b(copy);
  std::memset(a.data, 1, static_cast<size_t>(copy));
  std::memset(b.data, 2, static_cast<size_t>(copy));
  // Schedules cached, as the C ABI's host executor does: what a loop
  // executing one plan again and again costs.
  Engine engine(make_local_transport());
  ExecuteOptions o;
  o.agreement = ExecuteOptions::Agreement::kSkip;
  std::vector<double> tm[3];
  std::vector<double> te[3];
  for (int threads : {1, 2}) {
    o.threads = threads;
    engine.execute(plan, kAllProcesses, buffers, o);
  }
  // The oracle checks what the executor wrote (partial destinations aside).
  OracleReport report;
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& ts = plan.tensors()[t];
    if (ts.dst.partial()) continue;
    for (size_t i = 0; i < ts.dst.num_entries(); ++i) {
      check_destination_shard(
          ts, static_cast<uint32_t>(t), i,
          std::span<const std::byte>(static_cast<const std::byte*>(buffers[t].dst[i].data),
                                     static_cast<size_t>(buffers[t].dst[i].bytes)),
          report);
    }
  }
  if (!report.ok()) {
    std::fprintf(stderr, "%s: %lld wrong elements\n", path.c_str(), (long long)report.mismatches);
    std::exit(1);
  }
  auto timed = [](const std::function<void()>& f) {
    if (!g_after_memcpy) f();  // settle: the caches as a loop of f leaves them
    if (g_pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(g_pause_ms));
    const auto t0 = WaitClock::now();
    f();
    return seconds_since(t0);
  };
  for (int r = 0; r < repeat; ++r) {
    for (int threads : {1, 2}) {
      tm[threads].push_back(timed([&] {
        std::vector<std::jthread> pool;
        for (int t = 1; t < threads; ++t)
          pool.emplace_back([&, t] {
            const int64_t lo = copy * t / threads / 64 * 64;
            const int64_t hi = t + 1 == threads ? copy : copy * (t + 1) / threads / 64 * 64;
            std::memcpy(b.data + lo, a.data + lo, static_cast<size_t>(hi - lo));
          });
        std::memcpy(b.data, a.data, static_cast<size_t>(copy / threads / 64 * 64));
      }));
      o.threads = threads;
      te[threads].push_back(timed([&] { engine.execute(plan, kAllProcesses, buffers, o); }));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%-40s %7.1f MiB written", path.substr(path.find_last_of('/') + 1).c_str(),
              written / 1048576.0);
  // The minimum too: on a shared machine the medians move with the load,
  // the fastest runs less so.
  for (int threads : {1, 2}) {
    const double m = median(tm[threads]);
    const double e = median(te[threads]);
    const double mmin = *std::min_element(tm[threads].begin(), tm[threads].end());
    const double emin = *std::min_element(te[threads].begin(), te[threads].end());
    std::printf(" | %dT memcpy %6.2f ms ours %6.2f ms: %.2f of memcpy (fastest: %.2f)", threads,
                m * 1e3, e * 1e3, m / e, mmin / emin);
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  double gib = 1.0;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--gib") && i + 1 < argc) gib = std::atof(argv[++i]);
    if (!std::strcmp(argv[i], "--csv")) g_csv = true;
    if (!std::strcmp(argv[i], "--after-memcpy")) g_after_memcpy = true;
    if (!std::strcmp(argv[i], "--pause-ms") && i + 1 < argc) g_pause_ms = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--spec") && i + 1 < argc) specs.emplace_back(argv[++i]);
  }
  if (!specs.empty()) {
    for (const std::string& s : specs) run_spec(s, repeat);
    return 0;
  }
  const int64_t n = static_cast<int64_t>(std::sqrt(gib * 1073741824.0 / 4));
  const int64_t side = n / 8 * 8;
  run_case("rows -> columns, 8 devices", side, side, {{"x"}, {}}, {{}, {"x"}}, repeat);
  run_case("2x4 blocks -> columns, 8 devices", side, side, {{"a"}, {"b"}}, {{}, {"a", "b"}},
           repeat);
  run_case("columns -> rows, 8 devices", side, side, {{}, {"x"}}, {{"x"}, {}}, repeat);
  return 0;
}
