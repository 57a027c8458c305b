// Test helper: a plan executed on the host and every destination checked
// against the oracle.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"

namespace reshard {

// Executes `plan` on the host with `threads` threads and checks every
// destination against the oracle (call it under ASSERT_NO_FATAL_FAILURE or
// EXPECT_NO_FATAL_FAILURE).
inline void check_exact(const Plan& plan, int32_t threads = 1) {
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(plan, views, {threads});
  const OracleReport report = check_destinations(plan, buffers);
  ASSERT_TRUE(report.ok()) << report.mismatches << " mismatches";
}

}  // namespace reshard
