// Element types: sizes, names and parsing, straight from reshard/dtype.h.
#include "reshard/dtype.h"

#include <string>

#include "internal.h"

using reshard::DType;
using reshard::capi::guard;
using reshard::capi::require;

// The C constants are the C++ values (one list, two spellings).
static_assert(RESHARD_DTYPE_F64 == static_cast<int32_t>(DType::kF64));
static_assert(RESHARD_DTYPE_F32 == static_cast<int32_t>(DType::kF32));
static_assert(RESHARD_DTYPE_F16 == static_cast<int32_t>(DType::kF16));
static_assert(RESHARD_DTYPE_BF16 == static_cast<int32_t>(DType::kBF16));
static_assert(RESHARD_DTYPE_F8E4M3 == static_cast<int32_t>(DType::kF8E4M3));
static_assert(RESHARD_DTYPE_F8E5M2 == static_cast<int32_t>(DType::kF8E5M2));
static_assert(RESHARD_DTYPE_I64 == static_cast<int32_t>(DType::kI64));
static_assert(RESHARD_DTYPE_I32 == static_cast<int32_t>(DType::kI32));
static_assert(RESHARD_DTYPE_I16 == static_cast<int32_t>(DType::kI16));
static_assert(RESHARD_DTYPE_I8 == static_cast<int32_t>(DType::kI8));
static_assert(RESHARD_DTYPE_U64 == static_cast<int32_t>(DType::kU64));
static_assert(RESHARD_DTYPE_U32 == static_cast<int32_t>(DType::kU32));
static_assert(RESHARD_DTYPE_U16 == static_cast<int32_t>(DType::kU16));
static_assert(RESHARD_DTYPE_U8 == static_cast<int32_t>(DType::kU8));
static_assert(RESHARD_DTYPE_BOOL == static_cast<int32_t>(DType::kBool));
static_assert(RESHARD_DTYPE_E8M0 == static_cast<int32_t>(DType::kE8M0));
static_assert(RESHARD_DTYPE_E8M0 == reshard::kMaxDTypeValue,
              "a dtype was added to the C++ enum: add its RESHARD_DTYPE_ constant");

extern "C" {

size_t reshard_dtype_size(reshard_dtype_t dtype) {
  if (!reshard::dtype_valid(dtype)) return 0;
  return static_cast<size_t>(reshard::dtype_size(static_cast<DType>(dtype)));
}

const char* reshard_dtype_name(reshard_dtype_t dtype) {
  if (!reshard::dtype_valid(dtype)) return nullptr;
  // Names are string literals, hence NUL-terminated.
  return reshard::dtype_name(static_cast<DType>(dtype)).data();
}

reshard_error_t* reshard_dtype_from_name(const char* name, reshard_dtype_t* out_dtype) {
  return guard([&] {
    require(name, "name");
    require(out_dtype, "out_dtype");
    const DType dtype = reshard::parse_dtype(name, "name");
    *out_dtype = static_cast<reshard_dtype_t>(dtype);
  });
}

}  // extern "C"
