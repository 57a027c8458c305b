//! Plan and execute resharding of tensors between device meshes: the safe
//! Rust API over `libreshard` (the C ABI in `reshard/reshard.h`).
//!
//! A reshard moves every tensor from a source [`Layout`] (a [`Sharding`] on
//! a training [`Mesh`], say) to a destination layout (an inference mesh).
//! [`PlanInput`] collects the tensors, a [`Topology`] and [`PlanOptions`];
//! [`Plan`] is the deterministic result, with statistics and a fingerprint;
//! [`Executor`] runs it on host buffers. Plans travel as FlatBuffers bytes
//! ([`Plan::to_bytes`], [`Plan::from_bytes`]) that any language can read;
//! [`PlanView`] reads them in place through code `flatc --rust` generated
//! from `schema/plan.fbs`.
//!
//! Every handle owns its C object and releases it on `Drop`. Every fallible
//! call returns [`Result`] with an [`Error`] that keeps the library's
//! [`ErrorCode`] and message (which names the argument at fault). Handles
//! are `Send` and `Sync` as `reshard.h` documents: meshes, layouts, plans
//! and executors are immutable; builders ([`Topology`], [`PlanInput`]) are
//! changed only through `&mut self`.
//!
//! # Example
//!
//! FSDP-style training (`dp=2` × `tp=2` on devices 0–3) to tensor-parallel
//! inference (`tp=4` on devices 4–7), executed in-process and checked
//! element by element:
//!
//! ```
//! use reshard::{DType, Executor, Layout, Mesh, Plan, PlanInput, Sharding, Side, TensorBuffers};
//!
//! # fn main() -> reshard::Result<()> {
//! let train = Mesh::new(&["dp", "tp"], &[2, 2], None)?;
//! let infer = Mesh::new(&["tp"], &[4], Some(&[4, 5, 6, 7]))?;
//! let shape = [8, 6];
//! let src = Layout::named(&train, &shape, &Sharding::new().split(["dp"]).split(["tp"]))?;
//! let dst = Layout::named(&infer, &shape, &Sharding::new().replicated().split(["tp"]))?;
//!
//! let mut input = PlanInput::new()?;
//! input.add_tensor("w", &shape, DType::F32, &src, &dst)?;
//! let plan = Plan::new(&input)?;
//! let stats = plan.stats()?;
//! assert_eq!(stats.network_bytes, stats.lower_bound_network_bytes);
//!
//! // Source shards hold their global row-major index; destinations start at -1.
//! let value = |r: i64, c: i64| (r * shape[1] + c) as f32;
//! let fill = |e: &reshard::LayoutEntry, f: &dyn Fn(i64, i64) -> f32| -> Vec<f32> {
//!     (e.lo[0]..e.hi[0]).flat_map(|r| (e.lo[1]..e.hi[1]).map(move |c| (r, c))).map(|(r, c)| f(r, c)).collect()
//! };
//! let src_entries = plan.entries(0, Side::Src)?;
//! let dst_entries = plan.entries(0, Side::Dst)?;
//! let src_bufs: Vec<Vec<f32>> = src_entries.iter().map(|e| fill(e, &value)).collect();
//! let mut dst_bufs: Vec<Vec<f32>> = dst_entries.iter().map(|e| fill(e, &|_, _| -1.0)).collect();
//!
//! let executor = Executor::new()?;
//! executor.execute(&plan, &mut [TensorBuffers::from_vecs(&src_bufs, &mut dst_bufs)])?;
//! for (e, buf) in dst_entries.iter().zip(&dst_bufs) {
//!     assert_eq!(*buf, fill(e, &value));
//! }
//!
//! // Bytes for another process, read back without copying.
//! let bytes = plan.to_bytes()?;
//! let view = bytes.view()?;
//! assert_eq!(view.fingerprint(), plan.fingerprint());
//! assert_eq!(view.tensor(0).unwrap().name(), "w");
//! assert_eq!(Plan::from_bytes(&bytes)?.fingerprint(), plan.fingerprint());
//! # Ok(())
//! # }
//! ```
//!
//! # Linking
//!
//! `reshard-sys` finds `libreshard.so` through `RESHARD_LIB_DIR` or
//! `pkg-config reshard`; at run time the dynamic loader must find it too
//! (`LD_LIBRARY_PATH`, an rpath, or a system location). See the README.
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn)]

mod dtype;
mod error;
mod exec;
mod input;
mod layout;
mod mesh;
mod plan;
mod topology;
mod util;
mod view;

pub use dtype::{DType, Element, ReduceOp};
pub use error::{Error, ErrorCode, Result};
pub use exec::{Executor, ExecutorOptions, TensorBuffers, Transport, VerifyReport};
pub use input::{FlatLayout, FlatTensor, PlanInput, PlanOptions};
pub use layout::{Layout, LayoutEntry, Sharding};
pub use mesh::Mesh;
pub use plan::{
    DeviceTraffic, Direction, Message, PartInfo, Piece, PieceList, Plan, PlanBytes, PlanRequest, PlanStats, Scope,
    Scratch, Side, TensorInfo, PLAN_BYTES_UNLIMITED, SCRATCH_ENTRY,
};
pub use topology::Topology;
pub use view::{
    fb, PartView, PlanView, TensorView, KNOWN_PLAN_FEATURES, PLAN_FEATURE_BLOCK_SCALES, PLAN_FEATURE_CASTS,
    PLAN_FEATURE_LATE_SUMMANDS, PLAN_FEATURE_MX_SCALES, PLAN_FEATURE_SCRATCH, PLAN_FEATURE_STAGES,
    PLAN_FEATURE_STAGING, PLAN_FEATURE_SUBS,
};

/// The raw declarations this crate is built on.
pub use reshard_sys as sys;

/// The library's release version (e.g. `"0.1.0"`).
pub fn version() -> &'static str {
    // SAFETY: reshard_version returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(sys::reshard_version()) }.to_str().unwrap_or("?")
}
