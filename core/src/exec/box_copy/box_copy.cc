// Host entry points of the box copy core: dispatch on dtype and op, then run
// the RESHARD_HD loops from box_copy.h.
#include "reshard/box_copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>

#include "exec/box_copy/vector_kernels.h"
#include "reshard/error.h"

namespace reshard {
namespace {

template <DType D>
using DTypeTag = std::integral_constant<DType, D>;

// Calls fn(DTypeTag<dtype>{}); throws kInvalidArgument for an invalid value.
template <class Fn>
void dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF64:
      return fn(DTypeTag<DType::kF64>{});
    case DType::kF32:
      return fn(DTypeTag<DType::kF32>{});
    case DType::kF16:
      return fn(DTypeTag<DType::kF16>{});
    case DType::kBF16:
      return fn(DTypeTag<DType::kBF16>{});
    case DType::kF8E4M3:
      return fn(DTypeTag<DType::kF8E4M3>{});
    case DType::kF8E5M2:
      return fn(DTypeTag<DType::kF8E5M2>{});
    case DType::kI64:
      return fn(DTypeTag<DType::kI64>{});
    case DType::kI32:
      return fn(DTypeTag<DType::kI32>{});
    case DType::kI16:
      return fn(DTypeTag<DType::kI16>{});
    case DType::kI8:
      return fn(DTypeTag<DType::kI8>{});
    case DType::kU64:
      return fn(DTypeTag<DType::kU64>{});
    case DType::kU32:
      return fn(DTypeTag<DType::kU32>{});
    case DType::kU16:
      return fn(DTypeTag<DType::kU16>{});
    case DType::kU8:
      return fn(DTypeTag<DType::kU8>{});
    case DType::kBool:
      return fn(DTypeTag<DType::kBool>{});
    case DType::kE8M0:  // moved as bytes; never cast or summed (validate_block_scales)
      return fn(DTypeTag<DType::kU8>{});
  }
  fail(ErrorCode::kInvalidArgument,
       "dtype: invalid value " + std::to_string(static_cast<int32_t>(dtype)));
}

template <ReduceOp Op>
using OpTag = std::integral_constant<ReduceOp, Op>;

template <class Fn>
void dispatch_op(ReduceOp op, Fn&& fn) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:  // accumulates as a sum; store_mean_from_acc divides
      return fn(OpTag<ReduceOp::kSum>{});
    case ReduceOp::kMax:
      return fn(OpTag<ReduceOp::kMax>{});
    case ReduceOp::kMin:
      return fn(OpTag<ReduceOp::kMin>{});
  }
  fail(ErrorCode::kInvalidArgument,
       "reduce op: invalid value " + std::to_string(static_cast<int32_t>(op)));
}

}  // namespace

int64_t acc_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
    case DType::kU64:
      return 8;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI32:
    case DType::kU32:
      return 4;
    case DType::kI16:
    case DType::kU16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kE8M0:
      return 1;
  }
  return 0;
}

bool acc_is_elem(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return false;
    default:
      return acc_size(dtype) != 0;
  }
}

namespace {

HostIsa detect_host_isa() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  // F16C came with AVX2 on every x86-64 CPU; checked all the same, through
  // CPUID leaf 1 (clang's __builtin_cpu_supports does not know "f16c").
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_F16C) == 0)
    return HostIsa::kBaseline;
  if (__builtin_cpu_supports("avx512f")) return HostIsa::kAvx512;
  if (__builtin_cpu_supports("avx2")) return HostIsa::kAvx2;
#endif
  return HostIsa::kBaseline;
}

std::atomic<int32_t> g_isa_cap{static_cast<int32_t>(HostIsa::kAvx512)};

#if defined(__x86_64__)
const vector_kernels::Kernels& kernels() noexcept {
  switch (host_isa()) {
    case HostIsa::kAvx512:
      return vector_kernels::kAvx512;
    case HostIsa::kAvx2:
      return vector_kernels::kAvx2;
    case HostIsa::kBaseline:
      break;
  }
  return vector_kernels::kSse2;
}
#endif

}  // namespace

HostIsa host_isa() noexcept {
  static const HostIsa cpu = detect_host_isa();
  return static_cast<HostIsa>(
      std::min(static_cast<int32_t>(cpu), g_isa_cap.load(std::memory_order_relaxed)));
}

HostIsa limit_host_isa(HostIsa cap) noexcept {
  return static_cast<HostIsa>(
      g_isa_cap.exchange(static_cast<int32_t>(cap), std::memory_order_relaxed));
}

namespace {

// Copies n bytes (any alignment) with non-temporal stores: the unaligned
// head and the tail below 16 bytes with plain stores.
void stream_copy(unsigned char* dst, const unsigned char* src, int64_t n) {
#if defined(__x86_64__)
  const int64_t head = (16 - static_cast<int64_t>(reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (n < head + 64) {
    std::memcpy(dst, src, static_cast<size_t>(n));
    return;
  }
  std::memcpy(dst, src, static_cast<size_t>(head));
  const int64_t body = (n - head) / 16 * 16;
  kernels().stream_rows({src + head, dst + head, 1, body, body, body});
  std::memcpy(dst + head + body, src + head + body, static_cast<size_t>(n - head - body));
#else
  std::memcpy(dst, src, static_cast<size_t>(n));
#endif
}

void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();  // order the streamed stores before the caller's later writes
#endif
}

constexpr int64_t kStreamMinBytes = int64_t{8} << 20;  // larger than last-level cache slices
constexpr int64_t kStreamMinRun = 512;

// Runs of this many bytes or fewer (and at least 16) are copied inline, in
// 16-byte moves, instead of calling memcpy once per run: for short runs
// the call and memcpy's size dispatch cost as much as the bytes (320-byte
// runs: ~1.6x in bench/layout_bench.py). Longer runs go to memcpy, whose
// wider vector moves won at 2 KiB runs (~20%); the 512-byte limit between
// the two is not measured finely.
constexpr int64_t kShortRunMax = 512;

// n >= 16 bytes: 64-byte blocks, then 16-byte moves, the last one ending at
// n (it may overlap the previous one).
inline void copy_short(unsigned char* dst, const unsigned char* src, int64_t n) {
#if defined(__SSE2__)
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  for (; i + 16 <= n; i += 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  if (i < n) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + n - 16),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + n - 16)));
  }
#else
  std::memcpy(dst, src, static_cast<size_t>(n));
#endif
}

// Rows of a source buffer this far ahead are prefetched in strided copies of
// short runs: the hardware prefetchers do not follow a stride across pages.
constexpr int64_t kPrefetchRuns = 8;

// Runs [first_run, last_run) of `bytes` bytes each (16 <= bytes <=
// kShortRunMax). Rank 2 (one strided dimension) is a plain loop; deeper
// ranks step the odometer of for_each_run.
void copy_short_runs(const CopyDesc& desc, int64_t elem_size, int64_t first_run, int64_t last_run,
                     const unsigned char* s, unsigned char* t, int64_t bytes) {
  if (desc.rank == 2) {
    int64_t so = 0;
    int64_t to = 0;
    run_offsets(desc, first_run, &so, &to);
    const int64_t ss = desc.src_stride[0] * elem_size;
    const int64_t ts = desc.dst_stride[0] * elem_size;
    const unsigned char* sp = s + so * elem_size;
    unsigned char* tp = t + to * elem_size;
    for (int64_t r = first_run; r < last_run; ++r, sp += ss, tp += ts) {
      if (r + kPrefetchRuns < last_run) {
        for (int64_t line = 0; line < bytes; line += 64)
          __builtin_prefetch(sp + kPrefetchRuns * ss + line);
      }
      copy_short(tp, sp, bytes);
    }
    return;
  }
  for_each_run(desc, first_run, last_run, [&](int64_t so, int64_t to, int64_t) {
    copy_short(t + to * elem_size, s + so * elem_size, bytes);
  });
}

// Runs that neither abut nor reach this length are not streamed: a
// non-temporal store of part of a line costs a partial write to memory.
constexpr int64_t kStreamMinLoneRun = 256;

// Whether the runs of copy d (rank >= 2) into t take non-temporal stores:
// runs of 64 bytes or more, every run 16-byte aligned and a multiple of 16
// bytes, abutting or at least kStreamMinLoneRun long.
#if defined(__x86_64__)
bool strided_streamable(const CopyDesc& d, int64_t elem, const unsigned char* t) {
  const int64_t run = copy_desc_run_length(d) * elem;
  if (run < 64 || run % 16 != 0 ||
      (reinterpret_cast<uintptr_t>(t) + d.dst_offset * elem) % 16 != 0) {
    return false;
  }
  for (int k = 0; k + 1 < d.rank; ++k) {
    if ((d.dst_stride[k] * elem) % 16 != 0) return false;
  }
  return d.dst_stride[d.rank - 2] * elem == run || run >= kStreamMinLoneRun;
}
#endif

// Streams runs [first_run, last_run) (non-empty) when the destination
// takes whole-line non-temporal stores: runs of 64 bytes or more, every
// run 16-byte aligned and a multiple of 16 bytes, abutting or at least
// kStreamMinLoneRun long. False, having written nothing, otherwise.
bool stream_runs(const CopyDesc& d, int64_t elem, int64_t first_run, int64_t last_run,
                 const unsigned char* s, unsigned char* t, bool fence) {
#if defined(__x86_64__)
  const int64_t run = copy_desc_run_length(d) * elem;
  if (run < 64) return false;
  if (d.rank == 1) {  // one contiguous run, any alignment
    stream_copy(t + d.dst_offset * elem, s + d.src_offset * elem, run);
    if (fence) stream_fence();
    return true;
  }
  if (!strided_streamable(d, elem, t)) return false;
  const int64_t ss = d.src_stride[d.rank - 2] * elem;
  const int64_t ts = d.dst_stride[d.rank - 2] * elem;
  const vector_kernels::Kernels& k = kernels();
  // Rows of the innermost strided dimension at a time, one kernel call each.
  const int64_t inner = d.extent[d.rank - 2];
  for (int64_t r = first_run; r < last_run;) {
    const int64_t n = std::min(inner - r % inner, last_run - r);
    int64_t so = 0;
    int64_t to = 0;
    run_offsets(d, r, &so, &to);
    k.stream_rows({s + so * elem, t + to * elem, n, run, ss, ts});
    r += n;
  }
  if (fence) stream_fence();
  return true;
#else
  (void)d, (void)elem, (void)first_run, (void)last_run, (void)s, (void)t, (void)fence;
  return false;
#endif
}

}  // namespace

void copy_box_runs(const CopyDesc& desc, int64_t elem_size, int64_t first_run, int64_t last_run,
                   const void* src, void* dst, bool streaming) {
  if (first_run >= last_run) return;
  const auto* s = static_cast<const unsigned char*>(src);
  auto* t = static_cast<unsigned char*>(dst);
  const int64_t run_bytes = copy_desc_run_length(desc) * elem_size;
  const bool large =
      (last_run - first_run) * run_bytes >= kStreamMinBytes && run_bytes >= kStreamMinRun;
  // Asked to stream, the caller fences (once for many copies); streaming
  // on its own account, this call does.
  if ((streaming || large) && stream_runs(desc, elem_size, first_run, last_run, s, t, !streaming)) {
    return;
  }
  if (large) {
    // Hardware prefetchers stop at page boundaries; start each next run's
    // source early so a strided read does not stall at every run.
    int64_t next = first_run;
    for_each_run(desc, first_run, last_run, [&](int64_t so, int64_t to, int64_t n) {
      if (++next < last_run) {
        int64_t ns = 0, nt = 0;
        run_offsets(desc, next, &ns, &nt);
        for (int64_t line = 0; line < std::min<int64_t>(run_bytes, 1024); line += 64)
          __builtin_prefetch(s + ns * elem_size + line);
      }
      stream_copy(t + to * elem_size, s + so * elem_size, n * elem_size);
    });
    stream_fence();
    return;
  }
  if (run_bytes >= 16 && run_bytes <= kShortRunMax && desc.rank >= 2) {
    copy_short_runs(desc, elem_size, first_run, last_run, s, t, run_bytes);
    return;
  }
  // Specialised widths let the compiler turn short runs into plain moves.
  auto run = [&](auto width) {
    constexpr int64_t w = decltype(width)::value;
    for_each_run(desc, first_run, last_run, [&](int64_t so, int64_t to, int64_t n) {
      std::memcpy(t + to * w, s + so * w, static_cast<size_t>(n * w));
    });
  };
  switch (elem_size) {
    case 1:
      return run(std::integral_constant<int64_t, 1>{});
    case 2:
      return run(std::integral_constant<int64_t, 2>{});
    case 4:
      return run(std::integral_constant<int64_t, 4>{});
    case 8:
      return run(std::integral_constant<int64_t, 8>{});
    default:
      for_each_run(desc, first_run, last_run, [&](int64_t so, int64_t to, int64_t n) {
        std::memcpy(t + to * elem_size, s + so * elem_size, static_cast<size_t>(n * elem_size));
      });
  }
}

bool copy_descs_interleavable(const CopyDesc& a, const CopyDesc& b) noexcept {
  if (a.rank != b.rank || a.rank < 2) return false;
  for (int k = 0; k + 1 < a.rank; ++k) {
    if (a.extent[k] != b.extent[k]) return false;
  }
  return true;
}

void copy_boxes_interleaved(const CopyDesc* descs, int n, int64_t elem_size,
                            const void* const* srcs, void* const* dsts, int64_t first_run,
                            int64_t last_run, bool streaming) {
  if (n < 1 || n > kMaxInterleavedCopies) {
    fail(ErrorCode::kInternal, "copy_boxes_interleaved: " + std::to_string(n) + " copies (1 to " +
                                   std::to_string(kMaxInterleavedCopies) + ")");
  }
  if (first_run >= last_run) return;
  const CopyDesc& d0 = descs[0];
  for (int c = 1; c < n; ++c) {
    if (!copy_descs_interleavable(d0, descs[c])) {
      fail(ErrorCode::kInternal, "copy_boxes_interleaved: copies of different shapes");
    }
  }
#if defined(__x86_64__)
  int64_t bytes = 0;
  for (int c = 0; c < n; ++c) bytes += copy_desc_run_length(descs[c]) * elem_size;
  const bool stream = streaming || (last_run - first_run) * bytes >= kStreamMinBytes;
  static_assert(kMaxInterleavedCopies <= vector_kernels::kMaxGroupCopies);
  vector_kernels::GroupCopy g[kMaxInterleavedCopies];
  bool streamed = false;
  for (int c = 0; c < n; ++c) {
    const CopyDesc& d = descs[c];
    const auto* t = static_cast<unsigned char*>(dsts[c]);
    g[c].bytes = copy_desc_run_length(d) * elem_size;
    g[c].src_step = d.src_stride[d.rank - 2] * elem_size;
    g[c].dst_step = d.dst_stride[d.rank - 2] * elem_size;
    using vector_kernels::Store;
    g[c].store = Store::kPlain;
    if (stream && strided_streamable(d, elem_size, t)) {
      g[c].store = Store::kStream;
    } else if (stream && g[c].dst_step == g[c].bytes && g[c].bytes >= 64) {
      // Abutting runs that are not whole 16-byte units (or not aligned):
      // lines assembled across rows, so that none is read before it is
      // written (uneven splits: 516-byte runs 0.70 of memcpy with plain
      // stores, 0.88 so). Whole lines per run do not need it, and runs of
      // 16-byte units took the streamed stores faster (720-byte runs:
      // 0.85-0.9 against 0.7-0.8 assembled).
      g[c].store = Store::kStreamJoined;
    }
    streamed = streamed || g[c].store != Store::kPlain;
  }
  const vector_kernels::Kernels& k = kernels();
  // Rows of the innermost strided dimension at a time, one kernel call each.
  const int64_t inner = d0.extent[d0.rank - 2];
  for (int64_t r = first_run; r < last_run;) {
    const int64_t rows = std::min(inner - r % inner, last_run - r);
    for (int c = 0; c < n; ++c) {
      int64_t so = 0;
      int64_t to = 0;
      run_offsets(descs[c], r, &so, &to);
      g[c].src = static_cast<const unsigned char*>(srcs[c]) + so * elem_size;
      g[c].dst = static_cast<unsigned char*>(dsts[c]) + to * elem_size;
    }
    k.copy_group_rows({g, n, rows});
    r += rows;
  }
  if (streamed && !streaming) stream_fence();
#else
  (void)streaming;
  for (int64_t r = first_run; r < last_run; ++r) {
    for (int c = 0; c < n; ++c) {
      copy_box_runs(descs[c], elem_size, r, r + 1, srcs[c], dsts[c], false);
    }
  }
#endif
}

void copy_bytes(void* dst, const void* src, int64_t bytes, bool streaming) {
  if (bytes <= 0) return;
  if (!streaming) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return;
  }
  stream_copy(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), bytes);
}

void fence_streamed_stores() noexcept { stream_fence(); }

void copy_box(const CopyDesc& desc, int64_t elem_size, const void* src, void* dst, bool streaming) {
  copy_box_runs(desc, elem_size, 0, copy_desc_runs(desc), src, dst, streaming);
}

void fill_identity(DType dtype, ReduceOp op, void* acc, int64_t n) {
  dispatch_dtype(dtype, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    dispatch_op(op, [&](auto o) {
      constexpr ReduceOp Op = decltype(o)::value;
      auto* a = static_cast<typename AccTraits<D>::Acc*>(acc);
      const auto id = reduce_identity<D, Op>();
      for (int64_t i = 0; i < n; ++i) a[i] = id;
    });
  });
}

void load_into_acc(const CopyDesc& desc, DType dtype, const void* src, void* acc) {
  dispatch_dtype(dtype, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    const auto* s = static_cast<const typename AccTraits<D>::Elem*>(src);
    auto* a = static_cast<typename AccTraits<D>::Acc*>(acc);
    for_each_run(desc, [&](int64_t so, int64_t ao, int64_t n) { load_run<D>(s + so, a + ao, n); });
  });
}

void reduce_into(const CopyDesc& desc, DType dtype, ReduceOp op, const void* src, void* acc) {
  dispatch_dtype(dtype, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    dispatch_op(op, [&](auto o) {
      constexpr ReduceOp Op = decltype(o)::value;
      const auto* s = static_cast<const typename AccTraits<D>::Elem*>(src);
      auto* a = static_cast<typename AccTraits<D>::Acc*>(acc);
      for_each_run(
          desc, [&](int64_t so, int64_t ao, int64_t n) { reduce_run<D, Op>(s + so, a + ao, n); });
    });
  });
}

bool sum_streams(DType dtype, const void* const* srcs, int k, void* dst, int64_t n,
                 bool streaming) {
  if ((dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) || k < 1 || k > 64) {
    return false;
  }
  dispatch_dtype(dtype, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    if constexpr (D == DType::kF32 || D == DType::kBF16 || D == DType::kF16) {
      using Elem = typename AccTraits<D>::Elem;
      const Elem* s[64];
      for (int j = 0; j < k; ++j) s[j] = static_cast<const Elem*>(srcs[j]);
      auto* out = static_cast<Elem*>(dst);
      int64_t done = 0;
#if defined(__x86_64__)
      // Whole vector blocks in one pass over the k streams (each read
      // once, prefetched), the rest below.
      if constexpr (D == DType::kF32) {
        done = kernels().sum_f32(s, k, out, n, streaming);
      } else if constexpr (D == DType::kBF16) {
        done = kernels().sum_bf16(s, k, out, n, streaming);
      } else {
        done = kernels().sum_f16(s, k, out, n, streaming);
      }
#endif
      for (int64_t i = done; i < n; ++i) {
        float a = 0;
        for (int j = 0; j < k; ++j) a = a + AccTraits<D>::load(s[j][i]);
        out[i] = AccTraits<D>::store(a);
      }
    }
  });
  return true;
}

void store_from_acc(DType dtype, const void* acc, void* dst, int64_t n) {
  dispatch_dtype(dtype, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    store_run<D>(static_cast<const typename AccTraits<D>::Acc*>(acc),
                 static_cast<typename AccTraits<D>::Elem*>(dst), n);
  });
}

void store_mean_from_acc(DType dtype, const void* acc, void* dst, int64_t n, int32_t divisor) {
  if (divisor < 1)
    fail(ErrorCode::kInvalidArgument, "divisor: " + std::to_string(divisor) + " is below 1");
  dispatch_dtype(dtype, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    if constexpr (AccTraits<D>::kFloat) {
      store_mean_run<D>(static_cast<const typename AccTraits<D>::Acc*>(acc),
                        static_cast<typename AccTraits<D>::Elem*>(dst), n, divisor);
    } else {
      fail(ErrorCode::kInvalidArgument,
           "dtype: mean needs a floating-point dtype, not " + std::string(dtype_name(dtype)));
    }
  });
}

}  // namespace reshard
