// The `local` transport (docs/design.md §3.4): host memory, one process
// holding every device of a plan. The engine executes whole plans over it
// (kAllProcesses), every message a direct copy between buffers, so it never
// transfers anything; it provides what the engine asks of any transport:
// memory, a one-rank allgather, a completed empty batch.
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/transport.h"

namespace reshard {
namespace {

class HostBlock final : public StagingBlock {
 public:
  explicit HostBlock(int64_t bytes)
      : bytes_(bytes),
        data_(static_cast<std::byte*>(
            ::operator new (static_cast<size_t>(bytes < 1 ? 1 : bytes), std::align_val_t{64}))) {}
  ~HostBlock() override { ::operator delete (data_, std::align_val_t{64}); }
  std::byte* data() override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  int64_t bytes_;
  std::byte* data_;
};

class DoneBatch final : public TransferBatch {
 public:
  bool test() override { return true; }
  std::vector<int32_t> pending_peers() const override { return {}; }
};

class LocalTransport final : public Transport {
 public:
  TransportInfo info() const override {
    TransportInfo info;
    info.name = "local";
    info.memory = MemoryKind::kHost;
    info.rank = 0;
    info.size = 1;
    info.whole_plan = true;
    return info;
  }

  std::unique_ptr<StagingBlock> allocate_staging(int64_t device, int32_t ordinal,
                                                 int64_t bytes) override {
    (void)device;
    (void)ordinal;
    try {
      return std::make_unique<HostBlock>(bytes);
    } catch (const std::bad_alloc&) {
      fail(ErrorCode::kOutOfMemory,
           "local transport: cannot allocate " + std::to_string(bytes) + " bytes");
    }
  }

  std::unique_ptr<TransferBatch> start(std::span<const TransferOp> ops) override {
    if (!ops.empty()) {
      fail(ErrorCode::kInternal, "local transport: asked to transfer " +
                                     std::to_string(ops.size()) +
                                     " operation(s); a one-process group has no peer");
    }
    return std::make_unique<DoneBatch>();
  }

  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> record,
                                                double timeout_seconds) override {
    (void)timeout_seconds;
    return {std::vector<std::byte>(record.begin(), record.end())};
  }

  [[noreturn]] void abort(int exit_code) noexcept override { std::_Exit(exit_code); }
};

}  // namespace

std::unique_ptr<Transport> make_local_transport() { return std::make_unique<LocalTransport>(); }

}  // namespace reshard
