// util/large_alloc.h: the allocator of the engine's per-piece arrays (its
// copy lists), which a first execution fills once.
#include "util/large_alloc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "exec/schedule/engine_schedule.h"

namespace reshard {
namespace {

// The engine's copy lists (and the replay that keeps them) share one block.
static_assert(std::is_same_v<engine_detail::OpList::allocator_type, ArenaAllocator<CopyOp>>);

// Invariant: lists given one LargeArena take their reserved room from it
// front to back (one block for all); a list grown past what is left takes
// a block of its own, keeping its contents; the arena lives while any list
// holds it (a moved list takes it along) and goes with the last.
TEST(LargeAlloc, ListsShareOneArenaWhileTheyHoldIt) {
  using List = std::vector<uint64_t, ArenaAllocator<uint64_t>>;
  auto arena = std::make_shared<LargeArena>(1000 * sizeof(uint64_t));
  const std::weak_ptr<LargeArena> alive = arena;
  List a{ArenaAllocator<uint64_t>(arena)}, b{ArenaAllocator<uint64_t>(arena)};
  a.reserve(600);
  b.reserve(400);
  EXPECT_TRUE(arena->owns(a.data()));
  EXPECT_TRUE(arena->owns(b.data()));
  EXPECT_EQ(b.data(), a.data() + 600) << "carved front to back";
  EXPECT_EQ(arena->used(), 1000 * sizeof(uint64_t));
  for (uint64_t i = 0; i < 600; ++i) a.push_back(i);
  a.push_back(600);  // past its share: a block of its own
  EXPECT_FALSE(arena->owns(a.data()));
  for (uint64_t i = 0; i <= 600; ++i) ASSERT_EQ(a[i], i);
  List c{ArenaAllocator<uint64_t>(arena)};
  c.push_back(1);  // nothing left: its own block
  EXPECT_FALSE(arena->owns(c.data()));
  arena.reset();
  a = List{};
  c = List{};
  EXPECT_FALSE(alive.expired()) << "b holds it";
  List kept = std::move(b);
  b = List{};
  EXPECT_FALSE(alive.expired()) << "the moved list holds it";
  kept = List{};
  EXPECT_TRUE(alive.expired());
}

#if defined(__linux__) && defined(MADV_HUGEPAGE)
// The VmFlags line of the mapping of /proc/self/smaps holding `p`.
std::string vm_flags_of(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return {};
}

// Invariant: a block of at least kLargeBytes is mapped on its own, aligned
// to 2 MiB, with huge pages requested ("hg"), its contents kept across
// growth; smaller ones come from operator new (not so advised).
TEST(LargeAlloc, LargeBlocksAreAlignedAndAdvisedHuge) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    GTEST_SKIP() << "no transparent huge pages in this kernel";
  }
  std::vector<uint64_t, LargeAllocator<uint64_t>> big;
  big.reserve(large_alloc_detail::kLargeBytes / sizeof(uint64_t) + 7);
  for (uint64_t i = 0; i < 1000; ++i) big.push_back(i * 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % large_alloc_detail::kHuge, 0u);
  const std::string flags = vm_flags_of(big.data());
  ASSERT_FALSE(flags.empty());
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  big.resize(3 * large_alloc_detail::kLargeBytes / sizeof(uint64_t));  // grows: a new mapping
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(big[i], i * 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % large_alloc_detail::kHuge, 0u);
  EXPECT_NE(vm_flags_of(big.data()).find(" hg"), std::string::npos);

  std::vector<uint64_t, LargeAllocator<uint64_t>> small(100, 5);
  EXPECT_EQ(small[99], 5u);
  EXPECT_EQ(vm_flags_of(small.data()).find(" hg"), std::string::npos);
}

// Invariant: a large block's last huge page is advised huge only when the
// block fills at least half of it (a few small pages clear faster than a
// whole huge one); the others always are.
TEST(LargeAlloc, ALastHugePageFilledLessThanHalfStaysSmall) {
  using large_alloc_detail::huge_bytes;
  using large_alloc_detail::kHuge;
  EXPECT_EQ(huge_bytes(25600 * sizeof(CopyOp)), 3 * kHuge);  // 6.96 MB: 3 huge pages
  EXPECT_EQ(huge_bytes(3 * kHuge + kHuge / 2 - 1), 3 * kHuge);
  EXPECT_EQ(huge_bytes(3 * kHuge + kHuge / 2), 4 * kHuge);
  EXPECT_EQ(huge_bytes(3 * kHuge), 3 * kHuge);
  EXPECT_EQ(huge_bytes(kHuge / 2), kHuge);  // kLargeBytes: one huge page
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    GTEST_SKIP() << "no transparent huge pages in this kernel";
  }
  std::vector<uint64_t, LargeAllocator<uint64_t>> v;
  v.reserve((kHuge + kHuge / 4) / sizeof(uint64_t));  // 2.5 MiB: one huge page, then small
  v.push_back(1);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(v.data()) % kHuge, 0u);
  EXPECT_NE(vm_flags_of(v.data()).find(" hg"), std::string::npos);
  const std::string tail = vm_flags_of(v.data() + kHuge / sizeof(uint64_t));
  ASSERT_FALSE(tail.empty());
  EXPECT_EQ(tail.find(" hg"), std::string::npos) << tail;
}
#endif

}  // namespace
}  // namespace reshard
