package reshard

/*
#include <stdlib.h>
#include <string.h>
#include "reshard/reshard.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// TransportKind says how an executor moves bytes (reshard_transport_t).
type TransportKind int32

// The transports of reshard.h; only TransportHost is available in this
// release (the others give Unsupported).
const (
	TransportHost TransportKind = C.RESHARD_TRANSPORT_HOST
	TransportMPI  TransportKind = C.RESHARD_TRANSPORT_MPI
	TransportNCCL TransportKind = C.RESHARD_TRANSPORT_NCCL
)

// ExecutorOptions configure an executor (reshard_executor_options_t).
type ExecutorOptions struct {
	Transport TransportKind // default TransportHost
	Threads   int32         // worker threads; 0: one per hardware thread
}

// VerifyReport is what Executor.Verify found (reshard_verify_report_t).
type VerifyReport struct {
	Tensors    int64 `json:"tensors"`
	Elements   int64 `json:"elements"`
	Bytes      int64 `json:"bytes"`
	Mismatches int64 `json:"mismatches"` // 0 means the plan is correct
}

// TensorBuffers are the shard buffers of one tensor for Execute: Src[e]
// holds source layout entry e, Dst[e] receives destination entry e (see
// Plan.Entries). Each is dense, row-major, exactly its entry's box.
type TensorBuffers struct {
	Src [][]byte
	Dst [][]byte
}

// HostTensorBuffers are the shard buffers of one tensor for ExecuteHost.
type HostTensorBuffers struct {
	Src []*HostBuffer
	Dst []*HostBuffer
}

// Executor executes plans (reshard_executor_t). Immutable: one executor
// may run several plans concurrently when their destinations are distinct.
type Executor struct {
	ptr *C.reshard_executor_t
}

// NewExecutor makes an executor (nil options: host transport, one thread
// per hardware thread).
//
// Errors: InvalidArgument (negative threads, unknown transport),
// Unsupported (a transport not in this build).
func NewExecutor(opts *ExecutorOptions) (*Executor, error) {
	// RESHARD_EXECUTOR_OPTIONS_INIT: the 300 s deadline of each host
	// execution (ABI 1.9) included.
	o := C.reshard_executor_options_t{struct_size: C.size_t(C.sizeof_reshard_executor_options_t), transport: C.RESHARD_TRANSPORT_HOST, timeout_seconds: 300}
	if opts != nil {
		if opts.Transport != 0 {
			o.transport = C.reshard_transport_t(opts.Transport)
		}
		o.threads = C.int32_t(opts.Threads)
	}
	var out *C.reshard_executor_t
	if err := check(C.reshard_executor_create(&o, &out)); err != nil {
		return nil, err
	}
	ex := &Executor{ptr: out}
	runtime.SetFinalizer(ex, (*Executor).Close)
	return ex, nil
}

// Execute fills every destination buffer of every tensor of plan (which
// must hold every process part) from the source buffers; buffers has one
// element per plan tensor. The library checks counts and sizes against the
// plan before it writes anything; on error nothing is written.
//
// The buffers are copied into C memory and the results copied back (cgo
// forbids C from holding the Go pointers inside TensorBuffers). For large
// shards use ExecuteHost, which runs in place on HostBuffers.
//
// Errors: InvalidArgument naming the buffer ("buffers[1].dst[3]: 96 bytes
// given, box [0:4, 0:8) of f32 needs 128"; "plan: lacks the part of process
// 1").
func (ex *Executor) Execute(plan *Plan, buffers []TensorBuffers) error {
	if ex == nil || ex.ptr == nil {
		return closedError("executor")
	}
	if _, err := plan.live(); err != nil {
		return err
	}
	var a cArena
	defer a.free()
	host := make([]HostTensorBuffers, len(buffers))
	for t, b := range buffers {
		host[t].Src = make([]*HostBuffer, len(b.Src))
		for e, s := range b.Src {
			h := a.hostBuffer(len(s))
			copy(h.Bytes(), s)
			host[t].Src[e] = h
		}
		host[t].Dst = make([]*HostBuffer, len(b.Dst))
		for e, d := range b.Dst {
			h := a.hostBuffer(len(d))
			copy(h.Bytes(), d) // so bytes the library does not write keep their values
			host[t].Dst[e] = h
		}
	}
	if err := ex.executeHost(plan, host, &a); err != nil {
		return err
	}
	for t, b := range buffers {
		for e, d := range b.Dst {
			copy(d, host[t].Dst[e].Bytes())
		}
	}
	return nil
}

// ExecuteHost is Execute on buffers in C memory, without copies.
func (ex *Executor) ExecuteHost(plan *Plan, buffers []HostTensorBuffers) error {
	if ex == nil || ex.ptr == nil {
		return closedError("executor")
	}
	if _, err := plan.live(); err != nil {
		return err
	}
	// Sizes and counts are the library's to check; a nil or closed
	// HostBuffer is this package's.
	for t, b := range buffers {
		for side, bufs := range [2][]*HostBuffer{b.Src, b.Dst} {
			for i, h := range bufs {
				if h == nil || (h.ptr == nil && h.size > 0) {
					return errorf(InvalidArgument, "buffers[%d].%s[%d]: nil or closed HostBuffer", t, [2]string{"src", "dst"}[side], i)
				}
			}
		}
	}
	var a cArena
	defer a.free()
	return ex.executeHost(plan, buffers, &a)
}

func (ex *Executor) executeHost(plan *Plan, buffers []HostTensorBuffers, a *cArena) error {
	// Descriptor arrays hold only C pointers and live in C memory.
	tsize := int(unsafe.Sizeof(C.reshard_tensor_buffers_t{}))
	tensors := unsafe.Slice((*C.reshard_tensor_buffers_t)(a.alloc(len(buffers)*tsize)), len(buffers))
	for t, b := range buffers {
		src := unsafe.Slice((*C.reshard_src_buffer_t)(a.alloc(len(b.Src)*int(unsafe.Sizeof(C.reshard_src_buffer_t{})))), len(b.Src))
		for e, h := range b.Src {
			src[e] = C.reshard_src_buffer_t{data: h.ptr, bytes: C.size_t(h.size)}
		}
		dst := unsafe.Slice((*C.reshard_dst_buffer_t)(a.alloc(len(b.Dst)*int(unsafe.Sizeof(C.reshard_dst_buffer_t{})))), len(b.Dst))
		for e, h := range b.Dst {
			dst[e] = C.reshard_dst_buffer_t{data: h.ptr, bytes: C.size_t(h.size)}
		}
		tensors[t] = C.reshard_tensor_buffers_t{num_src: C.size_t(len(b.Src)), num_dst: C.size_t(len(b.Dst))}
		if len(src) > 0 {
			tensors[t].src = &src[0]
		}
		if len(dst) > 0 {
			tensors[t].dst = &dst[0]
		}
	}
	var first *C.reshard_tensor_buffers_t
	if len(tensors) > 0 {
		first = &tensors[0]
	}
	err := check(C.reshard_executor_execute(ex.ptr, plan.ptr, first, C.size_t(len(buffers))))
	keep(ex)
	keep(plan)
	keep(buffers)
	return err
}

// Verify does what `reshard verify` does: allocates every shard of plan,
// fills the sources with the oracle's values, executes, and checks every
// destination element. A wrong element is counted, not an error.
func (ex *Executor) Verify(plan *Plan) (VerifyReport, error) {
	if ex == nil || ex.ptr == nil {
		return VerifyReport{}, closedError("executor")
	}
	if _, err := plan.live(); err != nil {
		return VerifyReport{}, err
	}
	r := C.reshard_verify_report_t{struct_size: C.size_t(C.sizeof_reshard_verify_report_t)}
	err := check(C.reshard_executor_verify(ex.ptr, plan.ptr, &r))
	keep(ex)
	keep(plan)
	return VerifyReport{Tensors: int64(r.tensors), Elements: int64(r.elements), Bytes: int64(r.bytes), Mismatches: int64(r.mismatches)}, err
}

// Close releases the executor. Idempotent.
func (ex *Executor) Close() error {
	if ex != nil && ex.ptr != nil {
		C.reshard_executor_destroy(ex.ptr)
		ex.ptr = nil
		runtime.SetFinalizer(ex, nil)
	}
	return nil
}

// HostBuffer is zeroed memory allocated by C (calloc), so C may be handed
// its address freely; Bytes views it as a Go slice without copying.
//
// Unlike the handles, a HostBuffer has no finalizer: a slice from Bytes
// does not keep the HostBuffer reachable, so a finalizer could free the
// memory under a slice still in use. Close it explicitly (defer h.Close()).
type HostBuffer struct {
	ptr  unsafe.Pointer
	size int
}

// NewHostBuffer allocates size zeroed bytes of C memory (aligned for every
// dtype). Close it when done: it is never freed otherwise.
func NewHostBuffer(size int) (*HostBuffer, error) {
	if size < 0 {
		return nil, errorf(InvalidArgument, "size: %d is negative", size)
	}
	p := C.calloc(1, C.size_t(size+1)) // +1: never a zero-size allocation
	if p == nil {
		return nil, errorf(OutOfMemory, "size: cannot allocate %d bytes", size)
	}
	return &HostBuffer{ptr: p, size: size}, nil
}

// hostBuffer allocates a HostBuffer owned by the arena (freed with it).
func (a *cArena) hostBuffer(size int) *HostBuffer {
	return &HostBuffer{ptr: a.alloc(size), size: size}
}

// Len is the size in bytes.
func (h *HostBuffer) Len() int { return h.size }

// Bytes views the buffer as a Go slice (valid until Close; do not keep it
// longer).
func (h *HostBuffer) Bytes() []byte {
	if h.ptr == nil || h.size == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(h.ptr), h.size)
}

// Close frees the memory. Idempotent.
func (h *HostBuffer) Close() error {
	if h != nil && h.ptr != nil {
		C.free(h.ptr)
		h.ptr = nil
	}
	return nil
}

// Element is a Go type whose slices can hold shard data.
type Element interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// AsBytes views a typed slice as bytes, without copying (for
// TensorBuffers; f16/bf16 travel as uint16, f8 and bool as uint8).
func AsBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))
}
