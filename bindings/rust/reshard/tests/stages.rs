//! Stages and relays (ABI 1.3): a destination replicated inside one host and
//! fed from another host enters that host once (stage 0) and is forwarded
//! inside it (stage 1); `PlanOptions::relays = false` plans single-hop.
use reshard::{
    fb, Direction, ErrorCode, Executor, PieceList, Plan, PlanInput, PlanOptions, PlanView, Side, KNOWN_PLAN_FEATURES,
    PLAN_FEATURE_BLOCK_SCALES, PLAN_FEATURE_CASTS, PLAN_FEATURE_LATE_SUMMANDS, PLAN_FEATURE_MX_SCALES,
    PLAN_FEATURE_SCRATCH, PLAN_FEATURE_STAGES, PLAN_FEATURE_STAGING, PLAN_FEATURE_SUBS,
};

/// bench/specs/pipeline_2x2_replicated_dst.json, smaller: a 2x2 mesh on host
/// 0 sends to a 2x2 mesh on host 1 whose layout replicates the tensor over
/// `y`, so the two devices of each row of host 1 need the same box. 1.5 MiB:
/// large enough that the relay's stage (one α) costs less than the NIC
/// bytes it saves, so the single-hop guard keeps it.
const PIPELINE_SPEC: &str = r#"{
  "meshes": {
    "stage0": {"axis_names": ["x", "y"], "shape": [2, 2], "devices": [0, 1, 2, 3],
               "processes": [0, 1, 2, 3], "hosts": [0, 0, 0, 0]},
    "stage1": {"axis_names": ["x", "y"], "shape": [2, 2], "devices": [4, 5, 6, 7],
               "processes": [4, 5, 6, 7], "hosts": [1, 1, 1, 1]}
  },
  "tensors": [
    {"name": "act", "shape": [4096, 96], "dtype": "f32",
     "src": {"mesh": "stage0", "spec": ["x", "y"]}, "dst": {"mesh": "stage1", "spec": ["x", null]}}
  ]
}"#;

fn pipeline_plan(relays: bool) -> Plan {
    let mut input = PlanInput::from_spec(PIPELINE_SPEC).unwrap();
    input.set_options(&PlanOptions { relays, ..Default::default() }).unwrap();
    Plan::new(&input).unwrap()
}

fn host_of(device: i64) -> i64 {
    device / 4
}

#[test]
fn relays_are_on_by_default() {
    assert!(PlanOptions::default().relays);
    assert_eq!(reshard::sys::reshard_plan_options_t::default().relays, 1);
    // The default plan is the one with relays, and relays enter the
    // fingerprint.
    let mut input = PlanInput::from_spec(PIPELINE_SPEC).unwrap();
    let default_fingerprint = input.fingerprint().unwrap();
    assert_eq!(Plan::new(&input).unwrap().fingerprint(), pipeline_plan(true).fingerprint());
    input.set_options(&PlanOptions { relays: false, ..Default::default() }).unwrap();
    assert_ne!(input.fingerprint().unwrap(), default_fingerprint);
}

#[test]
fn relays_forward_inside_the_destination_host() {
    let plan = pipeline_plan(true);
    let s = plan.stats().unwrap();
    assert_eq!(s.stages, 2);
    assert!(s.forwarded_bytes > 0 && s.forwarded_bytes < s.network_bytes, "{s:?}");
    // What is forwarded crosses no host: each box enters host 1 once.
    assert_eq!(s.cross_host_bytes, s.network_bytes - s.forwarded_bytes);
    assert_eq!(s.cross_host_bytes, 4096 * 96 * 4, "the tensor enters host 1 once");

    let mut forwarded = 0;
    let mut relay_messages = 0;
    for process in plan.processes() {
        let sends = plan.messages(process, Direction::Send).unwrap();
        let pieces = plan.pieces(process, PieceList::Send).unwrap();
        let mut last = (0, 0);
        for m in &sends {
            assert!(m.stage <= 1, "{m:?}");
            assert!((m.stage, m.round) >= last, "sends ordered by stage, then round");
            last = (m.stage, m.round);
            let carried = &pieces[m.first_piece as usize..(m.first_piece + m.num_pieces) as usize];
            assert!(carried.iter().all(|p| p.stage == m.stage), "a piece has its message's stage");
            if m.stage == 0 {
                // Stage 0: from the source mesh, reading source entries.
                assert_eq!((host_of(m.src_device), host_of(m.dst_device)), (0, 1), "{m:?}");
                for p in carried {
                    let src = plan.entry(p.tensor as usize, Side::Src, p.src_entry as usize).unwrap();
                    assert_eq!(src.device, p.src_device);
                }
                continue;
            }
            // Stage 1: a relay inside host 1, reading the destination entry
            // stage 0 wrote on the sending device.
            relay_messages += 1;
            forwarded += m.bytes;
            assert_eq!((host_of(m.src_device), host_of(m.dst_device)), (1, 1), "{m:?}");
            for p in carried {
                let from = plan.entry(p.tensor as usize, Side::Dst, p.src_entry as usize).unwrap();
                assert_eq!(from.device, p.src_device, "src_entry indexes the destination layout");
                let to = plan.entry(p.tensor as usize, Side::Dst, p.dst_entry as usize).unwrap();
                assert_eq!(to.device, p.dst_device);
                // The forwarded region lies in both destination boxes.
                for d in 0..p.lo.len() {
                    assert!(from.lo[d] <= p.lo[d] && p.hi[d] <= from.hi[d], "{p:?} outside {from:?}");
                    assert!(to.lo[d] <= p.lo[d] && p.hi[d] <= to.hi[d], "{p:?} outside {to:?}");
                }
            }
        }
        // The receiving side sees the same stages.
        for m in plan.messages(process, Direction::Recv).unwrap() {
            let carried = plan.pieces(process, PieceList::Recv).unwrap();
            let carried = &carried[m.first_piece as usize..(m.first_piece + m.num_pieces) as usize];
            assert!(carried.iter().all(|p| p.stage == m.stage));
        }
        assert!(plan.pieces(process, PieceList::Local).unwrap().iter().all(|p| p.stage == 0));
    }
    assert!(relay_messages > 0);
    assert_eq!(forwarded, s.forwarded_bytes);

    // The host executor runs the stages in order: every element arrives.
    let report = Executor::new().unwrap().verify(&plan).unwrap();
    assert_eq!(report.mismatches, 0);
    assert!(report.elements > 0);
}

#[test]
fn without_relays_every_device_fetches_directly() {
    let on = pipeline_plan(true).stats().unwrap();
    let plan = pipeline_plan(false);
    let off = plan.stats().unwrap();
    assert_eq!(off.stages, 1);
    assert_eq!(off.forwarded_bytes, 0);
    // Both replicas of each row cross hosts.
    assert_eq!(off.cross_host_bytes, 2 * 4096 * 96 * 4);
    assert!(on.cross_host_bytes < off.cross_host_bytes);
    for process in plan.processes() {
        for direction in [Direction::Send, Direction::Recv] {
            for m in plan.messages(process, direction).unwrap() {
                assert_eq!(m.stage, 0, "{m:?}");
                assert_eq!((host_of(m.src_device), host_of(m.dst_device)), (0, 1));
            }
        }
    }
    assert_eq!(Executor::new().unwrap().verify(&plan).unwrap().mismatches, 0);
}

#[test]
fn plan_bytes_carry_stages() {
    for relays in [true, false] {
        let plan = pipeline_plan(relays);
        let bytes = plan.to_bytes().unwrap();
        let view = PlanView::new(&bytes).unwrap();
        assert_eq!(view.relays(), relays);
        // Stages where relays are on; the relayed plan may also cut its
        // streams into sub-messages (where the estimate gains by them).
        let features = view.required_features();
        assert_eq!(features & PLAN_FEATURE_STAGES, if relays { PLAN_FEATURE_STAGES } else { 0 });
        assert_eq!(features & !(PLAN_FEATURE_STAGES | PLAN_FEATURE_SUBS), 0);
        let mut expected = plan.stats().unwrap();
        expected.plan_seconds = 0.0;
        assert_eq!(view.stats().unwrap(), expected);
        // The message columns, stage included, read as the C API reports them.
        let mut staged = 0;
        for part in view.parts() {
            let sends: Vec<_> = part.sends().collect();
            let recvs: Vec<_> = part.recvs().collect();
            assert_eq!(sends, plan.messages(part.process(), Direction::Send).unwrap());
            assert_eq!(recvs, plan.messages(part.process(), Direction::Recv).unwrap());
            staged += sends.iter().filter(|m| m.stage == 1).count();
        }
        assert_eq!(staged > 0, relays);
        // Decoded bytes keep the stages and execute.
        let back = Plan::from_bytes(&bytes).unwrap();
        assert_eq!(back.stats().unwrap(), expected);
        for p in plan.processes() {
            assert_eq!(back.pieces(p, PieceList::Recv).unwrap(), plan.pieces(p, PieceList::Recv).unwrap());
        }
        assert_eq!(Executor::new().unwrap().verify(&back).unwrap().mismatches, 0);
    }
}

/// Minimal plan bytes with the given `required_features` (no parts).
fn bytes_requiring(features: u64) -> Vec<u8> {
    let mut builder = flatbuffers::FlatBufferBuilder::new();
    let root =
        fb::Plan::create(&mut builder, &fb::PlanArgs { version: 1, required_features: features, ..Default::default() });
    fb::finish_plan_buffer(&mut builder, root);
    builder.finished_data().to_vec()
}

#[test]
fn unknown_feature_bits_are_rejected() {
    assert_eq!(
        KNOWN_PLAN_FEATURES,
        PLAN_FEATURE_STAGES
            | PLAN_FEATURE_SCRATCH
            | PLAN_FEATURE_LATE_SUMMANDS
            | PLAN_FEATURE_CASTS
            | PLAN_FEATURE_BLOCK_SCALES
            | PLAN_FEATURE_MX_SCALES
            | PLAN_FEATURE_STAGING
            | PLAN_FEATURE_SUBS
    );
    // The stages, scratch, late-summands, casts, block-scales, MXFP8, staging and sub bits are
    // known to the Rust reader ...
    for features in [
        PLAN_FEATURE_STAGES,
        PLAN_FEATURE_SCRATCH,
        3,
        PLAN_FEATURE_LATE_SUMMANDS,
        7,
        PLAN_FEATURE_CASTS,
        15,
        PLAN_FEATURE_BLOCK_SCALES,
        31,
        PLAN_FEATURE_MX_SCALES,
        63,
        PLAN_FEATURE_STAGING,
        127,
        PLAN_FEATURE_SUBS,
        255,
    ] {
        let known = bytes_requiring(features);
        let view = PlanView::new_rust_verified(&known).unwrap();
        assert_eq!(view.required_features(), features);
        assert_eq!(view.parts().count(), 0);
    }
    // ... any other is not, alone or with them.
    for features in [256, 257, 511, 1 << 63] {
        let bytes = bytes_requiring(features);
        let err = PlanView::new_rust_verified(&bytes).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Corrupt);
        assert!(err.message().contains("required_features"), "{err}");
        // The library rejects them too, before the Rust reader looks.
        let err = PlanView::new(&bytes).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Corrupt);
        assert_eq!(Plan::from_bytes(&bytes).unwrap_err().code(), ErrorCode::Corrupt);
    }
}

/// The hosts' NICs (ABI 1.7): one NIC for host 1's four devices makes its
/// NIC carry everything it takes in, so the estimate rises; the bytes stay.
/// The option enters the fingerprint; bad values name the field.
#[test]
fn nics_per_host_shapes_the_estimate() {
    assert_eq!(PlanOptions::default().nics_per_host, 0);
    let mut input = PlanInput::from_spec(PIPELINE_SPEC).unwrap();
    let before = input.fingerprint().unwrap();
    let per_device = Plan::new(&input).unwrap().stats().unwrap();
    input.set_options(&PlanOptions { nics_per_host: 1, ..Default::default() }).unwrap();
    assert_ne!(input.fingerprint().unwrap(), before);
    let one = Plan::new(&input).unwrap().stats().unwrap();
    assert!(one.cost_seconds > per_device.cost_seconds, "{one:?} {per_device:?}");
    assert!(one.lower_bound_cost_seconds > per_device.lower_bound_cost_seconds);
    assert_eq!(one.network_bytes, per_device.network_bytes);
    for bad in [-1, (1 << 20) + 1] {
        let e = input.set_options(&PlanOptions { nics_per_host: bad, ..Default::default() }).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
        assert!(e.message().contains("options->nics_per_host"), "{e}");
    }
}

/// Casts in flight (`PLAN_FEATURE_CASTS`): the view reads each tensor's
/// destination dtype and the element size its messages move, as
/// examples/specs/zero3_to_tp_fp8.json asks (bf16 to f8e4m3, norms kept
/// bf16, the embedding widened to f32, the router narrowed to bf16, lm_head
/// to f8e5m2).
#[test]
fn view_reads_casts() {
    use reshard::DType;
    let spec =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/specs/zero3_to_tp_fp8.json"))
            .unwrap();
    let plan = Plan::new(&PlanInput::from_spec(&spec).unwrap()).unwrap();
    let bytes = plan.to_bytes().unwrap();
    let view = PlanView::new(&bytes).unwrap();
    assert_ne!(view.required_features() & PLAN_FEATURE_CASTS, 0);
    let want = [
        ("embed", DType::BF16, DType::F32),
        ("layers.0.attn_norm", DType::BF16, DType::BF16),
        ("layers.0.attn.qkv", DType::BF16, DType::F8E4M3),
        ("layers.0.attn.o", DType::BF16, DType::F8E4M3),
        ("layers.0.mlp.w13", DType::BF16, DType::F8E4M3),
        ("layers.0.mlp.w2", DType::BF16, DType::F8E4M3),
        ("layers.0.router", DType::F32, DType::BF16),
        ("lm_head", DType::BF16, DType::F8E5M2),
    ];
    assert_eq!(view.num_tensors(), want.len());
    for t in view.tensors() {
        let (_, src, dst) = want.iter().find(|w| w.0 == t.name()).unwrap_or_else(|| panic!("{}", t.name()));
        assert_eq!((t.dtype(), t.dst_dtype()), (Some(*src), Some(*dst)), "{}", t.name());
        assert_eq!(t.wire_size(), Some(src.size().min(dst.size())), "{}", t.name());
    }
    // The C ABI's reading (1.11) agrees with the view's.
    for (i, info) in plan.tensors().iter().enumerate() {
        let t = view.tensor(i).unwrap();
        assert_eq!((Some(info.dtype), Some(info.dst_dtype)), (t.dtype(), t.dst_dtype()), "{}", info.name);
    }
}

/// Block scales (`PLAN_FEATURE_BLOCK_SCALES`): the view and the C ABI (1.12)
/// name each scaled tensor's scale tensor and block as the spec asks
/// (tests/data/zero3_fp8_scales_small.json); the scale tensors are f32 of
/// shape ceil(shape / block), with no scales of their own.
#[test]
fn view_reads_block_scales() {
    use reshard::DType;
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../tests/data/zero3_fp8_scales_small.json"
    ))
    .unwrap();
    let plan = Plan::new(&PlanInput::from_spec(&spec).unwrap()).unwrap();
    let bytes = plan.to_bytes().unwrap();
    let view = PlanView::new(&bytes).unwrap();
    assert_ne!(view.required_features() & PLAN_FEATURE_BLOCK_SCALES, 0);
    let want: [(&str, Option<(&str, [i64; 2])>); 7] = [
        ("embed", None),
        ("attn_norm", None),
        ("qkv", Some(("qkv.scale", [32, 32]))),
        ("o", Some(("o.scale", [32, 32]))),
        ("w2", Some(("w2.scale", [32, 48]))),
        ("router", None),
        ("lm_head", Some(("lm_head.scale", [32, 128]))),
    ];
    assert_eq!(view.num_tensors(), want.len() + 4);
    let infos = plan.tensors();
    for (name, scales) in want {
        let i = infos.iter().position(|t| t.name == name).unwrap_or_else(|| panic!("{name}"));
        let t = view.tensor(i).unwrap();
        let block: Vec<i64> = t.scale_block().collect();
        // The C ABI's reading agrees with the view's.
        assert_eq!((infos[i].scale_tensor, &infos[i].scale_block), (t.scale_tensor(), &block), "{name}");
        let Some((scale_name, want_block)) = scales else {
            assert_eq!((t.scale_tensor(), block.len()), (None, 0), "{name}");
            continue;
        };
        let s = t.scale_tensor().unwrap_or_else(|| panic!("{name} has no scales"));
        assert_eq!(block, want_block, "{name}");
        let st = view.tensor(s).unwrap();
        assert_eq!((st.name(), st.dtype(), st.scale_tensor()), (scale_name, Some(DType::F32), None));
        let ceil: Vec<i64> = t.shape().zip(&want_block).map(|(n, b)| (n + b - 1) / b).collect();
        assert_eq!(st.shape().collect::<Vec<_>>(), ceil, "{name}");
    }
}

/// MXFP8 scales (tests/data/mx_scales.rsplan, written by the C++ test
/// `MxScales.GoldenFileHoldsTheSpecsScaleTensors`): the reader knows bit
/// 32, and each scaled tensor's scale tensor is e8m0 (no cast), of shape
/// ceil(shape / [1, ..., 1, 32]), with one entry per entry of the scaled
/// tensor on each side, on the same device, holding the blocks its box
/// touches: the box with its last dim in units of 32, rounded outwards.
#[test]
fn plan_with_mx_scales_is_read() {
    use reshard::DType;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../tests/data/mx_scales.rsplan");
    let bytes = std::fs::read(path).unwrap();
    let view = PlanView::new(&bytes).unwrap();
    assert_eq!(view.required_features(), PLAN_FEATURE_CASTS | PLAN_FEATURE_BLOCK_SCALES | PLAN_FEATURE_MX_SCALES);
    let plan = Plan::from_bytes(&bytes).unwrap();
    let infos = plan.tensors();
    let mut scaled = 0;
    for (i, t) in view.tensors().enumerate() {
        let Some(s) = t.scale_tensor() else { continue };
        scaled += 1;
        let st = view.tensor(s).unwrap();
        assert_eq!((st.dtype(), st.dst_dtype()), (Some(DType::E8M0), Some(DType::E8M0)), "{}", t.name());
        assert_eq!((infos[s].dtype, infos[s].dst_dtype), (DType::E8M0, DType::E8M0), "{}", t.name());
        let block: Vec<i64> = t.scale_block().collect();
        let shape: Vec<i64> = t.shape().collect();
        let rank = shape.len();
        let mut want_block = vec![1; rank];
        want_block[rank - 1] = 32;
        assert_eq!(block, want_block, "{}", t.name());
        let ceil: Vec<i64> = shape.iter().zip(&block).map(|(n, b)| (n + b - 1) / b).collect();
        assert_eq!(st.shape().collect::<Vec<_>>(), ceil, "{}", t.name());
        for side in [Side::Src, Side::Dst] {
            let values = plan.entries(i, side).unwrap();
            let scales = plan.entries(s, side).unwrap();
            assert_eq!(values.len(), scales.len(), "{} {side:?}", t.name());
            for (x, y) in values.iter().zip(&scales) {
                assert_eq!(y.device, x.device, "{} {side:?}", t.name());
                let lo: Vec<i64> = x.lo.iter().zip(&block).map(|(l, b)| l / b).collect();
                let hi: Vec<i64> = x.hi.iter().zip(&block).map(|(h, b)| (h + b - 1) / b).collect();
                assert_eq!((&y.lo, &y.hi), (&lo, &hi), "{} {side:?}: values {:?}-{:?}", t.name(), x.lo, x.hi);
            }
        }
    }
    assert_eq!(scaled, 2);
}
