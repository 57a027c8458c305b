package reshard

/*
#include <stdlib.h>
#include "reshard/reshard.h"
*/
import "C"

import "runtime"

// Topology maps devices to process rank, host (node) id and local ordinal
// (reshard_topology_t). Devices never added are on process 0, host 0,
// ordinal 0. A builder: do not modify it while another goroutine uses it.
type Topology struct {
	ptr *C.reshard_topology_t
}

// NewTopology makes an empty topology.
func NewTopology() (*Topology, error) {
	var out *C.reshard_topology_t
	if err := check(C.reshard_topology_create(&out)); err != nil {
		return nil, err
	}
	t := &Topology{ptr: out}
	runtime.SetFinalizer(t, (*Topology).Close)
	return t, nil
}

// AddDevice records that device lives in process on host with local
// ordinal (CUDA device index). Adding a device again with the same values
// is a no-op.
//
// Errors: InvalidArgument (a negative value; different values for a device
// already added). The topology is then unchanged.
func (t *Topology) AddDevice(device int64, process, host, ordinal int32) error {
	if t.ptr == nil {
		return closedError("topology")
	}
	err := check(C.reshard_topology_add_device(t.ptr, C.int64_t(device), C.int32_t(process), C.int32_t(host), C.int32_t(ordinal)))
	keep(t)
	return err
}

// NumDevices is the number of devices added.
func (t *Topology) NumDevices() int {
	if t.ptr == nil {
		panic("reshard: Topology used after Close")
	}
	var n C.size_t
	mustOK(C.reshard_topology_num_devices(t.ptr, &n), "reshard_topology_num_devices")
	keep(t)
	return int(n)
}

// Close releases the topology. Idempotent.
func (t *Topology) Close() error {
	if t != nil && t.ptr != nil {
		C.reshard_topology_destroy(t.ptr)
		t.ptr = nil
		runtime.SetFinalizer(t, nil)
	}
	return nil
}
