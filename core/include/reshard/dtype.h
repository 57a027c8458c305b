// reshard — element types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace reshard {

// Stable numeric values shared with the C ABI and the plan format.
enum class DType : int32_t {
  kF64 = 1,
  kF32 = 2,
  kF16 = 3,
  kBF16 = 4,
  kF8E4M3 = 5,  // OCP e4m3fn: no infinities, max 448
  kF8E5M2 = 6,
  kI64 = 7,
  kI32 = 8,
  kI16 = 9,
  kI8 = 10,
  kU64 = 11,
  kU32 = 12,
  kU16 = 13,
  kU8 = 14,
  kBool = 15,
  // OCP MX E8M0: an unsigned power-of-two exponent, 2^(bits - 127), 255 =
  // NaN. Only the dtype of MXFP8 block scales (reshard/block_scales.h): no
  // tensor of a spec has it, nothing casts to or from it, nothing sums it.
  kE8M0 = 16,
};

inline constexpr int32_t kMaxDTypeValue = 16;

bool dtype_valid(int32_t value) noexcept;
// Bytes per element; 0 for an invalid value.
int64_t dtype_size(DType dtype) noexcept;
// Lower-case short name: "f32", "bf16", "f8e4m3", "bool", ...
std::string_view dtype_name(DType dtype) noexcept;
// Parses a name as printed by dtype_name (also accepts "float32", "bfloat16",
// "float16", "int8", ...), e8m0 excepted (a tensor never has it; spec.cc
// parses it where block scales take it). Throws Error(kInvalidArgument)
// naming `field`.
DType parse_dtype(std::string_view name, const std::string& field);
bool dtype_is_float(DType dtype) noexcept;

}  // namespace reshard
