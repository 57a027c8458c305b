package reshard_test

import (
	"math"
	"reflect"
	"runtime"
	"testing"

	"github.com/reshard/reshard/bindings/go/reshard"
)

func TestHostExecutionMovesEveryElement(t *testing.T) {
	plan := trainToInferPlan(t)
	defer plan.Close()
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	var bufs []reshard.TensorBuffers
	var dsts [][][]float32
	for i := 0; i < plan.NumTensors(); i++ {
		s, d := f32Buffers(t, plan, i, func(int32) float32 { return 1 }, -1)
		bufs = append(bufs, reshard.TensorBuffers{Src: bytesOf(s), Dst: bytesOf(d)})
		dsts = append(dsts, d)
	}
	ok(t, ex.Execute(plan, bufs))
	checked := 0
	for i, d := range dsts {
		info := must(plan.Tensor(i))(t)
		for e, entry := range must(plan.Entries(i, reshard.Dst))(t) {
			want := globalIndices(info.Shape, entry)
			if len(d[e]) != len(want) {
				t.Fatalf("tensor %d entry %d: %d elements, want %d", i, e, len(d[e]), len(want))
			}
			for k := range want {
				if d[e][k] != float32(want[k]) {
					t.Fatalf("tensor %d device %d element %d: %v, want %v", i, entry.Device, k, d[e][k], want[k])
				}
			}
			checked += len(want)
		}
	}
	if checked != 256*256+512*256+4*256 {
		t.Fatalf("checked %d", checked)
	}
}

func TestExecuteHostInPlace(t *testing.T) {
	// The same reshard on C-allocated HostBuffers, filled and checked with
	// the oracle; no copies.
	plan := trainToInferPlan(t)
	defer plan.Close()
	ex := must(reshard.NewExecutor(&reshard.ExecutorOptions{Transport: reshard.TransportHost, Threads: 2}))(t)
	defer ex.Close()
	var bufs []reshard.HostTensorBuffers
	var all []*reshard.HostBuffer
	for i := 0; i < plan.NumTensors(); i++ {
		var tb reshard.HostTensorBuffers
		for e := 0; e < must(plan.NumEntries(i, reshard.Src))(t); e++ {
			h := must(reshard.NewHostBuffer(must(plan.ShardBytes(i, reshard.Src, e))(t)))(t)
			ok(t, plan.OracleFillSource(i, e, h.Bytes()))
			tb.Src = append(tb.Src, h)
			all = append(all, h)
		}
		for e := 0; e < must(plan.NumEntries(i, reshard.Dst))(t); e++ {
			h := must(reshard.NewHostBuffer(must(plan.ShardBytes(i, reshard.Dst, e))(t)))(t)
			tb.Dst = append(tb.Dst, h)
			all = append(all, h)
		}
		bufs = append(bufs, tb)
	}
	defer func() {
		for _, h := range all {
			h.Close()
		}
	}()
	ok(t, ex.ExecuteHost(plan, bufs))
	for i, tb := range bufs {
		for e, h := range tb.Dst {
			if wrong := must(plan.OracleCheckDestination(i, e, h.Bytes()))(t); wrong != 0 {
				t.Fatalf("tensor %d entry %d: %d wrong", i, e, wrong)
			}
		}
	}
}

func TestPartialSourcesAreReduced(t *testing.T) {
	mesh := must(reshard.NewMesh([]string{"dp", "tp"}, []int64{2, 2}, nil))(t)
	defer mesh.Close()
	shape := []int64{6, 10}
	src := must(reshard.NewNamedLayout(mesh, shape, reshard.Sharding{Dims: [][]string{nil, {"tp"}}, Partial: []string{"dp"}, PartialOp: reshard.Sum}))(t)
	dst := must(reshard.NewNamedLayout(mesh, shape, reshard.Sharding{Dims: [][]string{{"dp"}, {"tp"}}}))(t)
	in := must(reshard.NewPlanInput())(t)
	ok(t, in.AddTensor("grad", shape, reshard.F32, src, dst))
	plan := must(reshard.NewPlan(in))(t)
	defer plan.Close()
	if n, op, _ := plan.Partial(0, reshard.Src); n != 2 || op != reshard.Sum {
		t.Fatalf("partial %d %v", n, op)
	}
	s, d := f32Buffers(t, plan, 0, func(summand int32) float32 { return float32(summand + 1) }, float32(math.NaN()))
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	ok(t, ex.Execute(plan, []reshard.TensorBuffers{{Src: bytesOf(s), Dst: bytesOf(d)}}))
	for e, entry := range must(plan.Entries(0, reshard.Dst))(t) {
		for k, i := range globalIndices(shape, entry) {
			if d[e][k] != 3*float32(i) {
				t.Fatalf("device %d element %d: %v, want %v", entry.Device, k, d[e][k], 3*float32(i))
			}
		}
	}
	src.Close()
	dst.Close()
	in.Close()
}

func TestIntegerAndHalfBuffers(t *testing.T) {
	a := must(reshard.NewMesh([]string{"x"}, []int64{3}, nil))(t)
	b := must(reshard.NewMesh([]string{"y"}, []int64{2}, []int64{3, 4}))(t)
	shape := []int64{7}
	src := must(reshard.NewNamedLayout(a, shape, reshard.Sharding{Dims: [][]string{{"x"}}}))(t)
	dst := must(reshard.NewNamedLayout(b, shape, reshard.Sharding{Dims: [][]string{{"y"}}}))(t)
	in := must(reshard.NewPlanInput())(t)
	ok(t, in.AddTensor("ids", shape, reshard.I64, src, dst))
	ok(t, in.AddTensor("w", shape, reshard.BF16, src, dst))
	plan := must(reshard.NewPlan(in))(t)
	defer plan.Close()
	var ids, bits reshard.TensorBuffers
	var idsOut [][]int64
	var bitsOut [][]uint16
	for _, e := range must(plan.Entries(0, reshard.Src))(t) {
		var v []int64
		var w []uint16
		for _, i := range globalIndices(shape, e) {
			v = append(v, -1000*i)
			w = append(w, 0x3f80+uint16(i))
		}
		ids.Src = append(ids.Src, reshard.AsBytes(v))
		bits.Src = append(bits.Src, reshard.AsBytes(w))
	}
	for _, e := range must(plan.Entries(0, reshard.Dst))(t) {
		v := make([]int64, e.Volume())
		w := make([]uint16, e.Volume())
		idsOut = append(idsOut, v)
		bitsOut = append(bitsOut, w)
		ids.Dst = append(ids.Dst, reshard.AsBytes(v))
		bits.Dst = append(bits.Dst, reshard.AsBytes(w))
	}
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	ok(t, ex.Execute(plan, []reshard.TensorBuffers{ids, bits}))
	var gotIDs []int64
	var gotBits []uint16
	for i := range idsOut {
		gotIDs = append(gotIDs, idsOut[i]...)
		gotBits = append(gotBits, bitsOut[i]...)
	}
	for i := 0; i < 7; i++ {
		if gotIDs[i] != -1000*int64(i) || gotBits[i] != 0x3f80+uint16(i) {
			t.Fatalf("element %d: %d %x", i, gotIDs[i], gotBits[i])
		}
	}
	a.Close()
	b.Close()
	src.Close()
	dst.Close()
	in.Close()
}

func TestFinalizersReleaseForgottenHandles(t *testing.T) {
	// Handles dropped without Close are released by their finalizers (a
	// backstop); this must neither crash nor free anything still in use.
	for i := 0; i < 50; i++ {
		in := trainToInferInput(t)
		p := must(reshard.NewPlan(in))(t)
		if i%10 == 0 {
			ex := must(reshard.NewExecutor(nil))(t)
			if r := must(ex.Verify(p))(t); r.Mismatches != 0 {
				t.Fatal("mismatch")
			}
		}
	}
	runtime.GC()
	runtime.GC()
	// Close is idempotent and methods after Close report errors.
	p := trainToInferPlan(t)
	ok(t, p.Close())
	ok(t, p.Close())
	_, err := p.Bytes()
	expectErr(t, err, reshard.InvalidArgument, "plan: used after Close")
	if !reflect.DeepEqual(reshard.AsBytes([]uint32{0x01020304}), []byte{4, 3, 2, 1}) {
		t.Fatal("AsBytes is not a little-endian view")
	}
}
