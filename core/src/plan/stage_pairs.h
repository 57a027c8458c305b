// Internal (stats_pass.h): the (source, destination) device pairs of one relay
// stage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "plan/stream_map.h"

namespace reshard::planning {

// The (source, destination) device pairs that exchange a message in one
// relay stage: a bit matrix (rows per destination) when `dense`, else a
// hash set. Relay stages across hosts insert a pair per forwarded piece, and
// hashing them was a tenth of the global statistics of a 1,024-device plan.
class StagePairs {
 public:
  StagePairs(size_t ndev, bool dense)
      : words_((ndev + 63) / 64), bits_(dense ? ndev * words_ : 0), dense_(dense) {}
  // Whether the pair is new.
  bool insert(uint32_t sd, uint32_t dd) {
    if (!dense_) return set_.insert(device_pair_key(sd, dd)).second;
    uint64_t& w = bits_[dd * words_ + (sd >> 6)];
    const uint64_t bit = uint64_t{1} << (sd & 63);
    const bool fresh = (w & bit) == 0;
    w |= bit;
    return fresh;
  }
  bool contains(uint32_t sd, uint32_t dd) const {
    if (!dense_) return set_.count(device_pair_key(sd, dd)) > 0;
    return (bits_[dd * words_ + (sd >> 6)] >> (sd & 63) & 1) != 0;
  }
  // Calls f(sd, dd) for every pair.
  template <class F>
  void each(F&& f) const {
    if (!dense_) {
      for (uint64_t pr : set_)
        f(static_cast<uint32_t>(pr >> 32), static_cast<uint32_t>(pr & 0xffffffffu));
      return;
    }
    for (size_t i = 0; i < bits_.size(); ++i)
      for (uint64_t v = bits_[i]; v; v &= v - 1)
        f(static_cast<uint32_t>((i % words_) * 64 + static_cast<size_t>(__builtin_ctzll(v))),
          static_cast<uint32_t>(i / words_));
  }
  // Bytes a dense stage of `ndev` devices holds.
  static size_t dense_bytes(size_t ndev) { return ndev * ((ndev + 63) / 64) * 8; }

 private:
  size_t words_;
  std::vector<uint64_t> bits_;
  bool dense_;
  std::unordered_set<uint64_t> set_;
};

}  // namespace reshard::planning
