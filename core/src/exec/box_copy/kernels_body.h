// Internal: the body of vector_kernels.h's loops, included by each
// per-instruction-set file after it defines, in an anonymous namespace, the
// policy `V`:
//   V::F                         kLanes f32 values in a register
//   V::kLanes
//   V::zero(), V::add(a, b)
//   V::load_f32(p), V::load_bf16(p)     kLanes values, exact
//   V::store_f32(p, a), V::store_bf16(p, a)   bf16: round to nearest even,
//                                              NaN stays NaN
//   V::kHasF16, and with it V::load_f16(p), V::store_f16(p, a)
//   V::stream_line(dst, src)     64 bytes, non-temporal, dst 64-aligned
//   V::copy_line(dst, src)       64 bytes, plain stores, any alignment
// No includes beyond the intrinsics (see vector_kernels.h); everything here
// has internal linkage.
#pragma once

#include <emmintrin.h>

#include <cstdint>
#include <cstring>

#include "exec/box_copy/vector_kernels.h"

namespace {

inline void stream16(unsigned char* dst, const unsigned char* src) {
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst),
                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
}

// n a multiple of 16, dst 16-byte aligned: 16-byte stores up to the next
// cache line, whole lines, then 16-byte stores, so that every line is
// written by non-temporal stores only (write-combined whole).
inline void stream_run(unsigned char* dst, const unsigned char* src, int64_t n) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(dst) & 63) != 0) {
    stream16(dst, src);
    dst += 16;
    src += 16;
    n -= 16;
  }
  for (; n >= 128; n -= 128, dst += 128, src += 128) {
    V::stream_line(dst, src);
    V::stream_line(dst + 64, src + 64);
  }
  for (; n >= 64; n -= 64, dst += 64, src += 64) V::stream_line(dst, src);
  for (; n > 0; n -= 16, dst += 16, src += 16) stream16(dst, src);
}

// Strided sources are prefetched in software, at least this many bytes of
// runs ahead (ceil in whole rows): the hardware prefetchers do not follow a
// stride across pages, and start over on every run.
constexpr int64_t kPrefetchAheadBytes = 4096;
// Bytes of a run prefetched, from the line of its first byte (a whole run
// of up to 4 KiB: prefetching only its first KiB left 1440-byte runs at
// 0.80-0.87 of memcpy, the whole run at 0.91-0.96; rows 1 KiB ahead
// instead of 4 KiB, 0.87-0.9).
constexpr int64_t kPrefetchRunBytes = 4096;

// Prefetches the lines of [p, p + min(n, kPrefetchRunBytes)).
inline void prefetch_run(const unsigned char* p, int64_t n) {
  const unsigned char* end = p + (n < kPrefetchRunBytes ? n : kPrefetchRunBytes);
  for (const unsigned char* q = reinterpret_cast<const unsigned char*>(
           reinterpret_cast<uintptr_t>(p) & ~static_cast<uintptr_t>(63));
       q < end; q += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(q), _MM_HINT_T0);
  }
}

void stream_rows(const reshard::vector_kernels::Rows& r) {
  const bool strided = r.src_step != r.bytes;
  const int64_t ahead = (kPrefetchAheadBytes + r.bytes - 1) / r.bytes;
  const unsigned char* s = r.src;
  unsigned char* t = r.dst;
  for (int64_t i = 0; i < r.rows; ++i, s += r.src_step, t += r.dst_step) {
    if (strided && i + ahead < r.rows) prefetch_run(s + ahead * r.src_step, r.bytes);
    stream_run(t, s, r.bytes);
  }
}

// n bytes with plain stores: whole lines, 16-byte moves, the last one
// ending at n (it may overlap the one before); below 16 bytes, memcpy.
inline void copy_run(unsigned char* dst, const unsigned char* src, int64_t n) {
  if (n < 16) {
    std::memcpy(dst, src, static_cast<size_t>(n));
    return;
  }
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) V::copy_line(dst + i, src + i);
  for (; i + 16 <= n; i += 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  if (i < n) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + n - 16),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + n - 16)));
  }
}

// The state of a kStreamJoined copy: the next destination byte, and the
// `pending` bytes of its line before it (the line 64-byte aligned at
// next - pending), still at `tail` in the source, not yet stored.
struct Joined {
  unsigned char* next;
  const unsigned char* tail;
  int64_t pending;
};

// Byte masks: 64 of 0xff, then 64 of 0; from kLineMask + 64 - p, the first
// p bytes of a line.
alignas(64) constexpr unsigned char kLineMask[128] = {
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255};

// One row of a kStreamJoined copy: its n (>= 64) bytes at j.next, from s.
// A line that spans two rows is stored whole, in one go, from registers:
// its first p bytes from the previous row's tail, the rest from this row,
// each loaded as 16-byte pieces that reach past that tail or before this
// row by less than a line (between the two rows, inside the source, which
// nobody writes meanwhile).
inline void join_row(Joined& j, const unsigned char* s, int64_t n) {
  if (j.pending == 0 && (reinterpret_cast<uintptr_t>(j.next) & 63) != 0) {
    // Before the first whole line: plain stores.
    int64_t h = 64 - static_cast<int64_t>(reinterpret_cast<uintptr_t>(j.next) & 63);
    if (h > n) h = n;
    std::memcpy(j.next, s, static_cast<size_t>(h));
    j.next += h;
    s += h;
    n -= h;
  } else if (j.pending > 0) {
    const int64_t p = j.pending;
    unsigned char* line = j.next - p;
    for (int q = 0; q < 64; q += 16) {
      const __m128i m = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kLineMask + 64 - p + q));
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(j.tail + q));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s - p + q));
      _mm_stream_si128(reinterpret_cast<__m128i*>(line + q),
                       _mm_or_si128(_mm_and_si128(m, a), _mm_andnot_si128(m, b)));
    }
    j.next += 64 - p;
    s += 64 - p;
    n -= 64 - p;
    j.pending = 0;
  }
  unsigned char* t = j.next;
  for (; n >= 64; n -= 64, s += 64, t += 64) V::stream_line(t, s);
  j.next = t;
  if (n > 0) {
    j.tail = s;
    j.pending = n;
    j.next += n;
  }
}

// Bytes of each copy's next run that copy_group_rows prefetches.
constexpr int64_t kGroupPrefetchBytes = 1024;

void copy_group_rows(const reshard::vector_kernels::GroupRows& g) {
  using reshard::vector_kernels::Store;
  Joined joined[reshard::vector_kernels::kMaxGroupCopies];
  for (int c = 0; c < g.n; ++c) {
    joined[c].next = g.copies[c].dst;
    joined[c].tail = nullptr;
    joined[c].pending = 0;
  }
  for (int64_t i = 0; i < g.rows; ++i) {
    for (int c = 0; c < g.n; ++c) {
      const reshard::vector_kernels::GroupCopy& x = g.copies[c];
      const unsigned char* s = x.src + i * x.src_step;
      if (i + 1 < g.rows) {
        // The next row's run: a hole in the source rows (a slice no copy
        // of the group reads, such as a local piece's) stops the hardware
        // prefetchers (1.2x memcpy's speed without a hole, 0.7 with one of
        // 516 bytes in 16 KiB rows, 1.1 with this prefetch).
        const int64_t lines = x.bytes < kGroupPrefetchBytes ? x.bytes : kGroupPrefetchBytes;
        for (int64_t l = 0; l < lines; l += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(s + x.src_step + l), _MM_HINT_T0);
        }
      }
      switch (x.store) {
        case Store::kPlain:
          copy_run(x.dst + i * x.dst_step, s, x.bytes);
          break;
        case Store::kStream:
          stream_run(x.dst + i * x.dst_step, s, x.bytes);
          break;
        case Store::kStreamJoined:
          join_row(joined[c], s, x.bytes);
          break;
      }
    }
  }
  // The last lines' pending bytes, plain.
  for (int c = 0; c < g.n; ++c) {
    const Joined& j = joined[c];
    if (j.pending > 0) std::memcpy(j.next - j.pending, j.tail, static_cast<size_t>(j.pending));
  }
}

// Vectors per block: independent sums in flight.
constexpr int kUnroll = 2;
// Each of the k streams is prefetched this far ahead: k streams at once are
// more than the hardware prefetchers follow.
constexpr int64_t kSumPrefetchBytes = 1024;

template <bool kStream, class E, class Load, class Store>
int64_t sum_blocks(const E* const* s, int k, E* out, int64_t n, Load load, Store store) {
  constexpr int64_t kBlock = int64_t{V::kLanes} * kUnroll;
  static_assert(kBlock * sizeof(E) % 16 == 0);
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    typename V::F acc[kUnroll];
    for (int u = 0; u < kUnroll; ++u) acc[u] = V::zero();
    const bool fetch = (i * static_cast<int64_t>(sizeof(E))) % 64 == 0;
    for (int j = 0; j < k; ++j) {
      const E* p = s[j] + i;
      if (fetch) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + kSumPrefetchBytes, _MM_HINT_T0);
        if (kBlock * sizeof(E) > 64) {
          _mm_prefetch(reinterpret_cast<const char*>(p) + kSumPrefetchBytes + 64, _MM_HINT_T0);
        }
      }
      for (int u = 0; u < kUnroll; ++u) acc[u] = V::add(acc[u], load(p + u * V::kLanes));
    }
    if constexpr (kStream) {
      // Through a block in L1 to non-temporal stores (out 16-byte aligned).
      alignas(64) E block[kBlock];
      for (int u = 0; u < kUnroll; ++u) store(block + u * V::kLanes, acc[u]);
      for (int64_t b = 0; b < kBlock * static_cast<int64_t>(sizeof(E)); b += 16) {
        stream16(reinterpret_cast<unsigned char*>(out + i) + b,
                 reinterpret_cast<const unsigned char*>(block) + b);
      }
    } else {
      for (int u = 0; u < kUnroll; ++u) store(out + i + u * V::kLanes, acc[u]);
    }
  }
  return i;
}

// With `stream` and a 16-byte aligned `out`, non-temporal stores (the
// caller fences).
template <class E, class Load, class Store>
int64_t sum_impl(const E* const* s, int k, E* out, int64_t n, bool stream, Load load, Store store) {
  if (stream && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {
    return sum_blocks<true>(s, k, out, n, load, store);
  }
  return sum_blocks<false>(s, k, out, n, load, store);
}

int64_t sum_f32(const float* const* s, int k, float* out, int64_t n, bool stream) {
  return sum_impl(
      s, k, out, n, stream, [](const float* p) { return V::load_f32(p); },
      [](float* p, typename V::F a) { V::store_f32(p, a); });
}

int64_t sum_bf16(const uint16_t* const* s, int k, uint16_t* out, int64_t n, bool stream) {
  return sum_impl(
      s, k, out, n, stream, [](const uint16_t* p) { return V::load_bf16(p); },
      [](uint16_t* p, typename V::F a) { V::store_bf16(p, a); });
}

// A template, so that the branch a policy without F16C lacks is dropped.
template <class P>
int64_t sum_f16_with(const uint16_t* const* s, int k, uint16_t* out, int64_t n, bool stream) {
  if constexpr (P::kHasF16) {
    return sum_impl(
        s, k, out, n, stream, [](const uint16_t* p) { return P::load_f16(p); },
        [](uint16_t* p, typename P::F a) { P::store_f16(p, a); });
  } else {
    (void)s, (void)k, (void)out, (void)n, (void)stream;
    return 0;
  }
}

int64_t sum_f16(const uint16_t* const* s, int k, uint16_t* out, int64_t n, bool stream) {
  return sum_f16_with<V>(s, k, out, n, stream);
}

}  // namespace
