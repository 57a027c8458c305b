// Host time of the engine's device path (the CUDA local and NCCL
// transports), without a GPU: Engine::execute of whole plans in one process
// over a transport that reports MemoryKind::kCuda and does on the host what
// the CUDA backend's run_copies does there (backends/cuda/src:
// device_context.cc) — the launch cache lookup (launch_cache.h, the same
// code), and on a miss plan_launches (copy_plan.h) and the copy of the
// launches' descriptors into one host buffer (the pinned upload) — with no
// kernels and no buffer contents touched. What a GPU adds to these times is
// the driver's launch and memcpy calls.
//
//   bench_engine_device_host [--iters N] [--spec FILE] [--csv]
//
// Per case, medians over N iterations:
//  - first: a new Engine and transport each time (the schedule built, every
//    call planned), its wall and CPU time (this thread's: what the wall
//    time would be on an idle machine), split into the transport's launch planning and staging
//    and the engine's own time, and that into building the schedule and
//    running it (the engine's time in a second execution on other buffers,
//    which runs the cached schedule without replaying);
//  - repeated: the same engine and buffers again (ExecuteStats::replayed),
//    with the launch cache finding the calls by their keys
//    (Transport::run_keyed_copies), and, as the baseline measured in the
//    same run, with a transport that ignores the keys, so that its cache
//    compares every op of every call (what a transport without keyed calls
//    pays); the two alternate.
// Cases: 400 tensors of 512 x 1024 bf16 from FSDP 8 to tp 8 on 8 devices
// (bench/gpu/peer_specs.py's 400_tensors_fsdp8_to_tp8: 25,600 pieces), or
// the spec given, its devices all put in process 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "copy_plan.h"
#include "launch_cache.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/plan.h"
#include "reshard/spec.h"
#include "reshard/transport.h"
#include "reshard/wait.h"

using namespace reshard;

namespace {

using Clock = WaitClock;

class DoneBatch final : public TransferBatch {
 public:
  bool test() override { return true; }
  std::vector<int32_t> pending_peers() const override { return {}; }
};

// Memory never read or written (no kernels run): left uninitialised, so
// that no page is touched.
class Block final : public StagingBlock {
 public:
  explicit Block(int64_t bytes)
      : bytes_(bytes),
        data_(std::make_unique_for_overwrite<std::byte[]>(
            static_cast<size_t>(std::max<int64_t>(bytes, 1)))) {}
  std::byte* data() override { return data_.get(); }
  int64_t bytes() const override { return bytes_; }

 private:
  int64_t bytes_;
  std::unique_ptr<std::byte[]> data_;
};

// One GPU's host work per run_copies call, as in DeviceSet::run_copies
// (pointer checks aside: they are skipped for cached calls, and their cost
// is the driver's).
class HostSideCuda final : public Transport {
 public:
  explicit HostSideCuda(bool use_keys)
      : use_keys_(use_keys),
        cache_(cuda_backend::kLaunchCacheEntries, cuda_backend::kLaunchCacheBytes) {}
  TransportInfo info() const override {
    TransportInfo i;
    i.name = "host-side cuda";
    i.memory = MemoryKind::kCuda;
    i.whole_plan = true;
    i.stream_ordered = true;
    return i;
  }
  std::unique_ptr<StagingBlock> allocate_staging(int64_t, int32_t, int64_t bytes) override {
    return std::make_unique<Block>(bytes);
  }
  std::unique_ptr<TransferBatch> start(std::span<const TransferOp>) override {
    return std::make_unique<DoneBatch>();
  }
  void run_copies(int64_t device, int32_t ordinal, std::span<const CopyOp> ops) override {
    run_keyed_copies(device, ordinal, ops, 0);
  }
  void run_keyed_copies(int64_t, int32_t, std::span<const CopyOp> ops, uint64_t key) override {
    if (!use_keys_) key = 0;
    if (cache_.find(ops, key) != nullptr) return;
    const auto t0 = Clock::now();
    const std::vector<cuda_backend::Launch> launches = cuda_backend::plan_launches(ops);
    // The descriptors, laid out one launch after the other, as uploaded.
    const cuda_backend::Descriptors d = cuda_backend::layout_descriptors(launches);
    const size_t bytes = d.bytes;
    std::vector<unsigned char> host(bytes);
    cuda_backend::write_descriptors(launches, d, host.data());
    const size_t entry = decltype(cache_)::entry_bytes(ops, key, bytes);
    if (cache_.make_room(entry)) cache_.insert(ops, key, entry, std::move(host));
    planning_seconds += seconds_since(t0);
  }
  void finish(double) override {}
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> record,
                                                double) override {
    return {std::vector<std::byte>(record.begin(), record.end())};
  }
  [[noreturn]] void abort(int code) noexcept override { std::_Exit(code); }

  double planning_seconds = 0;  // launch planning and staging, on misses

 private:
  bool use_keys_;
  cuda_backend::LaunchCache<std::vector<unsigned char>> cache_;
};

// This thread's CPU time (the engine and this transport run on the calling
// thread): on a loaded machine, what the wall time would be alone.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// FSDP 8 -> tp 8: 400 tensors of 1 MiB (bf16 512 x 1024), rows over the
// eight devices to columns over the same eight.
PlanInput many_tensors() {
  PlanInput in;
  for (int64_t d = 0; d < 8; ++d) in.topology.add({d, 0, 0, 0});
  auto mesh = std::make_shared<Mesh>();
  mesh->axis_names = {"x"};
  mesh->shape = {8};
  for (int64_t d = 0; d < 8; ++d) mesh->devices.push_back(d);
  for (int i = 0; i < 400; ++i) {
    TensorSpec t;
    t.name = "p" + std::to_string(i);
    t.shape = {512, 1024};
    t.dtype = DType::kBF16;
    t.src = Layout::from_named({mesh, {{"x"}, {}}, {}, ReduceOp::kSum}, t.shape, t.name + ".src");
    t.dst = Layout::from_named({mesh, {{}, {"x"}}, {}, ReduceOp::kSum}, t.shape, t.name + ".dst");
    in.tensors.push_back(std::move(t));
  }
  return in;
}

// Every device in process 0 (one GPU process holding the plan).
PlanInput from_spec(const std::string& path) {
  PlanInput in = load_spec(path).input;
  Topology one;
  for (DeviceInfo d : in.topology.devices()) {
    d.process = 0;
    d.host = 0;
    d.ordinal = 0;
    one.add(d);
  }
  in.topology = one;
  return in;
}

struct Buffers {
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<TensorBuffers> views;
};

Buffers buffers_for(const Plan& plan) {
  Buffers b;
  for (const TensorSpec& t : plan.tensors()) {
    TensorBuffers v;
    const int64_t elem = dtype_size(t.dtype);
    const int64_t out_elem = dtype_size(out_dtype(t));  // a cast's destination dtype
    for (size_t e = 0; e < t.src.num_entries(); ++e) {
      b.blocks.push_back(std::make_unique<Block>(t.src.box(e).volume() * elem));
      v.src.push_back({b.blocks.back()->data(), b.blocks.back()->bytes()});
    }
    for (size_t e = 0; e < t.dst.num_entries(); ++e) {
      b.blocks.push_back(std::make_unique<Block>(t.dst.box(e).volume() * out_elem));
      v.dst.push_back({b.blocks.back()->data(), b.blocks.back()->bytes()});
    }
    b.views.push_back(std::move(v));
  }
  return b;
}

int64_t pieces_of(const Plan& plan) {
  int64_t n = 0;
  for (const auto& [process, part] : plan.parts()) {
    n += static_cast<int64_t>(part.local.size() + part.recv_pieces.size());
  }
  return n;
}

void run_case(const std::string& name, const PlanInput& in, int iters, bool csv) {
  const Plan plan = make_plan(in, PlanRequest{PlanScope::kAll, 0, true});
  Buffers buffers = buffers_for(plan);
  ExecuteOptions o;
  o.agreement = ExecuteOptions::Agreement::kSkip;

  // Other buffers: the cached schedule runs again, not replayed.
  Buffers others = buffers_for(plan);
  std::vector<double> first, first_cpu, first_planning, rerun, rerun_planning;
  for (int i = 0; i < iters; ++i) {
    auto transport = std::make_unique<HostSideCuda>(true);
    HostSideCuda* t = transport.get();
    Engine engine(std::move(transport));
    auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    engine.execute(plan, 0, buffers.views, o);
    first.push_back(seconds_since(t0));
    first_cpu.push_back(cpu_seconds() - c0);
    first_planning.push_back(t->planning_seconds);
    t->planning_seconds = 0;
    t0 = Clock::now();
    const ExecuteStats s = engine.execute(plan, 0, others.views, o);
    rerun.push_back(seconds_since(t0));
    rerun_planning.push_back(t->planning_seconds);
    if (!s.schedule_cached || s.replayed) {
      fail(ErrorCode::kInternal, name + ": other buffers did not run the cached schedule");
    }
  }

  Engine keyed(std::make_unique<HostSideCuda>(true));
  Engine by_ops(std::make_unique<HostSideCuda>(false));
  for (int w = 0; w < 2; ++w) {
    keyed.execute(plan, 0, buffers.views, o);
    by_ops.execute(plan, 0, buffers.views, o);
  }
  std::vector<double> repeated, compared;
  bool replayed = true;
  for (int i = 0; i < iters; ++i) {
    for (int k = 0; k < 2; ++k) {
      const bool arm = (i + k) % 2 == 0;  // alternate which goes first
      const auto t0 = Clock::now();
      const ExecuteStats s = (arm ? keyed : by_ops).execute(plan, 0, buffers.views, o);
      (arm ? repeated : compared).push_back(seconds_since(t0));
      replayed = replayed && s.replayed;
    }
  }
  if (!replayed) fail(ErrorCode::kInternal, name + ": a repeated execution did not replay");
  const double f = median(first) * 1e3;
  const double fp = median(first_planning) * 1e3;
  const double fc = median(first_cpu) * 1e3;
  // The engine's time with the schedule cached: what the first execution
  // spends beyond it builds (and checks) the schedule.
  const double run = (median(rerun) - median(rerun_planning)) * 1e3;
  const double r = median(repeated) * 1e3;
  const double c = median(compared) * 1e3;
  if (csv) {
    std::printf("%s\t%lld\t%.3f\t%.3f\t%.3f\t%.3f\t%.4f\t%.4f\t%.2f\n", name.c_str(),
                static_cast<long long>(pieces_of(plan)), f, fc, fp, run, r, c, c / r);
    return;
  }
  std::printf(
      "%s, %lld pieces:\n  first execution %8.2f ms (CPU %.2f ms; launch planning and staging "
      "%.2f ms, engine %.2f ms: schedule %.2f ms, run %.2f ms)\n  repeated        %8.3f ms (keyed "
      "launch cache; comparing every op: %.3f ms, %.1fx)\n",
      name.c_str(), static_cast<long long>(pieces_of(plan)), f, fc, fp, f - fp, f - fp - run, run,
      r, c, c / r);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  bool csv = false;
  std::string spec;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--spec") && i + 1 < argc) {
      spec = argv[++i];
    } else if (!std::strcmp(argv[i], "--csv")) {
      csv = true;
    } else {
      std::fprintf(stderr, "usage: %s [--iters N] [--spec FILE] [--csv]\n", argv[0]);
      return 2;
    }
  }
  try {
    if (csv) {
      std::printf(
          "case\tpieces\tfirst_ms\tfirst_cpu_ms\tfirst_planning_ms\tengine_run_ms\trepeated_ms\t"
          "repeated_by_ops_ms\t"
          "ratio\n");
    }
    if (spec.empty()) {
      run_case("400 tensors 1 MiB bf16 fsdp8 -> tp8", many_tensors(), iters, csv);
    } else {
      run_case(spec, from_spec(spec), iters, csv);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error [%s]: %s\n", error_code_name(e.code()), e.what());
    return 1;
  }
  return 0;
}
