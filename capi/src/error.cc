// Error objects and the helpers shared by every C entry point.
#include "reshard/error.h"

#include <string>

#include "internal.h"

namespace reshard::capi {
namespace {

// Returned when an error object cannot be allocated. Its message fits the
// small-string buffer, so constructing it at load time allocates nothing.
reshard_error g_out_of_memory{RESHARD_ERROR_OUT_OF_MEMORY, "out of memory"};

}  // namespace

reshard_error_t* out_of_memory_error() noexcept { return &g_out_of_memory; }

bool is_static_error(const reshard_error_t* error) noexcept { return error == &g_out_of_memory; }

reshard_error_t* make_error(ErrorCode code, const char* prefix, const char* message) noexcept {
  try {
    auto error = std::make_unique<reshard_error>();
    error->code = static_cast<reshard_error_code_t>(code);
    error->message = std::string(prefix) + message;
    return error.release();
  } catch (...) {
    return out_of_memory_error();
  }
}

[[noreturn]] void bad_enum(const char* name, int32_t value, const char* expected) {
  fail(ErrorCode::kInvalidArgument, std::string(name) + ": invalid value " + std::to_string(value) +
                                        " (expected " + expected + ")");
}

void check_index(size_t index, size_t count, const char* name, const char* what) {
  if (index >= count) {
    fail(ErrorCode::kOutOfRange, std::string(name) + ": " + std::to_string(index) +
                                     " >= " + std::to_string(count) + " " + what);
  }
}

void rethrow_renamed(const Error& e, std::initializer_list<Rename> renames) {
  const std::string_view message = e.what();
  for (const Rename& r : renames) {
    if (message.substr(0, r.from.size()) == r.from) {
      fail(e.code(), std::string(r.to) + std::string(message.substr(r.from.size())));
    }
  }
  throw e;
}

int64_t to_int64(size_t value, const std::string& name) {
  if (value > static_cast<size_t>(INT64_MAX)) {
    fail(ErrorCode::kInvalidArgument,
         name + ": " + std::to_string(value) + " exceeds INT64_MAX (no shard is that large)");
  }
  return static_cast<int64_t>(value);
}

void write_box(const Box& box, int64_t* out_lo, int64_t* out_hi) noexcept {
  for (int d = 0; d < box.rank; ++d) {
    if (out_lo != nullptr) out_lo[d] = box.lo[d];
    if (out_hi != nullptr) out_hi[d] = box.hi[d];
  }
}

const TensorSpec& plan_tensor(const Plan& plan, size_t tensor) {
  check_index(tensor, plan.tensors().size(), "tensor", "tensors");
  return plan.tensors()[tensor];
}

const Layout& tensor_side(const TensorSpec& tensor, reshard_side_t side) {
  switch (side) {
    case RESHARD_SIDE_SRC:
      return tensor.src;
    case RESHARD_SIDE_DST:
      return tensor.dst;
    default:
      bad_enum("side", side, "RESHARD_SIDE_SRC or RESHARD_SIDE_DST");
  }
}

}  // namespace reshard::capi

extern "C" {

reshard_error_code_t reshard_error_code(const reshard_error_t* error) {
  return error == nullptr ? RESHARD_OK : error->code;
}

const char* reshard_error_message(const reshard_error_t* error) {
  return error == nullptr ? "" : error->message.c_str();
}

void reshard_error_destroy(reshard_error_t* error) {
  if (reshard::capi::is_static_error(error)) return;
  std::unique_ptr<reshard_error>{error}.reset();
}

const char* reshard_error_code_name(reshard_error_code_t code) {
  // Every int32 is a valid value of ErrorCode (fixed underlying type); the
  // core maps values it does not know to "unknown".
  return reshard::error_code_name(static_cast<reshard::ErrorCode>(code));
}

}  // extern "C"
