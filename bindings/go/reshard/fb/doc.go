// Package fb is the reader (and builder) that flatc 2.0.x generates from
// schema/plan.fbs (namespace reshard.fb, root table Plan). Every other file
// in this directory is generated: do not edit them; run `go generate` in
// bindings/go/reshard after changing the schema.
//
// Go's FlatBuffers runtime has no verifier: read only bytes that
// reshard.VerifyPlanBytes accepted, which reshard.ViewPlan does for you.
package fb
