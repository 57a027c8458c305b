// Internal: the engine's copies between buffers of one process in host
// memory (docs/design.md §3.2, §3.3) — local pieces, pieces between two
// devices of the process, and, for a whole plan on the `local` transport,
// every piece — run round by round on ExecuteOptions::threads threads.
//
// A round's work is cut into tasks by bytes: small pieces are batched,
// pieces larger than the target are sliced (by contiguous runs of their
// copy descriptor, or by elements of a single run), and each reduction
// group (ReduceGroup: one destination entry's contributions of one round,
// in reduction order) is one task, so that every destination element is
// written by one thread and summands are folded in a fixed order whatever
// the thread count. Rounds run one after another; a round's tasks run in
// parallel, each thread taking the next task.
//
// Reductions run in one pass over memory: an entry reduced in one round is
// cut into chunks of its box that stay in cache (rows of its outer
// dimensions), and each chunk folds every summand in order before the next
// chunk starts, so each summand is read once and the destination written
// once; the chunks of a large entry are spread over threads. Replicated
// destinations (Schedule::replicas) are contiguous copies after the last
// round.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "exec/schedule/engine_schedule.h"
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/plan.h"
#include "reshard/wait.h"

namespace reshard::engine_detail {

// Executions moving fewer bytes between buffers than this run on the
// calling thread: waking copy threads costs more than sharing the copy.
// Measured on 2 cores (docs/results.md, per-call latency): a 1.5 MiB
// transformer pytree executed after a pause took 0.34 ms on one thread and
// 0.6 ms woken onto two; at 6 MiB one and two threads were even.
inline constexpr int64_t kParallelMinBytes = int64_t{4} << 20;

// Threads started once and reused by every round of every execution: an
// Engine keeps one (Engine::pool), so that executions after the first start
// no thread.
class WorkerPool {
 public:
  // `threads` >= 1, the calling thread included; helpers start on the
  // first run() that has work for them, and wait (asleep) between runs.
  explicit WorkerPool(int threads) : threads_(threads < 1 ? 1 : threads) {}
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool();

  int threads() const { return threads_; }
  // Whether this process is a fork() of the one that started the helpers:
  // they do not exist here, and destroying the pool would wait for them
  // forever (joining them, and in pthread_cond_destroy for their waits).
  // Such a pool is released, never destroyed (drop_pool), and a new one
  // made.
  bool forked() const;

  // Calls task(i, worker) for every i in [0, n), on up to threads() threads
  // (the calling thread is worker 0), each taking the next unclaimed index;
  // after a task of its own the calling thread calls `after` (if set).
  // Returns once every task finished; if a task threw, the remaining ones
  // are skipped and the first exception is rethrown. `limit` (1 to
  // threads(); 0: threads()) caps the threads this run uses: workers at or
  // above it take no task.
  //
  // Helpers that have not woken up by the time the calling thread ran out
  // of tasks take no part in this run, and run() does not wait for them:
  // on a busy machine a woken thread may wait milliseconds to be
  // scheduled, longer than a small run's work.
  void run(size_t n, const std::function<void(size_t, int)>& task,
           const std::function<void()>& after = {}, int limit = 0);

  // Tests: called by a helper after it woke for a run, before it joins it
  // (to delay it). Set before the first run.
  std::function<void(int worker)> on_wake;

 private:
  void helper(int worker);
  void work(int worker);

  const int threads_;
  std::vector<std::jthread> helpers_;
  pid_t started_by_ = 0;  // the process that started helpers_
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  // The current generation takes no more helpers: the calling thread ran
  // out of tasks (late helpers skip it).
  bool closed_ = true;
  int running_ = 0;  // helpers that joined the current generation and are still in it
  int active_ = 0;   // workers below this take tasks in the current generation
  // The current generation's work.
  size_t n_ = 0;
  const std::function<void(size_t, int)>* task_ = nullptr;
  std::atomic<size_t> next_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

// Destroys `pool`, or in a fork()ed child of the process that started its
// threads, lets go of it (see WorkerPool::forked; a few hundred bytes per
// fork).
inline void drop_pool(std::unique_ptr<WorkerPool>& pool) {
  if (pool != nullptr && pool->forked()) {
    (void)pool.release();
  } else {
    pool.reset();
  }
}

// Runs rounds of direct copies and reduction groups on host buffers.
class DirectRunner {
 public:
  // Reduction groups accumulate in their destination or in the running
  // thread's scratch (ReduceGroup::scratch): a whole-plan schedule reduces
  // every entry in one round, so no accumulator outlives a task.
  // Runs its tasks on up to `threads` threads of `pool` (at most
  // pool.threads()).
  DirectRunner(const Plan& plan, std::span<const TensorBuffers> buffers, const Schedule& schedule,
               WorkerPool& pool, int threads);

  // The bases of Schedule::work's blocks (separate accumulators and
  // scratch buffers), for reduction groups.
  void set_work(std::vector<std::byte*> work) { work_ = std::move(work); }

  // A deadline for every task run from now on (execute_whole: the whole
  // execution's): a task starting after it throws kTimeout, the pool skips
  // the remaining ones. With a deadline no task moves more than
  // kDeadlineTaskBytes or kDeadlineTaskCopies pieces, so that the checks
  // come often whatever the thread count. `timeout_seconds` is named in the
  // message.
  void set_deadline(WaitClock::time_point deadline, double timeout_seconds) {
    deadline_ = deadline;
    timeout_seconds_ = timeout_seconds;
  }
  // Throws kTimeout when the deadline passed; `where` says in what.
  void check_deadline(const char* where) const;

  // The identity fills of partial destinations (Schedule::fills), in
  // parallel.
  void run_fills();

  // Stores the accumulators of `accs` (their reductions were cut short by
  // ExecuteOptions::last_stage), as their last group would have.
  void store_accs(std::span<const size_t> accs);

  // One round: `copies` and `groups`. With `max_task_bytes` > 0 no task
  // moves more (so that `after`, called on the calling thread after each
  // of its tasks, runs often enough to progress transfers in flight).
  void run_round(std::span<const DirectCopy> copies, std::span<const ReduceGroup> groups,
                 int64_t max_task_bytes = 0, const std::function<void()>& after = {});

  // The replicas of a whole-plan schedule, after its last round: each a
  // contiguous copy of another destination entry, split by bytes.
  void run_replicas(std::span<const ReplicaCopy> replicas);

 private:
  // A run of whole copies, a slice of one large copy, a group (or chunks
  // of one), or a slice of a replica.
  struct Task {
    enum Kind : uint8_t { kCopies, kSlice, kGroup, kReplica } kind = kCopies;
    // kCopies: [begin, end) of copies; kSlice: copies[begin] (or
    // [begin, end), an interleaved group); kGroup:
    // groups[begin]; kReplica: replicas[begin].
    size_t begin = 0;
    size_t end = 0;
    // kSlice: runs [lo, hi) of the copy's CopyDesc, or, when it has one
    // run, elements [lo, hi) of that run; when end > begin + 1, runs
    // [lo, hi) of the interleaved group [begin, end). kGroup: chunks [lo, hi) of the
    // entry's box (ChunkGrid), or the whole group in one pass per summand
    // when hi == 0. kReplica: bytes [lo, hi).
    int64_t lo = 0;
    int64_t hi = 0;
    int64_t bytes = 0;
  };

  // The cache-sized chunks of a destination box reduced one after another:
  // dims [0, dim) are single indices, dim `dim` a range of at most
  // `per_chunk` indices, the dims after it whole (so a chunk is contiguous
  // in the destination).
  struct ChunkGrid {
    int dim = 0;
    int64_t inner = 1;      // elements per index of `dim`
    int64_t per_chunk = 1;  // indices of `dim` per chunk
    int64_t per_row = 1;    // chunks per row of the dims before `dim`
    int64_t chunks = 0;
  };
  static ChunkGrid chunk_grid(const Box& box);
  // Whether group g is reduced chunk by chunk (an entry reduced in one
  // round, from few enough contributions that intersecting each with every
  // chunk stays cheap).
  bool chunked(const ReduceGroup& g) const;

  // The buffer a copy reads: its source entry's, or in a stage > 0 the
  // destination entry it forwards from; the buffer it writes.
  // A copy-staging scratch in place of an entry (DirectCopy::src_scratch,
  // dst_scratch) is in the work blocks (set_work).
  const void* source(const DirectCopy& c) const {
    const Piece& p = *c.piece;
    if (c.src_scratch != kNoScratch) {
      const ScratchBuffer& b = s_.scratch[c.src_scratch];
      return work_[b.block] + b.offset;
    }
    return reads_source(p, c.stage) ? buffers_[p.tensor].src[p.src_entry].data
                                    : buffers_[p.tensor].dst[p.src_entry].data;
  }
  void* dest(const DirectCopy& c) const {
    if (c.dst_scratch != kNoScratch) {
      const ScratchBuffer& b = s_.scratch[c.dst_scratch];
      return work_[b.block] + b.offset;
    }
    return buffers_[c.piece->tensor].dst[c.piece->dst_entry].data;
  }
  // A reduction's target buffer (destination entry or scratch), where it
  // accumulates, and what a contribution reads.
  void* target(const AccTarget& a) const {
    if (a.scratch != kNoScratch) {
      const ScratchBuffer& b = s_.scratch[a.scratch];
      return work_[b.block] + b.offset;
    }
    return buffers_[a.tensor].dst[a.dst_entry].data;
  }
  void* accumulator(const AccTarget& a) const {
    return a.separate ? work_[a.acc_block] + a.acc_offset : target(a);
  }
  const void* contribution_source(const Contribution& c) const {
    if (c.src_scratch != kNoScratch) {
      const ScratchBuffer& b = s_.scratch[c.src_scratch];
      return work_[b.block] + b.offset;
    }
    return c.src_dst ? buffers_[c.tensor].dst[c.src_entry].data
                     : buffers_[c.tensor].src[c.src_entry].data;
  }
  void build_tasks(std::span<const DirectCopy> copies, std::span<const ReduceGroup> groups,
                   int64_t max_task_bytes);
  void run_task(const Task& task, std::span<const DirectCopy> copies,
                std::span<const ReduceGroup> groups, std::vector<std::byte>& scratch) const;
  void run_task_stores(const Task& task, std::span<const DirectCopy> copies,
                       std::span<const ReduceGroup> groups, std::vector<std::byte>& scratch) const;
  // Copies [begin, begin + n) (DirectCopy::interleave), runs [lo, hi).
  void copy_interleaved(std::span<const DirectCopy> copies, size_t begin, size_t n, int64_t lo,
                        int64_t hi) const;
  // The copies of the unit (interleaved group or single copy) at i.
  static size_t unit_size(std::span<const DirectCopy> copies, size_t i) {
    return std::clamp<size_t>(copies[i].interleave, 1, copies.size() - i);
  }
  void run_group(const ReduceGroup& g, std::vector<std::byte>& scratch) const;
  // Stores accumulator `acc` of `a` into its target (a mean divided, a
  // separate accumulator rounded to the dtype).
  void store_acc(const AccTarget& a, const void* acc) const;
  void run_group_chunks(const ReduceGroup& g, int64_t lo, int64_t hi,
                        std::vector<std::byte>& scratch) const;
  bool sum_whole_chunk(const ReduceGroup& g, const Box& chunk, void* dst) const;

  const std::vector<TensorSpec>& tensors_;
  std::span<const TensorBuffers> buffers_;
  const Schedule& s_;
  WaitClock::time_point deadline_ = WaitClock::time_point::max();
  double timeout_seconds_ = 0;
  const bool stream_;  // non-temporal stores (a large execution)
  WorkerPool& pool_;
  const int threads_;                            // of pool_, for this execution
  std::vector<std::vector<std::byte>> scratch_;  // per worker
  std::vector<Task> tasks_;
  std::span<const ReplicaCopy> replicas_;
  std::vector<std::byte*> work_;
};

// Executes a whole-plan schedule (build_whole_schedule) on host buffers
// that were checked against the plan: the identity fills of partial
// destinations, then round by round (local pieces first, or in the first
// round of stage 0 where the schedule put them there) the direct copies
// and reduction groups, on resolve_threads(threads) threads (the calling
// thread alone below kParallelMinBytes; threads of `pool`, which has at
// least that many), then the replicas (of tensors
// whose pieces are all of stage 0, so they are filled for every
// last_stage). Adds to `stats` (local_bytes, rounds, accumulator_bytes).
// Work with a round key above `last_key` is left out
// (ExecuteOptions::last_stage). Past `deadline` (checked before each task
// and each round) throws kTimeout naming `timeout_seconds`; the
// destinations then hold unspecified data.
void execute_whole(const Plan& plan, std::span<const TensorBuffers> buffers,
                   const Schedule& schedule, WorkerPool& pool, int32_t threads, int64_t last_key,
                   ExecuteStats& stats,
                   WaitClock::time_point deadline = WaitClock::time_point::max(),
                   double timeout_seconds = 0);

// The threads an execution of `schedule` copies on: one below
// kParallelMinBytes, else resolve_threads(threads, host_ranks).
int execution_threads(const Schedule& schedule, int32_t threads, int32_t host_ranks = 1);

}  // namespace reshard::engine_detail
