package reshard_test

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/reshard/reshard/bindings/go/reshard"
)

func TestPlanMeetsTheTrafficLowerBound(t *testing.T) {
	plan := trainToInferPlan(t)
	defer plan.Close()
	s := must(plan.Stats())(t)
	if s.NetworkBytes <= 0 || s.NetworkBytes != s.LowerBoundNetworkBytes {
		t.Fatalf("network bytes %d, lower bound %d", s.NetworkBytes, s.LowerBoundNetworkBytes)
	}
	if s.CrossHostBytes <= 0 || s.CrossHostBytes > s.NetworkBytes || s.NumDevices != 8 || s.Rounds < 1 {
		t.Fatalf("stats %+v", s)
	}
	traffic := must(plan.AllDeviceTraffic())(t)
	var sent, recv int64
	for i, d := range traffic {
		if i > 0 && traffic[i-1].Device >= d.Device {
			t.Fatal("traffic not sorted by device")
		}
		sent += d.SendBytes
		recv += d.RecvBytes
		if d.Device < 4 && d.RecvBytes != 0 {
			t.Fatalf("training device %d receives", d.Device)
		}
	}
	if sent != s.NetworkBytes || recv != s.NetworkBytes {
		t.Fatalf("per-device sums %d/%d, network %d", sent, recv, s.NetworkBytes)
	}
}

func TestPlanningIsDeterministic(t *testing.T) {
	a, b := trainToInferInput(t), trainToInferInput(t)
	defer a.Close()
	defer b.Close()
	pa, pb := must(reshard.NewPlan(a))(t), must(reshard.NewPlan(b))(t)
	defer pa.Close()
	defer pb.Close()
	if fp := must(a.Fingerprint())(t); fp != pa.Fingerprint() || pa.Fingerprint() != pb.Fingerprint() {
		t.Fatal("fingerprints differ")
	}
	ba, bb := must(pa.Bytes())(t), must(pb.Bytes())(t)
	if len(ba) != len(bb) || string(ba[4:8]) != "RSHP" {
		t.Fatalf("bad bytes header %q", ba[:8])
	}
	// Planning time is not encoded: plans of equal inputs have equal bytes.
	if string(ba) != string(bb) {
		t.Fatal("plans of equal inputs encode to different bytes")
	}
	ra, rb := must(pa.Pieces(2, reshard.RecvPieces))(t), must(pb.Pieces(2, reshard.RecvPieces))(t)
	if !reflect.DeepEqual(ra, rb) {
		t.Fatal("pieces differ")
	}
}

func TestOptionsChangeTheFingerprint(t *testing.T) {
	in := trainToInferInput(t)
	defer in.Close()
	before := must(in.Fingerprint())(t)
	o := reshard.DefaultPlanOptions()
	o.SplitMinBytes = 4096
	ok(t, in.SetOptions(o))
	if must(in.Fingerprint())(t) == before {
		t.Fatal("options did not enter the fingerprint")
	}
	ok(t, in.SetOptions(reshard.DefaultPlanOptions()))
	if must(in.Fingerprint())(t) != before {
		t.Fatal("DefaultPlanOptions differ from RESHARD_PLAN_OPTIONS_INIT")
	}
}

func TestTensorsEntriesAndParts(t *testing.T) {
	plan := trainToInferPlan(t)
	defer plan.Close()
	ts := plan.Tensors()
	if len(ts) != 3 || ts[0].Name != "layers.0.attn.q" || !reflect.DeepEqual(ts[1].Shape, []int64{512, 256}) || ts[2].DType != reshard.F32 {
		t.Fatalf("tensors %+v", ts)
	}
	dst := must(plan.Entries(0, reshard.Dst))(t)
	if dst[2].Device != 6 || !reflect.DeepEqual(dst[2].Lo, []int64{0, 128}) || !reflect.DeepEqual(dst[2].Hi, []int64{256, 192}) {
		t.Fatalf("entry %+v", dst[2])
	}
	if n := must(plan.ShardBytes(0, reshard.Dst, 2))(t); n != 256*64*4 {
		t.Fatalf("shard bytes %d", n)
	}
	if e, found, err := plan.EntryOfDevice(0, reshard.Dst, 6); err != nil || !found || e != 2 {
		t.Fatalf("entry of device 6: %d %v %v", e, found, err)
	}
	if _, found, _ := plan.EntryOfDevice(0, reshard.Dst, 0); found {
		t.Fatal("device 0 holds no destination entry")
	}
	if n, op, err := plan.Partial(0, reshard.Src); err != nil || n != 1 || op != reshard.Sum {
		t.Fatalf("partial %d %v %v", n, op, err)
	}
	if !reflect.DeepEqual(plan.Processes(), []int32{0, 1, 2}) || plan.HasPart(7) {
		t.Fatal("processes")
	}
	var sent int64
	for _, p := range plan.Processes() {
		info := must(plan.PartInfo(p))(t)
		sends := must(plan.Messages(p, reshard.Send))(t)
		pieces := must(plan.Pieces(p, reshard.SendPieces))(t)
		if uint64(len(sends)) != info.NumSends || uint64(len(pieces)) != info.NumSendPieces {
			t.Fatalf("part %d: %+v", p, info)
		}
		for _, m := range sends {
			var b int64
			for _, x := range pieces[m.FirstPiece : m.FirstPiece+m.NumPieces] {
				b += x.Bytes
				vol := int64(4)
				for d := range x.Lo {
					vol *= x.Hi[d] - x.Lo[d]
				}
				if vol != x.Bytes {
					t.Fatalf("piece region %v-%v vs %d bytes", x.Lo, x.Hi, x.Bytes)
				}
			}
			if b != m.Bytes {
				t.Fatalf("message packs %d bytes of pieces, says %d", b, m.Bytes)
			}
			sent += m.Bytes
		}
	}
	if s := must(plan.Stats())(t); sent != s.NetworkBytes {
		t.Fatalf("sent %d, network %d", sent, s.NetworkBytes)
	}
}

func TestScopes(t *testing.T) {
	in := trainToInferInput(t)
	defer in.Close()
	global := must(reshard.NewPlanWithRequest(in, reshard.PlanRequest{Scope: reshard.ScopeGlobal}))(t)
	defer global.Close()
	if global.HasPart(0) || len(global.Processes()) != 3 {
		t.Fatal("global plan holds parts")
	}
	worker := must(reshard.NewPlanWithRequest(in, reshard.PlanRequest{Scope: reshard.ScopeProcess, Process: 1, NoGlobalStats: true}))(t)
	defer worker.Close()
	if !worker.HasPart(1) || worker.HasPart(0) || worker.Fingerprint() != global.Fingerprint() {
		t.Fatal("worker plan")
	}
}

// smallSpecs are the example specs small enough to execute (examples/specs
// also holds fleet-scale specs).
var smallSpecs = []string{"small_transformer.json", "explicit_boxes.json", "partial_sums.json"}

func TestExampleSpecsPlanAndVerify(t *testing.T) {
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	for _, name := range smallSpecs {
		in := must(reshard.PlanInputFromSpec(readSpec(t, name)))(t)
		plan := must(reshard.NewPlan(in))(t)
		r := must(ex.Verify(plan))(t)
		if r.Mismatches != 0 || r.Elements == 0 || int(r.Tensors) != plan.NumTensors() {
			t.Fatalf("%s: %+v", name, r)
		}
		plan.Close()
		in.Close()
	}
}

func TestBoxLayoutsAndUnevenShardings(t *testing.T) {
	src := must(reshard.NewBoxLayout([]int64{10, 4}, []reshard.LayoutEntry{
		{Device: 0, Lo: []int64{0, 0}, Hi: []int64{2, 4}},
		{Device: 1, Lo: []int64{2, 0}, Hi: []int64{9, 4}},
		{Device: 2, Lo: []int64{9, 0}, Hi: []int64{10, 4}},
	}, 1, reshard.Sum))(t)
	defer src.Close()
	if src.NumEntries() != 3 || !reflect.DeepEqual(src.Shape(), []int64{10, 4}) || src.Rank() != 2 {
		t.Fatal("box layout")
	}
	mesh := must(reshard.NewMesh([]string{"x"}, []int64{4}, []int64{3, 4, 5, 6}))(t)
	defer mesh.Close()
	if mesh.Rank() != 1 || mesh.Size() != 4 {
		t.Fatal("mesh")
	}
	dst := must(reshard.NewNamedLayout(mesh, []int64{10, 4}, reshard.Sharding{Dims: [][]string{{"x"}, nil}}))(t)
	defer dst.Close()
	var his []int64
	for _, e := range dst.Entries() {
		his = append(his, e.Hi[0])
	}
	if !reflect.DeepEqual(his, []int64{3, 6, 9, 10}) {
		t.Fatalf("uneven split %v", his)
	}
	// Fewer Dims than the rank: the rest are not split (JAX PartitionSpec("x")).
	short := must(reshard.NewNamedLayout(mesh, []int64{10, 4}, reshard.Sharding{Dims: [][]string{{"x"}}}))(t)
	defer short.Close()
	if !reflect.DeepEqual(short.Entries(), dst.Entries()) {
		t.Fatalf("short sharding %v, want %v", short.Entries(), dst.Entries())
	}
	replicated := must(reshard.NewNamedLayout(mesh, []int64{10, 4}, reshard.Sharding{}))(t)
	defer replicated.Close()
	if e := replicated.Entries(); len(e) != 4 || !reflect.DeepEqual(e[3].Lo, []int64{0, 0}) || !reflect.DeepEqual(e[3].Hi, []int64{10, 4}) {
		t.Fatalf("no dims: %v", e)
	}
	in := must(reshard.NewPlanInput())(t)
	defer in.Close()
	ok(t, in.AddTensor("ragged", []int64{10, 4}, reshard.I32, src, dst))
	plan := must(reshard.NewPlan(in))(t)
	defer plan.Close()
	ex := must(reshard.NewExecutor(&reshard.ExecutorOptions{Threads: 1}))(t)
	defer ex.Close()
	if r := must(ex.Verify(plan))(t); r.Mismatches != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestConcurrentPlanningAndExecution(t *testing.T) {
	in := trainToInferInput(t)
	defer in.Close()
	plan := must(reshard.NewPlan(in))(t)
	defer plan.Close()
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := reshard.NewPlan(in)
			if err != nil {
				errs <- err
				return
			}
			defer p.Close()
			if p.Fingerprint() != plan.Fingerprint() {
				errs <- &reshard.Error{Code: reshard.Internal, Message: "fingerprint differs"}
			}
			r, err := ex.Verify(plan)
			if err == nil && r.Mismatches != 0 {
				err = &reshard.Error{Code: reshard.Internal, Message: "mismatches"}
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestDTypes(t *testing.T) {
	for _, d := range []reshard.DType{reshard.F64, reshard.F32, reshard.F16, reshard.BF16, reshard.F8E4M3, reshard.F8E5M2,
		reshard.I64, reshard.I32, reshard.I16, reshard.I8, reshard.U64, reshard.U32, reshard.U16, reshard.U8, reshard.Bool} {
		got := must(reshard.ParseDType(d.String()))(t)
		if got != d || d.Size() == 0 {
			t.Fatalf("%v", d)
		}
	}
	if must(reshard.ParseDType("bfloat16"))(t) != reshard.BF16 || reshard.BF16.Size() != 2 {
		t.Fatal("bfloat16")
	}
	if reshard.DType(99).String() != "dtype(99)" || reshard.Max.String() != "max" {
		t.Fatal("names")
	}
	if !strings.HasPrefix(reshard.Version(), "0.") {
		t.Fatal(reshard.Version())
	}
}
