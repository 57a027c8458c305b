// MPI_Comm_f2c without mpi.h (see mpi_comm.h). libreshard.so links no MPI;
// a caller holding a communicator has an MPI library loaded (linked, or
// dlopened globally as mpi4py does), and the MPI backend loads Open MPI
// globally too, so the library's symbols are looked up in the global scope.
//
// The C handle's type is the one thing that differs between the two MPI ABI
// families: Open MPI's MPI_Comm is a pointer (MPI_Comm_f2c returns NULL for
// a handle that names no communicator), MPICH's (and Intel MPI's,
// MVAPICH's) is an int equal to its Fortran handle. Anything else is
// refused rather than guessed.
#include "mpi_comm.h"

#include <dlfcn.h>

#include <algorithm>
#include <string>

#include "reshard/engine.h"
#include "reshard/error.h"

namespace reshard::capi {
namespace {

void* mpi_symbol(const char* name) { return dlsym(RTLD_DEFAULT, name); }

// The library version string, or "" when unavailable. Large enough for any
// implementation's MPI_MAX_LIBRARY_VERSION_STRING (Open MPI 256, MPICH 8192).
std::string library_version() {
  using Fn = int (*)(char*, int*);
  auto fn = reinterpret_cast<Fn>(mpi_symbol("MPI_Get_library_version"));
  if (fn == nullptr) return {};
  std::string text(16384, '\0');
  int len = 0;
  if (fn(text.data(), &len) != 0 || len < 0) return {};
  text.resize(std::min<size_t>(static_cast<size_t>(len), text.size()));
  while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
  return text;
}

}  // namespace

MpiCommHandle mpi_comm_from_fortran(int32_t fortran_handle, const char* field) {
  const std::string name(field);
  if (mpi_symbol("MPI_Comm_f2c") == nullptr) {
    // The caller's MPI may be loaded privately (RTLD_LOCAL); loading the
    // backend makes Open MPI's symbols global (the same library, by soname).
    mpi_transport_available();
  }
  void* f2c = mpi_symbol("MPI_Comm_f2c");
  using FlagFn = int (*)(int*);
  auto initialized = reinterpret_cast<FlagFn>(mpi_symbol("MPI_Initialized"));
  auto finalized = reinterpret_cast<FlagFn>(mpi_symbol("MPI_Finalized"));
  if (f2c == nullptr || initialized == nullptr || finalized == nullptr) {
    fail(ErrorCode::kUnsupported,
         name +
             ": no MPI library is loaded in this process (MPI_Comm_f2c not found), so the "
             "handle names no communicator; link MPI, or use RESHARD_MPI_COMM_WORLD");
  }
  int flag = 0;
  finalized(&flag);
  if (flag != 0) fail(ErrorCode::kInvalidArgument, name + ": MPI has already been finalized");
  initialized(&flag);
  if (flag == 0) {
    fail(ErrorCode::kInvalidArgument,
         name +
             ": MPI is not initialised (call MPI_Init before MPI_Comm_c2f, or use "
             "RESHARD_MPI_COMM_WORLD, which may initialise it)");
  }
  MpiCommHandle handle;
  if (mpi_symbol("ompi_mpi_comm_world") != nullptr) {
    // Open MPI: MPI_Comm is `struct ompi_communicator_t*`; MPI_Comm_f2c
    // checks the index and returns NULL for one that names nothing.
    auto fn = reinterpret_cast<void* (*)(int)>(f2c);
    void* comm = fn(fortran_handle);
    if (comm == nullptr || comm == mpi_symbol("ompi_mpi_comm_null")) {
      fail(ErrorCode::kInvalidArgument,
           name + ": " + std::to_string(fortran_handle) +
               " is not a live communicator (MPI_Comm_f2c gives MPI_COMM_NULL; pass "
               "MPI_Comm_c2f(comm) of a communicator that has not been freed)");
    }
    handle.is_pointer_ = true;
    handle.pointer_ = comm;
    return handle;
  }
  const std::string version = library_version();
  if (version.find("MPICH") != std::string::npos ||
      version.find("Intel(R) MPI") != std::string::npos ||
      version.find("MVAPICH") != std::string::npos) {
    // MPICH ABI: MPI_Comm is an int and MPI_Comm_f2c the identity.
    constexpr int kMpichCommNull = 0x04000000;
    if (fortran_handle == kMpichCommNull) {
      fail(ErrorCode::kInvalidArgument, name + ": " + std::to_string(fortran_handle) +
                                            " is MPI_COMM_NULL, not a live communicator");
    }
    handle.is_pointer_ = false;
    handle.int_ = fortran_handle;
    return handle;
  }
  fail(ErrorCode::kUnsupported,
       name + ": cannot convert a Fortran communicator handle for this MPI library (" +
           (version.empty() ? std::string("unknown") : version) +
           "); reshard knows Open MPI and MPICH handles");
}

}  // namespace reshard::capi
