// Test support for the engine's device path on the CPU (transports that say
// their memory is not the host's and run their copies on the host): a batch
// that is complete at once, and the check every such test makes. Used by
// tests/core/engine_device_path_test.cc and tests/gpu/engine_emulation_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_transport.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

namespace reshard::testing {

// A one-process group has no transfers: every batch is complete.
class DoneBatch final : public TransferBatch {
 public:
  bool test() override { return true; }
  std::vector<int32_t> pending_peers() const override { return {}; }
};

// A one-process transport whose memory is "CUDA" but the host's: what a
// device-path test transport shares. Subclasses say what run_copies does
// (and, if they queue copies, order_streams, finish and staging).
class OneProcessDeviceTransport : public Transport {
 public:
  explicit OneProcessDeviceTransport(std::string name) : name_(std::move(name)) {}
  TransportInfo info() const override {
    TransportInfo i;
    i.name = name_;
    i.memory = MemoryKind::kCuda;
    i.rank = 0;
    i.size = 1;
    i.whole_plan = true;
    i.stream_ordered = true;
    return i;
  }
  std::unique_ptr<StagingBlock> allocate_staging(int64_t, int32_t, int64_t bytes) override {
    return std::make_unique<thread_transport::ThreadBlock>(bytes);
  }
  std::unique_ptr<TransferBatch> start(std::span<const TransferOp> ops) override {
    EXPECT_TRUE(ops.empty()) << "a one-process group has no peer";
    return std::make_unique<DoneBatch>();
  }
  void order_streams() override {}
  void finish(double) override {}
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> record,
                                                double) override {
    return {std::vector<std::byte>(record.begin(), record.end())};
  }
  [[noreturn]] void abort(int exit_code) noexcept override { std::_Exit(exit_code); }

 private:
  std::string name_;
};

// Runs `plan` on the host and through `engine` (process 0); the
// destinations must match byte for byte and meet the oracle.
inline void expect_same_as_host(Engine& engine, const Plan& plan) {
  OracleBuffers host = fill_sources(plan);
  OracleBuffers dev = host;
  execute_host(plan, host.views());
  const std::vector<TensorBuffers> views = dev.views();
  engine.execute(plan, 0, views, {.agreement = ExecuteOptions::Agreement::kSkip});
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    for (size_t e = 0; e < host.dst[t].size(); ++e) {
      ASSERT_EQ(dev.dst[t][e], host.dst[t][e])
          << "tensor " << t << " (" << plan.tensors()[t].name << ", "
          << dtype_name(plan.tensors()[t].dtype) << ") dst entry " << e;
    }
  }
  const OracleReport report = check_destinations(plan, dev);
  EXPECT_TRUE(report.ok()) << report.mismatches << " mismatches";
}

}  // namespace reshard::testing
