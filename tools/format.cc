// Number formatting and small summaries shared by the subcommands.
#include <algorithm>
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

Plan plan_spec(const PlanInput& input, const PlanRequest& request) {
  try {
    return make_plan(input, request);
  } catch (const Error& e) {
    switch (e.code()) {
      case ErrorCode::kInvalidArgument:
      case ErrorCode::kOutOfRange:
      case ErrorCode::kOverflow:
      case ErrorCode::kMismatch:
        throw InvalidInput(e.what());
      default:
        throw;
    }
  }
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
