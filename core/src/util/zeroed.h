// Internal: a large array of zeros for tables the planner fills all over
// (the global statistics' stream table, PairBytes).
//
// A std::vector of n zeros writes every byte before the first use, and
// the kernel then maps and clears each page on that write, a second pass
// over memory that is cleared again: calloc takes pages the kernel
// cleared (a large block is mapped fresh) and writes nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace reshard {

template <class T>
class ZeroedArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  ZeroedArray() = default;
  explicit ZeroedArray(size_t n) : n_(n) {
    if (n == 0) return;
    p_.reset(static_cast<T*>(std::calloc(n, sizeof(T))));
    if (!p_) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    // The pages mapped in one call rather than a fault each on first write.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const auto lo = reinterpret_cast<uintptr_t>(p_.get());
    const uintptr_t first = (lo + page - 1) / page * page,
                    last = (lo + n * sizeof(T)) / page * page;
    if (page > 0 && last > first + 64 * page)
      (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE);
#endif
  }

  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T[], Free> p_;
  size_t n_ = 0;
};

}  // namespace reshard
