// Loads transport backends at run time (DESIGN.md §3, packaging): reshard
// links neither MPI nor CUDA; make_mpi_transport dlopens libreshard_mpi.so.1,
// which does. See backend_abi.h for the entry point.
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
#include "reshard/engine.h"
#include "reshard/error.h"

#ifndef RESHARD_INSTALL_LIBDIR
#define RESHARD_INSTALL_LIBDIR "lib"
#endif

namespace reshard {
namespace {

constexpr const char* kMpiLibraryNames[] = {"libreshard_mpi.so.1", "libreshard_mpi.so"};
constexpr const char* kInstallMpi = "Debian: apt-get install openmpi-bin libopenmpi3";

struct Loaded {
  const reshard_backend_mpi_v1_t* table = nullptr;
  std::string path;
};

// Loads the backend named `library` (a path, a name, or empty for the
// default names). Never throws; on failure returns null and sets `why`.
const reshard_backend_mpi_v1_t* load(const std::string& library, std::string* path,
                                     std::string* why) {
  std::vector<std::string> names;
  if (library.empty()) {
    names.assign(std::begin(kMpiLibraryNames), std::end(kMpiLibraryNames));
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
         backend_search_dirs(reinterpret_cast<const void*>(&make_mpi_transport))) {
      std::error_code ec;
      const std::string file = dir + "/" + name;
      if (std::filesystem::exists(file, ec)) candidates.push_back(file);
    }
  }
  // Last, the dynamic linker's own search (LD_LIBRARY_PATH, runpath, cache).
  for (const std::string& name : names) {
    if (name.find('/') == std::string::npos) candidates.push_back(name);
  }
  std::string failures;
  for (const std::string& c : candidates) {
    // RTLD_GLOBAL: Open MPI's run-time plugins expect libmpi's symbols to be
    // global. The backend itself exports nothing else.
    void* handle = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      // A bare name the linker cannot find is not worth reporting.
      const std::string text = e != nullptr ? e : "unknown error";
      if (c.find('/') != std::string::npos ||
          text.find("cannot open shared object file") == std::string::npos ||
          text.find(c) == std::string::npos) {
        failures += (failures.empty() ? "" : "; ") + text;
      }
      continue;
    }
    auto fn = reinterpret_cast<reshard_backend_mpi_v1_fn>(dlsym(handle, kMpiBackendSymbol));
    const reshard_backend_mpi_v1_t* table = fn != nullptr ? fn() : nullptr;
    if (table == nullptr || table->struct_size < sizeof(reshard_backend_mpi_v1_t)) {
      failures += (failures.empty() ? "" : "; ") + c + ": no usable " + kMpiBackendSymbol;
      continue;  // handles stay open: unloading MPI is never safe
    }
    if (table->transport_interface != kTransportInterfaceVersion) {
      failures += (failures.empty() ? "" : "; ") + c + ": built for transport interface " +
                  std::to_string(table->transport_interface) + ", this reshard needs " +
                  std::to_string(kTransportInterfaceVersion);
      continue;
    }
    *path = c;
    return table;
  }
  if (!failures.empty()) {
    *why = "MPI transport unavailable: the backend could not be loaded: " + failures + ". " +
           "The backend needs Open MPI's run-time libraries (" + kInstallMpi + ").";
  } else {
    std::string searched;
    for (const std::string& d :
         backend_search_dirs(reinterpret_cast<const void*>(&make_mpi_transport)))
      searched += (searched.empty() ? "" : ", ") + d;
    *why = "MPI transport unavailable: " + names.front() + " was not found (searched " +
           (searched.empty() ? std::string("no directories") : searched) +
           " and the dynamic linker's path). Build reshard with MPI (Debian: apt-get install "
           "libopenmpi-dev openmpi-bin) so that libreshard_mpi.so.1 is built, install it next "
           "to libreshard or in its ../lib, or set RESHARD_BACKEND_DIR to its directory.";
  }
  return nullptr;
}

std::mutex g_mutex;
Loaded g_default;  // the default backend once loaded

const reshard_backend_mpi_v1_t* backend(const std::string& library, std::string* why) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (library.empty() && g_default.table != nullptr) return g_default.table;
  std::string path;
  const reshard_backend_mpi_v1_t* table = load(library, &path, why);
  if (table != nullptr && library.empty()) g_default = {table, path};
  return table;
}

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(const MpiTransportOptions& options) {
  std::string why;
  const reshard_backend_mpi_v1_t* table = backend(options.library, &why);
  if (table == nullptr) fail(ErrorCode::kUnsupported, why);
  int32_t code = static_cast<int32_t>(ErrorCode::kInternal);
  char message[1024] = {};
  Transport* raw = table->create(&options, &code, message, sizeof message);
  std::unique_ptr<Transport> transport(raw);
  if (!transport) {
    fail(static_cast<ErrorCode>(code),
         message[0] != '\0' ? std::string(message) : "MPI transport: creation failed");
  }
  return transport;
}

bool mpi_transport_available(std::string* why) {
  std::string reason;
  const bool ok = backend("", &reason) != nullptr;
  if (!ok && why != nullptr) *why = reason;
  return ok;
}

}  // namespace reshard
