// The one backend loader (docs/design.md §3.6, packaging): the registry of
// reshard/backend.h and load_backend, the search, dlopen and version check
// of every run-time loaded transport backend. reshard links neither MPI nor
// CUDA; the factories (backend_factories.cc) call load_backend.
#include <dlfcn.h>

#include <array>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "exec/backend/backend_search.h"
#include "reshard/backend.h"
#include "reshard/error.h"

namespace reshard {
namespace {

constexpr const char* kMpiLibraryNames[] = {"libreshard_mpi.so.1", "libreshard_mpi.so"};
constexpr const char* kCudaLibraryNames[] = {"libreshard_cuda.so.1", "libreshard_cuda.so"};

// An entry symbol called as what it is, `const Table* (*)(void)`.
template <class Table>
const void* call_entry(void* symbol) {
  using Entry = const Table* (*)(void);
  return reinterpret_cast<Entry>(symbol)();
}

const std::array<BackendDescriptor, 2> kRegistry = {{
    {BackendKind::kMpi, "mpi", "mpi", kMpiLibraryNames, "reshard_backend_mpi_v1",
     static_cast<uint32_t>(sizeof(reshard_backend_mpi_v1_t)),
     &call_entry<reshard_backend_mpi_v1_t>},
    {BackendKind::kCuda, "cuda", "cuda, nccl", kCudaLibraryNames, "reshard_backend_cuda_v1",
     static_cast<uint32_t>(sizeof(reshard_backend_cuda_v1_t)),
     &call_entry<reshard_backend_cuda_v1_t>},
}};

// How each backend is opened and what its messages say.
struct LoadPolicy {
  int dlopen_flags = 0;
  const char* unavailable = nullptr;  // "<unavailable>: ..."
  std::string load_hint;              // after "could not be loaded: <failures>."
  std::string missing_hint;           // after "<name> was not found (...)."
};

LoadPolicy policy(BackendKind kind) {
  LoadPolicy p;
  if (kind == BackendKind::kMpi) {
    // RTLD_GLOBAL: Open MPI's run-time plugins expect libmpi's symbols to be
    // global. The backend itself exports nothing else.
    p.dlopen_flags = RTLD_NOW | RTLD_GLOBAL;
    p.unavailable = "MPI transport unavailable";
    p.load_hint =
        "The backend needs Open MPI's run-time libraries (Debian: apt-get install openmpi-bin "
        "libopenmpi3).";
    p.missing_hint =
        "Build reshard with MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) so that "
        "libreshard_mpi.so.1 is built, install it next to libreshard or in its ../lib, or set "
        "RESHARD_BACKEND_DIR to its directory.";
  } else {
    // RTLD_LOCAL: the backend exports one symbol; its NCCL is found by
    // soname, so a libnccl.so.2 the host framework already loaded is reused.
    p.dlopen_flags = RTLD_NOW | RTLD_LOCAL;
    p.unavailable = "CUDA transports unavailable";
    p.load_hint =
        "It needs the CUDA driver (libcuda.so.1) and NCCL (libnccl.so.2, e.g. on "
        "LD_LIBRARY_PATH).";
    p.missing_hint =
        "Build reshard on a machine with the CUDA toolkit (nvcc) and NCCL (cmake "
        "-DRESHARD_CUDA=ON) and install libreshard_cuda.so.1 next to libreshard, or set "
        "RESHARD_BACKEND_DIR to its directory.";
  }
  return p;
}

// "" when the table fits this reshard, otherwise what differs. Every table
// begins with struct_size and transport_interface.
std::string version_problem(const BackendDescriptor& d, const void* table) {
  struct Head {
    uint32_t struct_size;
    uint32_t transport_interface;
  };
  const auto* head = static_cast<const Head*>(table);
  if (head->struct_size < d.table_size) return std::string("no usable ") + d.entry_symbol;
  if (d.kind == BackendKind::kCuda) {
    const auto* t = static_cast<const reshard_backend_cuda_v1_t*>(table);
    if (t->transport_interface == kTransportInterfaceVersion &&
        t->options_version == kCudaOptionsVersion) {
      return "";
    }
    return "built for transport interface " + std::to_string(t->transport_interface) +
           " and CUDA options " + std::to_string(t->options_version) + ", this reshard needs " +
           std::to_string(kTransportInterfaceVersion) + " and " +
           std::to_string(kCudaOptionsVersion);
  }
  if (head->transport_interface == kTransportInterfaceVersion) return "";
  return "built for transport interface " + std::to_string(head->transport_interface) +
         ", this reshard needs " + std::to_string(kTransportInterfaceVersion);
}

// An address inside reshard: backends are searched next to the library or
// executable that holds it.
const void* anchor() { return reinterpret_cast<const void*>(&registered_backends); }

// Tries, in order: names with a '/' as given; for bare names, each search
// directory holding the file, then the dynamic linker's own search. The
// first library whose entry point returns a table that passes
// version_problem wins. Never throws.
const void* open_backend(const BackendDescriptor& d, const std::string& library, std::string* path,
                         std::string* why) {
  const LoadPolicy p = policy(d.kind);
  std::vector<std::string> names;
  if (library.empty()) {
    names.assign(d.library_names.begin(), d.library_names.end());
  } else {
    names.push_back(library);
  }
  const std::vector<std::string> dirs = backend_search_dirs(anchor());
  std::vector<std::string> candidates;
  for (const std::string& name : names) {
    if (name.find('/') != std::string::npos) {
      candidates.push_back(name);
      continue;
    }
    for (const std::string& dir : dirs) {
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
    void* handle = dlopen(c.c_str(), p.dlopen_flags);
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
    void* symbol = dlsym(handle, d.entry_symbol);
    const void* table = symbol != nullptr ? d.call_entry(symbol) : nullptr;
    const std::string problem =
        table == nullptr ? std::string("no usable ") + d.entry_symbol : version_problem(d, table);
    if (!problem.empty()) {
      note(c + ": " + problem);
      continue;  // handles stay open: unloading MPI or the CUDA runtime is never safe
    }
    if (path != nullptr) *path = c;
    return table;
  }
  if (!failures.empty()) {
    *why = std::string(p.unavailable) + ": the backend could not be loaded: " + failures + ". " +
           p.load_hint;
  } else {
    std::string searched;
    for (const std::string& dir : dirs) searched += (searched.empty() ? "" : ", ") + dir;
    *why = std::string(p.unavailable) + ": " + names.front() + " was not found (searched " +
           (searched.empty() ? std::string("no directories") : searched) +
           " and the dynamic linker's path). " + p.missing_hint;
  }
  return nullptr;
}

struct Loaded {
  const void* table = nullptr;
  std::string path;
};

std::mutex g_mutex;
std::array<Loaded, kRegistry.size()> g_default;  // default libraries once loaded

}  // namespace

std::span<const BackendDescriptor> registered_backends() { return kRegistry; }

const BackendDescriptor& backend_descriptor(BackendKind kind) {
  const auto i = static_cast<size_t>(kind);
  if (i >= kRegistry.size()) {
    fail(ErrorCode::kInvalidArgument,
         "unknown backend kind " + std::to_string(static_cast<int32_t>(kind)));
  }
  return kRegistry[i];
}

const void* load_backend(BackendKind kind, const std::string& library, std::string* why,
                         std::string* path) {
  const auto i = static_cast<size_t>(kind);
  if (i >= kRegistry.size()) {
    if (why != nullptr) *why = "unknown backend kind " + std::to_string(static_cast<int32_t>(kind));
    return nullptr;
  }
  std::string reason;
  std::string opened;
  const void* table = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (library.empty() && g_default[i].table != nullptr) {
      table = g_default[i].table;
      opened = g_default[i].path;
    } else {
      table = open_backend(kRegistry[i], library, &opened, &reason);
      if (table != nullptr && library.empty()) g_default[i] = {table, opened};
    }
  }
  if (table == nullptr) {
    if (why != nullptr) *why = reason;
    return nullptr;
  }
  if (path != nullptr) *path = opened;
  return table;
}

}  // namespace reshard
