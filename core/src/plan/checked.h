// Checked arithmetic for the statistics (issue 37): a figure past 2^63 - 1
// is kOverflow naming the figure ("stats.network_bytes"), never a wrapped
// negative value or a silently saturated one.
#pragma once

#include <cstdint>

namespace reshard::planning {

// Throws Error(kOverflow, "stats." + figure, ...).
[[noreturn]] void stat_overflow(const char* figure);

// acc += v, or stat_overflow(figure).
inline void add_to(int64_t& acc, int64_t v, const char* figure) {
  if (__builtin_add_overflow(acc, v, &acc)) [[unlikely]]
    stat_overflow(figure);
}
// a * b, or stat_overflow(figure).
inline int64_t mul_of(int64_t a, int64_t b, const char* figure) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) [[unlikely]]
    stat_overflow(figure);
  return r;
}
// ceil(a / b) for a >= 0, b > 0, without the overflow of (a + b - 1) / b.
inline int64_t ceil_div_checked(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace reshard::planning
