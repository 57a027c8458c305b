//! Bytes cross languages: plans written by Go, C and C++ (files *.rsplan in
//! RESHARD_XLANG_DIR, put there by scripts/test-bindings.sh) are read by the
//! generated Rust reader and by the C decoder, and execute correctly; this
//! test writes rust.rsplan for the Go side to read.
mod common;

use std::path::PathBuf;

use reshard::{Direction, Executor, Plan, PlanView};

#[test]
fn plans_written_elsewhere_read_and_execute() {
    let Some(dir) = std::env::var_os("RESHARD_XLANG_DIR").map(PathBuf::from) else {
        eprintln!(
            "SKIP plans_written_elsewhere_read_and_execute: RESHARD_XLANG_DIR is not set \
                   (scripts/test-bindings.sh sets it)"
        );
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    let own = common::train_to_infer_plan();
    let bytes = own.to_bytes().unwrap();
    let tmp = dir.join("rust.rsplan.tmp");
    std::fs::write(&tmp, &*bytes).unwrap();
    std::fs::rename(&tmp, dir.join("rust.rsplan")).unwrap();

    let executor = Executor::new().unwrap();
    let mut read = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".rsplan") || name == "rust.rsplan" {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        let view = PlanView::new(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
        let plan = Plan::from_bytes(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(view.fingerprint(), plan.fingerprint(), "{name}");
        assert_eq!(view.num_tensors(), plan.num_tensors(), "{name}");
        for (t, info) in view.tensors().zip(plan.tensors()) {
            assert_eq!(t.name(), info.name, "{name}");
            assert_eq!(t.shape().collect::<Vec<_>>(), info.shape, "{name}");
        }
        if let (Some(s), Ok(c)) = (view.stats(), plan.stats()) {
            assert_eq!(s, c, "{name}");
        }
        // Messages, stages and subs included, read the same through the generated
        // reader's columns and the C decoder.
        let (mut staged, mut subs) = (0, 0);
        for part in view.parts() {
            let sends: Vec<_> = part.sends().collect();
            assert_eq!(sends, plan.messages(part.process(), Direction::Send).unwrap(), "{name}");
            assert_eq!(part.recvs().collect::<Vec<_>>(), plan.messages(part.process(), Direction::Recv).unwrap());
            staged += sends.iter().filter(|m| m.stage > 0).count();
            subs += sends.iter().filter(|m| m.sub > 0).count();
        }
        assert_eq!(staged > 0, view.required_features() & reshard::PLAN_FEATURE_STAGES != 0, "{name}");
        assert_eq!(subs > 0, view.required_features() & reshard::PLAN_FEATURE_SUBS != 0, "{name}");
        assert!(!name.contains("subs") || subs > 0, "{name}: no sub-message above 0");
        let all_parts = plan.processes().iter().all(|p| plan.has_part(*p));
        if all_parts {
            let report = executor.verify(&plan).unwrap();
            assert_eq!(report.mismatches, 0, "{name}");
            eprintln!(
                "{name}: {} bytes, {} tensors, {} elements verified, {staged} relay messages",
                data.len(),
                plan.num_tensors(),
                report.elements
            );
        }
        read.push(name);
    }
    eprintln!("read {read:?} from {}", dir.display());
}
