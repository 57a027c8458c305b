// The arithmetic of block scales (reshard/quantise_grid.h) compiled by nvcc
// for the device against the same functions compiled for the host (what the
// host quantiser runs): every bf16 and f16 pattern and 2^22 f32 patterns,
// each quantised with f32 scales (1, 3, the least normal, a scale that puts
// results among the fp8 subnormals, a huge one) and E8M0 scale bytes (0,
// 100, 127, 134, 200, 255), into f8e4m3 and f8e5m2, plus the f32 scale and
// the E8M0 bits of each value taken as a block's amax. Byte for byte: this
// is what shows that the device's f32 division rounds to nearest even,
// keeps subnormals (no flush to zero) and converts floats to integers as
// the host does (docs/gpu.md, "Block scales").
//
// Exit status: 0 when every byte matches, 1 on a mismatch or a CUDA error,
// 77 (skipped) without a GPU.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "reshard/quantise_grid.h"

namespace {

using reshard::DType;
namespace qg = reshard::quantise_grid;

constexpr int kScales = 5;
constexpr int kMxBits = 6;
// Bytes written per input value and destination dtype: the f32-scale
// quantisations, the MX ones, the f32 scale (4 bytes), the E8M0 bits.
constexpr int kPerTo = kScales + kMxBits + 4 + 1;
constexpr int kPerValue = 2 * kPerTo;

__host__ __device__ inline float scale_k(int k) {
  switch (k) {
    case 0:
      return 1.0f;
    case 1:
      return 3.0f;
    case 2:
      return reshard::numeric::f32_from_bits(0x00800000u);  // 2^-126
    case 3:
      return 0x1p20f;  // results among the fp8 subnormals
    default:
      return 0x1p120f;
  }
}

__host__ __device__ inline uint8_t mx_k(int k) {
  const uint8_t bits[kMxBits] = {0, 100, 127, 134, 200, 255};
  return bits[k];
}

// The source pattern of value i: every pattern of a 16-bit dtype, or a
// hash of i for f32 (spread over every exponent).
template <DType From>
__host__ __device__ inline typename qg::Source<From>::T pattern(uint32_t i) {
  if constexpr (From == DType::kF32) {
    uint32_t h = i * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return h;
  } else {
    return static_cast<uint16_t>(i);
  }
}

template <DType From, DType To>
__host__ __device__ inline void one_to(typename qg::Source<From>::T x, uint8_t* out) {
  for (int k = 0; k < kScales; ++k) out[k] = qg::quantise_f32<From, To>(x, scale_k(k));
  for (int k = 0; k < kMxBits; ++k) out[kScales + k] = qg::quantise_mx<From, To>(x, mx_k(k));
  const auto a = qg::amax_bits<From, false>(x);
  const float s = qg::f32_scale<To>(qg::Source<From>::to_f32(a));
  const uint32_t sb = reshard::numeric::f32_bits(s);
  for (int b = 0; b < 4; ++b) out[kScales + kMxBits + b] = static_cast<uint8_t>(sb >> (8 * b));
  out[kScales + kMxBits + 4] = qg::mx_bits<From, To>(qg::amax_bits<From, true>(x));
}

template <DType From>
__host__ __device__ inline void one(uint32_t i, uint8_t* out) {
  const auto x = pattern<From>(i);
  one_to<From, DType::kF8E4M3>(x, out);
  one_to<From, DType::kF8E5M2>(x, out + kPerTo);
}

template <DType From>
__global__ void all_kernel(uint32_t n, uint8_t* out) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    one<From>(i, out + static_cast<size_t>(i) * kPerValue);
}

// Runs `n` values of `From` on both sides; returns the mismatched bytes,
// or -1 on a CUDA error.
template <DType From>
long long check(const char* name, uint32_t n) {
  const size_t bytes = static_cast<size_t>(n) * kPerValue;
  std::vector<uint8_t> host(bytes), device(bytes);
  for (uint32_t i = 0; i < n; ++i) one<From>(i, host.data() + static_cast<size_t>(i) * kPerValue);
  uint8_t* d = nullptr;
  if (cudaMalloc(&d, bytes) != cudaSuccess) return -1;
  all_kernel<From><<<1024, 256>>>(n, d);
  const bool ok = cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
                  cudaMemcpy(device.data(), d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(d);
  if (!ok) return -1;
  long long wrong = 0;
  for (size_t b = 0; b < bytes; ++b) {
    if (host[b] == device[b]) continue;
    if (wrong < 5) {
      std::printf("%s: value %zu, byte %zu: host 0x%02x, device 0x%02x\n", name, b / kPerValue,
                  b % kPerValue, host[b], device[b]);
    }
    ++wrong;
  }
  std::printf("%s: %u values, %zu bytes, %lld differ\n", name, n, bytes, wrong);
  return wrong;
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  const long long a = check<DType::kBF16>("bf16", 1u << 16);
  const long long b = check<DType::kF16>("f16", 1u << 16);
  const long long c = check<DType::kF32>("f32", 1u << 22);
  if (a < 0 || b < 0 || c < 0) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  return a + b + c == 0 ? 0 : 1;
}
