// reshard — the `mpi` transport (docs/design.md §3.4, docs/distributed.md):
// host memory, one or more plan devices per MPI rank. Its code lives in
// libreshard_mpi.so.1 (backends/mpi), loaded at run time (docs/design.md §3.6),
// so neither reshard nor a program using this header links MPI. This header
// includes no mpi.h: communicators cross as addresses or Fortran handles.
//
//   reshard::Engine engine(reshard::make_mpi_transport());   // reshard/engine.h
//
// reshard/engine.h includes this header (the declarations used to live there).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "reshard/transport.h"

namespace reshard {

struct MpiTransportOptions {
  // Address of the MPI_Comm to run on, e.g. `&comm`; null: MPI_COMM_WORLD.
  // The transport duplicates it (MPI_Comm_idup, under the deadline below),
  // so reshard's messages never mix with the caller's.
  const void* comm = nullptr;
  // Instead of `comm`: the communicator's Fortran handle (MPI_Comm_c2f, an
  // MPI_Fint), for callers that cannot name MPI_Comm (the C ABI, whose
  // users' MPI_Comm type differs between MPI implementations). The backend
  // converts it with MPI_Comm_f2c in its own MPI library; MPI must then be
  // initialised by the caller. A handle that names no live communicator is
  // kInvalidArgument.
  std::optional<int32_t> fortran_comm;
  // Initialise MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) if the caller
  // has not; reshard then calls MPI_Finalize at process exit. When false and
  // MPI is not initialised: kInvalidArgument.
  bool initialize = true;
  double timeout_seconds = 300;  // deadline for duplicating the communicator
  // The backend library to load: a file name or path. Empty: the default
  // search described at make_mpi_transport.
  std::string library;
};

// Creates the `mpi` transport (host memory). The MPI backend lives in its
// own library, libreshard_mpi.so.1, loaded here on first use, so that
// reshard itself never links MPI. Searched in order: $RESHARD_BACKEND_DIR,
// the directory of the library or executable holding reshard and its
// sibling ../lib (install layout), the executable's directory and ../lib,
// then the dynamic linker's path. Throws kUnsupported when the backend or
// MPI cannot be loaded (the message says what to install), kTimeout,
// kTransport.
std::unique_ptr<Transport> make_mpi_transport(const MpiTransportOptions& options = {});

// True when make_mpi_transport can load its backend; otherwise `why` (if
// given) receives the reason.
bool mpi_transport_available(std::string* why = nullptr);

}  // namespace reshard
