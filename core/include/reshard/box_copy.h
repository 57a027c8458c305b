// reshard — the N-d strided box copy core (docs/design.md §3.1): pack, unpack,
// device-local copy and reduce-on-unpack, written once.
//
// Everything marked RESHARD_HD compiles for the host and inside CUDA kernels:
// no exceptions, no allocation, fixed-size arrays only. The host functions at
// the end (copy_box, reduce_into, ...) are thin loops over the same code.
//
// Vocabulary. A copy moves `region` (a box in global tensor coordinates) from
// a dense row-major buffer shaped like `src_box` to one shaped like `dst_box`;
// both boxes contain the region. Packing into a message is the case
// dst_box == region, unpacking from one is src_box == region. A CopyDesc is
// that copy reduced to strides and offsets (in elements), with adjacent
// dimensions that are contiguous on both sides merged, so that a fully
// contiguous copy is one run.
#pragma once

#include <cstdint>
#include <cstring>

#include "reshard/box.h"
#include "reshard/dtype.h"
#include "reshard/hd.h"
#include "reshard/layout.h"
#include "reshard/numeric.h"

namespace reshard {

// A strided N-d copy. Element (i_0, ..., i_{rank-1}), 0 <= i_k < extent[k],
// moves from src[src_offset + Σ i_k·src_stride[k]] to
// dst[dst_offset + Σ i_k·dst_stride[k]]. make_copy_desc() guarantees
// 1 <= rank <= kMaxRank and unit strides on both sides in the innermost
// dimension, so the innermost dimension is the contiguous run; every function
// below relies on that. A plain aggregate (trivially copyable) so it can be a
// kernel argument or live in CUDA constant memory.
struct CopyDesc {
  int32_t rank;
  int64_t extent[kMaxRank];
  int64_t src_stride[kMaxRank];
  int64_t dst_stride[kMaxRank];
  int64_t src_offset;
  int64_t dst_offset;
};

// Builds the descriptor of copying `region` from a buffer shaped like
// `src_box` to one shaped like `dst_box`. Preconditions (not checked): equal
// ranks, region inside both boxes. Dimensions of extent 1 are dropped and
// adjacent dimensions contiguous in both buffers are merged; a rank-0 region
// gives one element, an empty region gives rank 1 with extent 0.
RESHARD_HD inline CopyDesc make_copy_desc(const Box& region, const Box& src_box,
                                          const Box& dst_box) {
  CopyDesc d;
  d.rank = 1;
  d.src_offset = 0;
  d.dst_offset = 0;
  for (int k = 0; k < kMaxRank; ++k) {
    d.extent[k] = 1;
    d.src_stride[k] = 1;
    d.dst_stride[k] = 1;
  }
  const int rank = region.rank;
  if (region.empty()) {
    d.extent[0] = 0;
    return d;
  }
  if (rank == 0) return d;
  // Row-major element strides of both buffers, and the region's origin.
  int64_t src_stride[kMaxRank];
  int64_t dst_stride[kMaxRank];
  int64_t ss = 1;
  int64_t ds = 1;
  for (int k = rank - 1; k >= 0; --k) {
    src_stride[k] = ss;
    dst_stride[k] = ds;
    d.src_offset += (region.lo[k] - src_box.lo[k]) * ss;
    d.dst_offset += (region.lo[k] - dst_box.lo[k]) * ds;
    ss *= src_box.extent(k);
    ds *= dst_box.extent(k);
  }
  // Innermost first: the innermost tensor dim always has unit strides, so it
  // is kept (even with extent 1) and outer dims merge into it while the
  // buffers stay contiguous on both sides.
  int64_t ext[kMaxRank];
  int64_t sst[kMaxRank];
  int64_t dst[kMaxRank];
  int n = 1;
  ext[0] = region.extent(rank - 1);
  sst[0] = 1;
  dst[0] = 1;
  for (int k = rank - 2; k >= 0; --k) {
    const int64_t e = region.extent(k);
    if (e == 1) continue;
    if (sst[n - 1] * ext[n - 1] == src_stride[k] && dst[n - 1] * ext[n - 1] == dst_stride[k]) {
      ext[n - 1] *= e;
    } else {
      ext[n] = e;
      sst[n] = src_stride[k];
      dst[n] = dst_stride[k];
      ++n;
    }
  }
  d.rank = n;
  for (int k = 0; k < n; ++k) {
    d.extent[k] = ext[n - 1 - k];
    d.src_stride[k] = sst[n - 1 - k];
    d.dst_stride[k] = dst[n - 1 - k];
  }
  return d;
}

// Number of elements the copy moves (1 for rank 0).
RESHARD_HD inline int64_t copy_desc_elements(const CopyDesc& d) {
  int64_t v = 1;
  for (int k = 0; k < d.rank; ++k) v *= d.extent[k];
  return v;
}

// Elements per contiguous run: the innermost extent (1 for rank 0).
RESHARD_HD inline int64_t copy_desc_run_length(const CopyDesc& d) {
  return d.rank == 0 ? 1 : d.extent[d.rank - 1];
}

// Number of contiguous runs; 0 when the copy is empty.
RESHARD_HD inline int64_t copy_desc_runs(const CopyDesc& d) {
  if (d.rank == 0) return 1;
  if (d.extent[d.rank - 1] == 0) return 0;
  int64_t v = 1;
  for (int k = 0; k < d.rank - 1; ++k) v *= d.extent[k];
  return v;
}

// True when both sides are a single contiguous run (or nothing), so the copy
// is one memcpy and a message can be sent or received in place.
RESHARD_HD inline bool copy_desc_contiguous(const CopyDesc& d) { return copy_desc_runs(d) <= 1; }

// Source and destination element offsets of run `run` (0 <= run <
// copy_desc_runs(d)), runs numbered row-major. O(rank); for a CUDA kernel
// that maps one thread block to a run.
RESHARD_HD inline void run_offsets(const CopyDesc& d, int64_t run, int64_t* src, int64_t* dst) {
  int64_t s = d.src_offset;
  int64_t t = d.dst_offset;
  for (int k = d.rank - 2; k >= 0; --k) {
    const int64_t i = run % d.extent[k];
    run /= d.extent[k];
    s += i * d.src_stride[k];
    t += i * d.dst_stride[k];
  }
  *src = s;
  *dst = t;
}

// Calls f(src_offset, dst_offset, length) (elements) for runs
// [first_run, last_run) in row-major order. Lets callers split a large copy
// across threads.
template <class F>
RESHARD_HD void for_each_run(const CopyDesc& d, int64_t first_run, int64_t last_run, F&& f) {
  if (first_run >= last_run) return;
  const int64_t len = copy_desc_run_length(d);
  int64_t s;
  int64_t t;
  run_offsets(d, first_run, &s, &t);
  const int outer = d.rank - 1;  // dims iterated by the odometer: [0, outer)
  int64_t idx[kMaxRank];
  int64_t r = first_run;
  for (int k = outer - 1; k >= 0; --k) {
    idx[k] = r % d.extent[k];
    r /= d.extent[k];
  }
  for (int64_t run = first_run;;) {
    f(s, t, len);
    if (++run == last_run) return;
    // Advance the odometer: the innermost outer dim first, carrying outwards.
    int k = outer - 1;
    while (true) {
      ++idx[k];
      s += d.src_stride[k];
      t += d.dst_stride[k];
      if (idx[k] < d.extent[k] || k == 0) break;
      s -= idx[k] * d.src_stride[k];
      t -= idx[k] * d.dst_stride[k];
      idx[k] = 0;
      --k;
    }
  }
}

// Calls f(src_offset, dst_offset, length) for every run, in row-major order.
template <class F>
RESHARD_HD void for_each_run(const CopyDesc& d, F&& f) {
  for_each_run(d, 0, copy_desc_runs(d), static_cast<F&&>(f));
}

// ---------------------------------------------------------------------------
// Element types and reductions.
//
// Each dtype has an accumulation type: f32 for f16, bf16 and both f8 formats
// (accumulate in f32, round once on store), f64 for f64, f32 for f32, the
// type itself for integers (sums wrap modulo 2^bits) and uint8 0/1 for bool
// (sum and max are "or", min is "and"; any non-zero byte reads as true).
// Float max/min propagate NaN. Identities: 0 for sum; for max the lowest
// value of the element type (-inf, but -448 for f8e4m3, which has no
// infinity, so that an untouched element stores as a finite identity); for
// min the highest.

namespace box_copy_detail {

RESHARD_HD inline double f64_inf() {
  const uint64_t u = 0x7ff0000000000000ull;
  double v;
  memcpy(&v, &u, 8);
  return v;
}

// Integers: wrap-around sum through the unsigned type of the same width.
template <class T, class U, T kLowest, T kHighest>
struct IntTraits {
  using Elem = T;
  using Acc = T;
  static constexpr bool kFloat = false;
  RESHARD_HD static Acc load(Elem v) { return v; }
  RESHARD_HD static Elem store(Acc a) { return a; }
  RESHARD_HD static Acc add(Acc a, Acc b) {
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
  RESHARD_HD static Acc lowest() { return kLowest; }
  RESHARD_HD static Acc highest() { return kHighest; }
};

// Floats accumulated in `A`; the specialisations add load and store.
template <class E, class A>
struct FloatTraits {
  using Elem = E;
  using Acc = A;
  static constexpr bool kFloat = true;
  RESHARD_HD static Acc add(Acc a, Acc b) { return a + b; }
  RESHARD_HD static Acc lowest() { return -static_cast<A>(f64_inf()); }
  RESHARD_HD static Acc highest() { return static_cast<A>(f64_inf()); }
};

}  // namespace box_copy_detail

template <DType D>
struct AccTraits;

template <>
struct AccTraits<DType::kF64> : box_copy_detail::FloatTraits<double, double> {
  RESHARD_HD static Acc load(Elem v) { return v; }
  RESHARD_HD static Elem store(Acc a) { return a; }
};
template <>
struct AccTraits<DType::kF32> : box_copy_detail::FloatTraits<float, float> {
  RESHARD_HD static Acc load(Elem v) { return v; }
  RESHARD_HD static Elem store(Acc a) { return a; }
};
template <>
struct AccTraits<DType::kF16> : box_copy_detail::FloatTraits<uint16_t, float> {
  RESHARD_HD static Acc load(Elem v) { return numeric::f16_to_f32(v); }
  RESHARD_HD static Elem store(Acc a) { return numeric::f32_to_f16(a); }
};
template <>
struct AccTraits<DType::kBF16> : box_copy_detail::FloatTraits<uint16_t, float> {
  RESHARD_HD static Acc load(Elem v) { return numeric::bf16_to_f32(v); }
  RESHARD_HD static Elem store(Acc a) { return numeric::f32_to_bf16(a); }
};
template <>
struct AccTraits<DType::kF8E4M3> : box_copy_detail::FloatTraits<uint8_t, float> {
  RESHARD_HD static Acc load(Elem v) { return numeric::f8e4m3_to_f32(v); }
  RESHARD_HD static Elem store(Acc a) { return numeric::f32_to_f8e4m3(a); }
  // No infinity: the finite extremes are the identities of max and min.
  RESHARD_HD static Acc lowest() { return -448.0f; }
  RESHARD_HD static Acc highest() { return 448.0f; }
};
template <>
struct AccTraits<DType::kF8E5M2> : box_copy_detail::FloatTraits<uint8_t, float> {
  RESHARD_HD static Acc load(Elem v) { return numeric::f8e5m2_to_f32(v); }
  RESHARD_HD static Elem store(Acc a) { return numeric::f32_to_f8e5m2(a); }
};
template <>
struct AccTraits<DType::kI64>
    : box_copy_detail::IntTraits<int64_t, uint64_t, INT64_MIN, INT64_MAX> {};
template <>
struct AccTraits<DType::kI32>
    : box_copy_detail::IntTraits<int32_t, uint32_t, INT32_MIN, INT32_MAX> {};
template <>
struct AccTraits<DType::kI16>
    : box_copy_detail::IntTraits<int16_t, uint16_t, INT16_MIN, INT16_MAX> {};
template <>
struct AccTraits<DType::kI8> : box_copy_detail::IntTraits<int8_t, uint8_t, INT8_MIN, INT8_MAX> {};
template <>
struct AccTraits<DType::kU64> : box_copy_detail::IntTraits<uint64_t, uint64_t, 0, UINT64_MAX> {};
template <>
struct AccTraits<DType::kU32> : box_copy_detail::IntTraits<uint32_t, uint32_t, 0, UINT32_MAX> {};
template <>
struct AccTraits<DType::kU16> : box_copy_detail::IntTraits<uint16_t, uint16_t, 0, UINT16_MAX> {};
template <>
struct AccTraits<DType::kU8> : box_copy_detail::IntTraits<uint8_t, uint8_t, 0, UINT8_MAX> {};
template <>
struct AccTraits<DType::kBool> {
  using Elem = uint8_t;
  using Acc = uint8_t;
  static constexpr bool kFloat = false;
  RESHARD_HD static Acc load(Elem v) { return v != 0; }
  RESHARD_HD static Elem store(Acc a) { return a; }
  RESHARD_HD static Acc add(Acc a, Acc b) { return a | b; }
  RESHARD_HD static Acc lowest() { return 0; }
  RESHARD_HD static Acc highest() { return 1; }
};

// The identity of `Op` in the accumulation type of `D`.
template <DType D, ReduceOp Op>
RESHARD_HD typename AccTraits<D>::Acc reduce_identity() {
  using T = AccTraits<D>;
  if constexpr (Op == ReduceOp::kSum) {
    return typename T::Acc(0);
  } else if constexpr (Op == ReduceOp::kMax) {
    return T::lowest();
  } else {
    return T::highest();
  }
}

// op(a, b) in the accumulation type of `D`; float max/min return NaN when
// either side is NaN.
template <DType D, ReduceOp Op>
RESHARD_HD typename AccTraits<D>::Acc reduce_combine(typename AccTraits<D>::Acc a,
                                                     typename AccTraits<D>::Acc b) {
  using T = AccTraits<D>;
  if constexpr (Op == ReduceOp::kSum) {
    return T::add(a, b);
  } else if constexpr (T::kFloat) {
    if (a != a) return a;  // NaN
    if constexpr (Op == ReduceOp::kMax) {
      return a > b ? a : b;
    } else {
      return a < b ? a : b;
    }
  } else if constexpr (Op == ReduceOp::kMax) {
    return a > b ? a : b;
  } else {
    return a < b ? a : b;
  }
}

// acc[i] = op(acc[i], load(src[i])) for i in [0, n).
template <DType D, ReduceOp Op>
RESHARD_HD void reduce_run(const typename AccTraits<D>::Elem* src, typename AccTraits<D>::Acc* acc,
                           int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    acc[i] = reduce_combine<D, Op>(acc[i], AccTraits<D>::load(src[i]));
}

// acc[i] = load(src[i]) for i in [0, n).
template <DType D>
RESHARD_HD void load_run(const typename AccTraits<D>::Elem* src, typename AccTraits<D>::Acc* acc,
                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = AccTraits<D>::load(src[i]);
}

// dst[i] = store(acc[i]) (rounding once, to nearest even) for i in [0, n).
template <DType D>
RESHARD_HD void store_run(const typename AccTraits<D>::Acc* acc, typename AccTraits<D>::Elem* dst,
                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = AccTraits<D>::store(acc[i]);
}

// dst[i] = store(acc[i] / divisor) for i in [0, n): the mean's one division,
// in the accumulation type (floating-point dtypes), rounding once more to the
// element type. In place (acc == dst) when the accumulator is the element.
template <DType D>
RESHARD_HD void store_mean_run(const typename AccTraits<D>::Acc* acc,
                               typename AccTraits<D>::Elem* dst, int64_t n, int32_t divisor) {
  using Acc = typename AccTraits<D>::Acc;
  const Acc d = static_cast<Acc>(divisor);
  for (int64_t i = 0; i < n; ++i) dst[i] = AccTraits<D>::store(acc[i] / d);
}

// ---------------------------------------------------------------------------
// Host entry points. Invalid dtype or op values throw
// Error(kInvalidArgument); nothing else throws. Buffers must not overlap.
// Thread-safe for distinct destination buffers.

// Bytes per element of the accumulation type of `dtype`; 0 if invalid.
int64_t acc_size(DType dtype) noexcept;

// True when the accumulation type is the element type itself (every dtype
// but f16, bf16 and the f8 formats): such a destination buffer can serve as
// its own accumulator, and store_from_acc is a plain copy.
bool acc_is_elem(DType dtype) noexcept;

// The vector instructions the host copy and reduction loops use beyond the
// x86-64 baseline (SSE2), chosen once from the CPU (__builtin_cpu_supports,
// which also checks that the OS saves the registers); kBaseline on other
// architectures. One binary runs on every x86-64 machine.
enum class HostIsa : int32_t { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The level in use: the CPU's, capped by limit_host_isa.
HostIsa host_isa() noexcept;

// Caps the level used from now on (process-wide; for tests and
// benchmarks that cover every path on one machine); returns the previous
// cap. Not to be called while copies run on other threads.
HostIsa limit_host_isa(HostIsa cap) noexcept;

// Copies the described elements of `elem_size` bytes. With `streaming`,
// with non-temporal stores where the destination's runs allow it (runs of
// at least 64 bytes, 16-byte aligned, abutting or of 256 bytes or more):
// for copies that, taken together, are larger than the caches, as memcpy
// does for such copies. Such stores are weakly ordered: the caller calls
// fence_streamed_stores() before another thread may read the destination
// (once after many copies). Copies of 8 MiB or more in one call stream
// whatever the flag, and then fence themselves.
void copy_box(const CopyDesc& desc, int64_t elem_size, const void* src, void* dst,
              bool streaming = false);

// Copies `bytes` contiguous bytes; with `streaming`, with non-temporal
// stores (for a copy larger than the caches, of which this may be a slice,
// as memcpy does for such copies itself), fenced by the caller.
void copy_bytes(void* dst, const void* src, int64_t bytes, bool streaming);

// Orders the calling thread's non-temporal stores (an sfence on x86-64)
// before its later stores and any synchronisation that follows.
void fence_streamed_stores() noexcept;

// As copy_box, restricted to runs [first_run, last_run).
void copy_box_runs(const CopyDesc& desc, int64_t elem_size, int64_t first_run, int64_t last_run,
                   const void* src, void* dst, bool streaming = false);

// Most copies copy_boxes_interleaved takes at once.
inline constexpr int kMaxInterleavedCopies = 64;

// True when copies a and b can be interleaved run by run: both of rank 2
// or more, with the same extents in every dimension but the innermost (the
// same runs, row-major; their lengths may differ).
bool copy_descs_interleavable(const CopyDesc& a, const CopyDesc& b) noexcept;

// Copies runs [first_run, last_run) of n copies (1 <= n <=
// kMaxInterleavedCopies; each interleavable with descs[0]), interleaved:
// run r of copies 0, 1, ..., n - 1, then run r + 1. Copies i reads srcs[i]
// and writes dsts[i]; all have elements of `elem_size` bytes. Copies that
// each take a slice of the same source rows (a row-sharded buffer cut into
// columns) then read the source once, in order, instead of once per copy
// with a stride. `streaming` as for copy_box, per copy (the caller fences);
// without it, runs of 8 MiB or more in all stream and fence themselves.
// A streamed copy whose destination runs abut without being whole 16-byte
// units may read up to 63 bytes between two of its source rows (masked
// out): no one may write the source buffers during the call.
void copy_boxes_interleaved(const CopyDesc* descs, int n, int64_t elem_size,
                            const void* const* srcs, void* const* dsts, int64_t first_run,
                            int64_t last_run, bool streaming);

// Sets n accumulator elements (of acc_size(dtype) bytes) to the identity of
// `op` for `dtype`.
void fill_identity(DType dtype, ReduceOp op, void* acc, int64_t n);

// Converts the described elements of `src` (dtype) into `acc` (accumulation
// type; desc's destination side indexes acc): the first contribution, when
// the caller knows it covers what it writes.
void load_into_acc(const CopyDesc& desc, DType dtype, const void* src, void* acc);

// acc = op(acc, src) over the described elements; desc's destination side
// indexes acc (accumulation type), its source side indexes src (dtype).
void reduce_into(const CopyDesc& desc, DType dtype, ReduceOp op, const void* src, void* acc);

// Sums k contiguous streams into n elements of `dst` (dtype) in one pass:
// dst[i] = store(((0 + load(srcs[0][i])) + load(srcs[1][i])) + ...), in
// stream order, accumulating in the accumulation type and rounding once —
// bit for bit what fill_identity, reduce_into per stream and store_from_acc
// give. Returns false, writing nothing, for dtypes without this path (it
// exists for f32, bf16 and f16, vectorised with AVX2/AVX-512 where
// host_isa() has them); the caller then folds stream by stream. With
// `streaming`, dst is written with non-temporal stores where aligned (see
// copy_box; the caller fences).
bool sum_streams(DType dtype, const void* const* srcs, int k, void* dst, int64_t n,
                 bool streaming = false);

// Converts n accumulator elements to `dtype`, rounding to nearest even once.
void store_from_acc(DType dtype, const void* acc, void* dst, int64_t n);

// store_mean_run: dst = acc / divisor (ReduceOp::kMean), converted to `dtype`;
// acc may equal dst when acc_is_elem(dtype). Floating-point dtypes and
// divisor >= 1 only (else Error(kInvalidArgument)).
void store_mean_from_acc(DType dtype, const void* acc, void* dst, int64_t n, int32_t divisor);

// Fills n elements of `dtype` (not accumulator elements) with the identity of
// `op`: a partial destination whose elements no piece writes then holds the
// identity, so the destination summands still combine to the value. Used by
// the engine and by device backends preparing fills (CopyOp::kFillElements).
void fill_identity_elements(DType dtype, ReduceOp op, void* dst, int64_t n);

}  // namespace reshard
