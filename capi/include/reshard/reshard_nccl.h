/*
 * reshard_nccl.h — executors over NCCL (C ABI 1.1). Optional: include it
 * beside reshard.h to execute plans on CUDA memory across processes with
 * NCCL. Plain C11; it includes neither nccl.h nor cuda_runtime.h (it
 * declares their two handle types exactly as they do, which C11 allows to
 * repeat), and libreshard.so.1 links no CUDA library: the CUDA backend
 * (libreshard_cuda.so.1, which links libnccl.so.2 by soname, so a NCCL the
 * framework already loaded is reused) is loaded on first use.
 *
 *   // rank 0 makes an id and sends it to every process (your channel):
 *   reshard_nccl_unique_id_t id;
 *   if (rank == 0) reshard_nccl_unique_id(NULL, &id);
 *   broadcast(&id, sizeof id);
 *   reshard_nccl_device_t gpu = RESHARD_NCCL_DEVICE_INIT;
 *   gpu.ordinal = local_gpu;
 *   gpu.nccl_rank = rank;                 // reshard creates the communicator
 *   reshard_nccl_executor_options_t o = RESHARD_NCCL_EXECUTOR_OPTIONS_INIT;
 *   o.process = rank;                     // = plan process
 *   o.devices = &gpu;
 *   o.num_devices = 1;
 *   o.unique_id = id;
 *   o.nccl_ranks = world_size;            // GPUs over all processes
 *   reshard_executor_t* ex;
 *   reshard_nccl_executor_create(&o, &ex);            // collective
 *   reshard_executor_execute(ex, plan, device_buffers, n);
 *
 * Or pass the framework's own communicator (gpu.comm = its ncclComm_t) and
 * stream (gpu.stream): reshard never destroys either. Non-blocking
 * communicators (ncclConfig_t.blocking = 0) let reshard time out instead of
 * hanging on a dead peer; the ones reshard creates are non-blocking.
 *
 * Semantics are those of the C++ reshard::NcclTransportOptions
 * (reshard/cuda.h, docs/gpu.md): the group's processes are the plan's
 * processes; each contributes at least one GPU; the NCCL group holds one
 * rank per GPU of every process. A process with one GPU uses it for all its
 * plan devices; with several, a plan device's topology ordinal picks the
 * GPU. Errors, ownership and struct rules are those of reshard.h.
 */
#ifndef RESHARD_RESHARD_NCCL_H_
#define RESHARD_RESHARD_NCCL_H_

#include "reshard.h"

/* The CUDA runtime's and NCCL's handle types, declared as
 * cuda_runtime_api.h (driver_types.h) and nccl.h declare them. */
typedef struct CUstream_st* cudaStream_t;
typedef struct ncclComm* ncclComm_t;

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL's unique id: the 128 bytes of ncclUniqueId (same size and layout, so
 * either converts to the other with memcpy). */
#define RESHARD_NCCL_UNIQUE_ID_BYTES 128
typedef struct reshard_nccl_unique_id {
  char internal[RESHARD_NCCL_UNIQUE_ID_BYTES];
} reshard_nccl_unique_id_t;

/* One GPU of this process in the NCCL group. This struct is an array
 * element: its layout is fixed for ABI 1 (it never grows; new per-device
 * settings would come in a new array). */
typedef struct reshard_nccl_device {
  int32_t ordinal; /* CUDA device index (as cudaSetDevice sees it), >= 0 */
  /* This GPU's rank in the NCCL group, for a communicator reshard creates
   * (comm NULL): 0 <= nccl_rank < options.nccl_ranks. Ignored (-1) with a
   * caller communicator. */
  int32_t nccl_rank;
  /* The caller's communicator for this GPU (reshard never destroys it), or
   * NULL: reshard creates one from options.unique_id and nccl_rank, in
   * non-blocking mode, and destroys it with the executor. */
  ncclComm_t comm;
  /* The stream to order this GPU's work on (must outlive the executor), or
   * NULL: a blocking stream of the executor (ordered after the legacy
   * default stream). */
  cudaStream_t stream;
} reshard_nccl_device_t;

#define RESHARD_NCCL_DEVICE_INIT \
  { 0, -1, NULL, NULL }

/* Options of reshard_nccl_executor_create. */
typedef struct reshard_nccl_executor_options {
  size_t struct_size;
  /* This process's rank in the group (= plan process), >= 0; -1 (default):
   * the NCCL rank of the process's only GPU (one GPU per process, NCCL
   * rank = process). */
  int32_t process;
  /* For communicators reshard creates: the number of NCCL ranks (GPUs over
   * all processes), >= 1. Ignored when every device has a comm. */
  int32_t nccl_ranks;
  const reshard_nccl_device_t* devices; /* this process's GPUs, at least one */
  size_t num_devices;
  /* For communicators reshard creates: the id every process received from
   * the one that called reshard_nccl_unique_id. */
  reshard_nccl_unique_id_t unique_id;
  /* The longest wait for any one step, in seconds (> 0, default 300):
   * creating communicators, the agreement, a batch, the final flush. On
   * expiry (or a NCCL error) reshard aborts the communicators it created
   * (ncclCommAbort) and names the ranks still missing. */
  double timeout_seconds;
  /* Non-zero (default): execute returns once the destinations hold their
   * data (waiting on the host, with the deadline). 0: execute returns once
   * the work is enqueued on the streams; the caller synchronises them, keeps
   * every buffer alive until then, and NCCL failures and timeouts are not
   * seen by reshard. */
  int32_t wait;
  /* Non-zero (default): check once per buffer that its GPU can address it,
   * so a host pointer is INVALID_ARGUMENT rather than a CUDA fault. */
  int32_t check_pointers;
  /* Non-zero: on a timeout or NCCL error also abort the caller's
   * communicators (the caller must then neither use nor destroy them).
   * Default 0. */
  int32_t abort_borrowed_on_failure;
  int32_t max_batches_in_flight; /* >= 1, default 8 */
  reshard_agreement_t agreement; /* default RESHARD_AGREEMENT_FIRST_USE */
  reshard_packing_t packing;     /* default RESHARD_PACKING_AUTO (NCCL stages) */
  int32_t overlap;               /* non-zero (default): see reshard_mpi.h */
  int32_t reserved0;             /* set to 0; keeps the struct free of tail padding */
  /* The backend library to load: a file name or path (copied). NULL: the
   * default search ($RESHARD_BACKEND_DIR, next to libreshard.so.1 and its
   * ../lib, the executable's directory and ../lib, the dynamic linker's
   * path). */
  const char* library;
} reshard_nccl_executor_options_t;

#define RESHARD_NCCL_EXECUTOR_OPTIONS_INIT                                             \
  {                                                                                    \
    sizeof(reshard_nccl_executor_options_t), -1, 0, NULL, 0, {{0}}, 300.0, 1, 1, 0, 8, \
        RESHARD_AGREEMENT_FIRST_USE, RESHARD_PACKING_AUTO, 1, 0, NULL                  \
  }

/* Writes a fresh NCCL unique id (ncclGetUniqueId through the backend, so
 * the caller needs no NCCL) to *out_id. `library`: the backend library
 * (NULL: the default search). Call it on one process and send the bytes to
 * every other one.
 * Errors: INVALID_ARGUMENT (out_id NULL), UNSUPPORTED (no backend, built
 * without NCCL, no driver or GPU: the message says which), TRANSPORT. */
RESHARD_API reshard_error_t* reshard_nccl_unique_id(const char* library,
                                                    reshard_nccl_unique_id_t* out_id);

/* Creates an executor over NCCL (RESHARD_TRANSPORT_NCCL). Collective over
 * every process of the group. The options are checked before anything is
 * loaded or created.
 * Errors: INVALID_ARGUMENT naming the field ("options: must not be NULL",
 * "options->struct_size: ...", "options->devices: must not be NULL",
 * "options->num_devices: 0 ...", "options->devices[1].ordinal: -2 is
 * negative", "options->devices[1].ordinal: 0 appears twice",
 * "options->devices[0].nccl_rank: 4 is outside [0, 4)",
 * "options->nccl_ranks: ...", "options->process: ...",
 * "options->timeout_seconds: ..."), UNSUPPORTED (backend, NCCL, driver or GPU
 * missing: the message says which; reshard_transport_available asks
 * beforehand), MISMATCH (processes disagree on ranks or group size), TIMEOUT
 * (not every process joined in time), TRANSPORT (CUDA or NCCL error). */
RESHARD_API reshard_error_t* reshard_nccl_executor_create(
    const reshard_nccl_executor_options_t* options, reshard_executor_t** out_executor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RESHARD_RESHARD_NCCL_H_ */
