// Command smoke plans one small reshard; scripts/test-bindings.sh builds and
// runs it against an installed libreshard found through pkg-config.
package main

import (
	"fmt"
	"os"

	"github.com/reshard/reshard/bindings/go/reshard"
)

func main() {
	mesh, err := reshard.NewMesh([]string{"x"}, []int64{2}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer mesh.Close()
	src, _ := reshard.NewNamedLayout(mesh, []int64{4}, reshard.Sharding{Dims: [][]string{{"x"}}})
	dst, _ := reshard.NewNamedLayout(mesh, []int64{4}, reshard.Sharding{Dims: [][]string{nil}})
	in, _ := reshard.NewPlanInput()
	defer in.Close()
	if err := in.AddTensor("t", []int64{4}, reshard.F32, src, dst); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	plan, err := reshard.NewPlan(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer plan.Close()
	s, _ := plan.Stats()
	fmt.Printf("go via pkg-config: reshard %s, plan %016x, %d network bytes\n", reshard.Version(), plan.Fingerprint(), s.NetworkBytes)
}
