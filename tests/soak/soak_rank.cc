// One job of the soak and fault campaign (tests/soak/soak.py), run under
// mpirun: random reshards (tests/core/random_cases.h) over this communicator,
// each planned here, written to a plan file per rank, read back with
// load_plan and executed over the `mpi` transport with random options
// (staging budget, packing, batches in flight, overlap, a part or the whole
// plan), every destination element on every rank compared with execute_host
// of the whole plan and with the oracle. Optionally one fault at one case on
// one rank (the victim):
//
//   kill          the victim SIGKILLs itself after starting its n-th transfer
//   stop          the victim SIGSTOPs itself after its n-th transfer, and a
//                 child it forked SIGCONTs it after --stop-seconds
//   plan          the victim executes the plan of another case
//   corrupt       one bit of the victim's plan file is flipped
//   small_buffer  one of the victim's destination buffers is one element short
//
// A rank that never starts is the launcher's fault (scripts/mpirun_bounded.py
// --hold-rank), not this program's.
//
// Each rank writes DIR/result.RANK.json when it ends: the cases verified,
// and the fault case's outcome on this rank (ok and verified, or the error
// code, message and seconds). The job ends after the fault case. Exit status
// 0 when this rank saw nothing wrong before the fault case (the fault
// case's outcome is judged by soak.py), 1 otherwise.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/random_cases.h"
#include "mpi/counting_transport.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/wire.h"

namespace reshard {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  uint64_t seed = 1;
  int cases = 10;
  std::string fault = "none";
  int fault_case = -1;
  int victim = -1;
  double timeout = 3;
  double stop_seconds = 8;
  std::string dir = ".";
};

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The case's inputs, devices spread over `size` ranks, a random budget.
PlanInput case_input(uint64_t case_seed, int size) {
  testing::CaseOptions co;
  co.max_devices = 24;
  testing::CaseGen gen(case_seed, co);
  PlanInput in = gen.input();
  Topology topo;
  for (DeviceInfo info : in.topology.devices()) {
    // 11 is prime to every size 2-8: devices spread over every rank.
    info.process = static_cast<int32_t>((info.device * 11 + 3) % size);
    info.host = info.process / 2;
    info.ordinal = static_cast<int32_t>(info.device % 3);
    topo.add(info);
  }
  in.topology = topo;
  const int64_t budgets[] = {0, 512, 2048, 20000, int64_t{1} << 30};
  in.options.staging_budget_bytes = budgets[gen.uni(0, 4)];
  return in;
}

Plan plan_whole(PlanInput& in) {
  try {
    return make_plan(in, PlanRequest{PlanScope::kAll, 0, true});
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    // A budget too small for the peers of a device is refused: retry with
    // a larger one (every rank takes the same branch).
    in.options.staging_budget_bytes = int64_t{1} << 16;
    return make_plan(in, PlanRequest{PlanScope::kAll, 0, true});
  }
}

bool is_local(const Plan& plan, int64_t device, int rank) {
  return plan.topology().info(device).process == rank;
}

// Views of this rank's entries only (others null).
std::vector<TensorBuffers> local_views(const Plan& plan, OracleBuffers& buffers, int rank) {
  std::vector<TensorBuffers> views = buffers.views();
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& spec = plan.tensors()[t];
    for (size_t e = 0; e < spec.src.num_entries(); ++e)
      if (!is_local(plan, spec.src.device(e), rank)) views[t].src[e] = {};
    for (size_t e = 0; e < spec.dst.num_entries(); ++e)
      if (!is_local(plan, spec.dst.device(e), rank)) views[t].dst[e] = {};
  }
  return views;
}

// This rank's destinations against execute_host of the whole plan (bit for
// bit) and, when not partial, against the oracle. "" when all agree.
std::string check_local(const Plan& plan, const OracleBuffers& got, const OracleBuffers& want,
                        int rank, int64_t* elements) {
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& spec = plan.tensors()[t];
    for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
      if (!is_local(plan, spec.dst.device(e), rank)) continue;
      const auto& a = got.dst[t][e];
      const auto& b = want.dst[t][e];
      if (a.size() != b.size() || (!a.empty() && std::memcmp(a.data(), b.data(), a.size()) != 0))
        return "tensor " + spec.name + " dst entry " + std::to_string(e) +
               " differs from execute_host";
      if (!spec.dst.partial()) {
        OracleReport report;
        check_destination_shard(spec, static_cast<uint32_t>(t), e, a, report, 1);
        if (!report.ok())
          return "tensor " + spec.name + " dst entry " + std::to_string(e) +
                 " fails the oracle: expected " + report.first[0].expected + ", got " +
                 report.first[0].got;
      }
      *elements += static_cast<int64_t>(a.size()) / dtype_size(spec.dtype);
    }
  }
  return "";
}

bool all_ranks(Transport& t, bool ok, double timeout) {
  const std::byte mine{static_cast<unsigned char>(ok ? 1 : 0)};
  bool result = true;
  for (const auto& r : t.allgather(std::span(&mine, 1), timeout))
    result = result && r[0] == std::byte{1};
  return result;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

void write_json(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump() << "\n";
  }
  std::filesystem::rename(tmp, path);
}

// Waits (bounded) until every rank in `ranks` has written its result, so
// that ending this process (which makes mpirun end the job) cuts nobody's
// answer short.
void await_results(const std::string& dir, const std::vector<int>& ranks, double seconds) {
  const auto t0 = Clock::now();
  while (since(t0) < seconds) {
    bool all = true;
    for (int r : ranks)
      all = all && std::filesystem::exists(dir + "/result." + std::to_string(r) + ".json");
    if (all) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Stops this process; a forked child continues it after `seconds`.
void stop_for(double seconds) {
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    usleep(static_cast<useconds_t>(seconds * 1e6));
    kill(parent, SIGCONT);
    _exit(0);
  }
  raise(SIGSTOP);
}

int run(const Args& a) {
  auto counter = std::make_shared<testing::StagingCounter>();
  auto counting = std::make_unique<testing::CountingTransport>(make_mpi_transport(), counter);
  testing::CountingTransport* hook = counting.get();
  Engine engine(std::move(counting));
  Transport& transport = engine.transport();
  const int rank = transport.info().rank;
  const int size = transport.info().size;
  const std::string me = std::to_string(rank);
  nlohmann::json result = {{"rank", rank}, {"size", size}, {"fault", a.fault}};
  int64_t verified_elements = 0;
  int verified_cases = 0;
  const bool faulty = a.fault != "none" && a.fault_case >= 0 && a.victim >= 0 && a.victim < size;
  const bool victim = faulty && rank == a.victim;
  bool injected = false;
  // Past --cases while the fault has found no case where it applies (at
  // most 60 more).
  for (int c = 0; c < a.cases || (faulty && !injected && c < a.cases + 60); ++c) {
    const uint64_t case_seed = a.seed * 1000003 + static_cast<uint64_t>(c);
    PlanInput in = case_input(case_seed, size);
    const Plan full = plan_whole(in);
    // The fault goes to the first case at or after --fault-case where it
    // applies (the victim moves data, or holds a destination buffer); every
    // rank decides alike from the whole plan.
    bool victim_moves = false;
    bool victim_dst = false;
    if (faulty) {
      const auto& ps = full.processes();
      victim_moves = std::binary_search(ps.begin(), ps.end(), a.victim) && ps.size() > 1 &&
                     full.has_stats() && full.stats().network_bytes > 0;
      for (const TensorSpec& t : full.tensors())
        for (size_t e = 0; e < t.dst.num_entries(); ++e)
          victim_dst = victim_dst ||
                       (is_local(full, t.dst.device(e), a.victim) && t.dst.box(e).volume() > 0);
    }
    const bool fault_now = faulty && !injected && c >= a.fault_case &&
                           (a.fault == "kill" || a.fault == "stop" ? victim_moves
                            : a.fault == "small_buffer"            ? victim_dst
                                                                   : true);
    std::mt19937_64 mine(case_seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank + 1)));
    std::mt19937_64 shared(case_seed ^ 0x5851f42d4c957f2dull);  // the same on every rank
    const auto coin = [](std::mt19937_64& g, double p) {
      return std::bernoulli_distribution(p)(g);
    };
    const auto t0 = Clock::now();
    std::string error;
    ErrorCode code = ErrorCode::kOk;
    int64_t elements = 0;
    std::string stage = "plan file";
    try {
      // The plan this rank executes, through a plan file: its own part or
      // the whole plan.
      const Plan* source = &full;
      Plan other;
      if (fault_now && victim && a.fault == "plan") {
        PlanInput oi = case_input(case_seed + 7777777, size);
        other = plan_whole(oi);
        source = &other;
      }
      const auto& ps = source->processes();
      const bool part = std::binary_search(ps.begin(), ps.end(), rank) && coin(mine, 0.5);
      std::vector<uint8_t> bytes =
          part ? encode_plan(*source, EncodeOptions{false, rank}) : encode_plan(*source);
      if (fault_now && victim && a.fault == "corrupt") {
        const size_t at = std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(mine);
        const int bit = std::uniform_int_distribution<int>(0, 7)(mine);
        bytes[at] ^= static_cast<uint8_t>(1u << bit);
        result["corrupted"] = {{"byte", at}, {"bit", bit}, {"of", bytes.size()}};
      }
      const std::string path = a.dir + "/plan." + me + ".rsplan";
      write_file(path, bytes);
      const Plan plan = load_plan(path);
      stage = "buffers";
      OracleBuffers want = fill_sources(full);
      {
        std::vector<TensorBuffers> v = want.views();
        execute_host(full, v);
      }
      // Sources and destinations of the plan executed (another case's
      // plan on a victim of `plan`).
      OracleBuffers got = fill_sources(*source);
      std::vector<TensorBuffers> views = local_views(*source, got, rank);
      if (fault_now && victim && a.fault == "small_buffer") {
        for (size_t t = 0; t < full.tensors().size() && !result.contains("shortened"); ++t) {
          for (size_t e = 0; e < views[t].dst.size(); ++e) {
            if (views[t].dst[e].bytes <= 0) continue;
            views[t].dst[e].bytes -= dtype_size(full.tensors()[t].dtype);
            result["shortened"] =
                "tensors[" + std::to_string(t) + "].dst[" + std::to_string(e) + "]";
            break;
          }
        }
      }
      ExecuteOptions options;
      options.timeout_seconds = a.timeout;
      options.max_batches_in_flight = static_cast<int32_t>(1 + mine() % 8);
      options.overlap = coin(shared, 0.8);
      const int packing = static_cast<int>(shared() % 3);
      options.packing = packing == 0   ? ExecuteOptions::Packing::kAuto
                        : packing == 1 ? ExecuteOptions::Packing::kStaging
                                       : ExecuteOptions::Packing::kGather;
      if (coin(shared, 0.2)) options.agreement = ExecuteOptions::Agreement::kEveryCall;
      if (fault_now && victim && (a.fault == "kill" || a.fault == "stop")) {
        const int64_t nth = static_cast<int64_t>(mine() % 4);
        auto seen = std::make_shared<int64_t>(0);
        const std::string fault = a.fault;
        const std::string marker = a.dir + "/fault." + me;
        const double stop_seconds = a.stop_seconds;
        hook->on_op = [seen, nth, fault, marker, stop_seconds](const TransferOp&) {
          if ((*seen)++ != nth) return;
          std::ofstream(marker) << fault << " after " << nth + 1 << " transfer(s) started\n";
          if (fault == "kill") raise(SIGKILL);
          stop_for(stop_seconds);
        };
      }
      stage = "execute";
      const ExecuteStats stats = engine.execute(plan, rank, views, options);
      hook->on_op = nullptr;
      if (fault_now && victim && a.fault == "kill") {
        // Fewer transfers than chosen: die right after them.
        std::ofstream(a.dir + "/fault." + me) << "kill after the transfers\n";
        raise(SIGKILL);
      }
      stage = "check";
      error = check_local(full, got, want, rank, &elements);
      if (error.empty() && !fault_now && coin(shared, 0.3)) {
        // Again (agreement cached, schedule cached), destinations poisoned.
        for (size_t t = 0; t < full.tensors().size(); ++t)
          for (size_t e = 0; e < full.tensors()[t].dst.num_entries(); ++e)
            if (is_local(full, full.tensors()[t].dst.device(e), rank))
              poison_destination_shard(full.tensors()[t], static_cast<uint32_t>(t), e,
                                       got.dst[t][e]);
        engine.execute(plan, rank, views, options);
        int64_t again = 0;
        error = check_local(full, got, want, rank, &again);
        if (!error.empty()) error = "second execution: " + error;
      }
      if (!error.empty()) code = ErrorCode::kInternal;
      (void)stats;
    } catch (const Error& e) {
      hook->on_op = nullptr;
      code = e.code();
      error = e.what();
    }
    const double seconds = since(t0);
    if (fault_now) {
      injected = true;
      result["fault_case"] = c;
      result["outcome"] = code == ErrorCode::kOk ? "ok" : "error";
      result["code"] = error_code_name(code);
      result["message"] = error.substr(0, 2000);
      result["stage"] = stage;
      result["seconds"] = seconds;
      result["elements"] = elements;
      break;
    }
    bool ok = false;
    try {
      ok = all_ranks(transport, error.empty(), a.timeout * 4);
    } catch (const Error& e) {
      error += std::string(error.empty() ? "" : "; ") + "verdict: " + e.what();
    }
    if (!error.empty() || !ok) {
      // Without a fault: any error is a failure of the job.
      result["outcome"] = "failure";
      result["failed_case"] = c;
      result["code"] = error_code_name(code);
      result["message"] = error.empty() ? "another rank failed" : error.substr(0, 2000);
      result["cases"] = verified_cases;
      write_json(a.dir + "/result." + me + ".json", result);
      std::fprintf(stderr, "rank %d case %d (seed %llu): %s\n", rank, c,
                   static_cast<unsigned long long>(case_seed), error.c_str());
      std::fflush(stderr);
      return 1;
    }
    ++verified_cases;
    verified_elements += elements;
  }
  result["cases"] = verified_cases;
  result["verified_elements"] = verified_elements;
  if (!result.contains("outcome")) result["outcome"] = faulty ? "not_injected" : "ok";
  write_json(a.dir + "/result." + me + ".json", result);
  if (faulty) {
    // Peers may be gone or stuck: wait for the others' answers (the killed
    // victim writes none), then leave without MPI_Finalize.
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r)
      if (!(a.fault == "kill" && r == a.victim)) ranks.push_back(r);
    await_results(a.dir, ranks, a.stop_seconds + 4 * a.timeout + 30);
    std::fflush(nullptr);
    std::_Exit(0);
  }
  return 0;
}

}  // namespace
}  // namespace reshard

int main(int argc, char** argv) {
  reshard::Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const std::string v = argv[i + 1];
    if (f == "--seed")
      a.seed = std::stoull(v);
    else if (f == "--cases")
      a.cases = std::stoi(v);
    else if (f == "--fault")
      a.fault = v;
    else if (f == "--fault-case")
      a.fault_case = std::stoi(v);
    else if (f == "--victim")
      a.victim = std::stoi(v);
    else if (f == "--timeout")
      a.timeout = std::stod(v);
    else if (f == "--stop-seconds")
      a.stop_seconds = std::stod(v);
    else if (f == "--dir")
      a.dir = v;
    else {
      std::fprintf(stderr,
                   "usage: soak_rank [--seed S] [--cases N] [--fault "
                   "none|kill|stop|plan|corrupt|small_buffer] [--fault-case K] [--victim R] "
                   "[--timeout T] [--stop-seconds S] [--dir D]\n");
      return 2;
    }
  }
  try {
    return reshard::run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak_rank: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
}
