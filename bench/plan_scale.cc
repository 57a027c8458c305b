// Planning time at fleet scale (issue 2 benchmark): global statistics of the
// whole plan and one process's part, for a 405B-class model from FSDP over
// 1,024 devices to dp=128 x tp=8 on the same devices and to a disjoint
// 256-device mesh; and the output-sensitive planner against the naive
// all-pairs planner on a case small enough for the latter. Process 0's part
// is planned on one thread and on --threads N (default: every hardware
// thread), with the ratio and a check that both parts are equal. With
// --single-hop, the same cases are also planned without relays and
// reduce-scatter, alternating with the staged plans, to show what stages
// cost the planner. With --spec FILE (and --budget BYTES: the spec's
// options.staging_budget_bytes instead of its own) the same figures for
// that spec's plan instead of the built-in cases: global statistics, the
// estimate of every part (estimate_plan) and process 0's part as a worker
// plans it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "model_cases.h"
#include "reshard/spec.h"
#include "reshard/wire.h"

using namespace reshard;

namespace {

using bench::median_seconds;

// Times process 0's part planned on `threads` threads; `part` receives it.
double time_part(const PlanInput& in, int repeat, int32_t threads, ProcessPart& part) {
  PlanRequest r;
  r.scope = PlanScope::kProcess;
  r.process = 0;
  r.global_stats = false;
  r.threads = threads;
  // Timed as a worker pays for it: planning and releasing the plan.
  const double t = median_seconds(repeat, [&] { (void)make_plan(in, r).part(0); });
  part = make_plan(in, r).part(0);
  return t;
}

bool fleet(const char* name, const PlanInput& in, int repeat, int32_t threads,
           bool estimate = false) {
  Plan global;
  const double tg = median_seconds(repeat, [&] {
    global = make_plan(in, {PlanScope::kGlobal, 0, true});
  });
  if (estimate) {
    PlanEstimate e;
    const double t = median_seconds(repeat, [&] { e = estimate_plan(in); });
    std::printf("  estimate of every part (estimate_plan): %.1f ms (%lld parts, %lld pieces)\n",
                t * 1e3, (long long)e.parts, (long long)e.pieces);
  }
  // One thread, then `threads` (the baseline and the figure in one run).
  ProcessPart one, many;
  const double tp = time_part(in, repeat, 1, one);
  const double tn = threads == 1 ? tp : time_part(in, repeat, threads, many);
  const bool same = threads == 1 || one == many;
  const size_t part_pieces = one.local.size() + one.send_pieces.size() + one.recv_pieces.size();
  const size_t part_msgs = one.sends.size() + one.recvs.size();
  const PlanStats& s = global.stats();
  std::printf(
      "%s: %zu tensors, %lld pieces in the whole plan, network %.1f GiB (bound %.1f GiB), "
      "max send %.2f GiB (bound %.2f), %lld messages, cross-host %.1f GiB\n",
      name, in.tensors.size(), (long long)s.pieces, s.network_bytes / 1073741824.0,
      s.lower_bound_network_bytes / 1073741824.0, s.max_send_bytes / 1073741824.0,
      s.lower_bound_max_send_bytes / 1073741824.0, (long long)s.messages,
      s.cross_host_bytes / 1073741824.0);
  // The worker's bytes: process 0's part with the global statistics.
  const Plan worker = make_plan(in, {PlanScope::kProcess, 0, true});
  EncodeOptions eo;
  eo.all_parts = false;
  eo.process = 0;
  std::vector<uint8_t> bytes;
  const double te = median_seconds(repeat, [&] { bytes = encode_plan(worker, eo); });
  const double td = median_seconds(repeat, [&] { (void)decode_plan(bytes); });
  std::printf(
      "  process 0 plan bytes: %.1f MiB (%.1f B/piece), encode %.1f ms, decode+verify %.1f ms\n",
      bytes.size() / 1048576.0,
      static_cast<double>(bytes.size()) / std::max<size_t>(part_pieces, 1), te * 1e3, td * 1e3);
  std::printf(
      "  global statistics: %.1f ms   process 0 part: %.1f ms (%zu pieces, %zu messages), "
      "%d rounds, peak staging %.2f GiB\n",
      tg * 1e3, tp * 1e3, part_pieces, part_msgs, s.rounds, s.peak_staging_bytes / 1073741824.0);
  std::printf("  process 0 part on %d threads: %.1f ms, %.2fx the single-threaded time%s\n",
              threads, tn * 1e3, tp / tn, same ? "" : "  PARTS DIFFER");
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  // Threads of the parallel runs; 0 (the default) is the hardware's count.
  int32_t threads = 0;
  bool single_hop = false;
  const char* spec_file = nullptr;
  int64_t budget_arg = -1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--single-hop")) single_hop = true;
    if (!std::strcmp(argv[i], "--spec") && i + 1 < argc) spec_file = argv[++i];
    if (!std::strcmp(argv[i], "--budget") && i + 1 < argc) budget_arg = std::atoll(argv[++i]);
    if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
  }
  if (threads <= 0)
    threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  bool ok = true;
  if (spec_file) {
    Spec spec = load_spec(spec_file);
    if (budget_arg >= 0) spec.input.options.staging_budget_bytes = budget_arg;
    std::printf("== %s, staging budget %lld bytes\n", spec_file,
                (long long)spec.input.options.staging_budget_bytes);
    return fleet(spec_file, spec.input, repeat, threads, true) ? 0 : 1;
  }
  bench::ModelShape m;
  for (int64_t budget : {int64_t{0}, int64_t{1} << 30}) {
    std::printf("== staging budget: %s\n",
                budget ? "1 GiB per device (rounds)" : "unbounded (one round)");
    PlanInput same = bench::transformer_case(m, 1024, 0, 1024, 8, 8);
    same.options.staging_budget_bytes = budget;
    PlanInput disjoint = bench::transformer_case(m, 1024, 1024, 256, 8, 8);
    disjoint.options.staging_budget_bytes = budget;
    for (bool staged : {true, false}) {
      if (!staged && !single_hop) break;
      same.options.relays = disjoint.options.relays = staged;
      same.options.reduce_scatter = disjoint.options.reduce_scatter = staged;
      const char* kind = staged ? "staged" : "single-hop";
      std::printf("-- %s plans\n", kind);
      ok &= fleet("405B FSDP dp=1024 -> dp=128 x tp=8 (same devices)", same, repeat, threads);
      ok &= fleet("405B FSDP dp=1024 -> dp=32 x tp=8 (disjoint 256 devices)", disjoint, repeat,
                  threads);
    }
  }
  // Naive comparison: 8 layers over 64 -> 64 devices.
  bench::ModelShape small;
  small.layers = 8;
  PlanInput in = bench::transformer_case(small, 64, 0, 64, 8, 8);
  in.options.staging_budget_bytes = 0;  // the naive planner has no rounds
  NaivePlanResult naive;
  Plan plan;
  const double tn = median_seconds(std::max(1, repeat / 2), [&] { naive = naive_plan(in); });
  const double tr = median_seconds(repeat, [&] { plan = make_plan(in); });
  std::printf(
      "naive all-pairs vs reshard (8 layers, 64 -> 8x8 devices, every part): naive %.1f ms, "
      "reshard %.1f ms, ratio %.1fx (pieces %lld vs %lld)\n",
      tn * 1e3, tr * 1e3, tn / tr, (long long)naive.pieces, (long long)plan.stats().pieces);
  return ok && naive.network_bytes == plan.stats().network_bytes ? 0 : 1;
}
