// Internal: the host copy and reduction loops that need vector instructions
// beyond the x86-64 baseline, compiled once per instruction set
// (kernels_sse2.cc, kernels_avx2.cc, kernels_avx512.cc, each with its own
// compiler flags, from the one body in kernels_body.h) and chosen at run
// time from the CPU (host_isa(), reshard/box_copy.h), so that one binary
// runs on any x86-64 machine and uses AVX2 or AVX-512 where present.
//
// This header declares only plain data and function pointers: the
// per-instruction-set files must not instantiate inline functions of other
// headers, whose one out-of-line copy the linker would pick from any of them.
#pragma once

#include <cstdint>

namespace reshard::vector_kernels {

// `rows` runs of `bytes` bytes: run r copies src + r * src_step to
// dst + r * dst_step.
struct Rows {
  const unsigned char* src;
  unsigned char* dst;
  int64_t rows;
  int64_t bytes;
  int64_t src_step;
  int64_t dst_step;
};

// How a copy of GroupRows stores.
enum class Store : uint8_t {
  kPlain,
  // Non-temporal: bytes and dst_step multiples of 16, dst 16-byte aligned.
  kStream,
  // Rows that abut in the destination (dst_step == bytes >= 64), any
  // alignment: whole destination lines non-temporal, a line that spans two
  // rows assembled in registers from both (its loads reach up to 63 bytes
  // past a row's end and before the next row's start, src_step >= bytes:
  // bytes of the source buffer between the rows, which must not be written
  // meanwhile); the bytes before the first whole line and after the last
  // one plain.
  kStreamJoined,
};

// Most copies in one GroupRows.
inline constexpr int kMaxGroupCopies = 64;

// One of the copies of GroupRows: `bytes` per row, row i from
// src + i * src_step to dst + i * dst_step.
struct GroupCopy {
  const unsigned char* src;
  unsigned char* dst;
  int64_t bytes;
  int64_t src_step;
  int64_t dst_step;
  Store store;
};

// `rows` rows of `n` (<= kMaxGroupCopies) copies, interleaved: row i of
// every copy, in order, before row i + 1.
struct GroupRows {
  const GroupCopy* copies;
  int n;
  int64_t rows;
};

struct Kernels {
  // Copies `r` with non-temporal stores, prefetching the source runs ahead
  // when they are not contiguous. Preconditions: bytes and dst_step
  // multiples of 16, dst 16-byte aligned. The stores are weakly ordered:
  // the caller fences (_mm_sfence) before anyone else reads the bytes.
  void (*stream_rows)(const Rows& r);
  // Copies `g`; the streamed copies' stores are fenced by the caller.
  void (*copy_group_rows)(const GroupRows& g);
  // out[i] = ((0 + s[0][i]) + s[1][i]) + ... in f32 (bf16: loaded exactly,
  // the sum rounded once to nearest even, NaN kept NaN), for the first
  // elements of [0, n) in whole vector blocks; returns how many it wrote
  // (the caller finishes the rest). With `stream`, non-temporal stores when
  // out is 16-byte aligned (the caller fences).
  int64_t (*sum_f32)(const float* const* s, int k, float* out, int64_t n, bool stream);
  int64_t (*sum_bf16)(const uint16_t* const* s, int k, uint16_t* out, int64_t n, bool stream);
  // f16 (F16C conversions, NaN stored as the canonical quiet NaN of its
  // sign, as numeric::f32_to_f16 does); the baseline writes none.
  int64_t (*sum_f16)(const uint16_t* const* s, int k, uint16_t* out, int64_t n, bool stream);
};

#if defined(__x86_64__)
extern const Kernels kSse2;
extern const Kernels kAvx2;
extern const Kernels kAvx512;
#endif

}  // namespace reshard::vector_kernels
