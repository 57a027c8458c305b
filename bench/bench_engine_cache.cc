// The engine's schedule cache (EngineOptions::schedule_cache_entries): time
// per Engine::execute of the same plan with the cache against without it
// (ExecuteOptions::cache_schedule = false: the schedule and the MPI
// datatypes are built on every call, as before the cache), in one run, over
// the `mpi` transport. Both run in every iteration, in alternating order, so
// that they share the machine's load; each time is the slowest rank's,
// after a barrier; the figure is the median over iterations.
//
//   mpirun -np 2 bench_engine_cache [--iters N] [--csv]
//   (as root: mpirun --allow-run-as-root; on few cores: --oversubscribe;
//    RESHARD_BACKEND_DIR=build/<dir>/lib when not installed)
//
// Cases: many tiny and small tensors (norms, biases, a transformer block's
// worth of weights), row-sharded to column-sharded, so that every message
// gathers or stages many strided pieces, and a few medium ones, each with the MPI transport's
// default packing (derived datatypes) and with staging.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/wait.h"

using namespace reshard;

namespace {

using Clock = reshard::WaitClock;

bool g_csv = false;

// `tensors` tensors of rows x cols f32, rows split over the mesh's devices
// -> columns split over them; 2 devices per rank.
PlanInput make_input(int ranks, int tensors, int64_t rows, int64_t cols) {
  const int devices = 2 * ranks;
  auto mesh = std::make_shared<Mesh>();
  mesh->axis_names = {"x"};
  mesh->shape = {devices};
  for (int d = 0; d < devices; ++d) mesh->devices.push_back(d);
  PlanInput in;
  for (int d = 0; d < devices; ++d) in.topology.add({d, d / 2, d / 2, d % 2});
  for (int i = 0; i < tensors; ++i) {
    TensorSpec t;
    t.name = "layer." + std::to_string(i);
    t.shape = {rows + i % 3, cols};  // uneven sizes too
    t.dtype = DType::kF32;
    t.src = Layout::from_named({mesh, {{"x"}, {}}, {}, ReduceOp::kSum}, t.shape, t.name + ".src");
    t.dst = Layout::from_named({mesh, {{}, {"x"}}, {}, ReduceOp::kSum}, t.shape, t.name + ".dst");
    in.tensors.push_back(std::move(t));
  }
  return in;
}

// The slowest rank's value (also a barrier).
double slowest(Transport& t, double mine) {
  const auto all = t.allgather(std::as_bytes(std::span(&mine, 1)), 120);
  double m = 0;
  for (const auto& r : all) {
    double v = 0;
    std::memcpy(&v, r.data(), sizeof v);
    m = std::max(m, v);
  }
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_case(Engine& engine, const char* name, const PlanInput& in,
              ExecuteOptions::Packing packing, int iters) {
  Transport& transport = engine.transport();
  const int rank = transport.info().rank;
  const Plan plan = make_plan(in, {PlanScope::kProcess, rank});
  OracleBuffers buffers = fill_sources(make_plan(in, {PlanScope::kGlobal, 0}));
  std::vector<TensorBuffers> views = buffers.views();
  ExecuteOptions cached;
  cached.packing = packing;
  ExecuteOptions fresh = cached;
  fresh.cache_schedule = false;
  engine.execute(plan, rank, views, cached);  // agreement, first build, page faults
  ExecuteStats last;
  std::vector<double> with_cache, without;
  for (int i = 0; i < iters; ++i) {
    for (int k = 0; k < 2; ++k) {
      const int arm = (i + k) % 2;  // alternate which goes first
      slowest(transport, 0);        // barrier
      const auto t0 = Clock::now();
      last = engine.execute(plan, rank, views, arm == 0 ? cached : fresh);
      const double s = reshard::seconds_since(t0);
      (arm == 0 ? with_cache : without).push_back(slowest(transport, s));
      if (arm == 0 && !last.schedule_cached) fail(ErrorCode::kInternal, "cache missed");
    }
  }
  const double c = median(with_cache);
  const double u = median(without);
  const char* mode = packing == ExecuteOptions::Packing::kStaging ? "staging" : "gather";
  if (rank != 0) return;
  if (g_csv) {
    std::printf("%s\t%s\t%lld\t%lld\t%.3f\t%.3f\t%.3f\n", name, mode,
                static_cast<long long>(last.messages_sent + last.messages_received),
                static_cast<long long>(plan.stats().network_bytes), u * 1e6, c * 1e6, u / c);
    return;
  }
  std::printf(
      "%-34s %-7s %4lld msgs (rank 0), %8.1f KiB moved: without cache %8.1f us, with %8.1f us, "
      "ratio %.2fx\n",
      name, mode, static_cast<long long>(last.messages_sent + last.messages_received),
      static_cast<double>(plan.stats().network_bytes) / 1024, u * 1e6, c * 1e6, u / c);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 200;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--csv")) g_csv = true;
  }
  try {
    Engine engine(make_mpi_transport());
    const int ranks = engine.transport().info().size;
    if (engine.transport().info().rank == 0) {
      if (g_csv)
        std::printf("case\tpacking\tmessages\tnetwork_bytes\tuncached_us\tcached_us\tratio\n");
      else
        std::printf("%d ranks, 2 devices each, %d iterations, median of the slowest rank\n", ranks,
                    iters);
    }
    struct Case {
      const char* name;
      int tensors;
      int64_t rows, cols;
    };
    const Case cases[] = {
        {"256 tensors 16x64 f32 (tiny)", 256, 16, 64},
        {"64 tensors 96x64 f32 (small)", 64, 96, 64},
        {"8 tensors 512x512 f32 (medium)", 8, 512, 512},
    };
    for (const Case& c : cases) {
      const PlanInput in = make_input(ranks, c.tensors, c.rows, c.cols);
      for (auto packing : {ExecuteOptions::Packing::kAuto, ExecuteOptions::Packing::kStaging}) {
        run_case(engine, c.name, in, packing, iters);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error [%s]: %s\n", error_code_name(e.code()), e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
  return 0;
}
