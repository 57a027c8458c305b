// Shared machinery of the C ABI: the handle structs behind the opaque C
// types, the exception boundary, argument checks, and the struct_size rules
// for options and result structs. Every exported function is a thin
// translation over the C++ API: it converts arguments, calls the core and
// turns exceptions into error objects, and adds no behaviour of its own.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "live_handles.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/layout.h"
#include "reshard/plan.h"
#include "reshard/reshard.h"
#include "reshard/spec.h"

// Handle structs. They live in the global namespace because the C header
// declares `struct reshard_mesh` etc. there.
struct reshard_error {
  reshard_error_code_t code = RESHARD_OK;
  std::string message;
};

struct reshard_mesh {
  std::shared_ptr<const reshard::Mesh> mesh;
};

struct reshard_layout {
  reshard::Layout layout;
};

struct reshard_topology {
  reshard::Topology topology;
};

struct reshard_plan_input {
  reshard::PlanInput input;
  // The flat layouts of an input parsed from a spec (ABI 1.10).
  std::vector<reshard::SpecFlat> flats;
};

struct reshard_plan {
  // Live from construction to destruction (live_handles.h).
  reshard_plan() { reshard::capi::register_handle(reshard::capi::HandleKind::kPlan, this); }
  ~reshard_plan() { reshard::capi::forget_handle(reshard::capi::HandleKind::kPlan, this); }
  reshard_plan(const reshard_plan&) = delete;
  reshard_plan& operator=(const reshard_plan&) = delete;
  reshard::Plan plan;
};

struct reshard_buffer {
  std::vector<uint8_t> bytes;
};

// An executor: engines over one transport. Every kind is the same thing;
// they differ in the transport and in how many engines may exist. Engines
// are lent one per call (Engine::execute is one call at a time):
// transports bound to a communicator or to GPU streams have exactly one, so
// calls wait for each other; HOST makes another engine over another local
// transport when all are busy (`make_engine`), so that calls on distinct
// destination buffers run concurrently, as the header promises.
struct reshard_executor {
  // Live from construction to destruction (live_handles.h).
  reshard_executor() { reshard::capi::register_handle(reshard::capi::HandleKind::kExecutor, this); }
  ~reshard_executor() { reshard::capi::forget_handle(reshard::capi::HandleKind::kExecutor, this); }
  reshard_executor(const reshard_executor&) = delete;
  reshard_executor& operator=(const reshard_executor&) = delete;
  reshard_transport_t transport = RESHARD_TRANSPORT_HOST;
  int32_t rank = 0;  // this process's rank in the group
  int32_t size = 1;
  // The plan process each call executes: `rank`, or reshard::kAllProcesses
  // (HOST: every part of a plan, in this process).
  int32_t process = 0;
  reshard::ExecuteOptions execute_options;                        // of every call
  std::function<std::unique_ptr<reshard::Engine>()> make_engine;  // null: one engine only
  mutable std::mutex mutex;
  mutable std::condition_variable returned;
  mutable std::vector<std::unique_ptr<reshard::Engine>> idle;
};

namespace reshard::capi {

// Runs `body` and translates any exception into an error object; NULL when
// `body` returns normally. Nothing escapes: reshard::Error keeps its code and
// message, std::bad_alloc becomes RESHARD_ERROR_OUT_OF_MEMORY, anything else
// RESHARD_ERROR_INTERNAL.
template <typename F>
reshard_error_t* guard(F&& body) noexcept;

// An error object; when even that cannot be allocated, a static
// out-of-memory error that reshard_error_destroy recognises and never frees.
// `prefix` (may be "") is prepended to `message`; both are C strings so that
// nothing is allocated before the error object itself.
reshard_error_t* make_error(ErrorCode code, const char* prefix, const char* message) noexcept;
reshard_error_t* out_of_memory_error() noexcept;
bool is_static_error(const reshard_error_t* error) noexcept;

// Throws kInvalidArgument "<name>: must not be NULL" when `p` is NULL.
template <typename T>
void require(const T* p, const char* name) {
  if (p == nullptr) fail(ErrorCode::kInvalidArgument, std::string(name) + ": must not be NULL");
}

// Throws kInvalidArgument "<name>: invalid value <v>" ... for enum inputs.
[[noreturn]] void bad_enum(const char* name, int32_t value, const char* expected);

// Throws kOutOfRange "<name>: <index> >= <count> <what>" unless index < count.
void check_index(size_t index, size_t count, const char* name, const char* what);

// Copies a caller's options struct into `*into` (which holds the defaults)
// following the struct_size rules of reshard.h: at least `min_size` bytes
// (the size of the struct's first published version), at most sizeof(T)
// copied, the rest keeps the defaults. `name` names the argument.
template <typename T>
void read_struct(const T* in, size_t min_size, const char* name, T* into) {
  require(in, name);
  if (in->struct_size < min_size) {
    fail(ErrorCode::kInvalidArgument,
         std::string(name) + "->struct_size: " + std::to_string(in->struct_size) +
             " is smaller than the smallest supported size " + std::to_string(min_size) +
             " (initialise the struct with its _INIT macro)");
  }
  std::memcpy(static_cast<void*>(into), static_cast<const void*>(in),
              in->struct_size < sizeof(T) ? in->struct_size : sizeof(T));
  into->struct_size = sizeof(T);
}

// Checks a caller's result struct (its struct_size) before the library
// fills it; `name` names the argument.
template <typename T>
void check_out_struct(const T* out, size_t min_size, const char* name) {
  require(out, name);
  if (out->struct_size < min_size) {
    fail(ErrorCode::kInvalidArgument,
         std::string(name) + "->struct_size: " + std::to_string(out->struct_size) +
             " is smaller than the smallest supported size " + std::to_string(min_size) +
             " (initialise the struct with its _INIT macro)");
  }
}

// Writes `value` (a complete struct made by the library) into the caller's
// struct: min(out->struct_size, sizeof(T)) bytes, keeping out->struct_size.
template <typename T>
void write_struct(const T& value, T* out) noexcept {
  const size_t caller_size = out->struct_size;
  const size_t n = caller_size < sizeof(T) ? caller_size : sizeof(T);
  std::memcpy(static_cast<void*>(out), static_cast<const void*>(&value), n);
  out->struct_size = caller_size;
}

// Wraps an engine over `transport` into a new executor handle (rank and
// size from the transport; every call executes this rank's part) with
// `options` for every execute.
std::unique_ptr<reshard_executor> make_engine_executor(reshard_transport_t kind,
                                                       std::unique_ptr<Transport> transport,
                                                       const ExecuteOptions& options);

// An engine of `executor`, lent for one call: an idle one, a new one where
// the kind allows (HOST), or the only one once the call using it returns.
class EngineLease {
 public:
  explicit EngineLease(const reshard_executor& executor);
  EngineLease(const EngineLease&) = delete;
  EngineLease& operator=(const EngineLease&) = delete;
  ~EngineLease();
  Engine& operator*() const { return *engine_; }
  Engine* operator->() const { return engine_.get(); }

 private:
  const reshard_executor& executor_;
  std::unique_ptr<Engine> engine_;
};

// The C ABI's `threads` fields in the C++ meaning (ExecuteOptions::threads:
// 0 every hardware thread, N up to N), the one place they are converted.
// Each C field keeps its documented convention: kExecutor
// (reshard_executor_options_t: 0 every hardware thread, N > 0 up to N;
// negative is INVALID_ARGUMENT) and kPlanRequest (reshard_plan_request_t,
// whose 1.0-sized and zeroed structs mean one thread: 0 or 1 the calling
// thread, N > 1 up to N, RESHARD_PLAN_THREADS_ALL every hardware thread;
// below -1 INVALID_ARGUMENT). `field` names the argument in the message.
enum class CThreads { kExecutor, kPlanRequest };
int32_t threads_from_c(int32_t value, CThreads convention, const char* field);

// Size of a struct's first published version: the end of its last field.
#define RESHARD_CAPI_V1_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(type::last_field))

// The core names fields the way its C++ callers see them ("layout.spec[1]",
// "tensors[0].dst[2]"); the C entry points rename a leading prefix to the C
// argument ("dims[1]", "buffers[0].dst[2]"). The first matching rename wins.
struct Rename {
  std::string_view from;
  std::string_view to;
};
[[noreturn]] void rethrow_renamed(const Error& e, std::initializer_list<Rename> renames);

template <typename F>
decltype(auto) renamed(std::initializer_list<Rename> renames, F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    rethrow_renamed(e, renames);
  }
}

// Converts a caller's size_t to int64: kInvalidArgument naming the argument above
// INT64_MAX (a buffer size no shard can have, reshard.h promises INVALID_ARGUMENT).
int64_t to_int64(size_t value, const std::string& name);

// A vector of `n` values from a C array that must not be NULL when n > 0.
template <typename T>
std::vector<T> copy_array(const T* data, size_t n, const char* name) {
  if (n == 0) return {};
  require(data, name);
  return std::vector<T>(data, data + n);
}

// Writes the first `box.rank` values of lo / hi to the outputs when given.
void write_box(const Box& box, int64_t* out_lo, int64_t* out_hi) noexcept;

// The source or destination layout of a tensor of `plan`, with checks.
const TensorSpec& plan_tensor(const Plan& plan, size_t tensor);
const Layout& tensor_side(const TensorSpec& tensor, reshard_side_t side);

// ------------------------------------------------------------ guard body

template <typename F>
reshard_error_t* guard(F&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Error& e) {
    return make_error(e.code(), "", e.what());
  } catch (const std::bad_alloc&) {
    return out_of_memory_error();
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInternal, "internal error: ", e.what());
  } catch (...) {
    return make_error(ErrorCode::kInternal, "internal error: ", "unknown exception");
  }
}

}  // namespace reshard::capi
