//! Raw declarations of the reshard C ABI, `reshard/reshard.h` (ABI 1.3).
//!
//! Hand-written to match the header one to one (names keep the C spelling);
//! `tests/layout.rs` checks struct sizes and field offsets against the header
//! compiled by a C compiler, and the function table's size against the one
//! the library reports. The documentation of every function is in the
//! header; the safe API is the `reshard` crate.
//!
//! Linking: see `build.rs` (`RESHARD_LIB_DIR`, then `pkg-config reshard`).
#![no_std]
#![allow(non_camel_case_types)]

use core::ffi::c_char;
use core::ffi::c_void;

/// `RESHARD_VERSION_MAJOR` of the header these declarations follow.
pub const RESHARD_VERSION_MAJOR: u32 = 0;
/// `RESHARD_VERSION_MINOR`.
pub const RESHARD_VERSION_MINOR: u32 = 1;
/// `RESHARD_VERSION_PATCH`.
pub const RESHARD_VERSION_PATCH: u32 = 0;
/// `RESHARD_VERSION_NUMBER`.
pub const RESHARD_VERSION_NUMBER: u32 =
    RESHARD_VERSION_MAJOR * 10000 + RESHARD_VERSION_MINOR * 100 + RESHARD_VERSION_PATCH;
/// `RESHARD_ABI_MAJOR`: pass to [`reshard_get_api`].
pub const RESHARD_ABI_MAJOR: u32 = 1;
/// `RESHARD_ABI_MINOR` of these declarations.
pub const RESHARD_ABI_MINOR: u32 = 14;
/// `RESHARD_MAX_RANK`: the largest tensor rank.
pub const RESHARD_MAX_RANK: usize = 8;

/// `reshard_error_code_t`.
pub type reshard_error_code_t = i32;
/// Success (what a NULL error reports).
pub const RESHARD_OK: reshard_error_code_t = 0;
/// A value is malformed.
pub const RESHARD_ERROR_INVALID_ARGUMENT: reshard_error_code_t = 1;
/// An index or size is out of range.
pub const RESHARD_ERROR_OUT_OF_RANGE: reshard_error_code_t = 2;
/// An element or byte count overflows.
pub const RESHARD_ERROR_OVERFLOW: reshard_error_code_t = 3;
/// Two inputs disagree.
pub const RESHARD_ERROR_MISMATCH: reshard_error_code_t = 4;
/// Spec text is not valid JSON / schema.
pub const RESHARD_ERROR_PARSE: reshard_error_code_t = 5;
/// Plan bytes fail verification.
pub const RESHARD_ERROR_CORRUPT: reshard_error_code_t = 6;
/// Not available in this build.
pub const RESHARD_ERROR_UNSUPPORTED: reshard_error_code_t = 7;
/// A wait ran past its deadline.
pub const RESHARD_ERROR_TIMEOUT: reshard_error_code_t = 8;
/// MPI / NCCL / CUDA reported an error.
pub const RESHARD_ERROR_TRANSPORT: reshard_error_code_t = 9;
/// Allocation failed.
pub const RESHARD_ERROR_OUT_OF_MEMORY: reshard_error_code_t = 10;
/// A bug in reshard.
pub const RESHARD_ERROR_INTERNAL: reshard_error_code_t = 11;
/// Since 1.2: a request whose estimated cost is above a limit
/// (`reshard_plan_request_t::max_plan_bytes`), refused before the work starts.
pub const RESHARD_ERROR_RESOURCE_EXHAUSTED: reshard_error_code_t = 12;

/// `reshard_dtype_t`.
pub type reshard_dtype_t = i32;
/// 64-bit IEEE float.
pub const RESHARD_DTYPE_F64: reshard_dtype_t = 1;
/// 32-bit IEEE float.
pub const RESHARD_DTYPE_F32: reshard_dtype_t = 2;
/// 16-bit IEEE float.
pub const RESHARD_DTYPE_F16: reshard_dtype_t = 3;
/// bfloat16.
pub const RESHARD_DTYPE_BF16: reshard_dtype_t = 4;
/// OCP float8 e4m3fn.
pub const RESHARD_DTYPE_F8E4M3: reshard_dtype_t = 5;
/// OCP float8 e5m2.
pub const RESHARD_DTYPE_F8E5M2: reshard_dtype_t = 6;
/// int64.
pub const RESHARD_DTYPE_I64: reshard_dtype_t = 7;
/// int32.
pub const RESHARD_DTYPE_I32: reshard_dtype_t = 8;
/// int16.
pub const RESHARD_DTYPE_I16: reshard_dtype_t = 9;
/// int8.
pub const RESHARD_DTYPE_I8: reshard_dtype_t = 10;
/// uint64.
pub const RESHARD_DTYPE_U64: reshard_dtype_t = 11;
/// uint32.
pub const RESHARD_DTYPE_U32: reshard_dtype_t = 12;
/// uint16.
pub const RESHARD_DTYPE_U16: reshard_dtype_t = 13;
/// uint8.
pub const RESHARD_DTYPE_U8: reshard_dtype_t = 14;
/// bool (one byte).
pub const RESHARD_DTYPE_BOOL: reshard_dtype_t = 15;
/// OCP MX e8m0 (ABI 1.13): MXFP8 scale tensors only.
pub const RESHARD_DTYPE_E8M0: reshard_dtype_t = 16;

/// `reshard_reduce_op_t`.
pub type reshard_reduce_op_t = i32;
/// Summands add.
pub const RESHARD_REDUCE_SUM: reshard_reduce_op_t = 1;
/// The largest summand wins.
pub const RESHARD_REDUCE_MAX: reshard_reduce_op_t = 2;
/// The smallest summand wins.
pub const RESHARD_REDUCE_MIN: reshard_reduce_op_t = 3;
/// The sum over the number of summands (since 1.4).
pub const RESHARD_REDUCE_MEAN: reshard_reduce_op_t = 4;

/// `reshard_plan_scope_t`.
pub type reshard_plan_scope_t = i32;
/// Every process part.
pub const RESHARD_PLAN_SCOPE_ALL: reshard_plan_scope_t = 0;
/// Statistics and fingerprint only.
pub const RESHARD_PLAN_SCOPE_GLOBAL: reshard_plan_scope_t = 1;
/// The part of `reshard_plan_request_t::process`.
pub const RESHARD_PLAN_SCOPE_PROCESS: reshard_plan_scope_t = 2;

/// `reshard_side_t`.
pub type reshard_side_t = i32;
/// The source layout.
pub const RESHARD_SIDE_SRC: reshard_side_t = 1;
/// The destination layout.
pub const RESHARD_SIDE_DST: reshard_side_t = 2;

/// `reshard_direction_t`.
pub type reshard_direction_t = i32;
/// Messages a process sends.
pub const RESHARD_DIRECTION_SEND: reshard_direction_t = 1;
/// Messages a process receives.
pub const RESHARD_DIRECTION_RECV: reshard_direction_t = 2;

/// `reshard_piece_list_t`.
pub type reshard_piece_list_t = i32;
/// Pieces copied within one device.
pub const RESHARD_PIECES_LOCAL: reshard_piece_list_t = 1;
/// Pieces of sent messages.
pub const RESHARD_PIECES_SEND: reshard_piece_list_t = 2;
/// Pieces of received messages.
pub const RESHARD_PIECES_RECV: reshard_piece_list_t = 3;

/// `reshard_transport_t`.
pub type reshard_transport_t = i32;
/// In-process, host memory.
pub const RESHARD_TRANSPORT_HOST: reshard_transport_t = 1;
/// MPI, host memory (`reshard_mpi_executor_create`, `reshard/reshard_mpi.h`).
pub const RESHARD_TRANSPORT_MPI: reshard_transport_t = 2;
/// NCCL, CUDA memory (`reshard_nccl_executor_create`, `reshard/reshard_nccl.h`).
pub const RESHARD_TRANSPORT_NCCL: reshard_transport_t = 3;
/// In-process, CUDA memory (ABI 1.1).
pub const RESHARD_TRANSPORT_CUDA_LOCAL: reshard_transport_t = 4;

/// `reshard_agreement_t` (ABI 1.1).
pub type reshard_agreement_t = i32;
/// Agree before a plan's first execution on an executor.
pub const RESHARD_AGREEMENT_FIRST_USE: reshard_agreement_t = 0;
/// Agree before every execution.
pub const RESHARD_AGREEMENT_EVERY_CALL: reshard_agreement_t = 1;
/// Never agree.
pub const RESHARD_AGREEMENT_SKIP: reshard_agreement_t = 2;

/// `reshard_packing_t` (ABI 1.1).
pub type reshard_packing_t = i32;
/// Gather where the transport can, else stage.
pub const RESHARD_PACKING_AUTO: reshard_packing_t = 0;
/// Pack into staging memory.
pub const RESHARD_PACKING_STAGING: reshard_packing_t = 1;
/// MPI derived datatypes, in place.
pub const RESHARD_PACKING_GATHER: reshard_packing_t = 2;

macro_rules! opaque {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            // Not Send, not Sync, not Unpin: the safe crate decides.
            _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}

opaque! {
    /// `reshard_error_t`: an error object (code + message).
    reshard_error_t;
    /// `reshard_mesh_t`: an immutable device mesh.
    reshard_mesh_t;
    /// `reshard_layout_t`: an immutable layout.
    reshard_layout_t;
    /// `reshard_topology_t`: a topology builder.
    reshard_topology_t;
    /// `reshard_plan_input_t`: a planner input builder.
    reshard_plan_input_t;
    /// `reshard_plan_t`: an immutable plan.
    reshard_plan_t;
    /// `reshard_buffer_t`: immutable bytes owned by the library.
    reshard_buffer_t;
    /// `reshard_executor_t`: an immutable executor.
    reshard_executor_t;
    /// `reshard_mpi_executor_options_t` (`reshard/reshard_mpi.h`; not
    /// mirrored here, opaque to these declarations).
    reshard_mpi_executor_options_t;
    /// `reshard_nccl_executor_options_t` (`reshard/reshard_nccl.h`; not
    /// mirrored here, opaque to these declarations).
    reshard_nccl_executor_options_t;
    /// `reshard_nccl_unique_id_t` (`reshard/reshard_nccl.h`: 128 bytes; opaque
    /// to these declarations).
    reshard_nccl_unique_id_t;
}

/// `reshard_executor_info_t` (ABI 1.1).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_executor_info_t {
    /// `sizeof(reshard_executor_info_t)`.
    pub struct_size: usize,
    /// The executor's transport.
    pub transport: reshard_transport_t,
    /// This process's rank in the group (= its plan process).
    pub rank: i32,
    /// Ranks in the group.
    pub size: i32,
    /// Written as 0.
    pub reserved0: i32,
}

impl Default for reshard_executor_info_t {
    /// `RESHARD_EXECUTOR_INFO_INIT`.
    fn default() -> Self {
        Self { struct_size: core::mem::size_of::<Self>(), transport: 0, rank: 0, size: 0, reserved0: 0 }
    }
}

/// `reshard_axes_t`: a list of mesh axis names.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct reshard_axes_t {
    /// `count` NUL-terminated names (may be NULL when count is 0).
    pub names: *const *const c_char,
    /// Number of names.
    pub count: usize,
}

/// `reshard_plan_options_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct reshard_plan_options_t {
    /// `sizeof(reshard_plan_options_t)`.
    pub struct_size: usize,
    /// Split pieces held by several remote replicas from this size on.
    pub split_min_bytes: i64,
    /// α: seconds per message.
    pub alpha_seconds: f64,
    /// β⁻¹ inside a host.
    pub intra_host_bytes_per_second: f64,
    /// β⁻¹ between hosts.
    pub inter_host_bytes_per_second: f64,
    /// Staging memory per device per round; 0: unbounded.
    pub staging_budget_bytes: i64,
    /// Since 1.3: relays for replicated destinations (1, the default) or
    /// single-hop (0); no other value. Where several devices of one host need
    /// the same box that no device of the host holds, one receives it over
    /// the network (stage 0) and forwards it inside the host (stage 1).
    pub relays: i32,
    /// Since 1.3: reduce-scatter then gather for partial sources (1, the
    /// default) or every device receiving every summand (0); no other value.
    pub reduce_scatter: i32,
    /// Since 1.7: NICs per host for the α–β estimate and the choices made
    /// by it (0, the default: one per device; at most 1048576). Execution
    /// does not read it.
    pub nics_per_host: i32,
    /// Since 1.8: the single-hop guard (1, the default) or every route the
    /// other choices take kept (0); no other value. Groups of like tensors
    /// whose routes make the whole plan slower by its α–β estimate go
    /// single-hop.
    pub single_hop_guard: i32,
}

impl Default for reshard_plan_options_t {
    /// `RESHARD_PLAN_OPTIONS_INIT`.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>(),
            split_min_bytes: 1 << 20,
            alpha_seconds: 5e-6,
            intra_host_bytes_per_second: 100e9,
            inter_host_bytes_per_second: 25e9,
            staging_budget_bytes: 1 << 30,
            relays: 1,
            reduce_scatter: 1,
            nics_per_host: 0,
            single_hop_guard: 1,
        }
    }
}

/// `reshard_plan_request_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_plan_request_t {
    /// `sizeof(reshard_plan_request_t)`.
    pub struct_size: usize,
    /// Which parts to compute.
    pub scope: reshard_plan_scope_t,
    /// The process for `RESHARD_PLAN_SCOPE_PROCESS`.
    pub process: i32,
    /// Non-zero: compute global statistics.
    pub global_stats: i32,
    /// Set to 0.
    pub reserved0: i32,
    /// Since 1.1: planning threads (0 or 1: the calling thread;
    /// [`RESHARD_PLAN_THREADS_ALL`]: one per hardware thread).
    pub threads: i32,
    /// Set to 0.
    pub reserved1: i32,
    /// Since 1.2: memory limit for the process parts, estimated before any
    /// is built (0: half the memory available; N > 0: N bytes;
    /// [`RESHARD_PLAN_BYTES_UNLIMITED`]: none).
    pub max_plan_bytes: i64,
}

/// `RESHARD_PLAN_THREADS_ALL`: one planning thread per hardware thread.
pub const RESHARD_PLAN_THREADS_ALL: i32 = -1;

/// `RESHARD_PLAN_BYTES_UNLIMITED`: no memory limit for planning.
pub const RESHARD_PLAN_BYTES_UNLIMITED: i64 = -1;

impl Default for reshard_plan_request_t {
    /// `RESHARD_PLAN_REQUEST_INIT`.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>(),
            scope: RESHARD_PLAN_SCOPE_ALL,
            process: 0,
            global_stats: 1,
            reserved0: 0,
            threads: 0,
            reserved1: 0,
            max_plan_bytes: 0,
        }
    }
}

/// `reshard_plan_stats_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct reshard_plan_stats_t {
    /// `sizeof(reshard_plan_stats_t)`.
    pub struct_size: usize,
    /// Bytes that leave their device.
    pub network_bytes: i64,
    /// Bytes copied within a device.
    pub local_bytes: i64,
    /// Bytes between hosts.
    pub cross_host_bytes: i64,
    /// Bytes between processes.
    pub cross_process_bytes: i64,
    /// Largest per-device send volume.
    pub max_send_bytes: i64,
    /// Largest per-device receive volume.
    pub max_recv_bytes: i64,
    /// Messages.
    pub messages: i64,
    /// Network + local pieces.
    pub pieces: i64,
    /// Rounds.
    pub rounds: i64,
    /// Peak staging bytes of one device.
    pub peak_staging_bytes: i64,
    /// Lower bound of `network_bytes`.
    pub lower_bound_network_bytes: i64,
    /// Lower bound of `max_send_bytes`.
    pub lower_bound_max_send_bytes: i64,
    /// Lower bound of `max_recv_bytes`.
    pub lower_bound_max_recv_bytes: i64,
    /// α–β estimate for the busiest device.
    pub cost_seconds: f64,
    /// Lower bound of `cost_seconds`.
    pub lower_bound_cost_seconds: f64,
    /// Wall time of planning.
    pub plan_seconds: f64,
    /// Entries for `reshard_plan_device_traffic`.
    pub num_devices: u64,
    /// Since 1.2: steps of the plan (0 for no work, 1 for a single-hop plan,
    /// 2 when relays forward in stage 1).
    pub stages: i64,
    /// Since 1.2: bytes the busiest host sends to other hosts.
    pub max_host_send_bytes: i64,
    /// Since 1.2: bytes the busiest host receives from other hosts.
    pub max_host_recv_bytes: i64,
    /// Since 1.2: lower bound of `cross_host_bytes` over all plans.
    pub lower_bound_cross_host_bytes: i64,
    /// Since 1.2: lower bound of `max_host_send_bytes`.
    pub lower_bound_max_host_send_bytes: i64,
    /// Since 1.2: lower bound of `max_host_recv_bytes`.
    pub lower_bound_max_host_recv_bytes: i64,
    /// Since 1.2: the bound that gives `lower_bound_cost_seconds` (`RESHARD_BOUND_*`).
    pub lower_bound_binding: reshard_bound_kind_t,
    /// Set to 0.
    pub reserved0: i32,
    /// Since 1.2: the device or host the binding bound concerns; -1 with none.
    pub lower_bound_binding_id: i64,
    /// Since 1.3: bytes of stages after the first (what relays forward from
    /// a destination buffer; part of `network_bytes`).
    pub forwarded_bytes: i64,
    /// Since 1.5: the most scratch bytes allocated on one device (reduction
    /// trees' planner-sized staging; 0 without).
    pub max_scratch_bytes: i64,
}

/// `reshard_bound_kind_t` (since 1.2): which lower bound limits the cost estimate.
pub type reshard_bound_kind_t = i32;
/// No traffic: no bound binds.
pub const RESHARD_BOUND_NONE: reshard_bound_kind_t = 0;
/// A device's bytes to receive.
pub const RESHARD_BOUND_DEVICE_RECV: reshard_bound_kind_t = 1;
/// A device's bytes only it holds.
pub const RESHARD_BOUND_DEVICE_SEND: reshard_bound_kind_t = 2;
/// A host's bytes to take in over its NICs.
pub const RESHARD_BOUND_HOST_RECV: reshard_bound_kind_t = 3;
/// A host's bytes only it holds.
pub const RESHARD_BOUND_HOST_SEND: reshard_bound_kind_t = 4;

impl Default for reshard_plan_stats_t {
    /// `RESHARD_PLAN_STATS_INIT`.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>(),
            network_bytes: 0,
            local_bytes: 0,
            cross_host_bytes: 0,
            cross_process_bytes: 0,
            max_send_bytes: 0,
            max_recv_bytes: 0,
            messages: 0,
            pieces: 0,
            rounds: 0,
            peak_staging_bytes: 0,
            lower_bound_network_bytes: 0,
            lower_bound_max_send_bytes: 0,
            lower_bound_max_recv_bytes: 0,
            cost_seconds: 0.0,
            lower_bound_cost_seconds: 0.0,
            plan_seconds: 0.0,
            num_devices: 0,
            stages: 0,
            max_host_send_bytes: 0,
            max_host_recv_bytes: 0,
            lower_bound_cross_host_bytes: 0,
            lower_bound_max_host_send_bytes: 0,
            lower_bound_max_host_recv_bytes: 0,
            lower_bound_binding: RESHARD_BOUND_NONE,
            reserved0: 0,
            lower_bound_binding_id: -1,
            forwarded_bytes: 0,
            max_scratch_bytes: 0,
        }
    }
}

/// `reshard_device_traffic_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_device_traffic_t {
    /// `sizeof(reshard_device_traffic_t)`.
    pub struct_size: usize,
    /// Device id.
    pub device: i64,
    /// Bytes sent.
    pub send_bytes: i64,
    /// Bytes received.
    pub recv_bytes: i64,
    /// Bytes copied locally.
    pub local_bytes: i64,
    /// Messages sent.
    pub send_messages: i64,
    /// Messages received.
    pub recv_messages: i64,
}

impl Default for reshard_device_traffic_t {
    /// `RESHARD_DEVICE_TRAFFIC_INIT`.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>(),
            device: 0,
            send_bytes: 0,
            recv_bytes: 0,
            local_bytes: 0,
            send_messages: 0,
            recv_messages: 0,
        }
    }
}

/// `reshard_part_info_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_part_info_t {
    /// `sizeof(reshard_part_info_t)`.
    pub struct_size: usize,
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
    /// Since 1.6: scratch buffers the process allocates for one execution
    /// ([`reshard_plan_part_scratch`]).
    pub num_scratch: u64,
}

impl Default for reshard_part_info_t {
    /// `RESHARD_PART_INFO_INIT`.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>(),
            num_local_pieces: 0,
            num_sends: 0,
            num_send_pieces: 0,
            num_recvs: 0,
            num_recv_pieces: 0,
            num_scratch: 0,
        }
    }
}

/// `RESHARD_SCRATCH_ENTRY` (since 1.6): a piece's `src_entry` or `dst_entry`
/// naming a scratch buffer instead of a layout entry.
pub const RESHARD_SCRATCH_ENTRY: u64 = 4294967294;

/// `reshard_scratch_t` (since 1.6).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_scratch_t {
    /// `sizeof(reshard_scratch_t)`.
    pub struct_size: usize,
    /// The tensor whose box it holds.
    pub tensor: u64,
    /// The device it is allocated on.
    pub device: i64,
    /// The box's elements times the tensor's dtype size.
    pub bytes: i64,
}

impl Default for reshard_scratch_t {
    /// `RESHARD_SCRATCH_INIT`.
    fn default() -> Self {
        Self { struct_size: core::mem::size_of::<Self>(), tensor: 0, device: 0, bytes: 0 }
    }
}

/// `reshard_message_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_message_t {
    /// `sizeof(reshard_message_t)`.
    pub struct_size: usize,
    /// Sending device.
    pub src_device: i64,
    /// Receiving device.
    pub dst_device: i64,
    /// Round within its stage.
    pub round: u64,
    /// First piece in the SEND / RECV list.
    pub first_piece: u64,
    /// Number of pieces.
    pub num_pieces: u64,
    /// Packed size.
    pub bytes: i64,
    /// Since 1.3: the stage; stages run in order. The pieces of a message of
    /// stage > 0 forward what an earlier stage wrote into a destination
    /// buffer (a relay).
    pub stage: u64,
    /// Since 1.14: the sub-message (0, 1, ... among the messages of one
    /// stage, round, source and destination; 0 where a message is not cut).
    pub sub: u64,
}

impl Default for reshard_message_t {
    /// `RESHARD_MESSAGE_INIT`.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>(),
            src_device: 0,
            dst_device: 0,
            round: 0,
            first_piece: 0,
            num_pieces: 0,
            bytes: 0,
            stage: 0,
            sub: 0,
        }
    }
}

/// `reshard_piece_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_piece_t {
    /// `sizeof(reshard_piece_t)`.
    pub struct_size: usize,
    /// Tensor index.
    pub tensor: u64,
    /// Entry of the tensor's source layout; in a stage > 0 (see `stage`), of
    /// its destination layout: the relay's buffer the piece is forwarded from.
    pub src_entry: u64,
    /// Destination layout entry.
    pub dst_entry: u64,
    /// Source device.
    pub src_device: i64,
    /// Destination device.
    pub dst_device: i64,
    /// Bytes moved.
    pub bytes: i64,
    /// Since 1.3: the stage of the piece's message (0 for LOCAL pieces).
    pub stage: u64,
}

impl Default for reshard_piece_t {
    /// `RESHARD_PIECE_INIT`.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>(),
            tensor: 0,
            src_entry: 0,
            dst_entry: 0,
            src_device: 0,
            dst_device: 0,
            bytes: 0,
            stage: 0,
        }
    }
}

/// `reshard_serialize_options_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_serialize_options_t {
    /// `sizeof(reshard_serialize_options_t)`.
    pub struct_size: usize,
    /// Non-zero: every part the plan holds; 0: only `process`.
    pub all_parts: i32,
    /// The process whose part to write when `all_parts` is 0.
    pub process: i32,
    /// MAC key to sign the bytes with (ABI 1.9; null with `key_size` 0: unsigned).
    pub key: *const c_void,
    /// Bytes of `key` (16 to 1024).
    pub key_size: usize,
}

impl Default for reshard_serialize_options_t {
    /// `RESHARD_SERIALIZE_OPTIONS_INIT`.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>(),
            all_parts: 1,
            process: 0,
            key: core::ptr::null(),
            key_size: 0,
        }
    }
}

/// `reshard_deserialize_options_t` (ABI 1.9).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_deserialize_options_t {
    /// `sizeof(reshard_deserialize_options_t)`.
    pub struct_size: usize,
    /// MAC key the bytes must be signed with (null with `key_size` 0: none required).
    pub key: *const c_void,
    /// Bytes of `key` (16 to 1024).
    pub key_size: usize,
}

impl Default for reshard_deserialize_options_t {
    /// `RESHARD_DESERIALIZE_OPTIONS_INIT`.
    fn default() -> Self {
        Self { struct_size: core::mem::size_of::<Self>(), key: core::ptr::null(), key_size: 0 }
    }
}

/// `RESHARD_MAC_KEY_MIN_BYTES`.
pub const RESHARD_MAC_KEY_MIN_BYTES: usize = 16;
/// `RESHARD_MAC_KEY_MAX_BYTES`.
pub const RESHARD_MAC_KEY_MAX_BYTES: usize = 1024;

/// `reshard_executor_options_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct reshard_executor_options_t {
    /// `sizeof(reshard_executor_options_t)`.
    pub struct_size: usize,
    /// How bytes move.
    pub transport: reshard_transport_t,
    /// Worker threads; 0: one per hardware thread.
    pub threads: i32,
    /// ABI 1.9: the deadline of each host execution as a whole, seconds
    /// (positive and finite; 300 by default).
    pub timeout_seconds: f64,
}

impl Default for reshard_executor_options_t {
    /// `RESHARD_EXECUTOR_OPTIONS_INIT`.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>(),
            transport: RESHARD_TRANSPORT_HOST,
            threads: 0,
            timeout_seconds: 300.0,
        }
    }
}

/// `reshard_src_buffer_t`: a read-only shard buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct reshard_src_buffer_t {
    /// The bytes (may be NULL for an empty box).
    pub data: *const c_void,
    /// Their number.
    pub bytes: usize,
}

/// `reshard_dst_buffer_t`: a writable shard buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct reshard_dst_buffer_t {
    /// The bytes (may be NULL for an empty box).
    pub data: *mut c_void,
    /// Their number.
    pub bytes: usize,
}

/// `reshard_tensor_buffers_t`: the shard buffers of one tensor.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct reshard_tensor_buffers_t {
    /// One per source layout entry.
    pub src: *const reshard_src_buffer_t,
    /// Their number.
    pub num_src: usize,
    /// One per destination layout entry.
    pub dst: *const reshard_dst_buffer_t,
    /// Their number.
    pub num_dst: usize,
}

/// `reshard_verify_report_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct reshard_verify_report_t {
    /// `sizeof(reshard_verify_report_t)`.
    pub struct_size: usize,
    /// Tensors checked.
    pub tensors: i64,
    /// Destination elements checked.
    pub elements: i64,
    /// Destination bytes checked.
    pub bytes: i64,
    /// Wrong elements.
    pub mismatches: i64,
}

impl Default for reshard_verify_report_t {
    /// `RESHARD_VERIFY_REPORT_INIT`.
    fn default() -> Self {
        Self { struct_size: core::mem::size_of::<Self>(), tensors: 0, elements: 0, bytes: 0, mismatches: 0 }
    }
}

/// Shorthand for the fallible return type.
pub type Status = *mut reshard_error_t;

extern "C" {
    /// `reshard_version`, documented in `reshard/reshard.h`.
    pub fn reshard_version() -> *const c_char;
    /// `reshard_version_number`, documented in `reshard/reshard.h`.
    pub fn reshard_version_number() -> u32;

    /// `reshard_error_code`, documented in `reshard/reshard.h`.
    pub fn reshard_error_code(error: *const reshard_error_t) -> reshard_error_code_t;
    /// `reshard_error_message`, documented in `reshard/reshard.h`.
    pub fn reshard_error_message(error: *const reshard_error_t) -> *const c_char;
    /// `reshard_error_destroy`, documented in `reshard/reshard.h`.
    pub fn reshard_error_destroy(error: *mut reshard_error_t);
    /// `reshard_error_code_name`, documented in `reshard/reshard.h`.
    pub fn reshard_error_code_name(code: reshard_error_code_t) -> *const c_char;

    /// `reshard_dtype_size`, documented in `reshard/reshard.h`.
    pub fn reshard_dtype_size(dtype: reshard_dtype_t) -> usize;
    /// `reshard_dtype_name`, documented in `reshard/reshard.h`.
    pub fn reshard_dtype_name(dtype: reshard_dtype_t) -> *const c_char;
    /// `reshard_dtype_from_name`, documented in `reshard/reshard.h`.
    pub fn reshard_dtype_from_name(name: *const c_char, out_dtype: *mut reshard_dtype_t) -> Status;

    /// `reshard_mesh_create`, documented in `reshard/reshard.h`.
    pub fn reshard_mesh_create(
        rank: usize,
        axis_names: *const *const c_char,
        shape: *const i64,
        devices: *const i64,
        out_mesh: *mut *mut reshard_mesh_t,
    ) -> Status;
    /// `reshard_mesh_destroy`, documented in `reshard/reshard.h`.
    pub fn reshard_mesh_destroy(mesh: *mut reshard_mesh_t);
    /// `reshard_mesh_rank`, documented in `reshard/reshard.h`.
    pub fn reshard_mesh_rank(mesh: *const reshard_mesh_t, out_rank: *mut usize) -> Status;
    /// `reshard_mesh_size`, documented in `reshard/reshard.h`.
    pub fn reshard_mesh_size(mesh: *const reshard_mesh_t, out_size: *mut i64) -> Status;

    /// `reshard_layout_create_named`, documented in `reshard/reshard.h`.
    pub fn reshard_layout_create_named(
        mesh: *const reshard_mesh_t,
        rank: usize,
        shape: *const i64,
        dims: *const reshard_axes_t,
        partial: *const reshard_axes_t,
        partial_op: reshard_reduce_op_t,
        out_layout: *mut *mut reshard_layout_t,
    ) -> Status;
    /// `reshard_layout_create_boxes`, documented in `reshard/reshard.h`.
    pub fn reshard_layout_create_boxes(
        rank: usize,
        shape: *const i64,
        num_entries: usize,
        devices: *const i64,
        summands: *const i32,
        lo: *const i64,
        hi: *const i64,
        num_summands: i32,
        op: reshard_reduce_op_t,
        out_layout: *mut *mut reshard_layout_t,
    ) -> Status;
    /// `reshard_layout_destroy`, documented in `reshard/reshard.h`.
    pub fn reshard_layout_destroy(layout: *mut reshard_layout_t);
    /// `reshard_layout_rank`, documented in `reshard/reshard.h`.
    pub fn reshard_layout_rank(layout: *const reshard_layout_t, out_rank: *mut usize) -> Status;
    /// `reshard_layout_shape`, documented in `reshard/reshard.h`.
    pub fn reshard_layout_shape(layout: *const reshard_layout_t, out_shape: *mut i64) -> Status;
    /// `reshard_layout_num_entries`, documented in `reshard/reshard.h`.
    pub fn reshard_layout_num_entries(layout: *const reshard_layout_t, out_count: *mut usize) -> Status;
    /// `reshard_layout_entry`, documented in `reshard/reshard.h`.
    pub fn reshard_layout_entry(
        layout: *const reshard_layout_t,
        entry: usize,
        out_device: *mut i64,
        out_summand: *mut i32,
        out_lo: *mut i64,
        out_hi: *mut i64,
    ) -> Status;

    /// `reshard_topology_create`, documented in `reshard/reshard.h`.
    pub fn reshard_topology_create(out_topology: *mut *mut reshard_topology_t) -> Status;
    /// `reshard_topology_destroy`, documented in `reshard/reshard.h`.
    pub fn reshard_topology_destroy(topology: *mut reshard_topology_t);
    /// `reshard_topology_add_device`, documented in `reshard/reshard.h`.
    pub fn reshard_topology_add_device(
        topology: *mut reshard_topology_t,
        device: i64,
        process: i32,
        host: i32,
        ordinal: i32,
    ) -> Status;
    /// `reshard_topology_num_devices`, documented in `reshard/reshard.h`.
    pub fn reshard_topology_num_devices(topology: *const reshard_topology_t, out_count: *mut usize) -> Status;

    /// `reshard_plan_input_create`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_create(out_input: *mut *mut reshard_plan_input_t) -> Status;
    /// `reshard_plan_input_from_spec`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_from_spec(
        json: *const c_char,
        length: usize,
        out_input: *mut *mut reshard_plan_input_t,
    ) -> Status;
    /// `reshard_plan_input_destroy`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_destroy(input: *mut reshard_plan_input_t);
    /// `reshard_plan_input_add_tensor`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_add_tensor(
        input: *mut reshard_plan_input_t,
        name: *const c_char,
        rank: usize,
        shape: *const i64,
        dtype: reshard_dtype_t,
        src: *const reshard_layout_t,
        dst: *const reshard_layout_t,
    ) -> Status;
    /// `reshard_plan_input_set_topology`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_set_topology(
        input: *mut reshard_plan_input_t,
        topology: *const reshard_topology_t,
    ) -> Status;
    /// `reshard_plan_input_set_options`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_set_options(
        input: *mut reshard_plan_input_t,
        options: *const reshard_plan_options_t,
    ) -> Status;
    /// `reshard_plan_input_num_tensors`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_num_tensors(input: *const reshard_plan_input_t, out_count: *mut usize) -> Status;
    /// `reshard_plan_input_fingerprint`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_fingerprint(input: *const reshard_plan_input_t, out_fingerprint: *mut u64) -> Status;
    /// `reshard_plan_input_num_flats` (ABI 1.10), documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_num_flats(input: *const reshard_plan_input_t, out_count: *mut usize) -> Status;
    /// `reshard_plan_input_flat_info` (ABI 1.10), documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_flat_info(
        input: *const reshard_plan_input_t,
        flat: usize,
        out_name: *mut *const c_char,
        out_is_source: *mut i32,
        out_world_size: *mut usize,
        out_num_tensors: *mut usize,
        out_shard_bytes: *mut i64,
    ) -> Status;
    /// `reshard_plan_input_flat_device` (ABI 1.10), documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_flat_device(
        input: *const reshard_plan_input_t,
        flat: usize,
        rank: usize,
        out_device: *mut i64,
    ) -> Status;
    /// `reshard_plan_input_flat_tensor` (ABI 1.10), documented in `reshard/reshard.h`.
    pub fn reshard_plan_input_flat_tensor(
        input: *const reshard_plan_input_t,
        flat: usize,
        index: usize,
        out_tensor: *mut usize,
        out_num_entries: *mut usize,
        capacity: usize,
        out_ranks: *mut u64,
        out_byte_offsets: *mut i64,
    ) -> Status;

    /// `reshard_plan_tensor_dst_dtype` (ABI 1.11), documented in `reshard/reshard.h`.
    pub fn reshard_plan_tensor_dst_dtype(
        plan: *const reshard_plan_t,
        tensor: usize,
        out_dtype: *mut reshard_dtype_t,
    ) -> Status;

    /// `reshard_plan_tensor_scales` (ABI 1.12), documented in `reshard/reshard.h`.
    pub fn reshard_plan_tensor_scales(
        plan: *const reshard_plan_t,
        tensor: usize,
        out_scale_tensor: *mut i64,
        out_block: *mut i64,
    ) -> Status;

    /// `reshard_plan_create`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_create(
        input: *const reshard_plan_input_t,
        request: *const reshard_plan_request_t,
        out_plan: *mut *mut reshard_plan_t,
    ) -> Status;
    /// `reshard_plan_destroy`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_destroy(plan: *mut reshard_plan_t);
    /// `reshard_plan_fingerprint`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_fingerprint(plan: *const reshard_plan_t, out_fingerprint: *mut u64) -> Status;
    /// `reshard_plan_stats`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_stats(plan: *const reshard_plan_t, out_stats: *mut reshard_plan_stats_t) -> Status;
    /// `reshard_plan_device_traffic`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_device_traffic(
        plan: *const reshard_plan_t,
        index: usize,
        out_traffic: *mut reshard_device_traffic_t,
    ) -> Status;

    /// `reshard_plan_num_tensors`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_num_tensors(plan: *const reshard_plan_t, out_count: *mut usize) -> Status;
    /// `reshard_plan_tensor_name`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_tensor_name(plan: *const reshard_plan_t, tensor: usize, out_name: *mut *const c_char)
        -> Status;
    /// `reshard_plan_tensor_dtype`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_tensor_dtype(
        plan: *const reshard_plan_t,
        tensor: usize,
        out_dtype: *mut reshard_dtype_t,
    ) -> Status;
    /// `reshard_plan_tensor_rank`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_tensor_rank(plan: *const reshard_plan_t, tensor: usize, out_rank: *mut usize) -> Status;
    /// `reshard_plan_tensor_shape`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_tensor_shape(plan: *const reshard_plan_t, tensor: usize, out_shape: *mut i64) -> Status;
    /// `reshard_plan_tensor_num_entries`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_tensor_num_entries(
        plan: *const reshard_plan_t,
        tensor: usize,
        side: reshard_side_t,
        out_count: *mut usize,
    ) -> Status;
    /// `reshard_plan_tensor_entry`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_tensor_entry(
        plan: *const reshard_plan_t,
        tensor: usize,
        side: reshard_side_t,
        entry: usize,
        out_device: *mut i64,
        out_summand: *mut i32,
        out_lo: *mut i64,
        out_hi: *mut i64,
    ) -> Status;
    /// `reshard_plan_tensor_partial`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_tensor_partial(
        plan: *const reshard_plan_t,
        tensor: usize,
        side: reshard_side_t,
        out_num_summands: *mut i32,
        out_op: *mut reshard_reduce_op_t,
    ) -> Status;
    /// `reshard_plan_entry_of_device`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_entry_of_device(
        plan: *const reshard_plan_t,
        tensor: usize,
        side: reshard_side_t,
        device: i64,
        out_entry: *mut usize,
        out_found: *mut i32,
    ) -> Status;

    /// `reshard_plan_num_processes`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_num_processes(plan: *const reshard_plan_t, out_count: *mut usize) -> Status;
    /// `reshard_plan_process`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_process(plan: *const reshard_plan_t, index: usize, out_process: *mut i32) -> Status;
    /// `reshard_plan_has_part`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_has_part(plan: *const reshard_plan_t, process: i32, out_has: *mut i32) -> Status;
    /// `reshard_plan_part_info`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_part_info(
        plan: *const reshard_plan_t,
        process: i32,
        out_info: *mut reshard_part_info_t,
    ) -> Status;
    /// `reshard_plan_part_message`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_part_message(
        plan: *const reshard_plan_t,
        process: i32,
        direction: reshard_direction_t,
        index: usize,
        out_message: *mut reshard_message_t,
    ) -> Status;
    /// `reshard_plan_part_piece`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_part_piece(
        plan: *const reshard_plan_t,
        process: i32,
        list: reshard_piece_list_t,
        index: usize,
        out_piece: *mut reshard_piece_t,
        out_lo: *mut i64,
        out_hi: *mut i64,
    ) -> Status;

    /// `reshard_buffer_data`, documented in `reshard/reshard.h`.
    pub fn reshard_buffer_data(buffer: *const reshard_buffer_t) -> *const c_void;
    /// `reshard_buffer_size`, documented in `reshard/reshard.h`.
    pub fn reshard_buffer_size(buffer: *const reshard_buffer_t) -> usize;
    /// `reshard_buffer_destroy`, documented in `reshard/reshard.h`.
    pub fn reshard_buffer_destroy(buffer: *mut reshard_buffer_t);
    /// `reshard_plan_serialize`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_serialize(
        plan: *const reshard_plan_t,
        options: *const reshard_serialize_options_t,
        out_buffer: *mut *mut reshard_buffer_t,
    ) -> Status;
    /// `reshard_plan_deserialize`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_deserialize(data: *const c_void, size: usize, out_plan: *mut *mut reshard_plan_t) -> Status;
    /// `reshard_plan_verify_bytes`, documented in `reshard/reshard.h`.
    pub fn reshard_plan_verify_bytes(data: *const c_void, size: usize) -> Status;
    /// `reshard_plan_deserialize_with_options` (ABI 1.9), documented in `reshard/reshard.h`.
    pub fn reshard_plan_deserialize_with_options(
        data: *const c_void,
        size: usize,
        options: *const reshard_deserialize_options_t,
        out_plan: *mut *mut reshard_plan_t,
    ) -> Status;
    /// `reshard_plan_verify_bytes_with_options` (ABI 1.9), documented in `reshard/reshard.h`.
    pub fn reshard_plan_verify_bytes_with_options(
        data: *const c_void,
        size: usize,
        options: *const reshard_deserialize_options_t,
    ) -> Status;

    /// `reshard_executor_create`, documented in `reshard/reshard.h`.
    pub fn reshard_executor_create(
        options: *const reshard_executor_options_t,
        out_executor: *mut *mut reshard_executor_t,
    ) -> Status;
    /// `reshard_executor_destroy`, documented in `reshard/reshard.h`.
    pub fn reshard_executor_destroy(executor: *mut reshard_executor_t);
    /// `reshard_executor_execute`, documented in `reshard/reshard.h`.
    pub fn reshard_executor_execute(
        executor: *const reshard_executor_t,
        plan: *const reshard_plan_t,
        buffers: *const reshard_tensor_buffers_t,
        num_tensors: usize,
    ) -> Status;

    /// `reshard_oracle_fill_source`, documented in `reshard/reshard.h`.
    pub fn reshard_oracle_fill_source(
        plan: *const reshard_plan_t,
        tensor: usize,
        entry: usize,
        data: *mut c_void,
        bytes: usize,
    ) -> Status;
    /// `reshard_oracle_check_destination`, documented in `reshard/reshard.h`.
    pub fn reshard_oracle_check_destination(
        plan: *const reshard_plan_t,
        tensor: usize,
        entry: usize,
        data: *const c_void,
        bytes: usize,
        out_mismatches: *mut i64,
    ) -> Status;
    /// `reshard_executor_verify`, documented in `reshard/reshard.h`.
    pub fn reshard_executor_verify(
        executor: *const reshard_executor_t,
        plan: *const reshard_plan_t,
        out_report: *mut reshard_verify_report_t,
    ) -> Status;

    /// `reshard_transport_available` (ABI 1.1), documented in `reshard/reshard.h`.
    pub fn reshard_transport_available(
        transport: reshard_transport_t,
        out_available: *mut i32,
        why: *mut c_char,
        why_size: usize,
    ) -> Status;
    /// `reshard_executor_info` (ABI 1.1), documented in `reshard/reshard.h`.
    pub fn reshard_executor_info(executor: *const reshard_executor_t, out_info: *mut reshard_executor_info_t)
        -> Status;
    /// `reshard_mpi_executor_create` (ABI 1.1), documented in `reshard/reshard_mpi.h`.
    pub fn reshard_mpi_executor_create(
        options: *const reshard_mpi_executor_options_t,
        out_executor: *mut *mut reshard_executor_t,
    ) -> Status;
    /// `reshard_nccl_unique_id` (ABI 1.1), documented in `reshard/reshard_nccl.h`.
    pub fn reshard_nccl_unique_id(library: *const c_char, out_id: *mut reshard_nccl_unique_id_t) -> Status;
    /// `reshard_nccl_executor_create` (ABI 1.1), documented in `reshard/reshard_nccl.h`.
    pub fn reshard_nccl_executor_create(
        options: *const reshard_nccl_executor_options_t,
        out_executor: *mut *mut reshard_executor_t,
    ) -> Status;
    /// `reshard_plan_device_location` (ABI 1.1), documented in `reshard/reshard.h`.
    pub fn reshard_plan_device_location(
        plan: *const reshard_plan_t,
        device: i64,
        out_process: *mut i32,
        out_host: *mut i32,
        out_ordinal: *mut i32,
    ) -> Status;
    /// `reshard_plan_part_scratch` (ABI 1.6), documented in `reshard/reshard.h`.
    pub fn reshard_plan_part_scratch(
        plan: *const reshard_plan_t,
        process: i32,
        index: usize,
        out_scratch: *mut reshard_scratch_t,
        out_lo: *mut i64,
        out_hi: *mut i64,
    ) -> Status;

    /// `reshard_get_api`, documented in `reshard/reshard.h`.
    pub fn reshard_get_api(abi_major: u32) -> *const reshard_api_t;
}

/// `reshard_get_api_fn`: the type of [`reshard_get_api`], for `dlsym` users.
pub type reshard_get_api_fn = Option<unsafe extern "C" fn(abi_major: u32) -> *const reshard_api_t>;

/// `reshard_api_t`: the static function table (ABI 1.6 fields). Fields are
/// only appended; check `struct_size` before using one added after 1.0.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct reshard_api_t {
    /// `sizeof` the table the library provides.
    pub struct_size: usize,
    /// The library's ABI major.
    pub abi_major: u32,
    /// The library's ABI minor.
    pub abi_minor: u32,
    /// [`reshard_version`].
    pub version: Option<unsafe extern "C" fn() -> *const c_char>,
    /// [`reshard_version_number`].
    pub version_number: Option<unsafe extern "C" fn() -> u32>,
    /// [`reshard_error_code`].
    pub error_code: Option<unsafe extern "C" fn(*const reshard_error_t) -> reshard_error_code_t>,
    /// [`reshard_error_message`].
    pub error_message: Option<unsafe extern "C" fn(*const reshard_error_t) -> *const c_char>,
    /// [`reshard_error_destroy`].
    pub error_destroy: Option<unsafe extern "C" fn(*mut reshard_error_t)>,
    /// [`reshard_error_code_name`].
    pub error_code_name: Option<unsafe extern "C" fn(reshard_error_code_t) -> *const c_char>,
    /// [`reshard_dtype_size`].
    pub dtype_size: Option<unsafe extern "C" fn(reshard_dtype_t) -> usize>,
    /// [`reshard_dtype_name`].
    pub dtype_name: Option<unsafe extern "C" fn(reshard_dtype_t) -> *const c_char>,
    /// [`reshard_dtype_from_name`].
    pub dtype_from_name: Option<unsafe extern "C" fn(*const c_char, *mut reshard_dtype_t) -> Status>,
    /// [`reshard_mesh_create`].
    pub mesh_create: Option<
        unsafe extern "C" fn(usize, *const *const c_char, *const i64, *const i64, *mut *mut reshard_mesh_t) -> Status,
    >,
    /// [`reshard_mesh_destroy`].
    pub mesh_destroy: Option<unsafe extern "C" fn(*mut reshard_mesh_t)>,
    /// [`reshard_mesh_rank`].
    pub mesh_rank: Option<unsafe extern "C" fn(*const reshard_mesh_t, *mut usize) -> Status>,
    /// [`reshard_mesh_size`].
    pub mesh_size: Option<unsafe extern "C" fn(*const reshard_mesh_t, *mut i64) -> Status>,
    /// [`reshard_layout_create_named`].
    pub layout_create_named: Option<
        unsafe extern "C" fn(
            *const reshard_mesh_t,
            usize,
            *const i64,
            *const reshard_axes_t,
            *const reshard_axes_t,
            reshard_reduce_op_t,
            *mut *mut reshard_layout_t,
        ) -> Status,
    >,
    /// [`reshard_layout_create_boxes`].
    pub layout_create_boxes: Option<
        unsafe extern "C" fn(
            usize,
            *const i64,
            usize,
            *const i64,
            *const i32,
            *const i64,
            *const i64,
            i32,
            reshard_reduce_op_t,
            *mut *mut reshard_layout_t,
        ) -> Status,
    >,
    /// [`reshard_layout_destroy`].
    pub layout_destroy: Option<unsafe extern "C" fn(*mut reshard_layout_t)>,
    /// [`reshard_layout_rank`].
    pub layout_rank: Option<unsafe extern "C" fn(*const reshard_layout_t, *mut usize) -> Status>,
    /// [`reshard_layout_shape`].
    pub layout_shape: Option<unsafe extern "C" fn(*const reshard_layout_t, *mut i64) -> Status>,
    /// [`reshard_layout_num_entries`].
    pub layout_num_entries: Option<unsafe extern "C" fn(*const reshard_layout_t, *mut usize) -> Status>,
    /// [`reshard_layout_entry`].
    pub layout_entry:
        Option<unsafe extern "C" fn(*const reshard_layout_t, usize, *mut i64, *mut i32, *mut i64, *mut i64) -> Status>,
    /// [`reshard_topology_create`].
    pub topology_create: Option<unsafe extern "C" fn(*mut *mut reshard_topology_t) -> Status>,
    /// [`reshard_topology_destroy`].
    pub topology_destroy: Option<unsafe extern "C" fn(*mut reshard_topology_t)>,
    /// [`reshard_topology_add_device`].
    pub topology_add_device: Option<unsafe extern "C" fn(*mut reshard_topology_t, i64, i32, i32, i32) -> Status>,
    /// [`reshard_topology_num_devices`].
    pub topology_num_devices: Option<unsafe extern "C" fn(*const reshard_topology_t, *mut usize) -> Status>,
    /// [`reshard_plan_input_create`].
    pub plan_input_create: Option<unsafe extern "C" fn(*mut *mut reshard_plan_input_t) -> Status>,
    /// [`reshard_plan_input_from_spec`].
    pub plan_input_from_spec:
        Option<unsafe extern "C" fn(*const c_char, usize, *mut *mut reshard_plan_input_t) -> Status>,
    /// [`reshard_plan_input_destroy`].
    pub plan_input_destroy: Option<unsafe extern "C" fn(*mut reshard_plan_input_t)>,
    /// [`reshard_plan_input_add_tensor`].
    pub plan_input_add_tensor: Option<
        unsafe extern "C" fn(
            *mut reshard_plan_input_t,
            *const c_char,
            usize,
            *const i64,
            reshard_dtype_t,
            *const reshard_layout_t,
            *const reshard_layout_t,
        ) -> Status,
    >,
    /// [`reshard_plan_input_set_topology`].
    pub plan_input_set_topology:
        Option<unsafe extern "C" fn(*mut reshard_plan_input_t, *const reshard_topology_t) -> Status>,
    /// [`reshard_plan_input_set_options`].
    pub plan_input_set_options:
        Option<unsafe extern "C" fn(*mut reshard_plan_input_t, *const reshard_plan_options_t) -> Status>,
    /// [`reshard_plan_input_num_tensors`].
    pub plan_input_num_tensors: Option<unsafe extern "C" fn(*const reshard_plan_input_t, *mut usize) -> Status>,
    /// [`reshard_plan_input_fingerprint`].
    pub plan_input_fingerprint: Option<unsafe extern "C" fn(*const reshard_plan_input_t, *mut u64) -> Status>,
    /// [`reshard_plan_create`].
    pub plan_create: Option<
        unsafe extern "C" fn(
            *const reshard_plan_input_t,
            *const reshard_plan_request_t,
            *mut *mut reshard_plan_t,
        ) -> Status,
    >,
    /// [`reshard_plan_destroy`].
    pub plan_destroy: Option<unsafe extern "C" fn(*mut reshard_plan_t)>,
    /// [`reshard_plan_fingerprint`].
    pub plan_fingerprint: Option<unsafe extern "C" fn(*const reshard_plan_t, *mut u64) -> Status>,
    /// [`reshard_plan_stats`].
    pub plan_stats: Option<unsafe extern "C" fn(*const reshard_plan_t, *mut reshard_plan_stats_t) -> Status>,
    /// [`reshard_plan_device_traffic`].
    pub plan_device_traffic:
        Option<unsafe extern "C" fn(*const reshard_plan_t, usize, *mut reshard_device_traffic_t) -> Status>,
    /// [`reshard_plan_num_tensors`].
    pub plan_num_tensors: Option<unsafe extern "C" fn(*const reshard_plan_t, *mut usize) -> Status>,
    /// [`reshard_plan_tensor_name`].
    pub plan_tensor_name: Option<unsafe extern "C" fn(*const reshard_plan_t, usize, *mut *const c_char) -> Status>,
    /// [`reshard_plan_tensor_dtype`].
    pub plan_tensor_dtype: Option<unsafe extern "C" fn(*const reshard_plan_t, usize, *mut reshard_dtype_t) -> Status>,
    /// [`reshard_plan_tensor_rank`].
    pub plan_tensor_rank: Option<unsafe extern "C" fn(*const reshard_plan_t, usize, *mut usize) -> Status>,
    /// [`reshard_plan_tensor_shape`].
    pub plan_tensor_shape: Option<unsafe extern "C" fn(*const reshard_plan_t, usize, *mut i64) -> Status>,
    /// [`reshard_plan_tensor_num_entries`].
    pub plan_tensor_num_entries:
        Option<unsafe extern "C" fn(*const reshard_plan_t, usize, reshard_side_t, *mut usize) -> Status>,
    /// [`reshard_plan_tensor_entry`].
    pub plan_tensor_entry: Option<
        unsafe extern "C" fn(
            *const reshard_plan_t,
            usize,
            reshard_side_t,
            usize,
            *mut i64,
            *mut i32,
            *mut i64,
            *mut i64,
        ) -> Status,
    >,
    /// [`reshard_plan_tensor_partial`].
    pub plan_tensor_partial: Option<
        unsafe extern "C" fn(
            *const reshard_plan_t,
            usize,
            reshard_side_t,
            *mut i32,
            *mut reshard_reduce_op_t,
        ) -> Status,
    >,
    /// [`reshard_plan_entry_of_device`].
    pub plan_entry_of_device:
        Option<unsafe extern "C" fn(*const reshard_plan_t, usize, reshard_side_t, i64, *mut usize, *mut i32) -> Status>,
    /// [`reshard_plan_num_processes`].
    pub plan_num_processes: Option<unsafe extern "C" fn(*const reshard_plan_t, *mut usize) -> Status>,
    /// [`reshard_plan_process`].
    pub plan_process: Option<unsafe extern "C" fn(*const reshard_plan_t, usize, *mut i32) -> Status>,
    /// [`reshard_plan_has_part`].
    pub plan_has_part: Option<unsafe extern "C" fn(*const reshard_plan_t, i32, *mut i32) -> Status>,
    /// [`reshard_plan_part_info`].
    pub plan_part_info: Option<unsafe extern "C" fn(*const reshard_plan_t, i32, *mut reshard_part_info_t) -> Status>,
    /// [`reshard_plan_part_message`].
    pub plan_part_message: Option<
        unsafe extern "C" fn(*const reshard_plan_t, i32, reshard_direction_t, usize, *mut reshard_message_t) -> Status,
    >,
    /// [`reshard_plan_part_piece`].
    pub plan_part_piece: Option<
        unsafe extern "C" fn(
            *const reshard_plan_t,
            i32,
            reshard_piece_list_t,
            usize,
            *mut reshard_piece_t,
            *mut i64,
            *mut i64,
        ) -> Status,
    >,
    /// [`reshard_buffer_data`].
    pub buffer_data: Option<unsafe extern "C" fn(*const reshard_buffer_t) -> *const c_void>,
    /// [`reshard_buffer_size`].
    pub buffer_size: Option<unsafe extern "C" fn(*const reshard_buffer_t) -> usize>,
    /// [`reshard_buffer_destroy`].
    pub buffer_destroy: Option<unsafe extern "C" fn(*mut reshard_buffer_t)>,
    /// [`reshard_plan_serialize`].
    pub plan_serialize: Option<
        unsafe extern "C" fn(
            *const reshard_plan_t,
            *const reshard_serialize_options_t,
            *mut *mut reshard_buffer_t,
        ) -> Status,
    >,
    /// [`reshard_plan_deserialize`].
    pub plan_deserialize: Option<unsafe extern "C" fn(*const c_void, usize, *mut *mut reshard_plan_t) -> Status>,
    /// [`reshard_plan_verify_bytes`].
    pub plan_verify_bytes: Option<unsafe extern "C" fn(*const c_void, usize) -> Status>,
    /// [`reshard_executor_create`].
    pub executor_create:
        Option<unsafe extern "C" fn(*const reshard_executor_options_t, *mut *mut reshard_executor_t) -> Status>,
    /// [`reshard_executor_destroy`].
    pub executor_destroy: Option<unsafe extern "C" fn(*mut reshard_executor_t)>,
    /// [`reshard_executor_execute`].
    pub executor_execute: Option<
        unsafe extern "C" fn(
            *const reshard_executor_t,
            *const reshard_plan_t,
            *const reshard_tensor_buffers_t,
            usize,
        ) -> Status,
    >,
    /// [`reshard_oracle_fill_source`].
    pub oracle_fill_source:
        Option<unsafe extern "C" fn(*const reshard_plan_t, usize, usize, *mut c_void, usize) -> Status>,
    /// [`reshard_oracle_check_destination`].
    pub oracle_check_destination:
        Option<unsafe extern "C" fn(*const reshard_plan_t, usize, usize, *const c_void, usize, *mut i64) -> Status>,
    /// [`reshard_executor_verify`].
    pub executor_verify: Option<
        unsafe extern "C" fn(*const reshard_executor_t, *const reshard_plan_t, *mut reshard_verify_report_t) -> Status,
    >,
    // ABI 1.1: check `struct_size` (or `abi_minor >= 1`) before use.
    /// [`reshard_transport_available`] (ABI 1.1).
    pub transport_available: Option<unsafe extern "C" fn(reshard_transport_t, *mut i32, *mut c_char, usize) -> Status>,
    /// [`reshard_executor_info`] (ABI 1.1).
    pub executor_info: Option<unsafe extern "C" fn(*const reshard_executor_t, *mut reshard_executor_info_t) -> Status>,
    /// [`reshard_mpi_executor_create`] (ABI 1.1).
    pub mpi_executor_create:
        Option<unsafe extern "C" fn(*const reshard_mpi_executor_options_t, *mut *mut reshard_executor_t) -> Status>,
    /// [`reshard_nccl_unique_id`] (ABI 1.1).
    pub nccl_unique_id: Option<unsafe extern "C" fn(*const c_char, *mut reshard_nccl_unique_id_t) -> Status>,
    /// [`reshard_nccl_executor_create`] (ABI 1.1).
    pub nccl_executor_create:
        Option<unsafe extern "C" fn(*const reshard_nccl_executor_options_t, *mut *mut reshard_executor_t) -> Status>,
    /// [`reshard_plan_device_location`] (ABI 1.1).
    pub plan_device_location:
        Option<unsafe extern "C" fn(*const reshard_plan_t, i64, *mut i32, *mut i32, *mut i32) -> Status>,
    // ABI 1.2 to 1.5 appended struct fields (and an error code and an enum
    // value), no function.
    /// [`reshard_plan_part_scratch`] (ABI 1.6).
    pub plan_part_scratch: Option<
        unsafe extern "C" fn(*const reshard_plan_t, i32, usize, *mut reshard_scratch_t, *mut i64, *mut i64) -> Status,
    >,
    /// [`reshard_plan_deserialize_with_options`] (ABI 1.9).
    pub plan_deserialize_with_options: Option<
        unsafe extern "C" fn(
            *const c_void,
            usize,
            *const reshard_deserialize_options_t,
            *mut *mut reshard_plan_t,
        ) -> Status,
    >,
    /// [`reshard_plan_verify_bytes_with_options`] (ABI 1.9).
    pub plan_verify_bytes_with_options:
        Option<unsafe extern "C" fn(*const c_void, usize, *const reshard_deserialize_options_t) -> Status>,
    /// [`reshard_plan_input_num_flats`] (ABI 1.10).
    pub plan_input_num_flats: Option<unsafe extern "C" fn(*const reshard_plan_input_t, *mut usize) -> Status>,
    /// [`reshard_plan_input_flat_info`] (ABI 1.10).
    pub plan_input_flat_info: Option<
        unsafe extern "C" fn(
            *const reshard_plan_input_t,
            usize,
            *mut *const c_char,
            *mut i32,
            *mut usize,
            *mut usize,
            *mut i64,
        ) -> Status,
    >,
    /// [`reshard_plan_input_flat_device`] (ABI 1.10).
    pub plan_input_flat_device:
        Option<unsafe extern "C" fn(*const reshard_plan_input_t, usize, usize, *mut i64) -> Status>,
    /// [`reshard_plan_input_flat_tensor`] (ABI 1.10).
    pub plan_input_flat_tensor: Option<
        unsafe extern "C" fn(
            *const reshard_plan_input_t,
            usize,
            usize,
            *mut usize,
            *mut usize,
            usize,
            *mut u64,
            *mut i64,
        ) -> Status,
    >,
    /// [`reshard_plan_tensor_dst_dtype`] (ABI 1.11).
    pub plan_tensor_dst_dtype:
        Option<unsafe extern "C" fn(*const reshard_plan_t, usize, *mut reshard_dtype_t) -> Status>,
    /// [`reshard_plan_tensor_scales`] (ABI 1.12).
    pub plan_tensor_scales: Option<unsafe extern "C" fn(*const reshard_plan_t, usize, *mut i64, *mut i64) -> Status>,
}
