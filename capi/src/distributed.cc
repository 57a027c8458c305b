// Executors over MPI and NCCL (reshard_mpi.h, reshard_nccl.h) and the
// transport availability query: C options checked and named as the C
// caller wrote them, translated into the C++ transport options, and an
// engine over the transport (make_engine_executor).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "internal.h"
#include "reshard/backend.h"  // the transports of the run-time loaded backends
#include "reshard/engine.h"
#include "reshard/reshard_mpi.h"
#include "reshard/reshard_nccl.h"

using reshard::ErrorCode;
using reshard::fail;
using reshard::capi::guard;
using reshard::capi::read_struct;
using reshard::capi::require;

namespace {

constexpr size_t kMpiOptionsV1Size = RESHARD_CAPI_V1_SIZE(reshard_mpi_executor_options_t, library);
constexpr size_t kNcclOptionsV1Size =
    RESHARD_CAPI_V1_SIZE(reshard_nccl_executor_options_t, library);
static_assert(kMpiOptionsV1Size == sizeof(reshard_mpi_executor_options_t));
static_assert(kNcclOptionsV1Size == sizeof(reshard_nccl_executor_options_t));
// Array elements cannot grow (reshard_nccl.h): frozen for ABI 1.
static_assert(sizeof(reshard_nccl_device_t) == 8 + 2 * sizeof(void*));
static_assert(sizeof(reshard_nccl_unique_id_t) == sizeof(reshard::NcclUniqueId));

// The execute settings both options structs share, checked and translated.
reshard::ExecuteOptions execute_options(double timeout_seconds, int32_t max_batches_in_flight,
                                        reshard_agreement_t agreement, reshard_packing_t packing,
                                        int32_t overlap) {
  if (!(timeout_seconds > 0) || !std::isfinite(timeout_seconds)) {
    fail(ErrorCode::kInvalidArgument,
         "options->timeout_seconds: " + std::to_string(timeout_seconds) +
             " must be positive and finite");
  }
  if (max_batches_in_flight < 1) {
    fail(ErrorCode::kInvalidArgument,
         "options->max_batches_in_flight: " + std::to_string(max_batches_in_flight) +
             " must be at least 1");
  }
  reshard::ExecuteOptions o;
  o.timeout_seconds = timeout_seconds;
  o.max_batches_in_flight = max_batches_in_flight;
  switch (agreement) {
    case RESHARD_AGREEMENT_FIRST_USE:
      o.agreement = reshard::ExecuteOptions::Agreement::kFirstUse;
      break;
    case RESHARD_AGREEMENT_EVERY_CALL:
      o.agreement = reshard::ExecuteOptions::Agreement::kEveryCall;
      break;
    case RESHARD_AGREEMENT_SKIP:
      o.agreement = reshard::ExecuteOptions::Agreement::kSkip;
      break;
    default:
      reshard::capi::bad_enum("options->agreement", agreement, "a RESHARD_AGREEMENT_ constant");
  }
  switch (packing) {
    case RESHARD_PACKING_AUTO:
      o.packing = reshard::ExecuteOptions::Packing::kAuto;
      break;
    case RESHARD_PACKING_STAGING:
      o.packing = reshard::ExecuteOptions::Packing::kStaging;
      break;
    case RESHARD_PACKING_GATHER:
      o.packing = reshard::ExecuteOptions::Packing::kGather;
      break;
    default:
      reshard::capi::bad_enum("options->packing", packing, "a RESHARD_PACKING_ constant");
  }
  o.overlap = overlap != 0;
  return o;
}

std::string device_field(size_t i, const char* member) {
  return "options->devices[" + std::to_string(i) + "]." + member;
}

void write_reason(const std::string& reason, char* why, size_t why_size) noexcept {
  if (why == nullptr || why_size == 0) return;
  const size_t n = std::min(reason.size(), why_size - 1);
  std::memcpy(why, reason.data(), n);
  why[n] = '\0';
}

}  // namespace

extern "C" {

reshard_error_t* reshard_transport_available(reshard_transport_t transport, int32_t* out_available,
                                             char* why, size_t why_size) {
  return guard([&] {
    require(out_available, "out_available");
    std::string reason;
    bool ok = false;
    switch (transport) {
      case RESHARD_TRANSPORT_HOST:
        ok = true;
        break;
      case RESHARD_TRANSPORT_MPI:
        ok = reshard::mpi_transport_available(&reason);
        break;
      case RESHARD_TRANSPORT_NCCL:
        ok = reshard::nccl_transport_available(&reason);
        break;
      case RESHARD_TRANSPORT_CUDA_LOCAL:
        ok = reshard::cuda_transport_available(&reason);
        break;
      default:
        reshard::capi::bad_enum("transport", transport, "a RESHARD_TRANSPORT_ constant");
    }
    if (ok) reason.clear();
    write_reason(reason, why, why_size);
    *out_available = ok ? 1 : 0;
  });
}

reshard_error_t* reshard_mpi_executor_create(const reshard_mpi_executor_options_t* options,
                                             reshard_executor_t** out_executor) {
  return guard([&] {
    require(out_executor, "out_executor");
    reshard_mpi_executor_options_t o = RESHARD_MPI_EXECUTOR_OPTIONS_INIT;
    if (options != nullptr) read_struct(options, kMpiOptionsV1Size, "options", &o);
    if (o.comm_kind != RESHARD_MPI_COMM_WORLD && o.comm_kind != RESHARD_MPI_COMM_FORTRAN) {
      reshard::capi::bad_enum("options->comm_kind", o.comm_kind,
                              "RESHARD_MPI_COMM_WORLD or RESHARD_MPI_COMM_FORTRAN");
    }
    const reshard::ExecuteOptions execute = execute_options(
        o.timeout_seconds, o.max_batches_in_flight, o.agreement, o.packing, o.overlap);
    reshard::MpiTransportOptions mpi;
    mpi.initialize = o.initialize != 0;
    mpi.timeout_seconds = o.timeout_seconds;
    if (o.library != nullptr) mpi.library = o.library;
    // Without the backend nothing else matters: say what to install first.
    std::string why;
    if (mpi.library.empty() && !reshard::mpi_transport_available(&why)) {
      fail(ErrorCode::kUnsupported, why);
    }
    if (o.comm_kind == RESHARD_MPI_COMM_FORTRAN) {
      mpi.fortran_comm = o.comm;  // converted by the backend, in its MPI
      mpi.initialize = false;
    }
    std::unique_ptr<reshard::Transport> transport;
    try {
      transport = reshard::make_mpi_transport(mpi);
    } catch (const reshard::Error& e) {
      // The handle's problems (no live communicator, MPI not initialised or
      // finalized) name the field it came from.
      const std::string what = e.what();
      const std::string prefix = "MPI transport: ";
      if (o.comm_kind == RESHARD_MPI_COMM_FORTRAN && e.code() == ErrorCode::kInvalidArgument &&
          what.starts_with(prefix)) {
        std::string detail = what.substr(prefix.size());
        if (detail.find("not initialized") != std::string::npos) {
          detail =
              "MPI is not initialised in the MPI library libreshard_mpi.so.1 uses (call MPI_Init "
              "first; if the caller's MPI is initialised, it is another MPI library than the "
              "backend's, Open MPI on Debian, and one process cannot hold two)";
        }
        fail(ErrorCode::kInvalidArgument, "options->comm: " + detail);
      }
      throw;
    }
    *out_executor =
        reshard::capi::make_engine_executor(RESHARD_TRANSPORT_MPI, std::move(transport), execute)
            .release();
  });
}

reshard_error_t* reshard_nccl_unique_id(const char* library, reshard_nccl_unique_id_t* out_id) {
  return guard([&] {
    require(out_id, "out_id");
    const reshard::NcclUniqueId id =
        reshard::make_nccl_unique_id(library != nullptr ? library : std::string());
    std::memcpy(out_id->internal, id.data(), id.size());
  });
}

reshard_error_t* reshard_nccl_executor_create(const reshard_nccl_executor_options_t* options,
                                              reshard_executor_t** out_executor) {
  return guard([&] {
    require(out_executor, "out_executor");
    reshard_nccl_executor_options_t o = RESHARD_NCCL_EXECUTOR_OPTIONS_INIT;
    read_struct(options, kNcclOptionsV1Size, "options", &o);
    if (o.process < -1) {
      fail(ErrorCode::kInvalidArgument, "options->process: " + std::to_string(o.process) +
                                            " is negative (-1: the NCCL rank of the only GPU)");
    }
    if (o.num_devices == 0) {
      fail(ErrorCode::kInvalidArgument, "options->num_devices: 0; at least one GPU is needed");
    }
    require(o.devices, "options->devices");
    const reshard::ExecuteOptions execute = execute_options(
        o.timeout_seconds, o.max_batches_in_flight, o.agreement, o.packing, o.overlap);
    reshard::NcclTransportOptions n;
    n.process = o.process;
    n.nccl_ranks = o.nccl_ranks;
    n.wait = o.wait != 0;
    n.check_pointers = o.check_pointers != 0;
    n.timeout_seconds = o.timeout_seconds;
    n.abort_borrowed_on_failure = o.abort_borrowed_on_failure != 0;
    if (o.library != nullptr) n.library = o.library;
    std::memcpy(n.unique_id.data(), o.unique_id.internal, n.unique_id.size());
    std::set<int32_t> ordinals;
    std::set<int32_t> nccl_ranks;
    bool creates = false;
    for (size_t i = 0; i < o.num_devices; ++i) {
      const reshard_nccl_device_t& d = o.devices[i];
      if (d.ordinal < 0) {
        fail(ErrorCode::kInvalidArgument,
             device_field(i, "ordinal") + ": " + std::to_string(d.ordinal) + " is negative");
      }
      if (!ordinals.insert(d.ordinal).second) {
        fail(ErrorCode::kInvalidArgument,
             device_field(i, "ordinal") + ": " + std::to_string(d.ordinal) + " appears twice");
      }
      if (d.comm == nullptr) {
        creates = true;
        if (o.nccl_ranks < 1) {
          fail(ErrorCode::kInvalidArgument, "options->nccl_ranks: " + std::to_string(o.nccl_ranks) +
                                                " must be at least 1 (" + device_field(i, "comm") +
                                                " is NULL: reshard creates its communicator)");
        }
        if (d.nccl_rank < 0 || d.nccl_rank >= o.nccl_ranks) {
          fail(ErrorCode::kInvalidArgument, device_field(i, "nccl_rank") + ": " +
                                                std::to_string(d.nccl_rank) + " is outside [0, " +
                                                std::to_string(o.nccl_ranks) + ")");
        }
        if (!nccl_ranks.insert(d.nccl_rank).second) {
          fail(ErrorCode::kInvalidArgument, device_field(i, "nccl_rank") + ": " +
                                                std::to_string(d.nccl_rank) + " appears twice");
        }
      }
      n.devices.push_back({d.ordinal, d.comm, d.comm == nullptr ? d.nccl_rank : -1});
      if (d.stream != nullptr) n.streams.push_back({d.ordinal, d.stream});
    }
    if (creates) {
      bool all_zero = true;
      for (char c : o.unique_id.internal) all_zero = all_zero && c == 0;
      if (all_zero) {
        fail(ErrorCode::kInvalidArgument,
             "options->unique_id: all zero; pass the id reshard_nccl_unique_id made on one "
             "process (needed when a device's comm is NULL)");
      }
    }
    auto transport = reshard::make_nccl_transport(n);
    *out_executor =
        reshard::capi::make_engine_executor(RESHARD_TRANSPORT_NCCL, std::move(transport), execute)
            .release();
  });
}

}  // extern "C"
