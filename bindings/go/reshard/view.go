package reshard

import (
	"github.com/reshard/reshard/bindings/go/reshard/fb"
)

// Plan.required_features bits (schema/plan.fbs).
const (
	// PlanFeatureStages: some message is in a stage above 0, and the pieces
	// of such a message read the DESTINATION entry SrcEntry of their tensor
	// (what an earlier stage wrote there).
	PlanFeatureStages uint64 = 1
	// PlanFeatureScratch: some part holds scratch buffers (ProcessPart
	// ScratchTensor ...: planner-sized staging of reduction trees) or has
	// pieces naming one (SrcEntry or DstEntry 0xFFFFFFFE).
	PlanFeatureScratch uint64 = 2
	// PlanFeatureLateSummands: some piece of a message in a stage above 0
	// writes a scratch (DstEntry 0xFFFFFFFE) from an entry (SrcEntry not
	// 0xFFFFFFFE): that entry is of the SOURCE layout, a summand, as in
	// stage 0 (a band of a pre-reduction under a staging budget, written in
	// one stage and read in the next).
	PlanFeatureLateSummands uint64 = 4
	// PlanFeatureCasts: some tensor's destination has another dtype than
	// its source (TensorView.DstDType; docs/spec.md "Casts"): its
	// destination buffers hold DstDType, and each of its pieces moves the
	// smaller of the two element sizes (TensorView.WireSize).
	PlanFeatureCasts uint64 = 8
	// PlanFeatureBlockScales: some tensor has block scales
	// (TensorView.ScaleTensor, ScaleBlock; docs/spec.md "Block scales"): its
	// fp8 destination holds cast(x / scale of its block), and its scale
	// tensor, another tensor of the plan, the scales (f32). Executors
	// compute the scale tensor's source; a caller gives no source buffers
	// for it.
	PlanFeatureBlockScales uint64 = 16
	// PlanFeatureMxScales: some scale tensor has dtype E8M0 (MXFP8: block
	// [1, ..., 1, 32], OCP MX's rule; docs/spec.md "Block scales"). Read
	// like any other dtype.
	PlanFeatureMxScales uint64 = 32
	// PlanFeatureStaging: some scratch belongs to a tensor whose source is
	// not partial (docs/wire.md "Staging"): a copy-staging buffer, read
	// through the same scratch columns, written once per element in stage 0
	// from source entries and copied into destination entries in later
	// stages (no reduction: it holds copies, bit for bit).
	PlanFeatureStaging uint64 = 64
	// PlanFeatureSubs: some message has a sub above 0 (Message.Sub): several
	// messages of one stage, round, source and destination, which flow side
	// by side, each taking its own run of the pieces.
	PlanFeatureSubs uint64 = 128
	// KnownPlanFeatures are the bits this package's reader understands;
	// ViewPlan rejects bytes that require any other.
	KnownPlanFeatures = PlanFeatureStages | PlanFeatureScratch | PlanFeatureLateSummands | PlanFeatureCasts | PlanFeatureBlockScales | PlanFeatureMxScales | PlanFeatureStaging | PlanFeatureSubs
)

// checkPlanFeatures rejects a plan that requires a feature this package
// cannot read. The C verifier makes the same check against the bits the
// library knows; a newer library may know more than this package.
func checkPlanFeatures(root *fb.Plan) error {
	if unknown := root.RequiredFeatures() &^ KnownPlanFeatures; unknown != 0 {
		return errorf(Corrupt, "required_features: unknown feature bits %d (this reader knows %d: stages, scratch, late summands, casts, block scales, MX scales, staging, subs)",
			unknown, KnownPlanFeatures)
	}
	return nil
}

// PlanView is a read-only view of plan bytes through the code flatc
// generated from schema/plan.fbs (package fb). Go's FlatBuffers runtime has
// no verifier, so ViewPlan first runs the C verifier (FlatBuffers verifier
// and semantic checks); only accepted bytes are read. The view reads the
// bytes in place: do not modify them while it is in use.
type PlanView struct {
	bytes []byte
	root  *fb.Plan
}

// ViewPlan verifies b with the C verifier and views it.
//
// Errors: Corrupt naming what failed, also for bytes that require a
// feature outside KnownPlanFeatures.
func ViewPlan(b []byte) (*PlanView, error) {
	if err := VerifyPlanBytes(b); err != nil {
		return nil, err
	}
	root := fb.GetRootAsPlan(b, 0)
	if err := checkPlanFeatures(root); err != nil {
		return nil, err
	}
	return &PlanView{bytes: b, root: root}, nil
}

// Raw is the generated root table, for fields the view has no accessor for.
func (v *PlanView) Raw() *fb.Plan { return v.root }

// Bytes are the bytes viewed.
func (v *PlanView) Bytes() []byte { return v.bytes }

// Version is the major format version (1).
func (v *PlanView) Version() uint32 { return v.root.Version() }

// Fingerprint is the plan's fingerprint.
func (v *PlanView) Fingerprint() uint64 { return v.root.Fingerprint() }

// RequiredFeatures are the feature bits a reader must understand:
// PlanFeatureStages when some message is in a stage above 0.
func (v *PlanView) RequiredFeatures() uint64 { return v.root.RequiredFeatures() }

// Relays reports whether the plan was made with PlanOptions.Relays (false
// for bytes written before stages, which had none).
func (v *PlanView) Relays() bool {
	o := v.root.Options(nil)
	return o != nil && o.Relays()
}

// NumTensors is the number of tensors.
func (v *PlanView) NumTensors() int { return v.root.TensorsLength() }

// TensorView is one tensor of a PlanView.
type TensorView struct {
	t fb.Tensor
}

// Tensor returns tensor i, or false past the end.
func (v *PlanView) Tensor(i int) (TensorView, bool) {
	var t TensorView
	if i < 0 || i >= v.root.TensorsLength() || !v.root.Tensors(&t.t, i) {
		return TensorView{}, false
	}
	return t, true
}

// Name is the tensor's name.
func (t TensorView) Name() string { return string(t.t.Name()) }

// DType is the tensor's element type: its source buffers'.
func (t TensorView) DType() DType { return DType(t.t.Dtype()) }

// DstDType is the element type of the tensor's destination buffers: DType
// unless the plan casts the tensor in flight (PlanFeatureCasts).
func (t TensorView) DstDType() DType {
	if d := t.t.DstDtype(); d != fb.DTypeInvalid {
		return DType(d)
	}
	return t.DType()
}

// WireSize is the bytes per element of the tensor in every message: the
// smaller of DType's and DstDType's sizes (a cast that narrows runs on the
// sending side, one that widens on the receiving side).
func (t TensorView) WireSize() int {
	if s, d := t.DType().Size(), t.DstDType().Size(); d < s {
		return d
	}
	return t.DType().Size()
}

// ScaleTensor is the index of the tensor that holds this tensor's block
// scales, and false when it has none (PlanFeatureBlockScales).
func (t TensorView) ScaleTensor() (int, bool) {
	if s := t.t.ScaleTensor(); s >= 0 {
		return int(s), true
	}
	return -1, false
}

// ScaleBlock is the block of this tensor's scales, its extent per dim; nil
// without scales.
func (t TensorView) ScaleBlock() []int64 {
	if t.t.ScaleBlockLength() == 0 {
		return nil
	}
	out := make([]int64, t.t.ScaleBlockLength())
	for i := range out {
		out[i] = t.t.ScaleBlock(i)
	}
	return out
}

// Shape is the tensor's global shape.
func (t TensorView) Shape() []int64 {
	out := make([]int64, t.t.ShapeLength())
	for i := range out {
		out[i] = t.t.Shape(i)
	}
	return out
}

// Partial returns the number of summands and reduce op of a side.
func (t TensorView) Partial(side Side) (int32, ReduceOp) {
	var l *fb.Layout
	if side == Src {
		l = t.t.Src(nil)
	} else {
		l = t.t.Dst(nil)
	}
	if l == nil {
		return 1, Sum
	}
	return l.NumSummands(), ReduceOp(l.ReduceOp())
}

// Raw is the generated table.
func (t TensorView) Raw() *fb.Tensor { return &t.t }

// Stats returns the global statistics, and false when the bytes carry none.
func (v *PlanView) Stats() (PlanStats, bool) {
	if !v.root.HasStats() {
		return PlanStats{}, false
	}
	s := v.root.Stats(nil)
	if s == nil {
		return PlanStats{}, false
	}
	return PlanStats{
		NetworkBytes: s.NetworkBytes(), LocalBytes: s.LocalBytes(), CrossHostBytes: s.CrossHostBytes(),
		CrossProcessBytes: s.CrossProcessBytes(), MaxSendBytes: s.MaxSendBytes(), MaxRecvBytes: s.MaxRecvBytes(),
		Messages: s.Messages(), Pieces: s.Pieces(), Rounds: int64(s.Rounds()), PeakStagingBytes: s.PeakStagingBytes(),
		LowerBoundNetworkBytes: s.LowerBoundNetworkBytes(), LowerBoundMaxSendBytes: s.LowerBoundMaxSendBytes(),
		LowerBoundMaxRecvBytes: s.LowerBoundMaxRecvBytes(), CostSeconds: s.CostSeconds(),
		LowerBoundCostSeconds: s.LowerBoundCostSeconds(), PlanSeconds: s.PlanSeconds(),
		NumDevices: uint64(s.PerDeviceLength()),
		Stages:     int64(s.Stages()), MaxHostSendBytes: s.MaxHostSendBytes(),
		MaxHostRecvBytes:           s.MaxHostRecvBytes(),
		LowerBoundCrossHostBytes:   s.LowerBoundCrossHostBytes(),
		LowerBoundMaxHostSendBytes: s.LowerBoundMaxHostSendBytes(),
		LowerBoundMaxHostRecvBytes: s.LowerBoundMaxHostRecvBytes(),
		LowerBoundBinding:          int32(s.LowerBoundBinding()),
		LowerBoundBindingID:        s.LowerBoundBindingId(),
		ForwardedBytes:             s.ForwardedBytes(),
	}, true
}

// DeviceTraffic returns the per-device traffic of the statistics.
func (v *PlanView) DeviceTraffic() []DeviceTraffic {
	s := v.root.Stats(nil)
	if s == nil {
		return nil
	}
	out := make([]DeviceTraffic, s.PerDeviceLength())
	var d fb.DeviceTraffic
	for i := range out {
		s.PerDevice(&d, i)
		out[i] = DeviceTraffic{Device: d.Device(), SendBytes: d.SendBytes(), RecvBytes: d.RecvBytes(),
			LocalBytes: d.LocalBytes(), SendMessages: d.SendMessages(), RecvMessages: d.RecvMessages()}
	}
	return out
}

// Processes returns the processes owning a device of the plan, sorted.
func (v *PlanView) Processes() []int32 {
	out := make([]int32, v.root.ProcessesLength())
	for i := range out {
		out[i] = v.root.Processes(i)
	}
	return out
}

// PartView is one process part of a PlanView, stored as columns.
type PartView struct {
	p fb.ProcessPart
}

// Parts returns the process parts the bytes carry, by process.
func (v *PlanView) Parts() []PartView {
	out := make([]PartView, v.root.PartsLength())
	for i := range out {
		v.root.Parts(&out[i].p, i)
	}
	return out
}

// Process is the part's process.
func (p PartView) Process() int32 { return p.p.Process() }

// NumScratch is the number of scratch buffers the part holds (columns
// ScratchTensor, ScratchDevice, ScratchLo, ScratchHi of the raw table).
func (p PartView) NumScratch() int { return p.p.ScratchTensorLength() }

func piecesLen(x *fb.Pieces) int {
	if x == nil {
		return 0
	}
	return x.TensorLength()
}

func messagesLen(m *fb.Messages) int {
	if m == nil {
		return 0
	}
	return m.BytesLength()
}

func messagesBytes(m *fb.Messages) int64 {
	var sum int64
	for i := 0; i < messagesLen(m); i++ {
		sum += m.Bytes(i)
	}
	return sum
}

// NumLocalPieces is the number of pieces copied within a device.
func (p PartView) NumLocalPieces() int { return piecesLen(p.p.Local(nil)) }

// NumSends is the number of messages sent.
func (p PartView) NumSends() int { return messagesLen(p.p.Sends(nil)) }

// NumSendPieces is the number of pieces of the sent messages.
func (p PartView) NumSendPieces() int { return piecesLen(p.p.SendPieces(nil)) }

// NumRecvs is the number of messages received.
func (p PartView) NumRecvs() int { return messagesLen(p.p.Recvs(nil)) }

// NumRecvPieces is the number of pieces of the received messages.
func (p PartView) NumRecvPieces() int { return piecesLen(p.p.RecvPieces(nil)) }

// SendBytes is the total packed size of the sent messages.
func (p PartView) SendBytes() int64 { return messagesBytes(p.p.Sends(nil)) }

// RecvBytes is the total packed size of the received messages.
func (p PartView) RecvBytes() int64 { return messagesBytes(p.p.Recvs(nil)) }

// messagesOf reads the columns of m; Stage and Sub are 0 where their column
// is absent (plans without stages or subs).
func messagesOf(m *fb.Messages) []Message {
	out := make([]Message, messagesLen(m))
	for i := range out {
		out[i] = Message{SrcDevice: m.SrcDevice(i), DstDevice: m.DstDevice(i), Round: uint64(m.Round(i)),
			FirstPiece: m.FirstPiece(i), NumPieces: m.NumPieces(i), Bytes: m.Bytes(i)}
		if i < m.StageLength() {
			out[i].Stage = uint64(m.Stage(i))
		}
		if i < m.SubLength() {
			out[i].Sub = uint64(m.Sub(i))
		}
	}
	return out
}

// Sends returns the sent messages, read from the columns (ordered by
// stage, round, destination, source).
func (p PartView) Sends() []Message { return messagesOf(p.p.Sends(nil)) }

// Recvs returns the received messages (ordered by stage, round, source,
// destination).
func (p PartView) Recvs() []Message { return messagesOf(p.p.Recvs(nil)) }

// Raw is the generated table.
func (p PartView) Raw() *fb.ProcessPart { return &p.p }
