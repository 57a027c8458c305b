package reshard

// The plan reader in ./fb is generated from schema/plan.fbs by flatc 2.0.x and
// committed, because `go build` and `go get` never run generators: a module
// must carry all of its sources. scripts/test-bindings.sh regenerates it and
// fails when the committed files differ from the schema.
//go:generate flatc --go --go-namespace fb -o . ../../../schema/plan.fbs
