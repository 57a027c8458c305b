// The engine's overlap of rounds and stages (docs/distributed.md), on a
// transport of threads: every plan process is a thread with its own engine,
// and the transport delivers each message after a random number of polls of
// its receive, copying the bytes into the receiver only then. A send reads
// its bytes when it starts, so a relay that forwarded a region before the
// message writing it was delivered forwards poison, and the oracle sees it.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "reshard/box_copy.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/spec.h"

namespace reshard {
namespace {

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

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(Hub& hub, int32_t rank, bool gather) : hub_(hub), rank_(rank), gather_(gather) {}
  TransportInfo info() const override {
    TransportInfo i;
    i.name = "threads";
    i.rank = rank_;
    i.size = hub_.size;
    i.gather = gather_;
    return i;
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
};

struct RunResult {
  std::vector<ExecuteStats> stats;  // per rank
  std::vector<Event> log;
  std::string error;
  OracleReport report;
};

// Executes `input` with one thread per plan process, each planning its own
// part, and checks every destination element written by stages
// 0..options.last_stage.
struct Slow {
  int32_t rank = -1;  // kEveryRank: every rank
  int32_t first = 0;
  int32_t polls = 0;
  bool after = false;
};

RunResult run_threads(const PlanInput& input, uint64_t seed, int32_t max_delay, bool gather,
                      const ExecuteOptions& options, Slow slow = {}) {
  const Plan full = make_plan(input);
  int32_t n = 0;
  for (int32_t p : full.processes()) n = std::max(n, p + 1);
  Hub hub(n, seed, max_delay);
  hub.slow_rank = slow.rank;
  hub.slow_first = slow.first;
  hub.slow_polls = slow.polls;
  hub.slow_after = slow.after;
  OracleBuffers buffers = fill_sources(full);
  const std::vector<TensorBuffers> views = buffers.views();
  RunResult out;
  out.stats.resize(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Engine engine(std::make_unique<ThreadTransport>(hub, r, gather));
        const Plan part = make_plan(input, PlanRequest{PlanScope::kProcess, r, false});
        out.stats[static_cast<size_t>(r)] = engine.execute(part, r, views, options);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) out.error += e + "; ";
  }
  out.error += hub.error;
  out.log = hub.log;
  out.report = options.last_stage < 0
                   ? check_destinations(full, buffers)
                   : check_destinations_through_stage(full, buffers,
                                                      static_cast<uint32_t>(options.last_stage));
  return out;
}

PlanInput spec_input(const std::string& name, int64_t budget) {
  PlanInput in = load_spec(std::string(RESHARD_SOURCE_DIR) + "/tests/mpi/specs/" + name).input;
  in.options.staging_budget_bytes = budget;
  return in;
}

std::string describe(const OracleReport& r) {
  std::string s = std::to_string(r.mismatches) + " mismatches";
  for (const auto& m : r.first) {
    s += "; " + m.tensor + " on device " + std::to_string(m.device) + ": expected " + m.expected +
         ", got " + m.got;
  }
  return s;
}

// Relays (also for explicit destination boxes), chains across hosts and
// reduce-scatter, with messages delivered late and in random order: every
// destination element is right, so no relay forwarded a region before the
// message writing it had arrived (the transport reads a send's bytes when
// it starts) and reductions kept their order and rounded once.
TEST(EngineOverlap, StagedPlansMatchTheOracleUnderRandomDeliveryDelays) {
  int cases = 0;
  for (const char* spec : {"relay_pipeline_replicated.json", "relay_one_holder_3_hosts.json",
                           "psum_reduce_scatter.json", "relay_explicit_3_hosts.json"}) {
    for (int64_t budget : {int64_t{0}, int64_t{4096}}) {
      for (bool gather : {false, true}) {
        for (uint64_t seed : {1, 2}) {
          ExecuteOptions options;
          options.timeout_seconds = 60;
          options.packing =
              gather ? ExecuteOptions::Packing::kAuto : ExecuteOptions::Packing::kStaging;
          const RunResult r = run_threads(spec_input(spec, budget), seed, 40, gather, options);
          const std::string label = std::string(spec) + " budget " + std::to_string(budget) +
                                    (gather ? " gather" : " staging") + " seed " +
                                    std::to_string(seed);
          EXPECT_TRUE(r.error.empty()) << label << ": " << r.error;
          EXPECT_TRUE(r.report.ok()) << label << ": " << describe(r.report);
          EXPECT_GT(r.report.elements, 0) << label;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 32);
}

// A reducer whose own summands arrive late while the other reducers'
// finished parts arrive early: what they forward into its entry (stage 1)
// is not overwritten by its own store of the reduction (bf16 accumulates
// in f32 beside the destination and is stored over the whole entry; a mean
// is divided in place).
TEST(EngineOverlap, LateSummandsDoNotOverwriteForwardedParts) {
  // Four summands on four hosts reduced onto two replicas (ranks 0 and 1):
  // each reduces half (stage 0) and sends it to the other (stage 1), a
  // receive alone in its step of rank 0.
  const std::string json = R"({
    "meshes": {
      "dp": {"axis_names": ["dp"], "shape": [4], "devices": [0, 1, 2, 3],
             "processes": [0, 1, 2, 3], "hosts": [0, 1, 2, 3]},
      "two": {"axis_names": ["r"], "shape": [2], "devices": [0, 1],
              "processes": [0, 1], "hosts": [0, 1]}
    },
    "tensors": [
      {"name": "g", "shape": [256, 128], "dtype": "bf16",
       "src": {"mesh": "dp", "spec": [null, null], "partial": {"axes": ["dp"]}},
       "dst": {"mesh": "two", "spec": [null, null]}},
      {"name": "m", "shape": [96, 64], "dtype": "f32",
       "src": {"mesh": "dp", "spec": [null, null], "partial": {"axes": ["dp"], "op": "mean"}},
       "dst": {"mesh": "two", "spec": [null, null]}}
    ]})";
  const PlanInput in = parse_spec(json).input;
  const Plan plan = make_plan(in);
  ASSERT_EQ(plan.stats().stages, 2) << "no reduce-scatter: the case tests nothing";
  for (int32_t rank : {0, 1}) {
    for (bool gather : {false, true}) {
      ExecuteOptions options;
      options.timeout_seconds = 60;
      const Slow slow{rank, 1, 3000};
      const RunResult r = run_threads(in, 5, 0, gather, options, slow);
      EXPECT_TRUE(r.error.empty()) << r.error;
      EXPECT_TRUE(r.report.ok()) << "slow rank " << rank << ": " << describe(r.report);
      // It waited for its late summands (ExecuteStats::wait_seconds).
      EXPECT_GT(r.stats[static_cast<size_t>(rank)].wait_seconds, 0);
    }
  }
}

// One holder (rank 0) feeds 3 hosts (ranks 1-3): each host's leader takes
// a part in (stage 0) and forwards it to the other leaders (stage 1). The
// relays forward while stage 0 still arrives: every message after the
// first of each channel is delivered late, so a relay's first forward
// starts before its last stage-0 receive is delivered, and the engine
// counts batches posted that way. Without overlap, neither happens.
TEST(EngineOverlap, RelaysForwardWhileTheyStillReceive) {
  const PlanInput in = spec_input("relay_one_holder_3_hosts.json", 16384);
  for (bool overlap : {true, false}) {
    ExecuteOptions options;
    options.timeout_seconds = 60;
    options.overlap = overlap;
    const RunResult r = run_threads(in, 7, 5, true, options, Slow{kEveryRank, 1, 400, true});
    ASSERT_TRUE(r.error.empty()) << r.error;
    ASSERT_TRUE(r.report.ok()) << describe(r.report);
    int64_t overlapped = 0;
    bool forwarded_early = false;
    for (int32_t relay : {1, 2, 3}) {
      overlapped += r.stats[static_cast<size_t>(relay)].overlapped_stage_batches;
      EXPECT_GT(r.stats[static_cast<size_t>(relay)].rounds, 4) << "too few rounds to pipeline";
      // The relays hold no source: all they send is of stage 1 or 2.
      size_t first_send = r.log.size(), last_stage0 = 0;
      for (size_t i = 0; i < r.log.size(); ++i) {
        const Event& e = r.log[i];
        if (e.send && e.src == relay && first_send == r.log.size()) first_send = i;
        if (!e.send && e.dst == relay && e.src == 0) last_stage0 = i;
      }
      forwarded_early |= first_send < last_stage0;
    }
    if (overlap) {
      EXPECT_GT(overlapped, 0);
      EXPECT_TRUE(forwarded_early);
    } else {
      EXPECT_EQ(overlapped, 0);
      EXPECT_FALSE(forwarded_early);
    }
  }
}

// ExecuteOptions::last_stage still stops after a stage with overlap on:
// what stages 0..K wrote is right (and later stages wrote nothing, or the
// poisoned elements of later stages would not matter: the check covers
// exactly what stages 0..K write).
TEST(EngineOverlap, LastStageStopsAfterThatStage) {
  for (const char* spec : {"relay_one_holder_3_hosts.json", "psum_reduce_scatter.json"}) {
    for (int32_t last : {0, 1}) {
      ExecuteOptions options;
      options.timeout_seconds = 60;
      options.last_stage = last;
      const RunResult r = run_threads(spec_input(spec, 4096), 3, 20, true, options);
      EXPECT_TRUE(r.error.empty()) << spec << " last " << last << ": " << r.error;
      EXPECT_TRUE(r.report.ok()) << spec << " last " << last << ": " << describe(r.report);
      EXPECT_GT(r.report.elements, 0);
      for (const ExecuteStats& s : r.stats) {
        if (last == 0) {
          EXPECT_EQ(s.overlapped_stage_batches, 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace reshard
