// Internal: the one rule for every `threads` field of the C++ API
// (PlanRequest::threads, ExecuteOptions::threads,
// HostExecuteOptions::threads): 0 is one thread per core this process may
// use (usable_cores(), divided among the ranks that share the host where
// the caller knows them), N >= 1 is N threads (the caller's included, so 1
// is the calling thread only), and never more than kMaxThreads, so that a
// garbage field cannot ask for billions of threads. Callers reject
// negative values first, naming their field. The C ABI's fields keep their
// own documented conventions and are converted once, in
// capi/src/internal.h (threads_from_c).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

namespace reshard {

inline constexpr int kMaxThreads = 256;

// The cores this process may run on at once: the CPUs of its affinity mask
// (sched_getaffinity; what taskset, numactl, mpirun --bind-to and Slurm's
// cpusets leave it), capped by its cgroup's CPU quota rounded up (cgroup v2
// cpu.max of its cgroup and every ancestor, or v1 cpu.cfs_quota_us /
// cpu.cfs_period_us: what docker --cpus and Kubernetes CPU limits set).
// std::thread::hardware_concurrency() counts the machine's CPUs, which a
// container or a bound rank does not get. The environment variable
// RESHARD_CORES (a positive integer, digits only) replaces the detection;
// set to anything else it is an error (kInvalidArgument naming
// RESHARD_CORES) on every call. Computed once per process; at least 1.
int usable_cores();

// The detection behind usable_cores(), exposed for tests: `affinity` CPUs,
// the quota found under `cgroup_root` for the cgroup lines of
// /proc/self/cgroup given in `proc_self_cgroup`, and `env` (the value of
// RESHARD_CORES, if set: kInvalidArgument naming it unless a positive
// integer).
int detect_usable_cores(int affinity, std::string_view cgroup_root,
                        std::string_view proc_self_cgroup, std::optional<std::string_view> env);

// The cores of the whole host as this process's container sees them: the
// online CPUs capped by its cgroup's quota (or RESHARD_CORES, with the same
// error). Computed once.
int host_cores();

// threads > 0: that many (at most kMaxThreads). 0: one per core this
// process may use, and no more than its share of the host when `host_ranks`
// processes of one job run there (unbound ranks share every core; ranks
// bound to disjoint cores keep their own): min(usable_cores(), host_cores()
// / host_ranks), at least 1.
inline int resolve_threads(int32_t threads, int32_t host_ranks = 1) {
  if (threads > 0) return std::min<int>(threads, kMaxThreads);
  const int share = std::max(1, host_cores() / std::max<int32_t>(host_ranks, 1));
  return std::clamp(std::min(usable_cores(), share), 1, kMaxThreads);
}

}  // namespace reshard
