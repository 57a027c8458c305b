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

// Sharding is a named sharding: Dims[d] lists the mesh axes (major to
// minor) that split tensor dim d (empty: not split); axes used nowhere
// replicate; devices along the Partial axes hold unreduced summands
// combined by PartialOp (default Sum). Same meaning as JAX
// NamedSharding(mesh, PartitionSpec) and DTensor placements; like a
// PartitionSpec, Dims may be shorter than the tensor's rank (the remaining
// dims are not split).
type Sharding struct {
	Dims      [][]string
	Partial   []string
	PartialOp ReduceOp
}

// LayoutEntry is one shard: the device holding it, which summand it is (0
// unless partial), and the box [Lo, Hi) of the global tensor it holds.
type LayoutEntry struct {
	Device  int64
	Summand int32
	Lo, Hi  []int64
}

// Volume is the number of elements of the entry's box.
func (e LayoutEntry) Volume() int64 {
	v := int64(1)
	for d := range e.Lo {
		if e.Hi[d] <= e.Lo[d] {
			return 0
		}
		v *= e.Hi[d] - e.Lo[d]
	}
	return v
}

// Layout says where each shard of a tensor lives (reshard_layout_t):
// entries sorted by device. Immutable.
type Layout struct {
	ptr *C.reshard_layout_t
}

// NewNamedLayout lowers a named sharding of a tensor of shape on mesh.
// Uneven sizes are fine (chunk c = ceil(n/k); shard i covers
// [i*c, min(n,(i+1)*c))). A sharding of fewer Dims than the shape's leaves
// the remaining dims unsplit, as JAX PartitionSpec("dp") on a rank-2 array
// does.
//
// Errors: InvalidArgument (the sharding has more Dims than the shape;
// an unknown or repeated axis; a negative size), OutOfRange (rank above 8),
// Overflow.
func NewNamedLayout(mesh *Mesh, shape []int64, sharding Sharding) (*Layout, error) {
	if mesh == nil || mesh.ptr == nil {
		return nil, closedError("mesh")
	}
	if len(sharding.Dims) > len(shape) {
		return nil, errorf(InvalidArgument, "sharding: %d dims given for a tensor of rank %d", len(sharding.Dims), len(shape))
	}
	var a cArena
	defer a.free()
	// Axis lists point at C strings, so they live in C memory too. The C ABI
	// takes one entry per dim; calloc leaves those past sharding.Dims empty
	// (not split).
	axesSize := int(unsafe.Sizeof(C.reshard_axes_t{}))
	dims := (*C.reshard_axes_t)(a.alloc(len(shape) * axesSize))
	dimSlice := unsafe.Slice(dims, len(shape))
	for d, axes := range sharding.Dims {
		names, err := a.cstrings(axes, fmt.Sprintf("dims[%d].names", d))
		if err != nil {
			return nil, err
		}
		dimSlice[d] = C.reshard_axes_t{names: names, count: C.size_t(len(axes))}
	}
	partial := (*C.reshard_axes_t)(a.alloc(axesSize))
	names, err := a.cstrings(sharding.Partial, "partial.names")
	if err != nil {
		return nil, err
	}
	*partial = C.reshard_axes_t{names: names, count: C.size_t(len(sharding.Partial))}
	op := sharding.PartialOp
	if op == 0 {
		op = Sum
	}
	var out *C.reshard_layout_t
	err = check(C.reshard_layout_create_named(mesh.ptr, C.size_t(len(shape)), int64s(shape), dims, partial, C.reshard_reduce_op_t(op), &out))
	keep(mesh)
	if err != nil {
		return nil, err
	}
	return newLayout(out), nil
}

// NewBoxLayout makes an explicit box layout of a tensor of shape: entries
// in any order (a device at most once), boxes inside the shape and possibly
// overlapping (replicas); numSummands >= 1 summands combined by op.
//
// Errors: InvalidArgument naming the entry (Lo/Hi of the wrong length here;
// a box outside the shape, a repeated device, a summand out of range in the
// library), OutOfRange, Overflow.
func NewBoxLayout(shape []int64, entries []LayoutEntry, numSummands int32, op ReduceOp) (*Layout, error) {
	rank := len(shape)
	devices := make([]int64, 0, len(entries))
	summands := make([]int32, 0, len(entries))
	lo := make([]int64, 0, len(entries)*rank)
	hi := make([]int64, 0, len(entries)*rank)
	for e, entry := range entries {
		if len(entry.Lo) != rank {
			return nil, errorf(InvalidArgument, "entries[%d].lo: %d values given for rank %d", e, len(entry.Lo), rank)
		}
		if len(entry.Hi) != rank {
			return nil, errorf(InvalidArgument, "entries[%d].hi: %d values given for rank %d", e, len(entry.Hi), rank)
		}
		devices = append(devices, entry.Device)
		summands = append(summands, entry.Summand)
		lo = append(lo, entry.Lo...)
		hi = append(hi, entry.Hi...)
	}
	var out *C.reshard_layout_t
	if err := check(C.reshard_layout_create_boxes(C.size_t(rank), int64s(shape), C.size_t(len(entries)), int64s(devices),
		int32s(summands), int64s(lo), int64s(hi), C.int32_t(numSummands), C.reshard_reduce_op_t(op), &out)); err != nil {
		return nil, err
	}
	return newLayout(out), nil
}

func newLayout(p *C.reshard_layout_t) *Layout {
	l := &Layout{ptr: p}
	runtime.SetFinalizer(l, (*Layout).Close)
	return l
}

func (l *Layout) live() *C.reshard_layout_t {
	if l == nil || l.ptr == nil {
		panic("reshard: Layout used after Close")
	}
	return l.ptr
}

// Rank is the tensor rank.
func (l *Layout) Rank() int {
	var r C.size_t
	mustOK(C.reshard_layout_rank(l.live(), &r), "reshard_layout_rank")
	keep(l)
	return int(r)
}

// Shape is the tensor shape.
func (l *Layout) Shape() []int64 {
	shape := make([]int64, C.RESHARD_MAX_RANK)
	mustOK(C.reshard_layout_shape(l.live(), int64s(shape)), "reshard_layout_shape")
	keep(l)
	return shape[:l.Rank()]
}

// NumEntries is the number of entries (device shards).
func (l *Layout) NumEntries() int {
	var n C.size_t
	mustOK(C.reshard_layout_num_entries(l.live(), &n), "reshard_layout_num_entries")
	keep(l)
	return int(n)
}

// Entry returns entry index (sorted by device).
//
// Errors: OutOfRange for index >= NumEntries().
func (l *Layout) Entry(index int) (LayoutEntry, error) {
	if index < 0 {
		return LayoutEntry{}, errorf(OutOfRange, "entry: %d is negative", index)
	}
	rank := l.Rank()
	lo := make([]int64, C.RESHARD_MAX_RANK)
	hi := make([]int64, C.RESHARD_MAX_RANK)
	var device C.int64_t
	var summand C.int32_t
	err := check(C.reshard_layout_entry(l.live(), C.size_t(index), &device, &summand, int64s(lo), int64s(hi)))
	keep(l)
	if err != nil {
		return LayoutEntry{}, err
	}
	return LayoutEntry{Device: int64(device), Summand: int32(summand), Lo: lo[:rank], Hi: hi[:rank]}, nil
}

// Entries returns every entry, sorted by device.
func (l *Layout) Entries() []LayoutEntry {
	n := l.NumEntries()
	out := make([]LayoutEntry, n)
	for i := range out {
		e, err := l.Entry(i)
		if err != nil {
			panic(err)
		}
		out[i] = e
	}
	return out
}

// Close releases the layout. Idempotent.
func (l *Layout) Close() error {
	if l != nil && l.ptr != nil {
		C.reshard_layout_destroy(l.ptr)
		l.ptr = nil
		runtime.SetFinalizer(l, nil)
	}
	return nil
}
