// In-process host execution of a whole plan (DESIGN.md §3, transport
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

std::string buffer_name(size_t tensor, const char* side, size_t entry) {
  return "tensors[" + std::to_string(tensor) + "]." + side + "[" + std::to_string(entry) + "]";
}

struct PieceRef {
  const ProcessPart* part;
  const Piece* piece;
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

 private:
  CopyDesc desc_of(const PieceRef& ref, Box* dst_box = nullptr) const;
  const void* src_data(const Piece& p) const { return buffers_[p.tensor].src[p.src_entry].data; }
  void* dst_data(const Piece& p) const { return buffers_[p.tensor].dst[p.dst_entry].data; }
  void run_task(const Task& task, std::vector<std::byte>& scratch) const;
  void run_group(const Group& group, std::vector<std::byte>& scratch) const;
  void validate_pieces(const ProcessPart& part, const std::vector<Piece>& pieces,
                       const char* list) const;

  const Plan& plan_;
  const std::vector<TensorSpec>& tensors_;
  std::span<const TensorBuffers> buffers_;
  std::vector<PieceRef> copies_;  // pieces of tensors without partial layouts
  std::vector<Group> groups_;
  std::vector<Task> tasks_;
};

void HostExecution::validate() const {
  for (int32_t process : plan_.processes()) {
    if (!plan_.parts().contains(process)) {
      fail(ErrorCode::kInvalidArgument,
           "plan: lacks the part of process " + std::to_string(process) +
               " (execute_host needs a plan made with PlanScope::kAll)");
    }
  }
  if (buffers_.size() != tensors_.size()) {
    fail(ErrorCode::kInvalidArgument, "buffers: " + std::to_string(buffers_.size()) +
                                          " tensors given, the plan has " +
                                          std::to_string(tensors_.size()));
  }
  // Sizes and null pointers, collecting the address range of every buffer.
  struct Range {
    uintptr_t lo;
    uintptr_t hi;
    size_t tensor;
    size_t entry;
    bool dst;
  };
  std::vector<Range> ranges;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const TensorSpec& spec = tensors_[t];
    const TensorBuffers& b = buffers_[t];
    const int64_t elem = dtype_size(spec.dtype);
    for (int side = 0; side < 2; ++side) {
      const bool is_dst = side == 1;
      const char* name = is_dst ? "dst" : "src";
      const Layout& layout = is_dst ? spec.dst : spec.src;
      const size_t given = is_dst ? b.dst.size() : b.src.size();
      if (given != layout.num_entries()) {
        fail(ErrorCode::kInvalidArgument, "tensors[" + std::to_string(t) + "]." + name + ": " +
                                              std::to_string(given) +
                                              " buffers given, the layout has " +
                                              std::to_string(layout.num_entries()) + " entries");
      }
      for (size_t e = 0; e < given; ++e) {
        const void* data = is_dst ? b.dst[e].data : b.src[e].data;
        const int64_t bytes = is_dst ? b.dst[e].bytes : b.src[e].bytes;
        const Box box = layout.box(e);
        const int64_t want = box.volume() * elem;
        if (bytes != want) {
          fail(ErrorCode::kInvalidArgument, buffer_name(t, name, e) + ": " + std::to_string(bytes) +
                                                " bytes given, box " + to_string(box) + " of " +
                                                std::string(dtype_name(spec.dtype)) + " needs " +
                                                std::to_string(want));
        }
        if (bytes > 0 && data == nullptr) {
          fail(ErrorCode::kInvalidArgument,
               buffer_name(t, name, e) + ": null data for " + std::to_string(bytes) + " bytes");
        }
        if (bytes > 0) {
          const auto lo = reinterpret_cast<uintptr_t>(data);
          ranges.push_back({lo, lo + static_cast<uintptr_t>(bytes), t, e, is_dst});
        }
      }
    }
  }
  // A destination may overlap nothing; sources may share memory. Sweep by
  // address: any overlapping pair is caught when its later-starting member
  // is visited, against the furthest-reaching earlier buffer (of any kind if
  // the member is a destination, among destinations otherwise).
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.lo != b.lo ? a.lo < b.lo : a.dst > b.dst;
  });
  const Range* reach_all = nullptr;
  const Range* reach_dst = nullptr;
  for (const Range& r : ranges) {
    const Range* other = r.dst ? reach_all : reach_dst;
    if (other != nullptr && other->hi > r.lo) {
      const Range& d = r.dst ? r : *other;
      const Range& o = r.dst ? *other : r;
      fail(ErrorCode::kInvalidArgument, buffer_name(d.tensor, "dst", d.entry) + ": overlaps " +
                                            buffer_name(o.tensor, o.dst ? "dst" : "src", o.entry) +
                                            " in memory");
    }
    if (reach_all == nullptr || r.hi > reach_all->hi) reach_all = &r;
    if (r.dst && (reach_dst == nullptr || r.hi > reach_dst->hi)) reach_dst = &r;
  }
  // The pieces index only what exists and stay inside their buffers, so a
  // damaged plan cannot make the copy loops write out of bounds.
  for (const auto& [process, part] : plan_.parts()) {
    validate_pieces(part, part.local, "local");
    validate_pieces(part, part.recv_pieces, "recv_pieces");
  }
}

void HostExecution::validate_pieces(const ProcessPart& part, const std::vector<Piece>& pieces,
                                    const char* list) const {
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    const auto where = [&] {
      return "plan: part " + std::to_string(part.process) + " " + list + "[" + std::to_string(i) +
             "]: ";
    };
    if (p.tensor >= tensors_.size() || p.src_entry >= tensors_[p.tensor].src.num_entries() ||
        p.dst_entry >= tensors_[p.tensor].dst.num_entries()) {
      fail(ErrorCode::kInvalidArgument, where() + "tensor or entry index out of range");
    }
    const Box region = plan_.region(part, p);
    const Box src = tensors_[p.tensor].src.box(p.src_entry);
    const Box dst = tensors_[p.tensor].dst.box(p.dst_entry);
    if (region.rank != src.rank || region.rank != dst.rank ||
        (!region.empty() && (!src.contains(region) || !dst.contains(region)))) {
      fail(ErrorCode::kInvalidArgument, where() + "region " + to_string(region) +
                                            " is not inside source box " + to_string(src) +
                                            " and destination box " + to_string(dst));
    }
  }
}

CopyDesc HostExecution::desc_of(const PieceRef& ref, Box* dst_box) const {
  const Piece& p = *ref.piece;
  const TensorSpec& spec = tensors_[p.tensor];
  const Box dst = spec.dst.box(p.dst_entry);
  if (dst_box != nullptr) *dst_box = dst;
  return make_copy_desc(plan_.region(*ref.part, p), spec.src.box(p.src_entry), dst);
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
  for (const auto& [process, part] : plan_.parts()) {
    for (const std::vector<Piece>* list : {&part.local, &part.recv_pieces}) {
      for (const Piece& p : *list) {
        const int64_t bytes = plan_.piece_bytes(part, p);
        if (group_base[p.tensor] >= 0) {
          Group& g = groups_[static_cast<size_t>(group_base[p.tensor]) + p.dst_entry];
          g.pieces.push_back({&part, &p});
          g.bytes += bytes;
        } else {
          copies_.push_back({&part, &p});
          piece_bytes.push_back(bytes);
          copy_bytes += bytes;
        }
      }
    }
  }
  // Reduce in source summand order: the result then does not depend on which
  // pieces were local or on how the planner ordered them (each summand
  // covers an element at most once, so ties in this order commute).
  for (Group& g : groups_) {
    if (!g.reduce) continue;
    const Layout& src = tensors_[g.tensor].src;
    std::stable_sort(g.pieces.begin(), g.pieces.end(), [&](const PieceRef& a, const PieceRef& b) {
      return src.summand(a.piece->src_entry) < src.summand(b.piece->src_entry);
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
  // Copies: small pieces batched, large ones sliced, each task near `target`.
  Task batch{Task::kPieces, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < copies_.size(); ++i) {
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
}

void HostExecution::run_task(const Task& task, std::vector<std::byte>& scratch) const {
  switch (task.kind) {
    case Task::kPieces:
      for (size_t i = task.begin; i < task.end; ++i) {
        const Piece& p = *copies_[i].piece;
        copy_box(desc_of(copies_[i]), dtype_size(tensors_[p.tensor].dtype), src_data(p),
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
        std::memcpy(static_cast<std::byte*>(dst_data(p)) + (t + task.lo) * elem,
                    static_cast<const std::byte*>(src_data(p)) + (s + task.lo) * elem,
                    static_cast<size_t>((task.hi - task.lo) * elem));
      } else {
        copy_box_runs(d, elem, task.lo, task.hi, src_data(p), dst_data(p));
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
    // Whole source, partial destination: elements no piece writes hold the
    // identity, so the destination summands still combine to the value.
    if (acc_is_elem(dtype)) {
      fill_identity(dtype, spec.dst.reduce_op(), dst, n);
    } else {
      scratch.resize(static_cast<size_t>(acc_size(dtype)));
      fill_identity(dtype, spec.dst.reduce_op(), scratch.data(), 1);
      const int64_t elem = dtype_size(dtype);
      store_from_acc(dtype, scratch.data(), dst, 1);
      for (int64_t i = 1; i < n; ++i) {
        std::memcpy(static_cast<std::byte*>(dst) + i * elem, dst, static_cast<size_t>(elem));
      }
    }
    for (const PieceRef& ref : g.pieces) {
      copy_box(desc_of(ref), dtype_size(dtype), src_data(*ref.piece), dst);
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
    reduce_into(desc_of(ref), dtype, op, src_data(*ref.piece), acc);
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
  exec.run(threads);
}

}  // namespace reshard
