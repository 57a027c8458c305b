// Internal: an allocator for the few large arrays an execution fills once
// per piece (the engine's copy lists, 272 bytes per op, all of an
// execution's in one LargeArena below), whose first execution otherwise
// spends much of its time in page faults: a fresh block of n bytes takes
// n / 4 KiB faults, each mapping, charging and clearing one page.
//
// A block of at least kLargeBytes is mapped on its own, aligned to 2 MiB,
// with transparent huge pages requested (MADV_HUGEPAGE: where the kernel
// grants them, one fault maps 2 MiB) and its pages mapped in one call
// (MADV_POPULATE_WRITE) rather than a fault each. Smaller blocks, and other
// systems, use operator new. Stateless: any two allocators are equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace reshard {

// Maps the whole pages inside [p, p + bytes) in one call where the range
// holds more than 64 of them (MADV_POPULATE_WRITE, Linux 5.14 on) rather
// than a page fault each on first write; elsewhere nothing.
inline void populate_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  const auto size = static_cast<uintptr_t>(page), lo = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (lo + size - 1) / size * size, last = (lo + bytes) / size * size;
  if (last > first + 64 * size)
    (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)bytes;
#endif
}

namespace large_alloc_detail {

inline constexpr size_t kHuge = size_t{2} << 20;  // the huge page's size
inline constexpr size_t kLargeBytes = size_t{1} << 20;

// The bytes mapped for a large block of `bytes`: whole huge pages.
constexpr size_t mapped_bytes(size_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }
// The bytes of them advised huge: all but a last one the block fills less
// than half, whose few small pages are cleared faster than a whole huge
// page (a 7 MB block: 1 MB less to clear).
constexpr size_t huge_bytes(size_t bytes) {
  return bytes % kHuge >= kHuge / 2 ? mapped_bytes(bytes) : bytes / kHuge * kHuge;
}

inline void* allocate(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kLargeBytes) {
    const size_t len = mapped_bytes(bytes);
    // Mapped with a huge page of slack, then trimmed to an aligned range.
    void* raw =
        mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto lo = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (lo + kHuge - 1) / kHuge * kHuge;
    if (start > lo) munmap(raw, start - lo);
    if (lo + kHuge > start) munmap(reinterpret_cast<void*>(start + len), lo + kHuge - start);
    void* p = reinterpret_cast<void*>(start);
    (void)madvise(p, huge_bytes(bytes), MADV_HUGEPAGE);
    populate_pages(p, bytes);  // the block's own pages (what the caller fills)
    return p;
  }
#endif
  return ::operator new(bytes);
}

inline void deallocate(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kLargeBytes) {
    munmap(p, mapped_bytes(bytes));
    return;
  }
#endif
  ::operator delete(p);
}

}  // namespace large_alloc_detail

template <class T>
struct LargeAllocator {
  using value_type = T;
  LargeAllocator() = default;
  template <class U>
  LargeAllocator(const LargeAllocator<U>&) {}  // NOLINT: a rebind
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(large_alloc_detail::allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) { large_alloc_detail::deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const LargeAllocator<U>&) const {
    return true;
  }
};

// One large block that several lists filled in the same pass share (the
// engine's per-device copy lists of one execution: a few hundred KiB
// each, a few MiB together), carved front to back and released as a whole
// when the last list that holds it goes. Sharing it, the lists fill whole
// huge pages together rather than each its own (mostly empty) last one, or
// fault page by page below kLargeBytes.
class LargeArena {
 public:
  explicit LargeArena(size_t bytes)
      : bytes_(bytes), base_(static_cast<std::byte*>(large_alloc_detail::allocate(bytes))) {}
  ~LargeArena() { large_alloc_detail::deallocate(base_, bytes_); }
  LargeArena(const LargeArena&) = delete;
  LargeArena& operator=(const LargeArena&) = delete;

  // `bytes` (a multiple of `align`, a power of two) from the block; null
  // when they do not fit in what is left.
  void* take(size_t bytes, size_t align) {
    const size_t at = (used_ + align - 1) & ~(align - 1);
    if (at > bytes_ || bytes > bytes_ - at) return nullptr;
    used_ = at + bytes;
    return base_ + at;
  }
  bool owns(const void* p) const {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= base_ && b < base_ + bytes_;
  }
  size_t used() const { return used_; }

 private:
  size_t bytes_;
  std::byte* base_;
  size_t used_ = 0;
};

// LargeAllocator, but taking its blocks from a shared LargeArena while they
// fit (what does not, a list grown past its share, comes from
// LargeAllocator); a block taken from the arena is never given back on its
// own. Two allocators are equal when they share the arena (or have none);
// a list moved into another takes its allocator along.
template <class T>
struct ArenaAllocator {
  using value_type = T;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;
  ArenaAllocator() = default;
  explicit ArenaAllocator(std::shared_ptr<LargeArena> a) : arena(std::move(a)) {}
  template <class U>
  ArenaAllocator(const ArenaAllocator<U>& o) : arena(o.arena) {}  // NOLINT: a rebind
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    if (arena != nullptr) {
      if (void* p = arena->take(n * sizeof(T), alignof(T))) return static_cast<T*>(p);
    }
    return LargeAllocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (arena != nullptr && arena->owns(p)) return;
    LargeAllocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const ArenaAllocator<U>& o) const {
    return arena == o.arena;
  }

  std::shared_ptr<LargeArena> arena;
};

}  // namespace reshard
