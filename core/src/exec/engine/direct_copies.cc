#include "exec/engine/direct_copies.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "exec/schedule/exec_common.h"
#include "reshard/box_copy.h"
#include "reshard/error.h"
#include "util/threads.h"

namespace reshard::engine_detail {
namespace {

// Bounds on the bytes one task moves when work is spread over threads.
constexpr int64_t kMinTaskBytes = int64_t{64} << 10;
constexpr int64_t kMaxTaskBytes = int64_t{64} << 20;

}  // namespace

// ------------------------------------------------------------ WorkerPool

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
}  // the helpers join here

void WorkerPool::work(int worker) {
  try {
    for (size_t i = next_.fetch_add(1); i < n_ && !failed_.load(); i = next_.fetch_add(1)) {
      (*task_)(i, worker);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
    failed_.store(true);
  }
}

void WorkerPool::helper(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    work(worker);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_ == 0) done_.notify_one();
  }
}

void WorkerPool::run(size_t n, const std::function<void(size_t, int)>& task,
                     const std::function<void()>& after) {
  if (n == 0) return;
  const bool parallel = threads_ > 1 && n > 1;
  if (parallel && helpers_.empty()) {
    helpers_.reserve(static_cast<size_t>(threads_ - 1));
    for (int w = 1; w < threads_; ++w) helpers_.emplace_back([this, w] { helper(w); });
  }
  task_ = &task;
  n_ = n;
  next_.store(0);
  failed_.store(false);
  error_ = nullptr;
  if (parallel) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = static_cast<int>(helpers_.size());
      ++generation_;
    }
    wake_.notify_all();
  }
  // The calling thread is worker 0.
  try {
    for (size_t i = next_.fetch_add(1); i < n && !failed_.load(); i = next_.fetch_add(1)) {
      task(i, 0);
      if (after) after();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
    failed_.store(true);
  }
  if (parallel) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
  }
  task_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

// ---------------------------------------------------------- DirectRunner

DirectRunner::DirectRunner(const Plan& plan, std::span<const TensorBuffers> buffers,
                           const Schedule& schedule, std::span<void* const> accumulators,
                           int threads)
    : plan_(plan),
      tensors_(plan.tensors()),
      buffers_(buffers),
      s_(schedule),
      accumulators_(accumulators),
      pool_(threads),
      scratch_(static_cast<size_t>(pool_.threads())) {}

CopyDesc DirectRunner::desc_of(const DirectCopy& c) const {
  const Piece& p = *c.piece;
  const TensorSpec& spec = tensors_[p.tensor];
  return make_copy_desc(plan_.region(*c.part, p), plan_.source_box(p, c.stage),
                        spec.dst.box(p.dst_entry));
}

void DirectRunner::run_fills() {
  if (s_.fills.empty()) return;
  const std::function<void(size_t, int)> task = [&](size_t i, int) {
    const auto [t, e] = s_.fills[i];
    const TensorSpec& spec = tensors_[t];
    fill_identity_elements(spec.dtype, spec.dst.reduce_op(), buffers_[t].dst[e].data,
                           spec.dst.box(e).volume());
  };
  pool_.run(s_.fills.size(), task);
}

void DirectRunner::build_tasks(std::span<const DirectCopy> copies,
                               std::span<const ReduceGroup> groups, int64_t max_task_bytes) {
  tasks_.clear();
  std::vector<int64_t> piece_bytes(copies.size());
  int64_t total = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    piece_bytes[i] = plan_.piece_bytes(*copies[i].part, *copies[i].piece);
    total += piece_bytes[i];
  }
  for (const ReduceGroup& g : groups) total += g.bytes;
  const int threads = pool_.threads();
  int64_t target = threads <= 1
                       ? INT64_MAX
                       : std::clamp(total / (int64_t{threads} * 8), kMinTaskBytes, kMaxTaskBytes);
  if (max_task_bytes > 0) target = std::min(target, max_task_bytes);

  // Groups first, largest first, so that the long ones start early.
  for (size_t i = 0; i < groups.size(); ++i) {
    tasks_.push_back({Task::kGroup, i, i + 1, 0, 0, groups[i].bytes});
  }
  std::stable_sort(tasks_.begin(), tasks_.end(),
                   [](const Task& a, const Task& b) { return a.bytes > b.bytes; });
  // Copies: small pieces batched, large ones sliced, each task near `target`.
  Task batch{Task::kCopies, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < copies.size(); ++i) {
    const int64_t bytes = piece_bytes[i];
    if (bytes > target) {
      const CopyDesc d = desc_of(copies[i]);
      const int64_t runs = copy_desc_runs(d);
      const int64_t units = runs == 1 ? copy_desc_run_length(d) : runs;
      const int64_t slices = std::min(units, (bytes + target - 1) / target);
      if (slices > 1) {
        if (batch.end > batch.begin) tasks_.push_back(batch);
        for (int64_t s = 0; s < slices; ++s) {
          const int64_t lo = units * s / slices;
          const int64_t hi = units * (s + 1) / slices;
          tasks_.push_back({Task::kSlice, i, i + 1, lo, hi, bytes * (hi - lo) / units});
        }
        batch = {Task::kCopies, i + 1, i + 1, 0, 0, 0};
        continue;
      }
    }
    batch.end = i + 1;
    batch.bytes += bytes;
    if (batch.bytes >= target) {
      tasks_.push_back(batch);
      batch = {Task::kCopies, i + 1, i + 1, 0, 0, 0};
    }
  }
  if (batch.end > batch.begin) tasks_.push_back(batch);
}

void DirectRunner::run_task(const Task& task, std::span<const DirectCopy> copies,
                            std::span<const ReduceGroup> groups,
                            std::vector<std::byte>& scratch) const {
  switch (task.kind) {
    case Task::kCopies:
      for (size_t i = task.begin; i < task.end; ++i) {
        const Piece& p = *copies[i].piece;
        copy_box(desc_of(copies[i]), dtype_size(tensors_[p.tensor].dtype), source(copies[i]),
                 buffers_[p.tensor].dst[p.dst_entry].data);
      }
      return;
    case Task::kSlice: {
      const Piece& p = *copies[task.begin].piece;
      const CopyDesc d = desc_of(copies[task.begin]);
      const int64_t elem = dtype_size(tensors_[p.tensor].dtype);
      const void* src = source(copies[task.begin]);
      void* dst = buffers_[p.tensor].dst[p.dst_entry].data;
      if (copy_desc_runs(d) == 1) {
        // One contiguous run: copy elements [lo, hi) of it.
        int64_t s = 0;
        int64_t t = 0;
        run_offsets(d, 0, &s, &t);
        std::memcpy(static_cast<std::byte*>(dst) + (t + task.lo) * elem,
                    static_cast<const std::byte*>(src) + (s + task.lo) * elem,
                    static_cast<size_t>((task.hi - task.lo) * elem));
      } else {
        copy_box_runs(d, elem, task.lo, task.hi, src, dst);
      }
      return;
    }
    case Task::kGroup:
      run_group(groups[task.begin], scratch);
      return;
  }
}

void DirectRunner::run_group(const ReduceGroup& g, std::vector<std::byte>& scratch) const {
  const AccTarget& a = s_.accs[g.acc];
  const TensorSpec& spec = tensors_[a.tensor];
  const DType dtype = spec.dtype;
  const int64_t n = a.elements;
  if (n == 0) return;
  void* dst = buffers_[a.tensor].dst[a.dst_entry].data;
  const ReduceOp op = combining_op(spec.src.reduce_op());
  // Accumulate in the accumulation type (the destination itself when that
  // is the element type), starting from the identity, and round once.
  void* acc = dst;
  if (!acc_is_elem(dtype)) {
    if (g.scratch) {
      scratch.resize(static_cast<size_t>(n * acc_size(dtype)));
      acc = scratch.data();
    } else {
      acc = accumulators_[g.acc];
      if (acc == nullptr)
        fail(ErrorCode::kInternal, "execute: reduction group without accumulator");
    }
  }
  if (g.fill) fill_identity(dtype, op, acc, n);
  const Box dst_box = spec.dst.box(a.dst_entry);
  for (size_t i = g.begin; i < g.end; ++i) {
    const Contribution& c = s_.contributions[i];
    reduce_into(make_copy_desc(c.region, c.src_box, dst_box), dtype, op,
                buffers_[c.tensor].src[c.src_entry].data, acc);
  }
  if (!g.store) return;
  if (const int32_t divisor = exec_detail::mean_divisor(spec); divisor > 1) {
    store_mean_from_acc(dtype, acc, dst, n, divisor);
  } else if (acc != dst) {
    store_from_acc(dtype, acc, dst, n);
  }
}

void DirectRunner::run_round(std::span<const DirectCopy> copies,
                             std::span<const ReduceGroup> groups, int64_t max_task_bytes,
                             const std::function<void()>& after) {
  build_tasks(copies, groups, max_task_bytes);
  const std::function<void(size_t, int)> task = [&](size_t i, int worker) {
    run_task(tasks_[i], copies, groups, scratch_[static_cast<size_t>(worker)]);
  };
  pool_.run(tasks_.size(), task, after);
}

void execute_whole(const Plan& plan, std::span<const TensorBuffers> buffers,
                   const Schedule& schedule, int32_t threads, int64_t last_key,
                   ExecuteStats& stats) {
  const Schedule& s = schedule;
  // Separate accumulators of entries whose reductions span rounds.
  std::vector<std::vector<uint64_t>> work;
  work.reserve(s.work.size());
  for (const WorkBlock& w : s.work) work.emplace_back(static_cast<size_t>(w.bytes / 8));
  std::vector<void*> accumulators(s.accs.size(), nullptr);
  for (size_t a = 0; a < s.accs.size(); ++a) {
    if (!s.accs[a].separate) continue;
    accumulators[a] =
        reinterpret_cast<std::byte*>(work[s.accs[a].acc_block].data()) + s.accs[a].acc_offset;
  }
  DirectRunner runner(plan, buffers, s, accumulators,
                      s.local_bytes < kParallelMinBytes ? 1 : resolve_threads(threads));
  runner.run_fills();
  size_t d = 0;
  size_t g = 0;
  while (d < s.direct_rounds.size() || g < s.groups.size()) {
    int64_t round = INT64_MAX;
    if (d < s.direct_rounds.size()) round = s.direct_rounds[d].round;
    if (g < s.groups.size()) round = std::min(round, s.groups[g].round);
    if (round > last_key) break;
    std::span<const DirectCopy> copies;
    if (d < s.direct_rounds.size() && s.direct_rounds[d].round == round) {
      copies = std::span<const DirectCopy>(s.direct.data() + s.direct_rounds[d].begin,
                                           s.direct_rounds[d].end - s.direct_rounds[d].begin);
      ++d;
    }
    size_t g_end = g;
    while (g_end < s.groups.size() && s.groups[g_end].round == round) ++g_end;
    runner.run_round(copies, std::span<const ReduceGroup>(s.groups.data() + g, g_end - g));
    g = g_end;
    if (round >= 0) ++stats.rounds;
  }
  stats.local_bytes += s.local_bytes;
  stats.accumulator_bytes += s.accumulator_bytes;
}

}  // namespace reshard::engine_detail
