// reshard — the one public entry of transport backends (docs/design.md §3.6):
// what a backend library implements and exports, and the registry through
// which reshard finds and loads it. A backend (backends/mpi, backends/cuda)
// includes this header and other public reshard/*.h headers only.
//
// A backend is a shared library that reshard dlopens on first use, so that
// reshard itself never links MPI, CUDA or NCCL. It implements the transport
// interface (reshard::Transport, reshard/transport.h) and exports exactly one
// symbol, its entry point: a C function returning a static table (below)
// whose `create` makes transports. Define it with RESHARD_BACKEND_ENTRY:
//
//   RESHARD_BACKEND_ENTRY const reshard_backend_mpi_v1_t* reshard_backend_mpi_v1(void) {
//     static const reshard_backend_mpi_v1_t table = {
//         sizeof(reshard_backend_mpi_v1_t), reshard::kTransportInterfaceVersion, ...};
//     return &table;
//   }
//
// Versioning, twice: the symbol name carries the table version (an
// incompatible table gets a new symbol), and `transport_interface` must
// equal the loader's kTransportInterfaceVersion (reshard/transport.h) —
// C++ objects (Transport, the options structs of reshard/mpi.h and
// reshard/cuda.h) cross the boundary, so both sides must be built against
// the same headers and C++ runtime. The CUDA table also carries
// kCudaOptionsVersion. A library failing either check is refused with a
// message naming both versions.
//
// The loader is reshard's (load_backend below; make_mpi_transport,
// make_cuda_local_transport, make_nccl_transport call it): one search,
// dlopen and version check for every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "reshard/cuda.h"
#include "reshard/mpi.h"
#include "reshard/transport.h"

// Marks a backend's entry point: C linkage, exported from a library built
// with hidden visibility (the backends export nothing else).
#define RESHARD_BACKEND_ENTRY extern "C" __attribute__((visibility("default")))

extern "C" {

// ------------------------------------------------------------------ MPI
// libreshard_mpi.so.1 (backends/mpi): the `mpi` transport.

struct reshard_backend_mpi_v1_t {
  uint32_t struct_size;          // sizeof(reshard_backend_mpi_v1_t) of the backend
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

// ----------------------------------------------------------------- CUDA
// libreshard_cuda.so.1 (backends/cuda): the `cuda` local and `nccl`
// transports. The options structs of reshard/cuda.h cross as `const void*`;
// the backend checks `options_version` against its own kCudaOptionsVersion.

enum reshard_backend_cuda_kind_t : int32_t {
  RESHARD_BACKEND_CUDA_LOCAL = 0,  // options: const reshard::CudaLocalOptions*
  RESHARD_BACKEND_CUDA_NCCL = 1,   // options: const reshard::NcclTransportOptions*
};

struct reshard_backend_cuda_v1_t {
  uint32_t struct_size;          // sizeof(reshard_backend_cuda_v1_t) of the backend
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

namespace reshard {

// ------------------------------------------------------------- registry

// The backends reshard knows how to load.
enum class BackendKind : int32_t {
  kMpi = 0,   // reshard_backend_mpi_v1_t
  kCuda = 1,  // reshard_backend_cuda_v1_t
};

// One registry entry: where a backend is found and what it exports.
struct BackendDescriptor {
  BackendKind kind = BackendKind::kMpi;
  const char* name = nullptr;                  // "mpi", "cuda"
  const char* transports = nullptr;            // what it provides: "mpi", "cuda, nccl"
  std::span<const char* const> library_names;  // default file names, preferred first
  const char* entry_symbol = nullptr;          // "reshard_backend_mpi_v1", ...
  uint32_t table_size = 0;                     // sizeof the entry table it returns
  // Calls the entry symbol through its own type (`const Table* (*)(void)`):
  // a call through any other function type is undefined behaviour.
  const void* (*call_entry)(void* symbol) = nullptr;
};

// Every registered backend, in BackendKind order.
std::span<const BackendDescriptor> registered_backends();

// The entry of `kind`.
const BackendDescriptor& backend_descriptor(BackendKind kind);

// Loads backend `kind` and returns its entry table (a reshard_backend_*_t,
// see the typed wrappers below), after checking it: non-null, at least
// table_size bytes (struct_size), built for this kTransportInterfaceVersion
// (and, for CUDA, this kCudaOptionsVersion). `library` is a path (used as
// given), a file name, or empty for the descriptor's library_names; bare
// names are searched in $RESHARD_BACKEND_DIR (a ':' list), the directory of
// the library or executable holding reshard and its ../lib, the
// executable's directory and its ../lib, then the dynamic linker's path. The
// default library, once loaded, is kept and returned by later calls;
// libraries are never unloaded (neither MPI nor the CUDA runtime supports
// it). Never throws: on failure returns null and sets *why to what was
// searched or refused and what to install. `path` (if given) receives the
// file that was loaded. Thread-safe.
const void* load_backend(BackendKind kind, const std::string& library, std::string* why,
                         std::string* path = nullptr);

inline const reshard_backend_mpi_v1_t* load_mpi_backend(const std::string& library,
                                                        std::string* why) {
  return static_cast<const reshard_backend_mpi_v1_t*>(
      load_backend(BackendKind::kMpi, library, why));
}

inline const reshard_backend_cuda_v1_t* load_cuda_backend(const std::string& library,
                                                          std::string* why) {
  return static_cast<const reshard_backend_cuda_v1_t*>(
      load_backend(BackendKind::kCuda, library, why));
}

}  // namespace reshard
