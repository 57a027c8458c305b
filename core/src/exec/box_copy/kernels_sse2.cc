// vector_kernels.h for the x86-64 baseline (SSE2): 4 f32 lanes, 16-byte
// non-temporal stores.
#if defined(__x86_64__)
#include <emmintrin.h>

#include <cstdint>

namespace {

struct V {
  using F = __m128;
  static constexpr int kLanes = 4;
  static constexpr bool kHasF16 = false;
  static F zero() { return _mm_setzero_ps(); }
  static F add(F a, F b) { return _mm_add_ps(a, b); }
  static F load_f32(const float* p) { return _mm_loadu_ps(p); }
  static F load_bf16(const uint16_t* p) {
    // The upper halves of f32s: 4 bf16s widened with zeros below.
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), v));
  }
  static void store_f32(float* p, F a) { _mm_storeu_ps(p, a); }
  static void store_bf16(uint16_t* p, F a) {
    const __m128i u = _mm_castps_si128(a);
    const __m128i nan =
        _mm_cmpgt_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7fffffff)), _mm_set1_epi32(0x7f800000));
    const __m128i even = _mm_add_epi32(_mm_add_epi32(u, _mm_set1_epi32(0x7fff)),
                                       _mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1)));
    const __m128i r = _mm_or_si128(_mm_and_si128(nan, _mm_or_si128(u, _mm_set1_epi32(0x400000))),
                                   _mm_andnot_si128(nan, even));
    // The upper halves, sign-extended, pack exactly.
    const __m128i h = _mm_packs_epi32(_mm_srai_epi32(r, 16), _mm_setzero_si128());
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), h);
  }
  static void copy_line(unsigned char* dst, const unsigned char* src) {
    for (int i = 0; i < 64; i += 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    }
  }
  static void stream_line(unsigned char* dst, const unsigned char* src) {
    for (int i = 0; i < 64; i += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    }
  }
};

}  // namespace

#include "exec/box_copy/kernels_body.h"

namespace reshard::vector_kernels {
const Kernels kSse2 = {&stream_rows, &copy_group_rows, &sum_f32, &sum_bf16, &sum_f16};
}  // namespace reshard::vector_kernels
#endif
