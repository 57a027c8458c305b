// validate(PlanOptions): the one rule for option values (see reshard/plan.h).
#include <charconv>
#include <cmath>
#include <string>

#include "reshard/error.h"
#include "reshard/plan.h"

namespace reshard {
namespace {

// Shortest text that reads back as `v` ("-1e-06", "inf", "nan").
std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

void validate(const PlanOptions& o, const std::string& prefix, ErrorCode code) {
  auto non_negative = [&](int64_t v, const char* name) {
    if (v < 0) fail(code, prefix + name, "must be non-negative, got " + std::to_string(v));
  };
  auto finite = [&](double v, const char* name, bool positive) {
    if (std::isfinite(v) && (positive ? v > 0 : v >= 0)) return;
    fail(code, prefix + name,
         std::string(positive ? "must be positive and finite" : "must be non-negative and finite") +
             ", got " + number_text(v));
  };
  non_negative(o.split_min_bytes, "split_min_bytes");
  finite(o.alpha_seconds, "alpha_seconds", false);
  finite(o.intra_host_bytes_per_second, "intra_host_bytes_per_second", true);
  finite(o.inter_host_bytes_per_second, "inter_host_bytes_per_second", true);
  non_negative(o.staging_budget_bytes, "staging_budget_bytes");
  if (o.nics_per_host < 0 || o.nics_per_host > (1 << 20))
    fail(code, prefix + "nics_per_host",
         "must be in [0, 1048576] (0: one NIC per device), got " + std::to_string(o.nics_per_host));
}

}  // namespace reshard
