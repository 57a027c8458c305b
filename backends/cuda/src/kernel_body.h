// The work of the fused copy kernels, written once for the device and the
// host (RESHARD_HD): kernels.cu wraps it in two __global__ functions, and
// tests/gpu/kernel_emulation_test.cc runs the very same code on the CPU,
// thread by thread, so the kernel logic is tested on machines without a GPU.
//
// One launch covers an array of Works (copy descriptors, see copy_plan.h).
// Each Work is cut into units, a unit into nothing smaller than what one
// group of threads handles: for a copy, one contiguous run (or a chunk of a
// long run) of bytes; for the element kinds, a run (or chunk) of elements.
// Units are grouped into tiles of kThreads threads; a prefix sum of the
// tiles per Work (tile_start) lets a block find its Work by binary search,
// so every block strides over (Work, unit) items of every descriptor and a
// launch needs no per-Work configuration. Threads of a tile never touch the
// same bytes, and the element positions are computed with the box-copy
// core's run_offsets, AccTraits and reduce_combine (reshard/box_copy.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "reshard/box_copy.h"
#include "reshard/cast.h"
#include "reshard/hd.h"
#include "reshard/quantise_grid.h"

// Unrolls the next loop on the device (fixed trip counts: summands,
// vector lanes); nothing on the host.
#if defined(__CUDA_ARCH__)
#define RESHARD_UNROLL _Pragma("unroll")
#else
#define RESHARD_UNROLL
#endif

namespace reshard::cuda_backend {

inline constexpr int kThreads = 256;               // threads per block (tile)
inline constexpr int64_t kCopyChunkBytes = 16384;  // longest byte range of one copy unit
inline constexpr int64_t kElementChunk = 4096;     // longest element range of one unit

enum class WorkKind : int32_t {
  kCopy = 0,     // bytes: copy_box
  kReduce = 1,   // acc = op(acc, load(src)): reduce_into
  kFill = 2,     // dst[i] = pattern (identity of an accumulator or element)
  kStore = 3,    // dst[i] = store(acc[i] / divisor); a plain store (divisor 1) of
                 // dtypes other than f16/bf16/f8 becomes kCopy
  kReduceN = 4,  // several summands folded in one pass (copy_plan.h, fused
                 // reductions): acc = op(acc or identity, s_0, ..., s_n-1),
                 // written as the accumulator or stored in the dtype
  kCast = 5,     // dst[i] = cast(src[i]) from dtype to to_dtype (reshard/cast.h)
  // Block scales (reshard/quantise_grid.h) of a source shard described by
  // the launch's grids[src_begin]:
  kBlockScales = 6,  // unit = one block: its amax over the shard, its scale at dst
  kQuantise = 7,     // dst[i] = the fp8 bits of src[i] with its block's scale
};

enum WorkFlags : int32_t {
  kSrcAligned = 1,    // every source element is aligned to its size
  kDstAligned = 2,    // every destination element is aligned to its size
  kFromIdentity = 4,  // kReduceN: start from the identity (pattern), not dst
  kStoreOut = 8,      // kReduceN: write store(acc / divisor) in the dtype to dst
  kAccAligned = 16,   // kReduceN: every accumulator element is aligned to its size
};

// Most summands of one kReduceN Work (longer groups are cut into Works that
// accumulate in turn).
inline constexpr int kMaxFusedSources = 8;

// One summand of a kReduceN Work: its buffer, and the element offset and
// strides of its side of the Work's descriptor (whose extents it shares).
struct SrcRef {
  const unsigned char* ptr;
  int64_t offset;
  int64_t stride[kMaxRank];
};

// A source shard with block scales, for kBlockScales and kQuantise Works:
// the shard's box (row-major elements), its blocks and their scales
// (blocks_touched(box), row-major). Plain data, copied to device memory
// beside the launch's Works.
struct ScaleGrid {
  const unsigned char* scales;  // f32 or E8M0 (scale_dtype), one per block
  int32_t rank;
  int32_t scale_dtype;              // DType: kF32 or kE8M0
  int64_t extent[kMaxRank];         // the shard's extents
  int64_t lo[kMaxRank];             // the shard's first index (global)
  int64_t block[kMaxRank];          // the block's extents
  int64_t blocks_lo[kMaxRank];      // lo / block: the first block touched
  int64_t blocks_extent[kMaxRank];  // blocks touched per dim
};

// One descriptor of a launch. Plain data, copied to device memory as is.
struct Work {
  CopyDesc desc;  // rank >= 1, unit innermost strides; element offsets
  const unsigned char* src;
  unsigned char* dst;
  int64_t runs;            // copy_desc_runs(desc)
  int64_t run_len;         // elements per run
  int64_t chunk;           // kCopy: bytes per unit; others: elements per unit
  int64_t chunks_per_run;  // units per run
  int64_t units;           // runs * chunks_per_run
  uint64_t pattern;        // kFill: the value, little endian, dst_size bytes
  int32_t kind;            // WorkKind
  int32_t dtype;           // DType (kReduce, kStore)
  int32_t op;              // ReduceOp (kReduce)
  int32_t src_size;        // bytes per source element
  int32_t dst_size;        // bytes per destination element
  int32_t group;           // threads per unit: a power of two <= kThreads
  int32_t flags;           // WorkFlags
  int32_t divisor;         // kStore, kReduceN: > 1 divides first (ReduceOp::kMean)
  int32_t nsrc;            // kReduceN: summands, sources[src_begin, + nsrc)
  int64_t src_begin;       // kReduceN: first summand in the launch's sources
  // kReduceN without kFromIdentity: the accumulator it starts from, indexed
  // by the descriptor's destination side (dst itself unless kStoreOut).
  const unsigned char* acc;
  int32_t to_dtype;  // kCast, kBlockScales, kQuantise: the destination's DType (dtype: the
                     // source's); for the last two, src_begin indexes the launch's grids
  // kCopy of narrow runs merged side by side (copy_plan.cc, append_copy):
  // 0, or k > 0 when each warp moves k neighbouring copies of 32 / k
  // consecutive rows at a time (kernel_detail::copy_swizzled), so that both
  // sides of a run narrower than a 32-byte sector are read and written in
  // whole sectors; the descriptor is then [rows, copies, run].
  int32_t swizzle;
};

// Threads of a warp, the swizzle's tile, and the rows each thread of a
// swizzled Work moves (kernel_detail::copy_swizzled).
inline constexpr int kWarp = 32;
inline constexpr int kSwizzleRows = 8;

// The Work holding tile `tile`: the last w with tile_start[w] <= tile
// (tile_start has n + 1 entries, tile_start[n] = total tiles).
RESHARD_HD inline int find_work(const int64_t* tile_start, int n, int64_t tile) {
  int lo = 0;
  int hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

namespace kernel_detail {

// Integral constants usable in device lambdas (std::integral_constant's
// value is not a device variable for every nvcc).
template <DType D>
struct DTypeC {
  static constexpr DType value = D;
};
template <bool B>
struct BoolC {
  static constexpr bool value = B;
};

// 16 bytes moved as one access when both sides allow it.
#if defined(__CUDA_ARCH__)
using Vec16 = uint4;
#else
struct alignas(16) Vec16 {
  uint64_t a;
  uint64_t b;
};
#endif

template <int A>
struct Unit;
template <>
struct Unit<1> {
  using T = uint8_t;
};
template <>
struct Unit<2> {
  using T = uint16_t;
};
template <>
struct Unit<4> {
  using T = uint32_t;
};
template <>
struct Unit<8> {
  using T = uint64_t;
};
template <>
struct Unit<16> {
  using T = Vec16;
};

template <class T>
RESHARD_HD inline T load_unit(const unsigned char* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const T*>(p));
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}

template <class T>
RESHARD_HD inline void store_unit(unsigned char* p, const T& v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<T*>(p) = v;
#else
  std::memcpy(p, &v, sizeof(T));
#endif
}

// Element access; `aligned` false means byte by byte.
template <class T>
RESHARD_HD inline T load_elem(const unsigned char* p, bool aligned) {
#if defined(__CUDA_ARCH__)
  if (aligned) return *reinterpret_cast<const T*>(p);
#else
  (void)aligned;
#endif
  T v;
  unsigned char* b = reinterpret_cast<unsigned char*>(&v);
  for (unsigned i = 0; i < sizeof(T); ++i) b[i] = p[i];
  return v;
}

template <class T>
RESHARD_HD inline void store_elem(unsigned char* p, T v, bool aligned) {
#if defined(__CUDA_ARCH__)
  if (aligned) {
    *reinterpret_cast<T*>(p) = v;
    return;
  }
#else
  (void)aligned;
#endif
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&v);
  for (unsigned i = 0; i < sizeof(T); ++i) p[i] = b[i];
}

// Copies len bytes with `width` threads (this one is `lane`): a head of
// bytes up to the first A-aligned destination byte, the body in A-byte
// units (four in flight per thread), then a tail of bytes. src and dst must
// be congruent modulo A.
template <int A>
RESHARD_HD inline void copy_bytes_aligned(unsigned char* dst, const unsigned char* src, int64_t len,
                                          int lane, int width) {
  using T = typename Unit<A>::T;
  int64_t head = static_cast<int64_t>((A - (reinterpret_cast<uintptr_t>(dst) & (A - 1))) & (A - 1));
  if (head > len) head = len;
  for (int64_t i = lane; i < head; i += width) dst[i] = src[i];
  const int64_t n = (len - head) / A;
  unsigned char* d = dst + head;
  const unsigned char* s = src + head;
  int64_t i = lane;
  for (; i + 3 * width < n; i += 4 * width) {
    const T v0 = load_unit<T>(s + i * A);
    const T v1 = load_unit<T>(s + (i + width) * A);
    const T v2 = load_unit<T>(s + (i + 2 * width) * A);
    const T v3 = load_unit<T>(s + (i + 3 * width) * A);
    store_unit<T>(d + i * A, v0);
    store_unit<T>(d + (i + width) * A, v1);
    store_unit<T>(d + (i + 2 * width) * A, v2);
    store_unit<T>(d + (i + 3 * width) * A, v3);
  }
  for (; i < n; i += width) store_unit<T>(d + i * A, load_unit<T>(s + i * A));
  for (int64_t j = head + n * A + lane; j < len; j += width) dst[j] = src[j];
}

// The 16 source bytes of an aligned destination word that starts `off`
// bytes (0 < off < 16) into the aligned source word `a`: bytes off..15 of
// a, then 0..off-1 of the next one, b. Q = off / 4 is a template argument
// (no dynamic indexing of registers); r = off mod 4.
template <int Q>
RESHARD_HD inline Vec16 realign_word(const uint32_t (&a)[4], const uint32_t (&b)[4], int r) {
  uint32_t w[8] = {a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]};
  uint32_t out[4];
  RESHARD_UNROLL
  for (int k = 0; k < 4; ++k) {
    out[k] = r == 0 ? w[k + Q] : (w[k + Q] >> (8 * r)) | (w[k + Q + 1] << (32 - 8 * r));
  }
  Vec16 v;
  memcpy(&v, out, 16);
  return v;
}

// An aligned source word's bytes [lo, hi) (0 <= lo < hi <= 16) as four
// little-endian words. The device loads the whole word (an aligned word
// holding a byte of a buffer lies inside the buffer's allocation); the
// host reads only [lo, hi), which is all realign_word uses, and zeros the
// rest, so that the CPU emulation never reads outside a buffer.
RESHARD_HD inline void load_window(const unsigned char* p, int lo, int hi, uint32_t (&w)[4]) {
#if defined(__CUDA_ARCH__)
  (void)lo, (void)hi;
  const Vec16 v = load_unit<Vec16>(p);
  memcpy(w, &v, 16);
#else
  unsigned char b[16] = {};
  std::memcpy(b + lo, p + lo, static_cast<size_t>(hi - lo));
  std::memcpy(w, b, 16);
#endif
}

template <int Q>
RESHARD_HD inline void copy_realigned_words(unsigned char* d, const unsigned char* sb, int off,
                                            int64_t n, int lane, int width) {
  const int r = off & 3;
  for (int64_t i = lane; i < n; i += width) {
    uint32_t a[4];
    uint32_t b[4];
    load_window(sb + i * 16, off, 16, a);
    load_window(sb + (i + 1) * 16, 0, off, b);
    store_unit<Vec16>(d + i * 16, realign_word<Q>(a, b, r));
  }
}

// Copies len bytes between pointers that are not congruent modulo 16: a
// head of bytes up to the first 16-byte aligned destination byte, then
// aligned 16-byte destination words, each assembled from the two aligned
// source words it straddles, then a tail of bytes. Instead of the unit of
// the pointers' common alignment (2 bytes for rows of an uneven split, whose
// offsets differ by 2 modulo 16).
RESHARD_HD inline void copy_bytes_realigned(unsigned char* dst, const unsigned char* src,
                                            int64_t len, int lane, int width) {
  int64_t head = static_cast<int64_t>((16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  if (head > len) head = len;
  for (int64_t i = lane; i < head; i += width) dst[i] = src[i];
  const int64_t n = (len - head) / 16;
  const unsigned char* s = src + head;
  const int off = static_cast<int>(reinterpret_cast<uintptr_t>(s) & 15);  // nonzero
  const unsigned char* sb = s - off;
  unsigned char* d = dst + head;
  switch (off >> 2) {
    case 0:
      copy_realigned_words<0>(d, sb, off, n, lane, width);
      break;
    case 1:
      copy_realigned_words<1>(d, sb, off, n, lane, width);
      break;
    case 2:
      copy_realigned_words<2>(d, sb, off, n, lane, width);
      break;
    default:
      copy_realigned_words<3>(d, sb, off, n, lane, width);
      break;
  }
  for (int64_t j = head + n * 16 + lane; j < len; j += width) dst[j] = src[j];
}

// Shortest run (bytes) copied realigned where the pointers are not
// congruent modulo 16: below it the head and tail bytes would be most of it.
inline constexpr int64_t kRealignMinBytes = 64;

// The widest unit both pointers can be aligned to together, or 16-byte
// destination words realigned from the source for long runs between
// pointers that are not congruent modulo 16.
RESHARD_HD inline void copy_bytes(unsigned char* dst, const unsigned char* src, int64_t len,
                                  int lane, int width) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
  if ((x & 15) == 0) return copy_bytes_aligned<16>(dst, src, len, lane, width);
  if (len >= kRealignMinBytes) return copy_bytes_realigned(dst, src, len, lane, width);
  if ((x & 7) == 0) return copy_bytes_aligned<8>(dst, src, len, lane, width);
  if ((x & 3) == 0) return copy_bytes_aligned<4>(dst, src, len, lane, width);
  if ((x & 1) == 0) return copy_bytes_aligned<2>(dst, src, len, lane, width);
  return copy_bytes_aligned<1>(dst, src, len, lane, width);
}

// M vectors of reduce_vectors (v, v + width, ...), every load before any
// store: M times the bytes in flight.
template <DType D, ReduceOp Op, int M>
RESHARD_HD inline void reduce_vector_group(const unsigned char* sp, unsigned char* ap, int64_t v,
                                           int width) {
  using T = AccTraits<D>;
  using E = typename T::Elem;
  using Acc = typename T::Acc;
  constexpr int V = 16 / static_cast<int>(sizeof(E));
  constexpr int kAccVecs = V * static_cast<int>(sizeof(Acc)) / 16;
  Vec16 raw[M];
  Vec16 accv[M][kAccVecs];
  RESHARD_UNROLL
  for (int m = 0; m < M; ++m) {
    const int64_t at = v + m * static_cast<int64_t>(width);
    raw[m] = load_unit<Vec16>(sp + at * 16);
    RESHARD_UNROLL
    for (int k = 0; k < kAccVecs; ++k) accv[m][k] = load_unit<Vec16>(ap + (at * kAccVecs + k) * 16);
  }
  RESHARD_UNROLL
  for (int m = 0; m < M; ++m) {
    E x[V];
    Acc acc[V];
    memcpy(x, &raw[m], 16);
    memcpy(acc, accv[m], sizeof(acc));
    RESHARD_UNROLL
    for (int e = 0; e < V; ++e) acc[e] = reduce_combine<D, Op>(acc[e], T::load(x[e]));
    memcpy(accv[m], acc, sizeof(acc));
  }
  RESHARD_UNROLL
  for (int m = 0; m < M; ++m) {
    const int64_t at = v + m * static_cast<int64_t>(width);
    RESHARD_UNROLL
    for (int k = 0; k < kAccVecs; ++k) store_unit<Vec16>(ap + (at * kAccVecs + k) * 16, accv[m][k]);
  }
}

// The vector body of reduce_elems for f32, bf16 and f16: V = 16 / sizeof(E)
// source elements per 16-byte load and their accumulators in 16-byte
// accesses, two vectors in flight per thread. Returns the elements done (a
// multiple of V from begin); 0 where a pointer is not 16-byte aligned at
// `begin`, and the scalar loop does it all.
template <DType D, ReduceOp Op>
RESHARD_HD inline int64_t reduce_vectors(const unsigned char* s, unsigned char* a, int64_t begin,
                                         int64_t end, int lane, int width) {
  if constexpr (D != DType::kF32 && D != DType::kBF16 && D != DType::kF16) {
    (void)s, (void)a, (void)begin, (void)end, (void)lane, (void)width;
    return 0;
  } else {
    using T = AccTraits<D>;
    using E = typename T::Elem;
    using Acc = typename T::Acc;
    constexpr int V = 16 / static_cast<int>(sizeof(E));
    const unsigned char* sp = s + begin * static_cast<int64_t>(sizeof(E));
    unsigned char* ap = a + begin * static_cast<int64_t>(sizeof(Acc));
    if (((reinterpret_cast<uintptr_t>(sp) | reinterpret_cast<uintptr_t>(ap)) & 15) != 0) return 0;
    const int64_t nv = (end - begin) / V;
    int64_t v = lane;
    for (; v + width < nv; v += 2 * width) reduce_vector_group<D, Op, 2>(sp, ap, v, width);
    if (v < nv) reduce_vector_group<D, Op, 1>(sp, ap, v, width);
    return nv * V;
  }
}

// n (<= kSwizzleRows) runs of one unit U each, at s + j ss to t + j ts:
// every load before any store.
template <class U>
RESHARD_HD inline void copy_rows(const unsigned char* s, int64_t ss, unsigned char* t, int64_t ts,
                                 int n) {
  U v[kSwizzleRows];
  RESHARD_UNROLL
  for (int j = 0; j < kSwizzleRows; ++j) {
    if (j < n) v[j] = load_unit<U>(s + j * ss);
  }
  RESHARD_UNROLL
  for (int j = 0; j < kSwizzleRows; ++j) {
    if (j < n) store_unit<U>(t + j * ts, v[j]);
  }
}

// A swizzled copy's unit (Work::swizzle = k, descriptor [rows, copies,
// run]): units come in warps of kWarp; warp q moves copies [cb k, cb k + k)
// of kSwizzleRows steps of kWarp / k consecutive rows, cb = q mod
// ceil(copies / k) (neighbouring warps: neighbouring copies of the same
// rows), the row block q / ceil(copies / k). Lane l takes copy cb k + l mod
// k and rows l / k + j kWarp / k of the block: its offsets are computed
// once and stepped, and its runs are all loaded before any is stored.
RESHARD_HD inline void copy_swizzled(const Work& w, int64_t unit) {
  const CopyDesc& d = w.desc;
  const int64_t k = w.swizzle;
  const int64_t rows = d.extent[0];
  const int64_t copies = d.extent[1];
  const int64_t step = kWarp / k;  // rows a warp moves at a time
  const int64_t copy_blocks = (copies + k - 1) / k;
  const int64_t q = unit / kWarp;
  const int64_t lane = unit % kWarp;
  const int64_t copy = (q % copy_blocks) * k + lane % k;
  const int64_t row0 = (q / copy_blocks) * (step * kSwizzleRows) + lane / k;
  if (copy >= copies || row0 >= rows) return;
  const int64_t left = (rows - row0 + step - 1) / step;
  const int n = left < kSwizzleRows ? static_cast<int>(left) : kSwizzleRows;
  const int64_t es = w.src_size;
  const int64_t len = d.extent[2] * es;
  const unsigned char* s =
      w.src + (d.src_offset + copy * d.src_stride[1] + row0 * d.src_stride[0]) * es;
  unsigned char* t = w.dst + (d.dst_offset + copy * d.dst_stride[1] + row0 * d.dst_stride[0]) * es;
  const int64_t ss = step * d.src_stride[0] * es;
  const int64_t ts = step * d.dst_stride[0] * es;
  const uintptr_t bits = reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(t) |
                         static_cast<uintptr_t>(ss) | static_cast<uintptr_t>(ts);
  if (len == 16 && (bits & 15) == 0) return copy_rows<Vec16>(s, ss, t, ts, n);
  if (len == 8 && (bits & 7) == 0) return copy_rows<uint64_t>(s, ss, t, ts, n);
  for (int j = 0; j < n; ++j) copy_bytes(t + j * ts, s + j * ss, len, 0, 1);
}

template <DType D, ReduceOp Op>
RESHARD_HD inline void reduce_elems(const Work& w, const unsigned char* s, unsigned char* a,
                                    int64_t begin, int64_t end, int lane, int width) {
  using T = AccTraits<D>;
  using E = typename T::Elem;
  using Acc = typename T::Acc;
  const bool sa = (w.flags & kSrcAligned) != 0;
  const bool da = (w.flags & kDstAligned) != 0;
  begin += reduce_vectors<D, Op>(s, a, begin, end, lane, width);  // the scalar loop: the tail
  for (int64_t i = begin + lane; i < end; i += width) {
    unsigned char* ap = a + i * static_cast<int64_t>(sizeof(Acc));
    const Acc acc = load_elem<Acc>(ap, da);
    const E v = load_elem<E>(s + i * static_cast<int64_t>(sizeof(E)), sa);
    store_elem<Acc>(ap, reduce_combine<D, Op>(acc, T::load(v)), da);
  }
}

template <DType D>
RESHARD_HD inline void reduce_dispatch_op(const Work& w, const unsigned char* s, unsigned char* a,
                                          int64_t begin, int64_t end, int lane, int width) {
  switch (static_cast<ReduceOp>(w.op)) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:  // accumulated as a sum; kStore divides
      return reduce_elems<D, ReduceOp::kSum>(w, s, a, begin, end, lane, width);
    case ReduceOp::kMax:
      return reduce_elems<D, ReduceOp::kMax>(w, s, a, begin, end, lane, width);
    case ReduceOp::kMin:
      return reduce_elems<D, ReduceOp::kMin>(w, s, a, begin, end, lane, width);
  }
}

RESHARD_HD inline void reduce_unit(const Work& w, const unsigned char* s, unsigned char* a,
                                   int64_t begin, int64_t end, int lane, int width) {
#define RESHARD_REDUCE_CASE(D) \
  case D:                      \
    return reduce_dispatch_op<D>(w, s, a, begin, end, lane, width);
  switch (static_cast<DType>(w.dtype)) {
    RESHARD_REDUCE_CASE(DType::kF64)
    RESHARD_REDUCE_CASE(DType::kF32)
    RESHARD_REDUCE_CASE(DType::kF16)
    RESHARD_REDUCE_CASE(DType::kBF16)
    RESHARD_REDUCE_CASE(DType::kF8E4M3)
    RESHARD_REDUCE_CASE(DType::kF8E5M2)
    RESHARD_REDUCE_CASE(DType::kI64)
    RESHARD_REDUCE_CASE(DType::kI32)
    RESHARD_REDUCE_CASE(DType::kI16)
    RESHARD_REDUCE_CASE(DType::kI8)
    RESHARD_REDUCE_CASE(DType::kU64)
    RESHARD_REDUCE_CASE(DType::kU32)
    RESHARD_REDUCE_CASE(DType::kU16)
    RESHARD_REDUCE_CASE(DType::kU8)
    RESHARD_REDUCE_CASE(DType::kBool)
    case DType::kE8M0:  // a scale tensor's dtype only: never reduced (the decoder
      return;           // refuses e8m0 elsewhere)
  }
#undef RESHARD_REDUCE_CASE
}

template <DType D>
RESHARD_HD inline void store_elems(const Work& w, const unsigned char* a, unsigned char* d,
                                   int64_t begin, int64_t end, int lane, int width) {
  using T = AccTraits<D>;
  using E = typename T::Elem;
  using Acc = typename T::Acc;
  const bool sa = (w.flags & kSrcAligned) != 0;
  const bool da = (w.flags & kDstAligned) != 0;
  const Acc div = static_cast<Acc>(w.divisor > 1 ? w.divisor : 1);
  for (int64_t i = begin + lane; i < end; i += width) {
    const Acc acc = load_elem<Acc>(a + i * static_cast<int64_t>(sizeof(Acc)), sa);
    store_elem<E>(d + i * static_cast<int64_t>(sizeof(E)),
                  T::store(w.divisor > 1 ? acc / div : acc), da);
  }
}

RESHARD_HD inline void store_unit_elems(const Work& w, const unsigned char* a, unsigned char* d,
                                        int64_t begin, int64_t end, int lane, int width) {
  switch (static_cast<DType>(w.dtype)) {
    case DType::kF16:
      return store_elems<DType::kF16>(w, a, d, begin, end, lane, width);
    case DType::kBF16:
      return store_elems<DType::kBF16>(w, a, d, begin, end, lane, width);
    case DType::kF8E4M3:
      return store_elems<DType::kF8E4M3>(w, a, d, begin, end, lane, width);
    case DType::kF8E5M2:
      return store_elems<DType::kF8E5M2>(w, a, d, begin, end, lane, width);
    case DType::kF32:
      return store_elems<DType::kF32>(w, a, d, begin, end, lane, width);
    case DType::kF64:
      return store_elems<DType::kF64>(w, a, d, begin, end, lane, width);
    default:
      return;  // copy_plan turns the other stores into copies
  }
}

// Element offset of run `run` on the side of summand r (the Work's extents).
RESHARD_HD inline int64_t src_run_offset(const CopyDesc& d, const SrcRef& r, int64_t run) {
  int64_t s = r.offset;
  for (int k = d.rank - 2; k >= 0; --k) {
    s += (run % d.extent[k]) * r.stride[k];
    run /= d.extent[k];
  }
  return s;
}

// The vector body of reduce_n_elems for N summands: V = 16 / sizeof(E)
// elements per 16-byte load, all N loads issued before they are combined.
// Returns the elements done (a multiple of V from begin).
template <DType D, ReduceOp Op, int N>
RESHARD_HD inline int64_t reduce_n_vec(const Work& w, const unsigned char* const* in,
                                       typename AccTraits<D>::Acc identity, unsigned char* out,
                                       int64_t begin, int64_t end, int lane, int width) {
  using T = AccTraits<D>;
  using E = typename T::Elem;
  using Acc = typename T::Acc;
  constexpr int V = 16 / static_cast<int>(sizeof(E));
  const bool store = (w.flags & kStoreOut) != 0;
  const Acc div = static_cast<Acc>(w.divisor > 1 ? w.divisor : 1);
  const int64_t nv = (end - begin) / V;
  const unsigned char* p[N];
  RESHARD_UNROLL
  for (int j = 0; j < N; ++j) p[j] = in[j] + begin * static_cast<int64_t>(sizeof(E));
  unsigned char* o =
      out + begin * (store ? static_cast<int64_t>(sizeof(E)) : static_cast<int64_t>(sizeof(Acc)));
  for (int64_t v = lane; v < nv; v += width) {
    Vec16 raw[N];
    RESHARD_UNROLL
    for (int j = 0; j < N; ++j) raw[j] = load_unit<Vec16>(p[j] + v * 16);
    Acc acc[V];
    RESHARD_UNROLL
    for (int e = 0; e < V; ++e) acc[e] = identity;
    RESHARD_UNROLL
    for (int j = 0; j < N; ++j) {
      E x[V];
      memcpy(x, &raw[j], 16);
      RESHARD_UNROLL
      for (int e = 0; e < V; ++e) acc[e] = reduce_combine<D, Op>(acc[e], T::load(x[e]));
    }
    if (store) {
      E y[V];
      RESHARD_UNROLL
      for (int e = 0; e < V; ++e) y[e] = T::store(w.divisor > 1 ? acc[e] / div : acc[e]);
      Vec16 packed;
      memcpy(&packed, y, 16);
      store_unit<Vec16>(o + v * 16, packed);
    } else {
      // V accumulators of sizeof(Acc) bytes: 16-byte stores.
      constexpr int kStores = V * static_cast<int>(sizeof(Acc)) / 16;
      RESHARD_UNROLL
      for (int k = 0; k < kStores; ++k) {
        Vec16 packed;
        memcpy(&packed, reinterpret_cast<const unsigned char*>(acc) + k * 16, 16);
        store_unit<Vec16>(o + (v * kStores + k) * 16, packed);
      }
    }
  }
  return nv * V;
}

// Dispatches the vector body on the summands' count for f32, bf16 and f16
// where every pointer is 16-byte aligned at `begin`; 0 (nothing done)
// otherwise, and the scalar loop does it all.
template <DType D, ReduceOp Op>
RESHARD_HD inline int64_t reduce_n_vectors(const Work& w, const unsigned char* const* in, int n,
                                           typename AccTraits<D>::Acc identity, unsigned char* out,
                                           int64_t begin, int64_t end, int lane, int width) {
  if constexpr (D != DType::kF32 && D != DType::kBF16 && D != DType::kF16) {
    (void)w, (void)in, (void)n, (void)identity, (void)out, (void)begin, (void)end, (void)lane,
        (void)width;
    return 0;
  } else {
    using T = AccTraits<D>;
    using E = typename T::Elem;
    using Acc = typename T::Acc;
    const bool store = (w.flags & kStoreOut) != 0;
    const int64_t out_size =
        store ? static_cast<int64_t>(sizeof(E)) : static_cast<int64_t>(sizeof(Acc));
    if ((reinterpret_cast<uintptr_t>(out + begin * out_size) & 15) != 0) return 0;
    for (int j = 0; j < n; ++j) {
      if ((reinterpret_cast<uintptr_t>(in[j] + begin * static_cast<int64_t>(sizeof(E))) & 15) != 0)
        return 0;
    }
    switch (n) {
      case 1:
        return reduce_n_vec<D, Op, 1>(w, in, identity, out, begin, end, lane, width);
      case 2:
        return reduce_n_vec<D, Op, 2>(w, in, identity, out, begin, end, lane, width);
      case 3:
        return reduce_n_vec<D, Op, 3>(w, in, identity, out, begin, end, lane, width);
      case 4:
        return reduce_n_vec<D, Op, 4>(w, in, identity, out, begin, end, lane, width);
      case 5:
        return reduce_n_vec<D, Op, 5>(w, in, identity, out, begin, end, lane, width);
      case 6:
        return reduce_n_vec<D, Op, 6>(w, in, identity, out, begin, end, lane, width);
      case 7:
        return reduce_n_vec<D, Op, 7>(w, in, identity, out, begin, end, lane, width);
      case 8:
        return reduce_n_vec<D, Op, 8>(w, in, identity, out, begin, end, lane, width);
      default:
        return 0;
    }
  }
}

// kReduceN: each element folds every summand in order (as consecutive
// reduce_into calls would, bit for bit), reading each summand once and
// writing the result once, as the accumulator or stored in the dtype.
template <DType D, ReduceOp Op>
RESHARD_HD inline void reduce_n_elems(const Work& w, const SrcRef* srcs, int64_t run, int64_t to,
                                      unsigned char* out, int64_t begin, int64_t end, int lane,
                                      int width) {
  using T = AccTraits<D>;
  using E = typename T::Elem;
  using Acc = typename T::Acc;
  const bool sa = (w.flags & kSrcAligned) != 0;
  const bool da = (w.flags & kDstAligned) != 0;
  const bool from_identity = (w.flags & kFromIdentity) != 0;
  const bool store = (w.flags & kStoreOut) != 0;
  const int n = w.nsrc < kMaxFusedSources ? w.nsrc : kMaxFusedSources;
  const unsigned char* in[kMaxFusedSources];
  for (int j = 0; j < n; ++j) {
    in[j] = srcs[j].ptr + src_run_offset(w.desc, srcs[j], run) * static_cast<int64_t>(sizeof(E));
  }
  Acc identity;
  {
    const uint64_t pattern = w.pattern;
    const unsigned char* pb = reinterpret_cast<const unsigned char*>(&pattern);
    unsigned char* vb = reinterpret_cast<unsigned char*>(&identity);
    for (unsigned i = 0; i < sizeof(Acc); ++i) vb[i] = pb[i];  // little endian
  }
  const Acc div = static_cast<Acc>(w.divisor > 1 ? w.divisor : 1);
  const unsigned char* a = from_identity ? nullptr : w.acc + to * static_cast<int64_t>(sizeof(Acc));
  const bool aa = (w.flags & kAccAligned) != 0;
  // 16-byte vectors of every summand where every pointer allows them (the
  // common case: shards and staging are aligned), with the summands'
  // count a template argument for the floats, so that nothing spills.
  if (from_identity) {
    const int64_t done = reduce_n_vectors<D, Op>(w, in, n, identity, out, begin, end, lane, width);
    begin += done;  // the scalar loop below takes the tail
  }
  for (int64_t i = begin + lane; i < end; i += width) {
    Acc acc =
        from_identity ? identity : load_elem<Acc>(a + i * static_cast<int64_t>(sizeof(Acc)), aa);
    for (int j = 0; j < n; ++j) {
      acc = reduce_combine<D, Op>(
          acc, T::load(load_elem<E>(in[j] + i * static_cast<int64_t>(sizeof(E)), sa)));
    }
    if (store) {
      store_elem<E>(out + i * static_cast<int64_t>(sizeof(E)),
                    T::store(w.divisor > 1 ? acc / div : acc), da);
    } else {
      store_elem<Acc>(out + i * static_cast<int64_t>(sizeof(Acc)), acc, da);
    }
  }
}

template <DType D>
RESHARD_HD inline void reduce_n_dispatch_op(const Work& w, const SrcRef* srcs, int64_t run,
                                            int64_t to, unsigned char* out, int64_t begin,
                                            int64_t end, int lane, int width) {
  switch (static_cast<ReduceOp>(w.op)) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return reduce_n_elems<D, ReduceOp::kSum>(w, srcs, run, to, out, begin, end, lane, width);
    case ReduceOp::kMax:
      return reduce_n_elems<D, ReduceOp::kMax>(w, srcs, run, to, out, begin, end, lane, width);
    case ReduceOp::kMin:
      return reduce_n_elems<D, ReduceOp::kMin>(w, srcs, run, to, out, begin, end, lane, width);
  }
}

RESHARD_HD inline void reduce_n_unit(const Work& w, const SrcRef* srcs, int64_t run, int64_t to,
                                     unsigned char* out, int64_t begin, int64_t end, int lane,
                                     int width) {
#define RESHARD_REDUCE_N_CASE(D) \
  case D:                        \
    return reduce_n_dispatch_op<D>(w, srcs, run, to, out, begin, end, lane, width);
  switch (static_cast<DType>(w.dtype)) {
    RESHARD_REDUCE_N_CASE(DType::kF64)
    RESHARD_REDUCE_N_CASE(DType::kF32)
    RESHARD_REDUCE_N_CASE(DType::kF16)
    RESHARD_REDUCE_N_CASE(DType::kBF16)
    RESHARD_REDUCE_N_CASE(DType::kF8E4M3)
    RESHARD_REDUCE_N_CASE(DType::kF8E5M2)
    RESHARD_REDUCE_N_CASE(DType::kI64)
    RESHARD_REDUCE_N_CASE(DType::kI32)
    RESHARD_REDUCE_N_CASE(DType::kI16)
    RESHARD_REDUCE_N_CASE(DType::kI8)
    RESHARD_REDUCE_N_CASE(DType::kU64)
    RESHARD_REDUCE_N_CASE(DType::kU32)
    RESHARD_REDUCE_N_CASE(DType::kU16)
    RESHARD_REDUCE_N_CASE(DType::kU8)
    RESHARD_REDUCE_N_CASE(DType::kBool)
    case DType::kE8M0:  // a scale tensor's dtype only: never reduced (the decoder
      return;           // refuses e8m0 elsewhere)
  }
#undef RESHARD_REDUCE_N_CASE
}

template <class T>
RESHARD_HD inline void fill_elems(const Work& w, unsigned char* d, int64_t begin, int64_t end,
                                  int lane, int width) {
  T v;
  const uint64_t pattern = w.pattern;
  const unsigned char* pb = reinterpret_cast<const unsigned char*>(&pattern);
  unsigned char* vb = reinterpret_cast<unsigned char*>(&v);
  for (unsigned i = 0; i < sizeof(T); ++i) vb[i] = pb[i];  // little endian
  const bool da = (w.flags & kDstAligned) != 0;
  for (int64_t i = begin + lane; i < end; i += width) {
    store_elem<T>(d + i * static_cast<int64_t>(sizeof(T)), v, da);
  }
}

RESHARD_HD inline void fill_unit(const Work& w, unsigned char* d, int64_t begin, int64_t end,
                                 int lane, int width) {
  switch (w.dst_size) {
    case 1:
      return fill_elems<uint8_t>(w, d, begin, end, lane, width);
    case 2:
      return fill_elems<uint16_t>(w, d, begin, end, lane, width);
    case 4:
      return fill_elems<uint32_t>(w, d, begin, end, lane, width);
    case 8:
      return fill_elems<uint64_t>(w, d, begin, end, lane, width);
    default:
      return;
  }
}

// Casts elements [begin, end) of a run (the reference conversion of
// reshard/cast.h: the host's cast_box, bit for bit).
RESHARD_HD inline void cast_unit(const Work& w, const unsigned char* s, unsigned char* d,
                                 int64_t begin, int64_t end, int lane, int width) {
  const DType from = static_cast<DType>(w.dtype);
  const DType to = static_cast<DType>(w.to_dtype);
  for (int64_t i = begin + lane; i < end; i += width)
    cast_detail::store_f32(to, cast_detail::load_f32(from, s + i * w.src_size), d + i * w.dst_size);
}

// The scale index (row-major in blocks_touched) of the shard's element at
// row-major offset o.
RESHARD_HD inline int64_t grid_block(const ScaleGrid& g, int64_t o) {
  int64_t b = 0;
  int64_t mul = 1;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t c = o % g.extent[d];
    o /= g.extent[d];
    b += ((g.lo[d] + c) / g.block[d] - g.blocks_lo[d]) * mul;
    mul *= g.blocks_extent[d];
  }
  return b;
}

// kQuantise, elements [begin, end) of a run whose source offset in the
// shard is `so`: each element's block, then its fp8 bits with that block's
// scale (quantise_grid.h, the host quantiser's code).
template <DType From, DType To, bool kMx>
RESHARD_HD inline void quantise_elems(const Work& w, const ScaleGrid& g, int64_t so,
                                      const unsigned char* s, unsigned char* d, int64_t begin,
                                      int64_t end, int lane, int width) {
  using T = typename quantise_grid::Source<From>::T;
  const bool sa = (w.flags & kSrcAligned) != 0;
  const int last = g.rank - 1;
  // A run inside one row of the shard (the usual case) finds the blocks
  // of its elements from its first one's row.
  const int64_t col0 = so % g.extent[last];
  const bool one_row = col0 + w.run_len <= g.extent[last];
  const int64_t row_base = one_row ? grid_block(g, so - col0) : 0;
  for (int64_t i = begin + lane; i < end; i += width) {
    const int64_t b = one_row
                          ? row_base + (g.lo[last] + col0 + i) / g.block[last] - g.blocks_lo[last]
                          : grid_block(g, so + i);
    const T x = load_elem<T>(s + i * static_cast<int64_t>(sizeof(T)), sa);
    if constexpr (kMx) {
      d[i] = quantise_grid::quantise_mx<From, To>(x, g.scales[b]);
    } else {
      d[i] = quantise_grid::quantise_f32<From, To>(
          x, load_elem<float>(g.scales + b * static_cast<int64_t>(sizeof(float)), true));
    }
  }
}

// kBlockScales, block `block` of the shard (one thread): the amax of its
// elements (quantise_grid::amax_bits), then its scale at d.
template <DType From, DType To, bool kMx>
RESHARD_HD inline void block_scale_unit(const Work& w, const ScaleGrid& g, int64_t block,
                                        unsigned char* d) {
  using S = quantise_grid::Source<From>;
  using T = typename S::T;
  const bool sa = (w.flags & kSrcAligned) != 0;
  const int rank = g.rank;
  const int last = rank - 1;
  // The block's elements in the shard: [first, end) per dim.
  int64_t first[kMaxRank];
  int64_t end[kMaxRank];
  for (int k = last; k >= 0; --k) {
    const int64_t bk = g.blocks_lo[k] + block % g.blocks_extent[k];
    block /= g.blocks_extent[k];
    const int64_t lo = bk * g.block[k] - g.lo[k];
    const int64_t hi = lo + g.block[k];
    first[k] = lo > 0 ? lo : 0;
    end[k] = hi < g.extent[k] ? hi : g.extent[k];
  }
  int64_t idx[kMaxRank];
  for (int k = 0; k < rank; ++k) idx[k] = first[k];
  T m = 0;
  for (;;) {
    int64_t off = 0;
    for (int k = 0; k < last; ++k) off = (off + idx[k]) * g.extent[k + 1];
    const unsigned char* row = w.src + (off + first[last]) * static_cast<int64_t>(sizeof(T));
    for (int64_t c = 0; c < end[last] - first[last]; ++c) {
      const T a = quantise_grid::amax_bits<From, kMx>(
          load_elem<T>(row + c * static_cast<int64_t>(sizeof(T)), sa));
      m = a > m ? a : m;
    }
    int k = last - 1;
    for (; k >= 0; --k) {
      if (++idx[k] < end[k]) break;
      idx[k] = first[k];
    }
    if (k < 0) break;
  }
  if constexpr (kMx) {
    *d = quantise_grid::mx_bits<From, To>(m);
  } else {
    store_elem<float>(d, quantise_grid::f32_scale<To>(S::to_f32(m)), true);
  }
}

// Calls fn(From, To, kMx) as integral constants for a scaled Work's dtypes
// (copy_plan admits f32, bf16, f16 into f8e4m3, f8e5m2).
template <class Fn>
RESHARD_HD inline void dispatch_scaled(const Work& w, const ScaleGrid& g, Fn&& fn) {
  const auto with_mx = [&](auto from, auto to) {
    if (static_cast<DType>(g.scale_dtype) == DType::kE8M0) {
      fn(from, to, BoolC<true>{});
    } else {
      fn(from, to, BoolC<false>{});
    }
  };
  const auto with_to = [&](auto from) {
    if (static_cast<DType>(w.to_dtype) == DType::kF8E4M3) {
      with_mx(from, DTypeC<DType::kF8E4M3>{});
    } else {
      with_mx(from, DTypeC<DType::kF8E5M2>{});
    }
  };
  switch (static_cast<DType>(w.dtype)) {
    case DType::kF32:
      return with_to(DTypeC<DType::kF32>{});
    case DType::kBF16:
      return with_to(DTypeC<DType::kBF16>{});
    case DType::kF16:
      return with_to(DTypeC<DType::kF16>{});
    default:
      return;
  }
}

RESHARD_HD inline void quantise_unit(const Work& w, const ScaleGrid& g, int64_t so,
                                     const unsigned char* s, unsigned char* d, int64_t begin,
                                     int64_t end, int lane, int width) {
  dispatch_scaled(w, g, [&](auto from, auto to, auto mx) {
    quantise_elems<decltype(from)::value, decltype(to)::value, decltype(mx)::value>(
        w, g, so, s, d, begin, end, lane, width);
  });
}

RESHARD_HD inline void block_scales_unit(const Work& w, const ScaleGrid& g, int64_t block,
                                         unsigned char* d) {
  dispatch_scaled(w, g, [&](auto from, auto to, auto mx) {
    block_scale_unit<decltype(from)::value, decltype(to)::value, decltype(mx)::value>(w, g, block,
                                                                                      d);
  });
}

}  // namespace kernel_detail

// Thread `tid` (0 <= tid < kThreads) of the block working on tile `tile`;
// `tile_work` is null or the Work of each tile (Launch::tile_work).
// kElement selects the launch class: copies (false) or the element kinds
// (true); copy_plan never mixes them in one launch.
// `sources`: the launch's summands of kReduceN Works (SrcRef).
// kMulti: the launch holds only kReduceN Works (their own kernel, so that
// their registers do not lower the occupancy of the other element kinds);
// kSwizzled: only swizzled copies (Work::swizzle, likewise).
// `grids`: the scaled source shards of its kBlockScales and kQuantise Works.
template <bool kElement, bool kMulti = false, bool kSwizzled = false>
RESHARD_HD inline void run_tile(const Work* works, const int64_t* tile_start,
                                const int32_t* tile_work, const SrcRef* sources,
                                const ScaleGrid* grids, int n, int64_t tile, int tid) {
  const int wi = tile_work != nullptr ? tile_work[tile] : find_work(tile_start, n, tile);
  const Work& w = works[wi];
  const int group = w.group;
  const int64_t per_tile = kThreads / group;
  const int64_t unit = (tile - tile_start[wi]) * per_tile + tid / group;
  if (unit >= w.units) return;
  const int lane = tid & (group - 1);
  if constexpr (kSwizzled) return kernel_detail::copy_swizzled(w, unit);
  const int64_t run = w.chunks_per_run == 1 ? unit : unit / w.chunks_per_run;
  const int64_t chunk = unit - run * w.chunks_per_run;
  int64_t so = 0;
  int64_t to = 0;
  run_offsets(w.desc, run, &so, &to);
  const unsigned char* s = w.src + so * w.src_size;
  unsigned char* d = w.dst + to * w.dst_size;
  if constexpr (!kElement) {
    const int64_t run_bytes = w.run_len * w.src_size;
    const int64_t begin = chunk * w.chunk;
    const int64_t len = run_bytes - begin < w.chunk ? run_bytes - begin : w.chunk;
    kernel_detail::copy_bytes(d + begin, s + begin, len, lane, group);
  } else {
    const int64_t begin = chunk * w.chunk;
    const int64_t end = w.run_len - begin < w.chunk ? w.run_len : begin + w.chunk;
    if constexpr (kMulti) {
      return kernel_detail::reduce_n_unit(w, sources + w.src_begin, run, to, d, begin, end, lane,
                                          group);
    }
    switch (static_cast<WorkKind>(w.kind)) {
      case WorkKind::kReduce:
        return kernel_detail::reduce_unit(w, s, d, begin, end, lane, group);
      case WorkKind::kFill:
        return kernel_detail::fill_unit(w, d, begin, end, lane, group);
      case WorkKind::kStore:
        return kernel_detail::store_unit_elems(w, s, d, begin, end, lane, group);
      case WorkKind::kCast:
        return kernel_detail::cast_unit(w, s, d, begin, end, lane, group);
      case WorkKind::kQuantise:
        return kernel_detail::quantise_unit(w, grids[w.src_begin], so, s, d, begin, end, lane,
                                            group);
      case WorkKind::kBlockScales:  // a unit per block, one thread each
        return kernel_detail::block_scales_unit(w, grids[w.src_begin], run, d);
      case WorkKind::kReduceN:  // in kMulti launches only
      case WorkKind::kCopy:
        return;
    }
  }
}

}  // namespace reshard::cuda_backend
