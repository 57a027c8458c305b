//! Plan bytes: round trips through the C decoder and the generated Rust
//! reader, worker parts, and corrupted bytes rejected by both.
mod common;

use common::*;
use reshard::{ErrorCode, Executor, Plan, PlanView, Side};

#[test]
fn round_trip_keeps_the_plan_and_the_bytes() {
    let plan = train_to_infer_plan();
    let bytes = plan.to_bytes().unwrap();
    assert!(bytes.len() > 100);
    assert_eq!(&bytes[4..8], b"RSHP", "file identifier");
    let back = Plan::from_bytes(&bytes).unwrap();
    assert_eq!(back.fingerprint(), plan.fingerprint());
    // Planning time is not part of a plan's bytes: it decodes as 0.
    let mut expected = plan.stats().unwrap();
    expected.plan_seconds = 0.0;
    assert_eq!(back.stats().unwrap(), expected);
    assert_eq!(back.tensors(), plan.tensors());
    assert_eq!(back.entries(1, Side::Dst).unwrap(), plan.entries(1, Side::Dst).unwrap());
    assert_eq!(back.to_bytes().unwrap().as_slice(), bytes.as_slice(), "re-serialized bytes are identical");
    assert_eq!(plan.to_bytes().unwrap().as_slice(), bytes.as_slice(), "serialization is deterministic");
    // The decoded plan executes correctly.
    assert_eq!(Executor::new().unwrap().verify(&back).unwrap().mismatches, 0);
    Plan::verify_bytes(&bytes).unwrap();
}

#[test]
fn view_reads_the_same_plan_in_place() {
    let plan = train_to_infer_plan();
    let bytes = plan.to_bytes().unwrap();
    let view = PlanView::new(&bytes).unwrap();
    assert_eq!(view.version(), 1);
    assert_eq!(view.fingerprint(), plan.fingerprint());
    assert_eq!(view.num_tensors(), plan.num_tensors());
    for (t, info) in view.tensors().zip(plan.tensors()) {
        assert_eq!(t.name(), info.name);
        assert_eq!(t.dtype(), Some(info.dtype));
        assert_eq!(t.shape().collect::<Vec<_>>(), info.shape);
        assert_eq!(t.partial(Side::Src).0, 1);
    }
    assert!(view.tensor(3).is_none());
    let mut expected = plan.stats().unwrap();
    expected.plan_seconds = 0.0;
    assert_eq!(view.stats().unwrap(), expected);
    assert_eq!(view.device_traffic(), plan.all_device_traffic().unwrap());
    assert_eq!(view.processes(), plan.processes());
    let parts: Vec<_> = view.parts().collect();
    assert_eq!(parts.len(), 3);
    for part in parts {
        let info = plan.part_info(part.process()).unwrap();
        assert_eq!(part.num_local_pieces() as u64, info.num_local_pieces);
        assert_eq!(part.num_sends() as u64, info.num_sends);
        assert_eq!(part.num_send_pieces() as u64, info.num_send_pieces);
        assert_eq!(part.num_recvs() as u64, info.num_recvs);
        assert_eq!(part.num_recv_pieces() as u64, info.num_recv_pieces);
        let sent: i64 = plan.messages(part.process(), reshard::Direction::Send).unwrap().iter().map(|m| m.bytes).sum();
        assert_eq!(part.send_bytes(), sent);
    }
    // The generated reader reaches every field.
    let raw = view.raw();
    assert_eq!(raw.topology().unwrap().devices().unwrap().len(), 8);
    assert_eq!(raw.options().unwrap().split_min_bytes(), reshard::PlanOptions::default().split_min_bytes);
    // Zero-copy: names point into the buffer.
    let name = view.tensor(0).unwrap().name();
    let range = bytes.as_ptr_range();
    assert!(range.contains(&name.as_ptr()));
}

#[test]
fn worker_bytes_carry_one_part() {
    let plan = train_to_infer_plan();
    let bytes = plan.to_bytes_for_process(2).unwrap();
    let view = bytes.view().unwrap();
    assert_eq!(view.parts().map(|p| p.process()).collect::<Vec<_>>(), vec![2]);
    assert_eq!(view.fingerprint(), plan.fingerprint());
    let worker = Plan::from_bytes(&bytes).unwrap();
    assert!(worker.has_part(2) && !worker.has_part(0));
    assert_eq!(worker.part_info(2).unwrap(), plan.part_info(2).unwrap());
    assert!(bytes.len() < plan.to_bytes().unwrap().len());
}

fn assert_rejected(bytes: &[u8], what: &str) {
    let err = Plan::from_bytes(bytes).expect_err(what);
    assert_eq!(err.code(), ErrorCode::Corrupt, "{what}: {err}");
    assert!(!err.message().is_empty());
    assert_eq!(Plan::verify_bytes(bytes).unwrap_err().code(), ErrorCode::Corrupt, "{what}");
    assert_eq!(PlanView::new(bytes).unwrap_err().code(), ErrorCode::Corrupt, "{what}");
}

#[test]
fn corrupted_bytes_are_rejected() {
    let plan = train_to_infer_plan();
    let good = plan.to_bytes().unwrap().to_vec();
    assert_rejected(&[], "empty");
    assert_rejected(&good[..good.len() / 2], "truncated");
    assert_rejected(&good[..7], "shorter than a header");
    let mut wrong_id = good.clone();
    wrong_id[4..8].copy_from_slice(b"XXXX");
    assert_rejected(&wrong_id, "wrong identifier");
    let err = PlanView::new_rust_verified(&wrong_id).unwrap_err();
    assert!(err.message().contains("RSHP"), "{err}");
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    assert_rejected(&garbage, "garbage");
    // The root offset pointing past the end.
    let mut bad_root = good.clone();
    bad_root[0..4].copy_from_slice(&(good.len() as u32 + 64).to_le_bytes());
    assert_rejected(&bad_root, "root offset out of bounds");
}

#[test]
fn flipped_bytes_never_crash_a_reader() {
    // Each single-byte change is either rejected, or accepted by the C
    // verifier as a consistent plan (a byte in padding, say). Accepted
    // bytes must also read and execute without error.
    let plan = train_to_infer_plan();
    let good = plan.to_bytes().unwrap().to_vec();
    let executor = Executor::new().unwrap();
    let (mut rejected, mut accepted) = (0, 0);
    let step = (good.len() / 400).max(1);
    for i in (0..good.len()).step_by(step) {
        let mut bytes = good.clone();
        bytes[i] ^= 0x5a;
        match Plan::from_bytes(&bytes) {
            Err(e) => {
                assert_eq!(e.code(), ErrorCode::Corrupt, "byte {i}: {e}");
                rejected += 1;
            }
            Ok(p) => {
                accepted += 1;
                let view = PlanView::new(&bytes).expect("both verifiers accept what the C verifier accepts");
                let _ = view.stats();
                let _ = view.tensors().map(|t| t.shape().sum::<i64>()).sum::<i64>();
                if p.fingerprint() == plan.fingerprint() && p.processes() == plan.processes() {
                    let _ = executor.verify(&p);
                }
            }
        }
        // The Rust verifier alone never panics either.
        if let Ok(v) = PlanView::new_rust_verified(&bytes) {
            let _ = v.stats();
            let _ = v.parts().map(|p| p.send_bytes()).fold(0i64, i64::saturating_add);
        }
    }
    assert!(rejected > 0, "rejected {rejected}, accepted {accepted}");
}

/// Authenticated plans (ABI 1.9): signed bytes read with their key and
/// without one; each bad key and each bad MAC is an error with its code and
/// the field it names.
#[test]
fn signed_bytes_need_their_key() {
    fn expect(r: reshard::Result<()>, code: ErrorCode, needle: &str) {
        let e = r.expect_err(needle);
        assert_eq!(e.code(), code, "{e}");
        assert!(e.message().contains(needle), "message {:?} lacks {:?}", e.message(), needle);
    }
    let plan = train_to_infer_plan();
    let key = [7u8; 32];
    let plain = plan.to_bytes().unwrap();
    let signed = plan.to_signed_bytes(&key).unwrap();
    assert_eq!(signed.len(), plain.len() + 48);
    assert_eq!(&signed[..plain.len()], plain.as_slice());
    assert_eq!(Plan::from_signed_bytes(&signed, &key).unwrap().fingerprint(), plan.fingerprint());
    Plan::verify_bytes(&signed).unwrap(); // no key: the MAC is not required
    assert_eq!(PlanView::new(&signed).unwrap().fingerprint(), plan.fingerprint());
    let process = plan.processes()[0];
    Plan::verify_signed_bytes(&plan.to_signed_bytes_for_process(process, &key).unwrap(), &key).unwrap();
    expect(Plan::verify_signed_bytes(&plain, &key), ErrorCode::Corrupt, "mac: missing");
    expect(Plan::verify_signed_bytes(&signed, &[8u8; 32]), ErrorCode::Corrupt, "mac: does not match");
    let mut edited = signed.to_vec();
    edited[plain.len() / 2] ^= 1;
    expect(Plan::from_signed_bytes(&edited, &key).map(|_| ()), ErrorCode::Corrupt, "mac: does not match");
    for (bad, needle) in [
        (vec![], "options->key_size: is 0"),
        (vec![1u8; 15], "options->key_size: 15 bytes is shorter"),
        (vec![1u8; 1025], "options->key_size: 1025 bytes exceeds"),
    ] {
        expect(Plan::verify_signed_bytes(&signed, &bad), ErrorCode::InvalidArgument, needle);
        expect(plan.to_signed_bytes(&bad).map(|_| ()), ErrorCode::InvalidArgument, needle);
    }
}
