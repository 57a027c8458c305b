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
	b, err := os.ReadFile("../../../tests/data/scratch_tree.rsplan")
	if err != nil {
		t.Fatal(err)
	}
	v, err := reshard.ViewPlan(b)
	if err != nil {
		t.Fatal(err)
	}
	if v.RequiredFeatures()&reshard.PlanFeatureScratch == 0 {
		t.Fatalf("required_features %d", v.RequiredFeatures())
	}
	scratch := 0
	for _, p := range v.Parts() {
		scratch += p.NumScratch()
	}
	// Two holder hosts, each leader holding both halves.
	if scratch != 4 {
		t.Fatalf("%d scratch buffers", scratch)
	}
	plan, err := reshard.PlanFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	stats, err := plan.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.MaxScratchBytes != 8*6*4 {
		t.Fatalf("max scratch bytes %d", stats.MaxScratchBytes)
	}
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
	b, err := os.ReadFile("../../../tests/data/staging.rsplan")
	if err != nil {
		t.Fatal(err)
	}
	v, err := reshard.ViewPlan(b)
	if err != nil {
		t.Fatal(err)
	}
	if v.RequiredFeatures()&reshard.PlanFeatureStaging == 0 {
		t.Fatalf("required_features %d", v.RequiredFeatures())
	}
	scratch := 0
	for _, p := range v.Parts() {
		scratch += p.NumScratch()
	}
	if scratch != 3 {
		t.Fatalf("%d staging buffers", scratch)
	}
	plan, err := reshard.PlanFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	stats, err := plan.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.MaxScratchBytes != 2*4*4 {
		t.Fatalf("max scratch bytes %d", stats.MaxScratchBytes)
	}
}
