// Where transport backends are looked for (see backend_search.h).
#include "exec/backend/backend_search.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifndef RESHARD_INSTALL_LIBDIR
#define RESHARD_INSTALL_LIBDIR "lib"
#endif

namespace reshard {
namespace {

std::string parent_of(const std::string& file) {
  return std::filesystem::path(file).parent_path().string();
}

}  // namespace

std::vector<std::string> backend_search_dirs(const void* anchor) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("RESHARD_BACKEND_DIR"); env != nullptr && *env != '\0') {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = std::min(list.find(':', start), list.size());
      if (end > start) dirs.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  const auto add_with_libdir = [&](const std::string& dir) {
    if (dir.empty()) return;
    dirs.push_back(dir);
    dirs.push_back(dir + "/../" RESHARD_INSTALL_LIBDIR);
    if (std::string(RESHARD_INSTALL_LIBDIR) != "lib") dirs.push_back(dir + "/../lib");
  };
  // The library or executable reshard's core is linked into.
  Dl_info info{};
  if (dladdr(anchor, &info) != 0 && info.dli_fname != nullptr) {
    std::error_code ec;
    const auto real = std::filesystem::canonical(info.dli_fname, ec);
    add_with_libdir(parent_of(ec ? std::string(info.dli_fname) : real.string()));
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) add_with_libdir(parent_of(exe.string()));
  // Without duplicates, first occurrence first.
  std::vector<std::string> unique;
  for (const std::string& d : dirs) {
    if (std::find(unique.begin(), unique.end(), d) == unique.end()) unique.push_back(d);
  }
  return unique;
}

}  // namespace reshard
