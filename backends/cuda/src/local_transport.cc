// The `cuda` local transport: one process owns every device of the plan,
// all buffers are CUDA memory. It is a Transport of one rank that the
// engine (reshard/engine.h) drives like any other, so in-process GPU
// execution runs exactly the schedule and copy path of the distributed
// engine over NCCL: every piece between two plan devices is a direct copy
// (the engine never sends to its own process), handed to run_copies and
// executed by the fused kernels on the stream of the destination's GPU,
// reading the source in place (same GPU, or a peer GPU).
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "device_context.h"
#include "transports.h"

namespace reshard::cuda_backend {
namespace {

class DoneBatch : public TransferBatch {
 public:
  bool test() override { return true; }  // stream-ordered
  std::vector<int32_t> pending_peers() const override { return {}; }
};

class LocalTransport : public Transport {
 public:
  explicit LocalTransport(const CudaLocalOptions& options) : devices_(options) {
    // Create the contexts of the caller's streams now, so that a bad
    // stream or device is reported at creation.
    for (const CudaStream& s : options.streams) devices_.get(s.ordinal);
  }

  TransportInfo info() const override {
    TransportInfo i;
    i.name = "cuda";
    i.memory = MemoryKind::kCuda;
    i.rank = 0;
    i.size = 1;
    i.stream_ordered = true;
    return i;
  }

  std::unique_ptr<StagingBlock> allocate_staging(int64_t device, int32_t ordinal,
                                                 int64_t bytes) override {
    (void)device;
    return devices_.get(ordinal).allocate(bytes);
  }

  // Only ever called with operations to this same rank (a plan on one
  // process has no others): sends and receives are matched in order and
  // become device-to-device copies on the receiver's stream.
  std::unique_ptr<TransferBatch> start(std::span<const TransferOp> ops) override {
    for (size_t i = 0; i < ops.size(); ++i) {
      const TransferOp& op = ops[i];
      const std::string field = "start: ops[" + std::to_string(i) + "]";
      if (op.peer != 0) {
        fail(ErrorCode::kInvalidArgument, field + ".peer: " + std::to_string(op.peer) +
                                              " is outside the cuda transport's 1 rank");
      }
      if (op.bytes < 0) fail(ErrorCode::kInvalidArgument, field + ".bytes: negative");
      if (op.bytes > 0 && op.data == nullptr) {
        fail(ErrorCode::kInvalidArgument, field + ".data: null (segments are not supported)");
      }
      (op.kind == TransferOp::Kind::kSend ? sends_ : recvs_).push_back(op);
    }
    while (!sends_.empty() && !recvs_.empty()) {
      const TransferOp s = sends_.front();
      const TransferOp r = recvs_.front();
      sends_.pop_front();
      recvs_.pop_front();
      if (s.bytes != r.bytes) {
        fail(ErrorCode::kMismatch, "cuda transport: a send of " + std::to_string(s.bytes) +
                                       " bytes met a receive of " + std::to_string(r.bytes));
      }
      if (s.bytes == 0) continue;
      DeviceContext& from = devices_.get(s.local_ordinal);
      DeviceContext& to = devices_.get(r.local_ordinal);
      DeviceGuard guard(to.ordinal());
      if (from.ordinal() != to.ordinal() || from.stream() != to.stream()) {
        EventPtr ready = from.record();
        check(cudaStreamWaitEvent(to.stream(), ready.get(), 0), "cudaStreamWaitEvent");
      }
      check(cudaMemcpyAsync(r.data, s.data, static_cast<size_t>(s.bytes), cudaMemcpyDefault,
                            to.stream()),
            "cudaMemcpyAsync(device to device)");
      if (from.ordinal() != to.ordinal() || from.stream() != to.stream()) {
        // The sender's buffer may be reused after its stream passes here.
        EventPtr copied = to.record();
        check(cudaStreamWaitEvent(from.stream(), copied.get(), 0), "cudaStreamWaitEvent");
      }
    }
    return std::make_unique<DoneBatch>();
  }

  void order_streams() override { devices_.order_streams(); }

  void run_copies(int64_t device, int32_t ordinal, std::span<const CopyOp> ops) override {
    run_keyed_copies(device, ordinal, ops, 0);
  }

  void run_keyed_copies(int64_t device, int32_t ordinal, std::span<const CopyOp> ops,
                        uint64_t key) override {
    (void)device;
    devices_.run_copies(ordinal, ops, key);
  }

  void finish(double timeout_seconds) override {
    if (!sends_.empty() || !recvs_.empty()) {
      const size_t s = sends_.size();
      const size_t r = recvs_.size();
      sends_.clear();
      recvs_.clear();
      fail(ErrorCode::kMismatch, "cuda transport: " + std::to_string(s) + " send(s) and " +
                                     std::to_string(r) + " receive(s) left unmatched");
    }
    if (!devices_.wait()) return;
    if (!devices_.wait_all(deadline_after(timeout_seconds))) {
      fail(ErrorCode::kTimeout,
           "cuda transport: the GPU work did not complete within " + seconds_text(timeout_seconds));
    }
  }

  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> record,
                                                double timeout_seconds) override {
    (void)timeout_seconds;
    return {std::vector<std::byte>(record.begin(), record.end())};
  }

  [[noreturn]] void abort(int exit_code) noexcept override {
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }

 private:
  DeviceSet devices_;
  std::deque<TransferOp> sends_;
  std::deque<TransferOp> recvs_;
};

}  // namespace

std::unique_ptr<Transport> make_local(const CudaLocalOptions& options) {
  return std::make_unique<LocalTransport>(options);
}

}  // namespace reshard::cuda_backend
