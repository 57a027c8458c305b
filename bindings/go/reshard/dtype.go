package reshard

/*
#include <stdlib.h>
#include "reshard/reshard.h"
*/
import "C"

import "strconv"

// DType is the element type of a tensor (reshard_dtype_t).
type DType int32

// The element types of reshard.h.
const (
	F64    DType = C.RESHARD_DTYPE_F64
	F32    DType = C.RESHARD_DTYPE_F32
	F16    DType = C.RESHARD_DTYPE_F16
	BF16   DType = C.RESHARD_DTYPE_BF16
	F8E4M3 DType = C.RESHARD_DTYPE_F8E4M3 // OCP e4m3fn
	F8E5M2 DType = C.RESHARD_DTYPE_F8E5M2
	I64    DType = C.RESHARD_DTYPE_I64
	I32    DType = C.RESHARD_DTYPE_I32
	I16    DType = C.RESHARD_DTYPE_I16
	I8     DType = C.RESHARD_DTYPE_I8
	U64    DType = C.RESHARD_DTYPE_U64
	U32    DType = C.RESHARD_DTYPE_U32
	U16    DType = C.RESHARD_DTYPE_U16
	U8     DType = C.RESHARD_DTYPE_U8
	Bool   DType = C.RESHARD_DTYPE_BOOL
	// E8M0 is OCP MX's power-of-two scale (ABI 1.13): only the dtype of a
	// scale tensor with MXFP8 block scales.
	E8M0 DType = C.RESHARD_DTYPE_E8M0
)

// Size is the number of bytes per element (0 for an unknown value).
func (d DType) Size() int {
	return int(C.reshard_dtype_size(C.reshard_dtype_t(d)))
}

// String is the library's name ("f32", "bf16", ...), or "dtype(N)".
func (d DType) String() string {
	n := C.reshard_dtype_name(C.reshard_dtype_t(d))
	if n == nil {
		return "dtype(" + strconv.Itoa(int(d)) + ")"
	}
	return C.GoString(n)
}

// ParseDType parses a dtype name as the library does ("f32", "float32",
// "bfloat16", "int8", ...).
func ParseDType(name string) (DType, error) {
	var a cArena
	defer a.free()
	cs, err := a.cstring(name, "name")
	if err != nil {
		return 0, err
	}
	var d C.reshard_dtype_t
	if err := check(C.reshard_dtype_from_name(cs, &d)); err != nil {
		return 0, err
	}
	return DType(d), nil
}

// ReduceOp says how the summands of a partial layout combine.
type ReduceOp int32

// The reduce operations of reshard.h.
const (
	Sum ReduceOp = C.RESHARD_REDUCE_SUM
	Max ReduceOp = C.RESHARD_REDUCE_MAX
	Min ReduceOp = C.RESHARD_REDUCE_MIN
	// Mean is the sum over the number of summands (since C ABI 1.4):
	// floating-point source layouts only.
	Mean ReduceOp = C.RESHARD_REDUCE_MEAN
)

// String is "sum", "max", "min", "mean" or "reduce_op(N)".
func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Max:
		return "max"
	case Min:
		return "min"
	case Mean:
		return "mean"
	}
	return "reduce_op(" + strconv.Itoa(int(o)) + ")"
}
