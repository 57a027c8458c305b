package reshard_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/reshard/reshard/bindings/go/reshard"
)

// TestCrossLanguageBytes: plans written by Rust, C and C++ (files *.rsplan
// in RESHARD_XLANG_DIR, put there by scripts/test-bindings.sh) are read by
// the generated Go reader and the C decoder and execute correctly; this
// test writes go.rsplan for the Rust side to read.
func TestCrossLanguageBytes(t *testing.T) {
	dir := os.Getenv("RESHARD_XLANG_DIR")
	if dir == "" {
		t.Skip("RESHARD_XLANG_DIR is not set (scripts/test-bindings.sh sets it)")
	}
	ok(t, os.MkdirAll(dir, 0o755))
	plan := trainToInferPlan(t)
	defer plan.Close()
	b := must(plan.Bytes())(t)
	ok(t, os.WriteFile(filepath.Join(dir, "go.rsplan.tmp"), b, 0o644))
	ok(t, os.Rename(filepath.Join(dir, "go.rsplan.tmp"), filepath.Join(dir, "go.rsplan")))

	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*.rsplan"))
	var read []string
	for _, f := range files {
		name := filepath.Base(f)
		if name == "go.rsplan" || strings.HasPrefix(name, "planserver") {
			continue
		}
		data, err := os.ReadFile(f)
		ok(t, err)
		v, err := reshard.ViewPlan(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p, err := reshard.PlanFromBytes(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v.Fingerprint() != p.Fingerprint() || v.NumTensors() != p.NumTensors() {
			t.Fatalf("%s: view and plan disagree", name)
		}
		for i, info := range p.Tensors() {
			tv, _ := v.Tensor(i)
			if tv.Name() != info.Name || !reflect.DeepEqual(tv.Shape(), info.Shape) {
				t.Fatalf("%s: tensor %d", name, i)
			}
		}
		if vs, has := v.Stats(); has {
			if ps := must(p.Stats())(t); vs != ps {
				t.Fatalf("%s: stats: view %+v, decoder %+v", name, vs, ps)
			}
		}
		// Messages, stages and subs included, read the same through the generated
		// reader's columns and the C decoder.
		staged, subs := 0, 0
		for _, part := range v.Parts() {
			sends := must(p.Messages(part.Process(), reshard.Send))(t)
			recvs := must(p.Messages(part.Process(), reshard.Recv))(t)
			if !reflect.DeepEqual(part.Sends(), sends) || !reflect.DeepEqual(part.Recvs(), recvs) {
				t.Fatalf("%s: process %d: messages differ between the view and the decoder", name, part.Process())
			}
			for _, m := range sends {
				if m.Stage > 0 {
					staged++
				}
				if m.Sub > 0 {
					subs++
				}
			}
		}
		if (staged > 0) != (v.RequiredFeatures()&reshard.PlanFeatureStages != 0) {
			t.Fatalf("%s: %d relay messages, required_features %d", name, staged, v.RequiredFeatures())
		}
		if (subs > 0) != (v.RequiredFeatures()&reshard.PlanFeatureSubs != 0) || strings.Contains(name, "subs") && subs == 0 {
			t.Fatalf("%s: %d sub-messages above 0, required_features %d", name, subs, v.RequiredFeatures())
		}
		all := true
		for _, proc := range p.Processes() {
			all = all && p.HasPart(proc)
		}
		if all {
			r := must(ex.Verify(p))(t)
			if r.Mismatches != 0 {
				t.Fatalf("%s: %d mismatches", name, r.Mismatches)
			}
			t.Logf("%s: %d bytes, %d tensors, %d elements verified, %d relay messages", name, len(data), p.NumTensors(), r.Elements, staged)
		}
		p.Close()
		read = append(read, name)
	}
	t.Logf("read %v from %s", read, dir)
}
