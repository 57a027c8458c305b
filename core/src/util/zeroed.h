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

#include "util/large_alloc.h"

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
    populate_pages(p_.get(), n * sizeof(T));  // one call, not a fault a page
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
