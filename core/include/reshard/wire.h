// reshard — plans as FlatBuffers bytes (docs/design.md §4, schema/plan.fbs).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "reshard/plan.h"

namespace reshard {

// Version of the plan format written by encode_plan (Plan.version field).
inline constexpr uint32_t kPlanFormatVersion = 1;
// Plan::required_features bits. Stages: some message is in a stage above 0
// (its pieces read destination buffers an earlier stage wrote).
inline constexpr uint64_t kPlanFeatureStages = 1;
// Scratch: some part holds scratch buffers (ProcessPart::scratch) or has
// pieces naming one (kScratchEntry; a holder sending into another device's
// scratch holds none itself).
inline constexpr uint64_t kPlanFeatureScratch = 2;
// Late summands: some piece of a message in a stage above 0 writes a scratch
// from a *source* entry (reads_source in plan.h: a band of a pre-reduction
// under a staging budget). A reader without this bit would take the entry
// for a destination entry.
inline constexpr uint64_t kPlanFeatureLateSummands = 4;
// Casts: some tensor's destination dtype differs from its source's
// (TensorSpec::dst_dtype, Tensor.dst_dtype): a reader without this bit would
// size the destination buffers and the messages in the source's dtype.
inline constexpr uint64_t kPlanFeatureCasts = 8;
// Block scales: some tensor names a scale tensor (TensorSpec::scale_tensor,
// Tensor.scale_tensor, reshard/block_scales.h): a reader without this bit
// would expect the scale tensor's source buffers from its caller and would
// cast without the scales.
inline constexpr uint64_t kPlanFeatureBlockScales = 16;
// MXFP8 scales: some scale tensor has dtype e8m0 (DType::kE8M0, 16): a
// reader without this bit would not know the dtype, or would quantise with
// the f32 rule.
inline constexpr uint64_t kPlanFeatureMxScales = 32;
// Staging: some scratch belongs to a tensor whose source is not partial (a
// copy-staging buffer, plan.h Scratch): written once per element in stage 0
// from source entries, read in later stages. A reader without this bit would
// take it for a reduction's scratch (filled with the identity, combined).
inline constexpr uint64_t kPlanFeatureStaging = 64;
// Sub-messages: some message has Message::sub above 0 (several messages of
// one stage, round, destination and source). A reader without this bit
// would take them for one message repeated out of order, and would make a
// later stage wait for all of them.
inline constexpr uint64_t kPlanFeatureSubMessages = 128;
inline constexpr uint64_t kPlanKnownFeatures =
    kPlanFeatureStages | kPlanFeatureScratch | kPlanFeatureLateSummands | kPlanFeatureCasts |
    kPlanFeatureBlockScales | kPlanFeatureMxScales | kPlanFeatureStaging | kPlanFeatureSubMessages;

// Authenticated plans: an HMAC-SHA-256 (OpenSSL's libcrypto) of the plan
// bytes under a key the caller supplies, carried in a trailer of
// kPlanMacTrailerBytes after the FlatBuffers bytes ("RSHPMAC1", the plan
// bytes' length as uint64 little-endian, then the 32-byte tag over
// everything before it; docs/design.md §4). Readers that know no MAC ignore
// the trailer; a reader given a key requires it. Keys are raw bytes,
// kPlanMacKeyMinBytes to kPlanMacKeyMaxBytes long.
inline constexpr size_t kPlanMacTrailerBytes = 48;
inline constexpr size_t kPlanMacKeyMinBytes = 16;
inline constexpr size_t kPlanMacKeyMaxBytes = 1024;

struct EncodeOptions {
  // Which process parts to include: all parts the plan holds (default), or
  // just one (a worker's bytes).
  bool all_parts = true;
  int32_t process = 0;
  // Sign the bytes with this key (sign_plan_bytes). Absent: unsigned.
  std::optional<std::vector<uint8_t>> mac_key = std::nullopt;
};

struct DecodeOptions {
  // Require a MAC made with this key (open_plan_bytes). Absent: none is
  // required, and a MAC the bytes carry is not checked.
  std::optional<std::vector<uint8_t>> mac_key = std::nullopt;
};

// Throws kInvalidArgument naming `field` unless `key` is a usable MAC key
// (not empty, kPlanMacKeyMinBytes to kPlanMacKeyMaxBytes).
void check_plan_mac_key(const std::vector<uint8_t>& key, const char* field);

// True when `bytes` end with a MAC trailer (whatever its key).
bool plan_bytes_signed(std::span<const uint8_t> bytes);

// `plan_bytes` followed by the trailer carrying their MAC under `key`.
// kInvalidArgument naming mac_key for a bad key, plan_bytes when they are
// already signed.
std::vector<uint8_t> sign_plan_bytes(std::span<const uint8_t> plan_bytes,
                                     const std::vector<uint8_t>& key);

// The plan bytes of `bytes` (without the trailer, if any). With a key, the
// MAC is checked first, in constant time: kCorrupt naming `mac` when it is
// missing ("missing: the plan is not signed") or does not match;
// kInvalidArgument naming mac_key for a bad key. Without a key, a trailer
// is removed unchecked.
std::span<const uint8_t> open_plan_bytes(std::span<const uint8_t> bytes,
                                         const std::optional<std::vector<uint8_t>>& key);

// Deterministic: the same plan and options give the same bytes, and plans of
// the same inputs encode identically (PlanStats::plan_seconds is written as 0).
std::vector<uint8_t> encode_plan(const Plan& plan, const EncodeOptions& options = {});

// encode_plan's bytes (signed the same way) handed to `write` once, where
// the builder finished them, rather than returned in a vector: no zeroed
// allocation of the size bound and no move to its front. `write` must not
// keep the span. For writing a large plan to a file.
void encode_plan_to(const Plan& plan, const EncodeOptions& options,
                    const std::function<void(std::span<const uint8_t>)>& write);

// The digest a plan buffer stores beside each process part
// (ProcessPart.digest in schema/plan.fbs): a 64-bit hash of the plan's
// fingerprint and every field of the part (process, pieces, messages,
// regions), never 0. Changing any single field of a part changes it. It
// detects damage and edits, it does not authenticate: the algorithm is
// public, so whoever can write a plan file can recompute it.
uint64_t part_digest(uint64_t fingerprint, const ProcessPart& part);

// Verifies (FlatBuffers Verifier, then semantic checks: indices in range,
// boxes inside shapes, sizes and statistics consistent, fingerprint matches
// the inputs, each part's digest matches the part; parts of plans written
// before digests existed carry none and are accepted unchecked) and decodes.
// Then what each part does, since a digest anyone can recompute proves
// nothing: every destination element on the part's devices written exactly
// once per summand it takes (once by a copy, or once by each summand of a
// reduction), no piece sent twice, no element read in a stage that writes
// it or an earlier one (core/src/wire/exact.h; summands that reach a
// reduction through another part's scratch are checked for duplicates, not
// completeness). Any failure is
// Error(kCorrupt) with a message naming what failed; never a crash or an out-of-bounds read.
Plan decode_plan(std::span<const uint8_t> bytes);
// The same after open_plan_bytes(bytes, options.mac_key): with a key, a
// plan without a MAC, or with one that does not match, is kCorrupt naming
// `mac` before anything is decoded.
Plan decode_plan(std::span<const uint8_t> bytes, const DecodeOptions& options);

// The largest plan buffer the format allows (2 GiB - 1), load_plan's default
// cap on a plan file's size.
inline constexpr int64_t kMaxPlanFileBytes = (int64_t{1} << 31) - 1;
// Reads a plan file and decodes it. The file is checked before it is read
// whole: a file that does not start like a plan (its file identifier) is
// kCorrupt, one larger than `max_bytes` kResourceExhausted naming the limit;
// an unreadable one kInvalidArgument. Every message starts with the path.
Plan load_plan(const std::string& path, int64_t max_bytes = kMaxPlanFileBytes);
Plan load_plan(const std::string& path, int64_t max_bytes, const DecodeOptions& options);

}  // namespace reshard
