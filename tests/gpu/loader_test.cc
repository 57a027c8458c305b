// Loading the CUDA backend on demand (reshard/cuda.h): reshard links no
// CUDA library, and whatever is missing (the backend, the driver, a GPU) is
// a kUnsupported whose message says what. Runs on every machine: the
// expectations follow from what this build and machine have.
#include <gtest/gtest.h>

#include <string>

#include "reshard/cuda.h"
#include "reshard/error.h"

namespace reshard {
namespace {

TEST(CudaLoader, MissingBackendIsUnsupportedAndSaysHowToGetIt) {
  CudaLocalOptions options;
  options.library = "libreshard_cuda_does_not_exist.so.1";
  try {
    make_cuda_local_transport(options);
    FAIL() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    const std::string m = e.what();
    EXPECT_NE(m.find("CUDA transports unavailable"), std::string::npos) << m;
    EXPECT_NE(m.find("libreshard_cuda_does_not_exist.so.1"), std::string::npos) << m;
    EXPECT_NE(m.find("RESHARD_BACKEND_DIR"), std::string::npos) << m;
  }
}

TEST(CudaLoader, UnloadableLibraryReportsTheLoaderError) {
  NcclTransportOptions options;
  options.library = "/proc/self/status";  // exists, is no shared object
  try {
    make_nccl_transport(options);
    FAIL() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    const std::string m = e.what();
    EXPECT_NE(m.find("could not be loaded"), std::string::npos) << m;
  }
}

// In the build tree (RESHARD_BACKEND_DIR set by ctest) the backend loads;
// availability then depends only on the GPU, and an unavailable transport
// says why.
TEST(CudaLoader, AvailabilityMatchesTheMachineAndExplainsItself) {
  std::string why;
  const bool local = cuda_transport_available(&why);
#ifdef RESHARD_EXPECT_CUDA_BACKEND
  const std::string versions = cuda_backend_versions();
  EXPECT_NE(versions.find("CUDA runtime"), std::string::npos) << versions;
  std::cout << "backend: " << versions << "\n";
  if (!local) {
    EXPECT_TRUE(why.find("no usable CUDA driver or device") != std::string::npos ||
                why.find("no CUDA device") != std::string::npos)
        << why;
    try {
      make_cuda_local_transport();
      FAIL() << "expected kUnsupported";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("cuda transport unavailable"), std::string::npos)
          << e.what();
    }
    std::string nccl_why;
    EXPECT_FALSE(nccl_transport_available(&nccl_why));
    EXPECT_FALSE(nccl_why.empty());
    GTEST_SKIP() << "no GPU here: " << why;
  }
  EXPECT_TRUE(why.empty()) << why;
#else
  EXPECT_FALSE(local);
  EXPECT_NE(why.find("CUDA transports unavailable"), std::string::npos) << why;
  try {
    make_cuda_local_transport();
    FAIL() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
#endif
}

}  // namespace
}  // namespace reshard
