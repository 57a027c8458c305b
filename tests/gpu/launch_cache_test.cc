// The CUDA backend's launch cache (launch_cache.h) on the CPU: what finds a
// remembered call and what must not. A call is found by its key when it has
// one, by equal ops otherwise; never a keyed entry by ops, nor an entry for
// ops that differ in any field.
#include "launch_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "copy_plan.h"
#include "reshard/error.h"
#include "reshard/transport.h"

namespace reshard {
namespace {

using cuda_backend::LaunchCache;
using cuda_backend::same_ops;

std::vector<CopyOp> call(int n, uintptr_t base) {
  std::vector<CopyOp> ops(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    CopyOp& op = ops[static_cast<size_t>(i)];
    op.desc.rank = 2;
    op.desc.extent[0] = 4 + i;
    op.desc.extent[1] = 64;
    op.desc.src_stride[0] = 128;
    op.desc.src_stride[1] = 1;
    op.desc.dst_stride[0] = 64;
    op.desc.dst_stride[1] = 1;
    op.desc.src_offset = i;
    op.dtype = DType::kBF16;
    op.src = reinterpret_cast<const void*>(base + 4096 * static_cast<uintptr_t>(i));
    op.dst =
        reinterpret_cast<void*>(base + (uintptr_t{1} << 20) + 4096 * static_cast<uintptr_t>(i));
  }
  return ops;
}

// Invariant: an unkeyed call finds only an unkeyed entry with ops equal in
// every field; each field's change is a miss.
TEST(LaunchCache, UnkeyedCallsMatchEqualOpsOnly) {
  LaunchCache<int> cache(16, 1 << 20);
  const std::vector<CopyOp> ops = call(5, 0x10000);
  ASSERT_TRUE(cache.make_room(LaunchCache<int>::entry_bytes(ops, 0, 100)));
  cache.insert(ops, 0, LaunchCache<int>::entry_bytes(ops, 0, 100), 7);
  ASSERT_NE(cache.find(ops, 0), nullptr);
  EXPECT_EQ(*cache.find(ops, 0), 7);
  EXPECT_EQ(cache.find(std::span(ops).first(4), 0), nullptr) << "fewer ops";
  const std::vector<std::pair<std::string, void (*)(CopyOp&)>> edits = {
      {"src", [](CopyOp& o) { o.src = static_cast<const char*>(o.src) + 2; }},
      {"dst", [](CopyOp& o) { o.dst = static_cast<char*>(o.dst) + 2; }},
      {"kind", [](CopyOp& o) { o.kind = CopyOp::Kind::kReduce; }},
      {"dtype", [](CopyOp& o) { o.dtype = DType::kF16; }},
      {"op", [](CopyOp& o) { o.op = ReduceOp::kMax; }},
      {"count", [](CopyOp& o) { o.count = 3; }},
      {"divisor", [](CopyOp& o) { o.divisor = 2; }},
      {"desc.rank", [](CopyOp& o) { o.desc.rank = 3; }},
      {"desc.extent", [](CopyOp& o) { o.desc.extent[1] = 65; }},
      {"desc.src_stride", [](CopyOp& o) { o.desc.src_stride[0] = 129; }},
      {"desc.dst_stride", [](CopyOp& o) { o.desc.dst_stride[0] = 65; }},
      {"desc.src_offset", [](CopyOp& o) { o.desc.src_offset += 1; }},
      {"desc.dst_offset", [](CopyOp& o) { o.desc.dst_offset += 1; }},
  };
  for (const auto& [field, edit] : edits) {
    for (size_t i : {size_t{0}, size_t{4}}) {
      std::vector<CopyOp> other = ops;
      edit(other[i]);
      EXPECT_FALSE(same_ops(ops, other)) << field;
      EXPECT_EQ(cache.find(other, 0), nullptr) << field << " of op " << i;
    }
  }
}

// Invariant: scaled ops (kQuantise, kBlockScales) point to their shards
// (CopyOp::shard); an unkeyed entry keeps its own copy of them, so that a
// later call finds it by the shards' contents wherever they lie (the
// caller's first shard gone), and misses when a shard's field differs.
TEST(LaunchCache, UnkeyedScaledOpsMatchTheirShardsByContents) {
  static_assert(sizeof(CopyOp) <= 280, "CopyOp holds its shard out of line");
  LaunchCache<int> cache(16, 1 << 20);
  auto make_shard = [] {
    CopyOp::Shard sh;
    sh.box.rank = 2;
    sh.box.hi = {8, 64};
    sh.block = {1, 32};
    sh.scale_dtype = DType::kE8M0;
    sh.scales = reinterpret_cast<const void*>(uintptr_t{0x900000});
    return sh;
  };
  std::vector<CopyOp> ops = call(3, 0x10000);
  {
    auto first = std::make_unique<CopyOp::Shard>(make_shard());
    for (CopyOp& op : ops) {
      op.kind = CopyOp::Kind::kQuantise;
      op.to_dtype = DType::kF8E4M3;
      op.shard = first.get();
    }
    const size_t bytes = LaunchCache<int>::entry_bytes(ops, 0, 100);
    EXPECT_EQ(bytes, 100 + 3 * sizeof(CopyOp) + 3 * sizeof(CopyOp::Shard));
    ASSERT_TRUE(cache.make_room(bytes));
    cache.insert(ops, 0, bytes, 7);
    *first = CopyOp::Shard{};  // the caller's shard changes, then goes
  }
  const CopyOp::Shard again = make_shard();
  for (CopyOp& op : ops) op.shard = &again;
  ASSERT_NE(cache.find(ops, 0), nullptr) << "an equal shard elsewhere";
  const std::vector<std::pair<std::string, void (*)(CopyOp::Shard&)>> edits = {
      {"scales", [](CopyOp::Shard& s) { s.scales = static_cast<const char*>(s.scales) + 4; }},
      {"scale_dtype", [](CopyOp::Shard& s) { s.scale_dtype = DType::kF32; }},
      {"box", [](CopyOp::Shard& s) { s.box.hi[0] = 9; }},
      {"block", [](CopyOp::Shard& s) { s.block[1] = 16; }},
  };
  for (const auto& [field, edit] : edits) {
    CopyOp::Shard other_shard = make_shard();
    edit(other_shard);
    std::vector<CopyOp> other = ops;
    other[2].shard = &other_shard;
    EXPECT_FALSE(same_ops(ops, other)) << field;
    EXPECT_EQ(cache.find(other, 0), nullptr) << "shard." << field;
  }
  std::vector<CopyOp> none = ops;
  none[0].shard = nullptr;
  EXPECT_FALSE(same_ops(ops, none)) << "a null shard";
  try {
    (void)cuda_backend::plan_launches(none);
    ADD_FAILURE() << "a quantise op without its shard was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ops[0].shard: null"), std::string::npos) << e.what();
  }
}

// Invariant: a keyed call finds the entry remembered under its key, whatever
// its ops (the engine keeps them equal: Transport::run_keyed_copies), and
// nothing else: not an unkeyed entry with equal ops, not another key's.
TEST(LaunchCache, KeyedCallsMatchTheirKeyOnly) {
  LaunchCache<int> cache(16, 1 << 20);
  const std::vector<CopyOp> ops = call(3, 0x20000);
  cache.insert(ops, 0, LaunchCache<int>::entry_bytes(ops, 0, 10), 1);
  EXPECT_EQ(cache.find(ops, 41), nullptr) << "an unkeyed entry is no keyed one";
  cache.insert(ops, 41, LaunchCache<int>::entry_bytes(ops, 41, 10), 2);
  ASSERT_NE(cache.find(ops, 41), nullptr);
  EXPECT_EQ(*cache.find(ops, 41), 2);
  EXPECT_EQ(cache.find(ops, 42), nullptr) << "another key";
  EXPECT_EQ(*cache.find(ops, 0), 1) << "the unkeyed entry is still found by its ops";
  // A keyed entry keeps no ops: the unkeyed lookup does not see it.
  LaunchCache<int> keyed_only(16, 1 << 20);
  keyed_only.insert(ops, 9, LaunchCache<int>::entry_bytes(ops, 9, 10), 3);
  EXPECT_EQ(keyed_only.find(ops, 0), nullptr);
  EXPECT_EQ(LaunchCache<int>::entry_bytes(ops, 9, 10), 10u);
  EXPECT_EQ(LaunchCache<int>::entry_bytes(ops, 0, 10), 10 + 3 * sizeof(CopyOp));
  // Remembering a key again replaces its entry.
  keyed_only.insert(ops, 9, 10, 4);
  EXPECT_EQ(keyed_only.size(), 1u);
  EXPECT_EQ(*keyed_only.find(ops, 9), 4);
  EXPECT_EQ(keyed_only.find({}, 9), nullptr) << "an empty call is never cached";
}

// Invariant: the cache holds at most its entries and bytes, evicting the
// least recently used (a find counts as a use); an entry larger than the
// cache is refused without evicting anything.
TEST(LaunchCache, EvictsTheLeastRecentlyUsedWithinItsBounds) {
  LaunchCache<int> cache(3, 1000);
  const std::vector<CopyOp> ops = call(1, 0x30000);
  for (uint64_t k = 1; k <= 3; ++k) {
    ASSERT_TRUE(cache.make_room(100));
    cache.insert(ops, k, 100, static_cast<int>(k));
  }
  ASSERT_NE(cache.find(ops, 1), nullptr);  // 2 is now the least recently used
  ASSERT_TRUE(cache.make_room(100));
  cache.insert(ops, 4, 100, 4);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.find(ops, 2), nullptr);
  EXPECT_NE(cache.find(ops, 1), nullptr);
  EXPECT_NE(cache.find(ops, 3), nullptr);
  EXPECT_NE(cache.find(ops, 4), nullptr);
  EXPECT_FALSE(cache.make_room(1001));
  EXPECT_EQ(cache.size(), 3u);
  // Bytes (uses: 1, then 3, then 4): 800 more evict 1; 900 more, 3 too.
  ASSERT_TRUE(cache.make_room(800));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.find(ops, 1), nullptr);
  ASSERT_TRUE(cache.make_room(900));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_NE(cache.find(ops, 4), nullptr);
  cache.insert(ops, 5, 900, 5);
  EXPECT_EQ(cache.bytes(), 1000u);
}

}  // namespace
}  // namespace reshard
