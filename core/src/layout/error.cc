#include "reshard/error.h"

namespace reshard {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kOutOfRange:
      return "out_of_range";
    case ErrorCode::kOverflow:
      return "overflow";
    case ErrorCode::kMismatch:
      return "mismatch";
    case ErrorCode::kParse:
      return "parse_error";
    case ErrorCode::kCorrupt:
      return "corrupt";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kTransport:
      return "transport";
    case ErrorCode::kOutOfMemory:
      return "out_of_memory";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
  }
  return "unknown";
}

void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

void fail(ErrorCode code, const std::string& field, const std::string& detail) {
  throw Error(code, field, detail);
}

}  // namespace reshard
