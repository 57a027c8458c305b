package reshard_test

import (
	"bytes"
	"testing"

	"github.com/reshard/reshard/bindings/go/reshard"
)

// Authenticated plans: signed bytes read with their key and without one;
// each bad key and each bad MAC is an error with its code and field.
func TestSignedPlanBytes(t *testing.T) {
	plan := trainToInferPlan(t)
	defer plan.Close()
	key := bytes.Repeat([]byte{7}, 32)
	plain := must(plan.Bytes())(t)
	signed := must(plan.SignedBytes(key))(t)
	if len(signed) != len(plain)+48 || !bytes.Equal(signed[:len(plain)], plain) {
		t.Fatal("signed bytes are not the plan bytes and a 48-byte trailer")
	}
	back := must(reshard.PlanFromSignedBytes(signed, key))(t)
	defer back.Close()
	if back.Fingerprint() != plan.Fingerprint() {
		t.Fatal("fingerprint")
	}
	ok(t, reshard.VerifySignedPlanBytes(signed, key))
	ok(t, reshard.VerifyPlanBytes(signed)) // no key: the MAC is not required
	view := must(reshard.ViewPlan(signed))(t)
	if view.Fingerprint() != plan.Fingerprint() {
		t.Fatal("the view of signed bytes")
	}
	worker := must(plan.SignedBytesForProcess(plan.Processes()[0], key))(t)
	ok(t, reshard.VerifySignedPlanBytes(worker, key))

	expectErr(t, reshard.VerifySignedPlanBytes(plain, key), reshard.Corrupt, "mac: missing")
	expectErr(t, reshard.VerifySignedPlanBytes(signed, bytes.Repeat([]byte{8}, 32)), reshard.Corrupt, "mac: does not match")
	edited := append([]byte(nil), signed...)
	edited[len(plain)/2] ^= 1
	_, err := reshard.PlanFromSignedBytes(edited, key)
	expectErr(t, err, reshard.Corrupt, "mac: does not match")
	for _, c := range []struct {
		key    []byte
		needle string
	}{
		{nil, "options->key_size: is 0"},
		{[]byte{}, "options->key_size: is 0"},
		{bytes.Repeat([]byte{1}, 15), "options->key_size: 15 bytes is shorter"},
		{bytes.Repeat([]byte{1}, 1025), "options->key_size: 1025 bytes exceeds"},
	} {
		expectErr(t, reshard.VerifySignedPlanBytes(signed, c.key), reshard.InvalidArgument, c.needle)
		_, err := plan.SignedBytes(c.key)
		expectErr(t, err, reshard.InvalidArgument, c.needle)
	}
}
