// `reshard bench plan`: planning time against the naive all-pairs planner,
// both measured in this run (absolute times on shared machines mean little).
#include <algorithm>
#include <iostream>
#include <thread>

#include "cli.h"
#include "reshard/wire.h"

namespace reshard::cli {
namespace {

struct BenchArgs {
  InputOptions input;
  int repeat = 5;
  bool skip_naive = false;
  int32_t threads = 0;         // of the parallel run; 0 = every hardware thread
  int64_t max_plan_bytes = 0;  // PlanRequest::max_plan_bytes
};

PlanRequest all_parts(const BenchArgs& args) {
  PlanRequest r{PlanScope::kAll, 0, true};
  r.max_plan_bytes = args.max_plan_bytes;
  return r;
}

struct Timing {
  double median = 0, min = 0;
};

template <typename F>
Timing time_runs(int repeat, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = WaitClock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  return {n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2, t.front()};
}

int run_bench_plan(const BenchArgs& args) {
  const Spec spec = load_input(args.input);
  const PlanFootprint fp = footprint(spec.input);
  int64_t pieces = 0, network = 0;
  const Timing fast = time_runs(args.repeat, [&] {
    const Plan plan = plan_spec(spec.input, all_parts(args), "");
    pieces = plan.stats().pieces;
    network = plan.stats().network_bytes;
  });
  std::cout << "bench plan: " << spec.input.tensors.size() << " tensors, " << fp.devices.size()
            << " devices, " << with_commas(pieces) << " pieces, " << args.repeat << " runs each\n";
  std::printf("  %-28s median %10s  (min %s)\n", "make_plan (all parts)",
              human_seconds(fast.median).c_str(), human_seconds(fast.min).c_str());
  const int32_t threads =
      args.threads > 0 ? args.threads
                       : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads > 1) {
    PlanRequest request = all_parts(args);
    request.threads = threads;
    const Timing par = time_runs(args.repeat, [&] { (void)plan_spec(spec.input, request, ""); });
    const bool same = encode_plan(plan_spec(spec.input, request, "")) ==
                      encode_plan(plan_spec(spec.input, all_parts(args), ""));
    const std::string label = "make_plan, " + std::to_string(threads) + " threads";
    std::printf("  %-28s median %10s  (min %s), %.2fx one thread, plan %s\n", label.c_str(),
                human_seconds(par.median).c_str(), human_seconds(par.min).c_str(),
                fast.median / std::max(par.median, 1e-12), same ? "identical" : "DIFFERENT");
    if (!same)
      throw Failure("plans made with 1 and " + std::to_string(threads) + " threads differ");
  }
  if (args.skip_naive) return 0;
  NaivePlanResult naive{};
  const Timing slow = time_runs(args.repeat, [&] { naive = naive_plan(spec.input); });
  std::printf("  %-28s median %10s  (min %s)\n", "naive all-pairs planner",
              human_seconds(slow.median).c_str(), human_seconds(slow.min).c_str());
  std::printf("  %-28s %.2fx\n", "naive / make_plan", slow.median / std::max(fast.median, 1e-12));
  std::cout << "  network bytes: make_plan " << with_commas(network) << ", naive "
            << with_commas(naive.network_bytes)
            << (network == naive.network_bytes ? " (equal)" : " (DIFFERENT)") << "\n";
  std::cout.flush();
  return 0;
}

}  // namespace

Runner add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* cmd = bench->add_subcommand(
      "plan",
      "Median planning time of make_plan and of the naive all-pairs planner, and their ratio");
  add_input_options(cmd, args->input);
  cmd->add_option("--repeat", args->repeat, "runs of each planner")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_flag("--skip-naive", args->skip_naive, "time make_plan only");
  cmd->add_option("--threads", args->threads,
                  "also time make_plan on this many threads (0 = every hardware thread; 1 = "
                  "skip) and check the plan is identical")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add_max_plan_bytes_option(cmd, args->max_plan_bytes);
  cmd->footer(
      std::string("Example:\n  reshard bench plan --spec examples/specs/small_transformer.json "
                  "--repeat 9\n\n") +
      kSingleTensorHelp);
  bench->footer("Example:\n  reshard bench plan --spec examples/specs/small_transformer.json");
  return [args]() { return run_bench_plan(*args); };
}

}  // namespace reshard::cli
