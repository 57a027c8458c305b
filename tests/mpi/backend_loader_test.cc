// The run-time loading of the MPI backend (core/src/exec/backend/backend_loader.cc):
// a missing backend is a clear kUnsupported that says what to install, and
// in the build tree (RESHARD_BACKEND_DIR set by ctest) the backend is found.
// No MPI process is started here: loading does not initialise MPI.
#include <gtest/gtest.h>

#include <string>

#include "reshard/backend.h"
#include "reshard/error.h"
#include "reshard/mpi.h"

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

TEST(BackendRegistry, ListsEveryBackendWithItsLibraryAndEntryPoint) {
  const auto backends = registered_backends();
  ASSERT_EQ(backends.size(), 2u);
  for (size_t i = 0; i < backends.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(backends[i].kind), i);
    EXPECT_EQ(&backend_descriptor(backends[i].kind), &backends[i]);
    ASSERT_FALSE(backends[i].library_names.empty());
  }
  EXPECT_STREQ(backend_descriptor(BackendKind::kMpi).name, "mpi");
  EXPECT_STREQ(backend_descriptor(BackendKind::kMpi).library_names[0], "libreshard_mpi.so.1");
  EXPECT_STREQ(backend_descriptor(BackendKind::kMpi).entry_symbol, "reshard_backend_mpi_v1");
  EXPECT_EQ(backend_descriptor(BackendKind::kMpi).table_size, sizeof(reshard_backend_mpi_v1_t));
  EXPECT_STREQ(backend_descriptor(BackendKind::kCuda).name, "cuda");
  EXPECT_STREQ(backend_descriptor(BackendKind::kCuda).entry_symbol, "reshard_backend_cuda_v1");
  EXPECT_EQ(backend_descriptor(BackendKind::kCuda).table_size, sizeof(reshard_backend_cuda_v1_t));
  EXPECT_THROW(backend_descriptor(static_cast<BackendKind>(7)), Error);
}

TEST(BackendRegistry, LoadBackendNeverThrows) {
  std::string why;
  EXPECT_EQ(load_backend(static_cast<BackendKind>(7), "", &why), nullptr);
  EXPECT_NE(why.find("unknown backend kind 7"), std::string::npos) << why;
  // A library that loads but exports no entry point.
  why.clear();
  EXPECT_EQ(load_backend(BackendKind::kMpi, "libm.so.6", &why), nullptr);
  EXPECT_NE(why.find("MPI transport unavailable"), std::string::npos) << why;
  EXPECT_NE(why.find("no usable reshard_backend_mpi_v1"), std::string::npos) << why;
  why.clear();
  EXPECT_EQ(load_cuda_backend("/proc/self/status", &why), nullptr);
  EXPECT_NE(why.find("CUDA transports unavailable"), std::string::npos) << why;
  EXPECT_NE(why.find("could not be loaded"), std::string::npos) << why;
}

TEST(BackendRegistry, TheMpiBackendIsLoadedOnceAndMatchesThisInterface) {
  std::string why;
  std::string path;
  const void* table = load_backend(BackendKind::kMpi, "", &why, &path);
#ifdef RESHARD_EXPECT_MPI_BACKEND
  ASSERT_NE(table, nullptr) << why;
#else
  if (table == nullptr) GTEST_SKIP() << why;
#endif
  const auto* mpi = static_cast<const reshard_backend_mpi_v1_t*>(table);
  EXPECT_EQ(mpi->transport_interface, kTransportInterfaceVersion);
  EXPECT_GE(mpi->struct_size, sizeof(reshard_backend_mpi_v1_t));
  EXPECT_NE(path.find("libreshard_mpi.so"), std::string::npos) << path;
  std::string again;
  EXPECT_EQ(load_mpi_backend("", &why), table);
  EXPECT_EQ(load_backend(BackendKind::kMpi, "", &why, &again), table);
  EXPECT_EQ(again, path);
}

}  // namespace
}  // namespace reshard
