// The factories of the run-time loaded transports (reshard/mpi.h,
// reshard/cuda.h): each loads its backend through load_backend
// (backend_loader.cc, the one loader) and forwards to the backend's entry
// table (reshard/backend.h). Compiled into reshard_core, which links neither
// MPI nor CUDA.
#include <memory>
#include <string>

#include "reshard/backend.h"
#include "reshard/cuda.h"
#include "reshard/error.h"
#include "reshard/mpi.h"

namespace reshard {
namespace {

// The backend's table, or kUnsupported saying what is missing.
template <class Table>
const Table& table_or_throw(BackendKind kind, const std::string& library) {
  std::string why;
  const void* table = load_backend(kind, library, &why);
  if (table == nullptr) fail(ErrorCode::kUnsupported, why);
  return *static_cast<const Table*>(table);
}

// Takes ownership of what a backend's create returned; on null throws the
// backend's error code and message.
std::unique_ptr<Transport> adopt(Transport* raw, int32_t code, const char* message,
                                 const char* fallback) {
  std::unique_ptr<Transport> transport(raw);
  if (!transport) {
    fail(static_cast<ErrorCode>(code),
         message[0] != '\0' ? std::string(message) : std::string(fallback));
  }
  return transport;
}

// ----------------------------------------------------------------- CUDA

std::unique_ptr<Transport> create_cuda(int32_t kind, const void* options,
                                       const std::string& library) {
  const auto& table = table_or_throw<reshard_backend_cuda_v1_t>(BackendKind::kCuda, library);
  int32_t code = static_cast<int32_t>(ErrorCode::kInternal);
  char message[2048] = {};
  Transport* raw = table.create(kind, options, kCudaOptionsVersion, &code, message, sizeof message);
  return adopt(raw, code, message, "CUDA transport: creation failed");
}

bool cuda_available(int32_t kind, std::string* why) {
  std::string reason;
  const reshard_backend_cuda_v1_t* table = load_cuda_backend("", &reason);
  if (table != nullptr) {
    char message[1024] = {};
    if (table->available(kind, message, sizeof message) != 0) return true;
    reason = message;
  }
  if (why != nullptr) *why = reason;
  return false;
}

}  // namespace

// ------------------------------------------------------------------ MPI

std::unique_ptr<Transport> make_mpi_transport(const MpiTransportOptions& options) {
  const auto& table = table_or_throw<reshard_backend_mpi_v1_t>(BackendKind::kMpi, options.library);
  int32_t code = static_cast<int32_t>(ErrorCode::kInternal);
  char message[1024] = {};
  Transport* raw = table.create(&options, &code, message, sizeof message);
  return adopt(raw, code, message, "MPI transport: creation failed");
}

bool mpi_transport_available(std::string* why) {
  std::string reason;
  const bool ok = load_mpi_backend("", &reason) != nullptr;
  if (!ok && why != nullptr) *why = reason;
  return ok;
}

// ----------------------------------------------------------------- CUDA

std::unique_ptr<Transport> make_cuda_local_transport(const CudaLocalOptions& options) {
  return create_cuda(RESHARD_BACKEND_CUDA_LOCAL, &options, options.library);
}

std::unique_ptr<Transport> make_nccl_transport(const NcclTransportOptions& options) {
  return create_cuda(RESHARD_BACKEND_CUDA_NCCL, &options, options.library);
}

NcclUniqueId make_nccl_unique_id(const std::string& library) {
  const auto& table = table_or_throw<reshard_backend_cuda_v1_t>(BackendKind::kCuda, library);
  NcclUniqueId id{};
  char message[1024] = {};
  const int32_t code = table.nccl_unique_id(id.data(), message, sizeof message);
  if (code != 0) fail(static_cast<ErrorCode>(code), message);
  return id;
}

bool cuda_transport_available(std::string* why) {
  return cuda_available(RESHARD_BACKEND_CUDA_LOCAL, why);
}

bool nccl_transport_available(std::string* why) {
  return cuda_available(RESHARD_BACKEND_CUDA_NCCL, why);
}

std::string cuda_backend_versions(const std::string& library) {
  return table_or_throw<reshard_backend_cuda_v1_t>(BackendKind::kCuda, library).versions();
}

}  // namespace reshard
