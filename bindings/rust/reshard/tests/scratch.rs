//! A reduction tree with scratch buffers, written by the C++ encoder
//! (tests/core/scratch_plans.h through tests/fuzz/make_plan_seeds): the
//! reader accepts the scratch bit and reads the columns and statistics.
use reshard::{Plan, PlanView, PLAN_FEATURE_SCRATCH};

#[test]
fn plan_with_scratch_is_read() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../tests/data/scratch_tree.rsplan");
    let bytes = std::fs::read(path).unwrap();
    let view = PlanView::new(&bytes).unwrap();
    assert_ne!(view.required_features() & PLAN_FEATURE_SCRATCH, 0);
    // Two holder hosts, each leader holding both halves.
    assert_eq!(view.parts().map(|p| p.num_scratch()).sum::<usize>(), 4);
    let plan = Plan::from_bytes(&bytes).unwrap();
    assert_eq!(plan.stats().unwrap().max_scratch_bytes, 8 * 6 * 4);
}
