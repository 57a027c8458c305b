// Loads transport backends at run time (docs/design.md §3.6): reshard
// links neither MPI nor CUDA; make_mpi_transport dlopens libreshard_mpi.so.1,
// which does. See backend_abi.h for the entry point. load_backend
// (backend_loader.h) is the search-and-dlopen loop of both backend loaders.
#include "exec/backend/backend_loader.h"

#include <dlfcn.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "exec/backend/backend_abi.h"
#include "exec/backend/backend_search.h"
#include "reshard/engine.h"
#include "reshard/error.h"

namespace reshard {

const void* load_backend(
    const BackendLibrary& lib, const std::string& library,
    const std::function<const void*(void* entry, std::string* problem)>& accept, std::string* path,
    std::string* why) {
  std::vector<std::string> names;
  if (library.empty()) {
    names.assign(lib.names.begin(), lib.names.end());
  } else {
    names.push_back(library);
  }
  std::vector<std::string> candidates;
  for (const std::string& name : names) {
    if (name.find('/') != std::string::npos) {
      candidates.push_back(name);
      continue;
    }
    for (const std::string& dir : backend_search_dirs(lib.anchor)) {
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
  const auto note = [&](const std::string& text) {
    failures += (failures.empty() ? "" : "; ") + text;
  };
  for (const std::string& c : candidates) {
    void* handle = dlopen(c.c_str(), lib.dlopen_flags);
    if (handle == nullptr) {
      const char* e = dlerror();
      // A bare name the linker cannot find is not worth reporting.
      const std::string text = e != nullptr ? e : "unknown error";
      if (c.find('/') != std::string::npos ||
          text.find("cannot open shared object file") == std::string::npos ||
          text.find(c) == std::string::npos) {
        note(text);
      }
      continue;
    }
    std::string problem;
    const void* table = accept(dlsym(handle, lib.symbol), &problem);
    if (table == nullptr) {
      note(c + ": " + problem);
      continue;  // handles stay open: unloading MPI or the CUDA runtime is never safe
    }
    if (path != nullptr) *path = c;
    return table;
  }
  if (!failures.empty()) {
    *why = std::string(lib.unavailable) + ": the backend could not be loaded: " + failures + ". " +
           lib.load_hint;
  } else {
    std::string searched;
    for (const std::string& d : backend_search_dirs(lib.anchor))
      searched += (searched.empty() ? "" : ", ") + d;
    *why = std::string(lib.unavailable) + ": " + names.front() + " was not found (searched " +
           (searched.empty() ? std::string("no directories") : searched) +
           " and the dynamic linker's path). " + lib.missing_hint;
  }
  return nullptr;
}

namespace {

constexpr const char* kMpiLibraryNames[] = {"libreshard_mpi.so.1", "libreshard_mpi.so"};

struct Loaded {
  const reshard_backend_mpi_v1_t* table = nullptr;
  std::string path;
};

// Loads the backend named `library` (a path, a name, or empty for the
// default names). Never throws; on failure returns null and sets `why`.
const reshard_backend_mpi_v1_t* load(const std::string& library, std::string* path,
                                     std::string* why) {
  BackendLibrary lib;
  lib.names = kMpiLibraryNames;
  lib.symbol = kMpiBackendSymbol;
  // RTLD_GLOBAL: Open MPI's run-time plugins expect libmpi's symbols to be
  // global. The backend itself exports nothing else.
  lib.dlopen_flags = RTLD_NOW | RTLD_GLOBAL;
  lib.anchor = reinterpret_cast<const void*>(&make_mpi_transport);
  lib.unavailable = "MPI transport unavailable";
  lib.load_hint =
      "The backend needs Open MPI's run-time libraries (Debian: apt-get install openmpi-bin "
      "libopenmpi3).";
  lib.missing_hint =
      "Build reshard with MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) so that "
      "libreshard_mpi.so.1 is built, install it next to libreshard or in its ../lib, or set "
      "RESHARD_BACKEND_DIR to its directory.";
  return load_backend_table<reshard_backend_mpi_v1_t>(
      lib, library,
      [](const reshard_backend_mpi_v1_t& table) -> std::string {
        if (table.transport_interface == kTransportInterfaceVersion) return "";
        return "built for transport interface " + std::to_string(table.transport_interface) +
               ", this reshard needs " + std::to_string(kTransportInterfaceVersion);
      },
      path, why);
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
