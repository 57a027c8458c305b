package reshard_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/reshard/reshard/bindings/go/reshard"
	"github.com/reshard/reshard/bindings/go/reshard/fb"
)

// pipelineSpec is bench/specs/pipeline_2x2_replicated_dst.json, smaller: a
// 2x2 mesh on host 0 sends to a 2x2 mesh on host 1 whose layout replicates
// the tensor over y, so the two devices of each row of host 1 need the same
// box. 1.5 MiB: large enough that the relay's stage (one α) costs less than
// the NIC bytes it saves, so the single-hop guard keeps it.
const pipelineSpec = `{
  "meshes": {
    "stage0": {"axis_names": ["x", "y"], "shape": [2, 2], "devices": [0, 1, 2, 3],
               "processes": [0, 1, 2, 3], "hosts": [0, 0, 0, 0]},
    "stage1": {"axis_names": ["x", "y"], "shape": [2, 2], "devices": [4, 5, 6, 7],
               "processes": [4, 5, 6, 7], "hosts": [1, 1, 1, 1]}
  },
  "tensors": [
    {"name": "act", "shape": [4096, 96], "dtype": "f32",
     "src": {"mesh": "stage0", "spec": ["x", "y"]}, "dst": {"mesh": "stage1", "spec": ["x", null]}}
  ]
}`

const pipelineTensorBytes = 4096 * 96 * 4

func pipelinePlan(t testing.TB, relays bool) *reshard.Plan {
	t.Helper()
	in := must(reshard.PlanInputFromSpec([]byte(pipelineSpec)))(t)
	defer in.Close()
	o := reshard.DefaultPlanOptions()
	o.Relays = relays
	ok(t, in.SetOptions(o))
	return must(reshard.NewPlan(in))(t)
}

func hostOf(device int64) int64 { return device / 4 }

func TestRelaysAreOnByDefault(t *testing.T) {
	if !reshard.DefaultPlanOptions().Relays {
		t.Fatal("DefaultPlanOptions().Relays is false")
	}
	in := must(reshard.PlanInputFromSpec([]byte(pipelineSpec)))(t)
	defer in.Close()
	before := must(in.Fingerprint())(t)
	// A PlanOptions literal leaves Relays false: single-hop, another plan.
	o := reshard.DefaultPlanOptions()
	o.Relays = false
	ok(t, in.SetOptions(o))
	if must(in.Fingerprint())(t) == before {
		t.Fatal("Relays did not enter the fingerprint")
	}
	ok(t, in.SetOptions(reshard.DefaultPlanOptions()))
	if must(in.Fingerprint())(t) != before {
		t.Fatal("DefaultPlanOptions differ from the spec's defaults (relays on)")
	}
}

func TestRelaysForwardInsideTheDestinationHost(t *testing.T) {
	plan := pipelinePlan(t, true)
	defer plan.Close()
	s := must(plan.Stats())(t)
	if s.Stages != 2 || s.ForwardedBytes <= 0 || s.ForwardedBytes >= s.NetworkBytes {
		t.Fatalf("stats %+v", s)
	}
	if s.CrossHostBytes != s.NetworkBytes-s.ForwardedBytes || s.CrossHostBytes != pipelineTensorBytes {
		t.Fatalf("the tensor should enter host 1 once: %+v", s)
	}
	var forwarded int64
	relays := 0
	for _, proc := range plan.Processes() {
		sends := must(plan.Messages(proc, reshard.Send))(t)
		pieces := must(plan.Pieces(proc, reshard.SendPieces))(t)
		for i, m := range sends {
			if m.Stage > 1 {
				t.Fatalf("message %+v", m)
			}
			if i > 0 && (m.Stage < sends[i-1].Stage || m.Stage == sends[i-1].Stage && m.Round < sends[i-1].Round) {
				t.Fatal("sends are not ordered by stage, then round")
			}
			carried := pieces[m.FirstPiece : m.FirstPiece+m.NumPieces]
			for _, p := range carried {
				if p.Stage != m.Stage {
					t.Fatalf("piece %+v in a message of stage %d", p, m.Stage)
				}
			}
			if m.Stage == 0 {
				if hostOf(m.SrcDevice) != 0 || hostOf(m.DstDevice) != 1 {
					t.Fatalf("stage 0 message %+v", m)
				}
				for _, p := range carried {
					if e := must(plan.Entry(int(p.Tensor), reshard.Src, int(p.SrcEntry)))(t); e.Device != p.SrcDevice {
						t.Fatalf("stage 0 piece %+v reads source entry of device %d", p, e.Device)
					}
				}
				continue
			}
			// A relay inside host 1 reads the destination entry stage 0
			// wrote on the sending device.
			relays++
			forwarded += m.Bytes
			if hostOf(m.SrcDevice) != 1 || hostOf(m.DstDevice) != 1 {
				t.Fatalf("stage 1 message %+v", m)
			}
			for _, p := range carried {
				from := must(plan.Entry(int(p.Tensor), reshard.Dst, int(p.SrcEntry)))(t)
				to := must(plan.Entry(int(p.Tensor), reshard.Dst, int(p.DstEntry)))(t)
				if from.Device != p.SrcDevice || to.Device != p.DstDevice {
					t.Fatalf("relay piece %+v: destination entries on devices %d and %d", p, from.Device, to.Device)
				}
				for d := range p.Lo {
					if p.Lo[d] < from.Lo[d] || p.Hi[d] > from.Hi[d] || p.Lo[d] < to.Lo[d] || p.Hi[d] > to.Hi[d] {
						t.Fatalf("relay piece %+v outside %+v or %+v", p, from, to)
					}
				}
			}
		}
		recvs := must(plan.Messages(proc, reshard.Recv))(t)
		rpieces := must(plan.Pieces(proc, reshard.RecvPieces))(t)
		for _, m := range recvs {
			for _, p := range rpieces[m.FirstPiece : m.FirstPiece+m.NumPieces] {
				if p.Stage != m.Stage {
					t.Fatalf("received piece %+v in a message of stage %d", p, m.Stage)
				}
			}
		}
		for _, p := range must(plan.Pieces(proc, reshard.LocalPieces))(t) {
			if p.Stage != 0 {
				t.Fatalf("local piece %+v", p)
			}
		}
	}
	if relays == 0 || forwarded != s.ForwardedBytes {
		t.Fatalf("%d relay messages of %d bytes, stats say %d", relays, forwarded, s.ForwardedBytes)
	}
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	if r := must(ex.Verify(plan))(t); r.Mismatches != 0 || r.Elements == 0 {
		t.Fatalf("verify %+v", r)
	}
}

func TestWithoutRelaysEveryDeviceFetchesDirectly(t *testing.T) {
	plan := pipelinePlan(t, false)
	defer plan.Close()
	s := must(plan.Stats())(t)
	if s.Stages != 1 || s.ForwardedBytes != 0 || s.CrossHostBytes != 2*pipelineTensorBytes {
		t.Fatalf("stats %+v", s)
	}
	for _, proc := range plan.Processes() {
		for _, dir := range []reshard.Direction{reshard.Send, reshard.Recv} {
			for _, m := range must(plan.Messages(proc, dir))(t) {
				if m.Stage != 0 || hostOf(m.SrcDevice) != 0 || hostOf(m.DstDevice) != 1 {
					t.Fatalf("message %+v", m)
				}
			}
		}
	}
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	if r := must(ex.Verify(plan))(t); r.Mismatches != 0 {
		t.Fatalf("verify %+v", r)
	}
}

func TestPlanBytesCarryStages(t *testing.T) {
	for _, relays := range []bool{true, false} {
		plan := pipelinePlan(t, relays)
		b := must(plan.Bytes())(t)
		v := must(reshard.ViewPlan(b))(t)
		wantFeatures := uint64(0)
		if relays {
			wantFeatures = reshard.PlanFeatureStages
		}
		// Stages where relays are on; the relayed plan may also cut its
		// streams into sub-messages (where the estimate gains by them).
		features := v.RequiredFeatures()
		if v.Relays() != relays || features&reshard.PlanFeatureStages != wantFeatures ||
			features&^(reshard.PlanFeatureStages|reshard.PlanFeatureSubs) != 0 {
			t.Fatalf("relays %v: view says relays %v, features %d", relays, v.Relays(), features)
		}
		want := must(plan.Stats())(t)
		want.PlanSeconds = 0
		if got, has := v.Stats(); !has || got != want {
			t.Fatalf("view stats %+v, plan %+v", got, want)
		}
		staged := 0
		for _, part := range v.Parts() {
			sends := must(plan.Messages(part.Process(), reshard.Send))(t)
			recvs := must(plan.Messages(part.Process(), reshard.Recv))(t)
			if !reflect.DeepEqual(part.Sends(), sends) || !reflect.DeepEqual(part.Recvs(), recvs) {
				t.Fatalf("process %d: the view's messages differ from the C API's", part.Process())
			}
			for _, m := range part.Sends() {
				if m.Stage == 1 {
					staged++
				}
			}
		}
		if (staged > 0) != relays {
			t.Fatalf("relays %v: %d stage-1 messages in the bytes", relays, staged)
		}
		back := must(reshard.PlanFromBytes(b))(t)
		if got := must(back.Stats())(t); got != want {
			t.Fatalf("decoded stats %+v", got)
		}
		ex := must(reshard.NewExecutor(nil))(t)
		if r := must(ex.Verify(back))(t); r.Mismatches != 0 {
			t.Fatalf("verify %+v", r)
		}
		ex.Close()
		back.Close()
		plan.Close()
	}
}

// bytesRequiring builds minimal plan bytes (no parts) requiring features.
func bytesRequiring(features uint64) []byte {
	b := flatbuffers.NewBuilder(64)
	fb.PlanStart(b)
	fb.PlanAddVersion(b, 1)
	fb.PlanAddRequiredFeatures(b, features)
	b.FinishWithFileIdentifier(fb.PlanEnd(b), []byte("RSHP"))
	return b.FinishedBytes()
}

func TestUnknownFeatureBitsAreRejected(t *testing.T) {
	if reshard.KnownPlanFeatures != reshard.PlanFeatureStages|reshard.PlanFeatureScratch|reshard.PlanFeatureLateSummands|reshard.PlanFeatureCasts|reshard.PlanFeatureBlockScales|reshard.PlanFeatureMxScales|reshard.PlanFeatureStaging|reshard.PlanFeatureSubs {
		t.Fatalf("known features %d", reshard.KnownPlanFeatures)
	}
	// A real staged plan with an unknown bit added.
	plan := pipelinePlan(t, true)
	defer plan.Close()
	good := must(plan.Bytes())(t)
	for _, features := range []uint64{256, 257, 1 << 63} {
		b := append([]byte(nil), good...)
		if !fb.GetRootAsPlan(b, 0).MutateRequiredFeatures(features) {
			t.Fatal("required_features is not stored in the bytes")
		}
		_, err := reshard.ViewPlan(b)
		expectErr(t, err, reshard.Corrupt, "required_features")
		_, err = reshard.PlanFromBytes(b)
		expectErr(t, err, reshard.Corrupt, "required_features")
	}
	// Minimal bytes, as the package's own check sees them.
	for features, wantErr := range map[uint64]bool{0: false, 1: false, 2: false, 3: false, 4: false, 7: false, 8: false, 15: false, 16: false, 31: false, 32: false, 63: false, 64: false, 127: false, 128: false, 255: false, 256: true, 257: true} {
		err := reshard.CheckPlanFeaturesForTest(bytesRequiring(features))
		if (err != nil) != wantErr || err != nil && !strings.Contains(err.Error(), "unknown feature bits") {
			t.Fatalf("features %d: %v", features, err)
		}
	}
}

// The hosts' NICs (C ABI 1.7): one NIC for host 1's four devices makes its
// NIC carry everything it takes in, so the estimate rises; the bytes stay.
// The option enters the fingerprint; bad values name the field.
func TestNicsPerHostShapesTheEstimate(t *testing.T) {
	if reshard.DefaultPlanOptions().NicsPerHost != 0 {
		t.Fatal("DefaultPlanOptions().NicsPerHost is not 0")
	}
	in := must(reshard.PlanInputFromSpec([]byte(pipelineSpec)))(t)
	defer in.Close()
	before := must(in.Fingerprint())(t)
	stats := func() reshard.PlanStats {
		p := must(reshard.NewPlan(in))(t)
		defer p.Close()
		return must(p.Stats())(t)
	}
	perDevice := stats()
	o := reshard.DefaultPlanOptions()
	o.NicsPerHost = 1
	ok(t, in.SetOptions(o))
	if must(in.Fingerprint())(t) == before {
		t.Fatal("NicsPerHost did not enter the fingerprint")
	}
	one := stats()
	if one.CostSeconds <= perDevice.CostSeconds || one.LowerBoundCostSeconds <= perDevice.LowerBoundCostSeconds {
		t.Fatalf("one NIC per host: %+v, one per device: %+v", one, perDevice)
	}
	if one.NetworkBytes != perDevice.NetworkBytes {
		t.Fatalf("network bytes %d, want %d", one.NetworkBytes, perDevice.NetworkBytes)
	}
	for _, bad := range []int32{-1, 1<<20 + 1} {
		o.NicsPerHost = bad
		expectErr(t, in.SetOptions(o), reshard.InvalidArgument, "options->nics_per_host")
	}
}

// Casts in flight (required_features 8): the view reads each tensor's
// destination dtype and the element size its messages move, as the spec
// asked (examples/specs/zero3_to_tp_fp8.json: bf16 to f8e4m3, norms kept
// bf16, the embedding widened to f32).
func TestViewReadsCasts(t *testing.T) {
	spec := readSpec(t, "zero3_to_tp_fp8.json")
	var doc struct {
		Tensors []struct {
			Name  string `json:"name"`
			DType string `json:"dtype"`
			Dst   struct {
				DType string `json:"dtype"`
			} `json:"dst"`
		} `json:"tensors"`
	}
	ok(t, json.Unmarshal(spec, &doc))
	plan, v := planAndView(t, spec)
	if v.RequiredFeatures()&reshard.PlanFeatureCasts == 0 {
		t.Fatalf("required_features %d without casts", v.RequiredFeatures())
	}
	want := map[string][2]reshard.DType{}
	casts := 0
	for _, d := range doc.Tensors {
		src := must(reshard.ParseDType(d.DType))(t)
		dst := src
		if d.Dst.DType != "" {
			dst = must(reshard.ParseDType(d.Dst.DType))(t)
		}
		if dst != src {
			casts++
		}
		want[d.Name] = [2]reshard.DType{src, dst}
	}
	if casts < 2 || len(want) != v.NumTensors() {
		t.Fatalf("%d casts, %d of %d tensors", casts, len(want), v.NumTensors())
	}
	for i := 0; i < v.NumTensors(); i++ {
		tv, _ := v.Tensor(i)
		w, found := want[tv.Name()]
		if !found || tv.DType() != w[0] || tv.DstDType() != w[1] {
			t.Fatalf("%s: %v -> %v, want %v", tv.Name(), tv.DType(), tv.DstDType(), w)
		}
		size := w[0].Size()
		if w[1].Size() < size {
			size = w[1].Size()
		}
		if tv.WireSize() != size {
			t.Fatalf("%s: wire size %d, want %d", tv.Name(), tv.WireSize(), size)
		}
		// The C ABI's reading (1.11) agrees with the view's.
		if info := must(plan.Tensor(i))(t); info.DType != w[0] || info.DstDType != w[1] {
			t.Fatalf("%s: Plan.Tensor %v -> %v, want %v", tv.Name(), info.DType, info.DstDType, w)
		}
	}
}

// Block scales (required_features 16): the view and the C ABI (1.12) name
// each scaled tensor's scale tensor and block as the spec asked
// (tests/data/zero3_fp8_scales_small.json); the scale tensors are f32 of
// shape ceil(shape / block), with no scales of their own.
func TestViewReadsBlockScales(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join(filepath.Dir(specPath("x")), "..", "..", "tests", "data", "zero3_fp8_scales_small.json"))
	ok(t, err)
	var doc struct {
		Tensors []struct {
			Name string `json:"name"`
			Dst  struct {
				Scales *struct {
					Name  string  `json:"name"`
					Block []int64 `json:"block"`
				} `json:"scales"`
			} `json:"dst"`
		} `json:"tensors"`
	}
	ok(t, json.Unmarshal(spec, &doc))
	plan, v := planAndView(t, spec)
	if v.RequiredFeatures()&reshard.PlanFeatureBlockScales == 0 {
		t.Fatalf("required_features %d without block scales", v.RequiredFeatures())
	}
	names := map[string]int{}
	for i := 0; i < v.NumTensors(); i++ {
		tv, _ := v.Tensor(i)
		names[tv.Name()] = i
	}
	scaled := 0
	for _, d := range doc.Tensors {
		tv, _ := v.Tensor(names[d.Name])
		s, has := tv.ScaleTensor()
		info := must(plan.Tensor(names[d.Name]))(t)
		if d.Dst.Scales == nil {
			if has || tv.ScaleBlock() != nil || info.ScaleTensor != -1 || info.ScaleBlock != nil {
				t.Fatalf("%s: scales %d %v, C ABI %d %v without any in the spec", d.Name, s, tv.ScaleBlock(), info.ScaleTensor, info.ScaleBlock)
			}
			continue
		}
		scaled++
		if !has || s != names[d.Dst.Scales.Name] || !reflect.DeepEqual(tv.ScaleBlock(), d.Dst.Scales.Block) {
			t.Fatalf("%s: scale tensor %d %v, block %v; want %s (%d), %v", d.Name, s, has, tv.ScaleBlock(), d.Dst.Scales.Name, names[d.Dst.Scales.Name], d.Dst.Scales.Block)
		}
		if info.ScaleTensor != s || !reflect.DeepEqual(info.ScaleBlock, d.Dst.Scales.Block) {
			t.Fatalf("%s: C ABI reads %d %v, the view %d %v", d.Name, info.ScaleTensor, info.ScaleBlock, s, tv.ScaleBlock())
		}
		st, _ := v.Tensor(s)
		if _, own := st.ScaleTensor(); own || st.DType() != reshard.F32 {
			t.Fatalf("%s: scale tensor %s has scales or dtype %v", d.Name, st.Name(), st.DType())
		}
		for k, n := range tv.Shape() {
			b := d.Dst.Scales.Block[k]
			if st.Shape()[k] != (n+b-1)/b {
				t.Fatalf("%s: scale shape %v for shape %v, block %v", d.Name, st.Shape(), tv.Shape(), d.Dst.Scales.Block)
			}
		}
	}
	if scaled != 4 {
		t.Fatalf("%d scaled tensors, want 4", scaled)
	}
}

// planAndView plans spec and views the plan's bytes; the plan and its input
// are closed when the test ends.
func planAndView(t *testing.T, spec []byte) (*reshard.Plan, *reshard.PlanView) {
	t.Helper()
	in := must(reshard.PlanInputFromSpec(spec))(t)
	t.Cleanup(func() { in.Close() })
	plan := must(reshard.NewPlan(in))(t)
	t.Cleanup(func() { plan.Close() })
	return plan, must(reshard.ViewPlan(must(plan.Bytes())(t)))(t)
}

// MXFP8 scales (tests/data/mx_scales.rsplan, written by the C++ test
// MxScales.GoldenFileHoldsTheSpecsScaleTensors): the reader knows bit 32,
// and each scaled tensor's scale tensor is e8m0 (no cast), of shape
// ceil(shape / [1, ..., 1, 32]), with one entry per entry of the scaled
// tensor on each side, on the same device, holding the blocks its box
// touches: the box with its last dim in units of 32, rounded outwards.
func TestPlanWithMxScalesIsRead(t *testing.T) {
	b, err := os.ReadFile("../../../tests/data/mx_scales.rsplan")
	ok(t, err)
	v := must(reshard.ViewPlan(b))(t)
	want := reshard.PlanFeatureCasts | reshard.PlanFeatureBlockScales | reshard.PlanFeatureMxScales
	if v.RequiredFeatures() != want {
		t.Fatalf("required_features %d, want %d", v.RequiredFeatures(), want)
	}
	plan := must(reshard.PlanFromBytes(b))(t)
	defer plan.Close()
	scaled := 0
	for i := 0; i < v.NumTensors(); i++ {
		tv, _ := v.Tensor(i)
		s, has := tv.ScaleTensor()
		if !has {
			continue
		}
		scaled++
		st, _ := v.Tensor(s)
		info := must(plan.Tensor(s))(t)
		if st.DType() != reshard.E8M0 || st.DstDType() != reshard.E8M0 || info.DType != reshard.E8M0 || info.DstDType != reshard.E8M0 {
			t.Fatalf("%s: scale tensor %s of dtype %v -> %v (C ABI %v -> %v), want e8m0", tv.Name(), st.Name(), st.DType(), st.DstDType(), info.DType, info.DstDType)
		}
		block := tv.ScaleBlock()
		rank := len(tv.Shape())
		if len(block) != rank || block[rank-1] != 32 {
			t.Fatalf("%s: block %v", tv.Name(), block)
		}
		for d, n := range tv.Shape() {
			if d < rank-1 && block[d] != 1 {
				t.Fatalf("%s: block %v", tv.Name(), block)
			}
			if st.Shape()[d] != (n+block[d]-1)/block[d] {
				t.Fatalf("%s: scale shape %v for shape %v", tv.Name(), st.Shape(), tv.Shape())
			}
		}
		for _, side := range []reshard.Side{reshard.Src, reshard.Dst} {
			values := must(plan.Entries(i, side))(t)
			scales := must(plan.Entries(s, side))(t)
			if len(values) != len(scales) {
				t.Fatalf("%s side %d: %d entries, scales %d", tv.Name(), side, len(values), len(scales))
			}
			for e, x := range values {
				y := scales[e]
				if y.Device != x.Device {
					t.Fatalf("%s side %d entry %d: scales on device %d, values on %d", tv.Name(), side, e, y.Device, x.Device)
				}
				for d := range x.Lo {
					lo, hi := x.Lo[d]/block[d], (x.Hi[d]+block[d]-1)/block[d]
					if y.Lo[d] != lo || y.Hi[d] != hi {
						t.Fatalf("%s side %d entry %d: scale box %v-%v for values %v-%v", tv.Name(), side, e, y.Lo, y.Hi, x.Lo, x.Hi)
					}
				}
			}
		}
	}
	if scaled != 2 {
		t.Fatalf("%d scaled tensors, want 2", scaled)
	}
}
