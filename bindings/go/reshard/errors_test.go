package reshard_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/reshard/reshard/bindings/go/reshard"
)

func TestErrorValues(t *testing.T) {
	_, err := reshard.NewMesh([]string{"a", "a"}, []int64{1, 1}, nil)
	expectErr(t, err, reshard.InvalidArgument, "duplicate axis name")
	var e *reshard.Error
	if !errors.As(err, &e) || e.Code.String() != "invalid_argument" || !strings.HasPrefix(err.Error(), "[invalid_argument] ") {
		t.Fatalf("%v", err)
	}
	if !errors.Is(err, &reshard.Error{Code: reshard.InvalidArgument}) || errors.Is(err, &reshard.Error{Code: reshard.Corrupt}) {
		t.Fatal("errors.Is by code")
	}
	if reshard.ErrorCode(99).String() != "unknown" || reshard.Corrupt.String() != "corrupt" {
		t.Fatal("code names")
	}
}

func TestMeshErrors(t *testing.T) {
	cases := []struct {
		axes    []string
		shape   []int64
		devices []int64
		code    reshard.ErrorCode
		needle  string
	}{
		{[]string{"dp"}, []int64{2, 2}, nil, reshard.InvalidArgument, "shape: 2 sizes given for 1 axis names"},
		{[]string{"d\x00p"}, []int64{2}, nil, reshard.InvalidArgument, "axis_names[0]: contains a NUL byte"},
		{[]string{"dp", ""}, []int64{2, 2}, nil, reshard.InvalidArgument, "axis_names[1]: empty axis name"},
		{[]string{"dp", "tp"}, []int64{2, 0}, nil, reshard.InvalidArgument, "shape[1]"},
		{[]string{"dp", "tp"}, []int64{2, 0}, []int64{0, 1}, reshard.InvalidArgument, "shape[1]"},
		{[]string{"x"}, []int64{3}, []int64{0, 1}, reshard.InvalidArgument, "devices: 2 ids given, the mesh has 3 devices"},
		{[]string{"x"}, []int64{3}, []int64{0, 1, 1}, reshard.InvalidArgument, "devices[2]: device 1 appears twice"},
		{[]string{"x"}, []int64{2}, []int64{0, -4}, reshard.InvalidArgument, "devices[1]"},
		{[]string{"a", "b"}, []int64{1 << 40, 1 << 40}, nil, reshard.Overflow, "shape"},
		{[]string{"a", "b"}, []int64{1 << 40, 1 << 40}, []int64{0}, reshard.Overflow, "shape"},
	}
	for _, c := range cases {
		m, err := reshard.NewMesh(c.axes, c.shape, c.devices)
		if m != nil {
			t.Fatalf("%v: got a mesh", c)
		}
		expectErr(t, err, c.code, c.needle)
	}
}

func TestLayoutErrors(t *testing.T) {
	mesh := must(reshard.NewMesh([]string{"dp", "tp"}, []int64{2, 2}, nil))(t)
	defer mesh.Close()
	s := reshard.Sharding{Dims: [][]string{{"dp"}, {"tp"}}}
	_, err := reshard.NewNamedLayout(mesh, []int64{8}, s)
	expectErr(t, err, reshard.InvalidArgument, "sharding: 2 dims given for a tensor of rank 1")
	_, err = reshard.NewNamedLayout(mesh, []int64{8, -6}, s)
	expectErr(t, err, reshard.InvalidArgument, "shape[1]: size -6 is negative")
	_, err = reshard.NewNamedLayout(mesh, []int64{1 << 62, 1 << 62}, s)
	expectErr(t, err, reshard.Overflow, "shape")
	_, err = reshard.NewNamedLayout(mesh, make([]int64, 9), reshard.Sharding{Dims: make([][]string, 9)})
	expectErr(t, err, reshard.OutOfRange, "rank 9")
	_, err = reshard.NewNamedLayout(mesh, []int64{8, 6}, reshard.Sharding{Dims: [][]string{{"dp"}, {"tq"}}})
	expectErr(t, err, reshard.InvalidArgument, `unknown mesh axis "tq"`)
	_, err = reshard.NewNamedLayout(mesh, []int64{8, 6}, reshard.Sharding{Dims: [][]string{{"dp"}, {"dp"}}})
	expectErr(t, err, reshard.InvalidArgument, `mesh axis "dp" used twice`)
	_, err = reshard.NewNamedLayout(mesh, []int64{8, 6}, reshard.Sharding{Dims: [][]string{{"dp"}, nil}, Partial: []string{"dp"}})
	expectErr(t, err, reshard.InvalidArgument, `partial.names[0]: mesh axis "dp" used twice`)
	_, err = reshard.NewNamedLayout(mesh, []int64{8, 6}, reshard.Sharding{Dims: [][]string{{"dp"}, nil}, Partial: []string{"tp"}, PartialOp: 7})
	expectErr(t, err, reshard.InvalidArgument, "partial_op: invalid value 7")
	_, err = reshard.NewNamedLayout(mesh, []int64{8, 6}, reshard.Sharding{Dims: [][]string{{"d\x00p"}, nil}})
	expectErr(t, err, reshard.InvalidArgument, "dims[0].names[0]: contains a NUL byte")
	closed := must(reshard.NewMesh(nil, nil, nil))(t)
	closed.Close()
	_, err = reshard.NewNamedLayout(closed, nil, reshard.Sharding{})
	expectErr(t, err, reshard.InvalidArgument, "mesh: used after Close")

	box := func(d int64, lo, hi []int64) reshard.LayoutEntry {
		return reshard.LayoutEntry{Device: d, Lo: lo, Hi: hi}
	}
	_, err = reshard.NewBoxLayout([]int64{4, 4}, []reshard.LayoutEntry{box(0, []int64{0, 0}, []int64{4, 4}), box(1, []int64{0}, []int64{4, 4})}, 1, reshard.Sum)
	expectErr(t, err, reshard.InvalidArgument, "entries[1].lo: 1 values given for rank 2")
	_, err = reshard.NewBoxLayout([]int64{4, 4}, []reshard.LayoutEntry{box(0, []int64{0, 0}, []int64{4, 5})}, 1, reshard.Sum)
	expectErr(t, err, reshard.InvalidArgument, "entries[0]")
	_, err = reshard.NewBoxLayout([]int64{4, 4}, []reshard.LayoutEntry{box(0, []int64{0, 0}, []int64{2, 4}), box(0, []int64{2, 0}, []int64{4, 4})}, 1, reshard.Sum)
	expectErr(t, err, reshard.InvalidArgument, "entries[1].device: device 0")
	bad := box(1, []int64{0, 0}, []int64{4, 4})
	bad.Summand = 2
	_, err = reshard.NewBoxLayout([]int64{4, 4}, []reshard.LayoutEntry{box(0, []int64{0, 0}, []int64{4, 4}), bad}, 2, reshard.Sum)
	expectErr(t, err, reshard.InvalidArgument, "entries[1]")
	_, err = reshard.NewBoxLayout([]int64{4, 4}, []reshard.LayoutEntry{box(0, []int64{0, 0}, []int64{4, 4})}, 0, reshard.Sum)
	expectErr(t, err, reshard.InvalidArgument, "num_summands")
	l := must(reshard.NewBoxLayout([]int64{4, 4}, []reshard.LayoutEntry{box(0, []int64{0, 0}, []int64{4, 4})}, 1, reshard.Sum))(t)
	defer l.Close()
	_, err = l.Entry(1)
	expectErr(t, err, reshard.OutOfRange, "entry")
}

func TestTopologyErrors(t *testing.T) {
	topo := must(reshard.NewTopology())(t)
	defer topo.Close()
	ok(t, topo.AddDevice(5, 1, 0, 1))
	ok(t, topo.AddDevice(5, 1, 0, 1))
	expectErr(t, topo.AddDevice(5, 2, 0, 1), reshard.InvalidArgument, "device: device 5 given as process 2")
	expectErr(t, topo.AddDevice(-1, 0, 0, 0), reshard.InvalidArgument, "device: device id -1 is negative")
	expectErr(t, topo.AddDevice(7, -1, 0, 0), reshard.InvalidArgument, "must be non-negative")
	if topo.NumDevices() != 1 {
		t.Fatal("topology changed on error")
	}
}

func TestSpecAndInputErrors(t *testing.T) {
	_, err := reshard.PlanInputFromSpec([]byte(`{"meshes": `))
	expectErr(t, err, reshard.Parse, "line")
	bad := strings.Replace(string(readSpec(t, "small_transformer.json")), `"tp"]`, `"tq"]`, 1)
	_, err = reshard.PlanInputFromSpec([]byte(bad))
	expectErr(t, err, reshard.InvalidArgument, "tq")
	if !strings.HasPrefix(err.(*reshard.Error).Message, "tensors[") && !strings.HasPrefix(err.(*reshard.Error).Message, "meshes") {
		t.Fatalf("JSON path first: %v", err)
	}

	mesh := must(reshard.NewMesh([]string{"x"}, []int64{2}, nil))(t)
	defer mesh.Close()
	l := must(reshard.NewNamedLayout(mesh, []int64{8, 6}, reshard.Sharding{Dims: [][]string{{"x"}, nil}}))(t)
	small := must(reshard.NewNamedLayout(mesh, []int64{5}, reshard.Sharding{Dims: [][]string{nil}}))(t)
	in := must(reshard.NewPlanInput())(t)
	defer in.Close()
	expectErr(t, in.AddTensor("", []int64{8, 6}, reshard.F32, l, l), reshard.InvalidArgument, "name: must not be empty")
	expectErr(t, in.AddTensor("a\x00b", []int64{8, 6}, reshard.F32, l, l), reshard.InvalidArgument, "name: contains a NUL byte")
	expectErr(t, in.AddTensor("bad\xffname", []int64{8, 6}, reshard.F32, l, l), reshard.InvalidArgument, "name: not valid UTF-8")
	expectErr(t, in.AddTensor("x", []int64{8, 7}, reshard.F32, l, l), reshard.Mismatch, "src: layout shape [8, 6] differs from shape [8, 7]")
	expectErr(t, in.AddTensor("x", []int64{8, 6}, reshard.F32, l, small), reshard.Mismatch, "dst: layout shape [5]")
	expectErr(t, in.AddTensor("x", []int64{8, -1}, reshard.F32, l, l), reshard.InvalidArgument, "shape[1]: size -1 is negative")
	expectErr(t, in.AddTensor("x", []int64{8, 6}, reshard.DType(99), l, l), reshard.InvalidArgument, "dtype: invalid value 99")
	if in.NumTensors() != 0 {
		t.Fatal("input changed on error")
	}
	ok(t, in.AddTensor("x", []int64{8, 6}, reshard.F32, l, l))
	ok(t, in.AddTensor("x", []int64{8, 6}, reshard.F32, l, l))
	_, err = reshard.NewPlan(in)
	expectErr(t, err, reshard.InvalidArgument, "tensors[1].name")

	in2 := must(reshard.NewPlanInput())(t)
	defer in2.Close()
	ok(t, in2.AddTensor("x", []int64{8, 6}, reshard.F32, l, l))
	for _, c := range []struct {
		mod    func(*reshard.PlanOptions)
		needle string
	}{
		{func(o *reshard.PlanOptions) { o.AlphaSeconds = -1 }, "options.alpha_seconds"},
		{func(o *reshard.PlanOptions) { o.InterHostBytesPerSecond = 0 }, "options.inter_host_bytes_per_second"},
		{func(o *reshard.PlanOptions) { o.SplitMinBytes = -1 }, "options.split_min_bytes"},
	} {
		o := reshard.DefaultPlanOptions()
		c.mod(&o)
		ok(t, in2.SetOptions(o))
		_, err = reshard.NewPlan(in2)
		expectErr(t, err, reshard.InvalidArgument, c.needle)
	}
	_, err = reshard.ParseDType("f33")
	expectErr(t, err, reshard.InvalidArgument, "f33")
	_, err = reshard.ParseDType("f\x0032")
	expectErr(t, err, reshard.InvalidArgument, "name: contains a NUL byte")
	l.Close()
	expectErr(t, in2.AddTensor("y", []int64{8, 6}, reshard.F32, l, small), reshard.InvalidArgument, "src: used after Close")
}

// PlanRequest.MaxPlanBytes (ABI 1.2): a plan whose estimated memory is
// above the limit is refused with ResourceExhausted and the estimate.
func TestPlanMemoryLimit(t *testing.T) {
	in := trainToInferInput(t)
	defer in.Close()
	if reshard.ResourceExhausted.String() != "resource_exhausted" || reshard.ResourceExhausted != 12 {
		t.Fatalf("ResourceExhausted: %d %q", int32(reshard.ResourceExhausted), reshard.ResourceExhausted)
	}
	_, err := reshard.NewPlanWithRequest(in, reshard.PlanRequest{MaxPlanBytes: 1})
	expectErr(t, err, reshard.ResourceExhausted, "request->max_plan_bytes: the 3 process parts of this plan need about ")
	expectErr(t, err, reshard.ResourceExhausted, "above the limit of 1 B (1 bytes); plan one process's part at a time (RESHARD_PLAN_SCOPE_PROCESS")
	_, err = reshard.NewPlanWithRequest(in, reshard.PlanRequest{Scope: reshard.ScopeProcess, Process: 1, MaxPlanBytes: 1})
	expectErr(t, err, reshard.ResourceExhausted, "request->max_plan_bytes: process 1's part needs about ")
	_, err = reshard.NewPlanWithRequest(in, reshard.PlanRequest{MaxPlanBytes: -2})
	expectErr(t, err, reshard.InvalidArgument, "request->max_plan_bytes: -2 is invalid")
	// Statistics need no parts; no limit plans; the default (0) fits.
	for _, r := range []reshard.PlanRequest{
		{Scope: reshard.ScopeGlobal, MaxPlanBytes: 1},
		{MaxPlanBytes: reshard.PlanBytesUnlimited},
		{},
	} {
		p := must(reshard.NewPlanWithRequest(in, r))(t)
		p.Close()
	}
}

func TestPlanQueryErrors(t *testing.T) {
	in := trainToInferInput(t)
	defer in.Close()
	_, err := reshard.NewPlanWithRequest(in, reshard.PlanRequest{Scope: reshard.ScopeProcess, Process: 99})
	expectErr(t, err, reshard.OutOfRange, "request.process")
	_, err = reshard.NewPlanWithRequest(in, reshard.PlanRequest{Scope: 9})
	expectErr(t, err, reshard.InvalidArgument, "scope: invalid value 9")
	noStats := must(reshard.NewPlanWithRequest(in, reshard.PlanRequest{Scope: reshard.ScopeProcess, NoGlobalStats: true}))(t)
	defer noStats.Close()
	_, err = noStats.Stats()
	expectErr(t, err, reshard.Unsupported, "plan: has no statistics")
	_, err = noStats.DeviceTraffic(0)
	expectErr(t, err, reshard.Unsupported, "statistics")
	_, err = noStats.BytesForProcess(1)
	expectErr(t, err, reshard.OutOfRange, "process")

	plan := must(reshard.NewPlan(in))(t)
	defer plan.Close()
	_, err = plan.Tensor(5)
	expectErr(t, err, reshard.OutOfRange, "tensor: 5 >= 3 tensors")
	_, err = plan.Tensor(-1)
	expectErr(t, err, reshard.OutOfRange, "tensor: -1 is negative")
	_, err = plan.Entries(3, reshard.Src)
	expectErr(t, err, reshard.OutOfRange, "tensor")
	_, err = plan.Entry(0, reshard.Dst, 4)
	expectErr(t, err, reshard.OutOfRange, "entry")
	_, err = plan.Entry(0, reshard.Side(5), 0)
	expectErr(t, err, reshard.InvalidArgument, "side")
	_, err = plan.DeviceTraffic(8)
	expectErr(t, err, reshard.OutOfRange, "index")
	_, err = plan.PartInfo(3)
	expectErr(t, err, reshard.OutOfRange, "process: this plan holds no part for process 3")
	info := must(plan.PartInfo(2))(t)
	_, err = plan.Message(2, reshard.Recv, int(info.NumRecvs))
	expectErr(t, err, reshard.OutOfRange, "index")
	_, err = plan.Message(2, reshard.Direction(9), 0)
	expectErr(t, err, reshard.InvalidArgument, "direction")
	_, err = plan.Piece(2, reshard.RecvPieces, int(info.NumRecvPieces))
	expectErr(t, err, reshard.OutOfRange, "index")
	_, err = plan.Piece(2, reshard.PieceList(9), 0)
	expectErr(t, err, reshard.InvalidArgument, "list")
	_, err = plan.Scratch(2, int(info.NumScratch))
	expectErr(t, err, reshard.OutOfRange, "index")
	_, err = plan.Scratch(3, 0)
	expectErr(t, err, reshard.OutOfRange, "process: this plan holds no part for process 3")
	expectErr(t, plan.OracleFillSource(0, 0, make([]byte, 3)), reshard.InvalidArgument, "bytes")
	expectErr(t, plan.OracleFillSource(7, 0, make([]byte, 4)), reshard.OutOfRange, "tensor")
	_, err = plan.OracleCheckDestination(0, 0, make([]byte, 3))
	expectErr(t, err, reshard.InvalidArgument, "bytes")
}

func TestExecutorErrors(t *testing.T) {
	_, err := reshard.NewExecutor(&reshard.ExecutorOptions{Threads: -1})
	expectErr(t, err, reshard.InvalidArgument, "threads")
	_, err = reshard.NewExecutor(&reshard.ExecutorOptions{Transport: reshard.TransportMPI})
	expectErr(t, err, reshard.Unsupported, "")
	_, err = reshard.NewExecutor(&reshard.ExecutorOptions{Transport: reshard.TransportNCCL})
	expectErr(t, err, reshard.Unsupported, "")
	_, err = reshard.NewExecutor(&reshard.ExecutorOptions{Transport: 42})
	expectErr(t, err, reshard.InvalidArgument, "transport")
	_, err = reshard.NewHostBuffer(-1)
	expectErr(t, err, reshard.InvalidArgument, "size: -1 is negative")

	plan := trainToInferPlan(t)
	defer plan.Close()
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	bufs := make([]reshard.TensorBuffers, 3)
	var d0 [][]float32
	for i := range bufs {
		s, d := f32Buffers(t, plan, i, func(int32) float32 { return 1 }, 7)
		bufs[i] = reshard.TensorBuffers{Src: bytesOf(s), Dst: bytesOf(d)}
		if i == 0 {
			d0 = d
		}
	}
	expectErr(t, ex.Execute(plan, bufs[:1]), reshard.InvalidArgument, "buffers: 1 tensors given, the plan has 3")
	short := []reshard.TensorBuffers{bufs[0], {Src: bufs[1].Src[:3], Dst: bufs[1].Dst}, bufs[2]}
	expectErr(t, ex.Execute(plan, short), reshard.InvalidArgument, "buffers[1].src: 3 buffers given, the layout has 4 entries")
	small := append([][]byte(nil), bufs[0].Dst...)
	small[3] = small[3][:40]
	// The library's own check (no per-buffer calls from Go).
	err = ex.Execute(plan, []reshard.TensorBuffers{{Src: bufs[0].Src, Dst: small}, bufs[1], bufs[2]})
	expectErr(t, err, reshard.InvalidArgument, "buffers[0].dst[3]: 40 bytes given, box")
	expectErr(t, err, reshard.InvalidArgument, "of f32 needs 65536")
	if d0[0][0] != 7 {
		t.Fatal("written on error")
	}
	host := []reshard.HostTensorBuffers{{Src: []*reshard.HostBuffer{nil}}, {}, {}}
	expectErr(t, ex.ExecuteHost(plan, host), reshard.InvalidArgument, "buffers[0].src[0]: nil or closed HostBuffer")

	in := trainToInferInput(t)
	defer in.Close()
	global := must(reshard.NewPlanWithRequest(in, reshard.PlanRequest{Scope: reshard.ScopeGlobal}))(t)
	defer global.Close()
	expectErr(t, ex.Execute(global, bufs), reshard.InvalidArgument, "plan: lacks the part of process")
	_, err = ex.Verify(global)
	expectErr(t, err, reshard.InvalidArgument, "plan: lacks the part")
	ex2 := must(reshard.NewExecutor(nil))(t)
	ex2.Close()
	expectErr(t, ex2.Execute(plan, bufs), reshard.InvalidArgument, "executor: used after Close")
}
