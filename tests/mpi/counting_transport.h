// Test support: a transport decorator that instruments staging allocation.
// It forwards everything to the wrapped transport and counts, per device,
// the staging bytes alive at any moment and their peak, so tests can check
// the engine against the plan's staging budget independently of the
// engine's own statistics; optionally it shows every operation to a test.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "reshard/transport.h"

namespace reshard::testing {

struct StagingCounter {
  std::map<int64_t, int64_t> live;  // device -> bytes allocated now
  std::map<int64_t, int64_t> peak;  // device -> most bytes allocated at once
  int64_t allocations = 0;
  int64_t max_peak() const {
    int64_t m = 0;
    for (const auto& [d, v] : peak) m = std::max(m, v);
    return m;
  }
  void reset_peaks() { peak.clear(); }
};

class CountingTransport final : public Transport {
 public:
  CountingTransport(std::unique_ptr<Transport> inner, std::shared_ptr<StagingCounter> counter)
      : inner_(std::move(inner)), counter_(std::move(counter)) {}

  TransportInfo info() const override { return inner_->info(); }

  std::unique_ptr<StagingBlock> allocate_staging(int64_t device, int32_t ordinal,
                                                 int64_t bytes) override {
    auto block = inner_->allocate_staging(device, ordinal, bytes);
    int64_t& live = counter_->live[device];
    live += bytes;
    counter_->peak[device] = std::max(counter_->peak[device], live);
    ++counter_->allocations;
    return std::make_unique<Counted>(std::move(block), counter_, device, bytes);
  }

  std::unique_ptr<TransferBatch> start(std::span<const TransferOp> ops) override {
    if (on_op) {
      for (const TransferOp& op : ops) on_op(op);
    }
    return inner_->start(ops);
  }

  // Called with every operation before it is started (tests check what the
  // engine asks for).
  std::function<void(const TransferOp&)> on_op;
  void progress() override { inner_->progress(); }
  void finish(double timeout_seconds) override { inner_->finish(timeout_seconds); }
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> record,
                                                double timeout_seconds) override {
    return inner_->allgather(record, timeout_seconds);
  }
  [[noreturn]] void abort(int exit_code) noexcept override {
    inner_->abort(exit_code);
    std::_Exit(exit_code);  // not reached
  }

 private:
  class Counted final : public StagingBlock {
   public:
    Counted(std::unique_ptr<StagingBlock> inner, std::shared_ptr<StagingCounter> counter,
            int64_t device, int64_t bytes)
        : inner_(std::move(inner)), counter_(std::move(counter)), device_(device), bytes_(bytes) {}
    ~Counted() override { counter_->live[device_] -= bytes_; }
    std::byte* data() override { return inner_->data(); }
    int64_t bytes() const override { return inner_->bytes(); }

   private:
    std::unique_ptr<StagingBlock> inner_;
    std::shared_ptr<StagingCounter> counter_;
    int64_t device_;
    int64_t bytes_;
  };

  std::unique_ptr<Transport> inner_;
  std::shared_ptr<StagingCounter> counter_;
};

}  // namespace reshard::testing
