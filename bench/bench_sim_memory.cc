// The streaming simulator's memory and time on one spec (simulate_plan, as
// `reshard simulate --spec` plans it: with the topology's costs): its
// estimate from the global statistics, and what its structures held,
// counted (records, lanes, the event loop) against the
// loop's bound from the lanes. Peak resident size: run it under
// /usr/bin/time -v.
//
//   bench_sim_memory SPEC TOPOLOGY [BUDGET_BYTES (-1: the spec's)] [THREADS]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "reshard/error.h"
#include "reshard/simulate.h"
#include "reshard/spec.h"
#include "reshard/wait.h"
#include "sim/stream_memory.h"

int main(int argc, char** argv) {
  using namespace reshard;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SPEC TOPOLOGY [BUDGET_BYTES] [THREADS]\n", argv[0]);
    return 2;
  }
  try {
    PlanInput in = load_spec(argv[1]).input;
    const ClusterTopology c = load_cluster_topology(argv[2]);
    in.options.alpha_seconds = c.alpha_seconds;
    in.options.intra_host_bytes_per_second = c.intra_host_bytes_per_second;
    in.options.inter_host_bytes_per_second = c.nic_bytes_per_second;
    in.options.nics_per_host = c.nics_per_host;
    if (argc > 3 && std::atoll(argv[3]) >= 0) in.options.staging_budget_bytes = std::atoll(argv[3]);
    SimPlanOptions o;
    o.max_bytes = kUnlimitedPlanBytes;
    o.threads = argc > 4 ? std::atoi(argv[4]) : 1;
    const auto t0 = WaitClock::now();
    const int64_t estimate = simulate_plan_memory(in, c, o);
    const double t_estimate = seconds_since(t0);
    sim::StreamBytes n;
    const SimResult r = sim::simulate_plan_counted(in, c, o, n);
    std::printf(
        "messages %lld events %lld predicted %.6f s\n"
        "estimate %lld bytes (%.2f s)\n"
        "counted: peak %lld = records %lld + lanes %lld + loop (at most %lld, "
        "bound %lld)\n"
        "records %.2f bytes a message; plan %.2f s, simulate %.2f s\n",
        static_cast<long long>(r.messages), static_cast<long long>(r.events), r.seconds,
        static_cast<long long>(estimate), t_estimate, static_cast<long long>(n.peak),
        static_cast<long long>(n.records_planned), static_cast<long long>(n.lanes),
        static_cast<long long>(n.loop), static_cast<long long>(n.loop_bound),
        r.messages ? static_cast<double>(n.records_planned) / static_cast<double>(r.messages) : 0.0,
        r.plan_seconds, seconds_since(t0) - t_estimate - r.plan_seconds);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
