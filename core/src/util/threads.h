// Internal: the one rule for every `threads` field of the C++ API
// (PlanRequest::threads, ExecuteOptions::threads,
// HostExecuteOptions::threads): 0 is one thread per hardware thread, N >= 1
// is N threads (the caller's included, so 1 is the calling thread only), and
// never more than kMaxThreads, so that a garbage field cannot ask for
// billions of threads. Callers reject negative values first, naming their
// field. The C ABI's fields keep their own documented conventions and are
// converted once, in capi/src/internal.h (threads_from_c).
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>

namespace reshard {

inline constexpr int kMaxThreads = 256;

inline int resolve_threads(int32_t threads) {
  if (threads > 0) return std::min<int>(threads, kMaxThreads);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(std::min<unsigned>(hw, kMaxThreads)) : 1;
}

}  // namespace reshard
