// vector_kernels.h for AVX-512F (compiled with -mavx512f, run only where
// host_isa() says so): 16 f32 lanes, whole-line non-temporal stores.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace {

struct V {
  using F = __m512;
  static constexpr int kLanes = 16;
  static constexpr bool kHasF16 = true;
  static F zero() { return _mm512_setzero_ps(); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F load_f32(const float* p) { return _mm512_loadu_ps(p); }
  static F load_bf16(const uint16_t* p) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static void store_f32(float* p, F a) { _mm512_storeu_ps(p, a); }
  static void store_bf16(uint16_t* p, F a) {
    const __m512i u = _mm512_castps_si512(a);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i even =
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                         _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
    const __m512i r =
        _mm512_mask_blend_epi32(nan, even, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
  static F load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store_f16(uint16_t* p, F a) {
    const __m256i h = _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // NaN: the quiet NaN of its sign, whatever the payload.
    const __mmask16 nan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    const __m512i wide = _mm512_cvtepu16_epi32(h);
    const __m512i canonical = _mm512_or_si512(_mm512_and_si512(wide, _mm512_set1_epi32(0x8000)),
                                              _mm512_set1_epi32(0x7e00));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, wide, canonical)));
  }
  static void copy_line(unsigned char* dst, const unsigned char* src) {
    _mm512_storeu_si512(dst, _mm512_loadu_si512(src));
  }
  static void stream_line(unsigned char* dst, const unsigned char* src) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), _mm512_loadu_si512(src));
  }
};

}  // namespace

#include "exec/box_copy/kernels_body.h"

namespace reshard::vector_kernels {
const Kernels kAvx512 = {&stream_rows, &copy_group_rows, &sum_f32, &sum_bf16, &sum_f16};
}  // namespace reshard::vector_kernels
#endif
