package reshard_test

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/reshard/reshard/bindings/go/reshard"
)

func TestRoundTrip(t *testing.T) {
	plan := trainToInferPlan(t)
	defer plan.Close()
	b := must(plan.Bytes())(t)
	back := must(reshard.PlanFromBytes(b))(t)
	defer back.Close()
	if back.Fingerprint() != plan.Fingerprint() {
		t.Fatal("fingerprint")
	}
	want := must(plan.Stats())(t)
	want.PlanSeconds = 0 // planning time is not part of a plan's bytes
	if !reflect.DeepEqual(must(back.Stats())(t), want) || !reflect.DeepEqual(back.Tensors(), plan.Tensors()) {
		t.Fatal("decoded plan differs")
	}
	if again := must(back.Bytes())(t); !bytes.Equal(again, b) {
		t.Fatal("re-serialized bytes differ")
	}
	ok(t, reshard.VerifyPlanBytes(b))
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	if r := must(ex.Verify(back))(t); r.Mismatches != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestViewReadsThePlan(t *testing.T) {
	plan := trainToInferPlan(t)
	defer plan.Close()
	b := must(plan.Bytes())(t)
	v := must(reshard.ViewPlan(b))(t)
	if v.Version() != 1 || v.Fingerprint() != plan.Fingerprint() || v.NumTensors() != 3 {
		t.Fatal("header")
	}
	for i, info := range plan.Tensors() {
		tv, found := v.Tensor(i)
		if !found || tv.Name() != info.Name || tv.DType() != info.DType || !reflect.DeepEqual(tv.Shape(), info.Shape) {
			t.Fatalf("tensor %d", i)
		}
		if n, _ := tv.Partial(reshard.Dst); n != 1 {
			t.Fatal("partial")
		}
	}
	if _, found := v.Tensor(3); found {
		t.Fatal("tensor past the end")
	}
	s, has := v.Stats()
	wantView := must(plan.Stats())(t)
	wantView.PlanSeconds = 0
	if !has || !reflect.DeepEqual(s, wantView) {
		t.Fatal("stats")
	}
	if !reflect.DeepEqual(v.DeviceTraffic(), must(plan.AllDeviceTraffic())(t)) || !reflect.DeepEqual(v.Processes(), plan.Processes()) {
		t.Fatal("traffic or processes")
	}
	parts := v.Parts()
	if len(parts) != 3 {
		t.Fatalf("%d parts", len(parts))
	}
	for _, p := range parts {
		info := must(plan.PartInfo(p.Process()))(t)
		if uint64(p.NumLocalPieces()) != info.NumLocalPieces || uint64(p.NumSends()) != info.NumSends ||
			uint64(p.NumSendPieces()) != info.NumSendPieces || uint64(p.NumRecvs()) != info.NumRecvs ||
			uint64(p.NumRecvPieces()) != info.NumRecvPieces {
			t.Fatalf("part %d", p.Process())
		}
		var sent int64
		for _, m := range must(plan.Messages(p.Process(), reshard.Send))(t) {
			sent += m.Bytes
		}
		if p.SendBytes() != sent {
			t.Fatal("send bytes")
		}
	}
	if topo := v.Raw().Topology(nil); topo == nil || topo.DevicesLength() != 8 {
		t.Fatal("raw topology")
	}
}

func TestWorkerBytes(t *testing.T) {
	plan := trainToInferPlan(t)
	defer plan.Close()
	b := must(plan.BytesForProcess(2))(t)
	v := must(reshard.ViewPlan(b))(t)
	if parts := v.Parts(); len(parts) != 1 || parts[0].Process() != 2 {
		t.Fatal("worker bytes carry other parts")
	}
	w := must(reshard.PlanFromBytes(b))(t)
	defer w.Close()
	if !w.HasPart(2) || w.HasPart(0) || !reflect.DeepEqual(must(w.PartInfo(2))(t), must(plan.PartInfo(2))(t)) {
		t.Fatal("worker plan")
	}
}

func expectCorrupt(t *testing.T, b []byte, what string) {
	t.Helper()
	_, err := reshard.PlanFromBytes(b)
	expectErr(t, err, reshard.Corrupt, "")
	expectErr(t, reshard.VerifyPlanBytes(b), reshard.Corrupt, "")
	_, err = reshard.ViewPlan(b)
	expectErr(t, err, reshard.Corrupt, "")
}

func TestCorruptedBytesAreRejected(t *testing.T) {
	plan := trainToInferPlan(t)
	defer plan.Close()
	good := must(plan.Bytes())(t)
	expectCorrupt(t, nil, "empty")
	expectCorrupt(t, good[:len(good)/2], "truncated")
	expectCorrupt(t, good[:7], "header only")
	wrongID := append([]byte(nil), good...)
	copy(wrongID[4:8], "XXXX")
	expectCorrupt(t, wrongID, "identifier")
	badRoot := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(badRoot, uint32(len(good)+64))
	expectCorrupt(t, badRoot, "root offset")
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte((uint32(i) * 2654435761) >> 13)
	}
	expectCorrupt(t, garbage, "garbage")
}

func TestFlippedBytesNeverCrashAReader(t *testing.T) {
	plan := trainToInferPlan(t)
	defer plan.Close()
	good := must(plan.Bytes())(t)
	ex := must(reshard.NewExecutor(nil))(t)
	defer ex.Close()
	step := len(good) / 400
	if step < 1 {
		step = 1
	}
	rejected := 0
	for i := 0; i < len(good); i += step {
		b := append([]byte(nil), good...)
		b[i] ^= 0x5a
		p, err := reshard.PlanFromBytes(b)
		if err != nil {
			expectErr(t, err, reshard.Corrupt, "")
			rejected++
			continue
		}
		// Accepted by the C verifier: the generated Go reader must read it.
		v := must(reshard.ViewPlan(b))(t)
		v.Stats()
		for _, part := range v.Parts() {
			part.SendBytes()
		}
		for j := 0; j < v.NumTensors(); j++ {
			tv, _ := v.Tensor(j)
			tv.Shape()
		}
		if p.Fingerprint() == plan.Fingerprint() {
			_, _ = ex.Verify(p)
		}
		p.Close()
	}
	if rejected == 0 {
		t.Fatal("no flipped byte was rejected")
	}
}
