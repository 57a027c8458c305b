//! A reduction tree with scratch buffers, written by the C++ encoder
//! (tests/core/scratch_plans.h through tests/fuzz/make_plan_seeds): the
//! reader accepts the scratch bit and reads the columns and statistics, and
//! the C ABI (1.6) lists each part's scratch buffers, which the pieces
//! naming SCRATCH_ENTRY fall inside.
use reshard::{ErrorCode, PieceList, Plan, PlanView, PLAN_FEATURE_SCRATCH, SCRATCH_ENTRY};

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

    let mut total = 0;
    let mut per_device = std::collections::BTreeMap::<i64, i64>::new();
    for process in plan.processes() {
        let scratch = plan.scratches(process).unwrap();
        assert_eq!(scratch.len() as u64, plan.part_info(process).unwrap().num_scratch);
        total += scratch.len();
        for x in &scratch {
            let volume: i64 = x.lo.iter().zip(&x.hi).map(|(l, h)| h - l).product();
            assert_eq!(x.bytes, volume * 4, "f32 box");
            *per_device.entry(x.device).or_default() += x.bytes;
        }
        // Every piece naming a scratch lies inside one on its device.
        for list in [PieceList::Local, PieceList::Send, PieceList::Recv] {
            for p in plan.pieces(process, list).unwrap() {
                for (entry, device) in [(p.src_entry, p.src_device), (p.dst_entry, p.dst_device)] {
                    if entry != SCRATCH_ENTRY || !scratch.iter().any(|x| x.device == device) {
                        continue; // not a scratch, or another process's
                    }
                    assert!(
                        scratch.iter().any(|x| x.device == device
                            && x.tensor == p.tensor
                            && (0..x.lo.len()).all(|d| x.lo[d] <= p.lo[d] && p.hi[d] <= x.hi[d])),
                        "{p:?} outside every scratch of device {device}"
                    );
                }
            }
        }
        let n = scratch.len();
        assert_eq!(plan.scratch(process, n).unwrap_err().code(), ErrorCode::OutOfRange);
    }
    assert_eq!(total, 4);
    assert_eq!(per_device.values().max().copied(), Some(8 * 6 * 4));
}

/// Copy staging (tests/data/staging.rsplan; docs/wire.md "Staging"): the
/// reader knows bit 64 and reads the staging buffers through the same
/// scratch columns: three of 2 x 4 f32 (devices 0, 1 and 3).
#[test]
fn plan_with_staging_is_read() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../tests/data/staging.rsplan");
    let bytes = std::fs::read(path).unwrap();
    let view = PlanView::new(&bytes).unwrap();
    assert_ne!(view.required_features() & reshard::PLAN_FEATURE_STAGING, 0);
    assert_eq!(view.parts().map(|p| p.num_scratch()).sum::<usize>(), 3);
    let plan = Plan::from_bytes(&bytes).unwrap();
    assert_eq!(plan.stats().unwrap().max_scratch_bytes, 2 * 4 * 4);
    let total: usize = plan.processes().into_iter().map(|p| plan.scratches(p).unwrap().len()).sum();
    assert_eq!(total, 3);
}
