//! Shared fixtures: the training → inference reshard of examples/c, and
//! helpers to build shard buffers whose values encode their global index.
#![allow(dead_code)]

use std::path::PathBuf;

use reshard::{DType, Layout, LayoutEntry, Mesh, Plan, PlanInput, Sharding, Side, Topology};

/// Training mesh (dp=2, tp=2) on devices 0-3 (processes 0 and 1), inference
/// mesh (tp=4) on devices 4-7 (process 2), one host per process; three f32
/// tensors (column-parallel, row-parallel, a replicated norm).
pub fn train_to_infer_input() -> PlanInput {
    let train = Mesh::new(&["dp", "tp"], &[2, 2], None).unwrap();
    let infer = Mesh::new(&["tp"], &[4], Some(&[4, 5, 6, 7])).unwrap();
    let mut topology = Topology::new().unwrap();
    for device in 0..8 {
        let process = if device < 4 { (device / 2) as i32 } else { 2 };
        topology.add_device(device, process, process, (device % 4) as i32).unwrap();
    }
    let mut input = PlanInput::new().unwrap();
    input.set_topology(&topology).unwrap();
    let tensors: [(&str, Vec<i64>, Sharding, Sharding); 3] = [
        (
            "layers.0.attn.q",
            vec![256, 256],
            Sharding::new().split(["dp"]).split(["tp"]),
            Sharding::new().replicated().split(["tp"]),
        ),
        (
            "layers.0.mlp.w2",
            vec![512, 256],
            Sharding::new().split(["tp", "dp"]).replicated(),
            Sharding::new().split(["tp"]).replicated(),
        ),
        ("layers.0.norm", vec![256], Sharding::new().split(["dp"]), Sharding::new().replicated()),
    ];
    for (name, shape, src, dst) in tensors {
        let src = Layout::named(&train, &shape, &src).unwrap();
        let dst = Layout::named(&infer, &shape, &dst).unwrap();
        input.add_tensor(name, &shape, DType::F32, &src, &dst).unwrap();
    }
    input
}

pub fn train_to_infer_plan() -> Plan {
    Plan::new(&train_to_infer_input()).unwrap()
}

/// Row-major global index of every element of `entry`'s box, in buffer order.
pub fn global_indices(shape: &[i64], entry: &LayoutEntry) -> Vec<i64> {
    let rank = shape.len();
    let count: i64 = entry.volume();
    let mut out = Vec::with_capacity(count as usize);
    if count == 0 {
        return out;
    }
    let mut idx = entry.lo.clone();
    loop {
        let mut flat = 0;
        for d in 0..rank {
            flat = flat * shape[d] + idx[d];
        }
        out.push(flat);
        // Increment the N-d index, last dim fastest.
        let mut d = rank;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < entry.hi[d] {
                break;
            }
            idx[d] = entry.lo[d];
        }
    }
}

/// Source buffers (value = global index, scaled per summand by `scale`) and
/// destination buffers (all `fill`) of tensor `t`, as f32.
pub fn f32_buffers(plan: &Plan, t: usize, scale: impl Fn(i32) -> f32, fill: f32) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let shape = plan.tensor(t).unwrap().shape;
    let src = plan
        .entries(t, Side::Src)
        .unwrap()
        .iter()
        .map(|e| global_indices(&shape, e).into_iter().map(|i| i as f32 * scale(e.summand)).collect())
        .collect();
    let dst = plan.entries(t, Side::Dst).unwrap().iter().map(|e| vec![fill; e.volume() as usize]).collect();
    (src, dst)
}

/// examples/specs in the repository.
pub fn specs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../examples/specs")
}

pub fn spec(name: &str) -> String {
    std::fs::read_to_string(specs_dir().join(name)).unwrap()
}
