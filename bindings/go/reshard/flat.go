package reshard

/*
#include "reshard/reshard.h"
*/
import "C"

import "unsafe"

// FlatLayout is a flat layout of an input parsed from a spec (docs/spec.md,
// "Flat layouts"; C ABI 1.10): tensors flattened into one buffer per rank,
// as PyTorch FSDP1, Megatron buckets and DeepSpeed ZeRO-3 keep them.
type FlatLayout struct {
	Name string
	// Source: the flat layout is its tensors' source (else destination).
	Source bool
	// Devices[r] is rank r's device.
	Devices []int64
	// ShardBytes is the size of every rank's flat buffer.
	ShardBytes int64
	// Tensors, in buffer order.
	Tensors []FlatTensor
}

// FlatTensor is one tensor of a flat layout: its index in the input and,
// per entry of its flat-side layout (Plan.Entry order), the rank whose
// buffer holds the entry and the byte offset of the entry's box there.
type FlatTensor struct {
	Tensor      int
	Ranks       []int
	ByteOffsets []int64
}

// FlatLayouts returns the flat layouts of in (none for an input not parsed
// from a spec).
func (in *PlanInput) FlatLayouts() ([]FlatLayout, error) {
	if in == nil || in.ptr == nil {
		return nil, closedError("plan input")
	}
	defer keep(in)
	var n C.size_t
	if err := check(C.reshard_plan_input_num_flats(in.ptr, &n)); err != nil {
		return nil, err
	}
	out := make([]FlatLayout, int(n))
	for f := range out {
		var name *C.char
		var source C.int32_t
		var world, tensors C.size_t
		var bytes C.int64_t
		if err := check(C.reshard_plan_input_flat_info(in.ptr, C.size_t(f), &name, &source, &world, &tensors, &bytes)); err != nil {
			return nil, err
		}
		fl := FlatLayout{Name: C.GoString(name), Source: source != 0, ShardBytes: int64(bytes)}
		for r := 0; r < int(world); r++ {
			var d C.int64_t
			if err := check(C.reshard_plan_input_flat_device(in.ptr, C.size_t(f), C.size_t(r), &d)); err != nil {
				return nil, err
			}
			fl.Devices = append(fl.Devices, int64(d))
		}
		for k := 0; k < int(tensors); k++ {
			var t, entries C.size_t
			if err := check(C.reshard_plan_input_flat_tensor(in.ptr, C.size_t(f), C.size_t(k), &t, &entries, 0, nil, nil)); err != nil {
				return nil, err
			}
			ft := FlatTensor{Tensor: int(t)}
			if entries > 0 {
				ranks := make([]uint64, int(entries))
				offsets := make([]int64, int(entries))
				// C never keeps these pointers: Go memory passed for the call only.
				if err := check(C.reshard_plan_input_flat_tensor(in.ptr, C.size_t(f), C.size_t(k), &t, &entries, entries,
					(*C.uint64_t)(unsafe.Pointer(&ranks[0])), (*C.int64_t)(unsafe.Pointer(&offsets[0])))); err != nil {
					return nil, err
				}
				for _, r := range ranks {
					ft.Ranks = append(ft.Ranks, int(r))
				}
				ft.ByteOffsets = offsets
			}
			fl.Tensors = append(fl.Tensors, ft)
		}
		out[f] = fl
	}
	return out, nil
}

// Views cuts one flat buffer per rank (flat[r], at least ShardBytes long;
// nil for a rank another process holds) into the per-entry buffers of the
// k-th tensor of fl, for TensorBuffers.Src (or .Dst) of that tensor in
// plan (made from the same input). Entries of ranks given as nil get nil.
//
// Errors: InvalidArgument ("flat: 3 buffers for 4 ranks", "flat[2]: ...
// bytes, below the shard's ..."), OutOfRange (k).
func (fl *FlatLayout) Views(plan *Plan, k int, flat [][]byte) ([][]byte, error) {
	if k < 0 || k >= len(fl.Tensors) {
		return nil, errorf(OutOfRange, "k: %d is not below the %d tensors of flat layout %q", k, len(fl.Tensors), fl.Name)
	}
	if len(flat) != len(fl.Devices) {
		return nil, errorf(InvalidArgument, "flat: %d buffers for %d ranks", len(flat), len(fl.Devices))
	}
	for r, b := range flat {
		if b != nil && int64(len(b)) < fl.ShardBytes {
			return nil, errorf(InvalidArgument, "flat[%d]: %d bytes, below the shard's %d", r, len(b), fl.ShardBytes)
		}
	}
	ft := fl.Tensors[k]
	info, err := plan.Tensor(ft.Tensor)
	if err != nil {
		return nil, err
	}
	side := Dst
	if fl.Source {
		side = Src
	}
	views := make([][]byte, len(ft.Ranks))
	for e, r := range ft.Ranks {
		if flat[r] == nil {
			continue
		}
		entry, err := plan.Entry(ft.Tensor, side, e)
		if err != nil {
			return nil, err
		}
		n := entry.Volume() * int64(info.DType.Size())
		views[e] = flat[r][ft.ByteOffsets[e] : ft.ByteOffsets[e]+n : ft.ByteOffsets[e]+n]
	}
	return views, nil
}
