// Internal: reading an input file whole, with a cap checked before the
// memory is taken (a regular file by its size, anything else — a pipe,
// /dev/zero — as it is read).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace reshard {

// The bytes of `path`. Errors name the path: kInvalidArgument when it cannot
// be opened or read, kResourceExhausted when it holds more than `max_bytes`
// (the message says `what` the file is and `raise`, how to lift the cap).
// `head`, when given, sees the first bytes read (up to 1 MiB) before the
// rest is read, and may throw: a file that is not what it should be is
// refused before it is read whole.
std::vector<char> read_file_capped(const std::string& path, int64_t max_bytes,
                                   std::string_view what, std::string_view raise,
                                   const std::function<void(std::string_view)>& head = {});

// "64.0 MiB (67,108,864 bytes)"
std::string bytes_text(int64_t bytes);

}  // namespace reshard
