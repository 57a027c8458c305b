package reshard_test

import (
	"errors"
	"testing"

	"github.com/reshard/reshard/bindings/go/reshard"
)

// An FSDP1 flat parameter over 2 ranks (w [3, 4] and b [5], f32, aligned
// to 4 elements: b at 12, 9 elements per rank) executed from one flat
// buffer per rank, every destination element checked by the oracle.
const flatSpec = `{"meshes": {"fsdp": {"axis_names": ["dp"], "shape": [2]},
                             "tp": {"axis_names": ["tp"], "shape": [2], "devices": [4, 5]}},
  "flat": {"unit": {"mesh": "fsdp", "align_elements": 4}},
  "tensors": [
    {"name": "w", "shape": [3, 4], "dtype": "f32", "src": {"flat": "unit"},
     "dst": {"mesh": "tp", "spec": [null, "tp"]}},
    {"name": "b", "shape": [5], "dtype": "f32", "src": {"flat": "unit"}, "dst": {"mesh": "tp"}}]}`

func TestFlatLayoutExecutesFromFlatBuffers(t *testing.T) {
	in := must(reshard.PlanInputFromSpec([]byte(flatSpec)))(t)
	defer in.Close()
	flats := must(in.FlatLayouts())(t)
	if len(flats) != 1 {
		t.Fatalf("%d flat layouts, want 1", len(flats))
	}
	fl := flats[0]
	if fl.Name != "unit" || !fl.Source || fl.ShardBytes != 9*4 || len(fl.Devices) != 2 || len(fl.Tensors) != 2 {
		t.Fatalf("flat layout %+v", fl)
	}
	// w: rank 0 holds rows 0-1 and w[2, 0] (a second entry, at element 8),
	// rank 1 holds w[2, 1:4]; b is all on rank 1, at element 3.
	if w := fl.Tensors[0]; len(w.Ranks) != 3 || w.Ranks[2] != 0 || w.ByteOffsets[2] != 8*4 {
		t.Fatalf("w: %+v", w)
	}
	if b := fl.Tensors[1]; b.Tensor != 1 || len(b.Ranks) != 1 || b.Ranks[0] != 1 || b.ByteOffsets[0] != 3*4 {
		t.Fatalf("b: %+v", b)
	}
	plan := must(reshard.NewPlan(in))(t)
	defer plan.Close()
	flat := [][]byte{make([]byte, fl.ShardBytes), make([]byte, fl.ShardBytes)}
	buffers := make([]reshard.TensorBuffers, 2)
	for k, ft := range fl.Tensors {
		views := must(fl.Views(plan, k, flat))(t)
		for e, v := range views {
			ok(t, plan.OracleFillSource(ft.Tensor, e, v))
		}
		buffers[ft.Tensor].Src = views
		for _, entry := range must(plan.Entries(ft.Tensor, reshard.Dst))(t) {
			buffers[ft.Tensor].Dst = append(buffers[ft.Tensor].Dst, make([]byte, entry.Volume()*4))
		}
	}
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	ok(t, ex.Execute(plan, buffers))
	for tensor, b := range buffers {
		for e, d := range b.Dst {
			if n := must(plan.OracleCheckDestination(tensor, e, d))(t); n != 0 {
				t.Fatalf("tensor %d entry %d: %d wrong elements", tensor, e, n)
			}
		}
	}
	// A rank held by another process: nil, and its entries' views are nil.
	views := must(fl.Views(plan, 0, [][]byte{flat[0], nil}))(t)
	if views[0] == nil || views[1] != nil || views[2] == nil {
		t.Fatalf("views with rank 1 remote: %v", views)
	}
	var re *reshard.Error
	if _, err := fl.Views(plan, 0, flat[:1]); !errors.As(err, &re) || re.Code != reshard.InvalidArgument {
		t.Fatalf("one buffer for two ranks: %v", err)
	}
	if _, err := fl.Views(plan, 0, [][]byte{flat[0], flat[1][:5]}); !errors.As(err, &re) || re.Code != reshard.InvalidArgument {
		t.Fatalf("short buffer: %v", err)
	}
	if _, err := fl.Views(plan, 2, flat); !errors.As(err, &re) || re.Code != reshard.OutOfRange {
		t.Fatalf("tensor 2 of 2: %v", err)
	}
}
