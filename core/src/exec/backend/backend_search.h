// Internal: where transport backends (libreshard_mpi.so, libreshard_cuda.so)
// are looked for, shared by their loaders.
#pragma once

#include <string>
#include <vector>

namespace reshard {

// Directories to search, most specific first, without duplicates:
// $RESHARD_BACKEND_DIR (colon-separated); the directory of the library or
// executable that holds `anchor` (an address inside reshard's core) and its
// ../<libdir>; the executable's directory and its ../<libdir>.
std::vector<std::string> backend_search_dirs(const void* anchor);

}  // namespace reshard
