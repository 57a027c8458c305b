// `reshard run`: execute a spec's plan with generated data over a transport
// and check every destination element.
//
//   mpirun -np P reshard run --spec F --transport mpi [--iters K] [--format json]
//   mpirun -np P reshard run --plan F.rsplan --transport mpi
//   reshard run --spec F --transport local
//
// With `mpi` every rank plans its own part (or takes it from a plan file
// written by `reshard plan --out`), fills its source shards with
// the oracle's values (reshard/oracle.h), executes K timed iterations (each
// after a barrier, after one untimed warm-up that also runs the agreement),
// and checks its destination shards; rank 0 prints the result for all
// ranks. This binary does not link MPI: the transport's backend library is
// loaded at run time.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"

namespace reshard::cli {
namespace {

struct RunArgs {
  InputOptions input;
  std::string transport = "mpi";
  int iters = 3;
  int warmup = 1;
  std::string format = "text";
  double timeout = 300;
  std::string packing = "auto";
  double max_gib = 4;
  int64_t max_plan_bytes = 0;  // PlanRequest::max_plan_bytes
  int32_t last_stage = -1;     // ExecuteOptions::last_stage
  bool no_overlap = false;     // ExecuteOptions::overlap = false
};

// One rank's result, exchanged as a fixed-size record.
struct RankResult {
  uint8_t verified = 0;
  uint8_t partial_checked = 0;
  uint8_t pad[6] = {};
  int64_t elements = 0;
  int64_t mismatches = 0;
  int64_t staging_peak = 0;
  int64_t bytes_sent = 0;
  int64_t rounds = 0;
  double wait_seconds = 0;  // ExecuteStats::wait_seconds of the last iteration
  int64_t overlapped_stage_batches = 0;
};

// Where ranks waited in the last iteration (ExecuteStats), for profiling.
struct RankWaits {
  std::vector<double> wait_seconds;  // per rank
  int64_t overlapped_stage_batches = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Without `processes` in the spec every device is on process 0: spread the
// devices over the ranks in contiguous blocks of the sorted device ids
// (device i of n goes to rank floor(i * size / n)), host = rank, ordinal =
// position on its rank.
void map_devices(PlanInput& input, int size) {
  const PlanFootprint fp = footprint(input);
  bool all_zero = true;
  int32_t max_process = 0;
  for (int64_t d : fp.devices) {
    const int32_t p = input.topology.info(d).process;
    all_zero = all_zero && p == 0;
    max_process = std::max(max_process, p);
  }
  if (all_zero && size > 1) {
    Topology topo;
    const int64_t n = static_cast<int64_t>(fp.devices.size());
    std::vector<int32_t> ordinals(static_cast<size_t>(size), 0);
    for (int64_t i = 0; i < n; ++i) {
      DeviceInfo info;
      info.device = fp.devices[static_cast<size_t>(i)];
      info.process = static_cast<int32_t>(i * size / n);
      info.host = info.process;
      info.ordinal = ordinals[static_cast<size_t>(info.process)]++;
      topo.add(info);
    }
    input.topology = topo;
    return;
  }
  if (max_process >= size) {
    throw UsageError("the spec puts devices on process " + std::to_string(max_process) + " but " +
                     std::to_string(size) + " rank(s) run (start at least " +
                     std::to_string(max_process + 1) + " with mpirun -np)");
  }
}

ExecuteOptions::Packing parse_packing(const std::string& s) {
  if (s == "staging") return ExecuteOptions::Packing::kStaging;
  if (s == "gather") return ExecuteOptions::Packing::kGather;
  return ExecuteOptions::Packing::kAuto;
}

int64_t gib_bytes(double gib) { return static_cast<int64_t>(gib * 1024 * 1024 * 1024); }

double shard_bytes(const PlanInput& input) {
  double bytes = 0;
  for (const TensorSpec& t : input.tensors) {
    const double size = static_cast<double>(dtype_size(t.dtype));
    for (const Layout* l : {&t.src, &t.dst}) {
      for (size_t e = 0; e < l->num_entries(); ++e) {
        bytes += static_cast<double>(l->box(e).volume()) *
                 (l == &t.dst ? static_cast<double>(dtype_size(out_dtype(t))) : size);
      }
    }
  }
  return bytes;
}

void print_result(const RunArgs& args, const Plan& plan, int ranks,
                  const std::vector<double>& seconds, bool verified, int64_t elements,
                  int64_t mismatches, int64_t staging_peak, const std::string& note,
                  const RankWaits& waits = {}) {
  const int64_t network = plan.has_stats() ? plan.stats().network_bytes : 0;
  const double med = median(seconds);
  const double rate = med > 0 ? static_cast<double>(network) / med : 0;
  if (args.format == "json") {
    nlohmann::json j;
    j["verified"] = verified;
    j["iters"] = args.iters;
    j["seconds"] = seconds;
    j["network_bytes"] = network;
    j["transport"] = args.transport;
    j["ranks"] = ranks;
    j["median_seconds"] = med;
    j["bytes_per_second"] = rate;
    j["elements_checked"] = elements;
    j["mismatches"] = mismatches;
    j["rounds"] = plan.has_stats() ? plan.stats().rounds : 0;
    j["messages"] = plan.has_stats() ? plan.stats().messages : 0;
    j["staging_budget_bytes"] = plan.options().staging_budget_bytes;
    j["staging_peak_bytes"] = staging_peak;
    j["fingerprint"] = hex64(plan.fingerprint());
    if (!note.empty()) j["note"] = note;
    if (!waits.wait_seconds.empty()) {
      j["rank_wait_seconds"] = waits.wait_seconds;
      j["overlapped_stage_batches"] = waits.overlapped_stage_batches;
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "run: " << plan.tensors().size() << " tensors over " << ranks << " rank(s) ("
              << args.transport << "), plan " << hex64(plan.fingerprint()) << ": "
              << human_bytes(static_cast<double>(network)) << " over the network";
    if (plan.has_stats()) {
      std::cout << " in " << with_commas(plan.stats().messages) << " messages, "
                << plan.stats().rounds << " round(s)";
    }
    std::cout << "\n";
    for (size_t i = 0; i < seconds.size(); ++i) {
      std::cout << "  iteration " << i + 1 << ": " << human_seconds(seconds[i]);
      if (seconds[i] > 0 && network > 0) {
        std::cout << " (" << human_bytes(static_cast<double>(network) / seconds[i]) << "/s)";
      }
      std::cout << "\n";
    }
    std::cout << "  staging: peak " << human_bytes(static_cast<double>(staging_peak))
              << " per device";
    if (plan.options().staging_budget_bytes > 0) {
      std::cout << " (budget "
                << human_bytes(static_cast<double>(plan.options().staging_budget_bytes)) << ")";
    }
    std::cout << "\n";
    if (!note.empty()) std::cout << "  note: " << note << "\n";
    std::cout << (verified ? "verified " : "NOT verified: ") << with_commas(elements)
              << " destination elements checked, " << with_commas(mismatches) << " wrong\n";
  }
  std::cout.flush();
}

int run_local(const RunArgs& args, Spec spec, std::optional<Plan> from_file) {
  if (shard_bytes(spec.input) > args.max_gib * 1024 * 1024 * 1024) {
    throw UsageError("the shards of this spec need " + human_bytes(shard_bytes(spec.input)) +
                     ", above --max-gib");
  }
  if (from_file) {
    for (int32_t p : from_file->processes())
      if (!from_file->parts().count(p))
        throw InvalidInput("--plan: the file holds no part for process " + std::to_string(p) +
                           "; --transport local runs every process and needs every part (write "
                           "the file without --process)");
  }
  PlanRequest request{PlanScope::kAll, 0, true};
  request.max_plan_bytes = args.max_plan_bytes;
  const Plan plan =
      from_file ? std::move(*from_file) : plan_spec(spec.input, request, "--transport mpi");
  OracleBuffers buffers = fill_sources(plan, gib_bytes(args.max_gib));
  std::vector<TensorBuffers> views = buffers.views();
  Engine engine(make_local_transport(), EngineOptions{.schedule_cache_entries = 0});
  ExecuteOptions options;
  options.agreement = ExecuteOptions::Agreement::kSkip;
  options.last_stage = args.last_stage;
  for (int i = 0; i < args.warmup; ++i) engine.execute(plan, kAllProcesses, views, options);
  std::vector<double> seconds;
  for (int i = 0; i < args.iters; ++i) {
    const auto t0 = WaitClock::now();
    engine.execute(plan, kAllProcesses, views, options);
    seconds.push_back(seconds_since(t0));
  }
  const OracleReport report =
      args.last_stage >= 0
          ? check_destinations_through_stage(plan, buffers, static_cast<uint32_t>(args.last_stage))
          : check_destinations(plan, buffers, 10);
  print_result(args, plan, 1, seconds, report.ok(), report.elements, report.mismatches, 0, "");
  if (!report.ok()) {
    throw Failure("verification failed: " + std::to_string(report.mismatches) + " wrong elements");
  }
  return 0;
}

// Checks this rank's destination shards. Non-partial destinations against
// the oracle; partial destinations (whose value is spread over summands on
// several ranks) against execute_host of the whole plan, when every shard
// fits in memory here.
RankResult verify_rank(const RunArgs& args, const PlanInput& input, const Plan& plan, int rank,
                       const std::vector<std::vector<std::vector<std::byte>>>& dst, bool from_file,
                       std::string* note) {
  RankResult r;
  OracleReport report;
  bool any_partial = false;
  // --last-stage: the elements this rank's part writes by then.
  StageCoverage cov;
  if (args.last_stage >= 0) cov = stage_coverage(plan, static_cast<uint32_t>(args.last_stage));
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& spec = plan.tensors()[t];
    for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
      if (plan.topology().info(spec.dst.device(e)).process != rank) continue;
      if (spec.dst.partial()) {
        any_partial = true;
        continue;
      }
      const std::vector<uint8_t>* only = nullptr;
      if (args.last_stage >= 0) {
        only = &cov.written[t][e];
        if (only->empty()) continue;
      }
      check_plan_destination_shard(plan.tensors(), static_cast<uint32_t>(t), e, dst[t][e], report,
                                   10, only);
    }
  }
  r.partial_checked = 1;
  if (any_partial && args.last_stage >= 0) {
    r.partial_checked = 0;
    *note = "partial destinations not checked (--last-stage)";
  } else if (any_partial) {
    if (shard_bytes(input) > args.max_gib * 1024 * 1024 * 1024) {
      r.partial_checked = 0;
      *note = "partial destinations not checked (the whole plan exceeds --max-gib)";
    } else {
      // The reference runs the same plan (a plan file holding every part:
      // that plan, so that sums round in the same order) in this process.
      bool whole = from_file;
      for (int32_t p : plan.processes()) whole = whole && plan.parts().count(p) > 0;
      PlanRequest request{PlanScope::kAll, 0, false};
      request.max_plan_bytes = args.max_plan_bytes;
      const Plan full = whole ? plan : make_plan(input, request);
      OracleBuffers ref = fill_sources(full, gib_bytes(args.max_gib));
      std::vector<TensorBuffers> views = ref.views();
      execute_host(full, views);
      for (size_t t = 0; t < plan.tensors().size(); ++t) {
        const TensorSpec& spec = plan.tensors()[t];
        if (!spec.dst.partial()) continue;
        const int64_t es = dtype_size(spec.dtype);
        for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
          if (plan.topology().info(spec.dst.device(e)).process != rank) continue;
          const auto& got = dst[t][e];
          const auto& want = ref.dst[t][e];
          for (size_t i = 0; i < got.size(); i += static_cast<size_t>(es)) {
            ++report.elements;
            if (std::memcmp(got.data() + i, want.data() + i, static_cast<size_t>(es)) != 0) {
              ++report.mismatches;
            }
          }
        }
      }
    }
  }
  r.elements = report.elements;
  r.mismatches = report.mismatches;
  r.verified = report.ok() && r.partial_checked ? 1 : 0;
  for (const OracleMismatch& m : report.first) {
    std::cerr << "rank " << rank << ": tensor " << m.tensor << " device " << m.device
              << ": expected " << m.expected << ", got " << m.got << "\n";
  }
  return r;
}

// A plan file's processes are the ranks. Every rank reads the same file,
// so these checks fail alike on every rank, before the first message.
void check_file_ranks(const Plan& plan, int size) {
  const std::vector<int32_t>& processes = plan.processes();
  if (!processes.empty() && processes.back() >= size)
    throw UsageError("the plan puts devices on process " + std::to_string(processes.back()) +
                     " but " + std::to_string(size) + " rank(s) run (start at least " +
                     std::to_string(processes.back() + 1) + " with mpirun -np)");
  for (int32_t p : processes)
    if (!plan.parts().count(p))
      throw InvalidInput("--plan: the file holds no part for process " + std::to_string(p) +
                         "; every rank reads the same file, so it needs every part (write it "
                         "without --process)");
}

int run_mpi(const RunArgs& args, Spec spec, std::optional<Plan> from_file) {
  Engine engine(make_mpi_transport());
  Transport& transport = engine.transport();
  const TransportInfo info = transport.info();
  const int rank = info.rank;
  const int size = info.size;
  // Everything that can fail alike on every rank before the first message
  // (spec, mapping, planning) throws here on every rank. A plan file keeps
  // its own processes (no mapping) and budget.
  if (from_file) {
    check_file_ranks(*from_file, size);
  } else {
    map_devices(spec.input, size);
  }
  const PlanInput& input = spec.input;
  bool mine = false;
  for (int64_t d : footprint(input).devices) mine = mine || input.topology.info(d).process == rank;
  PlanRequest request = mine ? PlanRequest{PlanScope::kProcess, rank, true}
                             : PlanRequest{PlanScope::kGlobal, 0, true};
  request.max_plan_bytes = args.max_plan_bytes;
  const bool from_file_given = from_file.has_value();
  const Plan plan = from_file ? std::move(*from_file) : make_plan(input, request);

  // This rank's shards: sources from the oracle, destinations poisoned.
  const size_t nt = plan.tensors().size();
  std::vector<std::vector<std::vector<std::byte>>> src(nt), dst(nt);
  std::vector<TensorBuffers> views(nt);
  for (size_t t = 0; t < nt; ++t) {
    const TensorSpec& spec_t = plan.tensors()[t];
    const int64_t es = dtype_size(spec_t.dtype);
    src[t].resize(spec_t.src.num_entries());
    dst[t].resize(spec_t.dst.num_entries());
    views[t].src.resize(spec_t.src.num_entries());
    views[t].dst.resize(spec_t.dst.num_entries());
    for (size_t e = 0; e < spec_t.src.num_entries(); ++e) {
      if (input.topology.info(spec_t.src.device(e)).process != rank) continue;
      src[t][e].resize(static_cast<size_t>(spec_t.src.box(e).volume() * es));
      fill_source_shard(spec_t, static_cast<uint32_t>(t), e, src[t][e]);
      views[t].src[e] = {src[t][e].data(), static_cast<int64_t>(src[t][e].size())};
    }
    for (size_t e = 0; e < spec_t.dst.num_entries(); ++e) {
      if (input.topology.info(spec_t.dst.device(e)).process != rank) continue;
      dst[t][e].resize(
          static_cast<size_t>(spec_t.dst.box(e).volume() * dtype_size(out_dtype(spec_t))));
      poison_plan_destination_shard(plan.tensors(), static_cast<uint32_t>(t), e, dst[t][e]);
      views[t].dst[e] = {dst[t][e].data(), static_cast<int64_t>(dst[t][e].size())};
    }
  }

  ExecuteOptions options;
  options.timeout_seconds = args.timeout;
  options.packing = parse_packing(args.packing);
  options.last_stage = args.last_stage;
  options.overlap = !args.no_overlap;
  std::vector<double> seconds;
  ExecuteStats stats;
  try {
    for (int i = 0; i < args.warmup; ++i) stats = engine.execute(plan, rank, views, options);
    for (int i = 0; i < args.iters; ++i) {
      transport.allgather({}, args.timeout);  // barrier
      const auto t0 = WaitClock::now();
      stats = engine.execute(plan, rank, views, options);
      seconds.push_back(seconds_since(t0));
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kTimeout || e.code() == ErrorCode::kTransport) {
      // Peers may be gone and operations are pending: end the job.
      std::cerr << "reshard: error: rank " << rank << ": " << e.what() << " ["
                << error_code_name(e.code()) << "]; aborting the MPI job\n";
      std::cerr.flush();
      transport.abort(1);
    }
    throw;
  }

  std::string note;
  RankResult mine_result = verify_rank(args, input, plan, rank, dst, from_file_given, &note);
  mine_result.staging_peak = stats.staging_peak_bytes;
  mine_result.bytes_sent = stats.bytes_sent;
  mine_result.rounds = stats.rounds;
  mine_result.wait_seconds = stats.wait_seconds;
  mine_result.overlapped_stage_batches = stats.overlapped_stage_batches;
  // Per rank: the result record, then its iteration times.
  std::vector<std::byte> record(sizeof(RankResult) + seconds.size() * sizeof(double));
  std::memcpy(record.data(), &mine_result, sizeof(RankResult));
  if (!seconds.empty()) {
    std::memcpy(record.data() + sizeof(RankResult), seconds.data(),
                seconds.size() * sizeof(double));
  }
  const auto all = transport.allgather(record, args.timeout);
  bool verified = true;
  int64_t elements = 0, mismatches = 0, staging_peak = 0;
  std::vector<double> slowest(seconds.size(), 0.0);
  std::vector<int> bad;
  RankWaits waits;
  for (int r = 0; r < size; ++r) {
    RankResult rr;
    std::memcpy(&rr, all[static_cast<size_t>(r)].data(), sizeof(RankResult));
    waits.wait_seconds.push_back(rr.wait_seconds);
    waits.overlapped_stage_batches += rr.overlapped_stage_batches;
    verified = verified && rr.verified;
    if (!rr.verified) bad.push_back(r);
    elements += rr.elements;
    mismatches += rr.mismatches;
    staging_peak = std::max(staging_peak, rr.staging_peak);
    for (size_t i = 0; i < seconds.size(); ++i) {
      double s = 0;
      std::memcpy(&s, all[static_cast<size_t>(r)].data() + sizeof(RankResult) + i * sizeof(double),
                  sizeof(double));
      slowest[i] = std::max(slowest[i], s);  // an iteration ends when its last rank ends
    }
  }
  if (rank == 0) {
    print_result(args, plan, size, slowest, verified, elements, mismatches, staging_peak, note,
                 waits);
  }
  if (!verified) {
    std::string list;
    for (int r : bad) list += (list.empty() ? "" : ", ") + std::to_string(r);
    throw Failure("verification failed on rank(s) " + list);
  }
  return 0;
}

int run_run(const RunArgs& args) {
  if (args.transport != "mpi" && args.transport != "local") {
    throw UsageError("--transport: must be mpi or local");
  }
  std::optional<Plan> from_file = load_plan_file(args.input);
  // With --plan: the plan's inputs (and the usage checks of --plan, --budget
  // among them).
  Spec spec = load_input(args.input);
  if (args.transport == "local") {
    return run_local(args, std::move(spec), std::move(from_file));
  }
  return run_mpi(args, std::move(spec), std::move(from_file));
}

}  // namespace

Runner add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Execute the plan across MPI ranks (or in-process) on generated data and verify it");
  add_input_options(cmd, args->input);
  add_plan_file_option(cmd, args->input);
  cmd->add_option("--transport", args->transport, "mpi (under mpirun) or local (one process)")
      ->check(CLI::IsMember({"mpi", "local"}))
      ->capture_default_str();
  cmd->add_option("--iters", args->iters, "timed iterations")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup,
                  "untimed iterations first (the first one agrees on the plan)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--format", args->format, "output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--timeout", args->timeout, "seconds any one wait may take before the run fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--packing", args->packing,
                  "how non-contiguous messages are built: auto, staging (box-copy core) or gather "
                  "(MPI derived datatypes)")
      ->check(CLI::IsMember({"auto", "staging", "gather"}))
      ->capture_default_str();
  cmd->add_option("--max-gib", args->max_gib,
                  "memory allowed for checking partial destinations against execute_host")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_max_plan_bytes_option(cmd, args->max_plan_bytes);
  add_last_stage_option(cmd, args->last_stage);
  cmd->add_flag("--no-overlap", args->no_overlap,
                "run each round (of every stage) after the previous one completed, instead of "
                "starting a batch as soon as what it reads arrived (ExecuteOptions::overlap)");
  cmd->footer(
      std::string(
          "Examples:\n"
          "  mpirun -np 3 reshard run --spec examples/specs/small_transformer.json "
          "--transport mpi\n"
          "  reshard run --spec examples/specs/partial_sums.json --transport local "
          "--format json\n"
          "  reshard plan --spec examples/specs/small_transformer.json --out t.rsplan\n"
          "  mpirun -np 3 reshard run --plan t.rsplan --transport mpi\n"
          "Open MPI as root needs --allow-run-as-root; more ranks than cores need\n"
          "--oversubscribe (mpirun --allow-run-as-root --oversubscribe -np 3 ...).\n\n"
          "Devices map to ranks through the spec's `processes` arrays; a spec without them\n"
          "(every device on process 0) is spread over the ranks in contiguous blocks of\n"
          "device ids. A --plan file keeps its processes (rank r runs process r's part,\n"
          "so the file must hold every part) and its staging budget.\n"
          "Times are per iteration, after a barrier, of the slowest rank.\n"
          "Exit status 0 when every destination element on every rank is right.\n\n") +
      kSingleTensorHelp);
  return [args]() { return run_run(*args); };
}

}  // namespace reshard::cli
