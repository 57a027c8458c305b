//! Shardings and layouts.
use std::ptr;

use reshard_sys as sys;

use crate::dtype::ReduceOp;
use crate::error::{check, infallible, Error, Result};
use crate::mesh::Mesh;
use crate::util::{ptr_or_null, CStrings};

/// A named sharding: for each tensor dim, the mesh axes (major to minor)
/// that split it; axes used nowhere replicate; optional partial axes hold
/// unreduced summands. Same meaning as JAX `NamedSharding(mesh,
/// PartitionSpec)` and DTensor placements; like a `PartitionSpec`, it may
/// describe fewer dims than the tensor has (the remaining dims are not split).
///
/// ```
/// use reshard::{ReduceOp, Sharding};
/// // PartitionSpec(("tp", "dp"), None), unreduced over "pp" (sum):
/// let s = Sharding::new().split(["tp", "dp"]).replicated().partial(["pp"], ReduceOp::Sum);
/// assert_eq!(s.rank(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sharding {
    dims: Vec<Vec<String>>,
    partial: Vec<String>,
    partial_op: ReduceOp,
}

impl Sharding {
    /// A sharding of rank 0 (add dims with [`split`](Self::split) and
    /// [`replicated`](Self::replicated)).
    pub fn new() -> Sharding {
        Sharding::default()
    }

    /// A sharding from per-dim axis lists (`[["dp"], []]` = `P("dp", None)`).
    pub fn from_dims<D, S>(dims: D) -> Sharding
    where
        D: IntoIterator,
        D::Item: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Sharding {
            dims: dims.into_iter().map(|d| d.into_iter().map(Into::into).collect()).collect(),
            ..Sharding::default()
        }
    }

    /// Appends a dim split over `axes` (major first).
    pub fn split<S: Into<String>>(mut self, axes: impl IntoIterator<Item = S>) -> Sharding {
        self.dims.push(axes.into_iter().map(Into::into).collect());
        self
    }

    /// Appends a dim that is not split.
    pub fn replicated(mut self) -> Sharding {
        self.dims.push(Vec::new());
        self
    }

    /// Makes the devices along `axes` hold unreduced summands combined by `op`.
    pub fn partial<S: Into<String>>(mut self, axes: impl IntoIterator<Item = S>, op: ReduceOp) -> Sharding {
        self.partial = axes.into_iter().map(Into::into).collect();
        self.partial_op = op;
        self
    }

    /// Number of tensor dims described.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The axes splitting each dim.
    pub fn dims(&self) -> &[Vec<String>] {
        &self.dims
    }

    /// The partial axes and their op.
    pub fn partial_axes(&self) -> (&[String], ReduceOp) {
        (&self.partial, self.partial_op)
    }
}

/// One entry of a layout: a device's shard, the box `[lo, hi)` of the
/// global tensor it holds, and which summand it is (0 unless partial).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutEntry {
    /// Device id.
    pub device: i64,
    /// Summand index (0 unless the layout is partial).
    pub summand: i32,
    /// Lower corner, inclusive (rank values).
    pub lo: Vec<i64>,
    /// Upper corner, exclusive (rank values).
    pub hi: Vec<i64>,
}

impl LayoutEntry {
    /// An entry of summand 0.
    pub fn new(device: i64, lo: Vec<i64>, hi: Vec<i64>) -> LayoutEntry {
        LayoutEntry { device, summand: 0, lo, hi }
    }

    /// Number of elements of the box (0 if empty).
    pub fn volume(&self) -> i64 {
        self.lo.iter().zip(&self.hi).map(|(l, h)| (h - l).max(0)).product()
    }
}

/// Where each shard of a tensor lives (`reshard_layout_t`): entries
/// (device, summand, box) sorted by device. Immutable.
#[derive(Debug)]
pub struct Layout {
    raw: *mut sys::reshard_layout_t,
}

// SAFETY: reshard.h: layout handles are immutable after creation and may be
// used by any number of threads concurrently.
unsafe impl Send for Layout {}
// SAFETY: as above; all methods take &self and only read.
unsafe impl Sync for Layout {}

impl Layout {
    /// Lowers a named sharding of a tensor of `shape` on `mesh`. Uneven sizes
    /// are fine (chunk c = ceil(n/k); shard i covers [i·c, min(n,(i+1)·c))).
    /// A sharding of fewer dims than the shape's leaves the remaining dims
    /// unsplit, as JAX `PartitionSpec("dp")` on a rank-2 array does.
    ///
    /// Errors: [`crate::ErrorCode::InvalidArgument`] (the sharding has more
    /// dims than the shape; an unknown or repeated axis, named as
    /// `layout.spec[d][i]`; a negative size), `OutOfRange` (rank above 8),
    /// `Overflow`.
    pub fn named(mesh: &Mesh, shape: &[i64], sharding: &Sharding) -> Result<Layout> {
        if sharding.dims.len() > shape.len() {
            return Err(Error::invalid(format!(
                "sharding: {} dims given for a tensor of rank {}",
                sharding.dims.len(),
                shape.len()
            )));
        }
        let dim_names = sharding
            .dims
            .iter()
            .enumerate()
            .map(|(d, axes)| CStrings::new(axes, &format!("dims[{d}].names")))
            .collect::<Result<Vec<_>>>()?;
        let mut dims: Vec<sys::reshard_axes_t> =
            dim_names.iter().map(|n| sys::reshard_axes_t { names: n.as_ptr(), count: n.ptrs.len() }).collect();
        // The C ABI takes one entry per dim: the dims past the sharding's are not split.
        dims.resize(shape.len(), sys::reshard_axes_t { names: ptr::null(), count: 0 });
        let partial_names = CStrings::new(&sharding.partial, "partial.names")?;
        let partial = sys::reshard_axes_t { names: partial_names.as_ptr(), count: partial_names.ptrs.len() };
        let mut raw = ptr::null_mut();
        // SAFETY: shape and dims hold shape.len() values; each axes list
        // points at `count` live C strings; raw is a valid output.
        check(unsafe {
            sys::reshard_layout_create_named(
                mesh.as_raw(),
                shape.len(),
                ptr_or_null(shape),
                dims.as_ptr(),
                &partial,
                sharding.partial_op as i32,
                &mut raw,
            )
        })?;
        Ok(Layout { raw })
    }

    /// An explicit box layout of a tensor of `shape`: entries in any order
    /// (a device at most once), boxes inside the shape and possibly
    /// overlapping (replicas); `num_summands` >= 1 summands combined by `op`.
    ///
    /// Errors: [`crate::ErrorCode::InvalidArgument`] naming the entry
    /// (`entries[2].lo` of the wrong length here; `layout.entries[2].box`,
    /// a repeated device, a summand out of range in the library),
    /// `OutOfRange`, `Overflow`.
    pub fn from_boxes(shape: &[i64], entries: &[LayoutEntry], num_summands: i32, op: ReduceOp) -> Result<Layout> {
        let rank = shape.len();
        let mut devices = Vec::with_capacity(entries.len());
        let mut summands = Vec::with_capacity(entries.len());
        let mut lo = Vec::with_capacity(entries.len() * rank);
        let mut hi = Vec::with_capacity(entries.len() * rank);
        for (e, entry) in entries.iter().enumerate() {
            for (name, corner) in [("lo", &entry.lo), ("hi", &entry.hi)] {
                if corner.len() != rank {
                    return Err(Error::invalid(format!(
                        "entries[{e}].{name}: {} values given for rank {rank}",
                        corner.len()
                    )));
                }
            }
            devices.push(entry.device);
            summands.push(entry.summand);
            lo.extend_from_slice(&entry.lo);
            hi.extend_from_slice(&entry.hi);
        }
        let mut raw = ptr::null_mut();
        // SAFETY: every array holds entries.len() (times rank) values, as
        // the call reads; raw is a valid output.
        check(unsafe {
            sys::reshard_layout_create_boxes(
                rank,
                ptr_or_null(shape),
                entries.len(),
                ptr_or_null(&devices),
                ptr_or_null(&summands),
                ptr_or_null(&lo),
                ptr_or_null(&hi),
                num_summands,
                op as i32,
                &mut raw,
            )
        })?;
        Ok(Layout { raw })
    }

    /// The tensor rank.
    pub fn rank(&self) -> usize {
        let mut rank = 0;
        // SAFETY: live handle.
        infallible(unsafe { sys::reshard_layout_rank(self.raw, &mut rank) }, "reshard_layout_rank");
        rank
    }

    /// The tensor shape.
    pub fn shape(&self) -> Vec<i64> {
        let mut shape = vec![0; sys::RESHARD_MAX_RANK];
        // SAFETY: live handle; the call writes rank <= RESHARD_MAX_RANK values.
        infallible(unsafe { sys::reshard_layout_shape(self.raw, shape.as_mut_ptr()) }, "reshard_layout_shape");
        shape.truncate(self.rank());
        shape
    }

    /// Number of entries (device shards).
    pub fn num_entries(&self) -> usize {
        let mut count = 0;
        // SAFETY: live handle.
        infallible(unsafe { sys::reshard_layout_num_entries(self.raw, &mut count) }, "reshard_layout_num_entries");
        count
    }

    /// Entry `index` (sorted by device).
    ///
    /// Errors: [`crate::ErrorCode::OutOfRange`] for `index >= num_entries()`.
    pub fn entry(&self, index: usize) -> Result<LayoutEntry> {
        let rank = self.rank();
        let mut entry = LayoutEntry {
            device: 0,
            summand: 0,
            lo: vec![0; sys::RESHARD_MAX_RANK],
            hi: vec![0; sys::RESHARD_MAX_RANK],
        };
        // SAFETY: live handle; lo/hi have room for RESHARD_MAX_RANK values.
        check(unsafe {
            sys::reshard_layout_entry(
                self.raw,
                index,
                &mut entry.device,
                &mut entry.summand,
                entry.lo.as_mut_ptr(),
                entry.hi.as_mut_ptr(),
            )
        })?;
        entry.lo.truncate(rank);
        entry.hi.truncate(rank);
        Ok(entry)
    }

    /// Every entry, sorted by device.
    pub fn entries(&self) -> Vec<LayoutEntry> {
        (0..self.num_entries()).map(|i| self.entry(i).expect("entry index in range")).collect()
    }

    /// The raw handle, for calls into `reshard-sys`; valid while `self` lives.
    pub fn as_raw(&self) -> *const sys::reshard_layout_t {
        self.raw
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::reshard_layout_destroy(self.raw) }
    }
}
