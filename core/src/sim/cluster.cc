// Cluster topology files of the simulator (reshard/simulate.h): strict
// parsing (unknown keys, wrong types and bad values name the key) and the
// one validation rule.
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "reshard/error.h"
#include "reshard/simulate.h"

namespace reshard {
namespace {

using json = nlohmann::json;

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

[[noreturn]] void bad(const std::string& field, const std::string& detail) {
  fail(ErrorCode::kInvalidArgument, field, detail);
}

double number(const json& j, const std::string& key) {
  if (!j.is_number()) bad(key, "must be a number, got " + std::string(j.type_name()));
  return j.get<double>();
}

}  // namespace

void validate(const ClusterTopology& c, const std::string& prefix) {
  auto check = [&](double v, const char* name, bool positive) {
    if (std::isfinite(v) && (positive ? v > 0 : v >= 0)) return;
    bad(prefix + name,
        std::string(positive ? "must be positive and finite" : "must be non-negative and finite") +
            ", got " + number_text(v));
  };
  check(c.alpha_seconds, "alpha_seconds", false);
  check(c.intra_host_bytes_per_second, "intra_host_bytes_per_second", true);
  check(c.nic_bytes_per_second, "nic_bytes_per_second", true);
  if (c.nics_per_host < 0)
    bad(prefix + "nics_per_host",
        "must be non-negative (0: one NIC per device), got " + std::to_string(c.nics_per_host));
  check(c.host_link_bytes_per_second, "host_link_bytes_per_second", false);
}

ClusterTopology parse_cluster_topology(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorCode::kParse, std::string("topology: ") + e.what());
  }
  if (!j.is_object()) bad("topology", "must be a JSON object, got " + std::string(j.type_name()));
  static const std::set<std::string> known = {
      "name",          "alpha_seconds", "intra_host_bytes_per_second", "nic_bytes_per_second",
      "nics_per_host", "sources",       "host_link_bytes_per_second"};
  for (const auto& [key, value] : j.items())
    if (!known.count(key))
      bad(key,
          "unknown key (known: name, alpha_seconds, intra_host_bytes_per_second, "
          "nic_bytes_per_second, nics_per_host, host_link_bytes_per_second, sources)");
  for (const char* key : {"alpha_seconds", "intra_host_bytes_per_second", "nic_bytes_per_second"})
    if (!j.contains(key)) bad(key, "missing (required)");
  ClusterTopology c;
  if (j.contains("name")) {
    if (!j["name"].is_string())
      bad("name", "must be a string, got " + std::string(j["name"].type_name()));
    c.name = j["name"].get<std::string>();
  }
  c.alpha_seconds = number(j["alpha_seconds"], "alpha_seconds");
  c.intra_host_bytes_per_second =
      number(j["intra_host_bytes_per_second"], "intra_host_bytes_per_second");
  c.nic_bytes_per_second = number(j["nic_bytes_per_second"], "nic_bytes_per_second");
  if (j.contains("nics_per_host")) {
    const json& n = j["nics_per_host"];
    if (!n.is_number_integer())
      bad("nics_per_host", "must be an integer, got " + std::string(n.type_name()) +
                               (n.is_number() ? " " + n.dump() : ""));
    const int64_t v = n.get<int64_t>();
    if (v < 0 || v > (int64_t{1} << 20))
      bad("nics_per_host",
          "must be in [0, 1048576] (0: one NIC per device), got " + std::to_string(v));
    c.nics_per_host = static_cast<int32_t>(v);
  }
  if (j.contains("host_link_bytes_per_second")) {
    c.host_link_bytes_per_second =
        number(j["host_link_bytes_per_second"], "host_link_bytes_per_second");
    if (!(c.host_link_bytes_per_second > 0))
      bad("host_link_bytes_per_second",
          "must be positive and finite when given (leave it out for no cap), got " +
              number_text(c.host_link_bytes_per_second));
  }
  if (j.contains("sources")) {
    const json& s = j["sources"];
    if (!s.is_array()) bad("sources", "must be an array of strings");
    for (size_t i = 0; i < s.size(); ++i)
      if (!s[i].is_string()) bad("sources[" + std::to_string(i) + "]", "must be a string");
  }
  validate(c);
  return c;
}

ClusterTopology load_cluster_topology(const std::string& path) {
  std::ifstream f(path);
  if (!f) bad("topology", "cannot read \"" + path + "\"");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_cluster_topology(ss.str());
}

std::string cluster_topology_json(const ClusterTopology& c) {
  json j = json::object();
  if (!c.name.empty()) j["name"] = c.name;
  j["alpha_seconds"] = c.alpha_seconds;
  j["intra_host_bytes_per_second"] = c.intra_host_bytes_per_second;
  j["nic_bytes_per_second"] = c.nic_bytes_per_second;
  if (c.nics_per_host != 0) j["nics_per_host"] = c.nics_per_host;
  if (c.host_link_bytes_per_second != 0)
    j["host_link_bytes_per_second"] = c.host_link_bytes_per_second;
  return j.dump(2);
}

std::string_view link_class_name(LinkClass cls) noexcept {
  switch (cls) {
    case LinkClass::kIntraOut:
      return "intra_host_out";
    case LinkClass::kIntraIn:
      return "intra_host_in";
    case LinkClass::kNicOut:
      return "nic_out";
    case LinkClass::kNicIn:
      return "nic_in";
    case LinkClass::kHostOut:
      return "host_link_out";
    case LinkClass::kHostIn:
      return "host_link_in";
  }
  return "unknown";
}

}  // namespace reshard
