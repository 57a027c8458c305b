// End-to-end reshard of a spec's tensors on one GPU: every plan device is a
// logical device of GPU 0 (the `cuda` local transport, reshard/cuda.h), the
// whole plan runs through reshard::Engine as a weight sync would, and the
// bytes written to destination shards per second are compared with
// cudaMemcpy device-to-device of the same number of bytes in the same run
// (docs/design.md §9.7: ratios against an in-run baseline).
//
//   engine_bandwidth --spec F [--iters K] [--verify]
//
// Prints the first execution (schedule, launch planning, descriptor upload,
// pointer checks) and the median of K repeated ones (the engine's schedule
// cache and the GPU's launch cache at work). --verify fills the sources with
// the oracle's values on the host, uploads them and checks every
// destination element after the first execution (host memory: twice the
// shards; for small specs).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda_bench.h"
#include "reshard/cuda.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/spec.h"
#include "reshard/wait.h"

namespace {

using reshard::seconds_since;
using reshard::bench_gpu::alloc;
using reshard::bench_gpu::check;
using reshard::bench_gpu::DevicePtr;

using reshard::Plan;
using reshard::TensorBuffers;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The spec's plan with every device on process 0, GPU 0.
Plan one_gpu_plan(reshard::PlanInput in) {
  reshard::Topology t;
  for (const reshard::DeviceInfo& d : in.topology.devices()) {
    reshard::DeviceInfo info = d;
    info.process = 0;
    info.host = 0;
    info.ordinal = 0;
    t.add(info);
  }
  in.topology = t;
  return reshard::make_plan(in, reshard::PlanRequest{reshard::PlanScope::kAll, 0, true});
}

}  // namespace

// --dump: the timings and every tensor's shard boxes (and summand of a
// partial source), for bench/gpu/torch_peer.py, which runs the same reshard
// the way a PyTorch user would and reports its time over ours.
void dump(const std::string& path, const std::string& name, const Plan& plan, double first_seconds,
          double seconds, int64_t moved) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "engine_bandwidth: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  const auto box = [&](const reshard::Box& b) {
    std::fprintf(f, "[[");
    for (int k = 0; k < b.rank; ++k) std::fprintf(f, "%s%lld", k ? "," : "", (long long)b.lo[k]);
    std::fprintf(f, "],[");
    for (int k = 0; k < b.rank; ++k) std::fprintf(f, "%s%lld", k ? "," : "", (long long)b.hi[k]);
    std::fprintf(f, "]]");
  };
  std::fprintf(f, "{\"name\":\"%s\",\"first_ms\":%.6f,\"ms\":%.6f,\"moved_bytes\":%lld,",
               name.c_str(), first_seconds * 1e3, seconds * 1e3, static_cast<long long>(moved));
  std::fprintf(f, "\"tensors\":[");
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const reshard::TensorSpec& spec = plan.tensors()[t];
    std::fprintf(f, "%s{\"dtype\":\"%s\",\"partial\":%s,\"src\":[", t ? "," : "",
                 std::string(reshard::dtype_name(spec.dtype)).c_str(),
                 spec.src.partial() ? "true" : "false");
    for (size_t e = 0; e < spec.src.num_entries(); ++e) {
      std::fprintf(f, "%s{\"summand\":%d,\"box\":", e ? "," : "", spec.src.summand(e));
      box(spec.src.box(e));
      std::fprintf(f, "}");
    }
    std::fprintf(f, "],\"dst\":[");
    for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
      std::fprintf(f, "%s", e ? "," : "");
      box(spec.dst.box(e));
    }
    std::fprintf(f, "]}");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

int main(int argc, char** argv) {
  std::string spec_path;
  int iters = 10;
  bool verify = false;
  std::string dump_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--spec") == 0 && i + 1 < argc)
      spec_path = argv[++i];
    else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
      iters = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--dump") == 0 && i + 1 < argc)
      dump_path = argv[++i];
    else if (std::strcmp(argv[i], "--verify") == 0)
      verify = true;
    else {
      std::fprintf(stderr,
                   "usage: engine_bandwidth --spec F [--iters K] [--verify] [--dump FILE]\n");
      return 2;
    }
  }
  if (spec_path.empty()) {
    std::fprintf(stderr, "engine_bandwidth: --spec is required\n");
    return 2;
  }
  if (const int status = reshard::bench_gpu::unavailable("engine_bandwidth"); status >= 0)
    return status;
  try {
    const auto p0 = reshard::WaitClock::now();
    const Plan plan = one_gpu_plan(reshard::load_spec(spec_path).input);
    const double plan_seconds = seconds_since(p0);

    // Device shards; with --verify the oracle's values from the host.
    reshard::OracleBuffers host;
    if (verify) host = reshard::fill_sources(plan);
    std::vector<std::vector<DevicePtr>> owned;
    std::vector<TensorBuffers> views;
    int64_t shard_bytes = 0;
    int64_t dst_bytes = 0;
    for (size_t t = 0; t < plan.tensors().size(); ++t) {
      const reshard::TensorSpec& spec = plan.tensors()[t];
      const int64_t es = reshard::dtype_size(spec.dtype);
      TensorBuffers v;
      owned.emplace_back();
      for (size_t e = 0; e < spec.src.num_entries(); ++e) {
        const auto bytes = static_cast<size_t>(spec.src.box(e).volume() * es);
        owned.back().push_back(alloc(bytes, 0x11));
        if (verify) {
          check(cudaMemcpy(owned.back().back().get(), host.src[t][e].data(), bytes,
                           cudaMemcpyHostToDevice),
                "upload");
        }
        v.src.push_back({owned.back().back().get(), static_cast<int64_t>(bytes)});
        shard_bytes += static_cast<int64_t>(bytes);
      }
      for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
        const auto bytes = static_cast<size_t>(spec.dst.box(e).volume() * es);
        owned.back().push_back(alloc(bytes, 0x7f));
        v.dst.push_back({owned.back().back().get(), static_cast<int64_t>(bytes)});
        shard_bytes += static_cast<int64_t>(bytes);
        dst_bytes += static_cast<int64_t>(bytes);
      }
      views.push_back(std::move(v));
    }
    check(cudaDeviceSynchronize(), "sync");

    reshard::Engine engine(reshard::make_cuda_local_transport());
    reshard::ExecuteOptions options;
    options.agreement = reshard::ExecuteOptions::Agreement::kSkip;  // one process
    const auto f0 = reshard::WaitClock::now();
    const reshard::ExecuteStats first = engine.execute(plan, 0, views, options);
    const double first_seconds = seconds_since(f0);
    // What the plan copies: bytes between devices plus within devices (all
    // on this GPU); the engine's own count is printed beside it.
    const int64_t moved = plan.stats().network_bytes + plan.stats().local_bytes;
    if (moved <= 0) {
      std::printf("engine_bandwidth: the plan copies nothing\n");
      return 0;
    }

    if (verify) {
      for (size_t t = 0; t < plan.tensors().size(); ++t) {
        const size_t n_src = plan.tensors()[t].src.num_entries();
        for (size_t e = 0; e < host.dst[t].size(); ++e) {
          check(cudaMemcpy(host.dst[t][e].data(), owned[t][n_src + e].get(), host.dst[t][e].size(),
                           cudaMemcpyDeviceToHost),
                "download");
        }
      }
      const reshard::OracleReport report = reshard::check_destinations(plan, host, 5);
      std::printf("verified: %s (%lld destination elements, %lld wrong)\n",
                  report.ok() ? "yes" : "NO", static_cast<long long>(report.elements),
                  static_cast<long long>(report.mismatches));
      if (!report.ok()) return 1;
    }

    std::vector<double> times;
    bool cached = true;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = reshard::WaitClock::now();
      const reshard::ExecuteStats s = engine.execute(plan, 0, views, options);
      times.push_back(seconds_since(t0));
      cached = cached && s.schedule_cached;
    }
    const double steady = median(times);

    // Baseline: cudaMemcpy device-to-device of the same bytes (at most 4 GiB
    // per copy, repeated), timed with events like the kernels' benchmark.
    const int64_t chunk = std::min<int64_t>(moved, int64_t{4} << 30);
    DevicePtr a = alloc(static_cast<size_t>(chunk), 1);
    DevicePtr b = alloc(static_cast<size_t>(chunk), 2);
    std::vector<double> base;
    for (int i = 0; i < std::max(3, iters / 2); ++i) {
      check(cudaDeviceSynchronize(), "sync");
      const auto t0 = reshard::WaitClock::now();
      for (int64_t done = 0; done < moved; done += chunk) {
        const auto n = static_cast<size_t>(std::min(chunk, moved - done));
        check(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice, nullptr), "memcpy");
      }
      check(cudaDeviceSynchronize(), "sync");
      base.push_back(seconds_since(t0));
    }
    const double memcpy_seconds = median(base);

    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf("device: %s; backend: %s\n", prop.name, reshard::cuda_backend_versions().c_str());
    std::printf("spec: %s: %zu tensors, %zu plan devices on one GPU, %.2f GiB of shards\n",
                spec_path.c_str(), plan.tensors().size(), plan.topology().devices().size(),
                static_cast<double>(shard_bytes) / (1 << 30));
    std::printf(
        "plan: %.1f ms (whole plan, %lld rounds); bytes copied per execution: %.2f GiB "
        "(engine: %.2f GiB; destinations hold %.2f GiB)\n",
        plan_seconds * 1e3, static_cast<long long>(plan.stats().rounds),
        static_cast<double>(moved) / (1 << 30), static_cast<double>(first.local_bytes) / (1 << 30),
        static_cast<double>(dst_bytes) / (1 << 30));
    std::printf("\n| execution | ms | GB/s | cudaMemcpy GB/s (same bytes) | ratio |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: |\n");
    const double base_gbs = static_cast<double>(moved) / memcpy_seconds / 1e9;
    const std::string name = spec_path.substr(spec_path.find_last_of('/') + 1);
    const auto row = [&](const char* what, double s) {
      const double gbs = static_cast<double>(moved) / s / 1e9;
      std::printf("| %s: %s | %.2f | %.1f | %.1f | %.2f |\n", name.c_str(), what, s * 1e3, gbs,
                  base_gbs, gbs / base_gbs);
    };
    row("first (schedule, launches, checks)", first_seconds);
    row(cached ? "repeated, median (cached schedule)" : "repeated, median", steady);
    if (!dump_path.empty()) dump(dump_path, name, plan, first_seconds, steady, moved);
    return 0;
  } catch (const reshard::Error& e) {
    std::fprintf(stderr, "engine_bandwidth: %s\n", e.what());
    return 1;
  }
}
