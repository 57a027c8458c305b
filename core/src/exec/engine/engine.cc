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

#include "exec/engine/agreement.h"
#include "exec/engine/direct_copies.h"
#include "exec/engine/engine_cache.h"
#include "exec/engine/scaled_sources.h"
#include "exec/schedule/engine_schedule.h"
#include "exec/schedule/exec_common.h"
#include "reshard/box_copy.h"
#include "reshard/cast.h"
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
using engine_detail::WorkerPool;

// The engine's pool, (re)started with `threads` when it has fewer, or when
// this process is a fork() of the one that started its threads.
WorkerPool& grown(std::unique_ptr<WorkerPool>& pool, int threads) {
  if (pool == nullptr || pool->threads() < threads || pool->forked()) {
    engine_detail::drop_pool(pool);
    pool = std::make_unique<WorkerPool>(threads);
  }
  return *pool;
}
using Clock = WaitClock;

std::string hex(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 60; i >= 0; i -= 4) s += digits[(v >> i) & 15];
  return s;
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
  // Records every call handed to the transport (device memory only).
  void record_into(engine_detail::Replay* r) { record_ = r; }
  bool in_flight() const { return in_flight_; }
  // Room for `n` ops in a device's list, reserved before any is queued (a
  // list grown op by op copies itself at every doubling), in one block
  // for every device's list (`total`: the sum of their n; LargeArena).
  void reserve(int64_t device, int32_t ordinal, size_t n, size_t total) {
    if (host_) return;
    if (arena_ == nullptr) arena_ = std::make_shared<LargeArena>(total * sizeof(CopyOp));
    engine_detail::OpList& ops = queued_[{device, ordinal}];
    if (ops.empty()) ops = engine_detail::OpList(ArenaAllocator<CopyOp>(arena_));
    ops.reserve(n);
  }

  void copy(int64_t device, int32_t ordinal, const CopyDesc& d, DType dtype, const void* src,
            void* dst) {
    if (!host_)
      return queue(device, ordinal, {CopyOp::Kind::kCopy, d, dtype, ReduceOp::kSum, 0, src, dst});
    const int64_t elem = dtype_size(dtype);
    copy_box(d, elem, src, dst);
    moved(copy_desc_elements(d) * elem);
  }

  // A copy converting `from` elements to `to` (a cast in flight); a plain
  // copy when they are equal.
  void cast(int64_t device, int32_t ordinal, const CopyDesc& d, DType from, DType to,
            const void* src, void* dst) {
    if (from == to) return copy(device, ordinal, d, from, src, dst);
    if (!host_) {
      CopyOp op{CopyOp::Kind::kCast, d, from, ReduceOp::kSum, 0, src, dst};
      op.to_dtype = to;
      return queue(device, ordinal, op);
    }
    cast_box(d, from, to, src, dst);
    moved(copy_desc_elements(d) * dtype_size(to));
  }

  // A copy out of a source entry of a tensor with block scales, quantised
  // straight to its fp8 destination dtype with the scales in `buffers`
  // (ScaledSources::prepare); on device memory a kQuantise op.
  void quantise(int64_t device, int32_t ordinal, std::span<const TensorSpec> tensors,
                std::span<const TensorBuffers> buffers, uint32_t t, uint32_t entry,
                const CopyDesc& d, void* dst) {
    if (!host_) {
      // One shard per source entry, which every op out of it points to:
      // kept with the calls to replay, or for this execution.
      auto [at, fresh] = shard_at_.try_emplace({t, entry}, nullptr);
      if (fresh) {
        auto& store = record_ != nullptr ? record_->shards : shards_;
        at->second = &store.emplace_back(engine_detail::quantise_shard(tensors, buffers, t, entry));
      }
      return queue(device, ordinal,
                   engine_detail::quantise_op(tensors, buffers, t, entry, d, dst, at->second));
    }
    engine_detail::quantise_copy(tensors, buffers, t, entry, d, 0, copy_desc_runs(d), dst);
    moved(copy_desc_elements(d));
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
    bool any = false;
    for (const auto& [key, ops] : queued_) any |= !ops.empty();
    if (!any) return;
    // Each device's copies go to its own stream. Those of an earlier flush
    // (and transfers started since) may have written what these read on
    // another device (stages, scratch): the transport orders its streams.
    // Copies of one flush are independent across devices.
    if (flushed_) {
      transport_.order_streams();
      if (record_ != nullptr) record_->calls.push_back({true, 0, 0, 0, {}});
    }
    flushed_ = true;
    for (auto& [where, ops] : queued_) {
      if (ops.empty()) continue;
      if (record_ != nullptr) {
        // Kept to be replayed: the transport may remember it by its key.
        const uint64_t key = engine_detail::next_call_key();
        transport_.run_keyed_copies(where.first, where.second, ops, key);
        record_->calls.push_back({false, where.first, where.second, key, std::move(ops)});
        ops = {};
      } else {
        transport_.run_copies(where.first, where.second, ops);
        ops.clear();
      }
    }
  }

 private:
  void queue(int64_t device, int32_t ordinal, const CopyOp& op) {
    // Consecutive ops mostly go to one device: its list is looked up once
    // (map nodes stay put, and none is erased).
    if (last_ == nullptr || last_key_ != std::pair(device, ordinal)) {
      last_key_ = {device, ordinal};
      last_ = &queued_[last_key_];
    }
    last_->push_back(op);
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
  bool flushed_ = false;  // a flush of this execution ran
  engine_detail::Replay* record_ = nullptr;
  bool in_flight_ = false;
  int64_t since_progress_ = 0;
  std::vector<uint64_t> scratch_;
  // The scaled shards of kQuantise ops by (tensor, source entry), in
  // record_->shards or, when nothing is recorded, in shards_.
  std::map<std::pair<uint32_t, uint32_t>, const CopyOp::Shard*> shard_at_;
  std::deque<CopyOp::Shard> shards_;
  std::shared_ptr<LargeArena> arena_;  // what reserve() gives the lists
  std::map<std::pair<int64_t, int32_t>, engine_detail::OpList> queued_;
  std::pair<int64_t, int32_t> last_key_;
  engine_detail::OpList* last_ = nullptr;  // queued_[last_key_]
};

// --------------------------------------------------------------- the run

class Run {
 public:
  // `keep_state`: the schedule is cached, the transport may keep state in
  // it (TransferOp::state).
  Run(Transport& transport, const Plan& plan, std::span<const TensorBuffers> buffers,
      const ExecuteOptions& options, Schedule& schedule, bool keep_state, ExecuteStats& stats,
      std::unique_ptr<WorkerPool>& pool)
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
        copier_(transport, info_.memory == MemoryKind::kHost),
        pool_(pool) {}

  void go();

  // Records what go() hands the transport into `r`; after go(), keep()
  // moves the blocks those copies point into there too.
  void record(engine_detail::Replay* r) { copier_.record_into(r); }
  void keep(engine_detail::Replay& r) {
    for (auto& b : work_device_) r.blocks.push_back(std::move(b));
    for (auto& b : arenas_) r.blocks.push_back(std::move(b));
    work_device_.clear();
    arenas_.clear();
  }

 private:
  struct InFlight {
    uint32_t step;  // Schedule::steps index
    std::unique_ptr<TransferBatch> batch;
  };

  // Bytes per element in messages (casts: the smaller dtype).
  int64_t elem(uint32_t t) const { return wire_size(tensors_[t]); }
  // What a piece reads: its source buffer, or in a stage > 0 the
  // destination buffer it forwards from (reads_source).
  const void* src_ptr(const Piece& p, uint32_t stage) const {
    return reads_source(p, stage) ? buffers_[p.tensor].src[p.src_entry].data
                                  : buffers_[p.tensor].dst[p.src_entry].data;
  }
  void* dst_ptr(const Piece& p) const { return buffers_[p.tensor].dst[p.dst_entry].data; }
  // A direct copy's buffers and the device it writes: entries, or a
  // copy-staging scratch.
  const void* copy_src(const engine_detail::DirectCopy& c) {
    if (c.src_scratch == engine_detail::kNoScratch) return src_ptr(*c.piece, c.stage);
    const auto& b = s_.scratch[c.src_scratch];
    return work(b.block, b.offset);
  }
  void* copy_dst(const engine_detail::DirectCopy& c) {
    if (c.dst_scratch == engine_detail::kNoScratch) return dst_ptr(*c.piece);
    const auto& b = s_.scratch[c.dst_scratch];
    return work(b.block, b.offset);
  }
  int64_t copy_device(const engine_detail::DirectCopy& c) const {
    if (c.dst_scratch != engine_detail::kNoScratch) return s_.scratch[c.dst_scratch].device;
    return tensors_[c.piece->tensor].dst.device(c.piece->dst_entry);
  }
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
  // A reduction's target buffer (destination entry or scratch) and where
  // it accumulates.
  void* target(const engine_detail::AccTarget& a) {
    if (a.scratch != engine_detail::kNoScratch) {
      const auto& b = s_.scratch[a.scratch];
      return work(b.block, b.offset);
    }
    return buffers_[a.tensor].dst[a.dst_entry].data;
  }
  void* accumulator(const engine_detail::AccTarget& a) {
    return a.separate ? static_cast<void*>(work(a.acc_block, a.acc_offset)) : target(a);
  }
  void allocate();
  void fill();
  void fill_acc_once(size_t a_index);
  void run_direct(size_t d);
  void pack_message(size_t mi);
  std::unique_ptr<TransferBatch> post(size_t ri, size_t step);
  void unpack(size_t ri, size_t step);
  void reduce_ready(int64_t round);
  void store_acc(size_t a);
  // The overlap of rounds and stages (engine_schedule.h): what may start
  // now, what completed, and the reductions of completed rounds.
  bool done(uint32_t event) const { return done_[event] != 0; }
  bool deps_done(uint32_t begin, uint32_t end) const;
  bool postable(uint32_t g) const;
  bool post_ready();
  bool run_ready_directs();
  // Whether a direct round (its round key, -1: local pieces) is of stage 0.
  static bool stage0(int64_t round) { return round < engine_detail::round_key(1, 0); }
  bool test_in_flight();
  void complete(uint32_t g);
  bool reduce_completed_rounds();
  void finish_accs(int64_t round);
  [[noreturn]] void timed_out();

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
  size_t next_contribution_ = 0;
  // Overlap state.
  int64_t last_ = 0;                // last round key to run (ExecuteOptions::last_stage)
  size_t rounds_ = 0;               // rounds with key <= last_
  size_t directs_ = 0;              // direct rounds with key <= last_
  size_t window_ = 1;               // ExecuteOptions::max_batches_in_flight
  bool strict_ = false;             // steps posted in (stage, round, step) order only
  bool sequential_ = false;         // a round starts after the previous one was reduced
  std::vector<uint8_t> done_;       // per event (Schedule::events)
  std::vector<uint8_t> filled_;     // per accumulator: filled with the identity
  std::vector<uint8_t> released_;   // per message: its staging is free again
  std::vector<uint8_t> posted_;     // per step
  std::vector<uint8_t> step_done_;  // per step
  std::vector<uint32_t> chan_pos_;  // per channel: its next step to post
  std::vector<uint32_t> unposted_;  // steps not posted, in priority order
  std::vector<size_t> steps_left_;  // per round: steps not completed
  std::vector<size_t> unreleased_;  // per round: staged messages not released
  std::vector<uint8_t> round_overlapped_;
  std::vector<int64_t> open_by_stage_;  // steps not completed, per stage
  std::vector<size_t> in_flight_by_stage_;
  std::vector<InFlight> in_flight_;
  size_t released_prefix_ = 0;  // leading rounds whose staging is all free
  size_t reduced_ = 0;          // leading rounds completed and reduced
  size_t first_open_ = 0;       // first round with a step not completed
  size_t next_direct_ = 0;      // first direct round not run
  // Host memory: the direct copies' threads (ExecuteOptions::threads).
  std::unique_ptr<DirectRunner> runner_;
  std::unique_ptr<WorkerPool>& pool_;  // the engine's
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
  stats_.scratch_bytes = s_.scratch_bytes;
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
  filled_.assign(s_.accs.size(), 0);
  for (size_t i = 0; i < s_.accs.size(); ++i) {
    // A scratch may share its bytes with one read in an earlier stage
    // (engine_schedule.cc, add_scratch): filled just before its first
    // reduction (fill_acc_once), which follows every earlier round.
    if (s_.accs[i].scratch == engine_detail::kNoScratch) fill_acc_once(i);
  }
}

void Run::fill_acc_once(size_t a_index) {
  if (filled_[a_index]) return;
  filled_[a_index] = 1;
  const auto& a = s_.accs[a_index];
  const TensorSpec& spec = tensors_[a.tensor];
  copier_.fill_acc(a.device, ordinal_of(a.device), spec.dtype, combining_op(spec.src.reduce_op()),
                   accumulator(a), a.elements);
}

// Runs the copies of direct round `d` (host memory: in parallel).
void Run::run_direct(size_t d) {
  const engine_detail::DirectRound& r = s_.direct_rounds[d];
  const std::span<const engine_detail::DirectCopy> copies(s_.direct.data() + r.begin,
                                                          r.end - r.begin);
  if (runner_) {
    // While transfers are in flight, tasks stay small and the calling
    // thread gives the transport a chance to progress after each.
    const bool in_flight = copier_.in_flight();
    runner_->run_round(copies, {}, in_flight ? int64_t{256} << 10 : 0,
                       in_flight ? std::function<void()>([this] { transport_.progress(); })
                                 : std::function<void()>());
  } else {
    for (const auto& c : copies) {
      const Piece& p = *c.piece;
      const TensorSpec& spec = tensors_[p.tensor];
      const int64_t device = copy_device(c);
      if (c.src_scratch == engine_detail::kNoScratch && reads_source(p, c.stage) &&
          has_block_scales(spec)) {
        copier_.quantise(device, ordinal_of(device), tensors_, buffers_, p.tensor, p.src_entry,
                         *c.desc, copy_dst(c));
        continue;
      }
      copier_.cast(device, ordinal_of(device), *c.desc,
                   reads_source(p, c.stage) ? spec.dtype : out_dtype(spec), out_dtype(spec),
                   copy_src(c), copy_dst(c));
    }
  }
  done_[s_.direct_event(d)] = 1;
}

void Run::pack_message(size_t mi) {
  if (packed_[mi]) return;
  packed_[mi] = 1;
  const EngineMessage& m = s_.messages[mi];
  std::byte* out = staging(m.slot) + m.offset;
  for (size_t k = 0; k < m.pieces.size(); ++k) {
    const Piece& p = m.pieces[k];
    const TensorSpec& spec = tensors_[p.tensor];
    const Box region = plan_.region(*part_, p);
    Box box;
    const void* src = nullptr;
    // The buffer's dtype: the source's, or a relay's destination's.
    DType from = reads_source(p, m.stage) ? spec.dtype : out_dtype(spec);
    if (!m.scratch_src.empty() && m.scratch_src[k] != engine_detail::kNoScratch) {
      from = spec.dtype;
      // A stored scratch (the step waited for its reduction).
      const auto& b = s_.scratch[m.scratch_src[k]];
      box = b.box;
      src = work(b.block, b.offset);
    } else {
      box = plan_.source_box(p, m.stage);
      src = src_ptr(p, m.stage);
      if (reads_source(p, m.stage) && has_block_scales(spec)) {
        // Cast on send: quantised straight into the message.
        copier_.quantise(m.local_device, m.ordinal, tensors_, buffers_, p.tensor, p.src_entry,
                         make_copy_desc(region, box, region), out);
        out += region.volume() * elem(p.tensor);
        continue;
      }
    }
    copier_.cast(m.local_device, m.ordinal, make_copy_desc(region, box, region), from,
                 wire_dtype(spec, reads_source(p, m.stage)), src, out);
    out += region.volume() * elem(p.tensor);
  }
}

std::unique_ptr<TransferBatch> Run::post(size_t ri, size_t step) {
  // Pack this step's staged sends now: packing a step overlaps the
  // transfers of the steps posted before it.
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
    for (size_t k = 0; k < m.pieces.size(); ++k) {
      const Piece& p = m.pieces[k];
      const TensorSpec& spec = tensors_[p.tensor];
      const Box region = plan_.region(*part_, p);
      if (!m.scratch_dst.empty() && m.scratch_dst[k] != engine_detail::kNoScratch) {
        // Into a copy-staging scratch, in the tensor's dtype (no cast).
        const auto& b = s_.scratch[m.scratch_dst[k]];
        copier_.copy(m.local_device, m.ordinal, make_copy_desc(region, region, b.box), spec.dtype,
                     in, work(b.block, b.offset));
      } else if (!engine_detail::is_contribution(spec, p, m.stage)) {
        // Contributions are reduced with their round; relays copy reduced values.
        copier_.cast(m.local_device, m.ordinal,
                     make_copy_desc(region, region, spec.dst.box(p.dst_entry)),
                     wire_dtype(spec, reads_source(p, m.stage)), out_dtype(spec), in, dst_ptr(p));
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
    fill_acc_once(c.acc);
    const Box dst_box = a.box;
    void* acc = accumulator(a);
    const void* src = nullptr;
    Box src_box = c.region;
    if (c.from_buffer) {
      if (c.src_scratch != engine_detail::kNoScratch) {
        const auto& b = s_.scratch[c.src_scratch];
        src = work(b.block, b.offset);
      } else {
        src = c.src_dst ? buffers_[c.tensor].dst[c.src_entry].data
                        : buffers_[c.tensor].src[c.src_entry].data;
      }
      src_box = c.src_box;
    } else if (c.deferred_offset >= 0) {
      src = work(c.deferred_block, c.deferred_offset);
    } else {
      const EngineMessage& m = s_.messages[c.msg];
      src = staging(m.slot) + m.offset + c.msg_offset;
    }
    // A separate accumulator is indexed like the destination box.
    const CopyDesc d = make_copy_desc(c.region, src_box, dst_box);
    const int64_t device = a.device;
    copier_.reduce(device, ordinal_of(device), d, spec.dtype, combining_op(spec.src.reduce_op()),
                   src, acc);
  }
}

[[noreturn]] void Run::timed_out() {
  std::vector<int32_t> peers;
  for (const InFlight& f : in_flight_) {
    f.batch->test();  // settle what completed unobserved
    for (int32_t p : f.batch->pending_peers()) peers.push_back(p);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  const RoundPlan& r = s_.rounds[s_.steps[in_flight_.front().step].round];
  fail(ErrorCode::kTimeout,
       "execute: timed out after " + seconds_text(options_.timeout_seconds) + " in round " +
           std::to_string(r.round) +
           (r.stage > 0 ? " of stage " + std::to_string(r.stage) : std::string()) +
           " waiting for rank(s) " + rank_list(peers) + " (this is rank " +
           std::to_string(info_.rank) + ", plan " + hex(plan_.fingerprint()) + ")");
}

// Stores accumulator `a` (a separate one, or a mean's division, in place
// where the destination is the accumulator).
void Run::store_acc(size_t a_index) {
  fill_acc_once(a_index);  // a scratch without contributions holds the identity
  const auto& a = s_.accs[a_index];
  const TensorSpec& spec = tensors_[a.tensor];
  // A scratch holds sums: a mean divides at its destination only.
  const int32_t divisor =
      a.scratch == engine_detail::kNoScratch ? exec_detail::mean_divisor(spec) : 1;
  if (!a.separate && divisor == 1) return;
  void* dst = target(a);
  copier_.store(a.device, ordinal_of(a.device), spec.dtype, accumulator(a), dst, a.elements,
                divisor);
}

// The reductions whose last contribution was reduced in round `round` (or
// that have none, round == INT64_MIN) are finished: stored, and what later
// stages forward from them may go.
void Run::finish_accs(int64_t round) {
  bool any = false;
  for (size_t a = 0; a < s_.accs.size(); ++a) {
    if (s_.accs[a].last_ready != round || done_[s_.acc_event(a)]) continue;
    store_acc(a);
    done_[s_.acc_event(a)] = 1;
    any = true;
  }
  if (any) copier_.flush();
}

bool Run::deps_done(uint32_t begin, uint32_t end) const {
  for (uint32_t i = begin; i < end; ++i) {
    if (!done(s_.deps[i])) return false;
  }
  return true;
}

// Whether step g may be posted now (engine_schedule.h: dependencies,
// staging, the order of each channel, the window).
bool Run::postable(uint32_t g) const {
  const engine_detail::StepPlan& st = s_.steps[g];
  if (posted_[g]) return false;
  if (sequential_ && reduced_ < st.round) return false;
  // The window is per stage, so that receives of later rounds in flight do
  // not hold back what a relay forwards.
  if (in_flight_by_stage_[st.stage] >= window_ && st.round != first_open_) return false;
  for (uint32_t i = st.chan_begin; i < st.chan_end; ++i) {
    // g is in channel c, at or after its position.
    const uint32_t c = s_.step_channels[i];
    if (s_.channel_steps[c][chan_pos_[c]] != g) return false;
  }
  if (!deps_done(st.dep_begin, st.dep_end)) return false;
  for (size_t mi : s_.rounds[st.round].steps[st.step]) {
    const EngineMessage& m = s_.messages[mi];
    if (m.mode != EngineMessage::Mode::kStaged || m.bytes == 0 || st.round == 0) continue;
    if (released_prefix_ + 1 < st.round) return false;
    for (uint32_t k = m.conflict_begin; k < m.conflict_end; ++k) {
      if (!released_[s_.conflicts[k]]) return false;
    }
  }
  return true;
}

// Posts every step that may start, in priority order (strict: stops at the
// first that may not). True when it posted one.
bool Run::post_ready() {
  bool any = false;
  size_t kept = 0;
  bool blocked = false;
  for (size_t i = 0; i < unposted_.size(); ++i) {
    const uint32_t g = unposted_[i];
    if (!blocked && postable(g)) {
      const engine_detail::StepPlan& st = s_.steps[g];
      if (!round_overlapped_[st.round] && first_open_ < st.round) {
        round_overlapped_[st.round] = 1;
        ++stats_.overlapped_rounds;
      }
      for (uint32_t s = 0; s < st.stage; ++s) {
        if (open_by_stage_[s] > 0) {
          ++stats_.overlapped_stage_batches;
          break;
        }
      }
      copier_.set_in_flight(!in_flight_.empty());
      in_flight_.push_back({g, post(st.round, st.step)});
      ++in_flight_by_stage_[st.stage];
      posted_[g] = 1;
      for (uint32_t k = st.chan_begin; k < st.chan_end; ++k) ++chan_pos_[s_.step_channels[k]];
      any = true;
      continue;
    }
    if (strict_) blocked = true;
    unposted_[kept++] = g;
  }
  unposted_.resize(kept);
  return any;
}

// Runs the direct rounds, in order, whose dependencies are done.
bool Run::run_ready_directs() {
  bool any = false;
  while (next_direct_ < directs_) {
    const engine_detail::DirectRound& r = s_.direct_rounds[next_direct_];
    if (!deps_done(r.dep_begin, r.dep_end)) break;
    // Without overlap (and on stream-ordered transports), a round's copies
    // run once every earlier round was posted, as they always did.
    if (strict_ && r.round >= 0) {
      bool earlier_unposted = false;
      for (uint32_t g : unposted_) {
        earlier_unposted = s_.rounds[s_.steps[g].round].key <= r.round;
        break;
      }
      if (earlier_unposted) break;
    }
    // Off the host, a round's copies are queued per device and each device's
    // queue goes to the transport in one call, in device order: a later
    // round that reads what this one wrote (a relay's source, a stage's
    // destination) must not share a flush with it, or a device that sorts
    // first would read before the writer ran. Rounds of stage 0 read only
    // source buffers and write disjoint regions of destinations: those that
    // run one after the other share a flush (fewer calls, fewer launches).
    if (any && !(stage0(s_.direct_rounds[next_direct_ - 1].round) && stage0(r.round))) {
      copier_.flush();
    }
    copier_.set_in_flight(!in_flight_.empty());
    run_direct(next_direct_++);
    any = true;
  }
  if (any) copier_.flush();
  return any;
}

// Step g's batch completed: unpack what it received, release staging,
// mark its messages done.
void Run::complete(uint32_t g) {
  const engine_detail::StepPlan& st = s_.steps[g];
  unpack(st.round, st.step);
  for (size_t mi : s_.rounds[st.round].steps[st.step]) {
    const EngineMessage& m = s_.messages[mi];
    done_[mi] = 1;
    const bool staged = m.mode == EngineMessage::Mode::kStaged && m.bytes > 0;
    // Summands stay in staging until their round is reduced.
    if (staged && !(m.has_reduce && !m.send)) {
      released_[mi] = 1;
      --unreleased_[st.round];
    }
  }
  step_done_[g] = 1;
  --open_by_stage_[st.stage];
  --in_flight_by_stage_[st.stage];
  --steps_left_[st.round];
  while (first_open_ < rounds_ && steps_left_[first_open_] == 0) ++first_open_;
}

bool Run::test_in_flight() {
  bool any = false;
  size_t kept = 0;
  for (size_t i = 0; i < in_flight_.size(); ++i) {
    if (in_flight_[i].batch->test()) {
      copier_.set_in_flight(true);
      complete(in_flight_[i].step);
      any = true;
      continue;
    }
    if (kept != i) in_flight_[kept] = std::move(in_flight_[i]);
    ++kept;
  }
  in_flight_.resize(kept);
  if (any) copier_.flush();
  return any;
}

// Reduces the rounds completed in order (summands keep their order), then
// finishes the reductions that were waiting for them.
bool Run::reduce_completed_rounds() {
  bool any = false;
  while (reduced_ < rounds_ && steps_left_[reduced_] == 0) {
    const RoundPlan& r = s_.rounds[reduced_];
    copier_.set_in_flight(!in_flight_.empty());
    reduce_ready(r.key);
    // Flushed with the stores below: an accumulator's summands and its
    // store in one call, which a transport can fuse into one pass.
    for (const auto& step : r.steps) {
      for (size_t mi : step) {
        const EngineMessage& m = s_.messages[mi];
        if (m.mode == EngineMessage::Mode::kStaged && m.bytes > 0 && m.has_reduce && !m.send) {
          released_[mi] = 1;
          --unreleased_[reduced_];
        }
      }
    }
    finish_accs(r.key);
    copier_.flush();
    ++reduced_;
    any = true;
  }
  while (released_prefix_ < rounds_ && unreleased_[released_prefix_] == 0) ++released_prefix_;
  return any;
}

void Run::go() {
  allocate();
  if (info_.memory == MemoryKind::kHost && !s_.direct.empty()) {
    const int threads = engine_detail::execution_threads(s_, options_.threads, info_.host_ranks);
    runner_ = std::make_unique<DirectRunner>(plan_, buffers_, s_, grown(pool_, threads), threads);
    // Copy-staging scratch (DirectCopy::src_scratch, dst_scratch).
    std::vector<std::byte*> bases;
    for (auto& w : work_host_) bases.push_back(reinterpret_cast<std::byte*>(w.data()));
    runner_->set_work(std::move(bases));
  }
  if (info_.memory != MemoryKind::kHost && !s_.direct.empty()) {
    // The direct copies per device (a few devices, mostly in runs).
    std::vector<std::pair<int64_t, size_t>> per_device;
    for (const engine_detail::DirectCopy& c : s_.direct) {
      const int64_t device = copy_device(c);
      if (per_device.empty() || per_device.back().first != device) {
        auto it = std::find_if(per_device.begin(), per_device.end(),
                               [&](const auto& d) { return d.first == device; });
        if (it == per_device.end()) {
          per_device.emplace_back(device, 0);
        } else {
          std::swap(*it, per_device.back());
        }
      }
      ++per_device.back().second;
    }
    for (const auto& [device, n] : per_device)
      copier_.reserve(device, ordinal_of(device), n, s_.direct.size());
  }
  fill();
  stats_.local_bytes += s_.local_bytes;
  last_ = engine_detail::last_key(options_.last_stage);
  rounds_ = 0;
  while (rounds_ < s_.rounds.size() && s_.rounds[rounds_].key <= last_) ++rounds_;
  directs_ = 0;
  while (directs_ < s_.direct_rounds.size() && s_.direct_rounds[directs_].round <= last_) {
    ++directs_;
  }
  window_ = static_cast<size_t>(std::max(1, options_.max_batches_in_flight));
  strict_ = info_.stream_ordered || !options_.overlap;
  sequential_ = !options_.overlap;
  done_.assign(s_.events(), 0);
  released_.assign(s_.messages.size(), 0);
  posted_.assign(s_.steps.size(), 0);
  step_done_.assign(s_.steps.size(), 0);
  chan_pos_.assign(s_.channel_steps.size(), 0);
  steps_left_.assign(rounds_, 0);
  unreleased_.assign(rounds_, 0);
  round_overlapped_.assign(rounds_, 0);
  uint32_t stages = 1;
  for (const auto& st : s_.steps) stages = std::max(stages, st.stage + 1);
  open_by_stage_.assign(stages, 0);
  in_flight_by_stage_.assign(stages, 0);
  for (uint32_t g : s_.priority) {
    const auto& st = s_.steps[g];
    if (st.round >= rounds_) continue;
    unposted_.push_back(g);
    ++steps_left_[st.round];
    ++open_by_stage_[st.stage];
    for (size_t mi : s_.rounds[st.round].steps[st.step]) {
      const EngineMessage& m = s_.messages[mi];
      if (m.mode == EngineMessage::Mode::kStaged && m.bytes > 0) ++unreleased_[st.round];
    }
  }
  // Reductions without contributions are finished at once (their store
  // writes the identity; later stages write over it).
  finish_accs(INT64_MIN);
  bool started = false;
  auto last_progress = Clock::now();
  bool idle = false;  // since last_progress
  Backoff backoff;
  // What may start changes only when something completed, ran or was
  // posted: idle polls test the batches in flight and nothing else.
  bool changed = true;
  for (;;) {
    bool progress = false;
    if (changed) {
      progress |= post_ready();
      progress |= run_ready_directs();
    }
    if (!started) {
      // Summands read from source buffers, while the first batches fly.
      started = true;
      copier_.set_in_flight(!in_flight_.empty());
      reduce_ready(-1);
      finish_accs(-1);  // summands and stores in one call (see above)
      copier_.flush();
      progress = true;
    }
    progress |= test_in_flight();
    progress |= reduce_completed_rounds();
    changed = progress;
    if (unposted_.empty() && in_flight_.empty() && next_direct_ == directs_ &&
        reduced_ == rounds_) {
      break;
    }
    if (progress) {
      const auto now = Clock::now();
      if (idle) stats_.wait_seconds += std::chrono::duration<double>(now - last_progress).count();
      idle = false;
      last_progress = now;
      backoff.reset();
      continue;
    }
    idle = true;
    if (in_flight_.empty()) {
      fail(ErrorCode::kInternal, "execute: no step can start and none is in flight (" +
                                     std::to_string(unposted_.size()) +
                                     " steps left, direct round " + std::to_string(next_direct_) +
                                     " of " + std::to_string(directs_) + ")");
    }
    const auto deadline =
        last_progress + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::min(options_.timeout_seconds, 1e7)));
    if (Clock::now() > deadline) timed_out();
    backoff.pause(deadline);
  }
  if (idle) stats_.wait_seconds += seconds_since(last_progress);
  copier_.set_in_flight(false);
  // (Contributions of stages after last_stage are not reduced.)
  if (next_contribution_ != s_.contributions.size() &&
      s_.contributions[next_contribution_].ready <= last_) {
    fail(ErrorCode::kInternal, "execute: contributions left unreduced");
  }
  for (size_t a = 0; a < s_.accs.size(); ++a) {
    if (!done_[s_.acc_event(a)]) {
      store_acc(a);
      done_[s_.acc_event(a)] = 1;
    }
  }
  copier_.flush();
  transport_.finish(options_.timeout_seconds);
  stats_.rounds = static_cast<int32_t>(s_.rounds.size());
}

// The ranks' agreement on what `process` executes (agreement.h), once per
// (fingerprint, part digest) under kFirstUse, every call under kEveryCall;
// true when it ran.
bool agree_once(Transport& transport, std::set<std::pair<uint64_t, uint64_t>>& agreed,
                const Plan& plan, int32_t process, const ExecuteOptions& options) {
  if (options.agreement == ExecuteOptions::Agreement::kSkip) return false;
  const engine_detail::AgreeSubject subject = engine_detail::agree_subject(plan, process);
  const std::pair key{plan.fingerprint(), subject.part_digest};
  if (options.agreement != ExecuteOptions::Agreement::kEveryCall && agreed.contains(key))
    return false;
  engine_detail::agree(transport, plan, subject, options.timeout_seconds);
  agreed.insert(key);
  return true;
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
  engine_detail::drop_pool(pool_);
  pool_ = std::move(other.pool_);
  transport_ = std::move(other.transport_);
  agreed_ = std::move(other.agreed_);
  return *this;
}
Engine::~Engine() { engine_detail::drop_pool(pool_); }

namespace {
// The buffers to execute with: `buffers` with the scaled tensors' sources
// quantised into the schedule's scratch (exec/engine/scaled_sources.h), on
// the engine's threads.
std::span<const TensorBuffers> scale_sources(Schedule& schedule, const Plan& plan, int32_t process,
                                             std::span<const TensorBuffers> buffers,
                                             const TransportInfo& info,
                                             const ExecuteOptions& options,
                                             std::unique_ptr<WorkerPool>& pool_,
                                             Transport& transport) {
  if (!engine_detail::ScaledSources::any(plan)) return buffers;
  if (schedule.scaled_sources == nullptr)
    schedule.scaled_sources = std::make_shared<engine_detail::ScaledSources>();
  // Threads as for the copies: one below kParallelMinBytes.
  const int threads = engine_detail::ScaledSources::source_bytes(plan, process, buffers) <
                              engine_detail::kParallelMinBytes
                          ? 1
                          : resolve_threads(options.threads, info.host_ranks);
  WorkerPool* pool = threads > 1 ? &grown(pool_, threads) : nullptr;
  return schedule.scaled_sources->prepare(plan, process, buffers, info, pool, threads, &transport);
}
}  // namespace

ExecuteStats Engine::execute(const Plan& plan, int32_t process,
                             std::span<const TensorBuffers> local_buffers,
                             const ExecuteOptions& options) {
  const auto t0 = Clock::now();
  // The caller's buffers: what a replay is recorded for and matched
  // against (a block-scale scratch keeps its place, and scale_sources
  // refills it before every execution, a replay included).
  const std::span<const TensorBuffers> given_buffers = local_buffers;
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
  engine_detail::ScaledSources::check_transport(plan, info, whole);
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
    Schedule built;
    Schedule* schedule = &built;
    if (cache_ != nullptr && options.cache_schedule) {
      schedule = &cache_->get_whole(plan, &stats.schedule_cached);
    } else {
      built = engine_detail::build_whole_schedule(plan);
    }
    local_buffers =
        scale_sources(*schedule, plan, process, local_buffers, info, options, pool_, *transport_);
    // (2) The agreement, with itself: kept so that every execution follows
    // the same order of events.
    stats.agreed = agree_once(*transport_, agreed_, plan, process, options);
    // (3) Execution.
    // Nothing waits here, so the deadline bounds the whole execution
    // (copies of an untrusted plan included), from the start of this call.
    engine_detail::execute_whole(
        plan, local_buffers, *schedule,
        grown(pool_, engine_detail::execution_threads(*schedule, options.threads)), options.threads,
        engine_detail::last_key(options.last_stage), stats,
        t0 + std::chrono::duration_cast<Clock::duration>(
                 std::chrono::duration<double>(std::min(options.timeout_seconds, 1e7))),
        options.timeout_seconds);
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
  // A repeated execution on device memory that only copies between this
  // process's buffers (no messages) replays the calls of the previous one
  // when its buffers and options are the same (Replay).
  const bool may_replay = cached && info.memory != MemoryKind::kHost && info.stream_ordered;
  // The buffers are those of the cached schedule's kept execution
  // (Replay::buffers).
  bool same_buffers = false;
  if (participates) {
    if (!plan.parts().contains(process)) {
      fail(ErrorCode::kInvalidArgument,
           "plan: lacks the part of process " + std::to_string(process) +
               " (make it with PlanScope::kAll or PlanScope::kProcess for this process)");
    }
    Schedule* found = nullptr;
    if (may_replay) {
      found = cache_->find(plan, process, info, options);
      same_buffers = found != nullptr && found->replay != nullptr &&
                     engine_detail::same_buffers(found->replay->buffers, local_buffers);
    }
    // The plan (equal to the cached schedule's) and the buffers (equal to
    // those of its kept execution) were validated together then.
    if (!same_buffers) exec_detail::validate_buffers(plan, local_buffers, process);
    if (found != nullptr) {
      schedule = found;
      stats.schedule_cached = true;
    } else if (cached) {
      schedule = &cache_->get(plan, process, info, options, &stats.schedule_cached);
    } else {
      built = engine_detail::build_schedule(plan, process, plan.part(process), info, options);
    }
    local_buffers =
        scale_sources(*schedule, plan, process, local_buffers, info, options, pool_, *transport_);
  }
  // (2) The agreement.
  stats.agreed = agree_once(*transport_, agreed_, plan, process, options);
  // (3) Execution.
  if (participates) {
    const bool replayable = may_replay && schedule->messages.empty() && schedule->slots.empty();
    engine_detail::Replay* r = schedule->replay.get();
    if (replayable && r != nullptr && same_buffers && r->last_stage == options.last_stage) {
      for (const engine_detail::Replay::Call& c : r->calls) {
        if (c.order) {
          transport_->order_streams();
        } else {
          transport_->run_keyed_copies(c.device, c.ordinal, c.ops, c.key);
        }
      }
      transport_->finish(options.timeout_seconds);
      const bool agreed = stats.agreed;
      stats = r->stats;
      stats.agreed = agreed;
      stats.schedule_cached = true;
      stats.replayed = true;
    } else {
      schedule->replay.reset();  // its blocks go back first
      auto record = replayable ? std::make_shared<engine_detail::Replay>() : nullptr;
      Run run(*transport_, plan, local_buffers, options, *schedule, cached, stats, pool_);
      if (record) run.record(record.get());
      run.go();
      if (record) {
        run.keep(*record);
        record->buffers = engine_detail::buffer_list(given_buffers);
        record->last_stage = options.last_stage;
        record->stats = stats;
        schedule->replay = std::move(record);
      }
    }
  }
  stats.seconds = seconds_since(t0);
  return stats;
}

}  // namespace reshard
