// Host entry points of the box copy core: dispatch on dtype and op, then run
// the RESHARD_HD loops from box_copy.h.
#include "reshard/box_copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstring>
#include <string>
#include <type_traits>

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

// Copies with non-temporal stores: large strided copies otherwise pay a
// read-for-ownership of every destination line, which costs a third of the
// bandwidth next to memcpy (glibc streams large contiguous copies itself).
void stream_copy(unsigned char* dst, const unsigned char* src, size_t n) {
#if defined(__SSE2__)
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (n < head + 64) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
#else
  std::memcpy(dst, src, n);
#endif
}

constexpr int64_t kStreamMinBytes = int64_t{8} << 20;  // larger than last-level cache slices
constexpr int64_t kStreamMinRun = 512;

}  // namespace

void copy_box_runs(const CopyDesc& desc, int64_t elem_size, int64_t first_run, int64_t last_run,
                   const void* src, void* dst) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* t = static_cast<unsigned char*>(dst);
  const int64_t run_bytes = copy_desc_run_length(desc) * elem_size;
  if ((last_run - first_run) * run_bytes >= kStreamMinBytes && run_bytes >= kStreamMinRun) {
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
      stream_copy(t + to * elem_size, s + so * elem_size, static_cast<size_t>(n * elem_size));
    });
#if defined(__SSE2__)
    _mm_sfence();  // order the streamed stores before the caller's later writes
#endif
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

void copy_box(const CopyDesc& desc, int64_t elem_size, const void* src, void* dst) {
  copy_box_runs(desc, elem_size, 0, copy_desc_runs(desc), src, dst);
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
