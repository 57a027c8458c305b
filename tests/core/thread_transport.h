// A transport of threads for engine tests: every plan process is a thread
// with its own engine, and the transport delivers each message after a
// random number of polls of its receive, copying the bytes into the
// receiver only then. A send reads its bytes when it starts, so a relay
// that forwarded a region before the message writing it was delivered
// forwards poison, and the oracle sees it.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/copy_op_host.h"
#include "reshard/box_copy.h"
#include "reshard/engine.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

namespace reshard::thread_transport {

constexpr int32_t kEveryRank = -2;

struct Event {
  bool send = false;  // a send started; else a receive delivered
  int32_t src = 0;
  int32_t dst = 0;
};

// What the ranks share: messages in flight, receives posted, the log.
struct Hub {
  explicit Hub(int32_t n, uint64_t seed, int32_t max_delay)
      : size(n), rng(seed), max_delay(max_delay) {}
  struct Slot {
    std::vector<Segment> segments;  // gather receives
    void* data = nullptr;
    int64_t bytes = 0;
    bool matched = false;
    std::vector<std::byte> mail;
    int32_t polls_left = 0;
    bool done = false;
  };
  int32_t size;
  std::mutex mu;
  std::mt19937_64 rng;
  int32_t max_delay;
  // The first `slow_first` messages of every channel into rank `slow_rank`
  // wait `slow_polls` polls (its stage-0 receives come late); with
  // `slow_after`, those after the first `slow_first` do.
  int32_t slow_rank = -1;
  int32_t slow_first = 0;
  int32_t slow_polls = 0;
  bool slow_after = false;
  std::map<std::pair<int32_t, int32_t>, int32_t> matched;
  std::map<std::pair<int32_t, int32_t>, std::deque<std::vector<std::byte>>> mail;
  std::map<std::pair<int32_t, int32_t>, std::deque<std::shared_ptr<Slot>>> posted;
  std::vector<Event> log;
  std::string error;
  // allgather
  std::condition_variable cv;
  int64_t generation = 0;
  int32_t arrived = 0;
  std::vector<std::vector<std::byte>> records, result;

  // Matches sends with posted receives in start order (mu held).
  void pump(int32_t src, int32_t dst) {
    auto& m = mail[{src, dst}];
    auto& p = posted[{src, dst}];
    while (!m.empty() && !p.empty()) {
      std::shared_ptr<Slot> s = p.front();
      p.pop_front();
      if (static_cast<int64_t>(m.front().size()) != s->bytes && error.empty()) {
        error = "a message of " + std::to_string(m.front().size()) + " bytes met a receive of " +
                std::to_string(s->bytes);
      }
      s->mail = std::move(m.front());
      m.pop_front();
      s->matched = true;
      s->polls_left = static_cast<int32_t>(rng() % static_cast<uint64_t>(max_delay + 1));
      const bool early = matched[{src, dst}]++ < slow_first;
      if ((dst == slow_rank || slow_rank == kEveryRank) && early != slow_after) {
        s->polls_left = slow_polls;
      }
    }
  }
};

class ThreadBlock final : public StagingBlock {
 public:
  explicit ThreadBlock(int64_t bytes) : data_(static_cast<size_t>(bytes)) {}
  std::byte* data() override { return data_.data(); }
  int64_t bytes() const override { return static_cast<int64_t>(data_.size()); }

 private:
  std::vector<std::byte> data_;
};

class ThreadBatch final : public TransferBatch {
 public:
  ThreadBatch(Hub& hub, int32_t rank) : hub_(hub), rank_(rank) {}
  void add(int32_t peer, std::shared_ptr<Hub::Slot> s) { slots_.emplace_back(peer, std::move(s)); }
  bool test() override {
    std::lock_guard lock(hub_.mu);
    bool all = true;
    for (auto& [peer, s] : slots_) {
      if (s->done) continue;
      if (!s->matched || s->polls_left-- > 0) {
        all = false;
        continue;
      }
      // Delivered now, not before: the receiver's memory changes here.
      if (s->segments.empty()) {
        if (s->bytes > 0) std::memcpy(s->data, s->mail.data(), static_cast<size_t>(s->bytes));
      } else {
        const std::byte* in = s->mail.data();
        for (const Segment& seg : s->segments) {
          copy_box(make_copy_desc(seg.region, seg.region, seg.buffer_box), seg.elem_size, in,
                   seg.buffer);
          in += seg.region.volume() * seg.elem_size;
        }
      }
      s->done = true;
      hub_.log.push_back({false, peer, rank_});
    }
    return all;
  }
  std::vector<int32_t> pending_peers() const override {
    std::vector<int32_t> out;
    for (const auto& [peer, s] : slots_) {
      if (!s->done) out.push_back(peer);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

 private:
  Hub& hub_;
  int32_t rank_;
  std::vector<std::pair<int32_t, std::shared_ptr<Hub::Slot>>> slots_;
};

// Runs a transport's copy operations on host memory at once, in order: what
// one CUDA stream does with a run_copies call.
inline void run_copy_ops(std::span<const CopyOp> ops) {
  for (const CopyOp& op : ops) {
    // A reduction's source in staging may be misaligned for its dtype; such
    // a source is always the dense packed region.
    const void* src = op.src;
    std::vector<uint64_t> aligned;
    const int64_t elem = dtype_size(op.dtype);
    if (op.kind == CopyOp::Kind::kReduce &&
        reinterpret_cast<uintptr_t>(src) % static_cast<uintptr_t>(elem) != 0) {
      const int64_t n = copy_desc_elements(op.desc);
      aligned.resize(static_cast<size_t>((n * elem + 7) / 8));
      std::memcpy(aligned.data(), src, static_cast<size_t>(n * elem));
      src = aligned.data();
    }
    testing::apply_copy_op(op, src, op.dst);
  }
}

// `device_path`: the transport says its memory is not the host's and is
// stream-ordered (as the nccl transport does), so the engine hands it its
// copies through run_copies, which runs them at once (run_copy_ops).
class ThreadTransport final : public Transport {
 public:
  ThreadTransport(Hub& hub, int32_t rank, bool gather, bool device_path = false)
      : hub_(hub), rank_(rank), gather_(gather), device_path_(device_path) {}
  TransportInfo info() const override {
    TransportInfo i;
    i.name = "threads";
    i.rank = rank_;
    i.size = hub_.size;
    i.gather = gather_;
    if (device_path_) {
      i.memory = MemoryKind::kCuda;
      i.stream_ordered = true;
    }
    return i;
  }
  void run_copies(int64_t, int32_t, std::span<const CopyOp> ops) override {
    if (!device_path_) Transport::run_copies(0, 0, ops);
    run_copy_ops(ops);
  }
  std::unique_ptr<StagingBlock> allocate_staging(int64_t, int32_t, int64_t bytes) override {
    return std::make_unique<ThreadBlock>(bytes);
  }
  std::unique_ptr<TransferBatch> start(std::span<const TransferOp> ops) override {
    auto batch = std::make_unique<ThreadBatch>(hub_, rank_);
    std::lock_guard lock(hub_.mu);
    for (const TransferOp& op : ops) {
      if (op.kind != TransferOp::Kind::kRecv) continue;
      auto s = std::make_shared<Hub::Slot>();
      s->data = op.data;
      s->bytes = op.bytes;
      if (op.data == nullptr) s->segments.assign(op.segments.begin(), op.segments.end());
      hub_.posted[{op.peer, rank_}].push_back(s);
      batch->add(op.peer, s);
      hub_.pump(op.peer, rank_);
    }
    for (const TransferOp& op : ops) {
      if (op.kind != TransferOp::Kind::kSend) continue;
      // The bytes are read now: what a relay has not received yet is poison.
      std::vector<std::byte> bytes(static_cast<size_t>(op.bytes));
      if (op.data != nullptr) {
        if (op.bytes > 0) std::memcpy(bytes.data(), op.data, bytes.size());
      } else {
        std::byte* out = bytes.data();
        for (const Segment& seg : op.segments) {
          copy_box(make_copy_desc(seg.region, seg.buffer_box, seg.region), seg.elem_size,
                   seg.buffer, out);
          out += seg.region.volume() * seg.elem_size;
        }
      }
      hub_.mail[{rank_, op.peer}].push_back(std::move(bytes));
      hub_.log.push_back({true, rank_, op.peer});
      hub_.pump(rank_, op.peer);
    }
    return batch;
  }
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> record,
                                                double) override {
    std::unique_lock lock(hub_.mu);
    if (hub_.arrived == 0) hub_.records.assign(static_cast<size_t>(hub_.size), {});
    hub_.records[static_cast<size_t>(rank_)].assign(record.begin(), record.end());
    const int64_t gen = hub_.generation;
    if (++hub_.arrived == hub_.size) {
      hub_.result = hub_.records;
      hub_.arrived = 0;
      ++hub_.generation;
      hub_.cv.notify_all();
    } else {
      hub_.cv.wait(lock, [&] { return hub_.generation != gen; });
    }
    return hub_.result;
  }
  [[noreturn]] void abort(int) noexcept override { std::abort(); }

 private:
  Hub& hub_;
  int32_t rank_;
  bool gather_;
  bool device_path_;
};

// Runs `run` for ranks 0 .. hub.size - 1, each on its own thread with an
// Engine on a ThreadTransport of `hub`, storing what each returns in
// stats[rank]. Returns the ranks' errors ("rank r: what; ...") followed by
// the hub's, empty when every rank finished.
inline std::string run_ranks(Hub& hub, bool gather,
                             const std::function<ExecuteStats(Engine&, int32_t)>& run,
                             std::vector<ExecuteStats>& stats, bool device_path = false) {
  const auto n = static_cast<size_t>(hub.size);
  stats.resize(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> workers;
  for (int32_t r = 0; r < hub.size; ++r) {
    workers.emplace_back([&, r] {
      try {
        Engine engine(std::make_unique<ThreadTransport>(hub, r, gather, device_path));
        stats[static_cast<size_t>(r)] = run(engine, r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& w : workers) w.join();
  std::string error;
  for (const auto& e : errors) {
    if (!e.empty()) error += e + "; ";
  }
  return error + hub.error;
}

// `in` planned whole and by each rank for its own part, the parts executed
// across ranks of a Hub (seed, `gather`, `device_path` as above), and every
// destination checked against the oracle. Returns the ranks' errors (as
// run_ranks) or, when they all finished, the oracle's mismatches; empty
// when every element is right.
inline std::string execute_parts_and_check(const PlanInput& in, uint64_t seed, bool gather,
                                           bool device_path) {
  const Plan full = make_plan(in);
  int32_t n = 0;
  for (int32_t p : full.processes()) n = std::max(n, p + 1);
  Hub hub(n, seed, 20);
  OracleBuffers buffers = fill_sources(full);
  const std::vector<TensorBuffers> views = buffers.views();
  std::vector<ExecuteStats> stats;
  ExecuteOptions options;
  options.timeout_seconds = 60;
  const std::string error = run_ranks(
      hub, gather,
      [&](Engine& engine, int32_t r) {
        const Plan part = make_plan(in, PlanRequest{PlanScope::kProcess, r, false});
        return engine.execute(part, r, views, options);
      },
      stats, device_path);
  if (!error.empty()) return error;
  const OracleReport report = check_destinations(full, buffers);
  return report.ok() ? "" : std::to_string(report.mismatches) + " mismatches";
}

}  // namespace reshard::thread_transport
