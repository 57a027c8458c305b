// Factories of the two CUDA transports (local_transport.cc,
// nccl_transport.cc), called by the backend entry (backend_entry.cc).
#pragma once

#include <memory>
#include <string>

#include "reshard/cuda.h"
#include "reshard/transport.h"

namespace reshard::cuda_backend {

std::unique_ptr<Transport> make_local(const CudaLocalOptions& options);

// Built without NCCL: throws kUnsupported.
std::unique_ptr<Transport> make_nccl(const NcclTransportOptions& options);
NcclUniqueId nccl_unique_id();
// "NCCL 2.28.9", or "" without NCCL.
std::string nccl_version();
bool nccl_built();

}  // namespace reshard::cuda_backend
