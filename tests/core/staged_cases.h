// Staged plans for the tests of the engine's device path (tests/core, on
// the CPU) and of the GPU transports (tests/gpu): relays across hosts,
// chains and trees of hosts, and reduction trees through scratch
// (docs/design.md §2.2-2.4), in one process. A plan's stages follow from its
// hosts, not its processes, so each case keeps its hosts and moves every
// device into process 0, spread over `gpus` ordinals: the same stages the
// MPI tests run across processes, executed by one process's engine. Needs
// RESHARD_SOURCE_DIR (the repository) and no CUDA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/random_cases.h"
#include "reshard/plan.h"
#include "reshard/spec.h"
#include "test_scale.h"

namespace reshard::testing {

// `in` with every device in process 0, on GPU `device % gpus`; hosts kept,
// or (hosts_from_processes) each process its own host, which gives the
// random cases (at most 4 processes, 2 per host) up to 4 hosts.
inline PlanInput in_one_process(PlanInput in, int gpus, bool hosts_from_processes) {
  Topology t;
  for (const DeviceInfo& d : in.topology.devices()) {
    DeviceInfo info = d;
    if (hosts_from_processes) info.host = d.process;
    info.process = 0;
    info.ordinal = static_cast<int32_t>(d.device % gpus);
    t.add(info);
  }
  in.topology = t;
  return in;
}

struct StagedCase {
  std::string name;
  PlanInput input;
};

// The specs of tests/mpi/specs, sorted.
inline std::vector<std::filesystem::path> staged_spec_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(RESHARD_SOURCE_DIR) + "/tests/mpi/specs"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Every spec of tests/mpi/specs (relay chains and trees over up to 5 hosts,
// psum reduce-scatter and gather, pre-reduction in scratch), in one process,
// unbudgeted and under a 64 KiB staging budget (the MPI tests' largest).
inline std::vector<StagedCase> staged_spec_cases(int gpus) {
  std::vector<StagedCase> cases;
  for (const auto& f : staged_spec_files()) {
    PlanInput in = in_one_process(load_spec(f.string()).input, gpus, false);
    cases.push_back({f.filename().string(), in});
    in.options.staging_budget_bytes = 65536;
    cases.push_back({f.filename().string() + " (budget 64 KiB)", in});
  }
  return cases;
}

// Whether the `index`-th of staged_spec_cases runs in a test that runs each
// spec once below full scale (RESHARD_TEST_SCALE, the sanitizer builds):
// all of them at full scale, below it spec k unbudgeted where k is even and
// under the budget where k is odd.
inline bool staged_case_sampled(size_t index) {
  return RESHARD_TEST_SCALE >= 100 || index % 2 == (index / 2) % 2;
}

// The random generator's case `seed` (up to 16 devices) in one process,
// each of its processes a host.
inline PlanInput random_staged_input(uint64_t seed, int gpus) {
  CaseOptions o;
  o.max_devices = 16;
  CaseGen gen(seed, o);
  return in_one_process(gen.input(), gpus, true);
}

}  // namespace reshard::testing
