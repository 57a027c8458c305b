// Internal: the one fork-join helper (the planner's PlanRequest::threads,
// the oracle's checks).
//
// Work is cut into numbered tasks whose results each go to their own slot;
// the caller concatenates the slots in task order, so the result does not
// depend on how many threads ran the tasks or which ran which. Exceptions
// are kept per task and the one of the lowest-numbered failing task is
// rethrown: the error a single thread would have met first.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "util/threads.h"

namespace reshard {

// Calls f(task) for task in [0, ntasks) on up to `threads` threads (the
// caller is one of them), each thread taking the next unclaimed task.
// Returns when all are done; rethrows the lowest failing task's exception.
template <class F>
void parallel_for(int threads, size_t ntasks, F&& f) {
  const size_t nthreads = std::min(static_cast<size_t>(std::max(threads, 1)), ntasks);
  if (nthreads <= 1) {
    for (size_t i = 0; i < ntasks; ++i) f(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(ntasks);
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < ntasks;) {
      try {
        f(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    pool.reserve(nthreads - 1);
    for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(work);
    work();
  }  // joins
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Splits [0, n) into `parts` contiguous ranges; range k is
// [bounds[k], bounds[k + 1]).
inline std::vector<size_t> even_ranges(size_t n, size_t parts) {
  parts = std::max<size_t>(1, std::min(parts, n));
  std::vector<size_t> b(parts + 1);
  for (size_t k = 0; k <= parts; ++k) b[k] = n * k / parts;
  return b;
}

// Resizes `v` to n elements, first having the kernel map the pages of the
// new elements on up to `threads` threads: value-initialising a fresh
// allocation of hundreds of MiB on one thread is mostly page faults, which
// would otherwise serialise the copying that follows. The pages are mapped
// with madvise(MADV_POPULATE_WRITE) where available, which changes nothing
// but when they are mapped; elsewhere, or if it fails, a plain resize.
template <class T>
void grow_to(std::vector<T>& v, size_t n, int threads) {
  if (n <= v.size()) return;
  v.reserve(n);
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (n - v.size()) * sizeof(T);
  if (threads > 1 && page > 0 && bytes >= 64 * page) {
    const auto lo = reinterpret_cast<uintptr_t>(v.data() + v.size());
    const uintptr_t first = (lo + page - 1) / page * page, last = (lo + bytes) / page * page;
    const size_t pages = (last - first) / page;
    const std::vector<size_t> ranges = even_ranges(pages, 4 * static_cast<size_t>(threads));
    parallel_for(threads, ranges.size() - 1, [&](size_t k) {
      (void)madvise(reinterpret_cast<void*>(first + ranges[k] * page),
                    (ranges[k + 1] - ranges[k]) * page, MADV_POPULATE_WRITE);
    });
  }
#else
  (void)threads;
#endif
  v.resize(n);
}

}  // namespace reshard
