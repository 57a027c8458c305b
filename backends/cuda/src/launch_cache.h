// The launch cache of one GPU (DeviceContext), without CUDA: what a
// run_copies call's planned launches are remembered under, and how a later
// call finds them. Kept apart from the CUDA code so that the CPU benchmark
// of the device path (bench/bench_engine_device_host.cc) and the tests
// measure and check the lookup the GPU path does.
//
// A call is found by its key when it has one (Transport::run_keyed_copies:
// the engine's kept calls, which it hands again with the same key and equal
// ops): one comparison per entry, however many ops. A call without a key is
// found by comparing its ops field by field with those of the unkeyed
// entries (kinds, descriptors, pointers, counts, scaled shards by their
// contents: an unkeyed entry keeps a copy of them). The two never match
// each other: a keyed entry keeps no ops.
//
// Bounded in entries and bytes; the least recently used entry is evicted
// first. Not thread-safe, like the DeviceContext that owns it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "reshard/transport.h"

namespace reshard::cuda_backend {

// Bounds of the launch cache of one GPU: entries, and bytes of host and
// device memory (a call's descriptors, about 300 bytes per op, and an
// unkeyed call's ops). Larger calls are planned every time.
inline constexpr size_t kLaunchCacheEntries = 16;
inline constexpr size_t kLaunchCacheBytes = size_t{64} << 20;

// Whether an op points to a scaled shard (CopyOp::shard).
inline bool scaled(const CopyOp& op) {
  return op.kind == CopyOp::Kind::kBlockScales || op.kind == CopyOp::Kind::kQuantise;
}

// Whether two scaled ops' shards are equal, wherever they lie.
inline bool same_shard(const CopyOp::Shard* x, const CopyOp::Shard* y) {
  if (x == y) return true;
  if (x == nullptr || y == nullptr) return false;
  return x->scales == y->scales && x->scale_dtype == y->scale_dtype && x->box == y->box &&
         x->block == y->block;
}

// Whether two calls' ops are equal field by field (padding aside; scaled
// ops' shards by their contents).
inline bool same_ops(std::span<const CopyOp> a, std::span<const CopyOp> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const CopyOp& x = a[i];
    const CopyOp& y = b[i];
    if (x.src != y.src || x.dst != y.dst || x.kind != y.kind || x.dtype != y.dtype ||
        x.op != y.op || x.count != y.count || x.divisor != y.divisor || x.to_dtype != y.to_dtype ||
        x.desc.rank != y.desc.rank || x.desc.src_offset != y.desc.src_offset ||
        x.desc.dst_offset != y.desc.dst_offset ||
        std::memcmp(x.desc.extent, y.desc.extent, sizeof x.desc.extent) != 0 ||
        std::memcmp(x.desc.src_stride, y.desc.src_stride, sizeof x.desc.src_stride) != 0 ||
        std::memcmp(x.desc.dst_stride, y.desc.dst_stride, sizeof x.desc.dst_stride) != 0) {
      return false;
    }
    // The scaled shard of kBlockScales and kQuantise (interface 9).
    if (scaled(x) && !same_shard(x.shard, y.shard)) return false;
  }
  return true;
}

template <class Payload>
class LaunchCache {
 public:
  LaunchCache(size_t max_entries, size_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // The payload remembered for the call (`key` nonzero: under that key;
  // zero: with equal ops), marked as used now; null when none.
  Payload* find(std::span<const CopyOp> ops, uint64_t key) {
    if (ops.empty()) return nullptr;
    for (Entry& e : entries_) {
      if (e.key != key) continue;
      if (key == 0 && !same_ops(e.ops, ops)) continue;
      e.last_use = ++uses_;
      return &e.payload;
    }
    return nullptr;
  }

  // The bytes an entry for the call holds: the payload's, and an unkeyed
  // entry's copy of the ops and of their shards.
  static size_t entry_bytes(std::span<const CopyOp> ops, uint64_t key, size_t payload_bytes) {
    if (key != 0) return payload_bytes;
    const auto shards = static_cast<size_t>(std::count_if(ops.begin(), ops.end(), scaled));
    return payload_bytes + ops.size() * sizeof(CopyOp) + shards * sizeof(CopyOp::Shard);
  }

  // Evicts least recently used entries until one of `bytes` (entry_bytes)
  // fits beside the others; false, evicting nothing, when it never fits.
  bool make_room(size_t bytes) {
    if (bytes > max_bytes_) return false;
    while (!entries_.empty() && (entries_.size() >= max_entries_ || bytes_ + bytes > max_bytes_)) {
      auto lru =
          std::min_element(entries_.begin(), entries_.end(),
                           [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
      bytes_ -= lru->bytes;
      entries_.erase(lru);
    }
    return true;
  }

  // Remembers `payload` for the call (after make_room(bytes)); an entry
  // with the same key (nonzero) is replaced.
  Payload& insert(std::span<const CopyOp> ops, uint64_t key, size_t bytes, Payload payload) {
    if (key != 0) {
      auto same = std::find_if(entries_.begin(), entries_.end(),
                               [key](const Entry& e) { return e.key == key; });
      if (same != entries_.end()) {
        bytes_ -= same->bytes;
        entries_.erase(same);
      }
    }
    Entry e;
    e.key = key;
    if (key == 0) {
      // The ops, their shards copied with them: the caller's may go.
      e.ops.assign(ops.begin(), ops.end());
      e.shards.reserve(static_cast<size_t>(std::count_if(ops.begin(), ops.end(), scaled)));
      for (CopyOp& op : e.ops) {
        if (!scaled(op) || op.shard == nullptr) continue;
        e.shards.push_back(*op.shard);
        op.shard = &e.shards.back();
      }
    }
    e.payload = std::move(payload);
    e.bytes = bytes;
    e.last_use = ++uses_;
    bytes_ += bytes;
    entries_.push_back(std::move(e));
    return entries_.back().payload;
  }

  size_t size() const { return entries_.size(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Entry {
    uint64_t key = 0;
    std::vector<CopyOp> ops;            // unkeyed entries: the call's ops
    std::vector<CopyOp::Shard> shards;  // their scaled ops' shards, which ops point to
    Payload payload;
    size_t bytes = 0;
    uint64_t last_use = 0;
  };

  size_t max_entries_;
  size_t max_bytes_;
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
  uint64_t uses_ = 0;
};

}  // namespace reshard::cuda_backend
