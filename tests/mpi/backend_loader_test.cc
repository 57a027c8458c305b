// The run-time loading of the MPI backend (core/src/exec/backend/backend_loader.cc):
// a missing backend is a clear kUnsupported that says what to install, and
// in the build tree (RESHARD_BACKEND_DIR set by ctest) the backend is found.
// No MPI process is started here: loading does not initialise MPI.
#include <gtest/gtest.h>

#include <string>

#include "reshard/engine.h"
#include "reshard/error.h"

namespace reshard {
namespace {

TEST(BackendLoader, MissingLibraryIsUnsupportedAndSaysWhatToInstall) {
  MpiTransportOptions options;
  options.library = "libreshard_mpi_does_not_exist.so.1";
  try {
    make_mpi_transport(options);
    FAIL() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    const std::string m = e.what();
    EXPECT_NE(m.find("MPI transport unavailable"), std::string::npos) << m;
    EXPECT_NE(m.find("libreshard_mpi_does_not_exist.so.1"), std::string::npos) << m;
    EXPECT_NE(m.find("apt-get install"), std::string::npos) << m;
    EXPECT_NE(m.find("RESHARD_BACKEND_DIR"), std::string::npos) << m;
  }
}

TEST(BackendLoader, UnloadableLibraryReportsTheLoaderError) {
  MpiTransportOptions options;
  options.library = "/proc/self/status";  // exists, is no shared object
  try {
    make_mpi_transport(options);
    FAIL() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    const std::string m = e.what();
    EXPECT_NE(m.find("could not be loaded"), std::string::npos) << m;
    EXPECT_NE(m.find("Open MPI"), std::string::npos) << m;
  }
}

TEST(BackendLoader, BuildTreeBackendIsFound) {
  std::string why;
  const bool ok = mpi_transport_available(&why);
#ifdef RESHARD_EXPECT_MPI_BACKEND
  EXPECT_TRUE(ok) << why;
#else
  if (!ok) GTEST_SKIP() << why;
#endif
}

}  // namespace
}  // namespace reshard
