// Authenticated plans (reshard/wire.h, docs/design.md §4): HMAC-SHA-256
// (OpenSSL's libcrypto) over the plan bytes, carried in a trailer after the
// FlatBuffers bytes, which every reader of the format ignores.
//
//   plan bytes (n) | "RSHPMAC1" | n (uint64 LE) | tag (32)
//
// The tag covers everything before it: the plan bytes and the trailer's
// magic and length.
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <cstring>
#include <string>

#include "reshard/error.h"
#include "reshard/wire.h"

namespace reshard {
namespace {

constexpr char kMagic[8] = {'R', 'S', 'H', 'P', 'M', 'A', 'C', '1'};
constexpr size_t kTagBytes = 32;

void check_key(const std::vector<uint8_t>& key, const char* field) {
  if (key.empty())
    fail(ErrorCode::kInvalidArgument, field,
         "is empty (a MAC key has at least " + std::to_string(kPlanMacKeyMinBytes) + " bytes)");
  if (key.size() < kPlanMacKeyMinBytes)
    fail(ErrorCode::kInvalidArgument, field,
         std::to_string(key.size()) + " bytes is shorter than the minimum of " +
             std::to_string(kPlanMacKeyMinBytes) + " (use random bytes: head -c 32 /dev/urandom)");
  if (key.size() > kPlanMacKeyMaxBytes)
    fail(ErrorCode::kInvalidArgument, field,
         std::to_string(key.size()) + " bytes exceeds the maximum of " +
             std::to_string(kPlanMacKeyMaxBytes));
}

std::array<uint8_t, kTagBytes> tag_of(std::span<const uint8_t> covered,
                                      const std::vector<uint8_t>& key) {
  std::array<uint8_t, kTagBytes> tag{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), covered.data(), covered.size(),
           tag.data(), &length) == nullptr ||
      length != kTagBytes)
    fail(ErrorCode::kInternal, "mac", "HMAC-SHA-256 failed in libcrypto");
  return tag;
}

// Where the trailer starts (the plan bytes' length), or npos without one.
size_t trailer_at(std::span<const uint8_t> bytes) {
  if (bytes.size() < kPlanMacTrailerBytes + 8) return std::string::npos;
  const size_t n = bytes.size() - kPlanMacTrailerBytes;
  if (std::memcmp(bytes.data() + n, kMagic, sizeof(kMagic)) != 0) return std::string::npos;
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | bytes[n + 8 + static_cast<size_t>(i)];
  return length == n ? n : std::string::npos;
}

}  // namespace

void check_plan_mac_key(const std::vector<uint8_t>& key, const char* field) {
  check_key(key, field);
}

bool plan_bytes_signed(std::span<const uint8_t> bytes) {
  return trailer_at(bytes) != std::string::npos;
}

std::vector<uint8_t> sign_plan_bytes(std::span<const uint8_t> plan_bytes,
                                     const std::vector<uint8_t>& key) {
  check_key(key, "mac_key");
  if (plan_bytes_signed(plan_bytes))
    fail(ErrorCode::kInvalidArgument, "plan_bytes", "already carry a MAC (sign the plan once)");
  std::vector<uint8_t> out(plan_bytes.begin(), plan_bytes.end());
  const size_t n = out.size();
  out.insert(out.end(), kMagic, kMagic + sizeof(kMagic));
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(uint64_t{n} >> (8 * i)));
  const auto tag = tag_of(out, key);
  out.insert(out.end(), tag.begin(), tag.end());
  return out;
}

std::span<const uint8_t> open_plan_bytes(std::span<const uint8_t> bytes,
                                         const std::optional<std::vector<uint8_t>>& key) {
  const size_t n = trailer_at(bytes);
  if (!key) return n == std::string::npos ? bytes : bytes.first(n);
  check_key(*key, "mac_key");
  if (n == std::string::npos)
    fail(ErrorCode::kCorrupt, "mac",
         "missing: the plan is not signed, and a key was given (sign it with the key: reshard "
         "plan --key-file, or EncodeOptions::mac_key)");
  const auto want = tag_of(bytes.first(bytes.size() - kTagBytes), *key);
  if (CRYPTO_memcmp(want.data(), bytes.data() + bytes.size() - kTagBytes, kTagBytes) != 0)
    fail(ErrorCode::kCorrupt, "mac",
         "does not match: the plan was signed with another key, or edited after it was signed");
  return bytes.first(n);
}

}  // namespace reshard
