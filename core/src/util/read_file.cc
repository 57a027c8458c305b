#include "util/read_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "reshard/error.h"

namespace reshard {

std::string bytes_text(int64_t bytes) {
  char unit[32];
  std::snprintf(unit, sizeof unit, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  std::string digits = std::to_string(bytes), grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return std::string(unit) + " (" + grouped + " bytes)";
}

std::vector<char> read_file_capped(const std::string& path, int64_t max_bytes,
                                   std::string_view what, std::string_view raise,
                                   const std::function<void(std::string_view)>& head) {
  // `size`: "is 80.0 MiB (...)", or what is known of a stream.
  auto too_big = [&](const std::string& size) {
    fail(ErrorCode::kResourceExhausted, path,
         std::string(what) + " " + size + ", above the limit of " + bytes_text(max_bytes) +
             " for " + std::string(what) + "s; " + std::string(raise));
  };
  std::error_code ec;
  const bool regular = std::filesystem::is_regular_file(path, ec);
  if (regular) {
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > static_cast<uint64_t>(max_bytes))
      too_big("of " + bytes_text(static_cast<int64_t>(size)));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::kInvalidArgument, path, "cannot open " + std::string(what));
  std::vector<char> bytes;
  // Grow by reading in chunks, never past the cap plus one chunk.
  constexpr size_t kChunk = size_t{1} << 20;
  for (;;) {
    const size_t have = bytes.size();
    if (have > static_cast<uint64_t>(max_bytes))
      too_big("read past " + bytes_text(max_bytes) + " without ending");
    bytes.resize(have + kChunk);
    in.read(bytes.data() + have, static_cast<std::streamsize>(kChunk));
    bytes.resize(have + static_cast<size_t>(in.gcount()));
    if (in.bad()) fail(ErrorCode::kInvalidArgument, path, "cannot read " + std::string(what));
    if (have == 0 && head) head(std::string_view(bytes.data(), bytes.size()));
    if (in.eof()) break;
  }
  if (bytes.size() > static_cast<uint64_t>(max_bytes))
    too_big("of " + bytes_text(static_cast<int64_t>(bytes.size())));
  return bytes;
}

}  // namespace reshard
