// Converts a communicator's Fortran handle (MPI_Comm_c2f, an MPI_Fint) into
// the C handle the MPI backend takes (reshard::MpiTransportOptions::comm,
// the address of an MPI_Comm), without mpi.h: MPI_Comm_f2c is called in the
// MPI library already loaded in the process. reshard_mpi.h says why the C
// ABI takes Fortran handles.
#pragma once

#include <cstdint>

namespace reshard::capi {

// Storage for one MPI_Comm of either ABI family: a pointer (Open MPI) or an
// int (MPICH and its derivatives).
class MpiCommHandle {
 public:
  // The address to pass as MpiTransportOptions::comm; valid while this
  // object lives.
  const void* address() const { return is_pointer_ ? static_cast<const void*>(&pointer_) : &int_; }

 private:
  friend MpiCommHandle mpi_comm_from_fortran(int32_t fortran_handle, const char* field);
  bool is_pointer_ = true;
  void* pointer_ = nullptr;
  int int_ = 0;
};

// MPI_Comm_f2c(fortran_handle) in the process's MPI library. Throws
// kInvalidArgument naming `field` when MPI is not initialised (or already
// finalized) or the handle names no live communicator, kUnsupported when no
// MPI library is loaded or its handle ABI is unknown.
MpiCommHandle mpi_comm_from_fortran(int32_t fortran_handle, const char* field);

}  // namespace reshard::capi
