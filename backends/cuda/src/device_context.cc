#include "device_context.h"

#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "kernels.h"

namespace reshard::cuda_backend {

// ----------------------------------------------------------- cuda_util.h

void cuda_fail(cudaError_t e, const std::string& what) {
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  ErrorCode code = ErrorCode::kTransport;
  switch (e) {
    case cudaErrorMemoryAllocation:
      code = ErrorCode::kOutOfMemory;
      break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      code = ErrorCode::kUnsupported;
      break;
    default:
      break;
  }
  fail(code, "CUDA: " + what + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
}

DeviceGuard::DeviceGuard(int ordinal) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ == ordinal) {
    previous_ = -1;
    return;
  }
  check(cudaSetDevice(ordinal), ("cudaSetDevice(" + std::to_string(ordinal) + ")").c_str());
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

void DeviceFree::operator()(void* p) const noexcept {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != ordinal) cudaSetDevice(ordinal);
  cudaFree(p);
  if (previous != ordinal) cudaSetDevice(previous);
}

StreamPtr make_stream(int ordinal) {
  DeviceGuard guard(ordinal);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamDefault), "cudaStreamCreateWithFlags");
  return StreamPtr(s);
}

EventPtr make_event(int ordinal) {
  DeviceGuard guard(ordinal);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return EventPtr(e);
}

DevicePtr device_alloc(int ordinal, size_t bytes) {
  DeviceGuard guard(ordinal);
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str());
  return DevicePtr(p, DeviceFree{ordinal});
}

PinnedPtr pinned_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes), ("cudaMallocHost(" + std::to_string(bytes) + " bytes)").c_str());
  return PinnedPtr(p);
}

// --------------------------------------------------------------- staging

namespace {

class CudaStaging : public StagingBlock {
 public:
  CudaStaging(int ordinal, cudaStream_t stream, bool async, void* data, int64_t bytes)
      : ordinal_(ordinal), stream_(stream), async_(async), data_(data), bytes_(bytes) {}
  ~CudaStaging() override {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    if (previous != ordinal_) cudaSetDevice(ordinal_);
    if (async_) {
      cudaFreeAsync(data_, stream_);  // after the work that uses it
    } else {
      cudaFree(data_);  // synchronises the device
    }
    if (previous != ordinal_) cudaSetDevice(previous);
  }
  std::byte* data() override { return static_cast<std::byte*>(data_); }
  int64_t bytes() const override { return bytes_; }

 private:
  int ordinal_;
  cudaStream_t stream_;
  bool async_;
  void* data_;
  int64_t bytes_;
};

}  // namespace

// -------------------------------------------------------- DeviceContext

DeviceContext::DeviceContext(int ordinal, cudaStream_t stream)
    : ordinal_(ordinal), cache_(kLaunchCacheEntries, kLaunchCacheBytes) {
  if (stream == nullptr) {
    owned_ = make_stream(ordinal);
    stream_ = owned_.get();
  } else {
    stream_ = stream;
  }
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ordinal),
        "cudaDeviceGetAttribute(MultiProcessorCount)");
  // Enough resident blocks to cover every SM several times over; the tiles
  // beyond are picked up by the grid-stride loop.
  max_blocks_ = std::max(1, sms) * 8;
  int pools = 0;
  check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal),
        "cudaDeviceGetAttribute(MemoryPoolsSupported)");
  pools_ = pools != 0;
  int pageable = 0;
  check(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, ordinal),
        "cudaDeviceGetAttribute(PageableMemoryAccess)");
  pageable_access_ = pageable != 0;
}

DeviceContext::Slot& DeviceContext::acquire(Clock::time_point deadline) {
  // A slot whose last kernel completed, else a new one (up to a bound), else
  // wait for the oldest.
  constexpr size_t kMaxSlots = 64;
  for (size_t k = 0; k < slots_.size(); ++k) {
    const size_t at = (next_slot_ + k) % slots_.size();
    Slot& s = *slots_[at];
    const cudaError_t q = s.used ? cudaEventQuery(s.done.get()) : cudaSuccess;
    if (q == cudaSuccess) {
      next_slot_ = at + 1;
      return s;
    }
    if (q != cudaErrorNotReady) check(q, "cudaEventQuery");
  }
  if (slots_.size() < kMaxSlots) {
    auto slot = std::make_unique<Slot>();
    slot->done = make_event(ordinal_);
    slots_.push_back(std::move(slot));
    next_slot_ = slots_.size();
    return *slots_.back();
  }
  const size_t at = next_slot_ % slots_.size();
  next_slot_ = at + 1;
  Slot& oldest = *slots_[at];
  Backoff backoff;
  while (true) {
    const cudaError_t q = cudaEventQuery(oldest.done.get());
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) check(q, "cudaEventQuery");
    if (Clock::now() > deadline) {
      fail(ErrorCode::kTimeout, "CUDA device " + std::to_string(ordinal_) +
                                    ": timed out waiting for earlier copy kernels to complete");
    }
    backoff.pause(deadline);
  }
  return oldest;
}

DeviceContext::Slot& DeviceContext::stage(const std::vector<Launch>& launches, const Descriptors& d,
                                          Clock::time_point deadline, bool device) {
  Slot& slot = acquire(deadline);
  if (slot.host_capacity < d.bytes) {
    const size_t capacity = std::max(d.bytes, slot.host_capacity * 2);
    slot.host.reset();
    slot.host = pinned_alloc(capacity);
    slot.host_capacity = capacity;
  }
  if (device && slot.device_capacity < d.bytes) {
    const size_t capacity = std::max(d.bytes, slot.device_capacity * 2);
    slot.device.reset();
    slot.device = device_alloc(ordinal_, capacity);
    slot.device_capacity = capacity;
  }
  write_descriptors(launches, d, static_cast<unsigned char*>(slot.host.get()));
  return slot;
}

void DeviceContext::launch_all(const void* device, const Descriptors& d) {
  const auto* base = static_cast<const unsigned char*>(device);
  for (const DescriptorPart& p : d.parts) {
    check(launch_tiles(p.element, p.multi, p.swizzled,
                       reinterpret_cast<const Work*>(base + p.works_offset),
                       reinterpret_cast<const int64_t*>(base + p.tiles_offset),
                       p.tile_work_offset == SIZE_MAX
                           ? nullptr
                           : reinterpret_cast<const int32_t*>(base + p.tile_work_offset),
                       reinterpret_cast<const SrcRef*>(base + p.sources_offset),
                       reinterpret_cast<const ScaleGrid*>(base + p.grids_offset), p.works, p.tiles,
                       max_blocks_, stream_),
          "launching the copy kernel");
  }
}

bool DeviceContext::run_cached(std::span<const CopyOp> ops, uint64_t key) {
  Cached* c = cache_.find(ops, key);
  if (c == nullptr) return false;
  DeviceGuard guard(ordinal_);
  launch_all(c->descriptors.get(), c->layout);
  return true;
}

bool DeviceContext::remember(std::span<const CopyOp> ops, uint64_t key,
                             const std::vector<Launch>& launches, const Descriptors& d,
                             Clock::time_point deadline) {
  const size_t bytes = LaunchCache<Cached>::entry_bytes(ops, key, d.bytes);
  // Evicting frees device memory (cudaFree: waits for the kernels still
  // reading it) before the new entry's is allocated.
  if (!cache_.make_room(bytes)) return false;
  Cached c;
  c.descriptors = device_alloc(ordinal_, d.bytes);
  c.layout = d;
  // The pinned slot is free again once the upload completed.
  Slot& slot = stage(launches, d, deadline, false);
  check(cudaMemcpyAsync(c.descriptors.get(), slot.host.get(), d.bytes, cudaMemcpyHostToDevice,
                        stream_),
        "cudaMemcpyAsync(descriptors)");
  check(cudaEventRecord(slot.done.get(), stream_), "cudaEventRecord");
  slot.used = true;
  launch_all(c.descriptors.get(), c.layout);
  cache_.insert(ops, key, bytes, std::move(c));
  return true;
}

void DeviceContext::enqueue(const std::vector<Launch>& launches, Clock::time_point deadline,
                            std::span<const CopyOp> ops, uint64_t key) {
  if (launches.empty()) return;
  DeviceGuard guard(ordinal_);
  const Descriptors d = layout_descriptors(launches);
  if (!ops.empty() && remember(ops, key, launches, d, deadline)) return;
  // Uncached: one upload into the slot's device memory, which the kernels
  // read, so the slot is free again once they completed.
  Slot& slot = stage(launches, d, deadline, true);
  check(
      cudaMemcpyAsync(slot.device.get(), slot.host.get(), d.bytes, cudaMemcpyHostToDevice, stream_),
      "cudaMemcpyAsync(descriptors)");
  launch_all(slot.device.get(), d);
  check(cudaEventRecord(slot.done.get(), stream_), "cudaEventRecord");
  slot.used = true;
}

std::unique_ptr<StagingBlock> DeviceContext::allocate(int64_t bytes) {
  DeviceGuard guard(ordinal_);
  void* p = nullptr;
  const size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  const std::string what = "allocating " + std::to_string(bytes) + " bytes of staging on device " +
                           std::to_string(ordinal_);
  if (pools_) {
    check(cudaMallocAsync(&p, n, stream_), what.c_str());
  } else {
    check(cudaMalloc(&p, n), what.c_str());
  }
  return std::make_unique<CudaStaging>(ordinal_, stream_, pools_, p, bytes);
}

EventPtr DeviceContext::record() {
  EventPtr e = make_event(ordinal_);
  DeviceGuard guard(ordinal_);
  check(cudaEventRecord(e.get(), stream_), "cudaEventRecord");
  return e;
}

// ------------------------------------------------------------ DeviceSet

void DeviceSet::order_streams() {
  if (contexts_.size() < 2) return;
  // Every wait added goes from work issued after this call to work issued
  // before it in this process: a subset of the order that one stream for
  // all of the process's GPUs would impose, so it adds no cycle with the
  // NCCL sends and receives of other processes (whose one-GPU case is that
  // order). An event's wait is enqueued with the event's state at the call,
  // so the events may go once every stream waits on them.
  std::vector<std::pair<int, EventPtr>> events;
  for (const auto& [ordinal, ctx] : contexts_) events.emplace_back(ordinal, ctx->record());
  for (const auto& [ordinal, ctx] : contexts_) {
    DeviceGuard guard(ordinal);
    for (const auto& [other, event] : events) {
      if (other == ordinal) continue;
      check(cudaStreamWaitEvent(ctx->stream(), event.get(), 0), "cudaStreamWaitEvent");
    }
  }
}

DeviceSet::DeviceSet(const CudaStreamOptions& options) : options_(options) {
  if (!(options_.timeout_seconds > 0)) {
    fail(ErrorCode::kInvalidArgument, "options.timeout_seconds: must be positive");
  }
  const cudaError_t e = cudaGetDeviceCount(&device_count_);
  if (e != cudaSuccess) cuda_fail(e, "cudaGetDeviceCount");
  if (device_count_ == 0) fail(ErrorCode::kUnsupported, "CUDA: no GPU is visible");
  std::vector<int32_t> seen;
  for (size_t i = 0; i < options_.streams.size(); ++i) {
    const CudaStream& s = options_.streams[i];
    const std::string field = "options.streams[" + std::to_string(i) + "]";
    if (s.ordinal < 0 || s.ordinal >= device_count_) {
      fail(ErrorCode::kInvalidArgument, field + ".ordinal: " + std::to_string(s.ordinal) +
                                            " is not a visible CUDA device (" +
                                            std::to_string(device_count_) + " visible)");
    }
    if (std::find(seen.begin(), seen.end(), s.ordinal) != seen.end()) {
      fail(ErrorCode::kInvalidArgument,
           field + ".ordinal: a second stream for device " + std::to_string(s.ordinal));
    }
    if (s.stream == nullptr) fail(ErrorCode::kInvalidArgument, field + ".stream: null");
    seen.push_back(s.ordinal);
  }
}

DeviceContext& DeviceSet::get(int ordinal) {
  auto it = contexts_.find(ordinal);
  if (it != contexts_.end()) return *it->second;
  if (ordinal < 0 || ordinal >= device_count_) {
    fail(ErrorCode::kInvalidArgument, "CUDA device ordinal " + std::to_string(ordinal) +
                                          " is not visible (" + std::to_string(device_count_) +
                                          " devices; check CUDA_VISIBLE_DEVICES and the plan's "
                                          "topology ordinals)");
  }
  cudaStream_t stream = nullptr;
  for (const CudaStream& s : options_.streams) {
    if (s.ordinal == ordinal) stream = s.stream;
  }
  auto ctx = std::make_unique<DeviceContext>(ordinal, stream);
  DeviceContext& ref = *ctx;
  contexts_.emplace(ordinal, std::move(ctx));
  for (const auto& [other, unused] : contexts_) {
    if (other == ordinal) continue;
    peer(ordinal, other);
    peer(other, ordinal);
  }
  return ref;
}

bool DeviceSet::peer(int from, int to) {
  if (from == to) return true;
  const auto key = std::make_pair(from, to);
  if (auto it = peers_.find(key); it != peers_.end()) return it->second;
  int can = 0;
  check(cudaDeviceCanAccessPeer(&can, from, to), "cudaDeviceCanAccessPeer");
  bool ok = false;
  if (can != 0) {
    DeviceGuard guard(from);
    const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
    if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled) {
      ok = true;
      cudaGetLastError();
    } else {
      cuda_fail(e, "cudaDeviceEnablePeerAccess(" + std::to_string(from) + " -> " +
                       std::to_string(to) + ")");
    }
  }
  peers_[key] = ok;
  return ok;
}

namespace {

// cuMemGetAddressRange through the runtime's driver entry points (the
// backend links no libcuda): the allocation holding a device pointer, so
// one check covers every pointer into it. Null when unavailable.
using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
GetAddressRange address_range_fn() {
  static const GetAddressRange fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return GetAddressRange{nullptr};
    }
    return reinterpret_cast<GetAddressRange>(f);
  }();
  return fn;
}

}  // namespace

void DeviceSet::check_pointer(int ordinal, const void* p, const std::string& what) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  for (const RecentRange& r : recent_) {
    if (r.ordinal == ordinal && address >= r.lo && address < r.hi) return;
  }
  const auto key = std::make_pair(ordinal, p);
  if (checked_.contains(key)) return;
  std::map<uintptr_t, uintptr_t>& ranges = checked_ranges_[ordinal];
  if (auto it = ranges.upper_bound(address); it != ranges.begin() && address < (--it)->second) {
    recent_[recent_next_++ % std::size(recent_)] = RecentRange{ordinal, it->first, it->second};
    return;
  }
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  }
  const DeviceContext& ctx = get(ordinal);
  switch (a.type) {
    case cudaMemoryTypeDevice:
      if (a.device != ordinal && !peer(ordinal, a.device)) {
        fail(ErrorCode::kUnsupported,
             what + " is memory of CUDA device " + std::to_string(a.device) + ", which device " +
                 std::to_string(ordinal) + " cannot address (no peer access between them)");
      }
      break;
    case cudaMemoryTypeManaged:
      break;
    case cudaMemoryTypeHost:
      if (a.devicePointer == nullptr) {
        fail(ErrorCode::kInvalidArgument,
             what + " is pinned host memory not mapped into device " + std::to_string(ordinal));
      }
      break;
    default:
      if (!ctx.pageable_access_) {
        fail(ErrorCode::kInvalidArgument,
             what + " is ordinary host memory, which CUDA device " + std::to_string(ordinal) +
                 " cannot address: shard buffers of the cuda and nccl transports must be CUDA "
                 "device memory (cudaMalloc), managed or mapped pinned memory");
      }
      break;
  }
  if (a.type == cudaMemoryTypeDevice) {
    // Remember the whole allocation: a call's many pieces of one shard or
    // staging buffer cost one query, not one each.
    CUdeviceptr base = 0;
    size_t size = 0;
    if (GetAddressRange range = address_range_fn();
        range != nullptr &&
        range(&base, &size, static_cast<CUdeviceptr>(address)) == CUDA_SUCCESS && size > 0) {
      if (ranges.size() > 65536) {
        ranges.clear();
        for (RecentRange& r : recent_) r = RecentRange{};
      }
      ranges[static_cast<uintptr_t>(base)] = static_cast<uintptr_t>(base) + size;
      recent_[recent_next_++ % std::size(recent_)] =
          RecentRange{ordinal, static_cast<uintptr_t>(base), static_cast<uintptr_t>(base) + size};
      return;
    }
  }
  if (checked_.size() > 65536) checked_.clear();
  checked_.emplace(key, true);
}

void DeviceSet::run_copies(int ordinal, std::span<const CopyOp> ops, uint64_t key) {
  DeviceContext& ctx = get(ordinal);
  // The same call as an earlier one: its pointers were checked then.
  if (ctx.run_cached(ops, key)) return;
  std::vector<Launch> launches = plan_launches(ops);
  if (launches.empty()) return;
  if (options_.check_pointers) {
    // Every op that moves something (plan_launches validated them), since a
    // Work may stand for several ops (fused reductions, merged copies).
    for (const CopyOp& op : ops) {
      if (moves_nothing(op)) continue;
      if (op.src != nullptr) check_pointer(ordinal, op.src, "run_copies: a source pointer");
      if (op.kind == CopyOp::Kind::kQuantise)
        check_pointer(ordinal, op.shard->scales, "run_copies: a scales pointer");
      check_pointer(ordinal, op.dst, "run_copies: a destination pointer");
    }
  }
  ctx.enqueue(launches, deadline_after(options_.timeout_seconds), ops, key);
}

bool DeviceSet::wait_all(Clock::time_point deadline, const std::function<void()>& poll) {
  std::vector<std::pair<int, EventPtr>> events;
  for (const auto& [ordinal, ctx] : contexts_) events.emplace_back(ordinal, ctx->record());
  Backoff backoff;
  size_t done = 0;
  while (true) {
    while (done < events.size()) {
      const cudaError_t q = cudaEventQuery(events[done].second.get());
      if (q == cudaErrorNotReady) break;
      check(q,
            ("waiting for the work on CUDA device " + std::to_string(events[done].first)).c_str());
      ++done;
    }
    if (done == events.size()) return true;
    if (poll) poll();
    if (Clock::now() > deadline) return false;
    backoff.pause(deadline);
  }
}

}  // namespace reshard::cuda_backend
