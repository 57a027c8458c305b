#include "exec/engine/direct_copies.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "exec/engine/scaled_sources.h"
#include "exec/schedule/exec_common.h"
#include "reshard/box_copy.h"
#include "reshard/cast.h"
#include "reshard/error.h"
#include "util/threads.h"

namespace reshard::engine_detail {

namespace {

// ceil(a / b) for a >= 0, b > 0, without overflow (b may be INT64_MAX).
int64_t ceil_div_nonneg(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Bounds on the bytes one task moves when work is spread over threads.
constexpr int64_t kMinTaskBytes = int64_t{64} << 10;
constexpr int64_t kMaxTaskBytes = int64_t{64} << 20;
// Under a deadline (DirectRunner::set_deadline): the most a task moves, in
// bytes and in pieces, between two checks of the clock (a few ms of work).
constexpr int64_t kDeadlineTaskBytes = int64_t{4} << 20;
constexpr size_t kDeadlineTaskCopies = 4096;

// Elements of a reduction chunk: its accumulator (32 KiB in f32) and the
// summands' chunks stay in the first-level caches while every summand is
// folded in.
constexpr int64_t kChunkElements = 8192;
// Groups with more contributions keep one pass per contribution: each
// chunk intersects every contribution's region.
constexpr size_t kMaxChunkedContributions = 64;
// Executions moving at least this many bytes between buffers copy with
// non-temporal stores (where the destination's runs allow, see copy_box):
// their destinations do not stay in the caches anyway, and plain stores
// would read every destination line first (a third of the bandwidth), as
// memcpy avoids for its large copies.
constexpr int64_t kStreamBytes = int64_t{8} << 20;

}  // namespace

// ------------------------------------------------------------ WorkerPool

bool WorkerPool::forked() const { return !helpers_.empty() && started_by_ != getpid(); }

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
      if (on_wake) {
        lock.unlock();
        on_wake(worker);
        lock.lock();
        if (stop_) return;
      }
      // A generation that moved on or closed while this helper was waking
      // up is not joined (its caller does not wait for this helper).
      if (generation_ != seen || closed_ || worker >= active_) continue;
      ++running_;
    }
    work(worker);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--running_ == 0 && closed_) done_.notify_one();
  }
}

void WorkerPool::run(size_t n, const std::function<void(size_t, int)>& task,
                     const std::function<void()>& after, int limit) {
  if (n == 0) return;
  const int active = limit < 1 ? threads_ : std::min(limit, threads_);
  const bool parallel = active > 1 && n > 1;
  if (parallel && helpers_.empty()) {
    helpers_.reserve(static_cast<size_t>(threads_ - 1));
    for (int w = 1; w < threads_; ++w) helpers_.emplace_back([this, w] { helper(w); });
    started_by_ = getpid();
  }
  task_ = &task;
  n_ = n;
  next_.store(0);
  failed_.store(false);
  error_ = nullptr;
  if (parallel) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = false;
      running_ = 0;
      active_ = active;
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
    // Every task is taken (or skipped after a failure): wait for the
    // helpers still running theirs, and close the generation to the rest.
    std::unique_lock<std::mutex> lock(mutex_);
    closed_ = true;
    done_.wait(lock, [&] { return running_ == 0; });
  }
  task_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

// ---------------------------------------------------------- DirectRunner

DirectRunner::DirectRunner(const Plan& plan, std::span<const TensorBuffers> buffers,
                           const Schedule& schedule, WorkerPool& pool, int threads)
    : tensors_(plan.tensors()),
      buffers_(buffers),
      s_(schedule),
      stream_(schedule.local_bytes >= kStreamBytes),
      pool_(pool),
      threads_(std::clamp(threads, 1, pool.threads())),
      scratch_(static_cast<size_t>(threads_)) {}

void DirectRunner::check_deadline(const char* where) const {
  if (deadline_ == WaitClock::time_point::max() || WaitClock::now() <= deadline_) return;
  fail(ErrorCode::kTimeout, std::string("execute: ran past its deadline (timeout_seconds ") +
                                seconds_text(timeout_seconds_) + ") in " + where +
                                "; the destination buffers hold unspecified data");
}

void DirectRunner::run_fills() {
  if (s_.fills.empty()) return;
  const std::function<void(size_t, int)> task = [&](size_t i, int) {
    check_deadline("the identity fills");
    const auto [t, e] = s_.fills[i];
    const TensorSpec& spec = tensors_[t];
    fill_identity_elements(spec.dtype, spec.dst.reduce_op(), buffers_[t].dst[e].data,
                           spec.dst.box(e).volume());
  };
  pool_.run(s_.fills.size(), task, {}, threads_);
}

void DirectRunner::build_tasks(std::span<const DirectCopy> copies,
                               std::span<const ReduceGroup> groups, int64_t max_task_bytes) {
  tasks_.clear();
  int64_t total = 0;
  for (const DirectCopy& c : copies) total += c.bytes;
  for (const ReduceGroup& g : groups) total += g.bytes;
  const int threads = threads_;
  int64_t target = threads <= 1
                       ? INT64_MAX
                       : std::clamp(total / (int64_t{threads} * 8), kMinTaskBytes, kMaxTaskBytes);
  if (max_task_bytes > 0) target = std::min(target, max_task_bytes);
  const bool bounded = deadline_ != WaitClock::time_point::max();
  if (bounded) target = std::min(target, kDeadlineTaskBytes);

  // Groups first, largest first, so that the long ones start early; a
  // group reduced chunk by chunk is cut into tasks near `target`.
  for (size_t i = 0; i < groups.size(); ++i) {
    const ReduceGroup& g = groups[i];
    if (!chunked(g)) {
      tasks_.push_back({Task::kGroup, i, i + 1, 0, 0, g.bytes});
      continue;
    }
    const AccTarget& a = s_.accs[g.acc];
    const int64_t chunks = chunk_grid(a.box).chunks;
    const int64_t slices = std::clamp<int64_t>(ceil_div_nonneg(g.bytes, target), 1, chunks);
    for (int64_t k = 0; k < slices; ++k) {
      const int64_t lo = chunks * k / slices;
      const int64_t hi = chunks * (k + 1) / slices;
      tasks_.push_back({Task::kGroup, i, i + 1, lo, hi, g.bytes * (hi - lo) / chunks});
    }
  }
  std::stable_sort(tasks_.begin(), tasks_.end(),
                   [](const Task& a, const Task& b) { return a.bytes > b.bytes; });
  // Copies: small pieces batched, large ones sliced, each task near `target`;
  // an interleaved group counts as one piece (sliced by runs).
  Task batch{Task::kCopies, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < copies.size();) {
    const size_t n = unit_size(copies, i);
    int64_t bytes = 0;
    for (size_t k = i; k < i + n; ++k) bytes += copies[k].bytes;
    if (n > 1) {
      const int64_t runs = copy_desc_runs(*copies[i].desc);
      const int64_t slices = bytes > target ? std::min(runs, ceil_div_nonneg(bytes, target)) : 1;
      if (slices > 1) {
        if (batch.end > batch.begin) tasks_.push_back(batch);
        for (int64_t s = 0; s < slices; ++s) {
          const int64_t lo = runs * s / slices;
          const int64_t hi = runs * (s + 1) / slices;
          tasks_.push_back({Task::kSlice, i, i + n, lo, hi, bytes * (hi - lo) / runs});
        }
        batch = {Task::kCopies, i + n, i + n, 0, 0, 0};
        i += n;
        continue;
      }
    } else if (bytes > target) {
      const CopyDesc& d = *copies[i].desc;
      const int64_t runs = copy_desc_runs(d);
      const int64_t units = runs == 1 ? copy_desc_run_length(d) : runs;
      const int64_t slices = std::min(units, ceil_div_nonneg(bytes, target));
      if (slices > 1) {
        if (batch.end > batch.begin) tasks_.push_back(batch);
        for (int64_t s = 0; s < slices; ++s) {
          const int64_t lo = units * s / slices;
          const int64_t hi = units * (s + 1) / slices;
          tasks_.push_back({Task::kSlice, i, i + 1, lo, hi, bytes * (hi - lo) / units});
        }
        batch = {Task::kCopies, i + 1, i + 1, 0, 0, 0};
        ++i;
        continue;
      }
    }
    i += n;
    batch.end = i;
    batch.bytes += bytes;
    if (batch.bytes >= target || (bounded && batch.end - batch.begin >= kDeadlineTaskCopies)) {
      tasks_.push_back(batch);
      batch = {Task::kCopies, i, i, 0, 0, 0};
    }
  }
  if (batch.end > batch.begin) tasks_.push_back(batch);
}

void DirectRunner::run_task(const Task& task, std::span<const DirectCopy> copies,
                            std::span<const ReduceGroup> groups,
                            std::vector<std::byte>& scratch) const {
  run_task_stores(task, copies, groups, scratch);
  // The streamed stores of the task, fenced once before the pool's
  // synchronisation publishes them.
  if (stream_) fence_streamed_stores();
}

void DirectRunner::run_task_stores(const Task& task, std::span<const DirectCopy> copies,
                                   std::span<const ReduceGroup> groups,
                                   std::vector<std::byte>& scratch) const {
  switch (task.kind) {
    case Task::kCopies:
      for (size_t i = task.begin; i < task.end;) {
        const size_t n = unit_size(copies.first(task.end), i);
        if (n > 1) {
          copy_interleaved(copies, i, n, 0, copy_desc_runs(*copies[i].desc));
        } else {
          const Piece& p = *copies[i].piece;
          const TensorSpec& t = tensors_[p.tensor];
          if (reads_source(p, copies[i].stage) && has_block_scales(t) &&
              copies[i].src_scratch == kNoScratch) {
            quantise_copy(tensors_, buffers_, p.tensor, p.src_entry, *copies[i].desc, 0,
                          copy_desc_runs(*copies[i].desc), dest(copies[i]));
          } else if (has_cast(t)) {
            const DType from = reads_source(p, copies[i].stage) ? t.dtype : out_dtype(t);
            cast_desc_runs(*copies[i].desc, from, out_dtype(t), 0, copy_desc_runs(*copies[i].desc),
                           source(copies[i]), dest(copies[i]));
          } else {
            copy_box(*copies[i].desc, dtype_size(t.dtype), source(copies[i]), dest(copies[i]),
                     stream_);
          }
        }
        i += n;
      }
      return;
    case Task::kSlice: {
      if (task.end > task.begin + 1) {
        copy_interleaved(copies, task.begin, task.end - task.begin, task.lo, task.hi);
        return;
      }
      const Piece& p = *copies[task.begin].piece;
      const CopyDesc& d = *copies[task.begin].desc;
      const int64_t elem = dtype_size(tensors_[p.tensor].dtype);
      const void* src = source(copies[task.begin]);
      void* dst = dest(copies[task.begin]);
      const TensorSpec& t = tensors_[p.tensor];
      if (reads_source(p, copies[task.begin].stage) && has_block_scales(t) &&
          copies[task.begin].src_scratch == kNoScratch) {
        // Slices of a copy from a scaled source: elements of its one run,
        // or runs.
        if (copy_desc_runs(d) == 1) {
          quantise_copy_slice(tensors_, buffers_, p.tensor, p.src_entry, d, task.lo, task.hi, dst);
        } else {
          quantise_copy(tensors_, buffers_, p.tensor, p.src_entry, d, task.lo, task.hi, dst);
        }
        return;
      }
      if (has_cast(t)) {
        // Slices of a cast: elements of its one run, or runs.
        const DType from = reads_source(p, copies[task.begin].stage) ? t.dtype : out_dtype(t);
        const DType to = out_dtype(t);
        if (copy_desc_runs(d) == 1) {
          int64_t s = 0;
          int64_t o = 0;
          run_offsets(d, 0, &s, &o);
          cast_run(from, to, static_cast<const std::byte*>(src) + (s + task.lo) * dtype_size(from),
                   static_cast<std::byte*>(dst) + (o + task.lo) * dtype_size(to),
                   task.hi - task.lo);
        } else {
          cast_desc_runs(d, from, to, task.lo, task.hi, src, dst);
        }
        return;
      }
      if (copy_desc_runs(d) == 1) {
        // One contiguous run: copy elements [lo, hi) of it.
        int64_t s = 0;
        int64_t t = 0;
        run_offsets(d, 0, &s, &t);
        copy_bytes(static_cast<std::byte*>(dst) + (t + task.lo) * elem,
                   static_cast<const std::byte*>(src) + (s + task.lo) * elem,
                   (task.hi - task.lo) * elem, stream_);
      } else {
        copy_box_runs(d, elem, task.lo, task.hi, src, dst, stream_);
      }
      return;
    }
    case Task::kGroup:
      if (task.hi == 0) {
        run_group(groups[task.begin], scratch);
      } else {
        run_group_chunks(groups[task.begin], task.lo, task.hi, scratch);
      }
      return;
    case Task::kReplica: {
      const ReplicaCopy& r = replicas_[task.begin];
      const TensorBuffers& b = buffers_[r.tensor];
      copy_bytes(static_cast<std::byte*>(b.dst[r.to].data) + task.lo,
                 static_cast<const std::byte*>(b.dst[r.from].data) + task.lo, task.hi - task.lo,
                 stream_);
      return;
    }
  }
}

void DirectRunner::copy_interleaved(std::span<const DirectCopy> copies, size_t begin, size_t n,
                                    int64_t lo, int64_t hi) const {
  if (n > static_cast<size_t>(kMaxInterleavedCopies)) {
    fail(ErrorCode::kInternal, "execute: an interleaved group of " + std::to_string(n) +
                                   " copies (at most " + std::to_string(kMaxInterleavedCopies) +
                                   ")");
  }
  CopyDesc descs[kMaxInterleavedCopies];
  const void* srcs[kMaxInterleavedCopies];
  void* dsts[kMaxInterleavedCopies];
  const int count = static_cast<int>(n);
  for (int c = 0; c < count; ++c) {
    const DirectCopy& x = copies[begin + static_cast<size_t>(c)];
    descs[c] = *x.desc;
    srcs[c] = source(x);
    dsts[c] = dest(x);
  }
  copy_boxes_interleaved(descs, count, dtype_size(tensors_[copies[begin].piece->tensor].dtype),
                         srcs, dsts, lo, hi, stream_);
}

DirectRunner::ChunkGrid DirectRunner::chunk_grid(const Box& box) {
  ChunkGrid c;
  if (box.rank == 0 || box.empty()) {
    c.chunks = box.empty() ? 0 : 1;
    c.dim = -1;
    return c;
  }
  // The outermost dim whose index holds at most kChunkElements elements.
  int d = box.rank - 1;
  int64_t inner = 1;
  while (d > 0 && inner * box.extent(d) <= kChunkElements) inner *= box.extent(d--);
  if (inner * box.extent(d) <= kChunkElements) {
    inner *= box.extent(d);  // the whole box is one chunk
    c.dim = -1;
    c.chunks = 1;
    c.inner = inner;
    return c;
  }
  c.dim = d;
  c.inner = inner;
  c.per_chunk = std::max<int64_t>(1, kChunkElements / inner);
  c.per_row = (box.extent(d) + c.per_chunk - 1) / c.per_chunk;
  int64_t rows = 1;
  for (int k = 0; k < d; ++k) rows *= box.extent(k);
  c.chunks = rows * c.per_row;
  return c;
}

bool DirectRunner::chunked(const ReduceGroup& g) const {
  const AccTarget& a = s_.accs[g.acc];
  return g.fill && g.store && !a.separate && g.end > g.begin &&
         g.end - g.begin <= kMaxChunkedContributions && a.elements > kChunkElements;
}

// Chunks [lo, hi) of group g's entry: per chunk, the identity, then every
// contribution's part of the chunk in reduction order, then the rounding
// store; each element sees the same operations in the same order as in
// run_group, so the result is bit for bit the same.
void DirectRunner::run_group_chunks(const ReduceGroup& g, int64_t lo, int64_t hi,
                                    std::vector<std::byte>& scratch) const {
  const AccTarget& a = s_.accs[g.acc];
  const TensorSpec& spec = tensors_[a.tensor];
  const DType dtype = spec.dtype;
  const ReduceOp op = combining_op(spec.src.reduce_op());
  const int32_t divisor = a.scratch == kNoScratch ? exec_detail::mean_divisor(spec) : 1;
  const Box dst_box = a.box;
  const ChunkGrid grid = chunk_grid(dst_box);
  auto* dst = static_cast<std::byte*>(target(a));
  const int64_t elem = dtype_size(dtype);
  const bool in_place = acc_is_elem(dtype);
  if (!in_place) {
    scratch.resize(
        static_cast<size_t>(std::min(a.elements, grid.per_chunk * grid.inner) * acc_size(dtype)));
  }
  for (int64_t c = lo; c < hi; ++c) {
    Box chunk = dst_box;
    int64_t offset = 0;  // of the chunk's first element in the entry
    if (grid.dim >= 0) {
      const int d = grid.dim;
      int64_t row = c / grid.per_row;
      const int64_t first = (c % grid.per_row) * grid.per_chunk;
      offset = (row * dst_box.extent(d) + first) * grid.inner;
      for (int k = d - 1; k >= 0; --k) {
        const int64_t i = row % dst_box.extent(k);
        row /= dst_box.extent(k);
        chunk.lo[k] = dst_box.lo[k] + i;
        chunk.hi[k] = chunk.lo[k] + 1;
      }
      chunk.lo[d] = dst_box.lo[d] + first;
      chunk.hi[d] = std::min(dst_box.hi[d], chunk.lo[d] + grid.per_chunk);
    }
    const int64_t n = chunk.volume();
    if (op == ReduceOp::kSum && divisor == 1 && sum_whole_chunk(g, chunk, dst + offset * elem)) {
      continue;
    }
    void* acc = in_place ? static_cast<void*>(dst + offset * elem) : scratch.data();
    fill_identity(dtype, op, acc, n);
    for (size_t i = g.begin; i < g.end; ++i) {
      const Contribution& k = s_.contributions[i];
      const Box part = intersect(k.region, chunk);
      if (part.empty()) continue;
      reduce_into(make_copy_desc(part, k.src_box, chunk), dtype, op, contribution_source(k), acc);
    }
    if (divisor > 1) {
      store_mean_from_acc(dtype, acc, dst + offset * elem, n, divisor);
    } else if (!in_place) {
      store_from_acc(dtype, acc, dst + offset * elem, n);
    }
  }
}

// The common case of run_group_chunks: every contribution covers the
// chunk and holds it contiguously, so the chunk is one pass over k streams
// (sum_streams: read each summand once, write once, no accumulator
// traffic). False when that does not hold or the dtype has no such path.
bool DirectRunner::sum_whole_chunk(const ReduceGroup& g, const Box& chunk, void* dst) const {
  const void* streams[kMaxChunkedContributions];
  int k = 0;
  const AccTarget& a = s_.accs[g.acc];
  const int64_t elem = dtype_size(tensors_[a.tensor].dtype);
  for (size_t i = g.begin; i < g.end; ++i) {
    const Contribution& c = s_.contributions[i];
    const Box part = intersect(c.region, chunk);
    if (part.empty()) continue;
    if (!(part == chunk)) return false;
    const CopyDesc d = make_copy_desc(chunk, c.src_box, chunk);
    if (copy_desc_runs(d) != 1) return false;
    streams[k++] = static_cast<const std::byte*>(contribution_source(c)) + d.src_offset * elem;
  }
  return k > 0 && sum_streams(tensors_[a.tensor].dtype, streams, k, dst, chunk.volume(), stream_);
}

void DirectRunner::run_replicas(std::span<const ReplicaCopy> replicas) {
  if (replicas.empty()) return;
  replicas_ = replicas;
  tasks_.clear();
  int64_t total = 0;
  for (const ReplicaCopy& r : replicas) total += r.bytes;
  const int threads = threads_;
  const int64_t target =
      threads <= 1 ? INT64_MAX
                   : std::clamp(total / (int64_t{threads} * 8), kMinTaskBytes, kMaxTaskBytes);
  for (size_t i = 0; i < replicas.size(); ++i) {
    const int64_t bytes = replicas[i].bytes;
    const int64_t slices =
        std::max<int64_t>(1, std::min(bytes / 64, ceil_div_nonneg(bytes, target)));
    for (int64_t k = 0; k < slices; ++k) {
      // Slice boundaries on 64-byte multiples (whole cache lines).
      const int64_t lo = k == 0 ? 0 : bytes * k / slices / 64 * 64;
      const int64_t hi = k + 1 == slices ? bytes : bytes * (k + 1) / slices / 64 * 64;
      tasks_.push_back({Task::kReplica, i, i + 1, lo, hi, hi - lo});
    }
  }
  const std::function<void(size_t, int)> task = [&](size_t i, int worker) {
    check_deadline("the replicas");
    run_task(tasks_[i], {}, {}, scratch_[static_cast<size_t>(worker)]);
  };
  pool_.run(tasks_.size(), task, {}, threads_);
}

void DirectRunner::run_group(const ReduceGroup& g, std::vector<std::byte>& scratch) const {
  const AccTarget& a = s_.accs[g.acc];
  const TensorSpec& spec = tensors_[a.tensor];
  const DType dtype = spec.dtype;
  const int64_t n = a.elements;
  if (n == 0) return;
  const ReduceOp op = combining_op(spec.src.reduce_op());
  // Accumulate in the accumulation type (the destination itself when that
  // is the element type), starting from the identity, and round once: in
  // a separate accumulator when the reduction spans rounds (scratch
  // contributions of later stages), else in the thread's scratch.
  void* acc = accumulator(a);
  if (!a.separate && !acc_is_elem(dtype)) {
    if (!g.scratch || !g.fill || !g.store) {
      fail(ErrorCode::kInternal, "execute: a reduction group spans rounds on the host executor");
    }
    scratch.resize(static_cast<size_t>(n * acc_size(dtype)));
    acc = scratch.data();
  }
  if (g.fill) fill_identity(dtype, op, acc, n);
  for (size_t i = g.begin; i < g.end; ++i) {
    const Contribution& c = s_.contributions[i];
    reduce_into(make_copy_desc(c.region, c.src_box, a.box), dtype, op, contribution_source(c), acc);
  }
  if (g.store) store_acc(a, acc);
}

void DirectRunner::store_acc(const AccTarget& a, const void* acc) const {
  const TensorSpec& spec = tensors_[a.tensor];
  // A scratch holds sums: a mean divides at its destination only.
  const int32_t divisor = a.scratch == kNoScratch ? exec_detail::mean_divisor(spec) : 1;
  void* dst = target(a);
  if (divisor > 1) {
    store_mean_from_acc(spec.dtype, acc, dst, a.elements, divisor);
  } else if (acc != dst) {
    store_from_acc(spec.dtype, acc, dst, a.elements);
  }
}

void DirectRunner::store_accs(std::span<const size_t> accs) {
  for (size_t i : accs) store_acc(s_.accs[i], accumulator(s_.accs[i]));
}

void DirectRunner::run_round(std::span<const DirectCopy> copies,
                             std::span<const ReduceGroup> groups, int64_t max_task_bytes,
                             const std::function<void()>& after) {
  build_tasks(copies, groups, max_task_bytes);
  const std::function<void(size_t, int)> task = [&](size_t i, int worker) {
    check_deadline("a round of copies");
    run_task(tasks_[i], copies, groups, scratch_[static_cast<size_t>(worker)]);
  };
  pool_.run(tasks_.size(), task, after, threads_);
}

int execution_threads(const Schedule& schedule, int32_t threads, int32_t host_ranks) {
  return schedule.local_bytes < kParallelMinBytes ? 1 : resolve_threads(threads, host_ranks);
}

void execute_whole(const Plan& plan, std::span<const TensorBuffers> buffers,
                   const Schedule& schedule, WorkerPool& pool, int32_t threads, int64_t last_key,
                   ExecuteStats& stats, WaitClock::time_point deadline, double timeout_seconds) {
  const Schedule& s = schedule;
  DirectRunner runner(plan, buffers, s, pool, execution_threads(s, threads));
  runner.set_deadline(deadline, timeout_seconds);
  runner.check_deadline("building the schedule");
  // Separate accumulators and scratch buffers, for this execution.
  std::vector<std::vector<uint64_t>> work(s.work.size());
  std::vector<std::byte*> bases(s.work.size());
  for (size_t i = 0; i < s.work.size(); ++i) {
    work[i].resize(static_cast<size_t>((s.work[i].bytes + 7) / 8));
    bases[i] = reinterpret_cast<std::byte*>(work[i].data());
  }
  runner.set_work(std::move(bases));
  runner.run_fills();
  std::vector<char> filled(s.accs.size(), 0);
  std::vector<char> stored(s.accs.size(), 0);
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
    const std::span<const ReduceGroup> groups(s.groups.data() + g, g_end - g);
    for (const ReduceGroup& x : groups) {
      filled[x.acc] |= x.fill ? 1 : 0;
      stored[x.acc] |= x.store ? 1 : 0;
    }
    // (A round's copies never touch an entry reduced in the same round:
    // build_whole_schedule refuses such plans.)
    runner.check_deadline("a round of copies");
    runner.run_round(copies, groups);
    g = g_end;
    if (round >= 0) ++stats.rounds;
  }
  // Reductions cut short by last_stage: stored as they are (their regions
  // finished in earlier stages are right; the others are not checked).
  std::vector<size_t> unfinished;
  for (size_t a = 0; a < s.accs.size(); ++a) {
    if (filled[a] && !stored[a]) unfinished.push_back(a);
  }
  runner.store_accs(unfinished);
  runner.run_replicas(s.replicas);
  stats.local_bytes += s.local_bytes;
  stats.accumulator_bytes += s.accumulator_bytes;
  stats.scratch_bytes += s.scratch_bytes;
}

}  // namespace reshard::engine_detail
