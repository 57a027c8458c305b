#include "reshard/dtype.h"

#include <algorithm>
#include <cctype>

#include "reshard/error.h"

namespace reshard {
namespace {
struct DTypeInfo {
  DType dtype;
  int64_t size;
  std::string_view name;
  std::string_view alias;
  bool is_float;
};
constexpr DTypeInfo kInfo[] = {
    {DType::kF64, 8, "f64", "float64", true},
    {DType::kF32, 4, "f32", "float32", true},
    {DType::kF16, 2, "f16", "float16", true},
    {DType::kBF16, 2, "bf16", "bfloat16", true},
    {DType::kF8E4M3, 1, "f8e4m3", "float8_e4m3fn", true},
    {DType::kF8E5M2, 1, "f8e5m2", "float8_e5m2", true},
    {DType::kI64, 8, "i64", "int64", false},
    {DType::kI32, 4, "i32", "int32", false},
    {DType::kI16, 2, "i16", "int16", false},
    {DType::kI8, 1, "i8", "int8", false},
    {DType::kU64, 8, "u64", "uint64", false},
    {DType::kU32, 4, "u32", "uint32", false},
    {DType::kU16, 2, "u16", "uint16", false},
    {DType::kU8, 1, "u8", "uint8", false},
    {DType::kBool, 1, "bool", "bool_", false},
    {DType::kE8M0, 1, "e8m0", "float8_e8m0fnu", false},
};
const DTypeInfo* find(DType d) {
  for (const auto& i : kInfo)
    if (i.dtype == d) return &i;
  return nullptr;
}
}  // namespace

bool dtype_valid(int32_t value) noexcept { return value >= 1 && value <= kMaxDTypeValue; }
int64_t dtype_size(DType dtype) noexcept {
  const auto* i = find(dtype);
  return i ? i->size : 0;
}
std::string_view dtype_name(DType dtype) noexcept {
  const auto* i = find(dtype);
  return i ? i->name : std::string_view("invalid");
}
bool dtype_is_float(DType dtype) noexcept {
  const auto* i = find(dtype);
  return i && i->is_float;
}
DType parse_dtype(std::string_view name, const std::string& field) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& i : kInfo)
    if (i.dtype != DType::kE8M0 && (lower == i.name || lower == i.alias)) return i.dtype;
  std::string known;
  for (const auto& i : kInfo) {
    if (i.dtype == DType::kE8M0) continue;
    if (!known.empty()) known.push_back(' ');
    known.append(i.name);
  }
  fail(ErrorCode::kInvalidArgument, field,
       "unknown dtype \"" + std::string(name) + "\" (expected one of: " + known + ")");
}

}  // namespace reshard
