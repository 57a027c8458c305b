// validate(PlanOptions): the one rule for option values (see reshard/plan.h).
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

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
  // Finite is not enough (issue 37): alpha_seconds 1e308 or a bandwidth of
  // 5e-324 made the estimate infinite, a plan that wrote but never read
  // back. Within these ranges every estimate of every plan is finite (at
  // most 2^63 bytes and messages per device and stage, 2^32 stages).
  auto at_most = [&](double v, double most, const char* name, const char* unit) {
    if (v <= most) return;
    fail(code, prefix + name,
         "must be at most " + number_text(most) + " " + unit +
             " (the cost estimate must stay finite), got " + number_text(v));
  };
  auto at_least = [&](double v, double least, const char* name, const char* unit) {
    if (v >= least) return;
    fail(code, prefix + name,
         "must be at least " + number_text(least) + " " + unit +
             " (the cost estimate must stay finite), got " + number_text(v));
  };
  non_negative(o.split_min_bytes, "split_min_bytes");
  finite(o.alpha_seconds, "alpha_seconds", false);
  at_most(o.alpha_seconds, kMaxAlphaSeconds, "alpha_seconds", "seconds");
  for (auto [v, name] : {std::pair{o.intra_host_bytes_per_second, "intra_host_bytes_per_second"},
                         std::pair{o.inter_host_bytes_per_second, "inter_host_bytes_per_second"}}) {
    finite(v, name, true);
    at_least(v, kMinBytesPerSecond, name, "byte per second");
    at_most(v, kMaxBytesPerSecond, name, "bytes per second");
  }
  non_negative(o.staging_budget_bytes, "staging_budget_bytes");
  if (o.nics_per_host < 0 || o.nics_per_host > (1 << 20))
    fail(code, prefix + "nics_per_host",
         "must be in [0, 1048576] (0: one NIC per device), got " + std::to_string(o.nics_per_host));
}

}  // namespace reshard
