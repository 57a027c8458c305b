// Loads the CUDA backend, libreshard_cuda.so.1, on first use (docs/design.md §3.6,
// packaging). Compiled into reshard_core, which links no CUDA library: the
// factories of reshard/cuda.h land here and forward to the backend's entry
// table (core/src/exec/backend/backend_abi.h); the search and dlopen are
// load_backend's (core/src/exec/backend/backend_loader.h), shared with MPI.
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <string>

#include "exec/backend/backend_abi.h"
#include "exec/backend/backend_loader.h"
#include "reshard/cuda.h"
#include "reshard/error.h"

namespace reshard {
namespace {

constexpr const char* kLibraryNames[] = {"libreshard_cuda.so.1", "libreshard_cuda.so"};
constexpr const char* kHowToGet =
    "Build reshard on a machine with the CUDA toolkit (nvcc) and NCCL (cmake -DRESHARD_CUDA=ON) "
    "and install libreshard_cuda.so.1 next to libreshard, or set RESHARD_BACKEND_DIR to its "
    "directory";

// Never throws; on failure returns null and sets `why`.
const reshard_backend_cuda_v1_t* load(const std::string& library, std::string* why) {
  BackendLibrary lib;
  lib.names = kLibraryNames;
  lib.symbol = kCudaBackendSymbol;
  // RTLD_LOCAL: the backend exports one symbol; its NCCL is found by
  // soname, so a libnccl.so.2 the host framework already loaded is reused.
  lib.dlopen_flags = RTLD_NOW | RTLD_LOCAL;
  lib.anchor = reinterpret_cast<const void*>(&cuda_transport_available);
  lib.unavailable = "CUDA transports unavailable";
  lib.load_hint =
      "It needs the CUDA driver (libcuda.so.1) and NCCL (libnccl.so.2, e.g. on "
      "LD_LIBRARY_PATH).";
  lib.missing_hint = std::string(kHowToGet) + ".";
  return load_backend_table<reshard_backend_cuda_v1_t>(
      lib, library,
      [](const reshard_backend_cuda_v1_t& table) -> std::string {
        if (table.transport_interface == kTransportInterfaceVersion &&
            table.options_version == kCudaOptionsVersion) {
          return "";
        }
        return "built for transport interface " + std::to_string(table.transport_interface) +
               " and CUDA options " + std::to_string(table.options_version) +
               ", this reshard needs " + std::to_string(kTransportInterfaceVersion) + " and " +
               std::to_string(kCudaOptionsVersion);
      },
      nullptr, why);
}

std::mutex g_mutex;
const reshard_backend_cuda_v1_t* g_default = nullptr;

const reshard_backend_cuda_v1_t* backend(const std::string& library, std::string* why) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (library.empty() && g_default != nullptr) return g_default;
  const reshard_backend_cuda_v1_t* table = load(library, why);
  if (table != nullptr && library.empty()) g_default = table;
  return table;
}

const reshard_backend_cuda_v1_t& backend_or_throw(const std::string& library) {
  std::string why;
  const reshard_backend_cuda_v1_t* table = backend(library, &why);
  if (table == nullptr) fail(ErrorCode::kUnsupported, why);
  return *table;
}

std::unique_ptr<Transport> create(int32_t kind, const void* options, const std::string& library) {
  const reshard_backend_cuda_v1_t& table = backend_or_throw(library);
  int32_t code = static_cast<int32_t>(ErrorCode::kInternal);
  char message[2048] = {};
  std::unique_ptr<Transport> transport(
      table.create(kind, options, kCudaOptionsVersion, &code, message, sizeof message));
  if (!transport) {
    fail(static_cast<ErrorCode>(code), message[0] != '\0'
                                           ? std::string(message)
                                           : std::string("CUDA transport: creation failed"));
  }
  return transport;
}

bool available(int32_t kind, std::string* why) {
  std::string reason;
  const reshard_backend_cuda_v1_t* table = backend("", &reason);
  if (table != nullptr) {
    char message[1024] = {};
    if (table->available(kind, message, sizeof message) != 0) return true;
    reason = message;
  }
  if (why != nullptr) *why = reason;
  return false;
}

}  // namespace

std::unique_ptr<Transport> make_cuda_local_transport(const CudaLocalOptions& options) {
  return create(RESHARD_BACKEND_CUDA_LOCAL, &options, options.library);
}

std::unique_ptr<Transport> make_nccl_transport(const NcclTransportOptions& options) {
  return create(RESHARD_BACKEND_CUDA_NCCL, &options, options.library);
}

NcclUniqueId make_nccl_unique_id(const std::string& library) {
  const reshard_backend_cuda_v1_t& table = backend_or_throw(library);
  NcclUniqueId id{};
  char message[1024] = {};
  const int32_t code = table.nccl_unique_id(id.data(), message, sizeof message);
  if (code != 0) fail(static_cast<ErrorCode>(code), message);
  return id;
}

bool cuda_transport_available(std::string* why) {
  return available(RESHARD_BACKEND_CUDA_LOCAL, why);
}

bool nccl_transport_available(std::string* why) {
  return available(RESHARD_BACKEND_CUDA_NCCL, why);
}

std::string cuda_backend_versions(const std::string& library) {
  return backend_or_throw(library).versions();
}

}  // namespace reshard
