//! Every error path reachable from Rust: the code, and a message naming the
//! argument or field at fault.
mod common;

use common::*;
use reshard::{
    DType, Error, ErrorCode, Executor, ExecutorOptions, Layout, LayoutEntry, Mesh, Plan, PlanInput, PlanOptions,
    PlanRequest, ReduceOp, Scope, Sharding, Side, TensorBuffers, Topology, Transport,
};

#[track_caller]
fn expect_err<T: std::fmt::Debug>(r: reshard::Result<T>, code: ErrorCode, needle: &str) -> Error {
    let e = r.expect_err(needle);
    assert_eq!(e.code(), code, "{e}");
    assert!(e.message().contains(needle), "message {:?} lacks {:?}", e.message(), needle);
    e
}

#[test]
fn error_values_keep_code_and_message() {
    let e = expect_err(Mesh::new(&["a", "a"], &[1, 1], None), ErrorCode::InvalidArgument, "duplicate axis name");
    assert_eq!(e.code().raw(), 1);
    assert_eq!(e.code().name(), "invalid_argument");
    assert!(e.to_string().starts_with("[invalid_argument] "));
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e.clone());
    assert_eq!(boxed.to_string(), e.to_string());
    assert_eq!(ErrorCode::from_raw(6), ErrorCode::Corrupt);
    assert_eq!(ErrorCode::from_raw(99), ErrorCode::Other(99));
    assert_eq!(ErrorCode::Other(99).name(), "unknown");
    assert_eq!(Error::new(ErrorCode::Timeout, "x").to_string(), "[timeout] x");
}

#[test]
fn mesh_errors() {
    expect_err(Mesh::new(&["dp"], &[2, 2], None), ErrorCode::InvalidArgument, "shape: 2 sizes given for 1 axis names");
    expect_err(Mesh::new(&["d\0p"], &[2], None), ErrorCode::InvalidArgument, "axis_names[0]: contains a NUL byte");
    expect_err(Mesh::new(&["dp", ""], &[2, 2], None), ErrorCode::InvalidArgument, "axis_names[1]: empty axis name");
    expect_err(Mesh::new(&["dp", "tp"], &[2, 0], None), ErrorCode::InvalidArgument, "shape[1]");
    expect_err(Mesh::new(&["dp", "tp"], &[2, 0], Some(&[0, 1])), ErrorCode::InvalidArgument, "shape[1]");
    expect_err(
        Mesh::new(&["x"], &[3], Some(&[0, 1])),
        ErrorCode::InvalidArgument,
        "devices: 2 ids given, the mesh has 3 devices",
    );
    expect_err(
        Mesh::new(&["x"], &[3], Some(&[0, 1, 1])),
        ErrorCode::InvalidArgument,
        "devices[2]: device 1 appears twice",
    );
    expect_err(Mesh::new(&["x"], &[2], Some(&[0, -4])), ErrorCode::InvalidArgument, "devices[1]");
    expect_err(Mesh::new(&["a", "b"], &[1 << 40, 1 << 40], None), ErrorCode::Overflow, "shape");
    expect_err(Mesh::new(&["a", "b"], &[1 << 40, 1 << 40], Some(&[0])), ErrorCode::Overflow, "shape");
}

#[test]
fn named_layout_errors() {
    let mesh = Mesh::new(&["dp", "tp"], &[2, 2], None).unwrap();
    let s = Sharding::new().split(["dp"]).split(["tp"]);
    expect_err(
        Layout::named(&mesh, &[8], &s),
        ErrorCode::InvalidArgument,
        "sharding: 2 dims given for a tensor of rank 1",
    );
    expect_err(Layout::named(&mesh, &[8, -6], &s), ErrorCode::InvalidArgument, "shape[1]: size -6 is negative");
    expect_err(Layout::named(&mesh, &[1 << 62, 1 << 62], &s), ErrorCode::Overflow, "shape");
    expect_err(
        Layout::named(&mesh, &[1; 9], &Sharding::from_dims(vec![Vec::<String>::new(); 9])),
        ErrorCode::OutOfRange,
        "rank 9",
    );
    expect_err(
        Layout::named(&mesh, &[8, 6], &Sharding::new().split(["dp"]).split(["tq"])),
        ErrorCode::InvalidArgument,
        "unknown mesh axis \"tq\"",
    );
    expect_err(
        Layout::named(&mesh, &[8, 6], &Sharding::new().split(["dp"]).split(["dp"])),
        ErrorCode::InvalidArgument,
        "mesh axis \"dp\" used twice",
    );
    expect_err(
        Layout::named(&mesh, &[8, 6], &Sharding::new().split(["dp"]).replicated().partial(["dp"], ReduceOp::Sum)),
        ErrorCode::InvalidArgument,
        "partial.names[0]: mesh axis \"dp\" used twice",
    );
    expect_err(
        Layout::named(&mesh, &[8, 6], &Sharding::new().split(["dp"]).replicated().partial(["zz"], ReduceOp::Max)),
        ErrorCode::InvalidArgument,
        "partial.names[0]: unknown mesh axis \"zz\"",
    );
    expect_err(
        Layout::named(&mesh, &[8, 6], &Sharding::new().split(["d\0p"]).replicated()),
        ErrorCode::InvalidArgument,
        "dims[0].names[0]: contains a NUL byte",
    );
}

#[test]
fn box_layout_errors() {
    let e = |d: i64, lo: [i64; 2], hi: [i64; 2]| LayoutEntry::new(d, lo.to_vec(), hi.to_vec());
    expect_err(
        Layout::from_boxes(
            &[4, 4],
            &[e(0, [0, 0], [4, 4]), LayoutEntry::new(1, vec![0], vec![4, 4])],
            1,
            ReduceOp::Sum,
        ),
        ErrorCode::InvalidArgument,
        "entries[1].lo: 1 values given for rank 2",
    );
    expect_err(
        Layout::from_boxes(&[4, 4], &[e(0, [0, 0], [4, 5])], 1, ReduceOp::Sum),
        ErrorCode::InvalidArgument,
        "entries[0]",
    );
    expect_err(
        Layout::from_boxes(&[4, 4], &[e(0, [0, 0], [2, 4]), e(0, [2, 0], [4, 4])], 1, ReduceOp::Sum),
        ErrorCode::InvalidArgument,
        "entries[1].device: device 0",
    );
    let mut bad_summand = e(1, [0, 0], [4, 4]);
    bad_summand.summand = 2;
    expect_err(
        Layout::from_boxes(&[4, 4], &[e(0, [0, 0], [4, 4]), bad_summand], 2, ReduceOp::Sum),
        ErrorCode::InvalidArgument,
        "entries[1]",
    );
    expect_err(
        Layout::from_boxes(&[4, 4], &[e(0, [0, 0], [4, 4])], 0, ReduceOp::Sum),
        ErrorCode::InvalidArgument,
        "num_summands",
    );
    let layout = Layout::from_boxes(&[4, 4], &[e(0, [0, 0], [4, 4])], 1, ReduceOp::Sum).unwrap();
    expect_err(layout.entry(1), ErrorCode::OutOfRange, "entry");
}

#[test]
fn topology_errors() {
    let mut t = Topology::new().unwrap();
    t.add_device(5, 1, 0, 1).unwrap().add_device(5, 1, 0, 1).unwrap();
    assert_eq!(t.num_devices(), 1);
    expect_err(t.add_device(5, 2, 0, 1).map(|_| ()), ErrorCode::InvalidArgument, "device: device 5 given as process 2");
    expect_err(t.add_device(-1, 0, 0, 0).map(|_| ()), ErrorCode::InvalidArgument, "device: device id -1 is negative");
    expect_err(t.add_device(7, -1, 0, 0).map(|_| ()), ErrorCode::InvalidArgument, "must be non-negative");
    assert_eq!(t.num_devices(), 1, "unchanged on error");
}

#[test]
fn spec_errors() {
    expect_err(PlanInput::from_spec("{\"meshes\": "), ErrorCode::Parse, "line");
    expect_err(PlanInput::from_spec_bytes(&[0xff, 0xfe]), ErrorCode::Parse, "");
    let bad_axis = spec("small_transformer.json").replacen("\"tp\"]", "\"tq\"]", 1);
    let e = PlanInput::from_spec(&bad_axis).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    assert!(e.message().starts_with("tensors[") || e.message().starts_with("meshes"), "JSON path first: {e}");
    assert!(e.message().contains("tq"), "{e}");
}

#[test]
fn input_errors() {
    let mesh = Mesh::new(&["x"], &[2], None).unwrap();
    let l = Layout::named(&mesh, &[8, 6], &Sharding::new().split(["x"]).replicated()).unwrap();
    let small = Layout::named(&mesh, &[5], &Sharding::new().replicated()).unwrap();
    let mut input = PlanInput::new().unwrap();
    expect_err(
        input.add_tensor("", &[8, 6], DType::F32, &l, &l).map(|_| ()),
        ErrorCode::InvalidArgument,
        "name: must not be empty",
    );
    expect_err(
        input.add_tensor("a\0b", &[8, 6], DType::F32, &l, &l).map(|_| ()),
        ErrorCode::InvalidArgument,
        "name: contains a NUL byte",
    );
    expect_err(
        input.add_tensor("x", &[8, 7], DType::F32, &l, &l).map(|_| ()),
        ErrorCode::Mismatch,
        "src: layout shape [8, 6] differs from shape [8, 7]",
    );
    expect_err(
        input.add_tensor("x", &[8, 6], DType::F32, &l, &small).map(|_| ()),
        ErrorCode::Mismatch,
        "dst: layout shape [5]",
    );
    expect_err(
        input.add_tensor("x", &[8, -1], DType::F32, &l, &l).map(|_| ()),
        ErrorCode::InvalidArgument,
        "shape[1]: size -1 is negative",
    );
    assert_eq!(input.num_tensors(), 0, "unchanged on error");

    input.add_tensor("x", &[8, 6], DType::F32, &l, &l).unwrap();
    input.add_tensor("x", &[8, 6], DType::F32, &l, &l).unwrap();
    expect_err(Plan::new(&input), ErrorCode::InvalidArgument, "tensors[1].name");

    let mut input = PlanInput::new().unwrap();
    input.add_tensor("x", &[8, 6], DType::F32, &l, &l).unwrap();
    input.set_options(&PlanOptions { alpha_seconds: -1.0, ..PlanOptions::default() }).unwrap();
    expect_err(Plan::new(&input), ErrorCode::InvalidArgument, "options.alpha_seconds");
    input.set_options(&PlanOptions { inter_host_bytes_per_second: 0.0, ..PlanOptions::default() }).unwrap();
    expect_err(Plan::new(&input), ErrorCode::InvalidArgument, "options.inter_host_bytes_per_second");
    input.set_options(&PlanOptions { split_min_bytes: -1, ..PlanOptions::default() }).unwrap();
    expect_err(Plan::new(&input), ErrorCode::InvalidArgument, "options.split_min_bytes");
}

#[test]
fn uncovered_source_is_rejected_by_the_planner() {
    // The source misses rows 2..4: nothing can fill those destinations.
    let holes = Layout::from_boxes(&[4, 2], &[LayoutEntry::new(0, vec![0, 0], vec![2, 2])], 1, ReduceOp::Sum).unwrap();
    let mesh = Mesh::new(&["x"], &[2], None).unwrap();
    let dst = Layout::named(&mesh, &[4, 2], &Sharding::new().split(["x"]).replicated()).unwrap();
    let mut input = PlanInput::new().unwrap();
    input.add_tensor("t", &[4, 2], DType::F32, &holes, &dst).unwrap();
    let e = Plan::new(&input).unwrap_err();
    assert!(matches!(e.code(), ErrorCode::InvalidArgument | ErrorCode::Mismatch), "{e}");
    assert!(e.message().contains("tensors[0]"), "{e}");
}

/// `PlanRequest::max_plan_bytes` (ABI 1.2): above the limit the library
/// refuses with `ResourceExhausted` and the estimate, before planning.
#[test]
fn plan_memory_limit() {
    assert_eq!(ErrorCode::from_raw(12), ErrorCode::ResourceExhausted);
    assert_eq!(ErrorCode::ResourceExhausted.raw(), 12);
    assert_eq!(ErrorCode::ResourceExhausted.name(), "resource_exhausted");
    let input = train_to_infer_input();
    let limited = |scope, max_plan_bytes| PlanRequest { scope, max_plan_bytes, ..Default::default() };
    expect_err(
        Plan::with_request(&input, limited(Scope::All, 1)),
        ErrorCode::ResourceExhausted,
        "request->max_plan_bytes: the 3 process parts of this plan need about ",
    );
    expect_err(
        Plan::with_request(&input, limited(Scope::All, 1)),
        ErrorCode::ResourceExhausted,
        "above the limit of 1 B (1 bytes); plan one process's part at a time (RESHARD_PLAN_SCOPE_PROCESS",
    );
    expect_err(
        Plan::with_request(&input, limited(Scope::Process(1), 1)),
        ErrorCode::ResourceExhausted,
        "request->max_plan_bytes: process 1's part needs about ",
    );
    expect_err(
        Plan::with_request(&input, limited(Scope::All, -2)),
        ErrorCode::InvalidArgument,
        "request->max_plan_bytes: -2 is invalid",
    );
    // Statistics need no parts; no limit and the default plan.
    Plan::with_request(&input, limited(Scope::Global, 1)).unwrap();
    Plan::with_request(&input, limited(Scope::All, reshard::PLAN_BYTES_UNLIMITED)).unwrap();
    Plan::with_request(&input, PlanRequest::default()).unwrap();
}

#[test]
fn plan_query_errors() {
    let input = train_to_infer_input();
    expect_err(
        Plan::with_request(&input, PlanRequest { scope: Scope::Process(99), global_stats: true, ..Default::default() }),
        ErrorCode::OutOfRange,
        "request.process",
    );
    let no_stats =
        Plan::with_request(&input, PlanRequest { scope: Scope::Process(0), global_stats: false, ..Default::default() })
            .unwrap();
    expect_err(no_stats.stats(), ErrorCode::Unsupported, "plan: has no statistics");
    expect_err(no_stats.device_traffic(0), ErrorCode::Unsupported, "statistics");
    expect_err(no_stats.to_bytes_for_process(1), ErrorCode::OutOfRange, "process");

    let plan = Plan::new(&input).unwrap();
    expect_err(plan.tensor(5), ErrorCode::OutOfRange, "tensor: 5 >= 3 tensors");
    expect_err(plan.entries(3, Side::Src), ErrorCode::OutOfRange, "tensor");
    expect_err(plan.entry(0, Side::Dst, 4), ErrorCode::OutOfRange, "entry");
    expect_err(plan.device_traffic(8), ErrorCode::OutOfRange, "index");
    expect_err(plan.part_info(3), ErrorCode::OutOfRange, "process: this plan holds no part for process 3");
    let info = plan.part_info(2).unwrap();
    expect_err(plan.message(2, reshard::Direction::Recv, info.num_recvs as usize), ErrorCode::OutOfRange, "index");
    expect_err(plan.piece(2, reshard::PieceList::Recv, info.num_recv_pieces as usize), ErrorCode::OutOfRange, "index");
    expect_err(plan.oracle_fill_source(0, 0, &mut [0u8; 3]), ErrorCode::InvalidArgument, "bytes");
    expect_err(plan.oracle_fill_source(7, 0, &mut [0u8; 4]), ErrorCode::OutOfRange, "tensor");
    expect_err(plan.oracle_check_destination(0, 0, &[0u8; 3]), ErrorCode::InvalidArgument, "bytes");
}

#[test]
fn executor_errors() {
    expect_err(
        Executor::with_options(ExecutorOptions { threads: -1, ..Default::default() }),
        ErrorCode::InvalidArgument,
        "threads",
    );
    expect_err(
        Executor::with_options(ExecutorOptions { transport: Transport::Mpi, threads: 0 }),
        ErrorCode::Unsupported,
        "",
    );
    expect_err(
        Executor::with_options(ExecutorOptions { transport: Transport::Nccl, threads: 0 }),
        ErrorCode::Unsupported,
        "",
    );

    let plan = train_to_infer_plan();
    let ex = Executor::new().unwrap();
    let (s0, mut d0) = f32_buffers(&plan, 0, |_| 1.0, 0.0);
    let (s1, mut d1) = f32_buffers(&plan, 1, |_| 1.0, 0.0);
    let (s2, mut d2) = f32_buffers(&plan, 2, |_| 1.0, 0.0);
    let sentinel = d0[0][0];

    expect_err(
        ex.execute(&plan, &mut [TensorBuffers::from_vecs(&s0, &mut d0)]),
        ErrorCode::InvalidArgument,
        "buffers: 1 tensors given, the plan has 3",
    );
    {
        let mut b = [
            TensorBuffers::from_vecs(&s0, &mut d0),
            TensorBuffers::from_vecs(&s1[..3], &mut d1),
            TensorBuffers::from_vecs(&s2, &mut d2),
        ];
        expect_err(
            ex.execute(&plan, &mut b),
            ErrorCode::InvalidArgument,
            "buffers[1].src: 3 buffers given, the layout has 4 entries",
        );
    }
    {
        let mut short = vec![0f32; 10];
        let mut d0_short: Vec<&mut [f32]> = d0[..3].iter_mut().map(|v| v.as_mut_slice()).collect();
        d0_short.push(&mut short);
        let mut bufs = [
            TensorBuffers::new(s0.iter().map(|v| v.as_slice()).collect(), d0_short),
            TensorBuffers::from_vecs(&s1, &mut d1),
            TensorBuffers::from_vecs(&s2, &mut d2),
        ];
        expect_err(ex.execute(&plan, &mut bufs), ErrorCode::InvalidArgument, "buffers[0].dst[3]: 40 bytes given, box");
    }
    {
        let ints: Vec<Vec<i32>> = s2.iter().map(|v| vec![0; v.len()]).collect();
        let mut int_out: Vec<Vec<i32>> = d2.iter().map(|v| vec![0; v.len()]).collect();
        let mut bufs = [
            TensorBuffers::from_vecs(&s0, &mut d0),
            TensorBuffers::from_vecs(&s1, &mut d1),
            TensorBuffers::from_vecs(&ints, &mut int_out),
        ];
        expect_err(
            ex.execute(&plan, &mut bufs),
            ErrorCode::Mismatch,
            "buffers[2]: i32 elements cannot hold tensor 2 of dtype f32",
        );
    }
    {
        // Misaligned untyped buffers: one byte into a u32-aligned allocation.
        let n = plan.shard_bytes(2, Side::Src, 0).unwrap();
        let backing = vec![0u32; n / 4 + 1];
        let bytes: &[u8] = unsafe { std::slice::from_raw_parts(backing.as_ptr().cast::<u8>().add(1), n) };
        let mut src2: Vec<&[u8]> = vec![bytes];
        let rest: Vec<Vec<u8>> = (1..4).map(|e| vec![0u8; plan.shard_bytes(2, Side::Src, e).unwrap()]).collect();
        src2.extend(rest.iter().map(|v| v.as_slice()));
        let mut out: Vec<Vec<u32>> = (0..4).map(|e| vec![0u32; plan.shard_len(2, Side::Dst, e).unwrap()]).collect();
        let out_bytes: Vec<&mut [u8]> = out
            .iter_mut()
            .map(|v| unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 4) })
            .collect();
        let mut bufs = [
            TensorBuffers::from_vecs(&s0, &mut d0),
            TensorBuffers::from_vecs(&s1, &mut d1),
            TensorBuffers::from_bytes(src2, out_bytes),
        ];
        expect_err(
            ex.execute(&plan, &mut bufs),
            ErrorCode::InvalidArgument,
            "buffers[2].src[0]: data not aligned to 4 bytes",
        );
    }
    assert_eq!(d0[0][0], sentinel, "nothing written on error");

    // A plan without the parts the host transport needs.
    let global = Plan::with_request(
        &train_to_infer_input(),
        PlanRequest { scope: Scope::Global, global_stats: true, ..Default::default() },
    )
    .unwrap();
    let mut bufs = [
        TensorBuffers::from_vecs(&s0, &mut d0),
        TensorBuffers::from_vecs(&s1, &mut d1),
        TensorBuffers::from_vecs(&s2, &mut d2),
    ];
    expect_err(ex.execute(&global, &mut bufs), ErrorCode::InvalidArgument, "plan: lacks the part of process");
    expect_err(ex.verify(&global), ErrorCode::InvalidArgument, "plan: lacks the part");
}

#[test]
fn dtype_name_errors() {
    expect_err("f33".parse::<DType>(), ErrorCode::InvalidArgument, "f33");
    expect_err("f\x0032".parse::<DType>(), ErrorCode::InvalidArgument, "name: contains a NUL byte");
}
