// Package reshard plans and executes the resharding of tensors between
// device meshes, over the stable C ABI of libreshard (reshard/reshard.h).
//
// A reshard moves every tensor from a source Layout (a Sharding on a
// training Mesh, say) to a destination layout (an inference mesh).
// PlanInput collects the tensors, a Topology and PlanOptions; Plan is the
// deterministic result with statistics and a fingerprint; Executor runs it
// on host buffers. Plans travel as FlatBuffers bytes (Plan.Bytes,
// PlanFromBytes) that every language reads; ViewPlan reads them in place
// through the code flatc generated from schema/plan.fbs (package fb), after
// the C verifier has accepted them.
//
// # Resources
//
// Every handle owns a C object: call Close when done (it is idempotent). A
// finalizer closes handles that become unreachable, but only as a backstop:
// C memory is invisible to the Go garbage collector, so relying on it lets
// memory pile up. Close must not run concurrently with other methods of the
// same handle. Handles closed or never created report an *Error.
//
// # Errors
//
// Every fallible call returns an error whose dynamic type is *Error, with
// the library's Code and a Message that starts with the argument or field at
// fault ("mesh.axis_names[1]: duplicate axis name"). Use errors.As.
//
// # Concurrency
//
// As reshard.h documents: Mesh, Layout, Plan and Executor are immutable and
// safe for concurrent use; Topology and PlanInput are builders that must not
// be modified while another goroutine uses them.
//
// # cgo
//
// No Go pointer is ever retained by C. Go memory is passed only for the
// duration of a call and only when it holds no Go pointers (strings are
// copied with C.CString and freed; pointer-holding argument structs live in
// C memory). Execute copies shard buffers through C memory; ExecuteHost
// runs on HostBuffers that live in C memory and are not copied.
package reshard

/*
#include <stdlib.h>
#include "reshard/reshard.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Version is the library's release version (e.g. "0.1.0").
func Version() string {
	return C.GoString(C.reshard_version())
}

// ErrorCode says what kind of failure an Error is (reshard_error_code_t).
type ErrorCode int32

// The error codes of reshard.h.
const (
	InvalidArgument ErrorCode = C.RESHARD_ERROR_INVALID_ARGUMENT // a value is malformed
	OutOfRange      ErrorCode = C.RESHARD_ERROR_OUT_OF_RANGE     // an index or size is out of range
	Overflow        ErrorCode = C.RESHARD_ERROR_OVERFLOW         // an element or byte count overflows
	Mismatch        ErrorCode = C.RESHARD_ERROR_MISMATCH         // two inputs disagree
	Parse           ErrorCode = C.RESHARD_ERROR_PARSE            // spec text is not valid JSON / schema
	Corrupt         ErrorCode = C.RESHARD_ERROR_CORRUPT          // plan bytes fail verification
	Unsupported     ErrorCode = C.RESHARD_ERROR_UNSUPPORTED      // not available in this build
	Timeout         ErrorCode = C.RESHARD_ERROR_TIMEOUT          // a wait ran past its deadline
	Transport       ErrorCode = C.RESHARD_ERROR_TRANSPORT        // MPI / NCCL / CUDA reported an error
	OutOfMemory     ErrorCode = C.RESHARD_ERROR_OUT_OF_MEMORY    // allocation failed
	Internal        ErrorCode = C.RESHARD_ERROR_INTERNAL         // a bug in reshard
	// ResourceExhausted: a request whose estimated cost is above a limit
	// (PlanRequest.MaxPlanBytes), refused before the work starts (ABI 1.2).
	ResourceExhausted ErrorCode = C.RESHARD_ERROR_RESOURCE_EXHAUSTED
)

// String is the library's lower-case name of the code ("invalid_argument",
// "corrupt", ...; "unknown" for codes it does not know).
func (c ErrorCode) String() string {
	return C.GoString(C.reshard_error_code_name(C.reshard_error_code_t(c)))
}

// Error is an error from reshard: a code and a message naming the argument
// or field at fault. Errors found by this package before calling the
// library (a buffer of the wrong size, a NUL byte in a name) use the same
// form.
type Error struct {
	Code    ErrorCode
	Message string
}

// Error formats the error as "[code] message".
func (e *Error) Error() string {
	return fmt.Sprintf("[%s] %s", e.Code, e.Message)
}

// Is reports whether target is an *Error with the same code (so
// errors.Is(err, &reshard.Error{Code: reshard.Corrupt}) works).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

func errorf(code ErrorCode, format string, args ...interface{}) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// check converts a reshard_error_t* into an error, destroying the C object.
func check(e *C.reshard_error_t) error {
	if e == nil {
		return nil
	}
	defer C.reshard_error_destroy(e)
	return &Error{Code: ErrorCode(C.reshard_error_code(e)), Message: C.GoString(C.reshard_error_message(e))}
}

// mustOK is for calls that fail only on arguments this package never
// passes (NULL outputs): an error there is a bug in reshard or here.
func mustOK(e *C.reshard_error_t, what string) {
	if err := check(e); err != nil {
		panic(fmt.Sprintf("reshard: %s failed unexpectedly: %v", what, err))
	}
}

func closedError(what string) error {
	return errorf(InvalidArgument, "%s: used after Close", what)
}

// cArena holds C allocations made for one call and frees them together.
type cArena struct{ ptrs []unsafe.Pointer }

func (a *cArena) alloc(size int) unsafe.Pointer {
	if size == 0 {
		size = 1
	}
	p := C.calloc(1, C.size_t(size))
	if p == nil {
		panic("reshard: out of C memory")
	}
	a.ptrs = append(a.ptrs, p)
	return p
}

func (a *cArena) free() {
	for _, p := range a.ptrs {
		C.free(p)
	}
	a.ptrs = nil
}

// cstring copies s into C memory; a NUL byte inside is an error naming what.
func (a *cArena) cstring(s string, what string) (*C.char, error) {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return nil, errorf(InvalidArgument, "%s: contains a NUL byte", what)
		}
	}
	p := C.CString(s)
	a.ptrs = append(a.ptrs, unsafe.Pointer(p))
	return p, nil
}

// cstrings copies names into a C array of C strings (NULL when empty).
func (a *cArena) cstrings(names []string, what string) (**C.char, error) {
	if len(names) == 0 {
		return nil, nil
	}
	arr := unsafe.Slice((**C.char)(a.alloc(len(names)*int(unsafe.Sizeof((*C.char)(nil))))), len(names))
	for i, n := range names {
		p, err := a.cstring(n, fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return nil, err
		}
		arr[i] = p
	}
	return &arr[0], nil
}

// int64s returns a pointer to the first value (NULL when empty). Go memory
// holding no Go pointers may be passed for the duration of a call.
func int64s(v []int64) *C.int64_t {
	if len(v) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&v[0]))
}

func int32s(v []int32) *C.int32_t {
	if len(v) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&v[0]))
}

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// keep marks v alive until this point (so a finalizer cannot release a
// handle while C still uses it).
func keep(v interface{}) { runtime.KeepAlive(v) }
