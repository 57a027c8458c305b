// reshard — plans as FlatBuffers bytes (docs/design.md §4, schema/plan.fbs).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reshard/plan.h"

namespace reshard {

// Version of the plan format written by encode_plan (Plan.version field).
inline constexpr uint32_t kPlanFormatVersion = 1;
// Plan::required_features bits. Stages: some message is in a stage above 0
// (its pieces read destination buffers an earlier stage wrote).
inline constexpr uint64_t kPlanFeatureStages = 1;
inline constexpr uint64_t kPlanKnownFeatures = kPlanFeatureStages;

struct EncodeOptions {
  // Which process parts to include: all parts the plan holds (default), or
  // just one (a worker's bytes).
  bool all_parts = true;
  int32_t process = 0;
};

// Deterministic: the same plan and options give the same bytes, and plans of
// the same inputs encode identically (PlanStats::plan_seconds is written as 0).
std::vector<uint8_t> encode_plan(const Plan& plan, const EncodeOptions& options = {});

// Verifies (FlatBuffers Verifier, then semantic checks: indices in range,
// boxes inside shapes, sizes and statistics consistent, fingerprint matches
// the inputs) and decodes. Any failure is Error(kCorrupt) with a message
// naming what failed; never a crash or an out-of-bounds read.
Plan decode_plan(std::span<const uint8_t> bytes);

}  // namespace reshard
