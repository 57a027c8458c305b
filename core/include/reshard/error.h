// reshard — errors. Every failure inside the C++ core is a reshard::Error with
// a stable code and a message that names the offending field.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

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
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Throws Error(code, message). Kept out of line so hot paths stay small.
[[noreturn]] void fail(ErrorCode code, const std::string& message);

}  // namespace reshard
