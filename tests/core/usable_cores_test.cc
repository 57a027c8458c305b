// How many threads `threads = 0` means (util/threads.h) and how an idle
// waiter waits (reshard/wait.h): the cores a process may use come from its
// affinity mask capped by its cgroup's CPU quota (v2 cpu.max and v1
// cfs_quota_us, the smallest on the path to the root), RESHARD_CORES
// replaces the detection, a host's cores are shared among the ranks on it,
// and Backoff never sleeps past a deadline.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "reshard/error.h"
#include "reshard/wait.h"
#include "util/threads.h"

namespace reshard {
namespace {

namespace fs = std::filesystem;

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("reshard-cgroup-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  fs::path root_;
};

TEST_F(CgroupTree, AffinityAloneWithoutQuota) {
  write("job/cpu.max", "max 100000\n");
  EXPECT_EQ(detect_usable_cores(6, root_.string(), "0::/job\n", std::nullopt), 6);
  EXPECT_EQ(detect_usable_cores(6, root_.string(), "", std::nullopt), 6);
}

TEST_F(CgroupTree, V2QuotaRoundsUpAndCapsAffinity) {
  write("job/cpu.max", "150000 100000\n");  // 1.5 CPUs: 2 threads
  EXPECT_EQ(detect_usable_cores(8, root_.string(), "0::/job\n", std::nullopt), 2);
  EXPECT_EQ(detect_usable_cores(1, root_.string(), "0::/job\n", std::nullopt), 1);
}

TEST_F(CgroupTree, V2SmallestQuotaOnThePathToTheRoot) {
  write("outer/cpu.max", "300000 100000\n");
  write("outer/inner/cpu.max", "max 100000\n");
  EXPECT_EQ(detect_usable_cores(16, root_.string(), "0::/outer/inner\n", std::nullopt), 3);
}

TEST_F(CgroupTree, V2UnderHybridUnifiedMount) {
  write("unified/job/cpu.max", "200000 100000\n");
  EXPECT_EQ(detect_usable_cores(16, root_.string(), "0::/job\n", std::nullopt), 2);
}

TEST_F(CgroupTree, V1CfsQuota) {
  write("cpu/job/cpu.cfs_quota_us", "250000\n");
  write("cpu/job/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(detect_usable_cores(16, root_.string(), "4:cpu,cpuacct:/job\n", std::nullopt), 3);
  write("cpu/job/cpu.cfs_quota_us", "-1\n");  // no limit
  EXPECT_EQ(detect_usable_cores(16, root_.string(), "4:cpu,cpuacct:/job\n", std::nullopt), 16);
}

TEST_F(CgroupTree, EnvironmentReplacesDetection) {
  write("job/cpu.max", "100000 100000\n");
  EXPECT_EQ(detect_usable_cores(8, root_.string(), "0::/job\n", "5"), 5);
  EXPECT_EQ(detect_usable_cores(8, root_.string(), "0::/job\n", "100000"), kMaxThreads);
  EXPECT_EQ(detect_usable_cores(8, root_.string(), "0::/job\n", "99999999999999999999"),
            kMaxThreads);
  EXPECT_EQ(detect_usable_cores(8, root_.string(), "0::/job\n", "007"), 7);
}

// A RESHARD_CORES that is not a positive integer (digits only) is an error
// naming the variable and quoting its value, not silently ignored.
TEST_F(CgroupTree, EnvironmentNotAPositiveIntegerIsAnError) {
  for (const char* bad : {"four", "0", "-2", "+4", " 4", "4 ", "4x", "", "000"}) {
    try {
      (void)detect_usable_cores(8, root_.string(), "0::/job\n", std::string_view(bad));
      ADD_FAILURE() << "RESHARD_CORES=\"" << bad << "\" accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
      EXPECT_EQ(e.field(), "RESHARD_CORES") << bad;
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + bad + "\""), std::string::npos)
          << e.what();
    }
  }
}

TEST(ResolveThreads, ExplicitCountsWinAndRanksShareTheHost) {
  EXPECT_EQ(resolve_threads(3, 64), 3);
  EXPECT_EQ(resolve_threads(100000), kMaxThreads);
  const int alone = resolve_threads(0, 1);
  EXPECT_EQ(alone, std::min(usable_cores(), host_cores()));
  EXPECT_EQ(resolve_threads(0, 1 << 20), 1);  // more ranks than cores: one each
  EXPECT_LE(resolve_threads(0, 2), std::max(1, host_cores() / 2));
}

TEST(Backoff, NeverSleepsPastTheDeadline) {
  Backoff b;
  for (int i = 0; i < Backoff::kPolls; ++i) b.pause();  // the polls that do not sleep
  const auto deadline = WaitClock::now() + std::chrono::microseconds(20);
  const auto t0 = WaitClock::now();
  for (int i = 0; i < 2000; ++i) b.pause(deadline);
  // 2000 slices of 50 us would take 100 ms; none may start after the
  // deadline, so the loop ends shortly after it (a generous bound for a
  // loaded machine).
  EXPECT_LT(seconds_since(t0), 0.05);
  EXPECT_GE(WaitClock::now(), deadline);
}

}  // namespace
}  // namespace reshard
