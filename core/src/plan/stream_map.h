// Internal: a value per stream of the global statistics (stats.cc), keyed
// by the stream's 64-bit key (stage, source and destination device), in an
// open-addressing table: the relay streams' bytes and the band streams.
//
// A relay stage of a fleet plan has millions of streams, each looked up
// again in every cell that uses it; std::unordered_map (a node per entry,
// a modulo per lookup) took a sixth of the statistics' time of a
// 4,096-device MoE sync. Values live in insertion order in their own
// vector and are named by index, which stays valid as the table grows
// (a pointer into it would not). Iteration is in insertion order, which
// the statistics do not depend on (they add and take maxima).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace reshard::planning {

// The key of the stream of `stage` from dense device `src` to dense device
// `dst` (devices below 2^20).
inline uint64_t stage_stream_key(uint32_t stage, uint32_t src, uint32_t dst) {
  return uint64_t{stage} << 40 | uint64_t{src} << 20 | dst;
}

// The key of the pair of dense devices (src, dst), one a stage: the
// statistics' sets and tables of device pairs (stage_pairs.h, pair_bytes.h,
// relay_bytes).
inline uint64_t device_pair_key(uint32_t src, uint32_t dst) { return uint64_t{src} << 32 | dst; }

template <class V>
class StreamMap {
 public:
  // A key the statistics never use (their devices are below 2^20).
  static constexpr uint64_t kNone = ~uint64_t{0};
  // The index of key's value, V{} inserted first where absent (`fresh`,
  // when given, says whether it was).
  uint32_t index(uint64_t key, bool* fresh = nullptr) {
    if ((values_.size() + 1) * 2 > slots_.size()) grow();
    for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
      Slot& x = slots_[s];
      if (x.key == key) {
        if (fresh) *fresh = false;
        return x.index;
      }
      if (x.key == kNone) {
        x.key = key;
        x.index = static_cast<uint32_t>(values_.size());
        keys_.push_back(key);
        values_.emplace_back();
        if (fresh) *fresh = true;
        return x.index;
      }
    }
  }
  // Asks for key's first slot ahead of index(key) (a lookup in a table of
  // millions of streams misses the cache).
  void prefetch(uint64_t key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[slot_of(key)]);
  }
  V& at(uint32_t i) { return values_[i]; }
  const V& at(uint32_t i) const { return values_[i]; }
  // key's value, inserted as V{} where absent.
  V& operator[](uint64_t key) { return values_[index(key)]; }
  // key's value, null where absent.
  const V* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
      const Slot& x = slots_[s];
      if (x.key == key) return &values_[x.index];
      if (x.key == kNone) return nullptr;
    }
  }
  // Room for n values: a burst of insertions (RoutedCells::drain, at the
  // pass's end) grows the table once instead of doubling it step by step,
  // each step leaving its old values behind.
  void reserve(size_t n) {
    size_t slots = slots_.empty() ? 64 : slots_.size();
    while ((n + 1) * 2 > slots) slots *= 2;
    if (slots != slots_.size()) rehash(slots);
    keys_.reserve(n);
    values_.reserve(n);
  }
  size_t size() const { return values_.size(); }
  bool empty() const { return values_.empty(); }
  // Calls f(key, value) for every entry, in insertion order.
  template <class F>
  void each(F&& f) const {
    for (size_t i = 0; i < values_.size(); ++i) f(keys_[i], values_[i]);
  }

 private:
  struct Slot {
    uint64_t key = kNone;
    uint32_t index = 0;
  };
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9e3779b97f4a7c15ull) >> shift_);
  }
  // The slots are rebuilt from keys_: the old ones are let go first, so
  // that growing never holds both (at 16,384 devices a relay stage's
  // table grows from 256 to 512 MiB, and where that came at the pass's
  // end, the two were its peak).
  void grow() { rehash(slots_.empty() ? 64 : slots_.size() * 2); }
  void rehash(size_t n) {
    std::vector<Slot>().swap(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    shift_ = 64 - __builtin_ctzll(n);
    for (size_t i = 0; i < keys_.size(); ++i) {
      size_t s = slot_of(keys_[i]);
      while (slots_[s].key != kNone) s = (s + 1) & mask_;
      slots_[s] = Slot{keys_[i], static_cast<uint32_t>(i)};
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  std::vector<uint64_t> keys_;  // per value: its key
  std::vector<V> values_;
};

}  // namespace reshard::planning
