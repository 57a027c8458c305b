// reshard — errors. Every failure inside the C++ core is a reshard::Error with
// a stable code and a message that names the offending field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace reshard {

// Stable numeric values: the C ABI exposes them unchanged (reshard_code_t).
enum class ErrorCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // a value is malformed (negative size, unknown axis, ...)
  kOutOfRange = 2,       // an index or size is outside what is allowed
  kOverflow = 3,         // an element or byte count overflows 64 bits
  kMismatch = 4,         // two inputs disagree (dtype, shape, fingerprint)
  kParse = 5,            // a spec file or text is not valid JSON / schema
  kCorrupt = 6,          // plan bytes fail verification
  kUnsupported = 7,      // valid request this build or transport cannot do
  kTimeout = 8,          // a wait ran past its deadline
  kTransport = 9,        // the transport (MPI, NCCL, CUDA) reported an error
  kOutOfMemory = 10,     // allocation failed
  kInternal = 11,        // a bug in reshard
  // A request whose estimated cost (memory, bytes) is above a limit, refused
  // before the work starts; the message gives the estimate and the limit.
  kResourceExhausted = 12,
};

const char* error_code_name(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  // An error about one field: the message is `field + ": " + detail`, and
  // field() gives the path ("options.alpha_seconds", "tensors[2].src.spec[1]")
  // so a caller can map it (to a command-line flag, say) without parsing the
  // message.
  Error(ErrorCode code, const std::string& field, const std::string& detail)
      : std::runtime_error(field + ": " + detail), code_(code), field_size_(field.size()) {}
  // The same message and field under another code.
  Error(ErrorCode code, const Error& other)
      : std::runtime_error(other), code_(code), field_size_(other.field_size_) {}
  ErrorCode code() const noexcept { return code_; }
  // The path of the offending field; empty when the error names none.
  std::string_view field() const noexcept { return std::string_view(what(), field_size_); }
  // The message after "field: " (the whole message when field() is empty).
  std::string_view detail() const noexcept {
    return field_size_ == 0 ? std::string_view(what()) : std::string_view(what() + field_size_ + 2);
  }

 private:
  ErrorCode code_;
  size_t field_size_ = 0;
};

// Throws Error(code, message). Kept out of line so hot paths stay small.
[[noreturn]] void fail(ErrorCode code, const std::string& message);
// Throws Error(code, field, detail): message `field: detail`, field() set.
[[noreturn]] void fail(ErrorCode code, const std::string& field, const std::string& detail);

}  // namespace reshard
