/*
 * reshard.h — the stable C ABI of reshard (docs/design.md §5).
 *
 * reshard plans and executes the movement of sharded tensors from one device
 * layout to another. This header is plain C11, self-contained, and the only
 * header a C program (or a Rust, Go or Python binding) needs.
 *
 * Typical use:
 *
 *   reshard_mesh_t* train;   reshard_mesh_create(2, axes, shape, NULL, &train);
 *   reshard_layout_t* src;   reshard_layout_create_named(train, ..., &src);
 *   reshard_plan_input_t* in; reshard_plan_input_create(&in);
 *   reshard_plan_input_add_tensor(in, "w", 2, shape, RESHARD_DTYPE_BF16, src, dst);
 *   reshard_plan_t* plan;    reshard_plan_create(in, NULL, &plan);
 *   reshard_executor_t* ex;  reshard_executor_create(NULL, &ex);
 *   reshard_executor_execute(ex, plan, buffers, 1);
 *
 * Executing across processes (ABI 1.1): the optional headers
 * reshard/reshard_mpi.h (MPI, host memory) and reshard/reshard_nccl.h (NCCL,
 * CUDA memory) create executors over a caller's communicator without
 * including mpi.h, nccl.h or cuda_runtime.h; libreshard.so.1 links none of
 * these libraries and loads its backends on first use.
 *
 * CONVENTIONS (they hold for every function below unless its comment says
 * otherwise):
 *
 * Errors. A function that can fail returns `reshard_error_t*`: NULL on
 *   success, otherwise an error object the caller owns and releases with
 *   reshard_error_destroy(). The error carries a code (reshard_error_code_t,
 *   the same values as the C++ reshard::ErrorCode) and a message that starts
 *   with the argument or field at fault, e.g. "out_plan: must not be NULL" or
 *   "mesh.axis_names[1]: empty axis name". There is no global or thread-local
 *   "last error": errors are values, so any thread may inspect or destroy an
 *   error object (callers whose threads migrate, like Go, are safe). No C++
 *   exception ever crosses this boundary; allocation failure is
 *   RESHARD_ERROR_OUT_OF_MEMORY.
 *
 * Outputs. Output parameters are named out_*, and are written only on
 *   success: on error they are left untouched.
 *
 * Ownership. A function named *_create, *_from_* or *_deserialize returns a
 *   new handle the caller owns and releases with the matching *_destroy.
 *   Destroy functions return nothing and accept NULL. Handles passed as
 *   inputs are borrowed for the duration of the call only (their contents are
 *   copied where kept), so they may be destroyed right after the call.
 *   Strings returned as `const char*` are owned by the handle they came from
 *   and stay valid until it is destroyed.
 *   Undefined behaviour (not detected, as with free()): destroying a handle
 *   twice, using a handle after destroying it, passing a pointer that no
 *   reshard function returned, destroying a handle while another thread
 *   uses it, passing an array shorter than the count given with it.
 *   Everything else a caller can pass (NULL, out-of-range counts and
 *   indices, bad enums, struct sizes) is an error value, never a crash.
 *
 * Options structs. Every options or result struct starts with
 *   `size_t struct_size`, and each has an _INIT macro that fills
 *   struct_size and the defaults:
 *       reshard_plan_options_t opts = RESHARD_PLAN_OPTIONS_INIT;
 *   The library reads (or writes) only min(struct_size, its own sizeof):
 *   a struct from an older header (smaller) gets defaults for the fields it
 *   lacks; a struct from a newer header (larger) has its unknown tail
 *   ignored. A struct_size of 0 or smaller than the first published version
 *   of that struct is RESHARD_ERROR_INVALID_ARGUMENT naming the struct.
 *   Where a pointer to an options struct may be NULL, NULL means defaults.
 *   Structs have no tail padding (fields named reserved* fill it), so a field
 *   appended later never lands in bytes an older caller left uninitialised.
 *
 * Enums are int32_t typedefs with explicit values; values are never reused.
 *
 * Thread safety. Mesh, layout, plan and executor handles are immutable after
 *   creation: any number of threads may use them concurrently. Builders
 *   (reshard_topology_t, reshard_plan_input_t) must not be modified by one
 *   thread while another uses them. Error and buffer objects are immutable.
 *
 * Indices. Layout entries are sorted by device id; a tensor's buffers are
 *   passed in that entry order. Boxes are half-open [lo, hi) per dimension;
 *   a function returning a box writes `rank` values to each of lo and hi
 *   (rank <= RESHARD_MAX_RANK, so arrays of RESHARD_MAX_RANK always fit).
 *
 * Dynamic loading. reshard_get_api() returns a static table of every
 * function, for frameworks that dlopen() libreshard.so.1 and resolve one
 * symbol. The table only ever grows at the end.
 */
#ifndef RESHARD_RESHARD_H_
#define RESHARD_RESHARD_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define RESHARD_API
#elif defined(__GNUC__)
#define RESHARD_API __attribute__((visibility("default")))
#else
#define RESHARD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Versions                                                                 */
/* ------------------------------------------------------------------------ */

/* Release version of this header (the library's is reshard_version()). */
#define RESHARD_VERSION_MAJOR 0
#define RESHARD_VERSION_MINOR 1
#define RESHARD_VERSION_PATCH 0
#define RESHARD_VERSION_NUMBER \
  (RESHARD_VERSION_MAJOR * 10000 + RESHARD_VERSION_MINOR * 100 + RESHARD_VERSION_PATCH)
#define RESHARD_VERSION_STRING "0.1.0"

/* ABI version: the major changes only on an incompatible change (and with it
 * the SONAME, libreshard.so.<major>); the minor counts append-only additions
 * to the function table and to structs. */
#define RESHARD_ABI_MAJOR 1
#define RESHARD_ABI_MINOR 14

/* The largest tensor rank (boxes have at most this many dimensions). */
#define RESHARD_MAX_RANK 8

/* The library's release version, e.g. "0.1.0". A static string; never NULL.
 * Thread-safe. */
RESHARD_API const char* reshard_version(void);

/* The library's release version as MAJOR * 10000 + MINOR * 100 + PATCH,
 * comparable with RESHARD_VERSION_NUMBER. Thread-safe. */
RESHARD_API uint32_t reshard_version_number(void);

/* ------------------------------------------------------------------------ */
/* Enumerations (values equal the C++ enums and the plan format)           */
/* ------------------------------------------------------------------------ */

typedef int32_t reshard_error_code_t;
enum {
  RESHARD_OK = 0,
  RESHARD_ERROR_INVALID_ARGUMENT = 1, /* a value is malformed */
  RESHARD_ERROR_OUT_OF_RANGE = 2,     /* an index or size is out of range */
  RESHARD_ERROR_OVERFLOW = 3,         /* an element or byte count overflows */
  RESHARD_ERROR_MISMATCH = 4,         /* two inputs disagree */
  RESHARD_ERROR_PARSE = 5,            /* spec text is not valid JSON / schema */
  RESHARD_ERROR_CORRUPT = 6,          /* plan bytes fail verification */
  RESHARD_ERROR_UNSUPPORTED = 7,      /* not available in this build */
  RESHARD_ERROR_TIMEOUT = 8,          /* a wait ran past its deadline */
  RESHARD_ERROR_TRANSPORT = 9,        /* MPI / NCCL / CUDA reported an error */
  RESHARD_ERROR_OUT_OF_MEMORY = 10,   /* allocation failed */
  RESHARD_ERROR_INTERNAL = 11,        /* a bug in reshard */
  /* Since 1.2: a request whose estimated cost is above a limit, refused
   * before the work starts; the message gives the estimate and the limit
   * (reshard_plan_request_t.max_plan_bytes). */
  RESHARD_ERROR_RESOURCE_EXHAUSTED = 12
};

typedef int32_t reshard_dtype_t;
enum {
  RESHARD_DTYPE_F64 = 1,
  RESHARD_DTYPE_F32 = 2,
  RESHARD_DTYPE_F16 = 3,
  RESHARD_DTYPE_BF16 = 4,
  RESHARD_DTYPE_F8E4M3 = 5, /* OCP e4m3fn */
  RESHARD_DTYPE_F8E5M2 = 6,
  RESHARD_DTYPE_I64 = 7,
  RESHARD_DTYPE_I32 = 8,
  RESHARD_DTYPE_I16 = 9,
  RESHARD_DTYPE_I8 = 10,
  RESHARD_DTYPE_U64 = 11,
  RESHARD_DTYPE_U32 = 12,
  RESHARD_DTYPE_U16 = 13,
  RESHARD_DTYPE_U8 = 14,
  RESHARD_DTYPE_BOOL = 15,
  /* Since 1.13: OCP MX E8M0, one byte 2^(bits - 127), 255 = NaN. Only the
   * dtype of a scale tensor with MXFP8 block scales (docs/spec.md "Block
   * scales"; reshard_plan_tensor_scales names it): no spec tensor has it,
   * and reshard_dtype_from_name does not accept its name. */
  RESHARD_DTYPE_E8M0 = 16
};

/* How the summands of a partial (unreduced) layout combine. */
typedef int32_t reshard_reduce_op_t;
enum {
  RESHARD_REDUCE_SUM = 1,
  RESHARD_REDUCE_MAX = 2,
  RESHARD_REDUCE_MIN = 3,
  /* Since 1.4: the sum divided by the number of summands (JAX pmean,
   * DTensor Partial("avg")); floating-point dtypes, source layouts only. */
  RESHARD_REDUCE_MEAN = 4
};

/* Which process parts reshard_plan_create computes. */
typedef int32_t reshard_plan_scope_t;
enum {
  RESHARD_PLAN_SCOPE_ALL = 0,    /* every process part (in-process execution) */
  RESHARD_PLAN_SCOPE_GLOBAL = 1, /* statistics and fingerprint only */
  RESHARD_PLAN_SCOPE_PROCESS = 2 /* the part of reshard_plan_request_t.process */
};

/* The source or destination layout of a tensor. */
typedef int32_t reshard_side_t;
enum { RESHARD_SIDE_SRC = 1, RESHARD_SIDE_DST = 2 };

/* The message lists of a process part. */
typedef int32_t reshard_direction_t;
enum { RESHARD_DIRECTION_SEND = 1, RESHARD_DIRECTION_RECV = 2 };

/* The piece lists of a process part: pieces copied within one device, and
 * the pieces carried by the sent / received messages (grouped per message:
 * message m carries pieces [first_piece, first_piece + num_pieces)). */
typedef int32_t reshard_piece_list_t;
enum { RESHARD_PIECES_LOCAL = 1, RESHARD_PIECES_SEND = 2, RESHARD_PIECES_RECV = 3 };

/* How an executor moves bytes. HOST and CUDA_LOCAL executors come from
 * reshard_executor_create; MPI and NCCL executors need a communicator and
 * come from reshard_mpi_executor_create (reshard/reshard_mpi.h) and
 * reshard_nccl_executor_create (reshard/reshard_nccl.h), ABI 1.1. Whether a
 * transport works on this machine: reshard_transport_available. */
typedef int32_t reshard_transport_t;
enum {
  RESHARD_TRANSPORT_HOST = 1,      /* in-process, host memory, one process owns all */
  RESHARD_TRANSPORT_MPI = 2,       /* host memory, one or more devices per MPI rank */
  RESHARD_TRANSPORT_NCCL = 3,      /* CUDA memory, NCCL between processes */
  RESHARD_TRANSPORT_CUDA_LOCAL = 4 /* CUDA memory, one process owns all (ABI 1.1) */
};

/* When the ranks of a distributed executor agree on the plan before
 * executing (C++ ExecuteOptions::Agreement), ABI 1.1: fingerprints, dtypes
 * and the digest of every part (a rank whose part differs from the
 * others' list of part digests is named in a MISMATCH error on every rank;
 * docs/design.md §3.5). */
typedef int32_t reshard_agreement_t;
enum {
  RESHARD_AGREEMENT_FIRST_USE = 0,  /* before a plan's first execution on an executor */
  RESHARD_AGREEMENT_EVERY_CALL = 1, /* before every execution */
  RESHARD_AGREEMENT_SKIP = 2        /* never: the caller guarantees agreement */
};

/* How a distributed executor builds a message that is not one contiguous
 * run of one buffer (C++ ExecuteOptions::Packing), ABI 1.1. */
typedef int32_t reshard_packing_t;
enum {
  RESHARD_PACKING_AUTO = 0,    /* gather where the transport can (MPI), else stage */
  RESHARD_PACKING_STAGING = 1, /* pack into staging memory with the box-copy core */
  RESHARD_PACKING_GATHER = 2   /* MPI derived datatypes, in place */
};

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

/* An error: a code and a message. Returned by fallible functions; owned by
 * the caller. */
typedef struct reshard_error reshard_error_t;

/* The code of `error`; RESHARD_OK for NULL. Thread-safe. */
RESHARD_API reshard_error_code_t reshard_error_code(const reshard_error_t* error);

/* The message of `error`, NUL-terminated, owned by the error (valid until
 * reshard_error_destroy). "" for NULL. Thread-safe. */
RESHARD_API const char* reshard_error_message(const reshard_error_t* error);

/* Releases an error. Accepts NULL. */
RESHARD_API void reshard_error_destroy(reshard_error_t* error);

/* A static lower-case name for a code ("invalid_argument", ...); "unknown"
 * for values this library does not know. Thread-safe. */
RESHARD_API const char* reshard_error_code_name(reshard_error_code_t code);

/* ------------------------------------------------------------------------ */
/* Element types                                                            */
/* ------------------------------------------------------------------------ */

/* Bytes per element of `dtype`; 0 for an unknown value. Thread-safe. */
RESHARD_API size_t reshard_dtype_size(reshard_dtype_t dtype);

/* A static lower-case name ("f32", "bf16", "f8e4m3", "bool", ...); NULL for
 * an unknown value. Thread-safe. */
RESHARD_API const char* reshard_dtype_name(reshard_dtype_t dtype);

/* Parses a dtype name as printed by reshard_dtype_name (also "float32",
 * "bfloat16", "int8", ...) into *out_dtype.
 * Errors: INVALID_ARGUMENT (name or out_dtype NULL, unknown name). */
RESHARD_API reshard_error_t* reshard_dtype_from_name(const char* name, reshard_dtype_t* out_dtype);

/* ------------------------------------------------------------------------ */
/* Meshes                                                                   */
/* ------------------------------------------------------------------------ */

/* An N-d array of distinct devices with named axes. Immutable. */
typedef struct reshard_mesh reshard_mesh_t;

/* Creates a mesh of `rank` axes. `axis_names[i]` (NUL-terminated, copied)
 * names axis i and `shape[i]` (>= 1) is its size; `devices` lists the
 * product(shape) distinct, non-negative device ids in row-major order, or is
 * NULL for 0, 1, ..., N-1. rank 0 is a one-device mesh (axis_names and shape
 * may then be NULL).
 * Errors: INVALID_ARGUMENT naming the field ("axis_names[1]: must not be
 * NULL", "mesh.axis_names[1]: duplicate axis name", "mesh.shape[0]: ...",
 * "mesh.devices[3]: ..."), OVERFLOW (too many devices). */
RESHARD_API reshard_error_t* reshard_mesh_create(size_t rank, const char* const* axis_names,
                                                 const int64_t* shape, const int64_t* devices,
                                                 reshard_mesh_t** out_mesh);

/* Releases a mesh. Layouts made from it stay valid. Accepts NULL. */
RESHARD_API void reshard_mesh_destroy(reshard_mesh_t* mesh);

/* Number of axes of `mesh` into *out_rank. Errors: INVALID_ARGUMENT (NULL). */
RESHARD_API reshard_error_t* reshard_mesh_rank(const reshard_mesh_t* mesh, size_t* out_rank);

/* Number of devices of `mesh` into *out_size. Errors: INVALID_ARGUMENT
 * (NULL). */
RESHARD_API reshard_error_t* reshard_mesh_size(const reshard_mesh_t* mesh, int64_t* out_size);

/* ------------------------------------------------------------------------ */
/* Layouts                                                                  */
/* ------------------------------------------------------------------------ */

/* Where each shard of a tensor lives: a list of entries (device, summand,
 * box) sorted by device. Immutable. */
typedef struct reshard_layout reshard_layout_t;

/* A list of mesh axis names (major to minor). `names` may be NULL when
 * `count` is 0. */
typedef struct reshard_axes {
  const char* const* names;
  size_t count;
} reshard_axes_t;

/* Lowers a named sharding (JAX NamedSharding(mesh, PartitionSpec), DTensor
 * placements) of a tensor of `shape` (`rank` values >= 0) on `mesh`:
 * `dims[d]` lists the mesh axes that split dim d (an empty list replicates
 * it; `dims` always has `rank` entries, so a PartitionSpec shorter than
 * the rank is passed padded with {NULL, 0}); axes used nowhere replicate.
 * `partial` (may be NULL: not partial) lists axes whose devices hold
 * unreduced summands, combined by `partial_op` (ignored when there are no
 * partial axes). Each axis appears at most once across dims and partial.
 * Uneven sizes are fine: chunk c = ceil(n/k), shard i covers
 * [i*c, min(n,(i+1)*c)) and may be empty. The mesh is copied.
 * Errors: INVALID_ARGUMENT ("dims: must not be NULL", "dims[1].names[0]:
 * must not be NULL", "layout.spec[1][0]: unknown mesh axis \"tq\"", ...
 * used twice, negative shape), OUT_OF_RANGE (rank > RESHARD_MAX_RANK),
 * OVERFLOW (element or byte count). */
RESHARD_API reshard_error_t* reshard_layout_create_named(
    const reshard_mesh_t* mesh, size_t rank, const int64_t* shape, const reshard_axes_t* dims,
    const reshard_axes_t* partial, reshard_reduce_op_t partial_op, reshard_layout_t** out_layout);

/* An explicit box layout of a tensor of `shape`: entry e puts box
 * [lo[e*rank + d], hi[e*rank + d]) (d < rank) of summand `summands[e]` on
 * device `devices[e]`. Entries may come in any order (they are sorted by
 * device); a device appears at most once; boxes lie inside the shape and may
 * overlap (replicas). `summands` may be NULL (all 0); summands lie in
 * [0, num_summands), num_summands >= 1; `op` combines summands (ignored when
 * num_summands is 1). lo/hi may be NULL when rank or num_entries is 0.
 * Errors: INVALID_ARGUMENT naming the entry ("layout.entries[2].box: ...",
 * "layout.entries[1].device: device 3 appears twice"), OUT_OF_RANGE,
 * OVERFLOW. */
RESHARD_API reshard_error_t* reshard_layout_create_boxes(size_t rank, const int64_t* shape,
                                                         size_t num_entries, const int64_t* devices,
                                                         const int32_t* summands, const int64_t* lo,
                                                         const int64_t* hi, int32_t num_summands,
                                                         reshard_reduce_op_t op,
                                                         reshard_layout_t** out_layout);

/* Releases a layout. Accepts NULL. */
RESHARD_API void reshard_layout_destroy(reshard_layout_t* layout);

/* The tensor rank of `layout` into *out_rank. */
RESHARD_API reshard_error_t* reshard_layout_rank(const reshard_layout_t* layout, size_t* out_rank);

/* The tensor shape: writes rank values to out_shape. */
RESHARD_API reshard_error_t* reshard_layout_shape(const reshard_layout_t* layout,
                                                  int64_t* out_shape);

/* Number of entries (device shards) into *out_count. */
RESHARD_API reshard_error_t* reshard_layout_num_entries(const reshard_layout_t* layout,
                                                        size_t* out_count);

/* Entry `entry` (< num_entries): its device, summand and box. Any of the
 * outputs may be NULL when not needed; out_lo / out_hi receive rank values.
 * Errors: INVALID_ARGUMENT (layout NULL), OUT_OF_RANGE (entry). */
RESHARD_API reshard_error_t* reshard_layout_entry(const reshard_layout_t* layout, size_t entry,
                                                  int64_t* out_device, int32_t* out_summand,
                                                  int64_t* out_lo, int64_t* out_hi);

/* ------------------------------------------------------------------------ */
/* Topology                                                                 */
/* ------------------------------------------------------------------------ */

/* Maps devices to process rank, host (node) id and local ordinal (CUDA
 * device index). Devices never added are on process 0, host 0, ordinal 0.
 * A builder: not thread-safe while being modified. */
typedef struct reshard_topology reshard_topology_t;

/* Creates an empty topology. Errors: INVALID_ARGUMENT (out NULL),
 * OUT_OF_MEMORY. */
RESHARD_API reshard_error_t* reshard_topology_create(reshard_topology_t** out_topology);

/* Releases a topology. Accepts NULL. */
RESHARD_API void reshard_topology_destroy(reshard_topology_t* topology);

/* Records that `device` lives in `process` on `host` with local `ordinal`.
 * Adding a device again with the same values is a no-op.
 * Errors: INVALID_ARGUMENT (negative device, process, host or ordinal;
 * conflicting values for a device already added, naming it). On error the
 * topology is unchanged. */
RESHARD_API reshard_error_t* reshard_topology_add_device(reshard_topology_t* topology,
                                                         int64_t device, int32_t process,
                                                         int32_t host, int32_t ordinal);

/* Number of devices added into *out_count. */
RESHARD_API reshard_error_t* reshard_topology_num_devices(const reshard_topology_t* topology,
                                                          size_t* out_count);

/* ------------------------------------------------------------------------ */
/* Plan inputs                                                              */
/* ------------------------------------------------------------------------ */

/* Planner options (C++ reshard::PlanOptions). */
typedef struct reshard_plan_options {
  size_t struct_size;
  /* A piece held by several remote replicas is split evenly across them
   * when it has at least this many bytes (>= 0). */
  int64_t split_min_bytes;
  /* α–β cost model: seconds per message (>= 0), bytes per second inside a
   * host and between hosts (> 0). */
  double alpha_seconds;
  double intra_host_bytes_per_second;
  double inter_host_bytes_per_second;
  /* Staging memory per device per round (default 1 GiB); 0: unbounded (one
   * round). The in-process host executor stages nothing. */
  int64_t staging_budget_bytes;
  /* Since 1.3 (a 1.0-sized struct leaves it at its default, 1). Relays for
   * replicated destinations: where several devices of one host need the
   * same box that no device of the host holds, one receives it over the
   * network (stage 0) and forwards it inside the host (stage 1). 0: every
   * device fetches what it lacks directly (single-hop). */
  int32_t relays;
  /* Since 1.3 (default 1). Partial sources: the devices of one destination
   * cell split its box into parts; each part is reduced by one of them from
   * every summand (stage 0) and forwarded reduced to the others (stage 1).
   * 0: every device receives every summand it lacks. */
  int32_t reduce_scatter;
  /* Since 1.7 (a smaller struct leaves it at its default, 0). NICs per host
   * for the α–β estimate (reshard_plan_stats_t::cost_seconds and its bound)
   * and the choices made by it: 0, one NIC per device; n > 0 (at most
   * 1048576), the host's n NICs form min(n, m) groups over its m devices of
   * the plan, each device moving its cross-host bytes over its group
   * (docs/design.md §2.8). Execution does not read it. */
  int32_t nics_per_host;
  /* Since 1.8 (a smaller struct leaves it at its default, 1). The
   * single-hop guard: groups of like tensors whose routes (relays,
   * reduce-scatter) make the whole plan slower by its α–β estimate go
   * single-hop, and a plan is never slower by it than the single-hop plan
   * (docs/planner.md). 0: every route the other choices take is kept. */
  int32_t single_hop_guard;
} reshard_plan_options_t;

#define RESHARD_PLAN_OPTIONS_INIT                                                                \
  {                                                                                              \
    sizeof(reshard_plan_options_t), INT64_C(1) << 20, 5e-6, 100e9, 25e9, INT64_C(1) << 30, 1, 1, \
        0, 1                                                                                     \
  }

/* Everything the planner needs: tensors with source and destination layouts,
 * a topology and options. A builder: not thread-safe while being modified;
 * reshard_plan_create only reads it. */
typedef struct reshard_plan_input reshard_plan_input_t;

/* Creates an empty input (no tensors, default topology and options).
 * Errors: INVALID_ARGUMENT (out NULL), OUT_OF_MEMORY. */
RESHARD_API reshard_error_t* reshard_plan_input_create(reshard_plan_input_t** out_input);

/* Parses a JSON spec (docs/spec.md: meshes, tensors with named shardings,
 * processes/hosts, optional options) of `length` bytes (need not be
 * NUL-terminated; every one of the `length` bytes is parsed, and a NUL
 * among them is a PARSE error with its position) into a new input.
 * Errors: INVALID_ARGUMENT (json NULL with length > 0; out NULL), PARSE
 * (malformed JSON, with line and column; a number past a double's range,
 * with its JSON path too), INVALID_ARGUMENT whose message
 * starts with the JSON path of the bad value ("tensors[2].src.spec[1]:
 * unknown mesh axis \"tq\""). */
RESHARD_API reshard_error_t* reshard_plan_input_from_spec(const char* json, size_t length,
                                                          reshard_plan_input_t** out_input);

/* Releases an input. Accepts NULL. */
RESHARD_API void reshard_plan_input_destroy(reshard_plan_input_t* input);

/* Appends a tensor named `name` (NUL-terminated, copied; unique within the
 * input) of `shape` (`rank` values) and `dtype`, moving from layout `src` to
 * layout `dst` (both copied; both must have this shape).
 * Errors: INVALID_ARGUMENT (NULL arguments, empty name, unknown dtype,
 * negative size), MISMATCH ("src: layout shape [4, 8] differs from shape
 * [4, 6]"), OUT_OF_RANGE, OVERFLOW. The input is unchanged on error.
 * Duplicate names and coverage are checked by reshard_plan_create. */
RESHARD_API reshard_error_t* reshard_plan_input_add_tensor(
    reshard_plan_input_t* input, const char* name, size_t rank, const int64_t* shape,
    reshard_dtype_t dtype, const reshard_layout_t* src, const reshard_layout_t* dst);

/* Replaces the topology of `input` by a copy of `topology`. */
RESHARD_API reshard_error_t* reshard_plan_input_set_topology(reshard_plan_input_t* input,
                                                             const reshard_topology_t* topology);

/* Replaces the planner options of `input` (values are checked by
 * reshard_plan_create, with messages naming "options.<field>").
 * Errors: INVALID_ARGUMENT (NULL, bad struct_size). */
RESHARD_API reshard_error_t* reshard_plan_input_set_options(reshard_plan_input_t* input,
                                                            const reshard_plan_options_t* options);

/* Number of tensors of `input` into *out_count. */
RESHARD_API reshard_error_t* reshard_plan_input_num_tensors(const reshard_plan_input_t* input,
                                                            size_t* out_count);

/* The fingerprint reshard_plan_create would give `input`, without planning:
 * equal on every process that describes the same inputs. */
RESHARD_API reshard_error_t* reshard_plan_input_fingerprint(const reshard_plan_input_t* input,
                                                            uint64_t* out_fingerprint);

/* Flat layouts (ABI 1.10; docs/spec.md, "Flat layouts"). An input parsed by
 * reshard_plan_input_from_spec keeps the flat layouts its tensors use, in
 * name order; other inputs have none. A flat layout holds, in one buffer
 * per rank, its tensors in buffer order; each such tensor's layout on the
 * flat side (source or destination) has one entry per box a rank holds, and
 * entry e's shard buffer is the `bytes` of that box (volume times the dtype
 * size) at byte `byte_offsets[e]` of rank `ranks[e]`'s flat buffer: pass
 * those views as the tensor's buffers (entry order as
 * reshard_plan_tensor_entry). A rank's second and later boxes of one tensor
 * are entries of slot devices (device + k * 2^40) on the rank's device's
 * process and host (docs/design.md §1.6). */

/* Number of flat layouts of `input` into *out_count.
 * Errors: INVALID_ARGUMENT (NULL arguments). */
RESHARD_API reshard_error_t* reshard_plan_input_num_flats(const reshard_plan_input_t* input,
                                                          size_t* out_count);

/* Flat layout `flat`: its name (NUL-terminated, valid while `input` lives
 * unchanged), whether it is its tensors' source (1) or destination (0), its
 * number of ranks and of tensors, and the bytes of every rank's buffer. Any
 * output pointer may be NULL. Errors: INVALID_ARGUMENT (input NULL),
 * OUT_OF_RANGE ("flat: ..."). */
RESHARD_API reshard_error_t* reshard_plan_input_flat_info(
    const reshard_plan_input_t* input, size_t flat, const char** out_name, int32_t* out_is_source,
    size_t* out_world_size, size_t* out_num_tensors, int64_t* out_shard_bytes);

/* The device of rank `rank` of flat layout `flat` into *out_device.
 * Errors: INVALID_ARGUMENT (NULL), OUT_OF_RANGE ("flat", "rank"). */
RESHARD_API reshard_error_t* reshard_plan_input_flat_device(const reshard_plan_input_t* input,
                                                            size_t flat, size_t rank,
                                                            int64_t* out_device);

/* The `index`-th tensor (buffer order) of flat layout `flat`: its index in
 * the input into *out_tensor, the number of entries of its flat-side layout
 * into *out_num_entries, and, per entry, the rank whose buffer holds it
 * (`out_ranks`) and the byte offset there (`out_byte_offsets`): `capacity`
 * values each; with capacity 0 both may be NULL and only the counts are
 * written. Errors: INVALID_ARGUMENT (NULL input or outputs; "capacity: ..."
 * below the number of entries when not 0), OUT_OF_RANGE ("flat", "index").
 * Outputs are untouched on error. */
RESHARD_API reshard_error_t* reshard_plan_input_flat_tensor(
    const reshard_plan_input_t* input, size_t flat, size_t index, size_t* out_tensor,
    size_t* out_num_entries, size_t capacity, uint64_t* out_ranks, int64_t* out_byte_offsets);

/* ------------------------------------------------------------------------ */
/* Planning                                                                 */
/* ------------------------------------------------------------------------ */

/* A plan: tensors, topology, options, statistics, fingerprint and the
 * process parts it holds. Immutable; thread-safe. */
typedef struct reshard_plan reshard_plan_t;

/* What to plan (C++ reshard::PlanRequest). */
typedef struct reshard_plan_request {
  size_t struct_size;
  reshard_plan_scope_t scope; /* default RESHARD_PLAN_SCOPE_ALL */
  int32_t process;            /* the process for RESHARD_PLAN_SCOPE_PROCESS */
  /* Non-zero: compute global statistics (a worker planning only its part
   * may set 0 to skip them). Default 1. */
  int32_t global_stats;
  int32_t reserved0; /* set to 0; keeps the struct free of tail padding */
  /* Since 1.1. Threads planning the requested parts: 0 or 1 (the default,
   * also for 1.0-sized structs and zero-initialised ones) plan on the
   * calling thread only; N > 1 uses up to min(N, 256) threads (the
   * caller's and the rest started for the call); RESHARD_PLAN_THREADS_ALL
   * one per hardware
   * thread. Not part of the plan's identity: the plan, its bytes and its
   * fingerprint are the same for every value. Below -1: INVALID_ARGUMENT. */
  int32_t threads;
  int32_t reserved1; /* set to 0 */
  /* Since 1.2. Memory limit for the process parts: before building any
   * part, the planner estimates from the global statistics the peak memory
   * the requested parts need and, above the limit, fails with
   * RESHARD_ERROR_RESOURCE_EXHAUSTED, a message naming
   * request->max_plan_bytes and giving the estimate (memory, pieces,
   * messages, regions, serialized size), the limit, and for
   * RESHARD_PLAN_SCOPE_ALL the way out: RESHARD_PLAN_SCOPE_PROCESS, one
   * process's part at a time. 0 (the default, also for 1.1-sized and
   * zero-initialised structs): half the memory available (physical memory,
   * or the cgroup's limit when lower); N > 0: N bytes;
   * RESHARD_PLAN_BYTES_UNLIMITED: no limit. Below -1: INVALID_ARGUMENT.
   * RESHARD_PLAN_SCOPE_GLOBAL builds no parts; it is refused (also
   * RESOURCE_EXHAUSTED) only when the statistics' bookkeeping of device
   * pairs that exchange data would need more than the limit and 64 MiB
   * (every device receiving from every other: 65,536 devices
   * all-gathering), up front when the layouts show it. The
   * estimate errs on the high side (measured 1.2 to 2.3 times the peak
   * resident memory of whole plans). Not part of the plan's identity. */
  int64_t max_plan_bytes;
} reshard_plan_request_t;

/* reshard_plan_request_t.threads: one thread per hardware thread. */
#define RESHARD_PLAN_THREADS_ALL (-1)

/* reshard_plan_request_t.max_plan_bytes: no limit (and no estimate). */
#define RESHARD_PLAN_BYTES_UNLIMITED (-1)

#define RESHARD_PLAN_REQUEST_INIT \
  { sizeof(reshard_plan_request_t), RESHARD_PLAN_SCOPE_ALL, 0, 1, 0, 0, 0, 0 }

/* Plans `input` (NULL `request`: every part, with statistics). Deterministic:
 * equal inputs give equal plans (and equal serialized bytes).
 * Errors: INVALID_ARGUMENT naming the field ("tensors[1].name: duplicate
 * name", "options.alpha_seconds: must be non-negative", "request.scope:
 * invalid value", "request->threads: -2 ...", "request->max_plan_bytes: -2 ..."),
 * MISMATCH (dtype/shape/op disagreement), OUT_OF_RANGE ("request.process:
 * ..."), OVERFLOW, OUT_OF_MEMORY, RESOURCE_EXHAUSTED (1.2: the parts'
 * estimated memory is above request->max_plan_bytes). */
RESHARD_API reshard_error_t* reshard_plan_create(const reshard_plan_input_t* input,
                                                 const reshard_plan_request_t* request,
                                                 reshard_plan_t** out_plan);

/* Releases a plan. Accepts NULL. An execution using the plan on another
 * thread (reshard_executor_execute, reshard_executor_verify) is waited for
 * first; afterwards those calls refuse the handle (INVALID_ARGUMENT "plan:
 * not a live plan ..."), and destroying it again does nothing. Other calls
 * must not race with its destruction. */
RESHARD_API void reshard_plan_destroy(reshard_plan_t* plan);

/* The plan's fingerprint (hash of its canonical inputs and options). */
RESHARD_API reshard_error_t* reshard_plan_fingerprint(const reshard_plan_t* plan,
                                                      uint64_t* out_fingerprint);

/* Which lower bound limits a plan's cost estimate (C++ reshard::BoundKind).
 * Since 1.2. */
typedef int32_t reshard_bound_kind_t;
enum {
  RESHARD_BOUND_NONE = 0,
  RESHARD_BOUND_DEVICE_RECV = 1, /* a device's bytes to receive */
  RESHARD_BOUND_DEVICE_SEND = 2, /* a device's bytes only it holds */
  RESHARD_BOUND_HOST_RECV = 3,   /* a host's bytes to take in over its NICs */
  RESHARD_BOUND_HOST_SEND = 4    /* a host's bytes only it holds, or the bytes the hosts
                                    holding copies must send out together (the
                                    first of them named) */
};

/* Global statistics of a plan (C++ reshard::PlanStats). Lower bounds hold
 * over all plans, relays and reduction trees included (docs/design.md
 * §2.2); a plan's optimality gap is figure / lower bound. */
typedef struct reshard_plan_stats {
  size_t struct_size;
  int64_t network_bytes; /* bytes that leave their device */
  int64_t local_bytes;   /* bytes copied within a device */
  int64_t cross_host_bytes;
  int64_t cross_process_bytes;
  int64_t max_send_bytes;
  int64_t max_recv_bytes;
  int64_t messages;
  int64_t pieces; /* network + local pieces */
  int64_t rounds;
  int64_t peak_staging_bytes;
  int64_t lower_bound_network_bytes;
  int64_t lower_bound_max_send_bytes;
  int64_t lower_bound_max_recv_bytes;
  double cost_seconds; /* α–β estimate for the busiest device */
  double lower_bound_cost_seconds;
  double plan_seconds;  /* wall time of planning (not part of the fingerprint) */
  uint64_t num_devices; /* entries for reshard_plan_device_traffic */
  /* Since 1.2 (a 1.1-sized struct gets the fields above only). */
  int64_t stages; /* steps of the plan; 1 for a single-hop plan with work */
  /* Bytes the busiest host sends to / receives from other hosts. */
  int64_t max_host_send_bytes;
  int64_t max_host_recv_bytes;
  /* Host-level lower bounds (over all plans, relays and trees included):
   * cross-host total, the busiest host's egress and ingress. */
  int64_t lower_bound_cross_host_bytes;
  int64_t lower_bound_max_host_send_bytes;
  int64_t lower_bound_max_host_recv_bytes;
  /* The bound that gives lower_bound_cost_seconds, and the device (device
   * kinds) or host (host kinds) it concerns; -1 with RESHARD_BOUND_NONE. */
  reshard_bound_kind_t lower_bound_binding;
  int32_t reserved0; /* 0 */
  int64_t lower_bound_binding_id;
  /* Since 1.3: bytes of stages after the first (what relays forward from a
   * destination buffer; part of network_bytes). */
  int64_t forwarded_bytes;
  /* Since 1.5: the most scratch bytes allocated on one device (buffers the
   * executors allocate for one execution where a reduction tree combines
   * summands on their holders' host before they cross; 0 without). */
  int64_t max_scratch_bytes;
} reshard_plan_stats_t;

#define RESHARD_PLAN_STATS_INIT                                                                  \
  {                                                                                              \
    sizeof(reshard_plan_stats_t), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0, 0, \
        0, 0, 0, 0, RESHARD_BOUND_NONE, 0, -1, 0, 0                                              \
  }

/* Fills *out_stats (set out_stats->struct_size first, e.g. with
 * RESHARD_PLAN_STATS_INIT); writes only min(struct_size, sizeof) bytes and
 * keeps struct_size.
 * Errors: INVALID_ARGUMENT (NULL, bad struct_size), UNSUPPORTED ("plan: has
 * no statistics": planned with RESHARD_PLAN_SCOPE_PROCESS and
 * global_stats = 0). */
RESHARD_API reshard_error_t* reshard_plan_stats(const reshard_plan_t* plan,
                                                reshard_plan_stats_t* out_stats);

/* Traffic of one device (C++ reshard::DeviceTraffic). */
typedef struct reshard_device_traffic {
  size_t struct_size;
  int64_t device;
  int64_t send_bytes;
  int64_t recv_bytes;
  int64_t local_bytes;
  int64_t send_messages;
  int64_t recv_messages;
} reshard_device_traffic_t;

#define RESHARD_DEVICE_TRAFFIC_INIT \
  { sizeof(reshard_device_traffic_t), 0, 0, 0, 0, 0, 0 }

/* Traffic of the index-th device (sorted by device id; index <
 * reshard_plan_stats_t.num_devices), written like reshard_plan_stats.
 * Errors: INVALID_ARGUMENT, UNSUPPORTED (no statistics), OUT_OF_RANGE. */
RESHARD_API reshard_error_t* reshard_plan_device_traffic(const reshard_plan_t* plan, size_t index,
                                                         reshard_device_traffic_t* out_traffic);

/* ------------------------------------------------------------------------ */
/* Inspecting a plan: tensors and their layouts                             */
/* ------------------------------------------------------------------------ */

/* Number of tensors of `plan`. */
RESHARD_API reshard_error_t* reshard_plan_num_tensors(const reshard_plan_t* plan,
                                                      size_t* out_count);

/* Name of tensor `tensor` (NUL-terminated, owned by the plan).
 * Errors: INVALID_ARGUMENT (NULL), OUT_OF_RANGE ("tensor: 5 >= 3 tensors"). */
RESHARD_API reshard_error_t* reshard_plan_tensor_name(const reshard_plan_t* plan, size_t tensor,
                                                      const char** out_name);

/* Element type of tensor `tensor`: its source buffers' (and its destination
 * buffers' unless the plan casts it, reshard_plan_tensor_dst_dtype). */
RESHARD_API reshard_error_t* reshard_plan_tensor_dtype(const reshard_plan_t* plan, size_t tensor,
                                                       reshard_dtype_t* out_dtype);

/* Element type of the destination buffers of tensor `tensor` (ABI 1.11):
 * its dtype, unless the spec gave the destination another ("dtype" of the
 * destination layout, docs/spec.md "Casts"), which the plan casts to in
 * flight. A destination entry's buffer holds its box's volume times this
 * dtype's size in bytes.
 * Errors: INVALID_ARGUMENT (NULL), OUT_OF_RANGE ("tensor: 5 >= 3 tensors"). */
RESHARD_API reshard_error_t* reshard_plan_tensor_dst_dtype(const reshard_plan_t* plan,
                                                           size_t tensor,
                                                           reshard_dtype_t* out_dtype);

/* Block scales of tensor `tensor` (ABI 1.12; docs/spec.md "Block scales"):
 * *out_scale_tensor is the index of the tensor that holds its scales, -1
 * when it has none. With scales, out_block receives the block's extent per
 * dim (as many values as the tensor's rank, reshard_plan_tensor_rank); it
 * is not written (and may be NULL) without. The scale tensor is a tensor
 * of the plan like the others (f32, shape ceil(shape / block), named by the
 * spec's "scales"."name"): a caller gives destination buffers for it and no
 * source buffers (executors compute the scales from the values, on the
 * sending side); its value tensor's destination holds q with
 * x ~ q * scale of its block.
 * Errors: INVALID_ARGUMENT (NULL plan, out_scale_tensor, or out_block for a
 * tensor with scales: "out_block"), OUT_OF_RANGE ("tensor: 5 >= 3
 * tensors"); outputs untouched on error. */
RESHARD_API reshard_error_t* reshard_plan_tensor_scales(const reshard_plan_t* plan, size_t tensor,
                                                        int64_t* out_scale_tensor,
                                                        int64_t* out_block);

/* Rank of tensor `tensor`. */
RESHARD_API reshard_error_t* reshard_plan_tensor_rank(const reshard_plan_t* plan, size_t tensor,
                                                      size_t* out_rank);

/* Shape of tensor `tensor`: writes rank values to out_shape. */
RESHARD_API reshard_error_t* reshard_plan_tensor_shape(const reshard_plan_t* plan, size_t tensor,
                                                       int64_t* out_shape);

/* Number of entries (device shards) of the source or destination layout of
 * tensor `tensor`. */
RESHARD_API reshard_error_t* reshard_plan_tensor_num_entries(const reshard_plan_t* plan,
                                                             size_t tensor, reshard_side_t side,
                                                             size_t* out_count);

/* Entry `entry` of a side of tensor `tensor`: its device, summand and box
 * (rank values each in out_lo / out_hi). The shard buffer of that entry is
 * dense, row-major, of exactly this box's shape. Any output may be NULL.
 * Errors: INVALID_ARGUMENT (plan NULL, side), OUT_OF_RANGE (tensor, entry). */
RESHARD_API reshard_error_t* reshard_plan_tensor_entry(const reshard_plan_t* plan, size_t tensor,
                                                       reshard_side_t side, size_t entry,
                                                       int64_t* out_device, int32_t* out_summand,
                                                       int64_t* out_lo, int64_t* out_hi);

/* Number of summands (1 unless partial) and reduce op of a side of tensor
 * `tensor`. Either output may be NULL. */
RESHARD_API reshard_error_t* reshard_plan_tensor_partial(const reshard_plan_t* plan, size_t tensor,
                                                         reshard_side_t side,
                                                         int32_t* out_num_summands,
                                                         reshard_reduce_op_t* out_op);

/* The entry that `device` holds on a side of tensor `tensor`: *out_found is
 * 1 and *out_entry its index, or *out_found is 0 (and *out_entry untouched)
 * when the device holds no shard. out_entry may be NULL. */
RESHARD_API reshard_error_t* reshard_plan_entry_of_device(const reshard_plan_t* plan, size_t tensor,
                                                          reshard_side_t side, int64_t device,
                                                          size_t* out_entry, int32_t* out_found);

/* ------------------------------------------------------------------------ */
/* Inspecting a plan: processes and their parts                             */
/* ------------------------------------------------------------------------ */

/* Number of processes owning at least one device of the plan. */
RESHARD_API reshard_error_t* reshard_plan_num_processes(const reshard_plan_t* plan,
                                                        size_t* out_count);

/* The index-th of those processes (sorted). */
RESHARD_API reshard_error_t* reshard_plan_process(const reshard_plan_t* plan, size_t index,
                                                  int32_t* out_process);

/* *out_has is 1 when the plan holds the part of `process`, else 0. */
RESHARD_API reshard_error_t* reshard_plan_has_part(const reshard_plan_t* plan, int32_t process,
                                                   int32_t* out_has);

/* Sizes of the part of one process. */
typedef struct reshard_part_info {
  size_t struct_size;
  uint64_t num_local_pieces; /* pieces copied within a device of the process */
  uint64_t num_sends;        /* messages the process sends */
  uint64_t num_send_pieces;
  uint64_t num_recvs; /* messages the process receives */
  uint64_t num_recv_pieces;
  /* Since 1.6: scratch buffers the process allocates for one execution
   * (reshard_plan_part_scratch). */
  uint64_t num_scratch;
} reshard_part_info_t;

#define RESHARD_PART_INFO_INIT \
  { sizeof(reshard_part_info_t), 0, 0, 0, 0, 0, 0 }

/* Describes the part of `process`, written like reshard_plan_stats.
 * Errors: INVALID_ARGUMENT, OUT_OF_RANGE ("process: this plan holds no part
 * for process 3"). */
RESHARD_API reshard_error_t* reshard_plan_part_info(const reshard_plan_t* plan, int32_t process,
                                                    reshard_part_info_t* out_info);

/* One message: all pieces from one device to another in one round of one
 * stage, packed back to back in piece order. */
typedef struct reshard_message {
  size_t struct_size;
  int64_t src_device;
  int64_t dst_device;
  uint64_t round;       /* within its stage */
  uint64_t first_piece; /* index into the SEND / RECV piece list */
  uint64_t num_pieces;
  int64_t bytes; /* packed size */
  /* Since 1.3: the stage; stages run in order. The pieces of a message of
   * stage > 0 forward what an earlier stage wrote into a destination
   * buffer (a relay). */
  uint64_t stage;
  /* Since 1.14 (a smaller struct is written without it): the sub-message.
   * Messages of one stage, round, source and destination are subs 0, 1,
   * ... (in that order in the list), each with its own pieces; they flow
   * side by side, and a forward of a later stage waits only for the subs
   * that brought its pieces. 0 where a message is not cut. */
  uint64_t sub;
} reshard_message_t;

#define RESHARD_MESSAGE_INIT \
  { sizeof(reshard_message_t), 0, 0, 0, 0, 0, 0, 0, 0 }

/* Message `index` of the sends or receives of `process`'s part (sends are
 * ordered by stage, round, then destination, then source; receives by
 * stage, round, source, destination; then sub). Written like
 * reshard_plan_stats.
 * Errors: INVALID_ARGUMENT (NULL, direction), OUT_OF_RANGE (process,
 * index). */
RESHARD_API reshard_error_t* reshard_plan_part_message(const reshard_plan_t* plan, int32_t process,
                                                       reshard_direction_t direction, size_t index,
                                                       reshard_message_t* out_message);

/* One piece: a box of one tensor moving from a source entry to a
 * destination entry. */
typedef struct reshard_piece {
  size_t struct_size;
  uint64_t tensor;
  /* Entry of the tensor's source layout; in a stage > 0 (see `stage`), of
   * its destination layout: the relay's buffer the piece is forwarded from,
   * except for a piece whose dst_entry is RESHARD_SCRATCH_ENTRY, which reads
   * a source entry (a summand) in every stage. Either may be
   * RESHARD_SCRATCH_ENTRY (below): a scratch buffer. */
  uint64_t src_entry;
  uint64_t dst_entry; /* entry of the tensor's destination layout */
  int64_t src_device;
  int64_t dst_device;
  int64_t bytes;
  /* Since 1.3: the stage of the piece's message (0 for LOCAL pieces). */
  uint64_t stage;
} reshard_piece_t;

#define RESHARD_PIECE_INIT \
  { sizeof(reshard_piece_t), 0, 0, 0, 0, 0, 0, 0 }

/* Since 1.6: a piece's src_entry or dst_entry equal to RESHARD_SCRATCH_ENTRY
 * names a scratch buffer instead of a layout entry: the scratch of the
 * piece's tensor on the piece's src_device (reading) or dst_device (writing)
 * whose box contains the piece's region (reshard_plan_part_scratch). Plans
 * with partial sources and relays may have them (pre-reductions on the
 * holders' hosts). */
#define RESHARD_SCRATCH_ENTRY 4294967294u

/* Since 1.6: a buffer a process allocates for one execution on one of its
 * devices, holding a box of one tensor: it starts at the identity of the
 * tensor's reduce op (0 for sum and mean, the lowest value for max, the
 * highest for min), every piece written into it combines with what it
 * holds, and pieces of later stages read it once complete. */
typedef struct reshard_scratch {
  size_t struct_size;
  uint64_t tensor;
  int64_t device;
  int64_t bytes; /* the box's elements times the tensor's dtype size */
} reshard_scratch_t;

#define RESHARD_SCRATCH_INIT \
  { sizeof(reshard_scratch_t), 0, 0, 0 }

/* Since 1.6: scratch `index` (< reshard_part_info_t::num_scratch) of
 * `process`'s part, sorted by tensor, device, then box, written like
 * reshard_plan_stats, and its box (global tensor coordinates, rank values
 * each in out_lo / out_hi; either may be NULL). A device's scratch boxes of
 * one tensor are disjoint.
 * Errors: INVALID_ARGUMENT (NULL), OUT_OF_RANGE (process, index). */
RESHARD_API reshard_error_t* reshard_plan_part_scratch(const reshard_plan_t* plan, int32_t process,
                                                       size_t index, reshard_scratch_t* out_scratch,
                                                       int64_t* out_lo, int64_t* out_hi);

/* Piece `index` of a piece list of `process`'s part, written like
 * reshard_plan_stats, and the region it moves (global tensor coordinates,
 * rank values each in out_lo / out_hi; either may be NULL).
 * Errors: INVALID_ARGUMENT (NULL, list), OUT_OF_RANGE (process, index). */
RESHARD_API reshard_error_t* reshard_plan_part_piece(const reshard_plan_t* plan, int32_t process,
                                                     reshard_piece_list_t list, size_t index,
                                                     reshard_piece_t* out_piece, int64_t* out_lo,
                                                     int64_t* out_hi);

/* ------------------------------------------------------------------------ */
/* Serialization (FlatBuffers, schema/plan.fbs)                             */
/* ------------------------------------------------------------------------ */

/* Bytes owned by the library. Immutable. */
typedef struct reshard_buffer reshard_buffer_t;

/* The bytes of `buffer` (valid until reshard_buffer_destroy); NULL for NULL.
 * Thread-safe. */
RESHARD_API const void* reshard_buffer_data(const reshard_buffer_t* buffer);

/* Number of bytes of `buffer`; 0 for NULL. Thread-safe. */
RESHARD_API size_t reshard_buffer_size(const reshard_buffer_t* buffer);

/* Releases a buffer. Accepts NULL. */
RESHARD_API void reshard_buffer_destroy(reshard_buffer_t* buffer);

/* Authenticated plans (ABI 1.9): plan bytes may carry an HMAC-SHA-256 of
 * themselves under a key the caller supplies, in a 48-byte trailer after
 * the FlatBuffers bytes ("RSHPMAC1", the plan bytes' length as a 64-bit
 * little-endian integer, the 32-byte tag over everything before it;
 * docs/wire.md). Readers that know no MAC ignore the trailer. Keys are
 * raw bytes, RESHARD_MAC_KEY_MIN_BYTES to RESHARD_MAC_KEY_MAX_BYTES long
 * (random bytes: a passphrase is not a key). */
#define RESHARD_MAC_KEY_MIN_BYTES 16
#define RESHARD_MAC_KEY_MAX_BYTES 1024

/* What reshard_plan_serialize includes. */
typedef struct reshard_serialize_options {
  size_t struct_size;
  /* Non-zero (default): every part the plan holds. 0: only the part of
   * `process` (a worker's bytes). */
  int32_t all_parts;
  int32_t process;
  /* ABI 1.9: sign the bytes with the `key_size` bytes at `key` (copied;
   * not referenced after the call). NULL with key_size 0 (default):
   * unsigned. */
  const void* key;
  size_t key_size;
} reshard_serialize_options_t;

#define RESHARD_SERIALIZE_OPTIONS_INIT \
  { sizeof(reshard_serialize_options_t), 1, 0, NULL, 0 }

/* Serializes `plan` (NULL options: all parts) into a new buffer.
 * Deterministic: the same plan and options give the same bytes.
 * Errors: INVALID_ARGUMENT (NULL, bad struct_size; options->key NULL with
 * key_size > 0, options->key_size 0 with a key, or outside
 * [RESHARD_MAC_KEY_MIN_BYTES, RESHARD_MAC_KEY_MAX_BYTES]), OUT_OF_RANGE
 * (the plan holds no part for options->process), OUT_OF_MEMORY. */
RESHARD_API reshard_error_t* reshard_plan_serialize(const reshard_plan_t* plan,
                                                    const reshard_serialize_options_t* options,
                                                    reshard_buffer_t** out_buffer);

/* Verifies `size` bytes at `data` (FlatBuffers verifier, then semantic
 * checks: indices in range, boxes inside shapes, sizes and statistics
 * consistent, fingerprint matching the inputs, and what each process part
 * does: every destination element written exactly once per summand it
 * takes, no piece sent twice, nothing read before an earlier stage wrote
 * it, and parts held together agreeing on every message between them) and
 * decodes them into a new plan. Untrusted bytes are safe: any defect is an
 * error, never a crash. (A buffer holding only some parts checks the
 * summands that reach a reduction through another part's scratch for
 * duplicates, not completeness.)
 * The bytes are not referenced after the call.
 * Errors: INVALID_ARGUMENT (data NULL with size > 0, out NULL), CORRUPT
 * naming what failed (truncated, wrong identifier, unknown version, bad
 * index, ...). */
RESHARD_API reshard_error_t* reshard_plan_deserialize(const void* data, size_t size,
                                                      reshard_plan_t** out_plan);

/* Verifies plan bytes exactly as reshard_plan_deserialize does, without
 * keeping the plan (readers in other languages call this before reading the
 * bytes with their own generated code). NULL when the bytes are valid. */
RESHARD_API reshard_error_t* reshard_plan_verify_bytes(const void* data, size_t size);

/* How reshard_plan_deserialize_with_options reads bytes (ABI 1.9). */
typedef struct reshard_deserialize_options {
  size_t struct_size;
  /* Require a MAC made with the `key_size` bytes at `key` (not referenced
   * after the call). NULL with key_size 0 (default): none is required, and
   * a MAC the bytes carry is not checked. */
  const void* key;
  size_t key_size;
} reshard_deserialize_options_t;

#define RESHARD_DESERIALIZE_OPTIONS_INIT \
  { sizeof(reshard_deserialize_options_t), NULL, 0 }

/* reshard_plan_deserialize (NULL options: the same), after checking the
 * bytes' MAC when options->key is set, in constant time, before anything
 * is decoded (ABI 1.9).
 * Errors: those of reshard_plan_deserialize; INVALID_ARGUMENT naming
 * options->key (NULL with key_size > 0) or options->key_size (0 with a key:
 * "empty"; below RESHARD_MAC_KEY_MIN_BYTES; above
 * RESHARD_MAC_KEY_MAX_BYTES); CORRUPT naming `mac`: "missing" (the bytes
 * carry no MAC) or "does not match" (another key, or bytes edited after
 * they were signed). */
RESHARD_API reshard_error_t* reshard_plan_deserialize_with_options(
    const void* data, size_t size, const reshard_deserialize_options_t* options,
    reshard_plan_t** out_plan);

/* reshard_plan_verify_bytes with the MAC check of
 * reshard_plan_deserialize_with_options (ABI 1.9). */
RESHARD_API reshard_error_t* reshard_plan_verify_bytes_with_options(
    const void* data, size_t size, const reshard_deserialize_options_t* options);

/* ------------------------------------------------------------------------ */
/* Execution                                                                */
/* ------------------------------------------------------------------------ */

/* Executes plans: one execution engine over a transport, whatever the
 * kind (HOST: the `local` transport, every part of a plan in this
 * process). A host executor is immutable: it may run several plans
 * concurrently from several threads when their destination buffers are
 * distinct. An executor over another transport (MPI, NCCL, CUDA_LOCAL) owns
 * a communicator or GPU streams; its executions are serialized (a second
 * thread's call waits for the first), and a distributed executor's calls are
 * collective, so every rank must make them in the same order: use it from
 * one thread. */
typedef struct reshard_executor reshard_executor_t;

typedef struct reshard_executor_options {
  size_t struct_size;
  reshard_transport_t transport; /* default RESHARD_TRANSPORT_HOST */
  int32_t threads;               /* worker threads; 0: one per hardware thread */
  /* Since 1.9 (a smaller struct leaves it at its default, 300). Seconds,
   * > 0 and finite. HOST: the deadline of each execution as a whole: a
   * plan (untrusted bytes, say) whose copies run past it ends with
   * RESHARD_ERROR_TIMEOUT ("execute: ran past its deadline
   * (timeout_seconds 300 s) in ..."), the destinations holding unspecified
   * data; the executor stays usable. CUDA_LOCAL: the longest wait for the
   * GPUs, as timeout_seconds of the distributed executors. */
  double timeout_seconds;
} reshard_executor_options_t;

#define RESHARD_EXECUTOR_OPTIONS_INIT \
  { sizeof(reshard_executor_options_t), RESHARD_TRANSPORT_HOST, 0, 300.0 }

/* Creates an executor (NULL options: host transport, default threads).
 * RESHARD_TRANSPORT_HOST: host memory, every plan device in this process.
 *   Keeps what it derives from the last 8 plans it executed (their
 *   schedules, each with a copy of its plan; per concurrent call) until it
 *   is destroyed, so that executing a plan again only copies.
 * RESHARD_TRANSPORT_CUDA_LOCAL (ABI 1.1): CUDA memory, every plan device in
 *   this process (all on plan process 0), on the GPU of its topology
 *   ordinal, ordered on streams of the executor; execute returns once the
 *   destinations hold their data. `threads` is ignored. The CUDA backend
 *   (libreshard_cuda.so.1) is loaded on first use.
 * RESHARD_TRANSPORT_MPI and RESHARD_TRANSPORT_NCCL need a communicator:
 *   create them with reshard_mpi_executor_create / reshard_nccl_executor_create
 *   (reshard/reshard_mpi.h, reshard/reshard_nccl.h); here they are
 *   UNSUPPORTED, with a message saying so.
 * Errors: INVALID_ARGUMENT (bad struct_size, negative threads, unknown
 * transport, timeout_seconds not positive and finite), UNSUPPORTED (MPI or
 * NCCL; CUDA_LOCAL without the CUDA backend, driver or a GPU: the message
 * says what is missing), TRANSPORT (CUDA). */
RESHARD_API reshard_error_t* reshard_executor_create(const reshard_executor_options_t* options,
                                                     reshard_executor_t** out_executor);

/* Releases an executor. Accepts NULL. Executions on it running on other
 * threads are waited for first (so that their engine is not freed under
 * them); afterwards reshard_executor_execute and reshard_executor_verify
 * refuse the handle (INVALID_ARGUMENT "executor: not a live executor ..."),
 * and destroying it again does nothing. */
RESHARD_API void reshard_executor_destroy(reshard_executor_t* executor);

/* A read-only shard buffer. */
typedef struct reshard_src_buffer {
  const void* data;
  size_t bytes;
} reshard_src_buffer_t;

/* A writable shard buffer. */
typedef struct reshard_dst_buffer {
  void* data;
  size_t bytes;
} reshard_dst_buffer_t;

/* The shard buffers of one tensor, indexed by layout entry (see
 * reshard_plan_tensor_entry): `src[e]` holds source entry e, `dst[e]`
 * receives destination entry e. Each buffer is dense, row-major, exactly
 * the entry's box (bytes = volume * dtype size: the tensor's dtype for
 * sources, reshard_plan_tensor_dst_dtype for destinations; data may be NULL
 * when the box is empty). */
typedef struct reshard_tensor_buffers {
  const reshard_src_buffer_t* src;
  size_t num_src;
  const reshard_dst_buffer_t* dst;
  size_t num_dst;
} reshard_tensor_buffers_t;

/* Fills every destination buffer of every tensor of `plan` from the source
 * buffers. `buffers` has one element per plan tensor (num_tensors must equal
 * the plan's count). The host transport needs a plan holding every process
 * part (RESHARD_PLAN_SCOPE_ALL, or bytes serialized with all parts).
 * Partial sources are reduced on the destination (f16/bf16/f8 accumulate in
 * f32 and round once). Every buffer is checked before anything is written:
 * counts, byte sizes, NULL data, a destination overlapping another buffer.
 * Errors: INVALID_ARGUMENT naming the buffer ("buffers[1].dst[3]: 96 bytes
 * given, box [0:4, 0:8] of f32 needs 128", "plan: lacks the part of process
 * 1"), and nothing is written. TIMEOUT when the copies ran past the
 * executor's timeout_seconds (ABI 1.9; destinations then hold unspecified
 * data). Thread-safe for distinct destination buffers; the source buffers
 * are only read.
 *
 * Distributed executors (MPI, NCCL; ABI 1.1) execute the part of the plan
 * that belongs to this process: plan process p is rank p of the executor's
 * group (reshard_executor_info), and the plan must hold this rank's part
 * (RESHARD_PLAN_SCOPE_ALL, or RESHARD_PLAN_SCOPE_PROCESS for this rank, or
 * bytes holding it) unless the rank owns no device of the plan. The call is
 * collective: every rank of the group calls it with a plan of the same
 * inputs, ranks owning no device too. `buffers` still has one element per
 * tensor and, in it, one buffer per layout entry (entry order as above):
 * entries on this process (their device's topology process is this rank)
 * are required; entries on other processes must be {NULL, 0} and are not
 * touched. A list (src or dst) may also be empty (NULL, 0) when no entry of
 * it is on this process. NCCL and CUDA_LOCAL buffers are CUDA memory the
 * entry's GPU can address.
 * Order of events: this rank's buffers and part are checked first
 * (INVALID_ARGUMENT naming "buffers[t].src[e]" / ".dst[e]", before any
 * message); then the ranks agree on the plan (RESHARD_AGREEMENT_*); then
 * the data moves.
 * Errors (distributed): INVALID_ARGUMENT (this rank's buffers or plan;
 * "buffers[0].dst[3]: entry of device 5 is on process 1, not this rank 0:
 * pass {NULL, 0}"), MISMATCH on every rank when the ranks planned different
 * inputs or dtypes (naming the differing ranks), TIMEOUT when a wait ran
 * past the executor's timeout_seconds, naming the ranks still missing ("...
 * waiting for rank(s) 3"; also what the other ranks see when one rank
 * failed its local checks), TRANSPORT (MPI / NCCL / CUDA error). After
 * TIMEOUT or TRANSPORT the executor must not be used again (destroy it, then
 * end the job: MPI_Abort, ncclCommAbort): peers may be gone, operations may
 * still be pending and destination buffers may still be written. After
 * MISMATCH it stays usable. */
RESHARD_API reshard_error_t* reshard_executor_execute(const reshard_executor_t* executor,
                                                      const reshard_plan_t* plan,
                                                      const reshard_tensor_buffers_t* buffers,
                                                      size_t num_tensors);

/* ------------------------------------------------------------------------ */
/* Verification oracle (docs/design.md §9.1)                                */
/* ------------------------------------------------------------------------ */

/* Fills source entry `entry` of tensor `tensor` with the oracle's values
 * (each element encodes its own global index; finite; partial sources hold
 * summands that reduce exactly). `bytes` must equal the entry's size.
 * Errors: INVALID_ARGUMENT (NULL, size), OUT_OF_RANGE (tensor, entry). */
RESHARD_API reshard_error_t* reshard_oracle_fill_source(const reshard_plan_t* plan, size_t tensor,
                                                        size_t entry, void* data, size_t bytes);

/* Checks destination entry `entry` of tensor `tensor` (whose destination is
 * not partial) against the oracle: *out_mismatches receives the number of
 * wrong elements (0: all correct).
 * Errors: INVALID_ARGUMENT (NULL, size, partial destination), OUT_OF_RANGE. */
RESHARD_API reshard_error_t* reshard_oracle_check_destination(const reshard_plan_t* plan,
                                                              size_t tensor, size_t entry,
                                                              const void* data, size_t bytes,
                                                              int64_t* out_mismatches);

/* Result of reshard_executor_verify. */
typedef struct reshard_verify_report {
  size_t struct_size;
  int64_t tensors;
  int64_t elements;   /* destination elements checked (replicas included) */
  int64_t bytes;      /* destination bytes checked */
  int64_t mismatches; /* wrong elements; 0 means the plan is correct */
} reshard_verify_report_t;

#define RESHARD_VERIFY_REPORT_INIT \
  { sizeof(reshard_verify_report_t), 0, 0, 0, 0 }

/* What `reshard verify` does: allocates every shard of `plan`, fills the
 * sources with the oracle's values, executes with `executor`, and checks
 * every destination element (partial destinations by reducing their
 * summands). Written like reshard_plan_stats. A wrong element is not an
 * error: it is counted in out_report->mismatches.
 * On an MPI executor the call is collective (every rank calls it with the
 * same plan): each rank allocates, fills and checks only its own shards,
 * and the report's counts are summed over the group; a tensor with a
 * partial destination (its value spread over ranks) is UNSUPPORTED, on
 * every rank before anything moves.
 * Errors: INVALID_ARGUMENT (also "executor: ..." for a NCCL or CUDA_LOCAL
 * executor: their shards are GPU memory, which this function does not copy
 * to or from; fill and check their local entries with
 * reshard_oracle_fill_source / reshard_oracle_check_destination),
 * UNSUPPORTED (MPI: a partial destination), RESOURCE_EXHAUSTED (1.2: the
 * shards need more than half the memory available; checked before
 * allocating), OUT_OF_MEMORY, and those of execute. */
RESHARD_API reshard_error_t* reshard_executor_verify(const reshard_executor_t* executor,
                                                     const reshard_plan_t* plan,
                                                     reshard_verify_report_t* out_report);

/* ------------------------------------------------------------------------ */
/* Transports and executors (ABI 1.1)                                       */
/* ------------------------------------------------------------------------ */

/* Whether executors over `transport` can be created in this process:
 * *out_available is 1 or 0. HOST: always 1. MPI: the MPI backend
 * (libreshard_mpi.so.1) and Open MPI's run-time libraries load. NCCL: the
 * CUDA backend (libreshard_cuda.so.1) loads, was built with NCCL, the driver
 * works and a GPU is visible. CUDA_LOCAL: the same without NCCL. When 0 and
 * `why` is not NULL, the reason (what to install or set) is written there,
 * NUL-terminated and truncated to `why_size` bytes; when 1, `why` receives
 * "". May load a backend library (never initialises MPI or creates a CUDA
 * context beyond what counting GPUs needs). Thread-safe.
 * Errors: INVALID_ARGUMENT (out_available NULL, unknown transport). */
RESHARD_API reshard_error_t* reshard_transport_available(reshard_transport_t transport,
                                                         int32_t* out_available, char* why,
                                                         size_t why_size);

/* What an executor is (ABI 1.1). */
typedef struct reshard_executor_info {
  size_t struct_size;
  reshard_transport_t transport;
  int32_t rank;      /* this process's rank in the group = its plan process (0: HOST, CUDA_LOCAL) */
  int32_t size;      /* ranks in the group (1: HOST, CUDA_LOCAL) */
  int32_t reserved0; /* written as 0 */
} reshard_executor_info_t;

#define RESHARD_EXECUTOR_INFO_INIT \
  { sizeof(reshard_executor_info_t), 0, 0, 0, 0 }

/* Describes `executor`, written like reshard_plan_stats. Thread-safe.
 * Errors: INVALID_ARGUMENT (NULL, bad struct_size). */
RESHARD_API reshard_error_t* reshard_executor_info(const reshard_executor_t* executor,
                                                   reshard_executor_info_t* out_info);

/* Where plan device `device` (>= 0) lives according to the plan's topology:
 * its process (= rank of a distributed executor), host and local ordinal
 * (CUDA device index). Devices the topology does not list are on process 0,
 * host 0, ordinal 0. Any output may be NULL. A distributed caller uses it to
 * find which layout entries are its own. Thread-safe.
 * Errors: INVALID_ARGUMENT (plan NULL, negative device). */
RESHARD_API reshard_error_t* reshard_plan_device_location(const reshard_plan_t* plan,
                                                          int64_t device, int32_t* out_process,
                                                          int32_t* out_host, int32_t* out_ordinal);

/* The options structs of the optional headers, declared here for the
 * function table (include reshard/reshard_mpi.h / reshard_nccl.h to use
 * them). */
struct reshard_mpi_executor_options;
struct reshard_nccl_executor_options;
struct reshard_nccl_unique_id;

/* ------------------------------------------------------------------------ */
/* Function table for dlopen users                                          */
/* ------------------------------------------------------------------------ */

/* Every function above and those of reshard_mpi.h and reshard_nccl.h, in a
 * static table. Fields are only ever appended (check struct_size or
 * abi_minor before using a field added after 1.0);
 * the table of one ABI major never changes its existing fields. */
typedef struct reshard_api {
  size_t struct_size; /* sizeof the table this library provides */
  uint32_t abi_major; /* RESHARD_ABI_MAJOR of the library */
  uint32_t abi_minor; /* RESHARD_ABI_MINOR of the library */

  /* ABI 1.0 */
  const char* (*version)(void);
  uint32_t (*version_number)(void);
  reshard_error_code_t (*error_code)(const reshard_error_t*);
  const char* (*error_message)(const reshard_error_t*);
  void (*error_destroy)(reshard_error_t*);
  const char* (*error_code_name)(reshard_error_code_t);
  size_t (*dtype_size)(reshard_dtype_t);
  const char* (*dtype_name)(reshard_dtype_t);
  reshard_error_t* (*dtype_from_name)(const char*, reshard_dtype_t*);
  reshard_error_t* (*mesh_create)(size_t, const char* const*, const int64_t*, const int64_t*,
                                  reshard_mesh_t**);
  void (*mesh_destroy)(reshard_mesh_t*);
  reshard_error_t* (*mesh_rank)(const reshard_mesh_t*, size_t*);
  reshard_error_t* (*mesh_size)(const reshard_mesh_t*, int64_t*);
  reshard_error_t* (*layout_create_named)(const reshard_mesh_t*, size_t, const int64_t*,
                                          const reshard_axes_t*, const reshard_axes_t*,
                                          reshard_reduce_op_t, reshard_layout_t**);
  reshard_error_t* (*layout_create_boxes)(size_t, const int64_t*, size_t, const int64_t*,
                                          const int32_t*, const int64_t*, const int64_t*, int32_t,
                                          reshard_reduce_op_t, reshard_layout_t**);
  void (*layout_destroy)(reshard_layout_t*);
  reshard_error_t* (*layout_rank)(const reshard_layout_t*, size_t*);
  reshard_error_t* (*layout_shape)(const reshard_layout_t*, int64_t*);
  reshard_error_t* (*layout_num_entries)(const reshard_layout_t*, size_t*);
  reshard_error_t* (*layout_entry)(const reshard_layout_t*, size_t, int64_t*, int32_t*, int64_t*,
                                   int64_t*);
  reshard_error_t* (*topology_create)(reshard_topology_t**);
  void (*topology_destroy)(reshard_topology_t*);
  reshard_error_t* (*topology_add_device)(reshard_topology_t*, int64_t, int32_t, int32_t, int32_t);
  reshard_error_t* (*topology_num_devices)(const reshard_topology_t*, size_t*);
  reshard_error_t* (*plan_input_create)(reshard_plan_input_t**);
  reshard_error_t* (*plan_input_from_spec)(const char*, size_t, reshard_plan_input_t**);
  void (*plan_input_destroy)(reshard_plan_input_t*);
  reshard_error_t* (*plan_input_add_tensor)(reshard_plan_input_t*, const char*, size_t,
                                            const int64_t*, reshard_dtype_t,
                                            const reshard_layout_t*, const reshard_layout_t*);
  reshard_error_t* (*plan_input_set_topology)(reshard_plan_input_t*, const reshard_topology_t*);
  reshard_error_t* (*plan_input_set_options)(reshard_plan_input_t*, const reshard_plan_options_t*);
  reshard_error_t* (*plan_input_num_tensors)(const reshard_plan_input_t*, size_t*);
  reshard_error_t* (*plan_input_fingerprint)(const reshard_plan_input_t*, uint64_t*);
  reshard_error_t* (*plan_create)(const reshard_plan_input_t*, const reshard_plan_request_t*,
                                  reshard_plan_t**);
  void (*plan_destroy)(reshard_plan_t*);
  reshard_error_t* (*plan_fingerprint)(const reshard_plan_t*, uint64_t*);
  reshard_error_t* (*plan_stats)(const reshard_plan_t*, reshard_plan_stats_t*);
  reshard_error_t* (*plan_device_traffic)(const reshard_plan_t*, size_t, reshard_device_traffic_t*);
  reshard_error_t* (*plan_num_tensors)(const reshard_plan_t*, size_t*);
  reshard_error_t* (*plan_tensor_name)(const reshard_plan_t*, size_t, const char**);
  reshard_error_t* (*plan_tensor_dtype)(const reshard_plan_t*, size_t, reshard_dtype_t*);
  reshard_error_t* (*plan_tensor_rank)(const reshard_plan_t*, size_t, size_t*);
  reshard_error_t* (*plan_tensor_shape)(const reshard_plan_t*, size_t, int64_t*);
  reshard_error_t* (*plan_tensor_num_entries)(const reshard_plan_t*, size_t, reshard_side_t,
                                              size_t*);
  reshard_error_t* (*plan_tensor_entry)(const reshard_plan_t*, size_t, reshard_side_t, size_t,
                                        int64_t*, int32_t*, int64_t*, int64_t*);
  reshard_error_t* (*plan_tensor_partial)(const reshard_plan_t*, size_t, reshard_side_t, int32_t*,
                                          reshard_reduce_op_t*);
  reshard_error_t* (*plan_entry_of_device)(const reshard_plan_t*, size_t, reshard_side_t, int64_t,
                                           size_t*, int32_t*);
  reshard_error_t* (*plan_num_processes)(const reshard_plan_t*, size_t*);
  reshard_error_t* (*plan_process)(const reshard_plan_t*, size_t, int32_t*);
  reshard_error_t* (*plan_has_part)(const reshard_plan_t*, int32_t, int32_t*);
  reshard_error_t* (*plan_part_info)(const reshard_plan_t*, int32_t, reshard_part_info_t*);
  reshard_error_t* (*plan_part_message)(const reshard_plan_t*, int32_t, reshard_direction_t, size_t,
                                        reshard_message_t*);
  reshard_error_t* (*plan_part_piece)(const reshard_plan_t*, int32_t, reshard_piece_list_t, size_t,
                                      reshard_piece_t*, int64_t*, int64_t*);
  const void* (*buffer_data)(const reshard_buffer_t*);
  size_t (*buffer_size)(const reshard_buffer_t*);
  void (*buffer_destroy)(reshard_buffer_t*);
  reshard_error_t* (*plan_serialize)(const reshard_plan_t*, const reshard_serialize_options_t*,
                                     reshard_buffer_t**);
  reshard_error_t* (*plan_deserialize)(const void*, size_t, reshard_plan_t**);
  reshard_error_t* (*plan_verify_bytes)(const void*, size_t);
  reshard_error_t* (*executor_create)(const reshard_executor_options_t*, reshard_executor_t**);
  void (*executor_destroy)(reshard_executor_t*);
  reshard_error_t* (*executor_execute)(const reshard_executor_t*, const reshard_plan_t*,
                                       const reshard_tensor_buffers_t*, size_t);
  reshard_error_t* (*oracle_fill_source)(const reshard_plan_t*, size_t, size_t, void*, size_t);
  reshard_error_t* (*oracle_check_destination)(const reshard_plan_t*, size_t, size_t, const void*,
                                               size_t, int64_t*);
  reshard_error_t* (*executor_verify)(const reshard_executor_t*, const reshard_plan_t*,
                                      reshard_verify_report_t*);

  /* ABI 1.1 (check struct_size or abi_minor >= 1 before use) */
  reshard_error_t* (*transport_available)(reshard_transport_t, int32_t*, char*, size_t);
  reshard_error_t* (*executor_info)(const reshard_executor_t*, reshard_executor_info_t*);
  reshard_error_t* (*mpi_executor_create)(const struct reshard_mpi_executor_options*,
                                          reshard_executor_t**);
  reshard_error_t* (*nccl_unique_id)(const char*, struct reshard_nccl_unique_id*);
  reshard_error_t* (*nccl_executor_create)(const struct reshard_nccl_executor_options*,
                                           reshard_executor_t**);
  reshard_error_t* (*plan_device_location)(const reshard_plan_t*, int64_t, int32_t*, int32_t*,
                                           int32_t*);
  /* ABI 1.2 added no functions (reshard_plan_request_t.max_plan_bytes and
   * RESHARD_ERROR_RESOURCE_EXHAUSTED): the table is 1.1's, abi_minor 2.
   * ABI 1.3 (plan options relays/reduce_scatter, stages) and 1.4
   * (RESHARD_REDUCE_MEAN) added none either. */
  /* ABI 1.6 (check struct_size or abi_minor >= 6 before use) */
  reshard_error_t* (*plan_part_scratch)(const reshard_plan_t*, int32_t, size_t, reshard_scratch_t*,
                                        int64_t*, int64_t*);
  /* ABI 1.9 (check struct_size or abi_minor >= 9 before use) */
  reshard_error_t* (*plan_deserialize_with_options)(const void*, size_t,
                                                    const reshard_deserialize_options_t*,
                                                    reshard_plan_t**);
  reshard_error_t* (*plan_verify_bytes_with_options)(const void*, size_t,
                                                     const reshard_deserialize_options_t*);
  /* ABI 1.10 (check struct_size or abi_minor >= 10 before use) */
  reshard_error_t* (*plan_input_num_flats)(const reshard_plan_input_t*, size_t*);
  reshard_error_t* (*plan_input_flat_info)(const reshard_plan_input_t*, size_t, const char**,
                                           int32_t*, size_t*, size_t*, int64_t*);
  reshard_error_t* (*plan_input_flat_device)(const reshard_plan_input_t*, size_t, size_t, int64_t*);
  reshard_error_t* (*plan_input_flat_tensor)(const reshard_plan_input_t*, size_t, size_t, size_t*,
                                             size_t*, size_t, uint64_t*, int64_t*);
  /* ABI 1.11 (check struct_size or abi_minor >= 11 before use) */
  reshard_error_t* (*plan_tensor_dst_dtype)(const reshard_plan_t*, size_t, reshard_dtype_t*);
  /* ABI 1.12 (check struct_size or abi_minor >= 12 before use) */
  reshard_error_t* (*plan_tensor_scales)(const reshard_plan_t*, size_t, int64_t*, int64_t*);
  /* Append new functions here, never elsewhere, and bump RESHARD_ABI_MINOR. */
} reshard_api_t;

/* The function table for ABI major version `abi_major` (pass
 * RESHARD_ABI_MAJOR); NULL when this library does not implement that major.
 * The table is static (never freed) and thread-safe to use. A caller built
 * against a newer minor must check `struct_size` (or abi_minor) before
 * touching fields this library may not have. */
RESHARD_API const reshard_api_t* reshard_get_api(uint32_t abi_major);

/* The type of reshard_get_api, for dlsym() users. */
typedef const reshard_api_t* (*reshard_get_api_fn)(uint32_t abi_major);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RESHARD_RESHARD_H_ */
