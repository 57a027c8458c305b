// Internal: the entry point of run-time loaded backends (docs/design.md §3.6,
// packaging). reshard never links MPI; backends/mpi builds
// libreshard_mpi.so.1, whose only exported symbol is
// reshard_backend_mpi_v1, and core/src/exec/backend/backend_loader.cc dlopens it.
//
// The table is versioned twice: the symbol name carries the table version
// (a new, incompatible table gets a new symbol), and `transport_interface`
// must equal kTransportInterfaceVersion of the loader (the C++ Transport
// class of reshard/transport.h crosses this boundary, so both sides must be
// built against the same header and C++ runtime).
#pragma once

#include <cstddef>
#include <cstdint>

#include "reshard/engine.h"
#include "reshard/transport.h"

extern "C" {

struct reshard_backend_mpi_v1_t {
  uint32_t struct_size;
  uint32_t transport_interface;  // kTransportInterfaceVersion of the backend
  // The MPI library's version string (MPI_Get_library_version), static.
  const char* (*mpi_library_version)(void);
  // Creates a transport owned by the caller (delete through the virtual
  // destructor). On failure returns null, sets *code to a reshard::ErrorCode
  // value and writes a NUL-terminated message (truncated to message_size).
  reshard::Transport* (*create)(const reshard::MpiTransportOptions* options, int32_t* code,
                                char* message, size_t message_size);
};

typedef const reshard_backend_mpi_v1_t* (*reshard_backend_mpi_v1_fn)(void);

}  // extern "C"

// The symbol the loader looks up.
inline constexpr const char* kMpiBackendSymbol = "reshard_backend_mpi_v1";

// ---------------------------------------------------------------- CUDA
// libreshard_cuda.so.1 (backends/cuda): the `cuda` local and `nccl`
// transports; its only exported symbol is reshard_backend_cuda_v1, loaded by
// backends/cuda/loader/cuda_loader.cc (compiled into reshard_core). The
// options structs of reshard/cuda.h cross as `const void*`; the backend
// checks `options_version` against its own kCudaOptionsVersion.

extern "C" {

enum reshard_backend_cuda_kind_t : int32_t {
  RESHARD_BACKEND_CUDA_LOCAL = 0,  // options: const reshard::CudaLocalOptions*
  RESHARD_BACKEND_CUDA_NCCL = 1,   // options: const reshard::NcclTransportOptions*
};

struct reshard_backend_cuda_v1_t {
  uint32_t struct_size;
  uint32_t transport_interface;  // kTransportInterfaceVersion of the backend
  uint32_t options_version;      // kCudaOptionsVersion of the backend
  uint32_t reserved;
  // "CUDA runtime 13.0, driver 13.0, NCCL 2.28.9" (static storage).
  const char* (*versions)(void);
  // 1 when `kind` can be created here; otherwise 0 and a NUL-terminated
  // reason in `message` (no GPU, no driver, built without NCCL).
  int32_t (*available)(int32_t kind, char* message, size_t message_size);
  // Creates a transport owned by the caller (delete through the virtual
  // destructor). On failure returns null, sets *code to a reshard::ErrorCode
  // value and writes a NUL-terminated message.
  reshard::Transport* (*create)(int32_t kind, const void* options, uint32_t options_version,
                                int32_t* code, char* message, size_t message_size);
  // Writes ncclGetUniqueId's 128 bytes to `id`; returns a reshard::ErrorCode
  // value (0: success) and on failure a message.
  int32_t (*nccl_unique_id)(char* id, char* message, size_t message_size);
};

typedef const reshard_backend_cuda_v1_t* (*reshard_backend_cuda_v1_fn)(void);

}  // extern "C"

inline constexpr const char* kCudaBackendSymbol = "reshard_backend_cuda_v1";
