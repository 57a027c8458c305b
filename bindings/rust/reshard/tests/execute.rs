//! Host execution, checked element by element.
mod common;

use common::*;
use reshard::{
    DType, Executor, ExecutorOptions, Layout, Mesh, Plan, PlanInput, ReduceOp, Sharding, Side, TensorBuffers, Transport,
};

#[test]
fn host_execution_moves_every_element() {
    let plan = train_to_infer_plan();
    let mut src = Vec::new();
    let mut dst = Vec::new();
    for t in 0..plan.num_tensors() {
        let (s, d) = f32_buffers(&plan, t, |_| 1.0, -1.0);
        src.push(s);
        dst.push(d);
    }
    let mut buffers: Vec<TensorBuffers> =
        src.iter().zip(dst.iter_mut()).map(|(s, d)| TensorBuffers::from_vecs(s, d)).collect();
    Executor::new().unwrap().execute(&plan, &mut buffers).unwrap();
    drop(buffers);
    let mut checked = 0;
    for (t, tensor_dst) in dst.iter().enumerate() {
        let shape = plan.tensor(t).unwrap().shape;
        for (e, buf) in plan.entries(t, Side::Dst).unwrap().iter().zip(tensor_dst) {
            let want: Vec<f32> = global_indices(&shape, e).into_iter().map(|i| i as f32).collect();
            assert_eq!(buf.len(), want.len());
            for (k, (got, want)) in buf.iter().zip(&want).enumerate() {
                assert_eq!(got, want, "tensor {t} device {} element {k}", e.device);
            }
            checked += buf.len();
        }
    }
    // q and w2 land once per element, the norm on each of 4 devices.
    assert_eq!(checked, 256 * 256 + 512 * 256 + 4 * 256);
}

#[test]
fn partial_sources_are_reduced_on_the_destination() {
    // A gradient unreduced over dp (2 summands), reduce-scattered over dp.
    let mesh = Mesh::new(&["dp", "tp"], &[2, 2], None).unwrap();
    let shape = [6, 10];
    let src = Layout::named(&mesh, &shape, &Sharding::new().replicated().split(["tp"]).partial(["dp"], ReduceOp::Sum))
        .unwrap();
    let dst = Layout::named(&mesh, &shape, &Sharding::new().split(["dp"]).split(["tp"])).unwrap();
    let mut input = PlanInput::new().unwrap();
    input.add_tensor("grad", &shape, DType::F32, &src, &dst).unwrap();
    let plan = Plan::new(&input).unwrap();
    assert_eq!(plan.partial(0, Side::Src).unwrap(), (2, ReduceOp::Sum));
    // Summand s holds (s + 1) * index, so the sum is 3 * index.
    let (s, mut d) = f32_buffers(&plan, 0, |summand| (summand + 1) as f32, f32::NAN);
    Executor::new().unwrap().execute(&plan, &mut [TensorBuffers::from_vecs(&s, &mut d)]).unwrap();
    for (e, buf) in plan.entries(0, Side::Dst).unwrap().iter().zip(&d) {
        let want: Vec<f32> = global_indices(&shape, e).into_iter().map(|i| 3.0 * i as f32).collect();
        assert_eq!(*buf, want, "device {}", e.device);
    }
}

#[test]
fn integer_and_half_precision_buffers() {
    // i64 exact copies; bf16 carried as u16 bits (a permutation keeps bits).
    let mesh = Mesh::new(&["x"], &[3], None).unwrap();
    let other = Mesh::new(&["y"], &[2], Some(&[3, 4])).unwrap();
    let shape = [7];
    let src = Layout::named(&mesh, &shape, &Sharding::new().split(["x"])).unwrap();
    let dst = Layout::named(&other, &shape, &Sharding::new().split(["y"])).unwrap();
    let mut input = PlanInput::new().unwrap();
    input.add_tensor("ids", &shape, DType::I64, &src, &dst).unwrap();
    input.add_tensor("w", &shape, DType::BF16, &src, &dst).unwrap();
    let plan = Plan::new(&input).unwrap();
    let src_e = plan.entries(0, Side::Src).unwrap();
    let dst_e = plan.entries(0, Side::Dst).unwrap();
    let ids: Vec<Vec<i64>> =
        src_e.iter().map(|e| global_indices(&shape, e).iter().map(|i| -1000 * i).collect()).collect();
    let bits: Vec<Vec<u16>> =
        src_e.iter().map(|e| global_indices(&shape, e).iter().map(|i| 0x3f80 + *i as u16).collect()).collect();
    let mut ids_out: Vec<Vec<i64>> = dst_e.iter().map(|e| vec![0; e.volume() as usize]).collect();
    let mut bits_out: Vec<Vec<u16>> = dst_e.iter().map(|e| vec![0; e.volume() as usize]).collect();
    let mut buffers = [TensorBuffers::from_vecs(&ids, &mut ids_out), TensorBuffers::from_vecs(&bits, &mut bits_out)];
    Executor::new().unwrap().execute(&plan, &mut buffers).unwrap();
    assert_eq!(ids_out.concat(), (0..7).map(|i| -1000 * i).collect::<Vec<i64>>());
    assert_eq!(bits_out.concat(), (0..7).map(|i| 0x3f80 + i as u16).collect::<Vec<u16>>());
}

#[test]
fn untyped_byte_buffers_with_the_oracle() {
    // Example specs (boxes, partial sums): fill sources with the oracle's values through byte
    // buffers, execute, check every non-partial destination with the oracle.
    let executor = Executor::with_options(ExecutorOptions { transport: Transport::Host, threads: 2 }).unwrap();
    for name in ["explicit_boxes.json", "partial_sums.json"] {
        let plan = Plan::new(&PlanInput::from_spec(&spec(name)).unwrap()).unwrap();
        // u64 backing keeps every buffer 8-byte aligned.
        let alloc = |bytes: usize| vec![0u64; bytes.div_ceil(8)];
        let mut src: Vec<Vec<Vec<u64>>> = Vec::new();
        let mut dst: Vec<Vec<Vec<u64>>> = Vec::new();
        for t in 0..plan.num_tensors() {
            let mut s = Vec::new();
            for e in 0..plan.num_entries(t, Side::Src).unwrap() {
                let n = plan.shard_bytes(t, Side::Src, e).unwrap();
                let mut buf = alloc(n);
                plan.oracle_fill_source(t, e, &mut as_bytes_mut(&mut buf)[..n]).unwrap();
                s.push(buf);
            }
            src.push(s);
            dst.push(
                (0..plan.num_entries(t, Side::Dst).unwrap())
                    .map(|e| alloc(plan.shard_bytes(t, Side::Dst, e).unwrap()))
                    .collect(),
            );
        }
        let mut buffers: Vec<TensorBuffers> = Vec::new();
        for (t, (s, d)) in src.iter().zip(dst.iter_mut()).enumerate() {
            let s: Vec<&[u8]> =
                s.iter().enumerate().map(|(e, b)| &as_bytes(b)[..plan.shard_bytes(t, Side::Src, e).unwrap()]).collect();
            let d: Vec<&mut [u8]> = d
                .iter_mut()
                .enumerate()
                .map(|(e, b)| {
                    let n = plan.shard_bytes(t, Side::Dst, e).unwrap();
                    &mut as_bytes_mut(b)[..n]
                })
                .collect();
            buffers.push(TensorBuffers::from_bytes(s, d));
        }
        executor.execute(&plan, &mut buffers).unwrap();
        drop(buffers);
        let mut checked = 0;
        for (t, d) in dst.iter().enumerate() {
            if plan.partial(t, Side::Dst).unwrap().0 > 1 {
                continue;
            }
            for (e, b) in d.iter().enumerate() {
                let n = plan.shard_bytes(t, Side::Dst, e).unwrap();
                assert_eq!(
                    plan.oracle_check_destination(t, e, &as_bytes(b)[..n]).unwrap(),
                    0,
                    "{name} tensor {t} entry {e}"
                );
                checked += 1;
            }
        }
        assert!(checked > 0, "{name}");
    }
}

fn as_bytes(v: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding; same memory, same lifetime.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 8) }
}

fn as_bytes_mut(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: every byte pattern is a valid u64.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len() * 8) }
}

#[test]
fn one_executor_runs_plans_from_several_threads() {
    let plan = train_to_infer_plan();
    let executor = Executor::new().unwrap();
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                let (s, mut d) = f32_buffers(&plan, 0, |_| 1.0, 0.0);
                let (s1, mut d1) = f32_buffers(&plan, 1, |_| 1.0, 0.0);
                let (s2, mut d2) = f32_buffers(&plan, 2, |_| 1.0, 0.0);
                let mut buffers = [
                    TensorBuffers::from_vecs(&s, &mut d),
                    TensorBuffers::from_vecs(&s1, &mut d1),
                    TensorBuffers::from_vecs(&s2, &mut d2),
                ];
                executor.execute(&plan, &mut buffers).unwrap();
                drop(buffers);
                let e = &plan.entries(1, Side::Dst).unwrap()[3];
                let want: Vec<f32> = global_indices(&[512, 256], e).into_iter().map(|i| i as f32).collect();
                assert_eq!(d1[3], want);
            });
        }
    });
}
