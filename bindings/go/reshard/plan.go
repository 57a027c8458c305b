package reshard

/*
#include <stdlib.h>
#include "reshard/reshard.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Scope says which process parts NewPlanWithRequest computes.
type Scope int32

// The plan scopes of reshard.h.
const (
	ScopeAll     Scope = C.RESHARD_PLAN_SCOPE_ALL     // every process part (in-process execution)
	ScopeGlobal  Scope = C.RESHARD_PLAN_SCOPE_GLOBAL  // statistics and fingerprint only
	ScopeProcess Scope = C.RESHARD_PLAN_SCOPE_PROCESS // the part of PlanRequest.Process
)

// PlanRequest says what to plan (reshard_plan_request_t).
type PlanRequest struct {
	Scope   Scope
	Process int32 // for ScopeProcess
	// NoGlobalStats skips the global statistics (a worker planning only its
	// part).
	NoGlobalStats bool
	// MaxPlanBytes limits the memory of the process parts (ABI 1.2): the
	// library estimates it from the global statistics before building any
	// part and, above the limit, returns a ResourceExhausted error with the
	// estimate. 0: the default, half the memory available; N > 0: N bytes;
	// PlanBytesUnlimited: no limit; below -1: InvalidArgument. ScopeGlobal is
	// never refused.
	MaxPlanBytes int64
}

// PlanBytesUnlimited as PlanRequest.MaxPlanBytes: no memory limit.
const PlanBytesUnlimited int64 = C.RESHARD_PLAN_BYTES_UNLIMITED

// Side picks the source or the destination layout of a tensor.
type Side int32

// The sides of reshard.h.
const (
	Src Side = C.RESHARD_SIDE_SRC
	Dst Side = C.RESHARD_SIDE_DST
)

// Direction picks the message list of a process part.
type Direction int32

// The directions of reshard.h.
const (
	Send Direction = C.RESHARD_DIRECTION_SEND
	Recv Direction = C.RESHARD_DIRECTION_RECV
)

// PieceList picks a piece list of a process part.
type PieceList int32

// The piece lists of reshard.h.
const (
	LocalPieces PieceList = C.RESHARD_PIECES_LOCAL // copied within one device
	SendPieces  PieceList = C.RESHARD_PIECES_SEND  // carried by sent messages
	RecvPieces  PieceList = C.RESHARD_PIECES_RECV  // carried by received messages
)

// PlanStats are the global statistics of a plan (reshard_plan_stats_t).
// Lower bounds follow docs/design.md §2.2; the optimality gap is figure / bound.
type PlanStats struct {
	NetworkBytes           int64   `json:"network_bytes"`
	LocalBytes             int64   `json:"local_bytes"`
	CrossHostBytes         int64   `json:"cross_host_bytes"`
	CrossProcessBytes      int64   `json:"cross_process_bytes"`
	MaxSendBytes           int64   `json:"max_send_bytes"`
	MaxRecvBytes           int64   `json:"max_recv_bytes"`
	Messages               int64   `json:"messages"`
	Pieces                 int64   `json:"pieces"`
	Rounds                 int64   `json:"rounds"`
	PeakStagingBytes       int64   `json:"peak_staging_bytes"`
	LowerBoundNetworkBytes int64   `json:"lower_bound_network_bytes"`
	LowerBoundMaxSendBytes int64   `json:"lower_bound_max_send_bytes"`
	LowerBoundMaxRecvBytes int64   `json:"lower_bound_max_recv_bytes"`
	CostSeconds            float64 `json:"cost_seconds"`
	LowerBoundCostSeconds  float64 `json:"lower_bound_cost_seconds"`
	PlanSeconds            float64 `json:"plan_seconds"`
	NumDevices             uint64  `json:"num_devices"`
	// Since C ABI 1.2: steps of the plan, the busiest host's cross-host
	// traffic, and host-level bounds over all plans (relays and trees
	// included); LowerBoundBinding is the RESHARD_BOUND_* value of the bound
	// that gives LowerBoundCostSeconds, LowerBoundBindingID its device or host.
	Stages                     int64 `json:"stages"`
	MaxHostSendBytes           int64 `json:"max_host_send_bytes"`
	MaxHostRecvBytes           int64 `json:"max_host_recv_bytes"`
	LowerBoundCrossHostBytes   int64 `json:"lower_bound_cross_host_bytes"`
	LowerBoundMaxHostSendBytes int64 `json:"lower_bound_max_host_send_bytes"`
	LowerBoundMaxHostRecvBytes int64 `json:"lower_bound_max_host_recv_bytes"`
	LowerBoundBinding          int32 `json:"lower_bound_binding"`
	LowerBoundBindingID        int64 `json:"lower_bound_binding_id"`
	// Since C ABI 1.3: bytes of stages after the first, what relays forward
	// from a destination buffer (part of NetworkBytes). Stages is 2 when
	// there are any, 1 for a single-hop plan, 0 for no work.
	ForwardedBytes int64 `json:"forwarded_bytes"`
	// MaxScratchBytes is the most scratch bytes allocated on one device
	// (reduction trees' planner-sized staging; 0 without; ABI 1.5).
	MaxScratchBytes int64 `json:"max_scratch_bytes"`
}

// DeviceTraffic is the traffic of one device (reshard_device_traffic_t).
type DeviceTraffic struct {
	Device       int64 `json:"device"`
	SendBytes    int64 `json:"send_bytes"`
	RecvBytes    int64 `json:"recv_bytes"`
	LocalBytes   int64 `json:"local_bytes"`
	SendMessages int64 `json:"send_messages"`
	RecvMessages int64 `json:"recv_messages"`
}

// TensorInfo is the name, element type and shape of a plan tensor.
type TensorInfo struct {
	Name string
	// DType is the element type of the source buffers.
	DType DType
	// DstDType is the element type of the destination buffers: DType unless
	// the plan casts the tensor in flight (ABI 1.11, docs/spec.md "Casts").
	DstDType DType
	Shape    []int64
	// ScaleTensor is the index of the tensor holding this tensor's block
	// scales, -1 without (ABI 1.12, docs/spec.md "Block scales"), and
	// ScaleBlock the block's extent per dim (nil without).
	ScaleTensor int
	ScaleBlock  []int64
}

// PartInfo gives the sizes of one process part (reshard_part_info_t).
type PartInfo struct {
	NumLocalPieces uint64
	NumSends       uint64
	NumSendPieces  uint64
	NumRecvs       uint64
	NumRecvPieces  uint64
	// NumScratch is the number of scratch buffers the process allocates for
	// one execution (C ABI 1.6; Plan.Scratch).
	NumScratch uint64
}

// ScratchEntry is a piece's SrcEntry or DstEntry naming a scratch buffer
// (RESHARD_SCRATCH_ENTRY): the scratch of its tensor on the piece's
// SrcDevice (reading) or DstDevice (writing) whose box contains its region.
const ScratchEntry uint64 = C.RESHARD_SCRATCH_ENTRY

// Scratch is a buffer a process allocates for one execution on one of its
// devices, holding box [Lo, Hi) of one tensor (reshard_scratch_t, C ABI
// 1.6): it starts at the identity of the tensor's reduce op, pieces written
// into it combine, and pieces of later stages read it once complete.
type Scratch struct {
	Tensor uint64
	Device int64
	Bytes  int64 // the box's elements times the tensor's dtype size
	Lo, Hi []int64
}

// Message is all pieces from one device to another in one round of one
// stage, packed back to back in piece order (reshard_message_t). Stages run
// in order, each one's rounds in order.
type Message struct {
	SrcDevice, DstDevice  int64
	Round                 uint64 // within its stage
	FirstPiece, NumPieces uint64
	Bytes                 int64
	// Stage (C ABI 1.3): 0, or 1 for a relay, whose pieces forward what
	// stage 0 wrote into a destination buffer.
	Stage uint64
	// Sub (C ABI 1.14): 0, 1, ... among the messages of one stage, round,
	// source and destination, which flow side by side; 0 where a message
	// is not cut.
	Sub uint64
}

// Piece is a box of one tensor moving from a source entry to a destination
// entry, with the region it moves in global coordinates. In a stage above
// 0 (a relay), SrcEntry indexes the tensor's DESTINATION layout: the buffer,
// on SrcDevice, that an earlier stage wrote and the piece forwards from;
// except a piece writing a scratch (DstEntry ScratchEntry) from an entry,
// whose SrcEntry is a SOURCE entry, a summand (PlanFeatureLateSummands).
type Piece struct {
	Tensor, SrcEntry, DstEntry uint64
	SrcDevice, DstDevice       int64
	Bytes                      int64
	Stage                      uint64 // of the piece's message (C ABI 1.3; 0 for local pieces)
	Lo, Hi                     []int64
}

// Plan is a reshard plan (reshard_plan_t): tensors, topology, options,
// statistics, fingerprint and the process parts it holds. Immutable and
// safe for concurrent use.
type Plan struct {
	ptr *C.reshard_plan_t
}

func newPlan(p *C.reshard_plan_t) *Plan {
	pl := &Plan{ptr: p}
	runtime.SetFinalizer(pl, (*Plan).Close)
	return pl
}

// NewPlan plans every process part of in, with statistics. Deterministic:
// equal inputs give equal plans and equal bytes.
//
// Errors: InvalidArgument naming the field ("tensors[1].name: duplicate
// name", "options.alpha_seconds: ..."), Mismatch, Overflow, OutOfMemory,
// ResourceExhausted (the parts' estimated memory is above half the memory
// available; the message gives the estimate).
func NewPlan(in *PlanInput) (*Plan, error) {
	return NewPlanWithRequest(in, PlanRequest{})
}

// NewPlanWithRequest plans what req asks for.
//
// Errors: those of NewPlan; OutOfRange ("request.process: ...") for a
// process owning no device; InvalidArgument for an unknown scope or a
// MaxPlanBytes below -1; ResourceExhausted ("request->max_plan_bytes: ...")
// when the parts' estimated memory is above MaxPlanBytes.
func NewPlanWithRequest(in *PlanInput, req PlanRequest) (*Plan, error) {
	if in == nil || in.ptr == nil {
		return nil, closedError("input")
	}
	r := C.reshard_plan_request_t{
		struct_size:    C.size_t(C.sizeof_reshard_plan_request_t),
		scope:          C.reshard_plan_scope_t(req.Scope),
		process:        C.int32_t(req.Process),
		global_stats:   1,
		max_plan_bytes: C.int64_t(req.MaxPlanBytes),
	}
	if req.NoGlobalStats {
		r.global_stats = 0
	}
	var out *C.reshard_plan_t
	err := check(C.reshard_plan_create(in.ptr, &r, &out))
	keep(in)
	if err != nil {
		return nil, err
	}
	return newPlan(out), nil
}

// PlanFromBytes verifies plan bytes (FlatBuffers verifier, then semantic
// checks: indices, boxes, sizes, statistics, fingerprint) and decodes them.
// Untrusted bytes are safe: any defect is an error. b is not retained.
//
// Errors: Corrupt naming what failed.
func PlanFromBytes(b []byte) (*Plan, error) {
	var out *C.reshard_plan_t
	if err := check(C.reshard_plan_deserialize(bytesPtr(b), C.size_t(len(b)), &out)); err != nil {
		return nil, err
	}
	return newPlan(out), nil
}

// VerifyPlanBytes verifies plan bytes exactly as PlanFromBytes does,
// without keeping a plan.
func VerifyPlanBytes(b []byte) error {
	return check(C.reshard_plan_verify_bytes(bytesPtr(b), C.size_t(len(b))))
}

// cKey copies a MAC key into C memory (C never sees a Go pointer inside a
// struct); free it with C.free. An empty key stays non-NULL with size 0, so
// that the library reports it as empty.
func cKey(key []byte) (unsafe.Pointer, C.size_t) {
	p := C.malloc(C.size_t(len(key) + 1))
	if len(key) > 0 {
		copy(unsafe.Slice((*byte)(p), len(key)), key)
	}
	return p, C.size_t(len(key))
}

func deserializeOptions(key []byte) (*C.reshard_deserialize_options_t, func()) {
	ptr, n := cKey(key)
	o := C.reshard_deserialize_options_t{struct_size: C.size_t(C.sizeof_reshard_deserialize_options_t), key: ptr, key_size: n}
	return &o, func() { C.free(ptr) }
}

// PlanFromSignedBytes is PlanFromBytes after checking the bytes' MAC: an
// HMAC-SHA-256 under key (16 to 1024 bytes) that SignedBytes appended.
// b and key are not retained.
//
// Errors: InvalidArgument naming options->key_size (key empty, too short,
// too long); Corrupt "mac: missing" (unsigned bytes) or "mac: does not
// match" (another key, or bytes edited after signing); those of
// PlanFromBytes.
func PlanFromSignedBytes(b, key []byte) (*Plan, error) {
	o, free := deserializeOptions(key)
	defer free()
	var out *C.reshard_plan_t
	if err := check(C.reshard_plan_deserialize_with_options(bytesPtr(b), C.size_t(len(b)), o, &out)); err != nil {
		return nil, err
	}
	return newPlan(out), nil
}

// VerifySignedPlanBytes verifies plan bytes exactly as PlanFromSignedBytes
// does, without keeping a plan (then read them with ViewPlan).
func VerifySignedPlanBytes(b, key []byte) error {
	o, free := deserializeOptions(key)
	defer free()
	return check(C.reshard_plan_verify_bytes_with_options(bytesPtr(b), C.size_t(len(b)), o))
}

func (p *Plan) live() (*C.reshard_plan_t, error) {
	if p == nil || p.ptr == nil {
		return nil, closedError("plan")
	}
	return p.ptr, nil
}

func (p *Plan) mustLive() *C.reshard_plan_t {
	if p == nil || p.ptr == nil {
		panic("reshard: Plan used after Close")
	}
	return p.ptr
}

// Bytes serializes the plan with every part it holds (FlatBuffers,
// schema/plan.fbs). Deterministic.
func (p *Plan) Bytes() ([]byte, error) {
	o := C.reshard_serialize_options_t{struct_size: C.size_t(C.sizeof_reshard_serialize_options_t), all_parts: 1}
	return p.serialize(&o)
}

// BytesForProcess serializes only the part of process (a worker's bytes).
//
// Errors: OutOfRange when the plan holds no part for it.
func (p *Plan) BytesForProcess(process int32) ([]byte, error) {
	o := C.reshard_serialize_options_t{struct_size: C.size_t(C.sizeof_reshard_serialize_options_t), all_parts: 0, process: C.int32_t(process)}
	return p.serialize(&o)
}

// SignedBytes is Bytes followed by a 48-byte trailer carrying an
// HMAC-SHA-256 of them under key (16 to 1024 bytes; docs/design.md §4).
// Readers without a key ignore the trailer; PlanFromSignedBytes requires it.
//
// Errors: InvalidArgument naming options->key_size (key empty, too short,
// too long).
func (p *Plan) SignedBytes(key []byte) ([]byte, error) {
	ptr, n := cKey(key)
	defer C.free(ptr)
	o := C.reshard_serialize_options_t{struct_size: C.size_t(C.sizeof_reshard_serialize_options_t), all_parts: 1, key: ptr, key_size: n}
	return p.serialize(&o)
}

// SignedBytesForProcess is BytesForProcess, signed as SignedBytes.
func (p *Plan) SignedBytesForProcess(process int32, key []byte) ([]byte, error) {
	ptr, n := cKey(key)
	defer C.free(ptr)
	o := C.reshard_serialize_options_t{struct_size: C.size_t(C.sizeof_reshard_serialize_options_t), all_parts: 0, process: C.int32_t(process), key: ptr, key_size: n}
	return p.serialize(&o)
}

func (p *Plan) serialize(o *C.reshard_serialize_options_t) ([]byte, error) {
	ptr, err := p.live()
	if err != nil {
		return nil, err
	}
	var buf *C.reshard_buffer_t
	err = check(C.reshard_plan_serialize(ptr, o, &buf))
	keep(p)
	if err != nil {
		return nil, err
	}
	defer C.reshard_buffer_destroy(buf)
	return C.GoBytes(C.reshard_buffer_data(buf), C.int(C.reshard_buffer_size(buf))), nil
}

// Fingerprint is the hash of the plan's canonical inputs and options.
func (p *Plan) Fingerprint() uint64 {
	var f C.uint64_t
	mustOK(C.reshard_plan_fingerprint(p.mustLive(), &f), "reshard_plan_fingerprint")
	keep(p)
	return uint64(f)
}

// Stats returns the global statistics.
//
// Errors: Unsupported for a plan made with NoGlobalStats.
func (p *Plan) Stats() (PlanStats, error) {
	ptr, err := p.live()
	if err != nil {
		return PlanStats{}, err
	}
	s := C.reshard_plan_stats_t{struct_size: C.size_t(C.sizeof_reshard_plan_stats_t)}
	err = check(C.reshard_plan_stats(ptr, &s))
	keep(p)
	if err != nil {
		return PlanStats{}, err
	}
	return PlanStats{
		NetworkBytes: int64(s.network_bytes), LocalBytes: int64(s.local_bytes),
		CrossHostBytes: int64(s.cross_host_bytes), CrossProcessBytes: int64(s.cross_process_bytes),
		MaxSendBytes: int64(s.max_send_bytes), MaxRecvBytes: int64(s.max_recv_bytes),
		Messages: int64(s.messages), Pieces: int64(s.pieces), Rounds: int64(s.rounds),
		PeakStagingBytes:       int64(s.peak_staging_bytes),
		LowerBoundNetworkBytes: int64(s.lower_bound_network_bytes),
		LowerBoundMaxSendBytes: int64(s.lower_bound_max_send_bytes),
		LowerBoundMaxRecvBytes: int64(s.lower_bound_max_recv_bytes),
		CostSeconds:            float64(s.cost_seconds), LowerBoundCostSeconds: float64(s.lower_bound_cost_seconds),
		PlanSeconds: float64(s.plan_seconds), NumDevices: uint64(s.num_devices),
		Stages: int64(s.stages), MaxHostSendBytes: int64(s.max_host_send_bytes),
		MaxHostRecvBytes:           int64(s.max_host_recv_bytes),
		LowerBoundCrossHostBytes:   int64(s.lower_bound_cross_host_bytes),
		LowerBoundMaxHostSendBytes: int64(s.lower_bound_max_host_send_bytes),
		LowerBoundMaxHostRecvBytes: int64(s.lower_bound_max_host_recv_bytes),
		LowerBoundBinding:          int32(s.lower_bound_binding),
		LowerBoundBindingID:        int64(s.lower_bound_binding_id),
		ForwardedBytes:             int64(s.forwarded_bytes),
		MaxScratchBytes:            int64(s.max_scratch_bytes),
	}, nil
}

// DeviceTraffic returns the traffic of the index-th device (sorted by id).
//
// Errors: OutOfRange, Unsupported (no statistics).
func (p *Plan) DeviceTraffic(index int) (DeviceTraffic, error) {
	ptr, err := p.live()
	if err != nil {
		return DeviceTraffic{}, err
	}
	if index < 0 {
		return DeviceTraffic{}, errorf(OutOfRange, "index: %d is negative", index)
	}
	t := C.reshard_device_traffic_t{struct_size: C.size_t(C.sizeof_reshard_device_traffic_t)}
	err = check(C.reshard_plan_device_traffic(ptr, C.size_t(index), &t))
	keep(p)
	if err != nil {
		return DeviceTraffic{}, err
	}
	return DeviceTraffic{Device: int64(t.device), SendBytes: int64(t.send_bytes), RecvBytes: int64(t.recv_bytes),
		LocalBytes: int64(t.local_bytes), SendMessages: int64(t.send_messages), RecvMessages: int64(t.recv_messages)}, nil
}

// AllDeviceTraffic returns the traffic of every device, sorted by id.
func (p *Plan) AllDeviceTraffic() ([]DeviceTraffic, error) {
	s, err := p.Stats()
	if err != nil {
		return nil, err
	}
	out := make([]DeviceTraffic, s.NumDevices)
	for i := range out {
		if out[i], err = p.DeviceTraffic(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// NumTensors is the number of tensors.
func (p *Plan) NumTensors() int {
	var n C.size_t
	mustOK(C.reshard_plan_num_tensors(p.mustLive(), &n), "reshard_plan_num_tensors")
	keep(p)
	return int(n)
}

func checkIndex(what string, i int) error {
	if i < 0 {
		return errorf(OutOfRange, "%s: %d is negative", what, i)
	}
	return nil
}

// Tensor returns the name, dtypes and shape of tensor t.
//
// Errors: OutOfRange ("tensor: 5 >= 3 tensors").
func (p *Plan) Tensor(t int) (TensorInfo, error) {
	ptr, err := p.live()
	if err != nil {
		return TensorInfo{}, err
	}
	if err := checkIndex("tensor", t); err != nil {
		return TensorInfo{}, err
	}
	defer keep(p)
	var name *C.char
	var dtype, dstDType C.reshard_dtype_t
	var rank C.size_t
	shape := make([]int64, C.RESHARD_MAX_RANK)
	ct := C.size_t(t)
	if err := check(C.reshard_plan_tensor_name(ptr, ct, &name)); err != nil {
		return TensorInfo{}, err
	}
	mustOK(C.reshard_plan_tensor_dtype(ptr, ct, &dtype), "reshard_plan_tensor_dtype")
	mustOK(C.reshard_plan_tensor_dst_dtype(ptr, ct, &dstDType), "reshard_plan_tensor_dst_dtype")
	mustOK(C.reshard_plan_tensor_rank(ptr, ct, &rank), "reshard_plan_tensor_rank")
	mustOK(C.reshard_plan_tensor_shape(ptr, ct, int64s(shape)), "reshard_plan_tensor_shape")
	var scaleTensor C.int64_t
	block := make([]int64, C.RESHARD_MAX_RANK)
	mustOK(C.reshard_plan_tensor_scales(ptr, ct, &scaleTensor, int64s(block)), "reshard_plan_tensor_scales")
	info := TensorInfo{Name: C.GoString(name), DType: DType(dtype), DstDType: DType(dstDType), Shape: shape[:rank], ScaleTensor: int(scaleTensor)}
	if scaleTensor >= 0 {
		info.ScaleBlock = block[:rank]
	}
	return info, nil
}

// Tensors returns every tensor, in plan order.
func (p *Plan) Tensors() []TensorInfo {
	out := make([]TensorInfo, p.NumTensors())
	for i := range out {
		t, err := p.Tensor(i)
		if err != nil {
			panic(err)
		}
		out[i] = t
	}
	return out
}

// NumEntries is the number of entries (device shards) of a side of tensor t.
func (p *Plan) NumEntries(t int, side Side) (int, error) {
	ptr, err := p.live()
	if err != nil {
		return 0, err
	}
	if err := checkIndex("tensor", t); err != nil {
		return 0, err
	}
	var n C.size_t
	err = check(C.reshard_plan_tensor_num_entries(ptr, C.size_t(t), C.reshard_side_t(side), &n))
	keep(p)
	return int(n), err
}

// Entry returns entry e of a side of tensor t. Its shard buffer is dense,
// row-major, of exactly the entry's box.
//
// Errors: OutOfRange (tensor, entry), InvalidArgument (side).
func (p *Plan) Entry(t int, side Side, e int) (LayoutEntry, error) {
	ptr, err := p.live()
	if err != nil {
		return LayoutEntry{}, err
	}
	if err := checkIndex("tensor", t); err != nil {
		return LayoutEntry{}, err
	}
	if err := checkIndex("entry", e); err != nil {
		return LayoutEntry{}, err
	}
	defer keep(p)
	var rank C.size_t
	if err := check(C.reshard_plan_tensor_rank(ptr, C.size_t(t), &rank)); err != nil {
		return LayoutEntry{}, err
	}
	lo := make([]int64, C.RESHARD_MAX_RANK)
	hi := make([]int64, C.RESHARD_MAX_RANK)
	var device C.int64_t
	var summand C.int32_t
	if err := check(C.reshard_plan_tensor_entry(ptr, C.size_t(t), C.reshard_side_t(side), C.size_t(e), &device, &summand, int64s(lo), int64s(hi))); err != nil {
		return LayoutEntry{}, err
	}
	return LayoutEntry{Device: int64(device), Summand: int32(summand), Lo: lo[:rank], Hi: hi[:rank]}, nil
}

// Entries returns every entry of a side of tensor t, in buffer order.
func (p *Plan) Entries(t int, side Side) ([]LayoutEntry, error) {
	n, err := p.NumEntries(t, side)
	if err != nil {
		return nil, err
	}
	out := make([]LayoutEntry, n)
	for e := range out {
		if out[e], err = p.Entry(t, side, e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ShardBytes is the byte size of the shard buffer of entry e of a side of
// tensor t (its box's volume times the dtype size).
func (p *Plan) ShardBytes(t int, side Side, e int) (int, error) {
	info, err := p.Tensor(t)
	if err != nil {
		return 0, err
	}
	entry, err := p.Entry(t, side, e)
	if err != nil {
		return 0, err
	}
	return int(entry.Volume()) * info.DType.Size(), nil
}

// Partial returns the number of summands (1 unless partial) and the reduce
// op of a side of tensor t.
func (p *Plan) Partial(t int, side Side) (int32, ReduceOp, error) {
	ptr, err := p.live()
	if err != nil {
		return 0, 0, err
	}
	if err := checkIndex("tensor", t); err != nil {
		return 0, 0, err
	}
	var n C.int32_t
	var op C.reshard_reduce_op_t
	err = check(C.reshard_plan_tensor_partial(ptr, C.size_t(t), C.reshard_side_t(side), &n, &op))
	keep(p)
	return int32(n), ReduceOp(op), err
}

// EntryOfDevice returns the entry device holds on a side of tensor t, and
// whether it holds one.
func (p *Plan) EntryOfDevice(t int, side Side, device int64) (int, bool, error) {
	ptr, err := p.live()
	if err != nil {
		return 0, false, err
	}
	if err := checkIndex("tensor", t); err != nil {
		return 0, false, err
	}
	var e C.size_t
	var found C.int32_t
	err = check(C.reshard_plan_entry_of_device(ptr, C.size_t(t), C.reshard_side_t(side), C.int64_t(device), &e, &found))
	keep(p)
	return int(e), found != 0, err
}

// Processes returns the processes owning at least one device, sorted.
func (p *Plan) Processes() []int32 {
	ptr := p.mustLive()
	defer keep(p)
	var n C.size_t
	mustOK(C.reshard_plan_num_processes(ptr, &n), "reshard_plan_num_processes")
	out := make([]int32, n)
	for i := range out {
		var v C.int32_t
		mustOK(C.reshard_plan_process(ptr, C.size_t(i), &v), "reshard_plan_process")
		out[i] = int32(v)
	}
	return out
}

// HasPart reports whether the plan holds the part of process.
func (p *Plan) HasPart(process int32) bool {
	var has C.int32_t
	mustOK(C.reshard_plan_has_part(p.mustLive(), C.int32_t(process), &has), "reshard_plan_has_part")
	keep(p)
	return has != 0
}

// PartInfo returns the sizes of the part of process.
//
// Errors: OutOfRange ("process: this plan holds no part for process 3").
func (p *Plan) PartInfo(process int32) (PartInfo, error) {
	ptr, err := p.live()
	if err != nil {
		return PartInfo{}, err
	}
	i := C.reshard_part_info_t{struct_size: C.size_t(C.sizeof_reshard_part_info_t)}
	err = check(C.reshard_plan_part_info(ptr, C.int32_t(process), &i))
	keep(p)
	if err != nil {
		return PartInfo{}, err
	}
	return PartInfo{NumLocalPieces: uint64(i.num_local_pieces), NumSends: uint64(i.num_sends),
		NumSendPieces: uint64(i.num_send_pieces), NumRecvs: uint64(i.num_recvs), NumRecvPieces: uint64(i.num_recv_pieces),
		NumScratch: uint64(i.num_scratch)}, nil
}

// Scratch returns scratch index of process's part (sorted by tensor, device,
// then box).
//
// Errors: OutOfRange (process, index).
func (p *Plan) Scratch(process int32, index int) (Scratch, error) {
	ptr, err := p.live()
	if err != nil {
		return Scratch{}, err
	}
	if err := checkIndex("index", index); err != nil {
		return Scratch{}, err
	}
	defer keep(p)
	c := C.reshard_scratch_t{struct_size: C.size_t(C.sizeof_reshard_scratch_t)}
	lo := make([]int64, C.RESHARD_MAX_RANK)
	hi := make([]int64, C.RESHARD_MAX_RANK)
	if err := check(C.reshard_plan_part_scratch(ptr, C.int32_t(process), C.size_t(index), &c, int64s(lo), int64s(hi))); err != nil {
		return Scratch{}, err
	}
	var rank C.size_t
	mustOK(C.reshard_plan_tensor_rank(ptr, C.size_t(c.tensor), &rank), "reshard_plan_tensor_rank")
	return Scratch{Tensor: uint64(c.tensor), Device: int64(c.device), Bytes: int64(c.bytes),
		Lo: lo[:rank], Hi: hi[:rank]}, nil
}

// Scratches returns every scratch of process's part.
func (p *Plan) Scratches(process int32) ([]Scratch, error) {
	info, err := p.PartInfo(process)
	if err != nil {
		return nil, err
	}
	out := make([]Scratch, info.NumScratch)
	for i := range out {
		if out[i], err = p.Scratch(process, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Message returns message index of the sends or receives of process's part.
func (p *Plan) Message(process int32, dir Direction, index int) (Message, error) {
	ptr, err := p.live()
	if err != nil {
		return Message{}, err
	}
	if err := checkIndex("index", index); err != nil {
		return Message{}, err
	}
	m := C.reshard_message_t{struct_size: C.size_t(C.sizeof_reshard_message_t)}
	err = check(C.reshard_plan_part_message(ptr, C.int32_t(process), C.reshard_direction_t(dir), C.size_t(index), &m))
	keep(p)
	if err != nil {
		return Message{}, err
	}
	return Message{SrcDevice: int64(m.src_device), DstDevice: int64(m.dst_device), Round: uint64(m.round),
		FirstPiece: uint64(m.first_piece), NumPieces: uint64(m.num_pieces), Bytes: int64(m.bytes),
		Stage: uint64(m.stage), Sub: uint64(m.sub)}, nil
}

// Messages returns every message of one direction of process's part.
func (p *Plan) Messages(process int32, dir Direction) ([]Message, error) {
	info, err := p.PartInfo(process)
	if err != nil {
		return nil, err
	}
	n := info.NumSends
	if dir == Recv {
		n = info.NumRecvs
	}
	out := make([]Message, n)
	for i := range out {
		if out[i], err = p.Message(process, dir, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Piece returns piece index of a piece list of process's part.
func (p *Plan) Piece(process int32, list PieceList, index int) (Piece, error) {
	ptr, err := p.live()
	if err != nil {
		return Piece{}, err
	}
	if err := checkIndex("index", index); err != nil {
		return Piece{}, err
	}
	defer keep(p)
	c := C.reshard_piece_t{struct_size: C.size_t(C.sizeof_reshard_piece_t)}
	lo := make([]int64, C.RESHARD_MAX_RANK)
	hi := make([]int64, C.RESHARD_MAX_RANK)
	if err := check(C.reshard_plan_part_piece(ptr, C.int32_t(process), C.reshard_piece_list_t(list), C.size_t(index), &c, int64s(lo), int64s(hi))); err != nil {
		return Piece{}, err
	}
	var rank C.size_t
	mustOK(C.reshard_plan_tensor_rank(ptr, C.size_t(c.tensor), &rank), "reshard_plan_tensor_rank")
	return Piece{Tensor: uint64(c.tensor), SrcEntry: uint64(c.src_entry), DstEntry: uint64(c.dst_entry),
		SrcDevice: int64(c.src_device), DstDevice: int64(c.dst_device), Bytes: int64(c.bytes),
		Stage: uint64(c.stage), Lo: lo[:rank], Hi: hi[:rank]}, nil
}

// Pieces returns every piece of one list of process's part.
func (p *Plan) Pieces(process int32, list PieceList) ([]Piece, error) {
	info, err := p.PartInfo(process)
	if err != nil {
		return nil, err
	}
	var n uint64
	switch list {
	case LocalPieces:
		n = info.NumLocalPieces
	case SendPieces:
		n = info.NumSendPieces
	default:
		n = info.NumRecvPieces
	}
	out := make([]Piece, n)
	for i := range out {
		if out[i], err = p.Piece(process, list, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// OracleFillSource fills source entry e of tensor t with the verification
// oracle's values (each element encodes its global index).
//
// Errors: InvalidArgument (wrong size), OutOfRange (tensor, entry).
func (p *Plan) OracleFillSource(t, e int, data []byte) error {
	ptr, err := p.live()
	if err != nil {
		return err
	}
	if err := checkIndex("tensor", t); err != nil {
		return err
	}
	if err := checkIndex("entry", e); err != nil {
		return err
	}
	err = check(C.reshard_oracle_fill_source(ptr, C.size_t(t), C.size_t(e), bytesPtr(data), C.size_t(len(data))))
	keep(p)
	return err
}

// OracleCheckDestination checks destination entry e of tensor t (not
// partial) against the oracle and returns the number of wrong elements.
func (p *Plan) OracleCheckDestination(t, e int, data []byte) (int64, error) {
	ptr, err := p.live()
	if err != nil {
		return 0, err
	}
	if err := checkIndex("tensor", t); err != nil {
		return 0, err
	}
	if err := checkIndex("entry", e); err != nil {
		return 0, err
	}
	var wrong C.int64_t
	err = check(C.reshard_oracle_check_destination(ptr, C.size_t(t), C.size_t(e), bytesPtr(data), C.size_t(len(data)), &wrong))
	keep(p)
	return int64(wrong), err
}

// Close releases the plan. Idempotent.
func (p *Plan) Close() error {
	if p != nil && p.ptr != nil {
		C.reshard_plan_destroy(p.ptr)
		p.ptr = nil
		runtime.SetFinalizer(p, nil)
	}
	return nil
}
