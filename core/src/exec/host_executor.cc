// In-process host execution of a whole plan (docs/design.md §3.2, transport
// `local`): every piece is copied straight from its source shard buffer to its
// destination shard buffer, no staging. Partial sources are reduced per
// destination entry in an accumulator and rounded once.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "exec/exec_common.h"
#include "reshard/box_copy.h"
#include "reshard/error.h"
#include "reshard/exec.h"

namespace reshard {
namespace {

// Plans moving less than this run on the calling thread: starting threads
// costs more than the copy.
constexpr int64_t kParallelMinBytes = int64_t{1} << 20;
// Bounds on the bytes one task moves when work is spread over threads.
constexpr int64_t kMinTaskBytes = int64_t{64} << 10;
constexpr int64_t kMaxTaskBytes = int64_t{64} << 20;

struct PieceRef {
  const ProcessPart* part;
  const Piece* piece;
  uint32_t stage = 0;  // > 0: reads a destination buffer an earlier stage wrote
};

// A destination entry of a tensor with a partial source or destination: all
// of its pieces run on one thread, in a fixed order.
struct Group {
  uint32_t tensor = 0;
  uint32_t dst_entry = 0;
  // Reduce every piece into an accumulator that starts at the identity of
  // the source's op; otherwise (partial destination, whole source) fill the
  // buffer with the identity of the destination's op and copy pieces over it.
  bool reduce = false;
  int64_t bytes = 0;
  std::vector<PieceRef> pieces;
};

// One unit of work for a thread: a run of whole copy pieces, a slice of one
// large copy piece, or a group.
struct Task {
  enum Kind : uint8_t { kPieces, kSlice, kGroup } kind = kPieces;
  size_t begin =
      0;  // kPieces: [begin, end) of copies; kSlice: copies[begin]; kGroup: groups[begin]
  size_t end = 0;
  // kSlice: runs [lo, hi) of the piece's CopyDesc, or, when it has one run,
  // elements [lo, hi) of that run.
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t bytes = 0;
};

class HostExecution {
 public:
  HostExecution(const Plan& plan, std::span<const TensorBuffers> buffers)
      : plan_(plan), tensors_(plan.tensors()), buffers_(buffers) {}

  void validate() const;
  void build_tasks(int threads);
  void run(int threads);
  // Stages run one after the other; a stage's tasks run in parallel.
  void run_all(int threads) {
    for (uint32_t s = 0; s < stage_tasks_.size(); ++s) {
      tasks_ = std::move(stage_tasks_[s]);
      run(threads);
    }
  }

 private:
  CopyDesc desc_of(const PieceRef& ref, Box* dst_box = nullptr) const;
  const void* src_data(const PieceRef& r) const {
    const Piece& p = *r.piece;
    return r.stage == 0 ? buffers_[p.tensor].src[p.src_entry].data
                        : buffers_[p.tensor].dst[p.src_entry].data;
  }
  void* dst_data(const Piece& p) const { return buffers_[p.tensor].dst[p.dst_entry].data; }
  void run_task(const Task& task, std::vector<std::byte>& scratch) const;
  void run_group(const Group& group, std::vector<std::byte>& scratch) const;

  const Plan& plan_;
  const std::vector<TensorSpec>& tensors_;
  std::span<const TensorBuffers> buffers_;
  std::vector<PieceRef> copies_;  // pieces of tensors without partial layouts
  std::vector<Group> groups_;
  std::vector<Task> tasks_;
  std::vector<std::vector<Task>> stage_tasks_;
};

void HostExecution::validate() const {
  for (int32_t process : plan_.processes()) {
    if (!plan_.parts().contains(process)) {
      fail(ErrorCode::kInvalidArgument,
           "plan: lacks the part of process " + std::to_string(process) +
               " (execute_host needs a plan made with PlanScope::kAll)");
    }
  }
  exec_detail::validate_buffers(plan_, buffers_);
  // The pieces index only what exists and stay inside their buffers, so a
  // damaged plan cannot make the copy loops write out of bounds.
  for (const auto& [process, part] : plan_.parts()) {
    exec_detail::validate_pieces(plan_, part, part.local, "local");
    exec_detail::validate_pieces(plan_, part, part.recv_pieces, "recv_pieces", &part.recvs);
  }
}

CopyDesc HostExecution::desc_of(const PieceRef& ref, Box* dst_box) const {
  const Piece& p = *ref.piece;
  const TensorSpec& spec = tensors_[p.tensor];
  const Box dst = spec.dst.box(p.dst_entry);
  if (dst_box != nullptr) *dst_box = dst;
  return make_copy_desc(plan_.region(*ref.part, p), plan_.source_box(p, ref.stage), dst);
}

void HostExecution::build_tasks(int threads) {
  // Tensors with a partial layout go through groups, one per destination
  // entry, so every destination element is written by exactly one thread.
  std::vector<int64_t> group_base(tensors_.size(), -1);
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const TensorSpec& spec = tensors_[t];
    if (!spec.src.partial() && !spec.dst.partial()) continue;
    group_base[t] = static_cast<int64_t>(groups_.size());
    for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
      Group g;
      g.tensor = static_cast<uint32_t>(t);
      g.dst_entry = static_cast<uint32_t>(e);
      g.reduce = spec.src.partial();
      g.bytes = buffers_[t].dst[e].bytes;
      groups_.push_back(std::move(g));
    }
  }
  int64_t copy_bytes = 0;
  std::vector<int64_t> piece_bytes;
  uint32_t stages = 1;
  for (const auto& [process, part] : plan_.parts()) {
    // Each received piece's stage, from the message holding it.
    std::vector<uint32_t> stage_of(part.recv_pieces.size(), 0);
    for (const Message& m : part.recvs) {
      for (uint64_t k = m.first_piece; k < stage_of.size() && k - m.first_piece < m.num_pieces; ++k)
        stage_of[k] = m.stage;
      stages = std::max(stages, m.stage + 1);
    }
    for (const std::vector<Piece>* list : {&part.local, &part.recv_pieces}) {
      for (size_t i = 0; i < list->size(); ++i) {
        const Piece& p = (*list)[i];
        const uint32_t stage = list == &part.local ? 0 : stage_of[i];
        const int64_t bytes = plan_.piece_bytes(part, p);
        if (group_base[p.tensor] >= 0 && stage == 0) {
          Group& g = groups_[static_cast<size_t>(group_base[p.tensor]) + p.dst_entry];
          g.pieces.push_back({&part, &p, 0});
          g.bytes += bytes;
        } else {
          // A later stage forwards the reduced value of a partial source
          // (reduce-scatter): written over the group's result.
          if (group_base[p.tensor] >= 0 &&
              (tensors_[p.tensor].dst.partial() || !tensors_[p.tensor].src.partial()))
            fail(ErrorCode::kInvalidArgument,
                 "plan: a relay piece of a tensor with a partial destination");
          copies_.push_back({&part, &p, stage});
          piece_bytes.push_back(bytes);
          copy_bytes += bytes;
        }
      }
    }
  }
  // Stage by stage (stable: within a stage, the order above).
  {
    std::vector<size_t> order(copies_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return copies_[a].stage < copies_[b].stage; });
    std::vector<PieceRef> c2;
    std::vector<int64_t> b2;
    for (size_t i : order) {
      c2.push_back(copies_[i]);
      b2.push_back(piece_bytes[i]);
    }
    copies_ = std::move(c2);
    piece_bytes = std::move(b2);
  }
  // Reduce in source summand order: the result then does not depend on which
  // pieces were local or on how the planner ordered them (each summand
  // covers an element at most once, so ties in this order commute).
  for (Group& g : groups_) {
    if (!g.reduce) continue;
    const Layout& src = tensors_[g.tensor].src;
    std::stable_sort(g.pieces.begin(), g.pieces.end(), [&](const PieceRef& a, const PieceRef& b) {
      return exec_detail::reduce_before(src.summand(a.piece->src_entry),
                                        src.summand(b.piece->src_entry));
    });
  }

  int64_t total = copy_bytes;
  for (const Group& g : groups_) total += g.bytes;
  const int64_t target =
      threads <= 1 ? INT64_MAX
                   : std::clamp(total / (int64_t{threads} * 8), kMinTaskBytes, kMaxTaskBytes);

  // Groups first, largest first, so the long ones start early.
  for (size_t i = 0; i < groups_.size(); ++i) {
    tasks_.push_back({Task::kGroup, i, i + 1, 0, 0, groups_[i].bytes});
  }
  std::stable_sort(tasks_.begin(), tasks_.end(),
                   [](const Task& a, const Task& b) { return a.bytes > b.bytes; });
  // Copies: small pieces batched, large ones sliced, each task near `target`;
  // a task holds pieces of one stage.
  stage_tasks_.assign(stages, {});
  Task batch{Task::kPieces, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < copies_.size(); ++i) {
    if (i > 0 && copies_[i].stage != copies_[i - 1].stage) {
      if (batch.end > batch.begin) tasks_.push_back(batch);
      batch = {Task::kPieces, i, i, 0, 0, 0};
      stage_tasks_[copies_[i - 1].stage] = std::move(tasks_);
      tasks_.clear();
    }
    const int64_t bytes = piece_bytes[i];
    if (bytes > target) {
      const CopyDesc d = desc_of(copies_[i]);
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
        batch = {Task::kPieces, i + 1, i + 1, 0, 0, 0};
        continue;
      }
    }
    batch.end = i + 1;
    batch.bytes += bytes;
    if (batch.bytes >= target) {
      tasks_.push_back(batch);
      batch = {Task::kPieces, i + 1, i + 1, 0, 0, 0};
    }
  }
  if (batch.end > batch.begin) tasks_.push_back(batch);
  const uint32_t last = copies_.empty() ? 0 : copies_.back().stage;
  for (Task& t : tasks_) stage_tasks_[last].push_back(t);
  tasks_.clear();
}

void HostExecution::run_task(const Task& task, std::vector<std::byte>& scratch) const {
  switch (task.kind) {
    case Task::kPieces:
      for (size_t i = task.begin; i < task.end; ++i) {
        const Piece& p = *copies_[i].piece;
        copy_box(desc_of(copies_[i]), dtype_size(tensors_[p.tensor].dtype), src_data(copies_[i]),
                 dst_data(p));
      }
      return;
    case Task::kSlice: {
      const Piece& p = *copies_[task.begin].piece;
      CopyDesc d = desc_of(copies_[task.begin]);
      const int64_t elem = dtype_size(tensors_[p.tensor].dtype);
      if (copy_desc_runs(d) == 1) {
        // One contiguous run: copy elements [lo, hi) of it.
        int64_t s = 0;
        int64_t t = 0;
        run_offsets(d, 0, &s, &t);
        std::memcpy(
            static_cast<std::byte*>(dst_data(p)) + (t + task.lo) * elem,
            static_cast<const std::byte*>(src_data(copies_[task.begin])) + (s + task.lo) * elem,
            static_cast<size_t>((task.hi - task.lo) * elem));
      } else {
        copy_box_runs(d, elem, task.lo, task.hi, src_data(copies_[task.begin]), dst_data(p));
      }
      return;
    }
    case Task::kGroup:
      run_group(groups_[task.begin], scratch);
      return;
  }
}

void HostExecution::run_group(const Group& g, std::vector<std::byte>& scratch) const {
  const TensorSpec& spec = tensors_[g.tensor];
  const DType dtype = spec.dtype;
  void* dst = buffers_[g.tensor].dst[g.dst_entry].data;
  const int64_t n = spec.dst.box(g.dst_entry).volume();
  if (n == 0) return;
  if (!g.reduce) {
    exec_detail::fill_identity_elements(dtype, spec.dst.reduce_op(), dst, n);
    for (const PieceRef& ref : g.pieces) {
      copy_box(desc_of(ref), dtype_size(dtype), src_data(ref), dst);
    }
    return;
  }
  // Accumulate in the accumulation type (the destination itself when that is
  // the element type), starting from the identity, and round once.
  const ReduceOp op = spec.src.reduce_op();
  void* acc = dst;
  if (!acc_is_elem(dtype)) {
    scratch.resize(static_cast<size_t>(n * acc_size(dtype)));
    acc = scratch.data();
  }
  fill_identity(dtype, op, acc, n);
  for (const PieceRef& ref : g.pieces) {
    reduce_into(desc_of(ref), dtype, op, src_data(ref), acc);
  }
  if (acc != dst) store_from_acc(dtype, acc, dst, n);
}

void HostExecution::run(int threads) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    std::vector<std::byte> scratch;
    try {
      for (size_t i = next.fetch_add(1); i < tasks_.size() && !failed.load();
           i = next.fetch_add(1)) {
        run_task(tasks_[i], scratch);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      failed.store(true);
    }
  };
  const size_t workers = std::min(tasks_.size(), static_cast<size_t>(threads));
  if (workers <= 1) {
    worker();
  } else {
    const size_t helpers = workers - 1;  // the calling thread is the last worker
    std::vector<std::jthread> pool;
    pool.reserve(helpers);
    for (size_t i = 0; i < helpers; ++i) pool.emplace_back(worker);
    worker();
  }  // the pool joins here
  if (error) std::rethrow_exception(error);
}

}  // namespace

void execute_host(const Plan& plan, std::span<const TensorBuffers> buffers,
                  const HostExecuteOptions& options) {
  HostExecution exec(plan, buffers);
  exec.validate();
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  if (threads < 1) threads = 1;
  // Small plans stay on the calling thread.
  int64_t total = 0;
  for (const TensorBuffers& b : buffers) {
    for (const MutableBuffer& d : b.dst) total += d.bytes;
  }
  if (total < kParallelMinBytes) threads = 1;
  exec.build_tasks(threads);
  exec.run_all(threads);
}

}  // namespace reshard
