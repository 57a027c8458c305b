//! Planning through the safe API: statistics, inspection, scopes, specs.
mod common;

use common::*;
use reshard::{
    DType, Direction, Layout, Mesh, PieceList, Plan, PlanInput, PlanOptions, PlanRequest, Scope, Sharding, Side,
};

#[test]
fn plan_meets_the_traffic_lower_bound() {
    let plan = train_to_infer_plan();
    let s = plan.stats().unwrap();
    assert!(s.network_bytes > 0);
    assert_eq!(s.network_bytes, s.lower_bound_network_bytes, "minimal traffic (DESIGN §2.2)");
    assert!(s.max_send_bytes >= s.lower_bound_max_send_bytes);
    assert!(s.cost_seconds >= s.lower_bound_cost_seconds);
    assert!(s.messages > 0 && s.pieces >= s.messages && s.rounds >= 1);
    // Training and inference are on different hosts; relays inside the
    // inference host may add intra-host bytes.
    assert!(s.cross_host_bytes > 0 && s.cross_host_bytes <= s.network_bytes);
    assert_eq!(s.num_devices, 8);
}

#[test]
fn device_traffic_adds_up_to_the_global_statistics() {
    let plan = train_to_infer_plan();
    let s = plan.stats().unwrap();
    let traffic = plan.all_device_traffic().unwrap();
    assert_eq!(traffic.len(), 8);
    assert!(traffic.windows(2).all(|w| w[0].device < w[1].device), "sorted by device");
    assert_eq!(traffic.iter().map(|t| t.send_bytes).sum::<i64>(), s.network_bytes);
    assert_eq!(traffic.iter().map(|t| t.recv_bytes).sum::<i64>(), s.network_bytes);
    assert_eq!(traffic.iter().map(|t| t.send_bytes).max().unwrap(), s.max_send_bytes);
    assert_eq!(traffic.iter().map(|t| t.recv_bytes).max().unwrap(), s.max_recv_bytes);
    assert_eq!(traffic.iter().map(|t| t.send_messages).sum::<i64>(), s.messages);
    // Training devices only send: they already hold what they need.
    for t in &traffic {
        if t.device < 4 {
            assert_eq!(t.recv_bytes, 0);
        } else {
            assert!(t.recv_bytes > 0);
        }
    }
}

#[test]
fn planning_is_deterministic_and_matches_the_input_fingerprint() {
    let a = train_to_infer_input();
    let b = train_to_infer_input();
    let pa = Plan::new(&a).unwrap();
    let pb = Plan::new(&b).unwrap();
    assert_eq!(a.fingerprint().unwrap(), pa.fingerprint());
    assert_eq!(pa.fingerprint(), pb.fingerprint());
    // plan_seconds differs run to run; everything else is equal.
    let (mut sa, mut sb) = (pa.stats().unwrap(), pb.stats().unwrap());
    sa.plan_seconds = 0.0;
    sb.plan_seconds = 0.0;
    assert_eq!(sa, sb);
    assert_eq!(pa.pieces(2, PieceList::Recv).unwrap(), pb.pieces(2, PieceList::Recv).unwrap());
}

#[test]
fn options_change_the_fingerprint() {
    let mut input = train_to_infer_input();
    let before = input.fingerprint().unwrap();
    input.set_options(&PlanOptions { split_min_bytes: 4096, ..PlanOptions::default() }).unwrap();
    assert_ne!(input.fingerprint().unwrap(), before);
    input.set_options(&PlanOptions::default()).unwrap();
    assert_eq!(input.fingerprint().unwrap(), before, "defaults equal RESHARD_PLAN_OPTIONS_INIT");
}

#[test]
fn tensors_and_entries_describe_the_layouts() {
    let plan = train_to_infer_plan();
    assert_eq!(plan.num_tensors(), 3);
    let tensors = plan.tensors();
    assert_eq!(tensors[0].name, "layers.0.attn.q");
    assert_eq!(tensors[1].shape, vec![512, 256]);
    assert_eq!(tensors[2].dtype, DType::F32);
    // q: [dp, tp] on 2x2 -> four 128x128 shards on devices 0..3.
    let src = plan.entries(0, Side::Src).unwrap();
    assert_eq!(src.iter().map(|e| e.device).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert_eq!((src[1].lo.clone(), src[1].hi.clone()), (vec![0, 128], vec![128, 256]));
    // q: [None, tp] on tp=4 -> column blocks of 64 on devices 4..7.
    let dst = plan.entries(0, Side::Dst).unwrap();
    assert_eq!((dst[2].device, dst[2].lo.clone(), dst[2].hi.clone()), (6, vec![0, 128], vec![256, 192]));
    assert_eq!(plan.shard_len(0, Side::Dst, 2).unwrap(), 256 * 64);
    assert_eq!(plan.shard_bytes(0, Side::Dst, 2).unwrap(), 256 * 64 * 4);
    assert_eq!(plan.entry_of_device(0, Side::Dst, 6).unwrap(), Some(2));
    assert_eq!(plan.entry_of_device(0, Side::Dst, 0).unwrap(), None);
    assert_eq!(plan.partial(0, Side::Src).unwrap().0, 1);
    // norm: replicated on 4 devices.
    assert!(plan.entries(2, Side::Dst).unwrap().iter().all(|e| e.lo == vec![0] && e.hi == vec![256]));
}

#[test]
fn process_parts_agree_with_messages_and_pieces() {
    let plan = train_to_infer_plan();
    assert_eq!(plan.processes(), vec![0, 1, 2]);
    let mut sent = 0;
    let mut received = 0;
    for p in plan.processes() {
        assert!(plan.has_part(p));
        let info = plan.part_info(p).unwrap();
        let sends = plan.messages(p, Direction::Send).unwrap();
        let recvs = plan.messages(p, Direction::Recv).unwrap();
        assert_eq!(sends.len() as u64, info.num_sends);
        assert_eq!(recvs.len() as u64, info.num_recvs);
        let send_pieces = plan.pieces(p, PieceList::Send).unwrap();
        assert_eq!(send_pieces.len() as u64, info.num_send_pieces);
        for m in &sends {
            let carried = &send_pieces[m.first_piece as usize..(m.first_piece + m.num_pieces) as usize];
            assert_eq!(carried.iter().map(|x| x.bytes).sum::<i64>(), m.bytes, "packed size");
            assert!(carried.iter().all(|x| x.src_device == m.src_device && x.dst_device == m.dst_device));
        }
        for piece in &send_pieces {
            let vol: i64 = piece.lo.iter().zip(&piece.hi).map(|(l, h)| h - l).product();
            assert_eq!(vol * 4, piece.bytes, "region matches bytes");
        }
        sent += sends.iter().map(|m| m.bytes).sum::<i64>();
        received += recvs.iter().map(|m| m.bytes).sum::<i64>();
    }
    assert_eq!(sent, plan.stats().unwrap().network_bytes);
    assert_eq!(received, sent);
    assert!(!plan.has_part(7));
}

#[test]
fn scopes_select_the_parts() {
    let input = train_to_infer_input();
    let global =
        Plan::with_request(&input, PlanRequest { scope: Scope::Global, global_stats: true, ..Default::default() })
            .unwrap();
    assert_eq!(global.processes(), vec![0, 1, 2]);
    assert!(!global.has_part(0));
    assert_eq!(global.stats().unwrap().network_bytes, train_to_infer_plan().stats().unwrap().network_bytes);
    let worker =
        Plan::with_request(&input, PlanRequest { scope: Scope::Process(1), global_stats: false, ..Default::default() })
            .unwrap();
    assert!(worker.has_part(1) && !worker.has_part(0) && !worker.has_part(2));
    assert_eq!(worker.fingerprint(), global.fingerprint(), "every process agrees on the fingerprint");
    let full = Plan::new(&input).unwrap();
    assert_eq!(worker.part_info(1).unwrap(), full.part_info(1).unwrap());
}

/// The small example specs (examples/specs also holds fleet-scale specs,
/// far too large to execute in a test).
const SMALL_SPECS: [&str; 3] = ["small_transformer.json", "explicit_boxes.json", "partial_sums.json"];

#[test]
fn example_specs_plan_and_verify() {
    let executor = reshard::Executor::new().unwrap();
    for name in SMALL_SPECS {
        let input = PlanInput::from_spec(&spec(name)).unwrap();
        assert!(input.num_tensors() > 0);
        let plan = Plan::new(&input).unwrap();
        let report = executor.verify(&plan).unwrap();
        assert_eq!(report.mismatches, 0, "{name}");
        assert_eq!(report.tensors as usize, plan.num_tensors());
        assert!(report.elements > 0);
    }
}

#[test]
fn box_layouts_and_uneven_shardings_plan() {
    // A ragged split of 10 rows over 3 devices, resharded to 4 devices
    // (uneven: chunks of 3, 3, 3, 1).
    let src = Layout::from_boxes(
        &[10, 4],
        &[
            reshard::LayoutEntry::new(0, vec![0, 0], vec![2, 4]),
            reshard::LayoutEntry::new(1, vec![2, 0], vec![9, 4]),
            reshard::LayoutEntry::new(2, vec![9, 0], vec![10, 4]),
        ],
        1,
        reshard::ReduceOp::Sum,
    )
    .unwrap();
    assert_eq!(src.num_entries(), 3);
    assert_eq!(src.shape(), vec![10, 4]);
    assert_eq!(src.entry(1).unwrap().lo, vec![2, 0]);
    let mesh = Mesh::new(&["x"], &[4], Some(&[3, 4, 5, 6])).unwrap();
    assert_eq!((mesh.rank(), mesh.size()), (1, 4));
    let dst = Layout::named(&mesh, &[10, 4], &Sharding::new().split(["x"]).replicated()).unwrap();
    let hi: Vec<i64> = dst.entries().iter().map(|e| e.hi[0]).collect();
    assert_eq!(hi, vec![3, 6, 9, 10]);
    // Fewer dims than the rank: the rest are not split (JAX PartitionSpec("x")).
    let short = Layout::named(&mesh, &[10, 4], &Sharding::new().split(["x"])).unwrap();
    assert_eq!(short.entries(), dst.entries());
    let replicated = Layout::named(&mesh, &[10, 4], &Sharding::new()).unwrap().entries();
    assert_eq!((replicated.len(), replicated[3].lo.clone(), replicated[3].hi.clone()), (4, vec![0, 0], vec![10, 4]));
    let mut input = PlanInput::new().unwrap();
    input.add_tensor("ragged", &[10, 4], DType::I32, &src, &dst).unwrap();
    let plan = Plan::new(&input).unwrap();
    assert_eq!(reshard::Executor::new().unwrap().verify(&plan).unwrap().mismatches, 0);
}

#[test]
fn handles_are_send_and_sync_and_plan_concurrently() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Mesh>();
    assert_send_sync::<Layout>();
    assert_send_sync::<reshard::Topology>();
    assert_send_sync::<PlanInput>();
    assert_send_sync::<Plan>();
    assert_send_sync::<reshard::PlanBytes>();
    assert_send_sync::<reshard::Executor>();
    assert_send_sync::<reshard::Error>();

    let input = train_to_infer_input();
    let fingerprints: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| Plan::new(&input).unwrap().fingerprint())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(fingerprints.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn dtypes_round_trip_through_names() {
    for d in DType::ALL {
        assert_eq!(DType::from_raw(d.raw()), Some(d));
        if d == DType::E8M0 {
            // A scale tensor's dtype only: no spec names it.
            assert_eq!(d.name(), "e8m0");
            assert_eq!(d.size(), 1);
            assert!(d.name().parse::<DType>().is_err());
            continue;
        }
        assert_eq!(d.name().parse::<DType>().unwrap(), d);
        assert_eq!(DType::from_raw(d.raw()), Some(d));
    }
    assert_eq!("bfloat16".parse::<DType>().unwrap(), DType::BF16);
    assert_eq!(DType::BF16.size(), 2);
    assert_eq!(DType::F8E4M3.size(), 1);
    assert!(reshard::version().starts_with("0."));
}

/// Flat layouts of a spec (C ABI 1.10): an FSDP1 flat parameter over 2 ranks
/// (w [3, 4] and b [5] in f32, aligned to 4 elements: b at 12, 9 elements
/// per rank); w's third entry is rank 0's second box, w[2, 0], at element 8.
#[test]
fn flat_layouts_give_each_entrys_rank_and_offset() {
    let spec = r#"{"meshes": {"fsdp": {"axis_names": ["dp"], "shape": [2]},
                              "tp": {"axis_names": ["tp"], "shape": [2], "devices": [4, 5]}},
        "flat": {"unit": {"mesh": "fsdp", "align_elements": 4}},
        "tensors": [
          {"name": "w", "shape": [3, 4], "dtype": "f32", "src": {"flat": "unit"},
           "dst": {"mesh": "tp", "spec": [null, "tp"]}},
          {"name": "b", "shape": [5], "dtype": "f32", "src": {"flat": "unit"}, "dst": {"mesh": "tp"}}]}"#;
    let input = PlanInput::from_spec(spec).unwrap();
    let flats = input.flat_layouts().unwrap();
    assert_eq!(flats.len(), 1);
    let f = &flats[0];
    assert_eq!((f.name.as_str(), f.source, f.shard_bytes), ("unit", true, 9 * 4));
    assert_eq!(f.devices, vec![0, 1]);
    assert_eq!(f.tensors[0].tensor, 0);
    assert_eq!(f.tensors[0].ranks, vec![0, 1, 0]);
    assert_eq!(f.tensors[0].byte_offsets, vec![0, 0, 8 * 4]);
    assert_eq!(
        (f.tensors[1].tensor, f.tensors[1].ranks.clone(), f.tensors[1].byte_offsets.clone()),
        (1, vec![1], vec![3 * 4])
    );
    assert!(PlanInput::new().unwrap().flat_layouts().unwrap().is_empty());
}
