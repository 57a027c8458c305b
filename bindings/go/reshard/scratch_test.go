package reshard_test

import (
	"os"
	"testing"

	"github.com/reshard/reshard/bindings/go/reshard"
)

// A reduction tree with scratch buffers, written by the C++ encoder
// (tests/core/scratch_plans.h through tests/fuzz/make_plan_seeds): the
// reader accepts the scratch bit and reads the columns and statistics.
func TestPlanWithScratchIsRead(t *testing.T) {
	// Two holder hosts, each leader holding both halves.
	plan := readScratchPlan(t, "scratch_tree.rsplan", reshard.PlanFeatureScratch, 4, 8*6*4)
	defer plan.Close()
	// Through the C ABI (1.6): each part's scratch, and every piece naming
	// one falls inside a scratch of its tensor on its device.
	total := 0
	perDevice := map[int64]int64{}
	for _, proc := range plan.Processes() {
		xs, err := plan.Scratches(proc)
		if err != nil {
			t.Fatal(err)
		}
		total += len(xs)
		for _, x := range xs {
			volume := int64(1)
			for d := range x.Lo {
				volume *= x.Hi[d] - x.Lo[d]
			}
			if x.Bytes != volume*4 {
				t.Fatalf("scratch %+v: %d bytes for %d f32 elements", x, x.Bytes, volume)
			}
			perDevice[x.Device] += x.Bytes
		}
		for _, list := range []reshard.PieceList{reshard.LocalPieces, reshard.SendPieces, reshard.RecvPieces} {
			pieces, err := plan.Pieces(proc, list)
			if err != nil {
				t.Fatal(err)
			}
			for _, pc := range pieces {
				for _, end := range [][2]int64{{int64(pc.SrcEntry), pc.SrcDevice}, {int64(pc.DstEntry), pc.DstDevice}} {
					if uint64(end[0]) != reshard.ScratchEntry {
						continue
					}
					mine, inside := false, false
					for _, x := range xs {
						if x.Device != end[1] {
							continue
						}
						mine = true
						in := x.Tensor == pc.Tensor
						for d := range x.Lo {
							in = in && x.Lo[d] <= pc.Lo[d] && pc.Hi[d] <= x.Hi[d]
						}
						inside = inside || in
					}
					if mine && !inside {
						t.Fatalf("piece %+v outside every scratch of device %d", pc, end[1])
					}
				}
			}
		}
		_, err = plan.Scratch(proc, len(xs))
		expectErr(t, err, reshard.OutOfRange, "index")
	}
	most := int64(0)
	for _, b := range perDevice {
		if b > most {
			most = b
		}
	}
	if total != 4 || most != 8*6*4 {
		t.Fatalf("%d scratch buffers, most %d bytes on a device", total, most)
	}
}

// Copy staging (tests/data/staging.rsplan; docs/wire.md "Staging"): the
// reader knows bit 64 and reads the staging buffers through the same
// scratch columns: three of 2 x 4 f32 (devices 0, 1 and 3).
func TestPlanWithStagingIsRead(t *testing.T) {
	plan := readScratchPlan(t, "staging.rsplan", reshard.PlanFeatureStaging, 3, 2*4*4)
	defer plan.Close()
}

// readScratchPlan reads tests/data/NAME with the view and the library: the
// view sees the feature bit and the scratch buffers (scratch of them in
// all), the library's statistics the most scratch bytes one device holds.
func readScratchPlan(t *testing.T, name string, bit uint64, scratch int, maxBytes int64) *reshard.Plan {
	t.Helper()
	b, err := os.ReadFile("../../../tests/data/" + name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := reshard.ViewPlan(b)
	if err != nil {
		t.Fatal(err)
	}
	if v.RequiredFeatures()&bit == 0 {
		t.Fatalf("required_features %d", v.RequiredFeatures())
	}
	n := 0
	for _, p := range v.Parts() {
		n += p.NumScratch()
	}
	if n != scratch {
		t.Fatalf("%d scratch buffers, want %d", n, scratch)
	}
	plan, err := reshard.PlanFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := plan.Stats()
	if err != nil {
		plan.Close()
		t.Fatal(err)
	}
	if stats.MaxScratchBytes != maxBytes {
		plan.Close()
		t.Fatalf("max scratch bytes %d, want %d", stats.MaxScratchBytes, maxBytes)
	}
	return plan
}
