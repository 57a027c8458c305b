//! Planner inputs.
use std::ptr;

use reshard_sys as sys;

use crate::dtype::DType;
use crate::error::{check, infallible, Result};
use crate::layout::Layout;
use crate::topology::Topology;
use crate::util::{c_string, ptr_or_null};

/// Planner options (`reshard_plan_options_t`). `Default` gives the
/// library's defaults (`RESHARD_PLAN_OPTIONS_INIT`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanOptions {
    /// A piece held by several remote replicas is split across them when it
    /// has at least this many bytes (>= 0). Default 1 MiB.
    pub split_min_bytes: i64,
    /// α–β cost model: seconds per message (>= 0). Default 5 µs.
    pub alpha_seconds: f64,
    /// Bytes per second inside a host (> 0). Default 100e9.
    pub intra_host_bytes_per_second: f64,
    /// Bytes per second between hosts (> 0). Default 25e9.
    pub inter_host_bytes_per_second: f64,
    /// Staging memory per device per round; 0: unbounded. Default 1 GiB.
    pub staging_budget_bytes: i64,
    /// Relays for replicated destinations (ABI 1.3; docs/design.md §2.4).
    /// Default true: where several devices of one host need the same box
    /// that no device of that host holds, one of them receives it over the
    /// network (stage 0) and forwards it to the others inside the host
    /// (stage 1), so the box enters the host once. False: every device
    /// fetches what it lacks directly (single-hop, one stage).
    pub relays: bool,
    /// Reduce-scatter then gather for partial sources (ABI 1.3). Default
    /// true: each part of a destination cell is reduced by one device from
    /// every summand (stage 0) and forwarded reduced to the others (stage 1).
    /// False: every device receives every summand it lacks.
    pub reduce_scatter: bool,
    /// NICs per host for the α–β estimate and the choices made by it (ABI
    /// 1.7; docs/design.md §2.8). Default 0: one NIC per device. With n > 0
    /// the host's NICs form min(n, m) groups over its m devices of the plan.
    pub nics_per_host: i32,
    /// The single-hop guard (ABI 1.8). Default true: groups of like tensors
    /// whose routes (relays, reduce-scatter) make the whole plan slower by
    /// its α–β estimate go single-hop. False: every route is kept.
    pub single_hop_guard: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        let d = sys::reshard_plan_options_t::default();
        PlanOptions {
            split_min_bytes: d.split_min_bytes,
            alpha_seconds: d.alpha_seconds,
            intra_host_bytes_per_second: d.intra_host_bytes_per_second,
            inter_host_bytes_per_second: d.inter_host_bytes_per_second,
            staging_budget_bytes: d.staging_budget_bytes,
            relays: d.relays != 0,
            reduce_scatter: d.reduce_scatter != 0,
            nics_per_host: d.nics_per_host,
            single_hop_guard: d.single_hop_guard != 0,
        }
    }
}

/// Everything the planner needs (`reshard_plan_input_t`): tensors with
/// source and destination layouts, a topology and options. A builder:
/// modified through `&mut self`, planned from through `&self`.
#[derive(Debug)]
pub struct PlanInput {
    raw: *mut sys::reshard_plan_input_t,
}

// SAFETY: reshard.h: builders "must not be modified by one thread while
// another uses them"; nothing is tied to the creating thread.
unsafe impl Send for PlanInput {}
// SAFETY: every modifying method takes &mut self; through &self the input is
// only read (reshard_plan_create "only reads it"), which may happen
// concurrently.
unsafe impl Sync for PlanInput {}

impl PlanInput {
    /// An empty input: no tensors, default topology and options.
    pub fn new() -> Result<PlanInput> {
        let mut raw = ptr::null_mut();
        // SAFETY: raw is a valid output.
        check(unsafe { sys::reshard_plan_input_create(&mut raw) })?;
        Ok(PlanInput { raw })
    }

    /// Parses a JSON spec (docs/spec.md: meshes, tensors with named
    /// shardings, processes and hosts, optional options).
    ///
    /// Errors: [`crate::ErrorCode::Parse`] (malformed JSON, with line and
    /// column), [`crate::ErrorCode::InvalidArgument`] whose message starts
    /// with the JSON path of the bad value (`tensors[2].src.spec[1]: ...`).
    pub fn from_spec(json: &str) -> Result<PlanInput> {
        PlanInput::from_spec_bytes(json.as_bytes())
    }

    /// [`from_spec`](Self::from_spec) for bytes (need not be UTF-8 checked
    /// by the caller; the library reports bad text as a parse error).
    pub fn from_spec_bytes(json: &[u8]) -> Result<PlanInput> {
        let mut raw = ptr::null_mut();
        // SAFETY: json.len() bytes are readable at json.as_ptr() (NULL only
        // with length 0); raw is a valid output.
        check(unsafe { sys::reshard_plan_input_from_spec(ptr_or_null(json).cast(), json.len(), &mut raw) })?;
        Ok(PlanInput { raw })
    }

    /// Appends a tensor named `name` (unique) of `shape` and `dtype`, moving
    /// from layout `src` to layout `dst` (copied; both must have `shape`).
    ///
    /// Errors: [`crate::ErrorCode::InvalidArgument`] (empty name, NUL byte,
    /// negative size), [`crate::ErrorCode::Mismatch`] (`src: layout shape
    /// [4, 8] differs from shape [4, 6]`), `OutOfRange`, `Overflow`. The
    /// input is unchanged on error. Duplicate names are reported by
    /// [`Plan::new`](crate::Plan::new).
    pub fn add_tensor(
        &mut self,
        name: &str,
        shape: &[i64],
        dtype: DType,
        src: &Layout,
        dst: &Layout,
    ) -> Result<&mut Self> {
        let name = c_string(name, "name")?;
        // SAFETY: live handles; shape holds shape.len() values; name is
        // NUL-terminated; everything is copied by the call.
        check(unsafe {
            sys::reshard_plan_input_add_tensor(
                self.raw,
                name.as_ptr(),
                shape.len(),
                ptr_or_null(shape),
                dtype.raw(),
                src.as_raw(),
                dst.as_raw(),
            )
        })?;
        Ok(self)
    }

    /// Replaces the topology by a copy of `topology`.
    pub fn set_topology(&mut self, topology: &Topology) -> Result<&mut Self> {
        // SAFETY: live handles.
        check(unsafe { sys::reshard_plan_input_set_topology(self.raw, topology.as_raw()) })?;
        Ok(self)
    }

    /// Replaces the planner options (checked by [`Plan::new`](crate::Plan::new),
    /// with messages naming `options.<field>`).
    pub fn set_options(&mut self, options: &PlanOptions) -> Result<&mut Self> {
        let raw = sys::reshard_plan_options_t {
            split_min_bytes: options.split_min_bytes,
            alpha_seconds: options.alpha_seconds,
            intra_host_bytes_per_second: options.intra_host_bytes_per_second,
            inter_host_bytes_per_second: options.inter_host_bytes_per_second,
            staging_budget_bytes: options.staging_budget_bytes,
            relays: i32::from(options.relays),
            reduce_scatter: i32::from(options.reduce_scatter),
            nics_per_host: options.nics_per_host,
            single_hop_guard: i32::from(options.single_hop_guard),
            ..Default::default()
        };
        // SAFETY: live handle; raw is a complete options struct.
        check(unsafe { sys::reshard_plan_input_set_options(self.raw, &raw) })?;
        Ok(self)
    }

    /// Number of tensors.
    pub fn num_tensors(&self) -> usize {
        let mut count = 0;
        // SAFETY: live handle.
        infallible(
            unsafe { sys::reshard_plan_input_num_tensors(self.raw, &mut count) },
            "reshard_plan_input_num_tensors",
        );
        count
    }

    /// The fingerprint a plan of this input will have, without planning:
    /// equal on every process that describes the same inputs.
    pub fn fingerprint(&self) -> Result<u64> {
        let mut fingerprint = 0;
        // SAFETY: live handle.
        check(unsafe { sys::reshard_plan_input_fingerprint(self.raw, &mut fingerprint) })?;
        Ok(fingerprint)
    }

    /// The flat layouts of an input parsed from a spec (docs/spec.md, "Flat
    /// layouts"; C ABI 1.10), in name order; none for an input built call by
    /// call. Entry `e` of the flat-side layout of tensor `tensors[k].tensor`
    /// is the box's bytes at `byte_offsets[e]` of rank `ranks[e]`'s flat
    /// buffer.
    pub fn flat_layouts(&self) -> Result<Vec<FlatLayout>> {
        let mut count = 0;
        // SAFETY: live handle, valid output.
        check(unsafe { sys::reshard_plan_input_num_flats(self.raw, &mut count) })?;
        let mut out = Vec::with_capacity(count);
        for f in 0..count {
            let mut name = ptr::null();
            let (mut source, mut world, mut tensors, mut shard_bytes) = (0i32, 0usize, 0usize, 0i64);
            // SAFETY: live handle, valid outputs; the name lives with the input.
            check(unsafe {
                sys::reshard_plan_input_flat_info(
                    self.raw,
                    f,
                    &mut name,
                    &mut source,
                    &mut world,
                    &mut tensors,
                    &mut shard_bytes,
                )
            })?;
            // SAFETY: a NUL-terminated string valid while self lives.
            let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned();
            let mut devices = Vec::with_capacity(world);
            for r in 0..world {
                let mut device = 0;
                // SAFETY: live handle, valid output.
                check(unsafe { sys::reshard_plan_input_flat_device(self.raw, f, r, &mut device) })?;
                devices.push(device);
            }
            let mut list = Vec::with_capacity(tensors);
            for k in 0..tensors {
                let (mut tensor, mut entries) = (0usize, 0usize);
                // SAFETY: live handle; capacity 0 writes the counts only.
                check(unsafe {
                    sys::reshard_plan_input_flat_tensor(
                        self.raw,
                        f,
                        k,
                        &mut tensor,
                        &mut entries,
                        0,
                        ptr::null_mut(),
                        ptr::null_mut(),
                    )
                })?;
                let mut ranks = vec![0u64; entries];
                let mut byte_offsets = vec![0i64; entries];
                if entries > 0 {
                    // SAFETY: both arrays hold `entries` values.
                    check(unsafe {
                        sys::reshard_plan_input_flat_tensor(
                            self.raw,
                            f,
                            k,
                            &mut tensor,
                            &mut entries,
                            ranks.len(),
                            ranks.as_mut_ptr(),
                            byte_offsets.as_mut_ptr(),
                        )
                    })?;
                }
                list.push(FlatTensor { tensor, ranks: ranks.into_iter().map(|r| r as usize).collect(), byte_offsets });
            }
            out.push(FlatLayout { name, source: source != 0, devices, shard_bytes, tensors: list });
        }
        Ok(out)
    }

    /// The raw handle, for calls into `reshard-sys`; valid while `self` lives.
    pub fn as_raw(&self) -> *const sys::reshard_plan_input_t {
        self.raw
    }
}

/// A flat layout of a spec (C ABI 1.10): tensors flattened into one buffer
/// per rank, as PyTorch FSDP1, Megatron buckets and DeepSpeed ZeRO-3 keep
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatLayout {
    /// Its name in the spec.
    pub name: String,
    /// Whether it is its tensors' source (else their destination).
    pub source: bool,
    /// `devices[r]` is rank r's device.
    pub devices: Vec<i64>,
    /// Bytes of every rank's flat buffer.
    pub shard_bytes: i64,
    /// Its tensors, in buffer order.
    pub tensors: Vec<FlatTensor>,
}

/// One tensor of a [`FlatLayout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatTensor {
    /// Its index in the input (and the plan).
    pub tensor: usize,
    /// Per entry of its flat-side layout: the rank whose buffer holds it.
    pub ranks: Vec<usize>,
    /// Per entry: the byte offset of the entry's box in that rank's buffer.
    pub byte_offsets: Vec<i64>,
}

impl Drop for PlanInput {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::reshard_plan_input_destroy(self.raw) }
    }
}
