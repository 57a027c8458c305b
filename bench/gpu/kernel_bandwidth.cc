// Bandwidth of the fused pack / unpack / reduce kernels (backends/cuda) on
// representative strided boxes, as a ratio to cudaMemcpy device-to-device of
// the same bytes measured in the same run (docs/design.md §9.7: benchmarks print
// ratios against an in-run baseline).
//
// Every case goes through the public path the engine uses: one
// Transport::run_copies call of the cuda transport (descriptor upload, one
// fused launch per class), timed with CUDA events on the caller's stream;
// "host ms" is the time a repeated call took on the CPU (the same ops
// again: the GPU's launch cache hands back the launches planned the first
// time) and "first call ms" the first call's (validating the ops, planning
// the launches, uploading their descriptors). Output: a Markdown table (scripts/gpu-check.sh
// appends it to docs/gpu-results.md).
//
//   kernel_bandwidth [--gib N] [--iters K]     (defaults: 1 GiB, 10 iterations)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda_bench.h"
#include "reshard/box_copy.h"
#include "reshard/cuda.h"
#include "reshard/error.h"
#include "reshard/wait.h"

namespace {

using reshard::bench_gpu::alloc;
using reshard::bench_gpu::check;
using reshard::bench_gpu::DevicePtr;

using reshard::Box;
using reshard::CopyOp;
using reshard::DType;

struct EventDestroy {
  void operator()(CUevent_st* e) const noexcept { cudaEventDestroy(e); }
};
using EventPtr = std::unique_ptr<CUevent_st, EventDestroy>;

struct StreamDestroy {
  void operator()(CUstream_st* s) const noexcept { cudaStreamDestroy(s); }
};

EventPtr event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "cudaEventCreate");
  return EventPtr(e);
}

Box box2(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  Box b;
  b.rank = 2;
  b.lo[0] = r0;
  b.hi[0] = r1;
  b.lo[1] = c0;
  b.hi[1] = c1;
  return b;
}

struct Case {
  std::string name;
  std::vector<CopyOp> ops;
  int64_t bytes = 0;    // payload bytes moved
  int64_t traffic = 0;  // bytes any kernel must read and write (0: 2 x bytes, a copy)
};

struct Timing {
  double gpu_seconds = 0;    // per iteration, from events
  double host_seconds = 0;   // per iteration, run_copies call on the CPU
  double first_seconds = 0;  // the first (planning) call on the CPU
};

class Bench {
 public:
  Bench(cudaStream_t stream, int iters) : stream_(stream), iters_(iters) {
    reshard::CudaLocalOptions o;
    o.streams = {{0, stream}};
    o.wait = false;
    transport_ = reshard::make_cuda_local_transport(o);
  }

  Timing kernels(const Case& c) {
    Timing t;
    const auto f0 = reshard::WaitClock::now();
    transport_->run_copies(0, 0, c.ops);  // plans; also the warm-up
    t.first_seconds = reshard::seconds_since(f0);
    check(cudaStreamSynchronize(stream_), "sync");
    EventPtr start = event();
    EventPtr stop = event();
    check(cudaEventRecord(start.get(), stream_), "record");
    const auto h0 = reshard::WaitClock::now();
    for (int i = 0; i < iters_; ++i) transport_->run_copies(0, 0, c.ops);
    const auto h1 = reshard::WaitClock::now();
    check(cudaEventRecord(stop.get(), stream_), "record");
    check(cudaEventSynchronize(stop.get()), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.get(), stop.get()), "elapsed");
    t.gpu_seconds = ms / 1e3 / iters_;
    t.host_seconds = std::chrono::duration<double>(h1 - h0).count() / iters_;
    return t;
  }

  double memcpy_seconds(void* dst, const void* src, int64_t bytes) {
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_),
          "memcpy");
    check(cudaStreamSynchronize(stream_), "sync");
    EventPtr start = event();
    EventPtr stop = event();
    check(cudaEventRecord(start.get(), stream_), "record");
    for (int i = 0; i < iters_; ++i) {
      check(
          cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_),
          "memcpy");
    }
    check(cudaEventRecord(stop.get(), stream_), "record");
    check(cudaEventSynchronize(stop.get()), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.get(), stop.get()), "elapsed");
    return ms / 1e3 / iters_;
  }

 private:
  cudaStream_t stream_;
  int iters_;
  std::unique_ptr<reshard::Transport> transport_;
};

// Column blocks of width `width` of a rows x cols matrix of `dtype`: packed
// out of the full matrix into a contiguous buffer (pack = true) or unpacked
// back into it; one op per block, all in one call.
Case column_blocks(const std::string& name, DType dtype, int64_t rows, int64_t cols, int64_t width,
                   bool pack, void* matrix, void* packed) {
  Case c;
  c.name = name;
  const int64_t es = reshard::dtype_size(dtype);
  const Box full = box2(0, rows, 0, cols);
  auto* staging = static_cast<std::byte*>(packed);
  for (int64_t c0 = 0; c0 < cols; c0 += width) {
    const Box region = box2(0, rows, c0, std::min(cols, c0 + width));
    CopyOp op;
    op.kind = CopyOp::Kind::kCopy;
    op.dtype = dtype;
    if (pack) {
      op.desc = reshard::make_copy_desc(region, full, region);
      op.src = matrix;
      op.dst = staging;
    } else {
      op.desc = reshard::make_copy_desc(region, region, full);
      op.src = staging;
      op.dst = matrix;
    }
    staging += region.volume() * es;
    c.bytes += region.volume() * es;
    c.ops.push_back(op);
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  int iters = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--gib") == 0) gib = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::max(1, std::atoi(argv[i + 1]));
  }
  if (const int status = reshard::bench_gpu::unavailable("kernel_bandwidth"); status >= 0)
    return status;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t raw = nullptr;
  check(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), "stream");
  std::unique_ptr<CUstream_st, StreamDestroy> stream(raw);

  // A bf16 matrix of `gib` GiB, 2:1 columns to rows.
  const int64_t elems = static_cast<int64_t>(gib * (int64_t{1} << 30) / 2);
  int64_t rows = 1;
  while (rows * rows * 2 < elems) rows *= 2;
  const int64_t cols = elems / rows;
  const int64_t bytes = rows * cols * 2;
  DevicePtr matrix = alloc(static_cast<size_t>(bytes), 0x5a);
  DevicePtr packed = alloc(static_cast<size_t>(bytes), 0x5a);
  Bench bench(stream.get(), iters);
  const double memcpy_full = bench.memcpy_seconds(packed.get(), matrix.get(), bytes);

  std::vector<Case> cases;
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols) + " bf16";
  for (int64_t width : {cols / 8, int64_t{512}, int64_t{64}, int64_t{8}}) {
    const std::string w =
        std::to_string(width) + "-column blocks (" + std::to_string(width * 2) + " B runs)";
    cases.push_back(column_blocks("pack " + shape + ", " + w, DType::kBF16, rows, cols, width, true,
                                  matrix.get(), packed.get()));
    cases.push_back(column_blocks("unpack " + shape + ", " + w, DType::kBF16, rows, cols, width,
                                  false, matrix.get(), packed.get()));
  }
  {
    // A rank-3 box that does not merge: [:, half of dim 1, 2 KiB of dim 2].
    Case c;
    const int64_t d2 = 4096;
    const int64_t d1 = 256;
    const int64_t d0 = std::max<int64_t>(1, elems / (d1 * d2));
    Box full;
    full.rank = 3;
    full.hi[0] = d0;
    full.hi[1] = d1;
    full.hi[2] = d2;
    Box region = full;
    region.hi[1] = d1 / 2;
    region.lo[2] = 1024;
    region.hi[2] = 2048;
    CopyOp op;
    op.kind = CopyOp::Kind::kCopy;
    op.dtype = DType::kBF16;
    op.desc = reshard::make_copy_desc(region, full, region);
    op.src = matrix.get();
    op.dst = packed.get();
    c.name = "pack rank-3 " + std::to_string(d0) + "x256x4096 bf16 [:, :128, 1024:2048]";
    c.ops = {op};
    c.bytes = region.volume() * 2;
    cases.push_back(c);
  }
  {
    // Many small pieces in one call: 16,384 contiguous 32 KiB copies.
    Case c;
    c.name = "16384 pieces of 32 KiB (one call)";
    const int64_t piece = 32 << 10;
    const int64_t n = std::min<int64_t>(16384, bytes / piece);
    for (int64_t i = 0; i < n; ++i) {
      Box b;
      b.rank = 1;
      b.hi[0] = piece;
      CopyOp op;
      op.kind = CopyOp::Kind::kCopy;
      op.dtype = DType::kU8;
      op.desc = reshard::make_copy_desc(b, b, b);
      op.src = static_cast<std::byte*>(matrix.get()) + i * piece;
      op.dst = static_cast<std::byte*>(packed.get()) + ((i * 7919) % n) * piece;
      c.ops.push_back(op);
    }
    c.bytes = n * piece;
    cases.push_back(c);
  }
  {
    // Reduce-on-unpack: f32 sum of a packed message into an f32 shard.
    Case c;
    const int64_t n = bytes / 8;
    Box b;
    b.rank = 1;
    b.hi[0] = n;
    CopyOp op;
    op.kind = CopyOp::Kind::kReduce;
    op.dtype = DType::kF32;
    op.op = reshard::ReduceOp::kSum;
    op.desc = reshard::make_copy_desc(b, b, b);
    op.src = matrix.get();
    op.dst = packed.get();
    check(cudaMemset(matrix.get(), 0, static_cast<size_t>(bytes)), "memset");
    check(cudaMemset(packed.get(), 0, static_cast<size_t>(bytes)), "memset");
    c.name = "reduce f32 sum, " + std::to_string(n * 4 >> 20) + " MiB contiguous";
    c.ops = {op};
    c.bytes = n * 4;
    c.traffic = 3 * n * 4;  // read both, write one
    cases.push_back(c);
  }
  // Partial sums as the engine queues them for one destination entry: the
  // accumulator's identity fill, 4 summands in order, the store (bf16: an
  // f32 accumulator beside the shard; f32: the shard itself). The bound
  // reads each summand once and writes the result once.
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    const int64_t es = reshard::dtype_size(dtype);
    const int64_t n = bytes / 4 / es;  // 4 summands fill `matrix`
    Box b;
    b.rank = 1;
    b.hi[0] = n;
    Case c;
    const bool separate = dtype == DType::kBF16;
    auto* acc = static_cast<std::byte*>(packed.get());
    auto* out = separate ? acc + bytes / 2 : acc;
    CopyOp fill;
    fill.kind = CopyOp::Kind::kFillAcc;
    fill.dtype = dtype;
    fill.count = n;
    fill.dst = acc;
    c.ops.push_back(fill);
    for (int k = 0; k < 4; ++k) {
      CopyOp op;
      op.kind = CopyOp::Kind::kReduce;
      op.dtype = dtype;
      op.desc = reshard::make_copy_desc(b, b, b);
      op.src = static_cast<std::byte*>(matrix.get()) + k * n * es;
      op.dst = acc;
      c.ops.push_back(op);
    }
    if (separate) {
      CopyOp st;
      st.kind = CopyOp::Kind::kStore;
      st.dtype = dtype;
      st.count = n;
      st.src = acc;
      st.dst = out;
      c.ops.push_back(st);
    }
    c.name = "partial sums " + std::string(reshard::dtype_name(dtype)) + ", 4 summands of " +
             std::to_string(n * es >> 20) + " MiB -> one shard (fill, 4 reduces" +
             (separate ? ", store)" : ")");
    c.bytes = n * es;
    c.traffic = 5 * n * es;
    cases.push_back(c);
  }

  std::printf("device: %s (%d SMs), %d iterations per case\n", prop.name, prop.multiProcessorCount,
              iters);
  std::printf("backend: %s\n", reshard::cuda_backend_versions().c_str());
  std::printf("baseline: cudaMemcpy device-to-device of %.2f GiB: %.1f GB/s\n\n",
              static_cast<double>(bytes) / (1 << 30), bytes / memcpy_full / 1e9);
  std::printf(
      "| case | MiB | kernel GB/s | cudaMemcpy GB/s | ratio | of memory bound | host ms | first "
      "call "
      "ms |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Case& c : cases) {
    const Timing t = bench.kernels(c);
    const double base = bench.memcpy_seconds(packed.get(), matrix.get(), c.bytes);
    const double gbs = c.bytes / t.gpu_seconds / 1e9;
    const double base_gbs = c.bytes / base / 1e9;
    // Of the memory bound: the kernel's necessary traffic per second over
    // cudaMemcpy's (which reads and writes each byte once).
    const double traffic = c.traffic > 0 ? static_cast<double>(c.traffic) : 2.0 * c.bytes;
    const double bound = (traffic / t.gpu_seconds) / (2.0 * c.bytes / base);
    std::printf("| %s | %.0f | %.1f | %.1f | %.2f | %.2f | %.3f | %.3f |\n", c.name.c_str(),
                static_cast<double>(c.bytes) / (1 << 20), gbs, base_gbs, gbs / base_gbs, bound,
                t.host_seconds * 1e3, t.first_seconds * 1e3);
  }
  return 0;
}
