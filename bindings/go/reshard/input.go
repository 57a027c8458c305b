package reshard

/*
#include <stdlib.h>
#include "reshard/reshard.h"
*/
import "C"

import (
	"runtime"
	"unicode/utf8"
)

// PlanOptions are the planner options (reshard_plan_options_t).
// DefaultPlanOptions gives the library's defaults; start from it rather
// than from a PlanOptions literal, whose zero values are not the defaults
// (zero bandwidths are rejected, and Relays is false: single-hop).
type PlanOptions struct {
	// A piece held by several remote replicas is split across them when it
	// has at least this many bytes (>= 0).
	SplitMinBytes int64
	// α–β cost model: seconds per message (>= 0) and bytes per second
	// inside a host and between hosts (> 0).
	AlphaSeconds            float64
	IntraHostBytesPerSecond float64
	InterHostBytesPerSecond float64
	// Staging memory per device per round; 0: unbounded.
	StagingBudgetBytes int64
	// Relays for replicated destinations (C ABI 1.3; docs/design.md §2.4);
	// true in DefaultPlanOptions. Where several devices of one host need the
	// same box that no device of that host holds, one of them receives it
	// over the network (stage 0) and forwards it to the others inside the
	// host (stage 1), so the box enters the host once. False: every device
	// fetches what it lacks directly (single-hop, one stage).
	Relays bool
	// Reduce-scatter then gather for partial sources (C ABI 1.3); true in
	// DefaultPlanOptions. Each part of a destination cell is reduced by one
	// device from every summand (stage 0) and forwarded reduced to the
	// others (stage 1). False: every device receives every summand it lacks.
	ReduceScatter bool
	// NICs per host for the α–β estimate and the choices made by it (C ABI
	// 1.7; docs/design.md §2.8): 0 in DefaultPlanOptions, one NIC per
	// device. With n > 0 (at most 1048576) the host's NICs form min(n, m)
	// groups over its m devices of the plan.
	NicsPerHost int32
	// The single-hop guard (C ABI 1.8); true in DefaultPlanOptions: groups
	// of like tensors whose routes (relays, reduce-scatter) make the whole
	// plan slower by its α–β estimate go single-hop. False: every route the
	// other choices take is kept.
	SingleHopGuard bool
}

// DefaultPlanOptions returns RESHARD_PLAN_OPTIONS_INIT: 1 MiB split
// threshold, α = 5 µs, 100e9 and 25e9 bytes/s, 1 GiB staging, relays and
// reduce-scatter on, one NIC per device, the single-hop guard on.
func DefaultPlanOptions() PlanOptions {
	return PlanOptions{
		SplitMinBytes:           1 << 20,
		AlphaSeconds:            5e-6,
		IntraHostBytesPerSecond: 100e9,
		InterHostBytesPerSecond: 25e9,
		StagingBudgetBytes:      1 << 30,
		Relays:                  true,
		ReduceScatter:           true,
		SingleHopGuard:          true,
	}
}

// PlanInput is everything the planner needs (reshard_plan_input_t):
// tensors with source and destination layouts, a topology and options. A
// builder: do not modify it while another goroutine uses it.
type PlanInput struct {
	ptr *C.reshard_plan_input_t
}

func newPlanInput(p *C.reshard_plan_input_t) *PlanInput {
	in := &PlanInput{ptr: p}
	runtime.SetFinalizer(in, (*PlanInput).Close)
	return in
}

// NewPlanInput makes an empty input: no tensors, default topology and
// options.
func NewPlanInput() (*PlanInput, error) {
	var out *C.reshard_plan_input_t
	if err := check(C.reshard_plan_input_create(&out)); err != nil {
		return nil, err
	}
	return newPlanInput(out), nil
}

// PlanInputFromSpec parses a JSON spec (docs/spec.md: meshes, tensors with
// named shardings, processes and hosts, optional options).
//
// Errors: Parse (malformed JSON, with line and column), InvalidArgument
// whose message starts with the JSON path of the bad value
// ("tensors[2].src.spec[1]: ...").
func PlanInputFromSpec(json []byte) (*PlanInput, error) {
	var out *C.reshard_plan_input_t
	if err := check(C.reshard_plan_input_from_spec((*C.char)(bytesPtr(json)), C.size_t(len(json)), &out)); err != nil {
		return nil, err
	}
	return newPlanInput(out), nil
}

// AddTensor appends a tensor named name (unique) of shape and dtype,
// moving from layout src to layout dst (copied; both must have shape).
//
// Errors: InvalidArgument (empty name, NUL byte, invalid UTF-8, negative
// size), Mismatch
// ("src: layout shape [4, 8] differs from shape [4, 6]"), OutOfRange,
// Overflow. The input is unchanged on error. Duplicate names are reported
// by NewPlan.
func (in *PlanInput) AddTensor(name string, shape []int64, dtype DType, src, dst *Layout) error {
	if in.ptr == nil {
		return closedError("input")
	}
	if src == nil || src.ptr == nil {
		return closedError("src")
	}
	if dst == nil || dst.ptr == nil {
		return closedError("dst")
	}
	// Plan bytes store the name as a FlatBuffers string, which readers
	// (the Rust verifier) require to be UTF-8.
	if !utf8.ValidString(name) {
		return errorf(InvalidArgument, "name: not valid UTF-8")
	}
	var a cArena
	defer a.free()
	cname, err := a.cstring(name, "name")
	if err != nil {
		return err
	}
	err = check(C.reshard_plan_input_add_tensor(in.ptr, cname, C.size_t(len(shape)), int64s(shape),
		C.reshard_dtype_t(dtype), src.ptr, dst.ptr))
	keep(in)
	keep(src)
	keep(dst)
	return err
}

// SetTopology replaces the topology by a copy of t.
func (in *PlanInput) SetTopology(t *Topology) error {
	if in.ptr == nil {
		return closedError("input")
	}
	if t == nil || t.ptr == nil {
		return closedError("topology")
	}
	err := check(C.reshard_plan_input_set_topology(in.ptr, t.ptr))
	keep(in)
	keep(t)
	return err
}

// SetOptions replaces the planner options (checked by NewPlan, with
// messages naming "options.<field>").
func (in *PlanInput) SetOptions(o PlanOptions) error {
	if in.ptr == nil {
		return closedError("input")
	}
	opts := C.reshard_plan_options_t{
		struct_size:                 C.size_t(C.sizeof_reshard_plan_options_t),
		split_min_bytes:             C.int64_t(o.SplitMinBytes),
		alpha_seconds:               C.double(o.AlphaSeconds),
		intra_host_bytes_per_second: C.double(o.IntraHostBytesPerSecond),
		inter_host_bytes_per_second: C.double(o.InterHostBytesPerSecond),
		staging_budget_bytes:        C.int64_t(o.StagingBudgetBytes),
		nics_per_host:               C.int32_t(o.NicsPerHost),
	}
	if o.Relays {
		opts.relays = 1
	}
	if o.ReduceScatter {
		opts.reduce_scatter = 1
	}
	if o.SingleHopGuard {
		opts.single_hop_guard = 1
	}
	err := check(C.reshard_plan_input_set_options(in.ptr, &opts))
	keep(in)
	return err
}

// NumTensors is the number of tensors.
func (in *PlanInput) NumTensors() int {
	if in.ptr == nil {
		panic("reshard: PlanInput used after Close")
	}
	var n C.size_t
	mustOK(C.reshard_plan_input_num_tensors(in.ptr, &n), "reshard_plan_input_num_tensors")
	keep(in)
	return int(n)
}

// Fingerprint is the fingerprint a plan of this input will have, without
// planning: equal on every process that describes the same inputs.
func (in *PlanInput) Fingerprint() (uint64, error) {
	if in.ptr == nil {
		return 0, closedError("input")
	}
	var f C.uint64_t
	err := check(C.reshard_plan_input_fingerprint(in.ptr, &f))
	keep(in)
	return uint64(f), err
}

// Close releases the input. Idempotent.
func (in *PlanInput) Close() error {
	if in != nil && in.ptr != nil {
		C.reshard_plan_input_destroy(in.ptr)
		in.ptr = nil
		runtime.SetFinalizer(in, nil)
	}
	return nil
}
