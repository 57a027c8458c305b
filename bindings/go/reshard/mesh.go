package reshard

/*
#include <stdlib.h>
#include "reshard/reshard.h"
*/
import "C"

import (
	"runtime"
)

// Mesh is an N-d array of distinct devices with named axes
// (reshard_mesh_t). Immutable; layouts made from it stay valid after Close.
type Mesh struct {
	ptr *C.reshard_mesh_t
}

// NewMesh makes a mesh with axes axisNames of sizes shape (each >= 1) over
// devices (row-major, distinct, non-negative; nil for 0..N-1). No axes make
// a one-device mesh.
//
// Errors: InvalidArgument naming the field (a duplicate or empty axis name,
// a bad size, a repeated device, devices of the wrong length), Overflow.
func NewMesh(axisNames []string, shape []int64, devices []int64) (*Mesh, error) {
	if len(axisNames) != len(shape) {
		return nil, errorf(InvalidArgument, "shape: %d sizes given for %d axis names", len(shape), len(axisNames))
	}
	var a cArena
	defer a.free()
	names, err := a.cstrings(axisNames, "axis_names")
	if err != nil {
		return nil, err
	}
	// The library reads product(shape) ids: pass only a slice of exactly
	// that length. With an invalid shape, pass none and let it report the
	// shape.
	var devPtr *C.int64_t
	if devices != nil {
		valid := true
		count := int64(1)
		for _, s := range shape {
			if s < 1 {
				valid = false
				break
			}
			if count > (1<<62)/s {
				return nil, errorf(Overflow, "shape: device count overflows")
			}
			count *= s
		}
		if valid {
			if int64(len(devices)) != count {
				return nil, errorf(InvalidArgument, "devices: %d ids given, the mesh has %d devices", len(devices), count)
			}
			devPtr = int64s(devices)
		}
	}
	var out *C.reshard_mesh_t
	if err := check(C.reshard_mesh_create(C.size_t(len(shape)), names, int64s(shape), devPtr, &out)); err != nil {
		return nil, err
	}
	m := &Mesh{ptr: out}
	runtime.SetFinalizer(m, (*Mesh).Close)
	return m, nil
}

// Rank is the number of axes.
func (m *Mesh) Rank() int {
	var r C.size_t
	mustOK(C.reshard_mesh_rank(m.live(), &r), "reshard_mesh_rank")
	keep(m)
	return int(r)
}

// Size is the number of devices.
func (m *Mesh) Size() int64 {
	var s C.int64_t
	mustOK(C.reshard_mesh_size(m.live(), &s), "reshard_mesh_size")
	keep(m)
	return int64(s)
}

func (m *Mesh) live() *C.reshard_mesh_t {
	if m == nil || m.ptr == nil {
		panic("reshard: Mesh used after Close")
	}
	return m.ptr
}

// Close releases the mesh. Idempotent.
func (m *Mesh) Close() error {
	if m != nil && m.ptr != nil {
		C.reshard_mesh_destroy(m.ptr)
		m.ptr = nil
		runtime.SetFinalizer(m, nil)
	}
	return nil
}
