// Executors — one engine over a transport, whatever the kind (HOST: the
// local transport, executing whole plans) — execution, and the
// verification oracle.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "internal.h"
#include "reshard/backend.h"  // the transports of the run-time loaded backends
#include "reshard/engine.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"

using reshard::ErrorCode;
using reshard::TensorSpec;
using reshard::capi::check_index;
using reshard::capi::check_out_struct;
using reshard::capi::guard;
using reshard::capi::plan_tensor;
using reshard::capi::read_struct;
using reshard::capi::renamed;
using reshard::capi::require;
using reshard::capi::to_int64;
using reshard::capi::write_struct;

namespace {

constexpr size_t kExecutorOptionsV1Size = RESHARD_CAPI_V1_SIZE(reshard_executor_options_t, threads);
// ABI 1.9 appended timeout_seconds.
static_assert(offsetof(reshard_executor_options_t, timeout_seconds) == 16);
static_assert(sizeof(reshard_executor_options_t) == 24);
constexpr size_t kVerifyReportV1Size = RESHARD_CAPI_V1_SIZE(reshard_verify_report_t, mismatches);
constexpr size_t kExecutorInfoV1Size = RESHARD_CAPI_V1_SIZE(reshard_executor_info_t, reserved0);
static_assert(kExecutorOptionsV1Size == 16);
static_assert(kVerifyReportV1Size == sizeof(reshard_verify_report_t));
static_assert(kExecutorInfoV1Size == sizeof(reshard_executor_info_t));

const char* transport_name(reshard_transport_t t) {
  switch (t) {
    case RESHARD_TRANSPORT_HOST:
      return "host";
    case RESHARD_TRANSPORT_MPI:
      return "mpi";
    case RESHARD_TRANSPORT_NCCL:
      return "nccl";
    case RESHARD_TRANSPORT_CUDA_LOCAL:
      return "cuda_local";
    default:
      return "unknown";
  }
}

std::string element(const char* array, size_t i) {
  return std::string(array) + "[" + std::to_string(i) + "]";
}

// The C buffers as execute_host's views. Only what the C types add is
// checked here (NULL arrays, sizes past INT64_MAX); execute_host checks
// counts, sizes and overlaps against the plan.
std::vector<reshard::TensorBuffers> to_views(const reshard::Plan& plan,
                                             const reshard_tensor_buffers_t* buffers,
                                             size_t num_tensors) {
  // Counts are checked against the plan before anything is sized by them
  // (num_tensors = SIZE_MAX must be an argument error, not a failed
  // allocation, and num_src past the array must not be walked).
  const auto& tensors = plan.tensors();
  if (num_tensors > 0) require(buffers, "buffers");
  if (num_tensors != tensors.size())
    reshard::fail(ErrorCode::kInvalidArgument, "buffers: " + std::to_string(num_tensors) +
                                                   " tensors given, the plan has " +
                                                   std::to_string(tensors.size()));
  std::vector<reshard::TensorBuffers> views(num_tensors);
  for (size_t t = 0; t < num_tensors; ++t) {
    const reshard_tensor_buffers_t& b = buffers[t];
    const std::string name = element("buffers", t);
    // More buffers than entries: refused before the list is walked (the
    // engine reports any other count mismatch).
    if (b.num_src > tensors[t].src.num_entries())
      reshard::fail(ErrorCode::kInvalidArgument, name + ".src: " + std::to_string(b.num_src) +
                                                     " buffers given, the layout has " +
                                                     std::to_string(tensors[t].src.num_entries()));
    if (b.num_dst > tensors[t].dst.num_entries())
      reshard::fail(ErrorCode::kInvalidArgument, name + ".dst: " + std::to_string(b.num_dst) +
                                                     " buffers given, the layout has " +
                                                     std::to_string(tensors[t].dst.num_entries()));
    if (b.num_src > 0 && b.src == nullptr) {
      reshard::fail(ErrorCode::kInvalidArgument, name + ".src: must not be NULL");
    }
    if (b.num_dst > 0 && b.dst == nullptr) {
      reshard::fail(ErrorCode::kInvalidArgument, name + ".dst: must not be NULL");
    }
    for (size_t e = 0; e < b.num_src; ++e) {
      views[t].src.push_back(
          {b.src[e].data,
           to_int64(b.src[e].bytes, name + ".src[" + std::to_string(e) + "].bytes")});
    }
    for (size_t e = 0; e < b.num_dst; ++e) {
      views[t].dst.push_back(
          {b.dst[e].data,
           to_int64(b.dst[e].bytes, name + ".dst[" + std::to_string(e) + "].bytes")});
    }
  }
  return views;
}

// A distributed executor reads only this rank's entries; an entry of
// another process that is not {NULL, 0} is a caller's mistake (a buffer
// they expect to be filled), reported rather than ignored.
void check_remote_entries_empty(const reshard::Plan& plan, const reshard_tensor_buffers_t* buffers,
                                size_t num_tensors, int32_t rank) {
  const size_t n = std::min(num_tensors, plan.tensors().size());
  for (size_t t = 0; t < n; ++t) {
    const TensorSpec& spec = plan.tensors()[t];
    for (int side = 0; side < 2; ++side) {
      const bool dst = side == 1;
      const reshard::Layout& layout = dst ? spec.dst : spec.src;
      const size_t given = dst ? buffers[t].num_dst : buffers[t].num_src;
      if (given != layout.num_entries()) continue;  // the engine reports counts
      for (size_t e = 0; e < given; ++e) {
        const void* data =
            dst ? static_cast<const void*>(buffers[t].dst[e].data) : buffers[t].src[e].data;
        const size_t bytes = dst ? buffers[t].dst[e].bytes : buffers[t].src[e].bytes;
        if (data == nullptr && bytes == 0) continue;
        const int64_t device = layout.device(e);
        const int32_t process = plan.topology().info(device).process;
        if (process == rank) continue;
        reshard::fail(ErrorCode::kInvalidArgument,
                      element("buffers", t) + (dst ? ".dst[" : ".src[") + std::to_string(e) +
                          "]: entry of device " + std::to_string(device) + " is on process " +
                          std::to_string(process) + ", not this rank " + std::to_string(rank) +
                          ": pass {NULL, 0}");
      }
    }
  }
}

void check_shard_size(const TensorSpec& tensor, const reshard::Layout& layout, size_t entry,
                      size_t bytes) {
  check_index(entry, layout.num_entries(), "entry", "entries");
  // A destination holds the destination's dtype (a cast in flight).
  const int64_t want =
      layout.box(entry).volume() *
      reshard::dtype_size(&layout == &tensor.dst ? reshard::out_dtype(tensor) : tensor.dtype);
  if (to_int64(bytes, "bytes") != want) {
    reshard::fail(
        ErrorCode::kInvalidArgument,
        "bytes: " + std::to_string(bytes) + " given, the shard needs " + std::to_string(want));
  }
}

}  // namespace

namespace reshard::capi {

std::unique_ptr<reshard_executor> make_engine_executor(reshard_transport_t kind,
                                                       std::unique_ptr<Transport> transport,
                                                       const ExecuteOptions& options) {
  const TransportInfo info = transport->info();
  auto handle = std::make_unique<reshard_executor>();
  handle->transport = kind;
  handle->rank = info.rank;
  handle->size = info.size;
  handle->process = info.rank;
  handle->execute_options = options;
  handle->idle.push_back(std::make_unique<Engine>(std::move(transport)));
  return handle;
}

EngineLease::EngineLease(const reshard_executor& executor) : executor_(executor) {
  std::unique_lock<std::mutex> lock(executor.mutex);
  if (executor.idle.empty() && executor.make_engine) {
    lock.unlock();
    engine_ = executor.make_engine();
    return;
  }
  executor.returned.wait(lock, [&] { return !executor.idle.empty(); });
  engine_ = std::move(executor.idle.back());
  executor.idle.pop_back();
}

EngineLease::~EngineLease() {
  {
    std::lock_guard<std::mutex> lock(executor_.mutex);
    executor_.idle.push_back(std::move(engine_));
  }
  executor_.returned.notify_one();
}

int32_t threads_from_c(int32_t value, CThreads convention, const char* field) {
  switch (convention) {
    case CThreads::kExecutor:
      if (value < 0) {
        fail(ErrorCode::kInvalidArgument,
             std::string(field) + ": " + std::to_string(value) + " is negative");
      }
      return value;  // the C++ meaning already
    case CThreads::kPlanRequest:
      if (value < RESHARD_PLAN_THREADS_ALL) {
        fail(ErrorCode::kInvalidArgument,
             std::string(field) + ": " + std::to_string(value) +
                 " is invalid (0 or 1: the calling thread, N > 1: up to N threads, "
                 "RESHARD_PLAN_THREADS_ALL: one per hardware thread)");
      }
      // C's 0 is 1.0's zero-filled field: one thread; C++'s 0 is "all".
      return value == RESHARD_PLAN_THREADS_ALL ? 0 : std::max(value, 1);
  }
  fail(ErrorCode::kInternal, "threads_from_c: unknown convention");
}

}  // namespace reshard::capi

extern "C" {

reshard_error_t* reshard_executor_create(const reshard_executor_options_t* options,
                                         reshard_executor_t** out_executor) {
  return guard([&] {
    require(out_executor, "out_executor");
    reshard_executor_options_t o = RESHARD_EXECUTOR_OPTIONS_INIT;
    if (options != nullptr) read_struct(options, kExecutorOptionsV1Size, "options", &o);
    switch (o.transport) {
      case RESHARD_TRANSPORT_HOST:
      case RESHARD_TRANSPORT_CUDA_LOCAL:
        break;
      case RESHARD_TRANSPORT_MPI:
        reshard::fail(ErrorCode::kUnsupported,
                      "options->transport: RESHARD_TRANSPORT_MPI (2) executors run on a "
                      "communicator: create them with reshard_mpi_executor_create "
                      "(reshard/reshard_mpi.h)");
      case RESHARD_TRANSPORT_NCCL:
        reshard::fail(ErrorCode::kUnsupported,
                      "options->transport: RESHARD_TRANSPORT_NCCL (3) executors run on "
                      "communicators: create them with reshard_nccl_executor_create "
                      "(reshard/reshard_nccl.h)");
      default:
        reshard::capi::bad_enum("options->transport", o.transport, "a RESHARD_TRANSPORT_ constant");
    }
    // One process: nothing to agree on.
    reshard::ExecuteOptions execute;
    execute.agreement = reshard::ExecuteOptions::Agreement::kSkip;
    execute.threads = reshard::capi::threads_from_c(o.threads, reshard::capi::CThreads::kExecutor,
                                                    "options->threads");
    if (!(o.timeout_seconds > 0) || !std::isfinite(o.timeout_seconds)) {
      reshard::fail(ErrorCode::kInvalidArgument,
                    "options->timeout_seconds: " + std::to_string(o.timeout_seconds) +
                        " must be positive and finite");
    }
    execute.timeout_seconds = o.timeout_seconds;
    std::unique_ptr<reshard_executor> handle;
    if (o.transport == RESHARD_TRANSPORT_CUDA_LOCAL) {
      handle = reshard::capi::make_engine_executor(
          o.transport, reshard::make_cuda_local_transport(reshard::CudaLocalOptions{}), execute);
    } else {
      // Whole plans over the local transport, an engine per concurrent
      // call, each caching the whole-plan schedules of the plans it ran
      // (EngineOptions' default capacity): a plan executed again skips
      // building and validating its schedule, the bulk of a small plan's
      // call.
      const auto make_engine = [] {
        return std::make_unique<reshard::Engine>(reshard::make_local_transport());
      };
      handle = std::make_unique<reshard_executor>();
      handle->transport = o.transport;
      handle->process = reshard::kAllProcesses;
      handle->execute_options = execute;
      handle->make_engine = make_engine;
      handle->idle.push_back(make_engine());
    }
    *out_executor = handle.release();
  });
}

void reshard_executor_destroy(reshard_executor_t* executor) {
  // Waits for executions on other threads; an executor destroyed before is
  // left alone.
  if (executor == nullptr ||
      !reshard::capi::retire_handle(reshard::capi::HandleKind::kExecutor, executor))
    return;
  std::unique_ptr<reshard_executor>{executor}.reset();
}

reshard_error_t* reshard_executor_execute(const reshard_executor_t* executor,
                                          const reshard_plan_t* plan,
                                          const reshard_tensor_buffers_t* buffers,
                                          size_t num_tensors) {
  return guard([&] {
    require(executor, "executor");
    require(plan, "plan");
    // Both stay alive until the call returns (a destroy on another thread
    // waits); destroyed ones are refused here.
    const reshard::capi::HandleUse executor_use(reshard::capi::HandleKind::kExecutor, executor,
                                                "executor");
    const reshard::capi::HandleUse plan_use(reshard::capi::HandleKind::kPlan, plan, "plan");
    const std::vector<reshard::TensorBuffers> views = to_views(plan->plan, buffers, num_tensors);
    if (executor->process != reshard::kAllProcesses) {
      check_remote_entries_empty(plan->plan, buffers, num_tensors, executor->rank);
    }
    const reshard::capi::EngineLease engine(*executor);
    // The engine names a buffer "tensors[t].dst[e]"; the C argument is
    // `buffers`.
    renamed({{"tensors[", "buffers["}}, [&] {
      engine->execute(plan->plan, executor->process, views, executor->execute_options);
    });
  });
}

reshard_error_t* reshard_executor_info(const reshard_executor_t* executor,
                                       reshard_executor_info_t* out_info) {
  return guard([&] {
    require(executor, "executor");
    check_out_struct(out_info, kExecutorInfoV1Size, "out_info");
    reshard_executor_info_t c = RESHARD_EXECUTOR_INFO_INIT;
    c.transport = executor->transport;
    c.rank = executor->rank;
    c.size = executor->size;
    write_struct(c, out_info);
  });
}

reshard_error_t* reshard_oracle_fill_source(const reshard_plan_t* plan, size_t tensor, size_t entry,
                                            void* data, size_t bytes) {
  return guard([&] {
    require(plan, "plan");
    const TensorSpec& t = plan_tensor(plan->plan, tensor);
    check_shard_size(t, t.src, entry, bytes);
    if (bytes > 0) require(data, "data");
    reshard::fill_source_shard(t, static_cast<uint32_t>(tensor), entry,
                               std::span<std::byte>(static_cast<std::byte*>(data), bytes));
  });
}

reshard_error_t* reshard_oracle_check_destination(const reshard_plan_t* plan, size_t tensor,
                                                  size_t entry, const void* data, size_t bytes,
                                                  int64_t* out_mismatches) {
  return guard([&] {
    require(plan, "plan");
    require(out_mismatches, "out_mismatches");
    const TensorSpec& t = plan_tensor(plan->plan, tensor);
    if (t.dst.partial()) {
      reshard::fail(ErrorCode::kInvalidArgument,
                    "tensor: " + std::to_string(tensor) +
                        " has a partial destination (check it with reshard_executor_verify)");
    }
    check_shard_size(t, t.dst, entry, bytes);
    if (bytes > 0) require(data, "data");
    reshard::OracleReport report;
    reshard::check_plan_destination_shard(
        plan->plan.tensors(), static_cast<uint32_t>(tensor), entry,
        std::span<const std::byte>(static_cast<const std::byte*>(data), bytes), report, 0);
    *out_mismatches = report.mismatches;
  });
}

reshard_error_t* reshard_executor_verify(const reshard_executor_t* executor,
                                         const reshard_plan_t* plan,
                                         reshard_verify_report_t* out_report) {
  return guard([&] {
    require(executor, "executor");
    require(plan, "plan");
    const reshard::capi::HandleUse executor_use(reshard::capi::HandleKind::kExecutor, executor,
                                                "executor");
    const reshard::capi::HandleUse plan_use(reshard::capi::HandleKind::kPlan, plan, "plan");
    check_out_struct(out_report, kVerifyReportV1Size, "out_report");
    if (executor->transport == RESHARD_TRANSPORT_NCCL ||
        executor->transport == RESHARD_TRANSPORT_CUDA_LOCAL) {
      // Their buffers are GPU memory, which the oracle fills and checks on
      // the host, and transports move nothing between host and GPU.
      reshard::fail(ErrorCode::kInvalidArgument,
                    std::string("executor: reshard_executor_verify needs host memory (a HOST or "
                                "MPI executor); this one is ") +
                        transport_name(executor->transport) +
                        " (fill and check its local entries with reshard_oracle_fill_source and "
                        "reshard_oracle_check_destination, copying them to and from the GPUs)");
    }
    const reshard::capi::EngineLease engine(*executor);
    const reshard::OracleReport report = renamed({{"tensors[", "buffers["}}, [&] {
      return reshard::verify_plan(*engine, plan->plan, executor->process, executor->execute_options,
                                  {0, 0});
    });
    reshard_verify_report_t c = RESHARD_VERIFY_REPORT_INIT;
    c.tensors = report.tensors;
    c.elements = report.elements;
    c.bytes = report.bytes;
    c.mismatches = report.mismatches;
    write_struct(c, out_report);
  });
}

}  // extern "C"
