//! Plans: planning, inspection, serialization.
use std::ffi::CStr;
use std::ops::Deref;
use std::ptr;

use reshard_sys as sys;

use crate::dtype::{DType, ReduceOp};
use crate::error::{check, infallible, Error, ErrorCode, Result};
use crate::input::PlanInput;
use crate::layout::LayoutEntry;
use crate::util::ptr_or_null;
use crate::view::PlanView;

/// Which process parts [`Plan::with_request`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// Every process part (what in-process execution needs).
    #[default]
    All,
    /// Statistics and fingerprint only.
    Global,
    /// The part of one process (a worker planning for itself).
    Process(i32),
}

/// What to plan (`reshard_plan_request_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanRequest {
    /// Which parts.
    pub scope: Scope,
    /// Whether to compute global statistics (a worker planning only its
    /// part may skip them).
    pub global_stats: bool,
    /// Memory limit for the process parts (ABI 1.2): the library estimates
    /// it from the global statistics before building any part and, above
    /// the limit, fails with [`ErrorCode::ResourceExhausted`] and the
    /// estimate. 0 (the default): half the memory available; N > 0: N
    /// bytes; [`PLAN_BYTES_UNLIMITED`]: no limit; below -1:
    /// [`ErrorCode::InvalidArgument`]. [`Scope::Global`] is never refused.
    pub max_plan_bytes: i64,
}

/// [`PlanRequest::max_plan_bytes`]: no memory limit.
pub const PLAN_BYTES_UNLIMITED: i64 = sys::RESHARD_PLAN_BYTES_UNLIMITED;

impl Default for PlanRequest {
    fn default() -> Self {
        PlanRequest { scope: Scope::All, global_stats: true, max_plan_bytes: 0 }
    }
}

/// The source or the destination layout of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Side {
    /// Where the tensor is before the reshard.
    Src = sys::RESHARD_SIDE_SRC,
    /// Where it is after.
    Dst = sys::RESHARD_SIDE_DST,
}

/// The message lists of a process part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Direction {
    /// Messages the process sends.
    Send = sys::RESHARD_DIRECTION_SEND,
    /// Messages the process receives.
    Recv = sys::RESHARD_DIRECTION_RECV,
}

/// The piece lists of a process part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum PieceList {
    /// Pieces copied within one device.
    Local = sys::RESHARD_PIECES_LOCAL,
    /// Pieces carried by sent messages (message order).
    Send = sys::RESHARD_PIECES_SEND,
    /// Pieces carried by received messages (message order).
    Recv = sys::RESHARD_PIECES_RECV,
}

/// Global statistics of a plan (`reshard_plan_stats_t`). Lower bounds follow
/// docs/design.md §2.2; a plan's optimality gap is figure / lower bound.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PlanStats {
    /// Bytes that leave their device.
    pub network_bytes: i64,
    /// Bytes copied within a device.
    pub local_bytes: i64,
    /// Bytes that cross hosts.
    pub cross_host_bytes: i64,
    /// Bytes that cross processes.
    pub cross_process_bytes: i64,
    /// Largest send volume of one device.
    pub max_send_bytes: i64,
    /// Largest receive volume of one device.
    pub max_recv_bytes: i64,
    /// Messages.
    pub messages: i64,
    /// Network and local pieces.
    pub pieces: i64,
    /// Rounds.
    pub rounds: i64,
    /// Largest staging memory of one device in one round.
    pub peak_staging_bytes: i64,
    /// Lower bound of `network_bytes`.
    pub lower_bound_network_bytes: i64,
    /// Lower bound of `max_send_bytes`.
    pub lower_bound_max_send_bytes: i64,
    /// Lower bound of `max_recv_bytes`.
    pub lower_bound_max_recv_bytes: i64,
    /// α–β estimate for the busiest device, in seconds.
    pub cost_seconds: f64,
    /// Lower bound of `cost_seconds`.
    pub lower_bound_cost_seconds: f64,
    /// Wall time of planning (not part of the fingerprint).
    pub plan_seconds: f64,
    /// Number of devices with traffic entries.
    pub num_devices: u64,
    /// Steps of the plan: 0 for no work, 1 for a single-hop plan, 2 when
    /// relays forward in stage 1 ([`PlanOptions::relays`](crate::PlanOptions::relays)).
    pub stages: i64,
    /// Bytes the busiest host sends to other hosts.
    pub max_host_send_bytes: i64,
    /// Bytes the busiest host receives from other hosts.
    pub max_host_recv_bytes: i64,
    /// Lower bound of `cross_host_bytes` over all plans (relays and trees included).
    pub lower_bound_cross_host_bytes: i64,
    /// Lower bound of `max_host_send_bytes`.
    pub lower_bound_max_host_send_bytes: i64,
    /// Lower bound of `max_host_recv_bytes`.
    pub lower_bound_max_host_recv_bytes: i64,
    /// The bound that gives `lower_bound_cost_seconds`: `reshard_sys::RESHARD_BOUND_*`.
    pub lower_bound_binding: i32,
    /// The device or host that bound concerns (-1 with `RESHARD_BOUND_NONE`).
    pub lower_bound_binding_id: i64,
    /// Bytes of stages after the first: what relays forward from a
    /// destination buffer (part of `network_bytes`; ABI 1.3).
    pub forwarded_bytes: i64,
    /// The most scratch bytes allocated on one device (reduction trees;
    /// ABI 1.5).
    pub max_scratch_bytes: i64,
}

/// Traffic of one device (`reshard_device_traffic_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceTraffic {
    /// Device id.
    pub device: i64,
    /// Bytes it sends.
    pub send_bytes: i64,
    /// Bytes it receives.
    pub recv_bytes: i64,
    /// Bytes it copies locally.
    pub local_bytes: i64,
    /// Messages it sends.
    pub send_messages: i64,
    /// Messages it receives.
    pub recv_messages: i64,
}

/// Name, element type and shape of a plan tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Unique name.
    pub name: String,
    /// Element type (of the source buffers).
    pub dtype: DType,
    /// Element type of the destination buffers: `dtype` unless the plan
    /// casts the tensor in flight (ABI 1.11, docs/spec.md "Casts").
    pub dst_dtype: DType,
    /// Global shape.
    pub shape: Vec<i64>,
    /// The index of the tensor holding its block scales, `None` without
    /// (ABI 1.12, docs/spec.md "Block scales").
    pub scale_tensor: Option<usize>,
    /// The block of its scales, its extent per dim (empty without).
    pub scale_block: Vec<i64>,
}

/// Sizes of one process part (`reshard_part_info_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartInfo {
    /// Pieces copied within a device of the process.
    pub num_local_pieces: u64,
    /// Messages the process sends.
    pub num_sends: u64,
    /// Pieces of those messages.
    pub num_send_pieces: u64,
    /// Messages the process receives.
    pub num_recvs: u64,
    /// Pieces of those messages.
    pub num_recv_pieces: u64,
    /// Scratch buffers the process allocates for one execution (ABI 1.6;
    /// [`Plan::scratch`]).
    pub num_scratch: u64,
}

/// A buffer a process allocates for one execution on one of its devices,
/// holding a box of one tensor (`reshard_scratch_t`, ABI 1.6): it starts at
/// the identity of the tensor's reduce op, pieces written into it combine,
/// and pieces of later stages read it once complete. Pieces name it with
/// [`SCRATCH_ENTRY`] as their `src_entry` or `dst_entry`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scratch {
    /// The tensor whose box it holds.
    pub tensor: u64,
    /// The device it is allocated on.
    pub device: i64,
    /// The box's elements times the tensor's dtype size.
    pub bytes: i64,
    /// The box's lower corner (global coordinates).
    pub lo: Vec<i64>,
    /// The box's upper corner (exclusive).
    pub hi: Vec<i64>,
}

/// `RESHARD_SCRATCH_ENTRY`: a piece's `src_entry` or `dst_entry` naming the
/// scratch of its tensor on the piece's device that contains its region.
pub const SCRATCH_ENTRY: u64 = sys::RESHARD_SCRATCH_ENTRY;

/// One message: all pieces from one device to another in one round of one
/// stage, packed back to back in piece order (`reshard_message_t`). Stages
/// run in order, each one's rounds in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Sending device.
    pub src_device: i64,
    /// Receiving device.
    pub dst_device: i64,
    /// Round within its stage.
    pub round: u64,
    /// Index of its first piece in the matching piece list.
    pub first_piece: u64,
    /// Number of pieces.
    pub num_pieces: u64,
    /// Packed size.
    pub bytes: i64,
    /// Stage (ABI 1.3): 0, or 1 for a relay, whose pieces forward what
    /// stage 0 wrote into a destination buffer.
    pub stage: u64,
    /// Sub-message (ABI 1.14): 0, 1, ... among the messages of one stage,
    /// round, source and destination, which flow side by side; 0 where a
    /// message is not cut.
    pub sub: u64,
}

/// One piece: a box of one tensor moving from a source entry to a
/// destination entry (`reshard_piece_t` and its region).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Tensor index.
    pub tensor: u64,
    /// Entry of the tensor's source layout; in a stage > 0 (a relay), of its
    /// *destination* layout: the buffer, on `src_device`, that an earlier
    /// stage wrote and this piece forwards from. Except a piece of a stage >
    /// 0 writing a scratch (`dst_entry` [`SCRATCH_ENTRY`]) from an entry: a
    /// source entry, a summand (`required_features` bit 4).
    pub src_entry: u64,
    /// Entry of the tensor's destination layout.
    pub dst_entry: u64,
    /// Source device.
    pub src_device: i64,
    /// Destination device.
    pub dst_device: i64,
    /// Bytes moved.
    pub bytes: i64,
    /// Stage of the piece's message (ABI 1.3; 0 for local pieces).
    pub stage: u64,
    /// Region moved, global coordinates (inclusive).
    pub lo: Vec<i64>,
    /// Region moved, global coordinates (exclusive).
    pub hi: Vec<i64>,
}

/// A reshard plan (`reshard_plan_t`): tensors, topology, options,
/// statistics, fingerprint and the process parts it holds. Immutable.
#[derive(Debug)]
pub struct Plan {
    raw: *mut sys::reshard_plan_t,
}

// SAFETY: reshard.h: plan handles are immutable after creation ("Immutable;
// thread-safe"); any number of threads may use them concurrently.
unsafe impl Send for Plan {}
// SAFETY: as above; every method takes &self and only reads.
unsafe impl Sync for Plan {}

fn to_size(value: i64, what: &str) -> Result<usize> {
    usize::try_from(value)
        .map_err(|_| Error::new(ErrorCode::Overflow, format!("{what}: {value} does not fit in usize")))
}

impl Plan {
    /// Plans every process part of `input`, with statistics. Deterministic:
    /// equal inputs give equal plans and equal bytes.
    ///
    /// Errors: [`ErrorCode::InvalidArgument`] naming the field
    /// (`tensors[1].name: duplicate name`, `options.alpha_seconds: ...`),
    /// [`ErrorCode::Mismatch`] (dtype, shape or op disagreement),
    /// `Overflow`, `OutOfMemory`, [`ErrorCode::ResourceExhausted`] (the
    /// parts' estimated memory is above half the memory available).
    pub fn new(input: &PlanInput) -> Result<Plan> {
        Plan::with_request(input, PlanRequest::default())
    }

    /// Plans what `request` asks for.
    ///
    /// Errors: those of [`new`](Self::new),
    /// [`ErrorCode::OutOfRange`] (`request.process: ...`) for a process
    /// that owns no device, [`ErrorCode::InvalidArgument`] for a
    /// `max_plan_bytes` below -1, and [`ErrorCode::ResourceExhausted`]
    /// (`request->max_plan_bytes: ...`) above the limit.
    pub fn with_request(input: &PlanInput, request: PlanRequest) -> Result<Plan> {
        let (scope, process) = match request.scope {
            Scope::All => (sys::RESHARD_PLAN_SCOPE_ALL, 0),
            Scope::Global => (sys::RESHARD_PLAN_SCOPE_GLOBAL, 0),
            Scope::Process(p) => (sys::RESHARD_PLAN_SCOPE_PROCESS, p),
        };
        let raw_request = sys::reshard_plan_request_t {
            scope,
            process,
            global_stats: request.global_stats as i32,
            max_plan_bytes: request.max_plan_bytes,
            ..Default::default()
        };
        let mut raw = ptr::null_mut();
        // SAFETY: live input; complete request struct; raw is a valid output.
        check(unsafe { sys::reshard_plan_create(input.as_raw(), &raw_request, &mut raw) })?;
        Ok(Plan { raw })
    }

    /// Verifies plan bytes (FlatBuffers verifier, then semantic checks:
    /// indices, boxes, sizes, statistics, fingerprint) and decodes them.
    /// Untrusted bytes are safe: any defect is an error.
    ///
    /// Errors: [`ErrorCode::Corrupt`] naming what failed.
    pub fn from_bytes(bytes: &[u8]) -> Result<Plan> {
        let mut raw = ptr::null_mut();
        // SAFETY: bytes.len() readable bytes (NULL only when empty); the
        // library keeps no reference to them.
        check(unsafe { sys::reshard_plan_deserialize(ptr_or_null(bytes).cast(), bytes.len(), &mut raw) })?;
        Ok(Plan { raw })
    }

    /// Verifies plan bytes exactly as [`from_bytes`](Self::from_bytes) does,
    /// without keeping a plan.
    pub fn verify_bytes(bytes: &[u8]) -> Result<()> {
        // SAFETY: as in from_bytes.
        check(unsafe { sys::reshard_plan_verify_bytes(ptr_or_null(bytes).cast(), bytes.len()) })
    }

    /// [`from_bytes`](Self::from_bytes) after checking the bytes' MAC: an
    /// HMAC-SHA-256 under `key` (16 to 1024 bytes) that
    /// [`to_signed_bytes`](Self::to_signed_bytes) appended (ABI 1.9).
    ///
    /// Errors: [`ErrorCode::InvalidArgument`] naming `options->key_size`
    /// (key empty, too short, too long); [`ErrorCode::Corrupt`] "mac:
    /// missing" (unsigned bytes) or "mac: does not match" (another key, or
    /// bytes edited after signing); those of `from_bytes`.
    pub fn from_signed_bytes(bytes: &[u8], key: &[u8]) -> Result<Plan> {
        let options = deserialize_options(key);
        let mut raw = ptr::null_mut();
        // SAFETY: bytes.len() readable bytes (NULL only when empty); options
        // points at `key`, alive for the call; nothing is kept.
        check(unsafe {
            sys::reshard_plan_deserialize_with_options(ptr_or_null(bytes).cast(), bytes.len(), &options, &mut raw)
        })?;
        Ok(Plan { raw })
    }

    /// Verifies plan bytes exactly as
    /// [`from_signed_bytes`](Self::from_signed_bytes) does, without keeping
    /// a plan.
    pub fn verify_signed_bytes(bytes: &[u8], key: &[u8]) -> Result<()> {
        let options = deserialize_options(key);
        // SAFETY: as in from_signed_bytes.
        check(unsafe { sys::reshard_plan_verify_bytes_with_options(ptr_or_null(bytes).cast(), bytes.len(), &options) })
    }

    /// [`to_bytes`](Self::to_bytes) followed by a 48-byte trailer carrying
    /// an HMAC-SHA-256 of them under `key` (16 to 1024 bytes; readers
    /// without a key ignore it).
    ///
    /// Errors: [`ErrorCode::InvalidArgument`] naming `options->key_size`.
    pub fn to_signed_bytes(&self, key: &[u8]) -> Result<PlanBytes> {
        self.serialize(sys::reshard_serialize_options_t {
            key: key.as_ptr().cast(),
            key_size: key.len(),
            ..Default::default()
        })
    }

    /// [`to_bytes_for_process`](Self::to_bytes_for_process), signed as
    /// [`to_signed_bytes`](Self::to_signed_bytes).
    pub fn to_signed_bytes_for_process(&self, process: i32, key: &[u8]) -> Result<PlanBytes> {
        self.serialize(sys::reshard_serialize_options_t {
            all_parts: 0,
            process,
            key: key.as_ptr().cast(),
            key_size: key.len(),
            ..Default::default()
        })
    }

    /// Serializes the plan with every part it holds (FlatBuffers,
    /// schema/plan.fbs). Deterministic.
    pub fn to_bytes(&self) -> Result<PlanBytes> {
        self.serialize(sys::reshard_serialize_options_t::default())
    }

    /// Serializes only the part of `process` (a worker's bytes).
    ///
    /// Errors: [`ErrorCode::OutOfRange`] when the plan holds no part for it.
    pub fn to_bytes_for_process(&self, process: i32) -> Result<PlanBytes> {
        self.serialize(sys::reshard_serialize_options_t { all_parts: 0, process, ..Default::default() })
    }

    fn serialize(&self, options: sys::reshard_serialize_options_t) -> Result<PlanBytes> {
        let mut raw = ptr::null_mut();
        // SAFETY: live plan; complete options; raw is a valid output.
        check(unsafe { sys::reshard_plan_serialize(self.raw, &options, &mut raw) })?;
        Ok(PlanBytes { raw })
    }

    /// The fingerprint (hash of the canonical inputs and options).
    pub fn fingerprint(&self) -> u64 {
        let mut fingerprint = 0;
        // SAFETY: live plan.
        infallible(unsafe { sys::reshard_plan_fingerprint(self.raw, &mut fingerprint) }, "reshard_plan_fingerprint");
        fingerprint
    }

    /// Global statistics.
    ///
    /// Errors: [`ErrorCode::Unsupported`] for a plan made with
    /// `global_stats: false`.
    pub fn stats(&self) -> Result<PlanStats> {
        let mut s = sys::reshard_plan_stats_t::default();
        // SAFETY: live plan; s has struct_size set.
        check(unsafe { sys::reshard_plan_stats(self.raw, &mut s) })?;
        Ok(PlanStats {
            network_bytes: s.network_bytes,
            local_bytes: s.local_bytes,
            cross_host_bytes: s.cross_host_bytes,
            cross_process_bytes: s.cross_process_bytes,
            max_send_bytes: s.max_send_bytes,
            max_recv_bytes: s.max_recv_bytes,
            messages: s.messages,
            pieces: s.pieces,
            rounds: s.rounds,
            peak_staging_bytes: s.peak_staging_bytes,
            lower_bound_network_bytes: s.lower_bound_network_bytes,
            lower_bound_max_send_bytes: s.lower_bound_max_send_bytes,
            lower_bound_max_recv_bytes: s.lower_bound_max_recv_bytes,
            cost_seconds: s.cost_seconds,
            lower_bound_cost_seconds: s.lower_bound_cost_seconds,
            plan_seconds: s.plan_seconds,
            num_devices: s.num_devices,
            stages: s.stages,
            max_host_send_bytes: s.max_host_send_bytes,
            max_host_recv_bytes: s.max_host_recv_bytes,
            lower_bound_cross_host_bytes: s.lower_bound_cross_host_bytes,
            lower_bound_max_host_send_bytes: s.lower_bound_max_host_send_bytes,
            lower_bound_max_host_recv_bytes: s.lower_bound_max_host_recv_bytes,
            lower_bound_binding: s.lower_bound_binding,
            lower_bound_binding_id: s.lower_bound_binding_id,
            forwarded_bytes: s.forwarded_bytes,
            max_scratch_bytes: s.max_scratch_bytes,
        })
    }

    /// Traffic of the `index`-th device (sorted by id).
    ///
    /// Errors: [`ErrorCode::OutOfRange`], [`ErrorCode::Unsupported`] (no
    /// statistics).
    pub fn device_traffic(&self, index: usize) -> Result<DeviceTraffic> {
        let mut t = sys::reshard_device_traffic_t::default();
        // SAFETY: live plan; t has struct_size set.
        check(unsafe { sys::reshard_plan_device_traffic(self.raw, index, &mut t) })?;
        Ok(DeviceTraffic {
            device: t.device,
            send_bytes: t.send_bytes,
            recv_bytes: t.recv_bytes,
            local_bytes: t.local_bytes,
            send_messages: t.send_messages,
            recv_messages: t.recv_messages,
        })
    }

    /// Traffic of every device, sorted by id.
    pub fn all_device_traffic(&self) -> Result<Vec<DeviceTraffic>> {
        let n = self.stats()?.num_devices as usize;
        (0..n).map(|i| self.device_traffic(i)).collect()
    }

    /// Number of tensors.
    pub fn num_tensors(&self) -> usize {
        let mut count = 0;
        // SAFETY: live plan.
        infallible(unsafe { sys::reshard_plan_num_tensors(self.raw, &mut count) }, "reshard_plan_num_tensors");
        count
    }

    /// Name, dtypes and shape of tensor `tensor`.
    ///
    /// Errors: [`ErrorCode::OutOfRange`] (`tensor: 5 >= 3 tensors`).
    pub fn tensor(&self, tensor: usize) -> Result<TensorInfo> {
        let mut name = ptr::null();
        let mut dtype = 0;
        let mut dst_dtype = 0;
        let mut rank = 0;
        let mut shape = vec![0i64; sys::RESHARD_MAX_RANK];
        let mut scale_tensor = -1i64;
        let mut scale_block = vec![0i64; sys::RESHARD_MAX_RANK];
        // SAFETY: live plan; outputs valid, shape and scale_block have
        // RESHARD_MAX_RANK room;
        // the name is owned by the plan and copied before `self` can go.
        unsafe {
            check(sys::reshard_plan_tensor_name(self.raw, tensor, &mut name))?;
            check(sys::reshard_plan_tensor_dtype(self.raw, tensor, &mut dtype))?;
            check(sys::reshard_plan_tensor_dst_dtype(self.raw, tensor, &mut dst_dtype))?;
            check(sys::reshard_plan_tensor_rank(self.raw, tensor, &mut rank))?;
            check(sys::reshard_plan_tensor_shape(self.raw, tensor, shape.as_mut_ptr()))?;
            check(sys::reshard_plan_tensor_scales(self.raw, tensor, &mut scale_tensor, scale_block.as_mut_ptr()))?;
        }
        shape.truncate(rank);
        let scale_tensor = usize::try_from(scale_tensor).ok();
        scale_block.truncate(if scale_tensor.is_some() { rank } else { 0 });
        // SAFETY: a NUL-terminated string valid while the plan lives.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let known = |d: i32| {
            DType::from_raw(d).ok_or_else(|| {
                Error::new(ErrorCode::Unsupported, format!("tensor {tensor}: dtype {d} unknown to this crate"))
            })
        };
        Ok(TensorInfo { name, dtype: known(dtype)?, dst_dtype: known(dst_dtype)?, shape, scale_tensor, scale_block })
    }

    /// Every tensor, in plan order.
    pub fn tensors(&self) -> Vec<TensorInfo> {
        (0..self.num_tensors()).map(|t| self.tensor(t).expect("tensor index in range")).collect()
    }

    /// Number of entries (device shards) of a side of tensor `tensor`.
    pub fn num_entries(&self, tensor: usize, side: Side) -> Result<usize> {
        let mut count = 0;
        // SAFETY: live plan.
        check(unsafe { sys::reshard_plan_tensor_num_entries(self.raw, tensor, side as i32, &mut count) })?;
        Ok(count)
    }

    /// Entry `entry` of a side of tensor `tensor`. Its shard buffer is
    /// dense, row-major, of exactly the entry's box.
    ///
    /// Errors: [`ErrorCode::OutOfRange`] (tensor, entry).
    pub fn entry(&self, tensor: usize, side: Side, entry: usize) -> Result<LayoutEntry> {
        let mut rank = 0;
        let mut e = LayoutEntry {
            device: 0,
            summand: 0,
            lo: vec![0; sys::RESHARD_MAX_RANK],
            hi: vec![0; sys::RESHARD_MAX_RANK],
        };
        // SAFETY: live plan; lo/hi have RESHARD_MAX_RANK room.
        unsafe {
            check(sys::reshard_plan_tensor_rank(self.raw, tensor, &mut rank))?;
            check(sys::reshard_plan_tensor_entry(
                self.raw,
                tensor,
                side as i32,
                entry,
                &mut e.device,
                &mut e.summand,
                e.lo.as_mut_ptr(),
                e.hi.as_mut_ptr(),
            ))?;
        }
        e.lo.truncate(rank);
        e.hi.truncate(rank);
        Ok(e)
    }

    /// Every entry of a side of tensor `tensor`, in buffer order.
    pub fn entries(&self, tensor: usize, side: Side) -> Result<Vec<LayoutEntry>> {
        (0..self.num_entries(tensor, side)?).map(|e| self.entry(tensor, side, e)).collect()
    }

    /// Elements of the shard buffer of entry `entry` (its box's volume).
    pub fn shard_len(&self, tensor: usize, side: Side, entry: usize) -> Result<usize> {
        to_size(self.entry(tensor, side, entry)?.volume(), "shard volume")
    }

    /// Bytes of the shard buffer of entry `entry`.
    pub fn shard_bytes(&self, tensor: usize, side: Side, entry: usize) -> Result<usize> {
        let dtype = self.tensor(tensor)?.dtype;
        self.shard_len(tensor, side, entry)?
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::new(ErrorCode::Overflow, "shard bytes overflow usize"))
    }

    /// Number of summands (1 unless partial) and reduce op of a side.
    pub fn partial(&self, tensor: usize, side: Side) -> Result<(i32, ReduceOp)> {
        let mut n = 0;
        let mut op = 0;
        // SAFETY: live plan; valid outputs.
        check(unsafe { sys::reshard_plan_tensor_partial(self.raw, tensor, side as i32, &mut n, &mut op) })?;
        Ok((n, ReduceOp::from_raw(op).unwrap_or_default()))
    }

    /// The entry `device` holds on a side of tensor `tensor`, if any.
    pub fn entry_of_device(&self, tensor: usize, side: Side, device: i64) -> Result<Option<usize>> {
        let mut entry = 0;
        let mut found = 0;
        // SAFETY: live plan; valid outputs.
        check(unsafe {
            sys::reshard_plan_entry_of_device(self.raw, tensor, side as i32, device, &mut entry, &mut found)
        })?;
        Ok((found != 0).then_some(entry))
    }

    /// The processes owning at least one device, sorted.
    pub fn processes(&self) -> Vec<i32> {
        let mut count = 0;
        // SAFETY: live plan; indices below count.
        unsafe {
            infallible(sys::reshard_plan_num_processes(self.raw, &mut count), "reshard_plan_num_processes");
            (0..count)
                .map(|i| {
                    let mut p = 0;
                    infallible(sys::reshard_plan_process(self.raw, i, &mut p), "reshard_plan_process");
                    p
                })
                .collect()
        }
    }

    /// Whether the plan holds the part of `process`.
    pub fn has_part(&self, process: i32) -> bool {
        let mut has = 0;
        // SAFETY: live plan.
        infallible(unsafe { sys::reshard_plan_has_part(self.raw, process, &mut has) }, "reshard_plan_has_part");
        has != 0
    }

    /// Sizes of the part of `process`.
    ///
    /// Errors: [`ErrorCode::OutOfRange`] (`process: this plan holds no part
    /// for process 3`).
    pub fn part_info(&self, process: i32) -> Result<PartInfo> {
        let mut i = sys::reshard_part_info_t::default();
        // SAFETY: live plan; struct_size set.
        check(unsafe { sys::reshard_plan_part_info(self.raw, process, &mut i) })?;
        Ok(PartInfo {
            num_local_pieces: i.num_local_pieces,
            num_sends: i.num_sends,
            num_send_pieces: i.num_send_pieces,
            num_recvs: i.num_recvs,
            num_recv_pieces: i.num_recv_pieces,
            num_scratch: i.num_scratch,
        })
    }

    /// Scratch `index` of `process`'s part (sorted by tensor, device, box).
    ///
    /// Errors: [`ErrorCode::OutOfRange`] (process, index).
    pub fn scratch(&self, process: i32, index: usize) -> Result<Scratch> {
        let mut x = sys::reshard_scratch_t::default();
        let mut lo = vec![0i64; sys::RESHARD_MAX_RANK];
        let mut hi = vec![0i64; sys::RESHARD_MAX_RANK];
        // SAFETY: live plan; struct_size set; lo/hi have RESHARD_MAX_RANK room.
        check(unsafe {
            sys::reshard_plan_part_scratch(self.raw, process, index, &mut x, lo.as_mut_ptr(), hi.as_mut_ptr())
        })?;
        let mut rank = 0;
        // SAFETY: live plan; the library returned this tensor index.
        check(unsafe { sys::reshard_plan_tensor_rank(self.raw, x.tensor as usize, &mut rank) })?;
        lo.truncate(rank);
        hi.truncate(rank);
        Ok(Scratch { tensor: x.tensor, device: x.device, bytes: x.bytes, lo, hi })
    }

    /// Every scratch of `process`'s part.
    pub fn scratches(&self, process: i32) -> Result<Vec<Scratch>> {
        let info = self.part_info(process)?;
        (0..info.num_scratch as usize).map(|i| self.scratch(process, i)).collect()
    }

    /// Message `index` of the sends or receives of `process`'s part.
    pub fn message(&self, process: i32, direction: Direction, index: usize) -> Result<Message> {
        let mut m = sys::reshard_message_t::default();
        // SAFETY: live plan; struct_size set.
        check(unsafe { sys::reshard_plan_part_message(self.raw, process, direction as i32, index, &mut m) })?;
        Ok(Message {
            src_device: m.src_device,
            dst_device: m.dst_device,
            round: m.round,
            first_piece: m.first_piece,
            num_pieces: m.num_pieces,
            bytes: m.bytes,
            stage: m.stage,
            sub: m.sub,
        })
    }

    /// Every message of one direction of `process`'s part.
    pub fn messages(&self, process: i32, direction: Direction) -> Result<Vec<Message>> {
        let info = self.part_info(process)?;
        let n = match direction {
            Direction::Send => info.num_sends,
            Direction::Recv => info.num_recvs,
        };
        (0..n as usize).map(|i| self.message(process, direction, i)).collect()
    }

    /// Piece `index` of a piece list of `process`'s part, with its region.
    pub fn piece(&self, process: i32, list: PieceList, index: usize) -> Result<Piece> {
        let mut p = sys::reshard_piece_t::default();
        let mut lo = vec![0i64; sys::RESHARD_MAX_RANK];
        let mut hi = vec![0i64; sys::RESHARD_MAX_RANK];
        // SAFETY: live plan; struct_size set; lo/hi have RESHARD_MAX_RANK room.
        check(unsafe {
            sys::reshard_plan_part_piece(
                self.raw,
                process,
                list as i32,
                index,
                &mut p,
                lo.as_mut_ptr(),
                hi.as_mut_ptr(),
            )
        })?;
        let mut rank = 0;
        // SAFETY: live plan; the library returned this tensor index.
        check(unsafe { sys::reshard_plan_tensor_rank(self.raw, p.tensor as usize, &mut rank) })?;
        lo.truncate(rank);
        hi.truncate(rank);
        Ok(Piece {
            tensor: p.tensor,
            src_entry: p.src_entry,
            dst_entry: p.dst_entry,
            src_device: p.src_device,
            dst_device: p.dst_device,
            bytes: p.bytes,
            stage: p.stage,
            lo,
            hi,
        })
    }

    /// Every piece of one list of `process`'s part.
    pub fn pieces(&self, process: i32, list: PieceList) -> Result<Vec<Piece>> {
        let info = self.part_info(process)?;
        let n = match list {
            PieceList::Local => info.num_local_pieces,
            PieceList::Send => info.num_send_pieces,
            PieceList::Recv => info.num_recv_pieces,
        };
        (0..n as usize).map(|i| self.piece(process, list, i)).collect()
    }

    /// Fills source entry `entry` of tensor `tensor` with the verification
    /// oracle's values (each element encodes its global index).
    ///
    /// Errors: [`ErrorCode::InvalidArgument`] (wrong size),
    /// [`ErrorCode::OutOfRange`] (tensor, entry).
    pub fn oracle_fill_source(&self, tensor: usize, entry: usize, data: &mut [u8]) -> Result<()> {
        // SAFETY: data.len() writable bytes; the library checks the size
        // against the entry before writing.
        check(unsafe { sys::reshard_oracle_fill_source(self.raw, tensor, entry, data.as_mut_ptr().cast(), data.len()) })
    }

    /// Checks destination entry `entry` of tensor `tensor` (not partial)
    /// against the oracle; returns the number of wrong elements.
    pub fn oracle_check_destination(&self, tensor: usize, entry: usize, data: &[u8]) -> Result<i64> {
        let mut mismatches = 0;
        // SAFETY: data.len() readable bytes; valid output.
        check(unsafe {
            sys::reshard_oracle_check_destination(
                self.raw,
                tensor,
                entry,
                data.as_ptr().cast(),
                data.len(),
                &mut mismatches,
            )
        })?;
        Ok(mismatches)
    }

    /// The raw handle, for calls into `reshard-sys`; valid while `self` lives.
    pub fn as_raw(&self) -> *const sys::reshard_plan_t {
        self.raw
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::reshard_plan_destroy(self.raw) }
    }
}

/// Serialized plan bytes owned by the library (`reshard_buffer_t`);
/// dereferences to `&[u8]` without copying.
pub struct PlanBytes {
    raw: *mut sys::reshard_buffer_t,
}

// SAFETY: reshard.h: "Error and buffer objects are immutable"; buffer
// functions are thread-safe.
unsafe impl Send for PlanBytes {}
// SAFETY: as above.
unsafe impl Sync for PlanBytes {}

impl PlanBytes {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: live buffer; data is valid for size bytes until destroy,
        // which needs `self` by value (Drop), so the borrow is sound.
        unsafe {
            let size = sys::reshard_buffer_size(self.raw);
            if size == 0 {
                return &[];
            }
            std::slice::from_raw_parts(sys::reshard_buffer_data(self.raw).cast(), size)
        }
    }

    /// A zero-copy, verified read-only view of the plan in these bytes.
    pub fn view(&self) -> Result<PlanView<'_>> {
        PlanView::new(self.as_slice())
    }
}

impl Deref for PlanBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for PlanBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for PlanBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanBytes({} bytes)", self.len())
    }
}

impl Drop for PlanBytes {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::reshard_buffer_destroy(self.raw) }
    }
}

// A key as C options: never a null pointer (an empty slice's pointer is
// dangling but non-null), so an empty key is reported as empty.
fn deserialize_options(key: &[u8]) -> sys::reshard_deserialize_options_t {
    sys::reshard_deserialize_options_t { key: key.as_ptr().cast(), key_size: key.len(), ..Default::default() }
}
