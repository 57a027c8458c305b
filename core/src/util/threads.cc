// usable_cores(): how many threads this process can run at once, from the
// kernel's view of it rather than the machine's CPU count (util/threads.h).
#include "util/threads.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "reshard/error.h"

#if defined(__linux__)
#include <sched.h>
#endif

namespace reshard {
namespace {

std::optional<std::string> read_small(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// "max 100000" or "150000 100000" (cgroup v2 cpu.max): quota / period.
std::optional<double> v2_quota(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  const double q = std::strtod(quota.c_str(), nullptr);
  return q > 0 ? std::optional<double>(q / period) : std::nullopt;
}

// The smallest quota in `dir` and its ancestors under `root`; `file`
// reads one directory's quota.
template <class F>
std::optional<double> smallest_quota(const std::string& root, std::string dir, F file) {
  std::optional<double> best;
  for (;;) {
    if (const std::optional<double> q = file(root + dir); q && (!best || *q < *best)) best = q;
    if (dir.empty() || dir == "/") break;
    const size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos || slash == 0 ? std::string() : dir.substr(0, slash);
  }
  return best;
}

}  // namespace

int detect_usable_cores(int affinity, std::string_view cgroup_root,
                        std::string_view proc_self_cgroup, std::optional<std::string_view> env) {
  if (env) {
    // Digits only (no sign, no blanks): strtol alone would take " 4" and "+4".
    const std::string text(*env);
    const bool digits = !text.empty() && std::all_of(text.begin(), text.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    const size_t first = text.find_first_not_of('0');
    const long v = !digits || first == std::string::npos ? 0
                   : text.size() - first > 9             ? long{kMaxThreads}
                                                         : std::strtol(text.c_str(), nullptr, 10);
    if (v <= 0) {
      fail(ErrorCode::kInvalidArgument, "RESHARD_CORES",
           "\"" + text.substr(0, 64) +
               "\" is not a positive integer (the cores this process may use; "
               "unset it to detect them)");
    }
    return static_cast<int>(std::min<long>(v, kMaxThreads));
  }
  int cores = std::max(affinity, 1);
  const std::string root(cgroup_root);
  std::optional<double> quota;
  std::istringstream lines{std::string(proc_self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    // hierarchy-id:controllers:path
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    std::optional<double> q;
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      // v2: the unified hierarchy, mounted at the root or (hybrid) below it.
      for (const char* mount : {"", "/unified"}) {
        q = smallest_quota(root + mount, path, [](const std::string& dir) {
          const auto text = read_small(dir + "/cpu.max");
          return text ? v2_quota(*text) : std::nullopt;
        });
        if (q) break;
      }
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
      for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
        q = smallest_quota(root + mount, path, [](const std::string& dir) -> std::optional<double> {
          const auto quota_text = read_small(dir + "/cpu.cfs_quota_us");
          const auto period_text = read_small(dir + "/cpu.cfs_period_us");
          if (!quota_text || !period_text) return std::nullopt;
          const double quota_us = std::strtod(quota_text->c_str(), nullptr);
          const double period_us = std::strtod(period_text->c_str(), nullptr);
          if (quota_us <= 0 || period_us <= 0) return std::nullopt;  // -1: no limit
          return quota_us / period_us;
        });
        if (q) break;
      }
    }
    if (q && (!quota || *q < *quota)) quota = q;
  }
  if (quota) cores = std::min(cores, std::max(1, static_cast<int>(std::ceil(*quota - 1e-9))));
  return std::min(cores, kMaxThreads);
}

namespace {

// A detection's result, or the error of a bad RESHARD_CORES, which every
// later call reports again (the variable is read once per process).
struct Detected {
  int cores = 1;
  std::optional<Error> error;  // what detection threw

  int get() const {
    if (error) throw *error;
    return cores;
  }
};

Detected detect(int cpus) {
  const std::string self = read_small("/proc/self/cgroup").value_or("");
  const char* env = std::getenv("RESHARD_CORES");
  try {
    return {
        detect_usable_cores(cpus, "/sys/fs/cgroup", self,
                            env != nullptr ? std::optional<std::string_view>(env) : std::nullopt),
        std::nullopt};
  } catch (const Error& e) {
    return {1, e};
  }
}

}  // namespace

int usable_cores() {
  static const Detected cores = [] {
    int affinity = 0;
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
#endif
    if (affinity <= 0) affinity = static_cast<int>(std::thread::hardware_concurrency());
    return detect(affinity);
  }();
  return cores.get();
}

int host_cores() {
  static const Detected cores = detect(static_cast<int>(std::thread::hardware_concurrency()));
  return cores.get();
}

}  // namespace reshard
