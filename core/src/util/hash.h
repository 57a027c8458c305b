// Internal: stable FNV-1a hashing (little-endian integers, explicit lengths).
#pragma once

#include <cstdint>
#include <string_view>

namespace reshard {

class Hasher {
 public:
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) {
    uint64_t u;
    static_assert(sizeof u == sizeof v);
    __builtin_memcpy(&u, &v, 8);
    u64(u);
  }
  void str(std::string_view s) {
    u64(s.size());
    for (char c : s) byte(static_cast<uint8_t>(c));
  }
  uint64_t value() const { return h_; }

 private:
  void byte(uint8_t b) {
    h_ ^= b;
    h_ *= 0x100000001b3ull;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace reshard
