// Internal: loading a transport backend library at run time (docs/design.md §3.6,
// packaging), shared by the MPI loader (backend_loader.cc) and the CUDA
// loader (backends/cuda/loader/cuda_loader.cc). Each backend exports one
// entry point returning a static table (backend_abi.h); only the table's
// type, the library names, the dlopen flags and the messages differ.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>

namespace reshard {

struct BackendLibrary {
  std::span<const char* const> names;  // default file names, preferred first
  const char* symbol = nullptr;        // the entry point
  int dlopen_flags = 0;                // RTLD_NOW | RTLD_GLOBAL or RTLD_LOCAL
  const void* anchor = nullptr;        // an address in reshard (backend_search_dirs)
  // Messages: "<unavailable>: the backend could not be loaded: <failures>.
  // <load_hint>" when a candidate was found but refused, "<unavailable>:
  // <name> was not found (searched <dirs> and the dynamic linker's path).
  // <missing_hint>" when none was found.
  const char* unavailable = nullptr;
  std::string load_hint;
  std::string missing_hint;
};

// Loads `library` (a path, a file name, or empty for lib.names), trying in
// order: names with a '/' as given; for bare names, each directory of
// backend_search_dirs(lib.anchor) holding the file, then the dynamic
// linker's own search. For each library that opens, `accept(entry)` gets the
// address of lib.symbol (null when missing) and returns the table, or null
// and sets its argument to what is wrong ("no usable <symbol>", a version
// mismatch). Returns the first accepted table and sets *path (if given) to
// the candidate; otherwise null and *why. Never throws. Libraries are never
// unloaded (neither MPI nor the CUDA runtime supports it).
const void* load_backend(
    const BackendLibrary& lib, const std::string& library,
    const std::function<const void*(void* entry, std::string* problem)>& accept, std::string* path,
    std::string* why);

// load_backend for an entry point `const Table* (*)(void)`: a table is
// accepted when it is non-null, at least sizeof(Table) bytes
// (Table::struct_size) and `version_problem(table)` returns "".
template <class Table, class VersionProblem>
const Table* load_backend_table(const BackendLibrary& lib, const std::string& library,
                                VersionProblem&& version_problem, std::string* path,
                                std::string* why) {
  const auto accept = [&](void* entry, std::string* problem) -> const void* {
    using Fn = const Table* (*)(void);
    const Table* table = entry != nullptr ? reinterpret_cast<Fn>(entry)() : nullptr;
    if (table == nullptr || table->struct_size < sizeof(Table)) {
      *problem = std::string("no usable ") + lib.symbol;
      return nullptr;
    }
    *problem = version_problem(*table);
    return problem->empty() ? table : nullptr;
  };
  return static_cast<const Table*>(load_backend(lib, library, accept, path, why));
}

}  // namespace reshard
