package reshard_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/reshard/reshard/bindings/go/reshard"
)

// trainToInferInput is the reshard of examples/c: training mesh (dp=2,
// tp=2) on devices 0-3 (processes 0 and 1), inference mesh (tp=4) on
// devices 4-7 (process 2), one host per process; three f32 tensors.
func trainToInferInput(t testing.TB) *reshard.PlanInput {
	t.Helper()
	train := must(reshard.NewMesh([]string{"dp", "tp"}, []int64{2, 2}, nil))(t)
	defer train.Close()
	infer := must(reshard.NewMesh([]string{"tp"}, []int64{4}, []int64{4, 5, 6, 7}))(t)
	defer infer.Close()
	topo := must(reshard.NewTopology())(t)
	defer topo.Close()
	for d := int64(0); d < 8; d++ {
		p := int32(2)
		if d < 4 {
			p = int32(d / 2)
		}
		ok(t, topo.AddDevice(d, p, p, int32(d%4)))
	}
	in := must(reshard.NewPlanInput())(t)
	ok(t, in.SetTopology(topo))
	tensors := []struct {
		name     string
		shape    []int64
		src, dst reshard.Sharding
	}{
		{"layers.0.attn.q", []int64{256, 256}, reshard.Sharding{Dims: [][]string{{"dp"}, {"tp"}}}, reshard.Sharding{Dims: [][]string{{}, {"tp"}}}},
		{"layers.0.mlp.w2", []int64{512, 256}, reshard.Sharding{Dims: [][]string{{"tp", "dp"}, {}}}, reshard.Sharding{Dims: [][]string{{"tp"}, {}}}},
		{"layers.0.norm", []int64{256}, reshard.Sharding{Dims: [][]string{{"dp"}}}, reshard.Sharding{Dims: [][]string{{}}}},
	}
	for _, x := range tensors {
		src := must(reshard.NewNamedLayout(train, x.shape, x.src))(t)
		dst := must(reshard.NewNamedLayout(infer, x.shape, x.dst))(t)
		ok(t, in.AddTensor(x.name, x.shape, reshard.F32, src, dst))
		src.Close()
		dst.Close()
	}
	return in
}

func trainToInferPlan(t testing.TB) *reshard.Plan {
	t.Helper()
	in := trainToInferInput(t)
	defer in.Close()
	return must(reshard.NewPlan(in))(t)
}

// must unwraps (value, error), failing the test on error.
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// expectErr checks the code and that the message contains needle.
func expectErr(t testing.TB, err error, code reshard.ErrorCode, needle string) {
	t.Helper()
	var e *reshard.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *reshard.Error with %s %q, got %v", code, needle, err)
	}
	if e.Code != code || !strings.Contains(e.Message, needle) {
		t.Fatalf("want [%s] ...%q..., got %v", code, needle, err)
	}
}

// globalIndices lists the row-major global index of every element of an
// entry's box, in buffer order.
func globalIndices(shape []int64, e reshard.LayoutEntry) []int64 {
	n := e.Volume()
	out := make([]int64, 0, n)
	if n == 0 {
		return out
	}
	idx := append([]int64(nil), e.Lo...)
	for {
		var flat int64
		for d := range shape {
			flat = flat*shape[d] + idx[d]
		}
		out = append(out, flat)
		d := len(shape) - 1
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < e.Hi[d] {
				break
			}
			idx[d] = e.Lo[d]
		}
		if d < 0 {
			return out
		}
	}
}

// f32Buffers builds source buffers (global index times scale(summand)) and
// destination buffers (all fill) of tensor t.
func f32Buffers(t testing.TB, plan *reshard.Plan, tensor int, scale func(int32) float32, fill float32) ([][]float32, [][]float32) {
	info := must(plan.Tensor(tensor))(t)
	var src, dst [][]float32
	for _, e := range must(plan.Entries(tensor, reshard.Src))(t) {
		var v []float32
		for _, i := range globalIndices(info.Shape, e) {
			v = append(v, float32(i)*scale(e.Summand))
		}
		src = append(src, v)
	}
	for _, e := range must(plan.Entries(tensor, reshard.Dst))(t) {
		v := make([]float32, e.Volume())
		for i := range v {
			v[i] = fill
		}
		dst = append(dst, v)
	}
	return src, dst
}

func bytesOf(v [][]float32) [][]byte {
	out := make([][]byte, len(v))
	for i := range v {
		out[i] = reshard.AsBytes(v[i])
	}
	return out
}

func specPath(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "specs", name)
}

func readSpec(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(specPath(name))
	ok(t, err)
	return b
}
