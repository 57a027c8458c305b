//! Reshard the weights of a small transformer block from a training layout to
//! an inference layout with the safe Rust API: build meshes and named
//! shardings, plan, print the plan's statistics, write its bytes, execute it
//! on host buffers and check every destination element.
//!
//!   training:  mesh (dp=2, tp=2) on devices 0-3, processes 0 and 1
//!              (FSDP over dp on dim 0 x Megatron tp), one host each
//!   inference: mesh (tp=4) on devices 4-7, process 2 on a third host
//!
//! Usage: reshard-example [plan-file]   (writes the plan bytes there)
//! Exits non-zero on any error or wrong value.
use std::process::ExitCode;

use reshard::{
    DType, Executor, Layout, LayoutEntry, Mesh, Plan, PlanInput, PlanView, Sharding, Side, TensorBuffers, Topology,
};

/// One weight: name, shape, training and inference shardings.
struct Weight {
    name: &'static str,
    shape: Vec<i64>,
    train: Sharding,
    infer: Sharding,
}

fn weights() -> Vec<Weight> {
    let s = Sharding::new;
    vec![
        // Column-parallel: [dp, tp] -> [-, tp].
        Weight {
            name: "layers.0.attn.qkv",
            shape: vec![512, 768],
            train: s().split(["dp"]).split(["tp"]),
            infer: s().replicated().split(["tp"]),
        },
        // Row-parallel: [(tp, dp), -] -> [tp, -].
        Weight {
            name: "layers.0.attn.out",
            shape: vec![256, 512],
            train: s().split(["tp", "dp"]).replicated(),
            infer: s().split(["tp"]).replicated(),
        },
        // Uneven: 1370 columns in 4 shards of ceil(1370/4) = 343 (the last 341).
        Weight {
            name: "layers.0.mlp.up",
            shape: vec![512, 1370],
            train: s().split(["dp"]).split(["tp"]),
            infer: s().replicated().split(["tp"]),
        },
        // Uneven: 1370 rows in 4 shards of ceil(1370/4) = 343 (the last 341).
        Weight {
            name: "layers.0.mlp.down",
            shape: vec![1370, 512],
            train: s().split(["tp", "dp"]).replicated(),
            infer: s().split(["tp"]).replicated(),
        },
        // A norm: FSDP-sharded -> replicated on every inference device.
        Weight { name: "layers.0.norm", shape: vec![512], train: s().split(["dp"]), infer: s().replicated() },
    ]
}

/// Row-major global index of every element of `e`'s box, in buffer order.
fn global_indices<'a>(shape: &'a [i64], e: &'a LayoutEntry) -> impl Iterator<Item = i64> + 'a {
    let rank = shape.len();
    let total = e.volume();
    (0..total).map(move |mut k| {
        // Decompose k over the box extents (last dim fastest).
        let mut flat = 0;
        let mut coords = vec![0i64; rank];
        for d in (0..rank).rev() {
            let extent = e.hi[d] - e.lo[d];
            coords[d] = e.lo[d] + k % extent;
            k /= extent;
        }
        for d in 0..rank {
            flat = flat * shape[d] + coords[d];
        }
        flat
    })
}

fn run(path: Option<String>) -> reshard::Result<bool> {
    println!("reshard {}", reshard::version());
    let train = Mesh::new(&["dp", "tp"], &[2, 2], None)?;
    let infer = Mesh::new(&["tp"], &[4], Some(&[4, 5, 6, 7]))?;
    let mut topology = Topology::new()?;
    for device in 0..8 {
        let process = if device < 4 { (device / 2) as i32 } else { 2 };
        topology.add_device(device, process, process, (device % 4) as i32)?;
    }
    let mut input = PlanInput::new()?;
    input.set_topology(&topology)?;
    for w in weights() {
        let src = Layout::named(&train, &w.shape, &w.train)?;
        let dst = Layout::named(&infer, &w.shape, &w.infer)?;
        input.add_tensor(w.name, &w.shape, DType::F32, &src, &dst)?;
    }
    let plan = Plan::new(&input)?;

    let s = plan.stats()?;
    println!(
        "plan {:016x}: {} pieces in {} messages, {} round(s), planned in {:.2} ms",
        plan.fingerprint(),
        s.pieces,
        s.messages,
        s.rounds,
        s.plan_seconds * 1e3
    );
    println!(
        "  network bytes  {:>10} (lower bound {}, gap {:.3})",
        s.network_bytes,
        s.lower_bound_network_bytes,
        s.network_bytes as f64 / s.lower_bound_network_bytes.max(1) as f64
    );
    println!("  cross-host     {:>10}", s.cross_host_bytes);
    println!(
        "  max send/recv  {:>10} / {} (lower bounds {} / {})",
        s.max_send_bytes, s.max_recv_bytes, s.lower_bound_max_send_bytes, s.lower_bound_max_recv_bytes
    );
    println!("  cost estimate  {:>10.3e} s (lower bound {:.3e} s)", s.cost_seconds, s.lower_bound_cost_seconds);
    for t in plan.all_device_traffic()? {
        println!(
            "  device {}: sends {} bytes in {} messages, receives {} bytes in {}",
            t.device, t.send_bytes, t.send_messages, t.recv_bytes, t.recv_messages
        );
    }

    // The bytes a coordinator ships to workers; read back in place.
    let bytes = plan.to_bytes()?;
    let view = PlanView::new(&bytes)?;
    println!(
        "plan bytes: {} (format v{}, {} tensors, parts for processes {:?})",
        bytes.len(),
        view.version(),
        view.num_tensors(),
        view.parts().map(|p| p.process()).collect::<Vec<_>>()
    );
    if let Some(path) = path {
        std::fs::write(&path, &*bytes)
            .map_err(|e| reshard::Error::new(reshard::ErrorCode::InvalidArgument, format!("{path}: {e}")))?;
        println!("wrote {path}");
    }

    // Execute on host buffers: sources hold each element's global index,
    // destinations start at -1.
    let mut src: Vec<Vec<Vec<f32>>> = Vec::new();
    let mut dst: Vec<Vec<Vec<f32>>> = Vec::new();
    for t in 0..plan.num_tensors() {
        let shape = plan.tensor(t)?.shape;
        src.push(
            plan.entries(t, Side::Src)?.iter().map(|e| global_indices(&shape, e).map(|i| i as f32).collect()).collect(),
        );
        dst.push(plan.entries(t, Side::Dst)?.iter().map(|e| vec![-1.0; e.volume() as usize]).collect());
    }
    let executor = Executor::new()?;
    let mut buffers: Vec<TensorBuffers> =
        src.iter().zip(dst.iter_mut()).map(|(s, d)| TensorBuffers::from_vecs(s, d)).collect();
    let start = std::time::Instant::now();
    executor.execute(&plan, &mut buffers)?;
    let elapsed = start.elapsed();
    drop(buffers);

    let (mut checked, mut wrong) = (0u64, 0u64);
    for (t, tensor) in dst.iter().enumerate() {
        let shape = plan.tensor(t)?.shape;
        for (e, buf) in plan.entries(t, Side::Dst)?.iter().zip(tensor) {
            for (got, want) in buf.iter().zip(global_indices(&shape, e)) {
                checked += 1;
                wrong += u64::from(*got != want as f32);
            }
        }
    }
    println!(
        "executed in {:.2} ms; checked {checked} destination elements: {wrong} wrong",
        elapsed.as_secs_f64() * 1e3
    );
    Ok(wrong == 0 && checked > 0 && s.network_bytes == s.lower_bound_network_bytes)
}

fn main() -> ExitCode {
    match run(std::env::args().nth(1)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("reshard-example: wrong results");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("reshard-example: {e}");
            ExitCode::FAILURE
        }
    }
}
