// Number formatting and small summaries shared by the subcommands.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <set>

#include "cli.h"
#include "reshard/error.h"

namespace reshard::cli {

std::string human_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", bytes, kUnits[u]);
  return buf;
}

std::string compact_bytes(double bytes) {
  if (bytes == 0) return "\xC2\xB7";  // middle dot
  static const char kUnits[] = {'B', 'K', 'M', 'G', 'T', 'P'};
  int u = 0;
  while (bytes >= 1000 && u < 5) {  // keep at most 3 digits
    bytes /= 1024;
    ++u;
  }
  char buf[16];
  if (bytes < 9.95 && u > 0)
    std::snprintf(buf, sizeof buf, "%.1f%c", bytes, kUnits[u]);
  else
    std::snprintf(buf, sizeof buf, "%.0f%c", bytes, kUnits[u]);
  return buf;
}

std::string human_seconds(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string hex64(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string ratio_str(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", r);
  return buf;
}

std::string device_ranges(std::vector<int64_t> devices) {
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  std::string out;
  for (size_t i = 0; i < devices.size();) {
    size_t j = i;
    while (j + 1 < devices.size() && devices[j + 1] == devices[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(devices[i]);
    if (j == i + 1)
      out += "," + std::to_string(devices[j]);
    else if (j > i + 1)
      out += "-" + std::to_string(devices[j]);
    i = j + 1;
  }
  return out;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string resource_message(const std::string& message, const std::string& process_hint) {
  std::string m = message;
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + to.size()))
      m.replace(at, from.size(), to);
  };
  if (process_hint.empty()) {
    // "; plan one process's part at a time (PlanScope::kProcess: ...)"
    const size_t at = m.find("; plan one process's part at a time");
    if (at != std::string::npos) m.erase(at, m.find(')', at) + 1 - at);
  }
  replace_all("request.max_plan_bytes", "--max-plan-bytes");
  replace_all("request.max_stats_pieces", "--max-stats-pieces");
  replace_all("PlanScope::kProcess", process_hint);
  return m;
}

namespace {

// f(), with the planner's errors in the command line's terms (plan_spec).
template <class F>
auto translated(F&& f, const std::string& process_hint) {
  try {
    return f();
  } catch (const Error& e) {
    switch (e.code()) {
      case ErrorCode::kInvalidArgument:
      case ErrorCode::kOutOfRange:
      case ErrorCode::kOverflow:
      case ErrorCode::kMismatch:
        throw InvalidInput(e.what());
      case ErrorCode::kResourceExhausted:
        throw Error(e.code(), resource_message(e.what(), process_hint));
      default:
        throw;
    }
  }
}

}  // namespace

Plan plan_spec(const PlanInput& input, const PlanRequest& request,
               const std::string& process_hint) {
  PlanRequest r = request;
  Progress progress;
  if (progress.active() && !r.progress && r.scope == PlanScope::kAll)
    r.progress = [&](int64_t done, int64_t total) {
      progress.update("planning " + with_commas(total) + " parts\u2026 ", done, total);
    };
  return translated([&] { return make_plan(input, r); }, process_hint);
}

PlanEstimate estimate_spec(const PlanInput& input, const PlanRequest& request, PlanStats* stats) {
  return translated([&] { return estimate_plan(input, request, stats); }, "--process P");
}

Plan plan_part_spec(const PlanInput& input, const PlanRequest& estimate_request,
                    const PlanRequest& part_request, PlanStats* stats,
                    const std::function<void(const PlanEstimate&)>& check) {
  Progress progress;
  return translated(
      [&] { return plan_part_after_estimate(input, estimate_request, part_request, stats, check); },
      "--process P");
}

void add_last_stage_option(CLI::App* cmd, int32_t& target) {
  cmd->add_option("--last-stage", target,
                  "run stages 0..K only and check the elements they wrote: what a relay or "
                  "reducer holds before a later stage forwards it")
      ->check(CLI::NonNegativeNumber);
}

void add_memory_limit_option(CLI::App* cmd, const std::string& name, int64_t& target,
                             const std::string& help) {
  cmd->add_option_function<std::string>(
         name,
         [&target, name](const std::string& text) {
           std::string t = text;
           for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
           if (t == "none" || t == "-1") {
             target = kUnlimitedPlanBytes;
             return;
           }
           size_t used = 0;
           double v = -1;
           try {
             v = std::stod(t, &used);
           } catch (const std::exception&) {
             used = 0;
           }
           std::string unit = t.substr(used);
           if (!unit.empty() && unit.back() == 'b') unit.pop_back();  // "GB", "GiB"
           if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();   // "Gi"
           static const std::string kUnits = "kmgtp";
           double scale = 1;
           if (unit.size() == 1 && kUnits.find(unit[0]) != std::string::npos)
             scale = std::pow(1024.0, static_cast<double>(kUnits.find(unit[0]) + 1));
           else if (!unit.empty())
             used = 0;
           if (used == 0 || !(v >= 0) || v * scale >= 9e18)
             throw CLI::ValidationError(name, "\"" + text +
                                                  "\" is not a size (bytes, or with K/M/G/T: 8G, "
                                                  "512MiB; 0: the default; -1 or none: no limit)");
           target = static_cast<int64_t>(v * scale);
         },
         help)
      ->type_name("SIZE")
      ->default_str("0");
}

void add_max_plan_bytes_option(CLI::App* cmd, int64_t& target) {
  add_memory_limit_option(
      cmd, "--max-plan-bytes", target,
      "memory the plan's process parts may take, estimated before planning (bytes, or "
      "8G, 512M, ...); above it the command stops with the estimate. 0: half the memory "
      "available; -1 or none: no limit");
}

void add_max_stats_pieces_option(CLI::App* cmd, int64_t& target) {
  cmd->add_option("--max-stats-pieces", target,
                  "piece visits the global statistics may take, counted from the layouts before "
                  "planning; above it the command stops with the count. 0: 2^31 (minutes of one "
                  "core); -1: no limit")
      ->check(CLI::Range(int64_t{-1}, INT64_MAX))
      ->capture_default_str();
}

Progress::Progress() : active_(isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { clear(); }

void Progress::update(const std::string& what, int64_t done, int64_t total) {
  if (!active_) return;
  std::string text = what;
  if (total > 0) text += std::to_string(100 * done / total) + "%";
  if (text == shown_) return;
  shown_ = text;
  std::fprintf(stderr, "\r\033[K%s", text.c_str());
  std::fflush(stderr);
}

void Progress::clear() {
  if (!active_ || shown_.empty()) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_.clear();
}

PlanFootprint footprint(const PlanInput& input) {
  std::set<const void*> seen;  // layouts share geometries: visit each once
  std::set<int64_t> devices;
  for (const TensorSpec& t : input.tensors)
    for (const Layout* l : {&t.src, &t.dst}) {
      if (!seen.insert(l->geometry().get()).second) continue;
      for (size_t e = 0; e < l->num_entries(); ++e) devices.insert(l->device(e));
    }
  PlanFootprint f;
  f.devices.assign(devices.begin(), devices.end());
  std::set<int32_t> processes, hosts;
  for (int64_t d : f.devices) {
    const DeviceInfo info = input.topology.info(d);
    processes.insert(info.process);
    hosts.insert(info.host);
  }
  f.processes = static_cast<int64_t>(processes.size());
  f.hosts = static_cast<int64_t>(hosts.size());
  return f;
}

}  // namespace reshard::cli
