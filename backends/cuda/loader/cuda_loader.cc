// Loads the CUDA backend, libreshard_cuda.so.1, on first use (DESIGN.md §3,
// packaging). Compiled into reshard_core, which links no CUDA library: the
// factories of reshard/cuda.h land here and forward to the backend's entry
// table (core/src/exec/backend_abi.h).
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "exec/backend_abi.h"
#include "exec/backend_search.h"
#include "reshard/cuda.h"
#include "reshard/error.h"

#ifndef RESHARD_INSTALL_LIBDIR
#define RESHARD_INSTALL_LIBDIR "lib"
#endif

namespace reshard {
namespace {

constexpr const char* kLibraryNames[] = {"libreshard_cuda.so.1", "libreshard_cuda.so"};
constexpr const char* kHowToGet =
    "Build reshard on a machine with the CUDA toolkit (nvcc) and NCCL (cmake -DRESHARD_CUDA=ON) "
    "and install libreshard_cuda.so.1 next to libreshard, or set RESHARD_BACKEND_DIR to its "
    "directory";

// Never throws; on failure returns null and sets `why`.
const reshard_backend_cuda_v1_t* load(const std::string& library, std::string* why) {
  std::vector<std::string> names;
  if (library.empty()) {
    names.assign(std::begin(kLibraryNames), std::end(kLibraryNames));
  } else {
    names.push_back(library);
  }
  std::vector<std::string> candidates;
  for (const std::string& name : names) {
    if (name.find('/') != std::string::npos) {
      candidates.push_back(name);
      continue;
    }
    for (const std::string& dir :
         backend_search_dirs(reinterpret_cast<const void*>(&cuda_transport_available))) {
      std::error_code ec;
      const std::string file = dir + "/" + name;
      if (std::filesystem::exists(file, ec)) candidates.push_back(file);
    }
  }
  for (const std::string& name : names) {
    if (name.find('/') == std::string::npos) candidates.push_back(name);
  }
  std::string failures;
  const auto note = [&](const std::string& text) {
    failures += (failures.empty() ? "" : "; ") + text;
  };
  for (const std::string& c : candidates) {
    // RTLD_LOCAL: the backend exports one symbol; its NCCL is found by
    // soname, so a libnccl.so.2 the host framework already loaded is reused.
    void* handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      const std::string text = e != nullptr ? e : "unknown error";
      if (c.find('/') != std::string::npos ||
          text.find("cannot open shared object file") == std::string::npos ||
          text.find(c) == std::string::npos) {
        note(text);
      }
      continue;
    }
    auto fn = reinterpret_cast<reshard_backend_cuda_v1_fn>(dlsym(handle, kCudaBackendSymbol));
    const reshard_backend_cuda_v1_t* table = fn != nullptr ? fn() : nullptr;
    if (table == nullptr || table->struct_size < sizeof(reshard_backend_cuda_v1_t)) {
      note(c + ": no usable " + kCudaBackendSymbol);
      continue;  // never unloaded: the CUDA runtime does not support it
    }
    if (table->transport_interface != kTransportInterfaceVersion ||
        table->options_version != kCudaOptionsVersion) {
      note(c + ": built for transport interface " + std::to_string(table->transport_interface) +
           " and CUDA options " + std::to_string(table->options_version) + ", this reshard needs " +
           std::to_string(kTransportInterfaceVersion) + " and " +
           std::to_string(kCudaOptionsVersion));
      continue;
    }
    return table;
  }
  if (!failures.empty()) {
    *why = "CUDA transports unavailable: the backend could not be loaded: " + failures +
           ". It needs the CUDA driver (libcuda.so.1) and NCCL (libnccl.so.2, e.g. on "
           "LD_LIBRARY_PATH).";
  } else {
    std::string searched;
    for (const std::string& d :
         backend_search_dirs(reinterpret_cast<const void*>(&cuda_transport_available)))
      searched += (searched.empty() ? "" : ", ") + d;
    *why = "CUDA transports unavailable: " + names.front() + " was not found (searched " +
           (searched.empty() ? std::string("no directories") : searched) +
           " and the dynamic linker's path). " + kHowToGet + ".";
  }
  return nullptr;
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
