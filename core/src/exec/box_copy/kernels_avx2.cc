// vector_kernels.h for AVX2 with F16C (compiled with -mavx2 -mf16c, run
// only where host_isa() says so): 8 f32 lanes, 32-byte non-temporal stores.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace {

struct V {
  using F = __m256;
  static constexpr int kLanes = 8;
  static constexpr bool kHasF16 = true;
  static F zero() { return _mm256_setzero_ps(); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F load_f32(const float* p) { return _mm256_loadu_ps(p); }
  static F load_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static void store_f32(float* p, F a) { _mm256_storeu_ps(p, a); }
  static void store_bf16(uint16_t* p, F a) {
    const __m256i u = _mm256_castps_si256(a);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i even =
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                         _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
    const __m256i r =
        _mm256_blendv_epi8(even, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
    // The upper halves, sign-extended, pack exactly; packs works per
    // 128-bit lane, so the two lanes' halves are then brought together.
    const __m256i h = _mm256_packs_epi32(_mm256_srai_epi32(r, 16), _mm256_setzero_si256());
    const __m256i ordered = _mm256_permute4x64_epi64(h, 0x08);  // qwords 0, 2
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(ordered));
  }
  static F load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_f16(uint16_t* p, F a) {
    __m128i h = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // NaN: the quiet NaN of its sign, whatever the payload.
    const __m128i nan = _mm_packs_epi32(
        _mm256_castsi256_si128(_mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q))),
        _mm256_extracti128_si256(_mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)), 1));
    const __m128i canonical =
        _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(-32768)), _mm_set1_epi16(0x7e00));
    h = _mm_blendv_epi8(h, canonical, nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
  static void copy_line(unsigned char* dst, const unsigned char* src) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32)));
  }
  static void stream_line(unsigned char* dst, const unsigned char* src) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32)));
  }
};

}  // namespace

#include "exec/box_copy/kernels_body.h"

namespace reshard::vector_kernels {
const Kernels kAvx2 = {&stream_rows, &copy_group_rows, &sum_f32, &sum_bf16, &sum_f16};
}  // namespace reshard::vector_kernels
#endif
