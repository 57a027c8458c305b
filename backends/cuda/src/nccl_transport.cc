// The `nccl` transport (docs/design.md §3.4): CUDA memory, one communicator per
// local GPU, each batch of the engine one ncclGroupStart/ncclGroupEnd group
// of ncclSend/ncclRecv on the GPUs' streams, copies by the fused kernels on
// the same streams. Everything a GPU does is ordered on its one stream, so
// the engine issues a whole execution without waiting and finish() waits
// once, on events, with a deadline. A message goes to the NCCL rank of the
// GPU holding its remote device: (TransferOp::peer, remote_ordinal) looked
// up in the table the ranks exchange at creation (nccl_routing.h), so peer
// processes may have several GPUs.
//
// No hangs: communicators reshard creates are non-blocking (ncclConfig_t
// blocking = 0), so group calls return while NCCL connects and every wait
// here is a polling loop with a deadline that also watches
// ncclCommGetAsyncError. On expiry or an NCCL error the communicators are
// aborted (ncclCommAbort, which also ends kernels stuck on a dead peer) and
// the transport refuses further work. Caller communicators are aborted only
// with abort_borrowed_on_failure.
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "device_context.h"
#include "nccl_routing.h"
#include "transports.h"

namespace reshard::cuda_backend {

static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<NcclUniqueId>,
              "NcclUniqueId must hold an ncclUniqueId");

namespace {

constexpr int32_t kMagic = 0x52534e43;  // "RSNC"

std::string nccl_text(ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string s = std::string(ncclGetErrorString(r));
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') s += ": " + std::string(last);
  }
  return s;
}

// Finalises (bounded) and destroys a communicator reshard created; aborts
// it when finalising fails or takes too long.
struct OwnedCommDeleter {
  double timeout_seconds = 10;
  void operator()(ncclComm* comm) const noexcept {
    ncclResult_t r = ncclCommFinalize(comm);
    const auto deadline = deadline_after(timeout_seconds);
    Backoff backoff;
    while (r == ncclInProgress || r == ncclSuccess) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
      if (state == ncclSuccess) {
        ncclCommDestroy(comm);
        return;
      }
      if (state != ncclInProgress || Clock::now() > deadline) break;
      backoff.pause(deadline);
    }
    ncclCommAbort(comm);
  }
};
using OwnedComm = std::unique_ptr<ncclComm, OwnedCommDeleter>;

struct Comm {
  int32_t ordinal = 0;
  ncclComm_t comm = nullptr;  // owned.get() or the caller's
  OwnedComm owned;
  int32_t nccl_rank = 0;
  DeviceContext* ctx = nullptr;
  DevicePtr scratch;  // control-plane buffer
  size_t scratch_bytes = 0;
};

// What start() issued, until it completed.
struct Issued {
  std::vector<std::pair<int, EventPtr>> events;  // per GPU involved
  std::vector<int32_t> peers;
  bool done() const {
    for (const auto& [ordinal, e] : events) {
      if (cudaEventQuery(e.get()) != cudaSuccess) return false;
    }
    return true;
  }
};

class Batch : public TransferBatch {
 public:
  explicit Batch(std::shared_ptr<Issued> issued) : issued_(std::move(issued)) {}
  bool test() override { return true; }  // ordered before later work on the streams
  std::vector<int32_t> pending_peers() const override {
    if (!issued_ || issued_->done()) return {};
    return issued_->peers;
  }

 private:
  std::shared_ptr<Issued> issued_;
};

class NcclTransport : public Transport {
 public:
  explicit NcclTransport(const NcclTransportOptions& options)
      : options_(options), devices_(options) {
    set_up_comms();
    exchange_ranks();
  }

  ~NcclTransport() override {
    // Streams must not run NCCL work of communicators being destroyed; a
    // bounded wait, then the owned communicators finalise (or abort).
    try {
      if (!aborted_) devices_.wait_all(deadline_after(std::min(options_.timeout_seconds, 30.0)));
    } catch (const Error&) {
      // A failed stream: the communicators' finalisation aborts if needed.
    }
    comms_.clear();
  }

  TransportInfo info() const override {
    TransportInfo i;
    i.name = "nccl";
    i.memory = MemoryKind::kCuda;
    i.rank = process_;
    i.size = processes_;
    i.stream_ordered = true;
    return i;
  }

  std::unique_ptr<StagingBlock> allocate_staging(int64_t device, int32_t ordinal,
                                                 int64_t bytes) override {
    (void)device;
    usable();
    return comm_of(ordinal, "allocate_staging").ctx->allocate(bytes);
  }

  std::unique_ptr<TransferBatch> start(std::span<const TransferOp> ops) override {
    usable();
    struct Call {
      const TransferOp* op;
      Comm* comm;
      int32_t peer_rank;
    };
    std::vector<Call> calls;
    auto issued = std::make_shared<Issued>();
    for (size_t i = 0; i < ops.size(); ++i) {
      const TransferOp& op = ops[i];
      const std::string field = "start: ops[" + std::to_string(i) + "]";
      if (op.peer < 0 || op.peer >= processes_) {
        fail(ErrorCode::kInvalidArgument, field + ".peer: " + std::to_string(op.peer) +
                                              " is outside the nccl transport's " +
                                              std::to_string(processes_) + " ranks");
      }
      if (op.bytes < 0) fail(ErrorCode::kInvalidArgument, field + ".bytes: negative");
      if (op.bytes > 0 && op.data == nullptr) {
        fail(ErrorCode::kInvalidArgument, field + ".data: null (segments are not supported)");
      }
      issued->peers.push_back(op.peer);
      if (op.bytes == 0) continue;  // both sides skip it alike
      Comm& c = comm_of(op.local_ordinal, field);
      if (options_.check_pointers) {
        devices_.check_pointer(c.ordinal, op.data, field + ".data");
      }
      calls.push_back(
          {&op, &c, routing_.peer_rank(op.peer, op.remote_ordinal, op.remote_device, field)});
    }
    std::sort(issued->peers.begin(), issued->peers.end());
    issued->peers.erase(std::unique(issued->peers.begin(), issued->peers.end()),
                        issued->peers.end());
    if (calls.empty()) return std::make_unique<Batch>(nullptr);
    // Receives are posted before sends (the order inside a group does not
    // matter to NCCL; it keeps the pairing easy to read in traces).
    std::stable_sort(calls.begin(), calls.end(), [](const Call& a, const Call& b) {
      return a.op->kind == TransferOp::Kind::kRecv && b.op->kind == TransferOp::Kind::kSend;
    });
    std::set<Comm*> involved;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) failure(ErrorCode::kTransport, "ncclGroupStart: " + nccl_text(r));
    for (const Call& call : calls) {
      const TransferOp& op = *call.op;
      const auto count = static_cast<size_t>(op.bytes);
      if (op.kind == TransferOp::Kind::kSend) {
        r = ncclSend(op.data, count, ncclUint8, call.peer_rank, call.comm->comm,
                     call.comm->ctx->stream());
      } else {
        r = ncclRecv(op.data, count, ncclUint8, call.peer_rank, call.comm->comm,
                     call.comm->ctx->stream());
      }
      involved.insert(call.comm);
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        failure(ErrorCode::kTransport,
                std::string(op.kind == TransferOp::Kind::kSend ? "ncclSend" : "ncclRecv") +
                    " to NCCL rank " + std::to_string(call.peer_rank) + ": " +
                    nccl_text(r, call.comm->comm));
      }
    }
    r = ncclGroupEnd();
    settle(r, {involved.begin(), involved.end()}, deadline_after(options_.timeout_seconds),
           "sending to and receiving from rank(s) " + ranks_text(issued->peers));
    for (Comm* c : involved) issued->events.emplace_back(c->ordinal, c->ctx->record());
    outstanding_.push_back(issued);
    while (!outstanding_.empty() && outstanding_.front()->done()) outstanding_.pop_front();
    return std::make_unique<Batch>(std::move(issued));
  }

  void order_streams() override {
    usable();
    devices_.order_streams();
  }

  void run_copies(int64_t device, int32_t ordinal, std::span<const CopyOp> ops) override {
    run_keyed_copies(device, ordinal, ops, 0);
  }

  void run_keyed_copies(int64_t device, int32_t ordinal, std::span<const CopyOp> ops,
                        uint64_t key) override {
    (void)device;
    usable();
    devices_.run_copies(comm_of(ordinal, "run_copies").ordinal, ops, key);
  }

  void finish(double timeout_seconds) override {
    usable();
    if (!devices_.wait()) return;
    if (!devices_.wait_all(deadline_after(timeout_seconds), [this] { poll_errors(); })) {
      std::vector<int32_t> peers;
      for (const auto& issued : outstanding_) {
        if (issued->done()) continue;
        peers.insert(peers.end(), issued->peers.begin(), issued->peers.end());
      }
      std::sort(peers.begin(), peers.end());
      peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
      failure(ErrorCode::kTimeout,
              "timed out after " + seconds_text(timeout_seconds) +
                  (peers.empty() ? std::string(" waiting for the GPU work")
                                 : " waiting for transfers with rank(s) " + ranks_text(peers)));
    }
    outstanding_.clear();
  }

  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> record,
                                                double timeout_seconds) override {
    usable();
    const auto deadline = deadline_after(timeout_seconds);
    const uint64_t size = record.size();
    const std::vector<std::byte> sizes =
        gather(std::as_bytes(std::span(&size, 1)), deadline, "exchanging record sizes");
    std::vector<uint64_t> per_rank(sizes.size() / 8);
    std::memcpy(per_rank.data(), sizes.data(), per_rank.size() * 8);
    for (size_t r = 0; r < per_rank.size(); ++r) {
      if (per_rank[r] != size) {
        fail(ErrorCode::kMismatch,
             "nccl transport: allgather: process " + std::to_string(routing_.table()[r].process) +
                 " sent a record of " + std::to_string(per_rank[r]) + " bytes, process " +
                 std::to_string(process_) + " one of " + std::to_string(size));
      }
    }
    std::vector<std::vector<std::byte>> out(static_cast<size_t>(processes_));
    if (size == 0) return out;
    const std::vector<std::byte> all = gather(record, deadline, "allgather");
    for (size_t r = routing_.table().size(); r-- > 0;) {  // the process's lowest NCCL rank wins
      const std::byte* p = all.data() + r * size;
      out[static_cast<size_t>(routing_.table()[r].process)].assign(p, p + size);
    }
    return out;
  }

  [[noreturn]] void abort(int exit_code) noexcept override {
    for (Comm& c : comms_) {
      if (c.comm != nullptr) ncclCommAbort(c.comm);
      if (c.owned) (void)c.owned.release();
    }
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }

 private:
  // ------------------------------------------------------------ set-up

  void set_up_comms() {
    if (options_.devices.empty()) {
      fail(ErrorCode::kInvalidArgument, "options.devices: empty (give this process's GPUs)");
    }
    bool create = false;
    for (size_t i = 0; i < options_.devices.size(); ++i) {
      const NcclDevice& d = options_.devices[i];
      const std::string field = "options.devices[" + std::to_string(i) + "]";
      for (size_t j = 0; j < i; ++j) {
        if (options_.devices[j].ordinal == d.ordinal) {
          fail(ErrorCode::kInvalidArgument,
               field + ".ordinal: device " + std::to_string(d.ordinal) + " is listed twice");
        }
      }
      Comm c;
      c.ordinal = d.ordinal;
      c.ctx = &devices_.get(d.ordinal);
      c.comm = d.comm;
      if (d.comm == nullptr) {
        create = true;
        if (options_.nccl_ranks <= 0) {
          fail(ErrorCode::kInvalidArgument,
               "options.nccl_ranks: must be positive when reshard creates communicators");
        }
        if (d.nccl_rank < 0 || d.nccl_rank >= options_.nccl_ranks) {
          fail(ErrorCode::kInvalidArgument, field + ".nccl_rank: " + std::to_string(d.nccl_rank) +
                                                " is outside [0, " +
                                                std::to_string(options_.nccl_ranks) + ")");
        }
        c.nccl_rank = d.nccl_rank;
      }
      comms_.push_back(std::move(c));
    }
    if (create) create_comms();
    int32_t count = -1;
    for (size_t i = 0; i < comms_.size(); ++i) {
      Comm& c = comms_[i];
      const std::string field = "options.devices[" + std::to_string(i) + "].comm";
      int n = 0;
      int rank = 0;
      int dev = 0;
      ncclResult_t r = ncclCommCount(c.comm, &n);
      if (r == ncclSuccess) r = ncclCommUserRank(c.comm, &rank);
      if (r == ncclSuccess) r = ncclCommCuDevice(c.comm, &dev);
      if (r != ncclSuccess) {
        failure(ErrorCode::kTransport,
                field + ": querying the communicator: " + nccl_text(r, c.comm));
      }
      if (dev != c.ordinal) {
        fail(ErrorCode::kInvalidArgument, field + ": belongs to CUDA device " +
                                              std::to_string(dev) + ", not device " +
                                              std::to_string(c.ordinal));
      }
      if (count >= 0 && n != count) {
        fail(ErrorCode::kInvalidArgument, field + ": has " + std::to_string(n) +
                                              " ranks, another device's communicator " +
                                              std::to_string(count));
      }
      count = n;
      c.nccl_rank = rank;
    }
    nccl_ranks_ = count;
    process_ = options_.process;
    if (process_ < 0) {
      if (comms_.size() != 1) {
        fail(ErrorCode::kInvalidArgument,
             "options.process: required when the process has several GPUs");
      }
      process_ = comms_[0].nccl_rank;
    }
  }

  void create_comms() {
    ncclUniqueId id;
    std::memcpy(&id, options_.unique_id.data(), sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    std::vector<Comm*> created;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) fail(ErrorCode::kTransport, "NCCL: ncclGroupStart: " + nccl_text(r));
    for (Comm& c : comms_) {
      if (c.comm != nullptr) continue;
      DeviceGuard guard(c.ordinal);
      ncclComm_t comm = nullptr;
      r = ncclCommInitRankConfig(&comm, options_.nccl_ranks, id, c.nccl_rank, &config);
      if (comm != nullptr) {
        c.comm = comm;
        c.owned = OwnedComm(comm, OwnedCommDeleter{std::min(options_.timeout_seconds, 30.0)});
        created.push_back(&c);
      }
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        failure(ErrorCode::kTransport,
                "ncclCommInitRankConfig(rank " + std::to_string(c.nccl_rank) + " of " +
                    std::to_string(options_.nccl_ranks) + "): " + nccl_text(r));
      }
    }
    r = ncclGroupEnd();
    settle(r, created, deadline_after(options_.timeout_seconds),
           "creating communicators (every process must create its communicators within the "
           "timeout, with the same unique id and nccl_ranks)");
  }

  // Every NCCL rank publishes (process, ordinal); every process checks the
  // group is consistent and learns where to send.
  void exchange_ranks() {
    const auto deadline = deadline_after(options_.timeout_seconds);
    std::vector<std::byte> all;
    {
      // Each local communicator contributes its own record.
      std::vector<std::vector<int32_t>> records;
      for (const Comm& c : comms_) records.push_back({kMagic, process_, c.ordinal, c.nccl_rank});
      all = gather_each(records, deadline, "exchanging ranks");
    }
    std::vector<NcclRankEntry> table(static_cast<size_t>(nccl_ranks_));
    for (int32_t r = 0; r < nccl_ranks_; ++r) {
      int32_t rec[4];
      std::memcpy(rec, all.data() + static_cast<size_t>(r) * 16, 16);
      if (rec[0] != kMagic || rec[3] != r) {
        failure(ErrorCode::kMismatch, "NCCL rank " + std::to_string(r) +
                                          " is not a reshard nccl transport of this version");
      }
      table[static_cast<size_t>(r)] = {rec[1], rec[2]};
    }
    try {
      routing_ = NcclRouting(std::move(table));
    } catch (const Error& e) {
      failure(e.code(), e.what());
    }
    processes_ = routing_.processes();
  }

  // ------------------------------------------------------- operations

  void usable() const {
    if (aborted_) {
      fail(ErrorCode::kTransport, "nccl transport: unusable after an earlier failure (" +
                                      abort_reason_ + "); create a new transport");
    }
  }

  // The GPU of a plan device with topology ordinal `ordinal`. A process
  // with one GPU in the group uses it for all its plan devices, whatever
  // their ordinals (plans often leave ordinals at 0).
  Comm& comm_of(int32_t ordinal, const std::string& field) {
    if (comms_.size() == 1) return comms_[0];
    for (Comm& c : comms_) {
      if (c.ordinal == ordinal) return c;
    }
    fail(ErrorCode::kInvalidArgument, field + ": CUDA device " + std::to_string(ordinal) +
                                          " is not among this process's NCCL devices");
  }

  static std::string ranks_text(const std::vector<int32_t>& ranks) {
    std::string s;
    for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    return s;
  }

  // After a group call: waits (bounded) until the non-blocking communicators
  // finished enqueueing.
  void settle(ncclResult_t r, const std::vector<Comm*>& comms, Clock::time_point deadline,
              const std::string& what) {
    if (r != ncclSuccess && r != ncclInProgress) {
      failure(ErrorCode::kTransport, what + ": " + nccl_text(r));
    }
    Backoff backoff;
    for (Comm* c : comms) {
      while (true) {
        ncclResult_t state = ncclSuccess;
        const ncclResult_t q = ncclCommGetAsyncError(c->comm, &state);
        if (q != ncclSuccess) failure(ErrorCode::kTransport, what + ": " + nccl_text(q, c->comm));
        if (state == ncclSuccess) break;
        if (state != ncclInProgress) {
          failure(ErrorCode::kTransport, what + ": " + nccl_text(state, c->comm));
        }
        if (Clock::now() > deadline) {
          failure(ErrorCode::kTimeout,
                  what + ": timed out after " + seconds_text(options_.timeout_seconds));
        }
        backoff.pause(deadline);
      }
    }
  }

  void poll_errors() {
    for (Comm& c : comms_) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(c.comm, &state);
      if (q != ncclSuccess) failure(ErrorCode::kTransport, nccl_text(q, c.comm));
      if (state != ncclSuccess && state != ncclInProgress) {
        failure(ErrorCode::kTransport, "NCCL reported an error on device " +
                                           std::to_string(c.ordinal) + ": " +
                                           nccl_text(state, c.comm));
      }
    }
  }

  // Aborts the communicators reshard may abort and throws.
  [[noreturn]] void failure(ErrorCode code, const std::string& what) {
    std::string aborted;
    for (Comm& c : comms_) {
      if (c.comm == nullptr) continue;
      if (c.owned) {
        ncclCommAbort(c.owned.release());
        c.comm = nullptr;
        aborted = " (communicators aborted)";
      } else if (options_.abort_borrowed_on_failure) {
        ncclCommAbort(c.comm);
        c.comm = nullptr;
        aborted = " (communicators aborted, the caller's too: do not use or destroy them)";
      } else if (aborted.empty()) {
        aborted = " (the caller's communicators are in an unknown state: abort them)";
      }
    }
    aborted_ = true;
    abort_reason_ = what;
    fail(code, "nccl transport (process " + std::to_string(process_) + "): " + what + aborted);
  }

  // Allgather of `mine` (the same size on every NCCL rank) over every local
  // communicator; returns all ranks' bytes in NCCL rank order.
  std::vector<std::byte> gather(std::span<const std::byte> mine, Clock::time_point deadline,
                                const std::string& what) {
    return gather_impl([&](size_t) { return mine; }, mine.size(), deadline, what);
  }

  std::vector<std::byte> gather_each(const std::vector<std::vector<int32_t>>& records,
                                     Clock::time_point deadline, const std::string& what) {
    return gather_impl([&](size_t i) { return std::as_bytes(std::span(records[i])); },
                       records.front().size() * sizeof(int32_t), deadline, what);
  }

  template <class Record>
  std::vector<std::byte> gather_impl(Record&& record, size_t n, Clock::time_point deadline,
                                     const std::string& what) {
    const size_t total = n * static_cast<size_t>(nccl_ranks_);
    std::vector<Comm*> involved;
    for (size_t i = 0; i < comms_.size(); ++i) {
      Comm& c = comms_[i];
      if (c.scratch_bytes < n + total) {
        c.scratch.reset();
        c.scratch = device_alloc(c.ordinal, n + total);
        c.scratch_bytes = n + total;
      }
      const std::span<const std::byte> bytes = record(i);
      DeviceGuard guard(c.ordinal);
      check(cudaMemcpyAsync(c.scratch.get(), bytes.data(), n, cudaMemcpyHostToDevice,
                            c.ctx->stream()),
            "cudaMemcpyAsync(control record)");
      involved.push_back(&c);
    }
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
      failure(ErrorCode::kTransport, what + ": ncclGroupStart: " + nccl_text(r));
    for (Comm* c : involved) {
      auto* base = static_cast<unsigned char*>(c->scratch.get());
      r = ncclAllGather(base, base + n, n, ncclUint8, c->comm, c->ctx->stream());
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        failure(ErrorCode::kTransport, what + ": ncclAllGather: " + nccl_text(r, c->comm));
      }
    }
    r = ncclGroupEnd();
    settle(r, involved, deadline, what);
    if (!devices_.wait_all(deadline, [this] { poll_errors(); })) {
      failure(ErrorCode::kTimeout,
              what +
                  ": timed out: not every one of the group's processes took part (NCCL "
                  "cannot tell which are missing)");
    }
    std::vector<std::byte> out(total);
    Comm& first = *involved.front();
    DeviceGuard guard(first.ordinal);
    check(cudaMemcpy(out.data(), static_cast<unsigned char*>(first.scratch.get()) + n, total,
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy(control records)");
    return out;
  }

  NcclTransportOptions options_;
  DeviceSet devices_;  // destroyed after comms_: streams outlive communicators
  std::vector<Comm> comms_;
  int32_t nccl_ranks_ = 0;
  int32_t process_ = 0;
  int32_t processes_ = 0;
  NcclRouting routing_;  // (process, ordinal) per NCCL rank, and the lookup
  std::deque<std::shared_ptr<Issued>> outstanding_;
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl(const NcclTransportOptions& options) {
  return std::make_unique<NcclTransport>(options);
}

NcclUniqueId nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) fail(ErrorCode::kTransport, "ncclGetUniqueId: " + nccl_text(r));
  NcclUniqueId out{};
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

bool nccl_built() { return true; }

}  // namespace reshard::cuda_backend
