// The nccl transport's routing (backends/cuda/src/nccl_routing.h), on the
// CPU: which NCCL rank a message to (peer process, remote device ordinal)
// goes to, and which rank tables the transport refuses at creation. The
// transport itself needs GPUs (gpu.Nccl.*); this is the lookup it uses.
#include "nccl_routing.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "reshard/error.h"

namespace reshard::cuda_backend {
namespace {

ErrorCode code_of(const std::function<void()>& f, std::string* message) {
  try {
    f();
  } catch (const Error& e) {
    *message = e.what();
    return e.code();
  }
  return ErrorCode::kOk;
}

// One GPU per process: every message to a process goes to its only rank,
// whatever the remote device's ordinal (plans often leave ordinals at 0,
// and a peer's only GPU may be device 3 of its host).
TEST(NcclRouting, OneGpuPerProcessIgnoresTheOrdinal) {
  const NcclRouting r({{1, 3}, {0, 0}, {2, 7}});
  ASSERT_EQ(r.processes(), 3);
  EXPECT_EQ(r.peer_rank(0, 0, 10, "op"), 1);
  EXPECT_EQ(r.peer_rank(0, 5, 10, "op"), 1);
  EXPECT_EQ(r.peer_rank(1, 0, 11, "op"), 0);
  EXPECT_EQ(r.peer_rank(1, 3, 11, "op"), 0);
  EXPECT_EQ(r.peer_rank(2, 0, 12, "op"), 2);
}

// Several GPUs per peer process: the remote ordinal picks the GPU, also
// when NCCL ranks are not numbered process by process.
TEST(NcclRouting, SeveralGpusPerPeerRouteByRemoteOrdinal) {
  // NCCL rank: 0 = (1, 1), 1 = (0, 0), 2 = (1, 0), 3 = (0, 1), 4 = (1, 2).
  const NcclRouting r({{1, 1}, {0, 0}, {1, 0}, {0, 1}, {1, 2}});
  ASSERT_EQ(r.processes(), 2);
  EXPECT_EQ(r.ranks_of(0), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(r.ranks_of(1), (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(r.peer_rank(0, 0, 0, "op"), 1);
  EXPECT_EQ(r.peer_rank(0, 1, 1, "op"), 3);
  EXPECT_EQ(r.peer_rank(1, 0, 2, "op"), 2);
  EXPECT_EQ(r.peer_rank(1, 1, 3, "op"), 0);
  EXPECT_EQ(r.peer_rank(1, 2, 4, "op"), 4);
}

// Every (process, ordinal) of a table routes to its own rank: process p
// has p + 1 GPUs (ordinals 2p, 2p+1, ...), ranks in reverse order.
TEST(NcclRouting, EveryEntryRoutesToItsRank) {
  std::vector<NcclRankEntry> table;
  for (int32_t p = 0; p < 5; ++p) {
    for (int32_t g = 0; g <= p; ++g) table.insert(table.begin(), {p, 2 * p + g});
  }
  const NcclRouting r(table);
  ASSERT_EQ(r.processes(), 5);
  for (size_t rank = 0; rank < table.size(); ++rank) {
    const NcclRankEntry& e = table[rank];
    EXPECT_EQ(r.peer_rank(e.process, e.ordinal, 0, "op"), static_cast<int32_t>(rank))
        << "process " << e.process << " ordinal " << e.ordinal;
  }
}

TEST(NcclRouting, UnknownOrdinalOnAMultiGpuPeerNamesTheField) {
  const NcclRouting r({{0, 3}, {1, 0}, {1, 2}});
  EXPECT_EQ(r.peer_rank(0, 9, 1, "start: ops[0]"), 0);  // one GPU: any ordinal
  std::string m;
  EXPECT_EQ(code_of([&] { r.peer_rank(1, 1, 42, "start: ops[2]"); }, &m),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("start: ops[2]"), std::string::npos) << m;
  EXPECT_NE(m.find("process 1"), std::string::npos) << m;
  EXPECT_NE(m.find("CUDA device 1"), std::string::npos) << m;
  EXPECT_NE(m.find("plan device 42"), std::string::npos) << m;
  EXPECT_NE(m.find("0, 2"), std::string::npos) << m;
}

TEST(NcclRouting, InconsistentTablesAreMismatches) {
  std::string m;
  EXPECT_EQ(code_of([] { NcclRouting({{0, 0}, {1, 0}, {1, 0}}); }, &m), ErrorCode::kMismatch);
  EXPECT_NE(m.find("two NCCL ranks claim process 1 device 0"), std::string::npos) << m;
  EXPECT_EQ(code_of([] { NcclRouting({{0, 0}, {-1, 1}}); }, &m), ErrorCode::kMismatch);
  EXPECT_NE(m.find("NCCL rank 1 reports process -1"), std::string::npos) << m;
  EXPECT_EQ(code_of([] { NcclRouting({{0, 0}, {2, 0}}); }, &m), ErrorCode::kMismatch);
  EXPECT_NE(m.find("process 1 has no GPU"), std::string::npos) << m;
}

}  // namespace
}  // namespace reshard::cuda_backend
