// reshard — execution on CUDA devices (docs/design.md §3.4): the `cuda` local
// transport (one process owns every device of a plan) and the `nccl`
// transport (one or more GPUs per process, NCCL between processes). Both
// plug into reshard::Engine (reshard/engine.h); docs/gpu.md has the guide.
//
//   // One process, every plan device a CUDA buffer (plan devices may share
//   // one GPU; Topology ordinals choose the GPU):
//   reshard::execute_cuda_local(plan, buffers);
//
//   // Several processes, one or more GPUs each, NCCL between them:
//   reshard::NcclTransportOptions o;
//   o.process = rank;                      // = plan process
//   o.devices = {{/*ordinal=*/0, /*comm=*/my_comm}};   // per GPU; or a unique id
//   reshard::Engine engine(reshard::make_nccl_transport(o));
//   engine.execute(plan, rank, my_buffers);
//
// Packaging: the GPU code lives in libreshard_cuda.so.1 (kernels, both
// transports; links the CUDA runtime statically and libnccl.so.2), which the
// functions below load on first use, so a program using reshard links no
// CUDA library and runs unchanged on machines without one: there the
// factories throw kUnsupported saying what is missing (the backend, the
// driver, a GPU, NCCL). This header includes neither cuda_runtime.h nor
// nccl.h: it declares the two handle types exactly as they do.
//
// Memory: shard buffers and staging are CUDA device memory (or memory the
// device can address: managed, mapped pinned host memory). Every buffer a
// plan reads or writes must be addressable from the GPU of its plan device:
// the transports enable peer access between the GPUs they use and, unless
// CudaStreamOptions::check_pointers is off, reject pointers the GPU cannot
// reach (kInvalidArgument) instead of faulting.
//
// Ordering: all work for one GPU runs on one stream, given by the caller or
// created by the transport. A transport-created stream is a blocking stream:
// it is ordered after work the caller put on the legacy default stream; work
// on other streams of the caller must be complete (or the caller passes that
// stream). By default Engine::execute returns once the destination buffers
// hold their data; with `wait` = false it returns once everything is
// enqueued on the streams (the caller synchronises them, and must keep every
// buffer alive until then).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

// The CUDA runtime's and NCCL's handle types, declared as cuda_runtime_api.h
// (driver_types.h) and nccl.h declare them; repeating a typedef is valid C++.
typedef struct CUstream_st* cudaStream_t;
typedef struct ncclComm* ncclComm_t;

namespace reshard {

// Bumped whenever an options struct below changes; a backend built against
// another version is refused by the loader (the structs cross the boundary
// between reshard and libreshard_cuda.so as C++ objects).
inline constexpr uint32_t kCudaOptionsVersion = 1;

// The stream to order the work for one GPU on.
struct CudaStream {
  int32_t ordinal = 0;  // CUDA device index (as cudaSetDevice sees it)
  cudaStream_t stream = nullptr;
};

// What the CUDA local and NCCL transports share.
struct CudaStreamOptions {
  // Caller streams, at most one per ordinal; other ordinals get a stream of
  // the transport. Streams must stay valid for the transport's lifetime.
  std::vector<CudaStream> streams;
  // Transport::finish (called at the end of Engine::execute) waits on the
  // host until the GPU work completed, with the engine's deadline. When
  // false it returns once the work is enqueued: the caller synchronises the
  // streams; NCCL failures and timeouts are then not detected by reshard.
  bool wait = true;
  // Check, once per buffer, that the GPU can address every pointer handed to
  // it (cudaPointerGetAttributes), so a host pointer is a kInvalidArgument
  // rather than a sticky CUDA fault that ruins the process's context.
  bool check_pointers = true;
  // Longest wait for anything the transport waits for by itself: creating
  // communicators, the control-plane allgather, descriptor buffers in use.
  double timeout_seconds = 300;
  // The backend library to load: a file name or path. Empty: the default
  // search (see make_cuda_local_transport).
  std::string library;
};

// The `cuda` local transport: one process owns every device of the plans it
// executes (plan processes must all be 0), every shard buffer is CUDA memory
// on the GPU of its device's Topology ordinal. Several plan devices may share
// one GPU. Copies between GPUs read peer memory directly (peer access is
// enabled when the hardware allows; otherwise such a copy is kUnsupported).
struct CudaLocalOptions : CudaStreamOptions {};

// NCCL's unique id (ncclUniqueId, 128 bytes): the bytes of one
// ncclGetUniqueId call (or make_nccl_unique_id), made on one process and
// sent by the caller to every other one.
using NcclUniqueId = std::array<char, 128>;

// One GPU of this process in the NCCL group.
struct NcclDevice {
  int32_t ordinal = 0;  // CUDA device index; plan devices on it use it
  // A communicator the caller created for this GPU (any mode; non-blocking,
  // ncclConfig_t::blocking = 0, is what lets reshard time out instead of
  // hanging on a dead peer). reshard never destroys it. Null: reshard
  // creates one from NcclTransportOptions::unique_id with `nccl_rank`, in
  // non-blocking mode, and destroys it with the transport.
  ncclComm_t comm = nullptr;
  int32_t nccl_rank = -1;  // this GPU's rank in the NCCL group (created comms)
};

// The `nccl` transport. The group's processes are the plan's processes
// (transport rank = plan process); each process contributes at least one
// GPU, and the NCCL group holds one rank per GPU of every process. At
// creation the processes exchange (process, ordinal) for every NCCL rank,
// so a message to a plan device goes to the NCCL rank of the device's
// process and Topology ordinal (TransferOp::remote_ordinal), on this side
// from the GPU of the local device's ordinal: any process, this one or a
// peer, may have several GPUs. A process with several GPUs copies between
// them by peer copies, not NCCL. A process with one GPU in the group uses
// it for all its plan devices whatever their Topology ordinals; with
// several, the ordinal picks the GPU, and a plan device whose ordinal is
// none of its process's GPUs fails execute with kInvalidArgument. Creation
// is collective over all processes.
//
// Failure: every wait has a deadline (ExecuteOptions::timeout_seconds in
// execute, timeout_seconds here otherwise). On expiry, or when NCCL reports
// an error, communicators reshard created are aborted (ncclCommAbort), so no
// GPU stream stays blocked on a dead peer; caller communicators are aborted
// only with abort_borrowed_on_failure (after which the caller must neither
// use nor destroy them). Either way the transport refuses further work.
struct NcclTransportOptions : CudaStreamOptions {
  // This process's rank in the group (= plan process). -1: the NCCL rank of
  // the process's only GPU (one GPU per process, NCCL rank = process).
  int32_t process = -1;
  std::vector<NcclDevice> devices;  // this process's GPUs, at least one
  // For communicators reshard creates: the shared id and the number of NCCL
  // ranks in the group (GPUs over all processes).
  NcclUniqueId unique_id{};
  int32_t nccl_ranks = 0;
  bool abort_borrowed_on_failure = false;
};

// Creates the `cuda` local transport. Loads libreshard_cuda.so.1 on first
// use, searching: $RESHARD_BACKEND_DIR (a ':' list), the directory of the
// library or executable holding reshard and its ../lib, the executable's
// directory and ../lib, then the dynamic linker's path. Throws kUnsupported
// when the backend, the CUDA driver or a GPU is missing (the message says
// which), kInvalidArgument for bad options, kTransport for CUDA errors.
std::unique_ptr<Transport> make_cuda_local_transport(const CudaLocalOptions& options = {});

// Creates the `nccl` transport (collective; see NcclTransportOptions).
// Throws as make_cuda_local_transport, kUnsupported also when the backend
// was built without NCCL, kTimeout when not every process joined within
// options.timeout_seconds, kMismatch when the processes disagree (ranks,
// group size).
std::unique_ptr<Transport> make_nccl_transport(const NcclTransportOptions& options);

// A fresh NCCL unique id (ncclGetUniqueId through the backend), for callers
// that do not link NCCL themselves. Throws kUnsupported as above.
NcclUniqueId make_nccl_unique_id(const std::string& library = {});

// True when make_cuda_local_transport can succeed: the backend loads, the
// driver works, at least one GPU is visible. Otherwise `why` (if given)
// receives the reason. Never throws.
bool cuda_transport_available(std::string* why = nullptr);

// True when the backend was built with NCCL and a GPU is visible.
bool nccl_transport_available(std::string* why = nullptr);

// "CUDA runtime 13.0, driver 13.0, NCCL 2.28.9" for the loaded backend;
// throws kUnsupported when it cannot be loaded.
std::string cuda_backend_versions(const std::string& library = {});

// Executes a whole plan in this process on CUDA buffers, the GPU counterpart
// of execute_host (reshard/exec.h): `buffers` as there (every entry of every
// tensor), each buffer on the GPU of its device's ordinal. The plan must
// hold process 0's part and every device must be on process 0. Results are
// bit for bit those of execute_host. Runs one Engine over a fresh
// make_cuda_local_transport(options); to execute many plans, keep an Engine.
inline ExecuteStats execute_cuda_local(const Plan& plan, std::span<const TensorBuffers> buffers,
                                       const CudaLocalOptions& options = {},
                                       ExecuteOptions execute_options = {}) {
  execute_options.agreement = ExecuteOptions::Agreement::kSkip;  // one process
  execute_options.cache_schedule = false;  // the engine lives for this call only
  Engine engine(make_cuda_local_transport(options));
  return engine.execute(plan, 0, buffers, execute_options);
}

}  // namespace reshard
