package reshard

import "github.com/reshard/reshard/bindings/go/reshard/fb"

// CheckPlanFeaturesForTest runs the package's own required_features check
// (which ViewPlan runs after the C verifier) on the root of b, for tests
// of bytes the C verifier would reject first. b must be well-formed.
func CheckPlanFeaturesForTest(b []byte) error {
	return checkPlanFeatures(fb.GetRootAsPlan(b, 0))
}
