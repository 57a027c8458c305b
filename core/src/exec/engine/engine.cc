// The distributed engine (reshard/engine.h): validation, the agreement on
// the plan, then the schedule of engine_schedule.h (kept in the cache of
// engine_cache.h) run over a transport.
#include "reshard/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "exec/engine/direct_copies.h"
#include "exec/engine/engine_cache.h"
#include "exec/schedule/engine_schedule.h"
#include "exec/schedule/exec_common.h"
#include "reshard/box_copy.h"
#include "reshard/error.h"
#include "reshard/wait.h"
#include "util/hash.h"
#include "util/threads.h"

namespace reshard {
namespace {

using engine_detail::Contribution;
using engine_detail::DirectRunner;
using engine_detail::EngineMessage;
using engine_detail::RoundPlan;
using engine_detail::Schedule;
using Clock = WaitClock;

std::string hex(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 60; i >= 0; i -= 4) s += digits[(v >> i) & 15];
  return s;
}

// ------------------------------------------------------------- agreement

constexpr uint64_t kAgreeMagic = 0x31524741'44485352ull;  // "RSHDAGR1"

struct AgreeRecord {
  uint64_t magic = kAgreeMagic;
  uint64_t fingerprint = 0;
  uint64_t tensors = 0;
  uint64_t dtype_hash = 0;
};

uint64_t dtype_hash(const Plan& plan) {
  Hasher h;
  for (const TensorSpec& t : plan.tensors()) h.i64(static_cast<int32_t>(t.dtype));
  return h.value();
}

// Groups ranks by `key`; returns the ranks outside the reference group (the
// largest; on a tie the one holding the lowest rank) and that group's key.
template <class Key>
std::vector<int32_t> outliers(const std::vector<Key>& keys, Key* reference) {
  std::map<Key, std::vector<int32_t>> groups;
  for (size_t r = 0; r < keys.size(); ++r) groups[keys[r]].push_back(static_cast<int32_t>(r));
  const std::vector<int32_t>* best = nullptr;
  for (const auto& [key, ranks] : groups) {
    if (best == nullptr || ranks.size() > best->size() ||
        (ranks.size() == best->size() && ranks.front() < best->front())) {
      best = &ranks;
      *reference = key;
    }
  }
  std::vector<int32_t> out;
  for (size_t r = 0; r < keys.size(); ++r) {
    if (!(keys[r] == *reference)) out.push_back(static_cast<int32_t>(r));
  }
  return out;
}

void agree(Transport& transport, const Plan& plan, double timeout) {
  AgreeRecord mine;
  mine.fingerprint = plan.fingerprint();
  mine.tensors = plan.tensors().size();
  mine.dtype_hash = dtype_hash(plan);
  std::vector<std::vector<std::byte>> all;
  try {
    all = transport.allgather(std::as_bytes(std::span(&mine, 1)), timeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kTimeout) throw;
    fail(ErrorCode::kTimeout, std::string("execute: agreeing on the plan: ") + e.what() +
                                  " (did every rank call execute?)");
  }
  std::vector<AgreeRecord> records(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != sizeof(AgreeRecord)) {
      fail(ErrorCode::kMismatch, "execute: rank " + std::to_string(r) +
                                     " sent an agreement record of " +
                                     std::to_string(all[r].size()) + " bytes");
    }
    std::memcpy(&records[r], all[r].data(), sizeof(AgreeRecord));
    if (records[r].magic != kAgreeMagic) {
      fail(ErrorCode::kMismatch,
           "execute: rank " + std::to_string(r) +
               " sent an unexpected agreement record (another reshard version?)");
    }
  }
  const int32_t me = transport.info().rank;
  // Tensor counts, then dtypes, then the fingerprint: the first difference
  // found is the most specific one to report.
  std::vector<uint64_t> counts;
  for (const AgreeRecord& r : records) counts.push_back(r.tensors);
  uint64_t ref_count = 0;
  std::vector<int32_t> odd = outliers(counts, &ref_count);
  if (!odd.empty()) {
    fail(ErrorCode::kMismatch,
         "execute: plan mismatch: rank(s) " + rank_list(odd) + " have a plan of " +
             std::to_string(counts[static_cast<size_t>(odd.front())]) + " tensors, the others " +
             std::to_string(ref_count) + " (this is rank " + std::to_string(me) + ")");
  }
  std::vector<uint64_t> dhash;
  for (const AgreeRecord& r : records) dhash.push_back(r.dtype_hash);
  uint64_t ref_hash = 0;
  odd = outliers(dhash, &ref_hash);
  if (!odd.empty()) {
    // Every rank saw the same records, so every rank runs this exchange.
    std::vector<std::byte> dtypes;
    for (const TensorSpec& t : plan.tensors()) {
      dtypes.push_back(static_cast<std::byte>(static_cast<int32_t>(t.dtype)));
    }
    const auto lists = transport.allgather(dtypes, timeout);
    for (size_t t = 0; t < plan.tensors().size(); ++t) {
      std::vector<int32_t> keys;
      for (const auto& l : lists) keys.push_back(t < l.size() ? static_cast<int32_t>(l[t]) : -1);
      int32_t ref = 0;
      const std::vector<int32_t> bad = outliers(keys, &ref);
      if (bad.empty()) continue;
      const auto name = [](int32_t v) {
        return dtype_valid(v) ? std::string(dtype_name(static_cast<DType>(v))) : "?";
      };
      fail(ErrorCode::kMismatch, "execute: dtype mismatch: tensors[" + std::to_string(t) + "] (\"" +
                                     plan.tensors()[t].name + "\") is " +
                                     name(keys[static_cast<size_t>(bad.front())]) + " on rank(s) " +
                                     rank_list(bad) + " and " + name(ref) +
                                     " on the others (this is rank " + std::to_string(me) + ")");
    }
    fail(ErrorCode::kMismatch, "execute: dtype mismatch on rank(s) " + rank_list(odd));
  }
  std::vector<uint64_t> fps;
  for (const AgreeRecord& r : records) fps.push_back(r.fingerprint);
  uint64_t ref_fp = 0;
  odd = outliers(fps, &ref_fp);
  if (!odd.empty()) {
    fail(ErrorCode::kMismatch, "execute: plan mismatch: rank(s) " + rank_list(odd) +
                                   " have plan fingerprint " +
                                   hex(fps[static_cast<size_t>(odd.front())]) + ", the others " +
                                   hex(ref_fp) + " (this is rank " + std::to_string(me) + ")");
  }
}

// ---------------------------------------------------------------- copies

// Runs box-copy operations where the memory is: on the host at once
// (giving the transport a chance to progress every few hundred KiB while
// transfers are in flight), or collected per device and handed to the
// transport in one run_copies call per device.
class Copier {
 public:
  Copier(Transport& transport, bool host) : transport_(transport), host_(host) {}

  void set_in_flight(bool v) { in_flight_ = v; }
  bool in_flight() const { return in_flight_; }

  void copy(int64_t device, int32_t ordinal, const CopyDesc& d, DType dtype, const void* src,
            void* dst) {
    if (!host_)
      return queue(device, ordinal, {CopyOp::Kind::kCopy, d, dtype, ReduceOp::kSum, 0, src, dst});
    const int64_t elem = dtype_size(dtype);
    copy_box(d, elem, src, dst);
    moved(copy_desc_elements(d) * elem);
  }

  void reduce(int64_t device, int32_t ordinal, const CopyDesc& d, DType dtype, ReduceOp op,
              const void* src, void* acc) {
    if (!host_) return queue(device, ordinal, {CopyOp::Kind::kReduce, d, dtype, op, 0, src, acc});
    const int64_t elem = dtype_size(dtype);
    const int64_t n = copy_desc_elements(d);
    if (reinterpret_cast<uintptr_t>(src) % static_cast<uintptr_t>(elem) != 0) {
      // Pieces of several dtypes share a message, so a piece in staging can
      // be misaligned for its type: reduce from an aligned copy. The source
      // side of such a copy is always the dense packed region.
      scratch_.resize(static_cast<size_t>((n * elem + 7) / 8));
      std::memcpy(scratch_.data(), src, static_cast<size_t>(n * elem));
      src = scratch_.data();
    }
    reduce_into(d, dtype, op, src, acc);
    moved(n * elem);
  }

  void fill_acc(int64_t device, int32_t ordinal, DType dtype, ReduceOp op, void* acc, int64_t n) {
    if (!host_)
      return queue(device, ordinal, {CopyOp::Kind::kFillAcc, {}, dtype, op, n, nullptr, acc});
    fill_identity(dtype, op, acc, n);
  }

  void fill_elements(int64_t device, int32_t ordinal, DType dtype, ReduceOp op, void* dst,
                     int64_t n) {
    if (!host_) {
      return queue(device, ordinal, {CopyOp::Kind::kFillElements, {}, dtype, op, n, nullptr, dst});
    }
    fill_identity_elements(dtype, op, dst, n);
  }

  // divisor > 1: the mean's division (acc may be dst).
  void store(int64_t device, int32_t ordinal, DType dtype, const void* acc, void* dst, int64_t n,
             int32_t divisor) {
    if (!host_) {
      return queue(device, ordinal,
                   {CopyOp::Kind::kStore, {}, dtype, ReduceOp::kSum, n, acc, dst, divisor});
    }
    if (divisor > 1) return store_mean_from_acc(dtype, acc, dst, n, divisor);
    store_from_acc(dtype, acc, dst, n);
  }

  void flush() {
    for (auto& [key, ops] : queued_) {
      if (!ops.empty()) transport_.run_copies(key.first, key.second, ops);
      ops.clear();
    }
  }

 private:
  void queue(int64_t device, int32_t ordinal, const CopyOp& op) {
    queued_[{device, ordinal}].push_back(op);
  }
  void moved(int64_t bytes) {
    if (!in_flight_) return;
    since_progress_ += bytes;
    if (since_progress_ >= (int64_t{256} << 10)) {
      since_progress_ = 0;
      transport_.progress();
    }
  }

  Transport& transport_;
  bool host_;
  bool in_flight_ = false;
  int64_t since_progress_ = 0;
  std::vector<uint64_t> scratch_;
  std::map<std::pair<int64_t, int32_t>, std::vector<CopyOp>> queued_;
};

// --------------------------------------------------------------- the run

class Run {
 public:
  // `keep_state`: the schedule is cached, the transport may keep state in
  // it (TransferOp::state).
  Run(Transport& transport, const Plan& plan, std::span<const TensorBuffers> buffers,
      const ExecuteOptions& options, Schedule& schedule, bool keep_state, ExecuteStats& stats)
      : transport_(transport),
        info_(transport.info()),
        plan_(plan),
        tensors_(plan.tensors()),
        part_(schedule.part),
        buffers_(buffers),
        options_(options),
        s_(schedule),
        keep_state_(keep_state),
        stats_(stats),
        copier_(transport, info_.memory == MemoryKind::kHost) {}

  void go();

 private:
  struct InFlight {
    size_t step;
    std::unique_ptr<TransferBatch> batch;
  };

  int64_t elem(uint32_t t) const { return dtype_size(tensors_[t].dtype); }
  // What a piece reads: its source buffer, or in a stage > 0 the
  // destination buffer it forwards from.
  const void* src_ptr(const Piece& p, uint32_t stage) const {
    return stage == 0 ? buffers_[p.tensor].src[p.src_entry].data
                      : buffers_[p.tensor].dst[p.src_entry].data;
  }
  void* dst_ptr(const Piece& p) const { return buffers_[p.tensor].dst[p.dst_entry].data; }
  void* buffer(const engine_detail::BufferRef& r) const {
    if (r.src) return const_cast<void*>(buffers_[r.tensor].src[r.entry].data);
    return buffers_[r.tensor].dst[r.entry].data;
  }
  int32_t ordinal_of(int64_t device) const { return plan_.topology().info(device).ordinal; }
  std::byte* staging(size_t slot) { return arenas_[slot]->data(); }
  std::byte* work(size_t block, int64_t offset) {
    std::byte* base = info_.memory == MemoryKind::kHost
                          ? reinterpret_cast<std::byte*>(work_host_[block].data())
                          : work_device_[block]->data();
    return base + offset;
  }
  void allocate();
  void fill();
  void direct(int64_t last_round);
  void pack_message(size_t mi);
  void pack_next(size_t ri, int64_t after);
  std::unique_ptr<TransferBatch> post(size_t ri, size_t step);
  void unpack(size_t ri, size_t step);
  void reduce_ready(int64_t round);
  void wait(std::deque<InFlight>& in_flight, size_t ri);
  void store();
  // Stores the separate accumulators once: at the end of stage 0 when a
  // later stage forwards reduced values, else at the end.
  void store_once() {
    if (stored_) return;
    if (next_contribution_ != s_.contributions.size()) {
      fail(ErrorCode::kInternal, "execute: contributions left unreduced");
    }
    store();
    copier_.flush();
    stored_ = true;
  }
  bool stored_ = false;

  Transport& transport_;
  const TransportInfo info_;
  const Plan& plan_;
  const std::vector<TensorSpec>& tensors_;
  const ProcessPart* part_;
  std::span<const TensorBuffers> buffers_;
  const ExecuteOptions& options_;
  Schedule& s_;
  const bool keep_state_;
  ExecuteStats& stats_;
  Copier copier_;
  std::vector<std::unique_ptr<StagingBlock>> arenas_;  // per slot
  // Schedule::work blocks: host vectors, or transport memory on devices.
  std::vector<std::vector<uint64_t>> work_host_;
  std::vector<std::unique_ptr<StagingBlock>> work_device_;
  std::vector<std::vector<size_t>> deferred_of_;  // per message: contributions to copy aside
  std::vector<TransferOp> ops_;
  std::vector<Segment> segments_;  // of ops_, with the buffers' addresses
  std::vector<uint8_t> packed_;    // per message
  bool packed_early_ = false;
  size_t next_contribution_ = 0;
  size_t next_direct_ = 0;  // index in Schedule::direct_rounds
  // Host memory: the direct copies' threads (ExecuteOptions::threads).
  std::unique_ptr<DirectRunner> runner_;
};

void Run::allocate() {
  // Staging: one arena per device, allocated once for the whole execution.
  arenas_.resize(s_.slots.size());
  for (size_t i = 0; i < s_.slots.size(); ++i) {
    const auto& slot = s_.slots[i];
    if (slot.capacity == 0) continue;
    arenas_[i] = transport_.allocate_staging(slot.device, slot.ordinal, slot.capacity);
    if (!arenas_[i] || arenas_[i]->bytes() < slot.capacity) {
      fail(ErrorCode::kOutOfMemory,
           "execute: the transport could not allocate " + std::to_string(slot.capacity) +
               " bytes of staging for device " + std::to_string(slot.device));
    }
    stats_.staging_peak_bytes = std::max(stats_.staging_peak_bytes, slot.capacity);
    stats_.staging_bytes += slot.capacity;
  }
  // Accumulators and deferred summands, on the device they serve.
  for (const auto& w : s_.work) {
    if (info_.memory == MemoryKind::kHost) {
      work_host_.emplace_back(static_cast<size_t>(w.bytes / 8));
    } else {
      work_device_.push_back(transport_.allocate_staging(w.device, w.ordinal, w.bytes));
    }
  }
  stats_.accumulator_bytes = s_.accumulator_bytes;
  stats_.deferred_bytes = s_.deferred_bytes;
  deferred_of_.resize(s_.messages.size());
  packed_.assign(s_.messages.size(), 0);
  for (size_t i = 0; i < s_.contributions.size(); ++i) {
    const Contribution& c = s_.contributions[i];
    if (c.deferred_offset >= 0) deferred_of_[c.msg].push_back(i);
  }
}

void Run::fill() {
  for (const auto& [t, e] : s_.fills) {
    const TensorSpec& spec = tensors_[t];
    const int64_t device = spec.dst.device(e);
    copier_.fill_elements(device, ordinal_of(device), spec.dtype, spec.dst.reduce_op(),
                          buffers_[t].dst[e].data, spec.dst.box(e).volume());
  }
  for (const auto& a : s_.accs) {
    const TensorSpec& spec = tensors_[a.tensor];
    const int64_t device = spec.dst.device(a.dst_entry);
    void* acc = a.separate ? static_cast<void*>(work(a.acc_block, a.acc_offset))
                           : buffers_[a.tensor].dst[a.dst_entry].data;
    copier_.fill_acc(device, ordinal_of(device), spec.dtype, combining_op(spec.src.reduce_op()),
                     acc, a.elements);
  }
}

// Runs the direct copies of the rounds up to `last_round` not run yet, a
// round's copies in parallel (host memory) and rounds in order.
void Run::direct(int64_t last_round) {
  for (;
       next_direct_ < s_.direct_rounds.size() && s_.direct_rounds[next_direct_].round <= last_round;
       ++next_direct_) {
    const engine_detail::DirectRound& r = s_.direct_rounds[next_direct_];
    const std::span<const engine_detail::DirectCopy> copies(s_.direct.data() + r.begin,
                                                            r.end - r.begin);
    if (runner_) {
      // While transfers are in flight, tasks stay small and the calling
      // thread gives the transport a chance to progress after each.
      const bool in_flight = copier_.in_flight();
      runner_->run_round(copies, {}, in_flight ? int64_t{256} << 10 : 0,
                         in_flight ? std::function<void()>([this] { transport_.progress(); })
                                   : std::function<void()>());
      continue;
    }
    for (const auto& d : copies) {
      const Piece& p = *d.piece;
      const TensorSpec& spec = tensors_[p.tensor];
      const Box region = plan_.region(*d.part, p);
      const int64_t device = spec.dst.device(p.dst_entry);
      copier_.copy(device, ordinal_of(device),
                   make_copy_desc(region, plan_.source_box(p, d.stage), spec.dst.box(p.dst_entry)),
                   spec.dtype, src_ptr(p, d.stage), dst_ptr(p));
    }
  }
}

void Run::pack_message(size_t mi) {
  if (packed_[mi]) return;
  packed_[mi] = 1;
  const EngineMessage& m = s_.messages[mi];
  std::byte* out = staging(m.slot) + m.offset;
  for (const Piece& p : m.pieces) {
    const TensorSpec& spec = tensors_[p.tensor];
    const Box region = plan_.region(*part_, p);
    copier_.copy(m.local_device, m.ordinal,
                 make_copy_desc(region, plan_.source_box(p, m.stage), region), spec.dtype,
                 src_ptr(p, m.stage), out);
    out += region.volume() * elem(p.tensor);
  }
}

// Packs the sends of round ri+1 that step `after` of round ri released
// (after == -1: those that overlap nothing of round ri).
void Run::pack_next(size_t ri, int64_t after) {
  if (ri + 1 >= s_.rounds.size()) return;
  const RoundPlan& r = s_.rounds[ri];
  const auto& list = r.pack_next[static_cast<size_t>(after + 1)];
  if (list.empty()) return;
  for (size_t mi : list) pack_message(mi);
  packed_early_ = true;
}

std::unique_ptr<TransferBatch> Run::post(size_t ri, size_t step) {
  // Pack this step's staged sends now (unless packed during the previous
  // round): packing step k overlaps the transfers of the steps before it.
  for (size_t mi : s_.rounds[ri].steps[step]) {
    const EngineMessage& m = s_.messages[mi];
    if (m.send && m.mode == EngineMessage::Mode::kStaged) pack_message(mi);
  }
  copier_.flush();  // stream-ordered transports: the packs go before the batch
  ops_.clear();
  // The schedule holds no addresses: the gathered messages' segments get
  // their buffers here (all of the step's first, so that the spans below
  // stay valid).
  segments_.clear();
  for (size_t mi : s_.rounds[ri].steps[step]) {
    const EngineMessage& m = s_.messages[mi];
    if (m.mode != EngineMessage::Mode::kGather) continue;
    for (size_t i = 0; i < m.segments.size(); ++i) {
      Segment seg = m.segments[i];
      seg.buffer = m.send ? const_cast<void*>(src_ptr(m.pieces[i], m.stage)) : dst_ptr(m.pieces[i]);
      segments_.push_back(seg);
    }
  }
  size_t next_segment = 0;
  for (size_t mi : s_.rounds[ri].steps[step]) {
    EngineMessage& m = s_.messages[mi];
    TransferOp op;
    op.kind = m.send ? TransferOp::Kind::kSend : TransferOp::Kind::kRecv;
    op.peer = m.peer;
    op.round = m.round;
    op.local_device = m.local_device;
    op.local_ordinal = m.ordinal;
    op.remote_device = m.send ? m.dst_device : m.src_device;
    op.remote_ordinal = m.remote_ordinal;
    op.bytes = m.bytes;
    switch (m.mode) {
      case EngineMessage::Mode::kInPlace:
        op.data = m.bytes == 0 ? nullptr
                               : static_cast<std::byte*>(buffer(m.in_place)) + m.in_place_offset;
        ++stats_.in_place_messages;
        break;
      case EngineMessage::Mode::kStaged:
        op.data = staging(m.slot) + m.offset;
        break;
      case EngineMessage::Mode::kGather:
        op.segments = std::span<const Segment>(segments_).subspan(next_segment, m.segments.size());
        next_segment += m.segments.size();
        if (keep_state_) op.state = &m.transfer_state;
        ++stats_.gathered_messages;
        break;
    }
    if (m.send) {
      ++stats_.messages_sent;
      stats_.bytes_sent += m.bytes;
    } else {
      ++stats_.messages_received;
      stats_.bytes_received += m.bytes;
    }
    ops_.push_back(op);
  }
  ++stats_.batches;
  return transport_.start(ops_);
}

void Run::unpack(size_t ri, size_t step) {
  for (size_t mi : s_.rounds[ri].steps[step]) {
    const EngineMessage& m = s_.messages[mi];
    if (m.send || m.mode != EngineMessage::Mode::kStaged) continue;
    const std::byte* in = staging(m.slot) + m.offset;
    for (const Piece& p : m.pieces) {
      const TensorSpec& spec = tensors_[p.tensor];
      const Box region = plan_.region(*part_, p);
      if (!spec.src.partial() || m.stage > 0) {  // later stages copy reduced values
        copier_.copy(m.local_device, m.ordinal,
                     make_copy_desc(region, region, spec.dst.box(p.dst_entry)), spec.dtype, in,
                     dst_ptr(p));
      }
      in += region.volume() * elem(p.tensor);
    }
    // Summands that must wait for a lower summand arriving later.
    for (size_t ci : deferred_of_[mi]) {
      const Contribution& c = s_.contributions[ci];
      copier_.copy(m.local_device, m.ordinal, make_copy_desc(c.region, c.region, c.region),
                   tensors_[c.tensor].dtype, staging(m.slot) + m.offset + c.msg_offset,
                   work(c.deferred_block, c.deferred_offset));
    }
  }
}

void Run::reduce_ready(int64_t round) {
  for (; next_contribution_ < s_.contributions.size(); ++next_contribution_) {
    const Contribution& c = s_.contributions[next_contribution_];
    if (c.ready != round) break;
    const TensorSpec& spec = tensors_[c.tensor];
    const auto& a = s_.accs[c.acc];
    const Box dst_box = spec.dst.box(c.dst_entry);
    void* acc = a.separate ? static_cast<void*>(work(a.acc_block, a.acc_offset))
                           : buffers_[c.tensor].dst[c.dst_entry].data;
    const void* src = nullptr;
    Box src_box = c.region;
    if (c.from_buffer) {
      src = buffers_[c.tensor].src[c.src_entry].data;
      src_box = c.src_box;
    } else if (c.deferred_offset >= 0) {
      src = work(c.deferred_block, c.deferred_offset);
    } else {
      const EngineMessage& m = s_.messages[c.msg];
      src = staging(m.slot) + m.offset + c.msg_offset;
    }
    // A separate accumulator is indexed like the destination box.
    const CopyDesc d = make_copy_desc(c.region, src_box, dst_box);
    const int64_t device = spec.dst.device(c.dst_entry);
    copier_.reduce(device, ordinal_of(device), d, spec.dtype, combining_op(spec.src.reduce_op()),
                   src, acc);
  }
}

void Run::wait(std::deque<InFlight>& in_flight, size_t ri) {
  InFlight& front = in_flight.front();
  Backoff backoff;
  const auto deadline = deadline_after(options_.timeout_seconds);
  while (!front.batch->test()) {
    if (Clock::now() > deadline) {
      std::vector<int32_t> peers;
      for (const InFlight& f : in_flight) {
        f.batch->test();  // settle what completed unobserved behind the front batch
        for (int32_t p : f.batch->pending_peers()) peers.push_back(p);
      }
      std::sort(peers.begin(), peers.end());
      peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
      fail(ErrorCode::kTimeout,
           "execute: timed out after " + seconds_text(options_.timeout_seconds) + " in round " +
               std::to_string(s_.rounds[ri].round) +
               (s_.rounds[ri].stage > 0 ? " of stage " + std::to_string(s_.rounds[ri].stage)
                                        : std::string()) +
               " waiting for rank(s) " + rank_list(peers) + " (this is rank " +
               std::to_string(info_.rank) + ", plan " + hex(plan_.fingerprint()) + ")");
    }
    backoff.pause();
  }
}

// Stores the separate accumulators, and divides the means (in place where
// the destination is the accumulator).
void Run::store() {
  for (const auto& a : s_.accs) {
    const TensorSpec& spec = tensors_[a.tensor];
    const int32_t divisor = exec_detail::mean_divisor(spec);
    if (!a.separate && divisor == 1) continue;
    const int64_t device = spec.dst.device(a.dst_entry);
    void* dst = buffers_[a.tensor].dst[a.dst_entry].data;
    copier_.store(device, ordinal_of(device), spec.dtype,
                  a.separate ? static_cast<const void*>(work(a.acc_block, a.acc_offset)) : dst, dst,
                  a.elements, divisor);
  }
}

void Run::go() {
  allocate();
  if (info_.memory == MemoryKind::kHost && !s_.direct.empty()) {
    const int threads =
        s_.local_bytes < engine_detail::kParallelMinBytes ? 1 : resolve_threads(options_.threads);
    runner_ = std::make_unique<DirectRunner>(plan_, buffers_, s_, threads);
  }
  fill();
  stats_.local_bytes += s_.local_bytes;
  // Stage 1 on forwards what stage 0 wrote, reduced values included: the
  // separate accumulators are stored before (store_once).
  bool staged = false;
  for (const auto& d : s_.direct) staged |= d.stage > 0;
  for (const auto& r : s_.rounds) staged |= r.stage > 0;
  const int64_t last = engine_detail::last_key(options_.last_stage);
  if (s_.rounds.empty()) {
    direct(std::min(engine_detail::round_key(1, 0) - 1, last));  // stage 0
    reduce_ready(-1);
    if (staged) store_once();
    direct(last);
  }
  const size_t window = static_cast<size_t>(std::max(1, options_.max_batches_in_flight));
  for (size_t ri = 0; ri < s_.rounds.size(); ++ri) {
    const RoundPlan& r = s_.rounds[ri];
    if (r.key > last) break;
    // Direct copies of earlier rounds (same-process messages of rounds in
    // which this process exchanges nothing with others) before this round's
    // sends, which may read what they wrote (multi-stage plans); local
    // pieces (round -1) read only sources and overlap the first round.
    if (r.stage > 0) store_once();
    if (ri > 0 || r.key > 0) direct(r.key - 1);
    std::deque<InFlight> in_flight;
    size_t next = 0;
    const auto post_next = [&] {
      copier_.set_in_flight(!in_flight.empty());
      in_flight.push_back({next, post(ri, next)});
      ++next;
    };
    while (next < r.steps.size() && in_flight.size() < window) post_next();
    copier_.set_in_flight(true);
    direct(r.key);  // this round's, while its transfers are in flight
    if (ri == 0) reduce_ready(-1);
    // Round r+1, as far as round r leaves its staging free.
    packed_early_ = false;
    pack_next(ri, -1);
    copier_.flush();
    while (!in_flight.empty()) {
      wait(in_flight, ri);
      const size_t step = in_flight.front().step;
      in_flight.pop_front();
      if (next < r.steps.size()) post_next();
      copier_.set_in_flight(!in_flight.empty());
      unpack(ri, step);
      pack_next(ri, static_cast<int64_t>(step));
      copier_.flush();
    }
    if (packed_early_) ++stats_.overlapped_rounds;
    copier_.set_in_flight(false);
    reduce_ready(r.key);
    copier_.flush();
  }
  if (staged) store_once();
  direct(last);  // rounds after the last one with transfers
  store_once();
  transport_.finish(options_.timeout_seconds);
  stats_.rounds = static_cast<int32_t>(s_.rounds.size());
}

}  // namespace

Engine::Engine(std::unique_ptr<Transport> transport) : Engine(std::move(transport), {}) {}

Engine::Engine(std::unique_ptr<Transport> transport, const EngineOptions& options)
    : transport_(std::move(transport)) {
  if (!transport_) fail(ErrorCode::kInvalidArgument, "transport: must not be null");
  if (options.schedule_cache_entries < 0) {
    fail(ErrorCode::kInvalidArgument, "options.schedule_cache_entries: must not be negative");
  }
  if (options.schedule_cache_entries > 0) {
    cache_ = std::make_unique<engine_detail::ScheduleCache>(
        static_cast<size_t>(options.schedule_cache_entries));
  }
}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&& other) noexcept {
  // The cache holds state of the current transport: it goes first.
  cache_ = std::move(other.cache_);
  transport_ = std::move(other.transport_);
  agreed_ = std::move(other.agreed_);
  return *this;
}
Engine::~Engine() = default;

ExecuteStats Engine::execute(const Plan& plan, int32_t process,
                             std::span<const TensorBuffers> local_buffers,
                             const ExecuteOptions& options) {
  const auto t0 = Clock::now();
  ExecuteStats stats;
  const TransportInfo info = transport_->info();
  const bool whole = process == kAllProcesses;
  if (whole && !info.whole_plan) {
    fail(ErrorCode::kInvalidArgument,
         "process: kAllProcesses (-1) needs a transport holding every process of the plan (the "
         "local transport); the " +
             info.name + " transport executes the part of its rank (" + std::to_string(info.rank) +
             ")");
  }
  if (!whole && process != info.rank) {
    fail(ErrorCode::kInvalidArgument, "process: " + std::to_string(process) +
                                          " is not this rank of the " + info.name + " transport (" +
                                          std::to_string(info.rank) + ")");
  }
  if (!(options.timeout_seconds > 0)) {
    fail(ErrorCode::kInvalidArgument, "options.timeout_seconds: must be positive");
  }
  if (options.max_batches_in_flight < 1) {
    fail(ErrorCode::kInvalidArgument, "options.max_batches_in_flight: must be at least 1");
  }
  if (options.last_stage < -1) {
    fail(ErrorCode::kInvalidArgument, "options.last_stage: " + std::to_string(options.last_stage) +
                                          " is below -1 (-1: every stage)");
  }
  if (options.threads < 0) {
    fail(ErrorCode::kInvalidArgument,
         "options.threads: " + std::to_string(options.threads) +
             " is negative (0: one per hardware thread, N: up to N threads)");
  }
  if (whole) {
    // (1) Everything checked before anything is written.
    for (int32_t p : plan.processes()) {
      if (!plan.parts().contains(p)) {
        fail(ErrorCode::kInvalidArgument,
             "plan: lacks the part of process " + std::to_string(p) +
                 " (executing every process in one needs a plan made with PlanScope::kAll)");
      }
    }
    exec_detail::validate_buffers(plan, local_buffers);
    const Schedule schedule = engine_detail::build_whole_schedule(plan);
    // (2) The agreement, with itself: kept so that every execution follows
    // the same order of events.
    if (options.agreement == ExecuteOptions::Agreement::kEveryCall ||
        (options.agreement == ExecuteOptions::Agreement::kFirstUse &&
         !agreed_.contains(plan.fingerprint()))) {
      agree(*transport_, plan, options.timeout_seconds);
      agreed_.insert(plan.fingerprint());
      stats.agreed = true;
    }
    // (3) Execution.
    engine_detail::execute_whole(plan, local_buffers, schedule, options.threads,
                                 engine_detail::last_key(options.last_stage), stats);
    stats.seconds = seconds_since(t0);
    return stats;
  }
  for (int32_t p : plan.processes()) {
    if (p >= info.size) {
      fail(ErrorCode::kInvalidArgument, "plan: needs process " + std::to_string(p) + " but the " +
                                            info.name + " transport has " +
                                            std::to_string(info.size) + " ranks");
    }
  }
  // (1) Everything local first, so that a bad buffer fails before any
  // communication.
  const bool participates =
      std::binary_search(plan.processes().begin(), plan.processes().end(), process);
  Schedule built;
  Schedule* schedule = &built;
  const bool cached = cache_ != nullptr && options.cache_schedule;
  if (participates) {
    if (!plan.parts().contains(process)) {
      fail(ErrorCode::kInvalidArgument,
           "plan: lacks the part of process " + std::to_string(process) +
               " (make it with PlanScope::kAll or PlanScope::kProcess for this process)");
    }
    exec_detail::validate_buffers(plan, local_buffers, process);
    if (cached) {
      schedule = &cache_->get(plan, process, info, options, &stats.schedule_cached);
    } else {
      built = engine_detail::build_schedule(plan, process, plan.part(process), info, options);
    }
  }
  // (2) The agreement.
  const bool first = !agreed_.contains(plan.fingerprint());
  if (options.agreement == ExecuteOptions::Agreement::kEveryCall ||
      (options.agreement == ExecuteOptions::Agreement::kFirstUse && first)) {
    agree(*transport_, plan, options.timeout_seconds);
    agreed_.insert(plan.fingerprint());
    stats.agreed = true;
  }
  // (3) Execution.
  if (participates) Run(*transport_, plan, local_buffers, options, *schedule, cached, stats).go();
  stats.seconds = seconds_since(t0);
  return stats;
}

}  // namespace reshard
