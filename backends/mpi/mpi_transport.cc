// The `mpi` transport (docs/design.md §3.4): host memory, non-blocking
// point-to-point over a private duplicate of the caller's communicator.
// Built into libreshard_mpi.so.1, whose only export is the entry point of
// reshard/backend.h; reshard loads it at run time.
//
// Matching: every rank starts the operations between two ranks in the same
// order (the engine's schedule guarantees it), tags carry the round, and
// MPI's non-overtaking rule pairs the rest. Messages above 1 GiB travel as
// several operations of at most 1 GiB (MPI counts are int).
//
// Failure: every wait is a test loop with a deadline; a batch destroyed
// before completing cancels its receives and frees its requests, and the
// staging memory of the transport is then kept until the process exits
// (MPI may still touch it), never freed under MPI's feet.
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "reshard/backend.h"
#include "reshard/box_copy.h"
#include "reshard/error.h"
#include "reshard/mpi.h"
#include "reshard/transport.h"
#include "reshard/wait.h"

namespace reshard::mpi_backend {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kAllgatherTag = 32000;  // MPI guarantees tags up to 32767
constexpr int kDataTagBase = 1;
constexpr int kDataTagSpan = 30000;
constexpr int64_t kMaxChunk = int64_t{1} << 30;

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

[[noreturn]] void mpi_fail(int rc, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  int cls = 0;
  MPI_Error_class(rc, &cls);
  const ErrorCode code = cls == MPI_ERR_TRUNCATE ? ErrorCode::kMismatch : ErrorCode::kTransport;
  fail(code, "MPI transport: " + what + ": " + std::string(text, static_cast<size_t>(len)) +
                 (cls == MPI_ERR_TRUNCATE ? " (do all ranks execute the same plan?)" : ""));
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) mpi_fail(rc, what);
}

// ----------------------------------------------------------- polling quietly

// Open MPI calls sched_yield in every progress call that completes nothing
// when a host runs more ranks than cores (mpi_yield_when_idle, on by
// default under --oversubscribe). Beside a busy process each such yield
// hands it a whole time slice, so a rank polling its requests gave its core
// away on every poll; measured on 2 cores, 4 ranks, two spinning processes,
// that alone kept MPI executions 2-4x slower even with waits that sleep
// (docs/engine.md, "Sharing the machine"). The transport's polls therefore
// run with the yield off and wait in reshard::Backoff (which sleeps)
// instead; the application's setting is restored after each poll, so its
// own MPI calls behave as before. Open MPI's switch is found at run time;
// with another MPI, or RESHARD_MPI_YIELD=1 in the environment, nothing
// changes.
using YieldSwitch = bool (*)(bool);

// Open MPI's switch, unless RESHARD_MPI_YIELD=1 keeps its yield; nullptr
// with another MPI. RESHARD_MPI_YIELD other than unset, "0" or "1" is
// kInvalidArgument naming it.
YieldSwitch yield_switch() {
  const char* keep = std::getenv("RESHARD_MPI_YIELD");
  if (keep != nullptr && std::strcmp(keep, "0") != 0 && std::strcmp(keep, "1") != 0) {
    fail(ErrorCode::kInvalidArgument, "RESHARD_MPI_YIELD",
         "\"" + std::string(keep).substr(0, 64) +
             "\" is neither 0 nor 1 (1 keeps Open MPI's sched_yield in idle polls; unset or 0 "
             "turns it off while the transport polls)");
  }
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return nullptr;
  static const YieldSwitch f =
      reinterpret_cast<YieldSwitch>(dlsym(RTLD_DEFAULT, "opal_progress_set_yield_when_idle"));
  return f;
}

// Turns Open MPI's yield off for one poll (nothing when `set` is nullptr).
class QuietPoll {
 public:
  explicit QuietPoll(YieldSwitch set) : set_(set) {
    if (set_ != nullptr) previous_ = set_(false);
  }
  ~QuietPoll() {
    if (set_ != nullptr) set_(previous_);
  }
  QuietPoll(const QuietPoll&) = delete;
  QuietPoll& operator=(const QuietPoll&) = delete;

 private:
  YieldSwitch set_;
  bool previous_ = false;
};

// ---------------------------------------------------------------- MPI setup

void finalize_at_exit() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && !mpi_finalized()) MPI_Finalize();
}

void ensure_initialized(bool initialize) {
  if (mpi_finalized()) {
    fail(ErrorCode::kInvalidArgument, "MPI transport: MPI has already been finalized");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  if (!initialize) {
    fail(ErrorCode::kInvalidArgument,
         "MPI transport: MPI is not initialized (call MPI_Init or set "
         "MpiTransportOptions::initialize)");
  }
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  std::atexit(finalize_at_exit);
}

// -------------------------------------------------------------- memory

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using HostMemory = std::unique_ptr<std::byte, FreeDeleter>;

HostMemory allocate_host(int64_t bytes) {
  const size_t n = static_cast<size_t>(std::max<int64_t>((bytes + 63) / 64 * 64, 64));
  HostMemory m(static_cast<std::byte*>(std::aligned_alloc(64, n)));
  if (!m) {
    fail(ErrorCode::kOutOfMemory,
         "MPI transport: cannot allocate " + std::to_string(bytes) + " bytes of staging");
  }
  return m;
}

// What outlives a single call: the communicator, and memory that abandoned
// operations may still use.
struct Shared {
  MPI_Comm comm = MPI_COMM_NULL;
  YieldSwitch quiet = nullptr;  // yield_switch(), read when the transport is created
  int rank = 0;
  int size = 1;
  bool abandoned = false;
  std::vector<HostMemory> kept;
  std::vector<std::vector<std::byte>> kept_vectors;

  Shared() = default;
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  ~Shared() {
    // With abandoned operations pending, freeing the communicator could let
    // MPI deliver into freed state: keep it (the job is ending anyway).
    if (comm != MPI_COMM_NULL && !abandoned && !mpi_finalized()) MPI_Comm_free(&comm);
  }
};

class Staging final : public StagingBlock {
 public:
  Staging(std::shared_ptr<Shared> shared, int64_t bytes)
      : shared_(std::move(shared)), memory_(allocate_host(bytes)), bytes_(bytes) {}
  ~Staging() override {
    if (shared_->abandoned) shared_->kept.push_back(std::move(memory_));
  }
  std::byte* data() override { return memory_.get(); }
  int64_t bytes() const override { return bytes_; }

 private:
  std::shared_ptr<Shared> shared_;
  HostMemory memory_;
  int64_t bytes_;
};

// ------------------------------------------------------------- requests

class Datatype {
 public:
  Datatype() = default;
  explicit Datatype(MPI_Datatype t) : t_(t) {}
  Datatype(Datatype&& o) noexcept : t_(o.t_) { o.t_ = MPI_DATATYPE_NULL; }
  Datatype& operator=(Datatype&& o) noexcept {
    std::swap(t_, o.t_);
    return *this;
  }
  Datatype(const Datatype&) = delete;
  Datatype& operator=(const Datatype&) = delete;
  // Types in use by pending operations may be freed: MPI keeps them alive.
  ~Datatype() {
    if (t_ != MPI_DATATYPE_NULL && !mpi_finalized()) MPI_Type_free(&t_);
  }
  MPI_Datatype get() const { return t_; }

 private:
  MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

// Requests with the peer of each; destroying the set while some are active
// cancels the receives and frees every request (abandoning them).
class Requests {
 public:
  explicit Requests(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  Requests(const Requests&) = delete;
  Requests& operator=(const Requests&) = delete;
  ~Requests() { abandon(); }

  // A new request slot for an operation with `peer`, to pass to
  // MPI_Isend/MPI_Irecv at once (later additions move it). `expected`:
  // bytes a receive must deliver (-1: not checked).
  MPI_Request* add(int32_t peer, bool recv, int64_t expected) {
    requests_.push_back(MPI_REQUEST_NULL);
    peers_.push_back(peer);
    recv_.push_back(recv ? 1 : 0);
    expected_.push_back(expected);
    ++active_;
    return &requests_.back();
  }

  bool test() {
    if (active_ == 0) return true;
    const int n = static_cast<int>(requests_.size());
    indices_.resize(requests_.size());
    statuses_.resize(requests_.size());
    int count = 0;
    int rc = MPI_SUCCESS;
    {
      QuietPoll quiet(shared_->quiet);
      rc = MPI_Testsome(n, requests_.data(), &count, indices_.data(), statuses_.data());
    }
    if (rc == MPI_ERR_IN_STATUS) {
      for (int i = 0; i < count; ++i) {
        const MPI_Status& st = statuses_[static_cast<size_t>(i)];
        if (st.MPI_ERROR != MPI_SUCCESS) {
          const size_t k = static_cast<size_t>(indices_[static_cast<size_t>(i)]);
          mpi_fail(st.MPI_ERROR, std::string(recv_[k] ? "receive from" : "send to") + " rank " +
                                     std::to_string(peers_[k]));
        }
      }
    }
    check(rc, "MPI_Testsome");
    if (count == MPI_UNDEFINED) {
      active_ = 0;
      return true;
    }
    for (int i = 0; i < count; ++i) {
      const size_t k = static_cast<size_t>(indices_[static_cast<size_t>(i)]);
      --active_;
      if (recv_[k] && expected_[k] >= 0) {
        int got = 0;
        MPI_Get_count(&statuses_[static_cast<size_t>(i)], MPI_BYTE, &got);
        if (got != expected_[k]) {
          fail(ErrorCode::kMismatch, "MPI transport: received " + std::to_string(got) +
                                         " bytes from rank " + std::to_string(peers_[k]) +
                                         " where " + std::to_string(expected_[k]) +
                                         " were expected (do all ranks execute the same plan?)");
        }
      }
    }
    return active_ == 0;
  }

  std::vector<int32_t> pending(bool receives_only) const {
    std::vector<int32_t> out;
    for (size_t k = 0; k < requests_.size(); ++k) {
      if (requests_[k] != MPI_REQUEST_NULL && (!receives_only || recv_[k]))
        out.push_back(peers_[k]);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  bool done() const { return active_ == 0; }

 private:
  void abandon() noexcept {
    if (active_ == 0 || mpi_finalized()) return;
    for (size_t k = 0; k < requests_.size(); ++k) {
      if (requests_[k] == MPI_REQUEST_NULL) continue;
      if (recv_[k]) MPI_Cancel(&requests_[k]);
      MPI_Request_free(&requests_[k]);
    }
    shared_->abandoned = true;
    active_ = 0;
  }

  std::shared_ptr<Shared> shared_;
  std::vector<MPI_Request> requests_;
  std::vector<int32_t> peers_;
  std::vector<uint8_t> recv_;
  std::vector<int64_t> expected_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
  size_t active_ = 0;
};

class MpiBatch final : public TransferBatch {
 public:
  explicit MpiBatch(std::shared_ptr<Shared> shared) : requests_(std::move(shared)) {}
  bool test() override { return requests_.test(); }
  std::vector<int32_t> pending_peers() const override { return requests_.pending(false); }
  Requests& requests() { return requests_; }

 private:
  Requests requests_;
};

// The type of one segment, relative to the start of its buffer: its
// contiguous runs nested in hvectors (the copy descriptor's merged
// dimensions, as MPI_Type_create_subarray would describe the same box); the
// byte offset of its first element in the buffer goes to *offset.
// Independent of the buffer's address.
Datatype segment_type(const Segment& s, bool send, int64_t* offset) {
  const CopyDesc d = send ? make_copy_desc(s.region, s.buffer_box, s.region)
                          : make_copy_desc(s.region, s.region, s.buffer_box);
  const int64_t* stride = send ? d.src_stride : d.dst_stride;
  *offset = (send ? d.src_offset : d.dst_offset) * s.elem_size;
  MPI_Datatype t = MPI_DATATYPE_NULL;
  check(MPI_Type_contiguous(static_cast<int>(copy_desc_run_length(d) * s.elem_size), MPI_BYTE, &t),
        "MPI_Type_contiguous");
  Datatype inner(t);
  for (int k = d.rank - 2; k >= 0; --k) {
    check(MPI_Type_create_hvector(static_cast<int>(d.extent[k]), 1,
                                  static_cast<MPI_Aint>(stride[k] * s.elem_size), inner.get(), &t),
          "MPI_Type_create_hvector");
    inner = Datatype(t);
  }
  return inner;
}

// The type of a whole message: the non-empty segments' types in a struct at
// their absolute addresses (sent from and received into MPI_BOTTOM).
// `types` and `offsets` hold segment_type's results for those segments.
Datatype message_type(std::span<const Segment> segments, std::span<const Datatype> types,
                      std::span<const int64_t> offsets) {
  std::vector<MPI_Datatype> handles;
  std::vector<MPI_Aint> addresses;
  std::vector<int> lengths;
  size_t k = 0;
  for (const Segment& s : segments) {
    if (s.region.empty()) continue;
    MPI_Aint a = 0;
    check(MPI_Get_address(static_cast<std::byte*>(s.buffer) + offsets[k], &a), "MPI_Get_address");
    handles.push_back(types[k].get());
    addresses.push_back(a);
    lengths.push_back(1);
    ++k;
  }
  MPI_Datatype t = MPI_DATATYPE_NULL;
  check(MPI_Type_create_struct(static_cast<int>(handles.size()), lengths.data(), addresses.data(),
                               handles.data(), &t),
        "MPI_Type_create_struct");
  Datatype out(t);
  MPI_Datatype committed = out.get();
  check(MPI_Type_commit(&committed), "MPI_Type_commit");
  return out;
}

// The datatype of one gathered message, kept across executions of a cached
// schedule (TransferOp::state). The segments' types depend on their boxes
// only; the message's struct also on the buffers' addresses, so it is
// rebuilt (from the kept segment types) when the caller passes other
// buffers, and everything is rebuilt if the segments' boxes differ (never
// for the same message of one schedule, but checked: a stale type would
// move the wrong bytes).
class MessageTypes final : public TransferState {
 public:
  const Datatype& get(std::span<const Segment> segments, bool send) {
    if (!same_boxes(segments, send)) {
      std::vector<Datatype> types;
      std::vector<int64_t> offsets;
      for (const Segment& s : segments) {
        if (s.region.empty()) continue;
        int64_t offset = 0;
        types.push_back(segment_type(s, send, &offset));
        offsets.push_back(offset);
      }
      type_ = Datatype();
      types_ = std::move(types);
      offsets_ = std::move(offsets);
      shape_.assign(segments.begin(), segments.end());
      send_ = send;
    } else if (type_.get() != MPI_DATATYPE_NULL && same_buffers(segments)) {
      return type_;
    }
    type_ = message_type(segments, types_, offsets_);
    for (size_t i = 0; i < segments.size(); ++i) shape_[i].buffer = segments[i].buffer;
    return type_;
  }

 private:
  bool same_boxes(std::span<const Segment> segments, bool send) const {
    if (send != send_ || segments.size() != shape_.size()) return false;
    for (size_t i = 0; i < segments.size(); ++i) {
      const Segment& a = segments[i];
      const Segment& b = shape_[i];
      if (a.elem_size != b.elem_size || !(a.region == b.region) || !(a.buffer_box == b.buffer_box))
        return false;
    }
    return true;
  }
  bool same_buffers(std::span<const Segment> segments) const {
    for (size_t i = 0; i < segments.size(); ++i) {
      if (segments[i].buffer != shape_[i].buffer) return false;
    }
    return true;
  }

  std::vector<Segment> shape_;  // what types_ and type_ describe
  bool send_ = false;
  std::vector<Datatype> types_;  // per non-empty segment
  std::vector<int64_t> offsets_;
  Datatype type_;  // at shape_'s buffers
};

// ------------------------------------------------------------- transport

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(const MpiTransportOptions& options);

  TransportInfo info() const override {
    TransportInfo i;
    i.name = "mpi";
    i.memory = MemoryKind::kHost;
    i.rank = shared_->rank;
    i.size = shared_->size;
    i.stream_ordered = false;
    i.gather = true;
    i.host_ranks = host_ranks_;
    return i;
  }

  std::unique_ptr<StagingBlock> allocate_staging(int64_t device, int32_t ordinal,
                                                 int64_t bytes) override {
    (void)device;
    (void)ordinal;
    return std::make_unique<Staging>(shared_, bytes);
  }

  // Ordinals (TransferOp::local_ordinal, remote_ordinal) do not matter to
  // host memory: peers are ranks, and every device of a rank shares its
  // memory.
  std::unique_ptr<TransferBatch> start(std::span<const TransferOp> ops) override;

  void progress() override {
    int flag = 0;
    QuietPoll quiet(shared_->quiet);
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, shared_->comm, &flag, MPI_STATUS_IGNORE);
  }

  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> record,
                                                double timeout_seconds) override;

  [[noreturn]] void abort(int exit_code) noexcept override {
    MPI_Abort(shared_->comm != MPI_COMM_NULL ? shared_->comm : MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  void post(Requests& requests, const TransferOp& op);

  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  int32_t host_ranks_ = 1;
};

// The caller's communicator: a Fortran handle, an MPI_Comm's address, or
// MPI_COMM_WORLD.
MPI_Comm user_comm(const MpiTransportOptions& options) {
  if (!options.fortran_comm) {
    return options.comm != nullptr ? *static_cast<const MPI_Comm*>(options.comm) : MPI_COMM_WORLD;
  }
  // Open MPI's MPI_Comm_f2c answers NULL for an index outside its table and
  // MPI_COMM_NULL for a freed slot; MPICH's is the identity on ints.
  const MPI_Comm comm = MPI_Comm_f2c(*options.fortran_comm);
  bool null = comm == MPI_COMM_NULL;
  if constexpr (std::is_pointer_v<MPI_Comm>) null = null || comm == nullptr;
  if (null) {
    fail(ErrorCode::kInvalidArgument,
         "MPI transport: " + std::to_string(*options.fortran_comm) +
             " is not a live communicator (MPI_Comm_f2c gives MPI_COMM_NULL; pass "
             "MPI_Comm_c2f(comm) of a communicator that has not been freed)");
  }
  return comm;
}

MpiTransport::MpiTransport(const MpiTransportOptions& options) {
  shared_->quiet = yield_switch();
  ensure_initialized(options.initialize && !options.fortran_comm);
  const MPI_Comm user = user_comm(options);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Comm_idup(user, &shared_->comm, &request), "MPI_Comm_idup");
  const auto deadline = deadline_after(options.timeout_seconds);
  Backoff backoff;
  for (;;) {
    int done = 0;
    {
      QuietPoll quiet(shared_->quiet);
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test (MPI_Comm_idup)");
    }
    if (done) break;
    if (Clock::now() > deadline) {
      MPI_Request_free(&request);
      shared_->abandoned = true;
      shared_->comm = MPI_COMM_NULL;
      fail(ErrorCode::kTimeout, "MPI transport: duplicating the communicator timed out after " +
                                    seconds_text(options.timeout_seconds) +
                                    " (did every rank create the transport?)");
    }
    backoff.pause(deadline);
  }
  check(MPI_Comm_set_errhandler(shared_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(shared_->comm, &shared_->rank), "MPI_Comm_rank");
  check(MPI_Comm_size(shared_->comm, &shared_->size), "MPI_Comm_size");
  // Ranks on this host (TransportInfo::host_ranks): processor names
  // compared, through the transport's own exchange, which has a deadline
  // (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED has none).
  if (shared_->size > 1) {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    check(MPI_Get_processor_name(name, &len), "MPI_Get_processor_name");
    const auto* bytes = reinterpret_cast<const std::byte*>(name);
    const auto all = allgather({bytes, sizeof name}, options.timeout_seconds);
    host_ranks_ = static_cast<int32_t>(std::count_if(all.begin(), all.end(), [&](const auto& r) {
      return std::equal(r.begin(), r.end(), bytes);
    }));
  }
}

void MpiTransport::post(Requests& requests, const TransferOp& op) {
  const bool recv = op.kind == TransferOp::Kind::kRecv;
  if (op.peer < 0 || op.peer >= shared_->size || op.bytes < 0) {
    fail(ErrorCode::kInvalidArgument, "MPI transport: operation with peer " +
                                          std::to_string(op.peer) + " and " +
                                          std::to_string(op.bytes) + " bytes");
  }
  const int tag = kDataTagBase + static_cast<int>(op.round % kDataTagSpan);
  if (op.data == nullptr && op.bytes > 0) {
    if (op.segments.empty() || op.bytes > kMaxChunk) {
      fail(ErrorCode::kInvalidArgument,
           "MPI transport: a gathered message needs segments and at most 1 GiB");
    }
    // Kept in the engine's slot when it gives one (cached schedules),
    // otherwise built for this operation alone.
    MessageTypes fresh;
    MessageTypes* types = &fresh;
    if (op.state != nullptr) {
      types = dynamic_cast<MessageTypes*>(op.state->get());
      if (types == nullptr) {
        auto made = std::make_unique<MessageTypes>();
        types = made.get();
        *op.state = std::move(made);
      }
    }
    const Datatype& type = types->get(op.segments, !recv);
    MPI_Request* r = requests.add(op.peer, recv, -1);
    if (recv) {
      check(MPI_Irecv(MPI_BOTTOM, 1, type.get(), op.peer, tag, shared_->comm, r), "MPI_Irecv");
    } else {
      check(MPI_Isend(MPI_BOTTOM, 1, type.get(), op.peer, tag, shared_->comm, r), "MPI_Isend");
    }
    return;
  }
  auto* data = static_cast<std::byte*>(op.data);
  int64_t offset = 0;
  do {
    const int64_t n = std::min(kMaxChunk, op.bytes - offset);
    MPI_Request* r = requests.add(op.peer, recv, n);
    if (recv) {
      check(MPI_Irecv(data + offset, static_cast<int>(n), MPI_BYTE, op.peer, tag, shared_->comm, r),
            "MPI_Irecv");
    } else {
      check(MPI_Isend(data + offset, static_cast<int>(n), MPI_BYTE, op.peer, tag, shared_->comm, r),
            "MPI_Isend");
    }
    offset += n;
  } while (offset < op.bytes);
}

std::unique_ptr<TransferBatch> MpiTransport::start(std::span<const TransferOp> ops) {
  auto batch = std::make_unique<MpiBatch>(shared_);
  for (const TransferOp& op : ops) {
    if (op.kind == TransferOp::Kind::kRecv) post(batch->requests(), op);
  }
  for (const TransferOp& op : ops) {
    if (op.kind == TransferOp::Kind::kSend) post(batch->requests(), op);
  }
  return batch;
}

std::vector<std::vector<std::byte>> MpiTransport::allgather(std::span<const std::byte> record,
                                                            double timeout_seconds) {
  const int size = shared_->size;
  const int rank = shared_->rank;
  const int64_t n = static_cast<int64_t>(record.size());
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(size));
  // One byte of slack tells a longer record from a matching one.
  for (int r = 0; r < size; ++r) out[static_cast<size_t>(r)].resize(static_cast<size_t>(n + 1));
  std::vector<std::byte> mine(record.begin(), record.end());
  // If the exchange is abandoned, MPI may still use these buffers: keep them.
  struct Keep {
    Shared& shared;
    std::vector<std::vector<std::byte>>& out;
    std::vector<std::byte>& mine;
    bool completed = false;
    ~Keep() {
      if (completed || !shared.abandoned) return;
      for (auto& v : out) shared.kept_vectors.push_back(std::move(v));
      shared.kept_vectors.push_back(std::move(mine));
    }
  } keep{*shared_, out, mine};
  Requests requests(shared_);
  for (int k = 1; k < size; ++k) {
    const int from = (rank - k + size) % size;
    check(MPI_Irecv(out[static_cast<size_t>(from)].data(), static_cast<int>(n + 1), MPI_BYTE, from,
                    kAllgatherTag, shared_->comm, requests.add(from, true, n)),
          "MPI_Irecv");
  }
  for (int k = 1; k < size; ++k) {
    const int to = (rank + k) % size;
    check(MPI_Isend(mine.data(), static_cast<int>(n), MPI_BYTE, to, kAllgatherTag, shared_->comm,
                    requests.add(to, false, -1)),
          "MPI_Isend");
  }
  const auto deadline = deadline_after(timeout_seconds);
  Backoff backoff;
  while (!requests.test()) {
    if (Clock::now() > deadline) {
      std::vector<int32_t> missing = requests.pending(true);
      if (missing.empty()) missing = requests.pending(false);
      fail(ErrorCode::kTimeout, "no word from rank(s) " + rank_list(missing) + " within " +
                                    seconds_text(timeout_seconds) + " (this is rank " +
                                    std::to_string(rank) + ")");
    }
    backoff.pause(deadline);
  }
  keep.completed = true;
  for (int r = 0; r < size; ++r) out[static_cast<size_t>(r)].resize(static_cast<size_t>(n));
  std::copy(record.begin(), record.end(), out[static_cast<size_t>(rank)].begin());
  return out;
}

const char* library_version() {
  static char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  if (text[0] == '\0') {
    int len = 0;
    MPI_Get_library_version(text, &len);
  }
  return text;
}

Transport* create(const MpiTransportOptions* options, int32_t* code, char* message,
                  size_t message_size) {
  const auto report = [&](ErrorCode c, const std::string& text) {
    if (code != nullptr) *code = static_cast<int32_t>(c);
    if (message != nullptr && message_size > 0) {
      const size_t len = std::min(text.size(), message_size - 1);
      std::memcpy(message, text.data(), len);
      message[len] = '\0';
    }
  };
  try {
    const MpiTransportOptions defaults;
    return std::make_unique<MpiTransport>(options != nullptr ? *options : defaults).release();
  } catch (const Error& e) {
    report(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    report(ErrorCode::kOutOfMemory, "MPI transport: out of memory");
  } catch (const std::exception& e) {
    report(ErrorCode::kInternal, std::string("MPI transport: ") + e.what());
  }
  return nullptr;
}

}  // namespace
}  // namespace reshard::mpi_backend

RESHARD_BACKEND_ENTRY const reshard_backend_mpi_v1_t* reshard_backend_mpi_v1(void) {
  static const reshard_backend_mpi_v1_t table = {
      sizeof(reshard_backend_mpi_v1_t),
      reshard::kTransportInterfaceVersion,
      &reshard::mpi_backend::library_version,
      &reshard::mpi_backend::create,
  };
  return &table;
}
