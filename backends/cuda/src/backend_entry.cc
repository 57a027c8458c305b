// The only export of libreshard_cuda.so.1: the entry table of
// reshard/backend.h. No C++ exception leaves it: failures become
// an ErrorCode value and a message.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cuda_util.h"
#include "reshard/backend.h"
#include "reshard/cuda.h"
#include "reshard/error.h"
#include "transports.h"

namespace reshard::cuda_backend {
namespace {

void write_message(const std::string& text, char* message, size_t size) {
  if (message == nullptr || size == 0) return;
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(message, text.data(), n);
  message[n] = '\0';
}

std::string version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

const char* versions() {
  static const std::string text = [] {
    int runtime = 0;
    int driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    std::string s = "CUDA runtime " + version_text(runtime) + ", driver " +
                    (driver == 0 ? std::string("none") : version_text(driver));
    const std::string nccl = nccl_version();
    s += nccl.empty() ? ", no NCCL" : ", " + nccl;
    return s;
  }();
  return text.c_str();
}

// Why no GPU can be used, or "" when one can.
std::string gpu_problem() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA driver or device: cudaGetDeviceCount failed with ") +
           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + "); " + versions();
  }
  if (count == 0) return "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
  return "";
}

int32_t available(int32_t kind, char* message, size_t size) {
  std::string problem = gpu_problem();
  if (problem.empty() && kind == RESHARD_BACKEND_CUDA_NCCL && !nccl_built()) {
    problem =
        "the CUDA backend was built without NCCL (nccl.h and libnccl not found at build time)";
  }
  if (problem.empty() && kind != RESHARD_BACKEND_CUDA_LOCAL && kind != RESHARD_BACKEND_CUDA_NCCL) {
    problem = "unknown transport kind " + std::to_string(kind);
  }
  if (problem.empty()) return 1;
  write_message((kind == RESHARD_BACKEND_CUDA_NCCL ? "nccl transport unavailable: "
                                                   : "cuda transport unavailable: ") +
                    problem,
                message, size);
  return 0;
}

Transport* create(int32_t kind, const void* options, uint32_t options_version, int32_t* code,
                  char* message, size_t size) {
  try {
    if (options == nullptr) fail(ErrorCode::kInvalidArgument, "options: null");
    if (options_version != kCudaOptionsVersion) {
      fail(ErrorCode::kUnsupported, "CUDA backend: options version " +
                                        std::to_string(options_version) + ", backend built for " +
                                        std::to_string(kCudaOptionsVersion));
    }
    if (kind == RESHARD_BACKEND_CUDA_LOCAL || kind == RESHARD_BACKEND_CUDA_NCCL) {
      const std::string problem = gpu_problem();
      if (!problem.empty()) {
        fail(ErrorCode::kUnsupported,
             std::string(kind == RESHARD_BACKEND_CUDA_NCCL ? "nccl" : "cuda") +
                 " transport unavailable: " + problem);
      }
    }
    switch (kind) {
      case RESHARD_BACKEND_CUDA_LOCAL:
        return make_local(*static_cast<const CudaLocalOptions*>(options)).release();
      case RESHARD_BACKEND_CUDA_NCCL:
        return make_nccl(*static_cast<const NcclTransportOptions*>(options)).release();
      default:
        fail(ErrorCode::kInvalidArgument,
             "CUDA backend: unknown transport kind " + std::to_string(kind));
    }
  } catch (const Error& e) {
    *code = static_cast<int32_t>(e.code());
    write_message(e.what(), message, size);
  } catch (const std::bad_alloc&) {
    *code = static_cast<int32_t>(ErrorCode::kOutOfMemory);
    write_message("CUDA backend: out of host memory", message, size);
  } catch (const std::exception& e) {
    *code = static_cast<int32_t>(ErrorCode::kInternal);
    write_message(std::string("CUDA backend: ") + e.what(), message, size);
  }
  return nullptr;
}

int32_t unique_id(char* id, char* message, size_t size) {
  try {
    const NcclUniqueId u = nccl_unique_id();
    std::memcpy(id, u.data(), u.size());
    return 0;
  } catch (const Error& e) {
    write_message(e.what(), message, size);
    return static_cast<int32_t>(e.code());
  } catch (const std::exception& e) {
    write_message(std::string("CUDA backend: ") + e.what(), message, size);
    return static_cast<int32_t>(ErrorCode::kInternal);
  }
}

}  // namespace

#if !defined(RESHARD_HAVE_NCCL)
std::unique_ptr<Transport> make_nccl(const NcclTransportOptions&) {
  fail(ErrorCode::kUnsupported,
       "nccl transport unavailable: the CUDA backend was built without NCCL (nccl.h and libnccl "
       "not found at build time)");
}
NcclUniqueId nccl_unique_id() {
  fail(ErrorCode::kUnsupported, "NCCL unavailable: the CUDA backend was built without NCCL");
}
std::string nccl_version() { return ""; }
bool nccl_built() { return false; }
#endif

}  // namespace reshard::cuda_backend

RESHARD_BACKEND_ENTRY const reshard_backend_cuda_v1_t* reshard_backend_cuda_v1(void) {
  static const reshard_backend_cuda_v1_t table = {
      sizeof(reshard_backend_cuda_v1_t), reshard::kTransportInterfaceVersion,
      reshard::kCudaOptionsVersion,      0,
      &reshard::cuda_backend::versions,  &reshard::cuda_backend::available,
      &reshard::cuda_backend::create,    &reshard::cuda_backend::unique_id,
  };
  return &table;
}
