package reshard_test

import (
	"os"
	"testing"

	"github.com/reshard/reshard/bindings/go"
)

// A reduction tree with scratch buffers, written by the C++ encoder
// (tests/core/scratch_plans.h through tests/fuzz/make_plan_seeds): the
// reader accepts the scratch bit and reads the columns and statistics.
func TestPlanWithScratchIsRead(t *testing.T) {
	b, err := os.ReadFile("../../tests/data/scratch_tree.rsplan")
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
}
