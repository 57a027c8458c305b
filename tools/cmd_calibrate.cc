// `reshard calibrate`: measure α and bandwidth between two MPI ranks with
// the engine itself (ping-pong plans: one tensor moving from rank 0 to
// rank 1, then back), and write them as a simulator topology file
// (reshard/simulate.h) for `reshard simulate --topology`.
//
//   mpirun -np 2 reshard calibrate --out calibrated.json
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>

#include "cli.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/simulate.h"

namespace reshard::cli {
namespace {

struct CalibrateArgs {
  std::string out;
  int64_t bytes = int64_t{64} << 20;
  int iters = 21;
  double timeout = 120;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One u8 tensor of `bytes` on device `from` (process `from`, host `from`)
// moving whole to the other device.
PlanInput one_way(int64_t bytes, int from) {
  PlanInput in;
  for (int32_t d = 0; d < 2; ++d) in.topology.add({d, d, d, 0});
  auto mesh = [](int64_t device) {
    auto m = std::make_shared<Mesh>();
    m->axis_names = {"x"};
    m->shape = {1};
    m->devices = {device};
    return m;
  };
  TensorSpec t;
  t.name = "payload";
  t.shape = {bytes};
  t.dtype = DType::kU8;
  t.src = Layout::from_named({mesh(from), {{}}, {}, ReduceOp::kSum}, t.shape, "src");
  t.dst = Layout::from_named({mesh(1 - from), {{}}, {}, ReduceOp::kSum}, t.shape, "dst");
  in.tensors.push_back(std::move(t));
  in.options.staging_budget_bytes = 0;  // one message
  return in;
}

// Median over `iters` ping-pongs (rank 0 -> 1, then 1 -> 0) of the one-way
// time, each execution after a barrier and ending when its slower rank ends.
double one_way_seconds(Engine& engine, int rank, int64_t bytes, const CalibrateArgs& args) {
  Transport& transport = engine.transport();
  std::vector<double> times;
  std::vector<std::byte> src(static_cast<size_t>(bytes)), dst(static_cast<size_t>(bytes));
  for (int from = 0; from < 2; ++from) {
    const Plan plan = make_plan(one_way(bytes, from), PlanRequest{PlanScope::kProcess, rank, true});
    std::vector<TensorBuffers> views(1);
    views[0].src.resize(1);
    views[0].dst.resize(1);
    if (rank == from)
      views[0].src[0] = {src.data(), bytes};
    else
      views[0].dst[0] = {dst.data(), bytes};
    ExecuteOptions options;
    options.timeout_seconds = args.timeout;
    engine.execute(plan, rank, views, options);  // warm-up and agreement
    for (int i = 0; i < args.iters; ++i) {
      transport.allgather({}, args.timeout);  // barrier
      const auto t0 = WaitClock::now();
      engine.execute(plan, rank, views, options);
      const double s = seconds_since(t0);
      const auto all = transport.allgather(
          std::span<const std::byte>(reinterpret_cast<const std::byte*>(&s), sizeof s),
          args.timeout);
      double slowest = 0;
      for (const auto& r : all) {
        double v = 0;
        std::memcpy(&v, r.data(), sizeof v);
        slowest = std::max(slowest, v);
      }
      times.push_back(slowest);
    }
  }
  return median(times);
}

int run_calibrate(const CalibrateArgs& args) {
  Engine engine(make_mpi_transport());
  const TransportInfo info = engine.transport().info();
  if (info.size != 2)
    throw UsageError("calibrate runs on exactly 2 ranks (mpirun -np 2), got " +
                     std::to_string(info.size));
  const int rank = info.rank;
  const double alpha = one_way_seconds(engine, rank, 1, args);
  const double big = one_way_seconds(engine, rank, args.bytes, args);
  if (!(big > alpha))
    throw Failure("the " + human_bytes(static_cast<double>(args.bytes)) + " plan took " +
                  human_seconds(big) + ", no longer than the 1-byte one (" + human_seconds(alpha) +
                  "): raise --bytes");
  const double bps = static_cast<double>(args.bytes) / (big - alpha);
  if (rank != 0) return 0;
  ClusterTopology c;
  c.name = "calibrated by reshard calibrate: MPI ping-pong, " + std::to_string(args.iters) +
           " iterations each way, median; 1 byte: " + human_seconds(alpha) + ", " +
           human_bytes(static_cast<double>(args.bytes)) + ": " + human_seconds(big);
  c.alpha_seconds = alpha;
  // Both ranks are processes of one machine here: the same copy serves for
  // messages inside and between "hosts".
  c.nic_bytes_per_second = bps;
  c.intra_host_bytes_per_second = bps;
  const std::string text = cluster_topology_json(c) + "\n";
  parse_cluster_topology(text);  // what `simulate --topology` will accept
  std::cout << text;
  if (!args.out.empty()) {
    std::ofstream f(args.out, std::ios::trunc);
    if (!f || !(f << text)) throw Failure("--out: cannot write \"" + args.out + "\"");
    std::cerr << "wrote " << args.out << "\n";
  }
  return 0;
}

}  // namespace

Runner add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure alpha and bandwidth between 2 MPI ranks; write a `simulate` topology file");
  cmd->add_option("--out", args->out, "write the topology JSON here (also printed)")
      ->type_name("FILE");
  cmd->add_option("--bytes", args->bytes, "bytes of the bandwidth measurement")
      ->check(CLI::Range(int64_t{1} << 10, int64_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--iters", args->iters, "ping-pongs per direction and size (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--timeout", args->timeout, "seconds any one wait may take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->footer(
      "Example:\n  mpirun --allow-run-as-root --oversubscribe -np 2 reshard calibrate --out "
      "calibrated.json\n\nalpha_seconds is the median one-way time of a 1-byte plan; the "
      "bandwidth is\n--bytes over (the median time of a --bytes plan - alpha). Both come from "
      "the\nengine over the mpi transport, so they include its per-message work.\n");
  return [args]() { return run_calibrate(*args); };
}

}  // namespace reshard::cli
