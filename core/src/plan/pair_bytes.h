// Internal: the bytes of every stage-0 (source device, destination device)
// stream, which the round schedule of a budgeted plan needs (stats.cc).
//
// A hash map while the streams are few; a dense table over the devices that
// can send (sources) and receive (destinations) once the map takes a quarter
// of the table's memory (so the two together peak at 1.25 tables), where the
// table stays within a cap. A fleet where
// every trainer talks to every inference device (an MoE sync from replicated
// pipeline stages: N/2 x N/2 streams) then costs 4 bytes a stream instead of
// a hash node's ~48, and no hashing.
//
// A cell of the table holds a stream's bytes below 2^32 - 1; a stream that
// reaches that moves to the map, its cell marked kInMap. The 405B plan at
// 16,384 devices has 2^28 streams (every pair of devices), of a few KB each:
// 1 GiB of table, which the kernel maps and clears page by page (its page
// faults were a fifth of that plan's global statistics with 8-byte cells).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <unordered_map>
#include <vector>

#include "plan/checked.h"
#include "plan/stream_map.h"
#include "util/zeroed.h"

namespace reshard::planning {

class PairBytes {
 public:
  // `rows`/`cols`: per dense device, whether it can receive / send a
  // stage-0 stream; `dense_cap`: most bytes the table may take.
  PairBytes(const std::vector<uint8_t>& rows, const std::vector<uint8_t>& cols, size_t dense_cap)
      : col_of_(cols.size(), -1) {
    for (size_t d = 0; d < rows.size(); ++d)
      if (rows[d]) row_dev_.push_back(static_cast<uint32_t>(d));
    for (size_t d = 0; d < cols.size(); ++d)
      if (cols[d]) {
        col_of_[d] = static_cast<int32_t>(col_dev_.size());
        col_dev_.push_back(static_cast<uint32_t>(d));
      }
    row_base_.assign(rows.size(), -1);
    for (size_t r = 0; r < row_dev_.size(); ++r)
      row_base_[row_dev_[r]] = static_cast<int64_t>(r * col_dev_.size());
    table_bytes_ = row_dev_.size() * col_dev_.size() * sizeof(uint32_t);
    dense_ok_ = table_bytes_ <= dense_cap;
  }
  // Turns to the table, the map's streams moved into it (any outside the
  // table, which the caller's rows and columns should not leave, stay in
  // the map).
  void make_dense() {
    if (dense_ || !dense_ok_) return;
    table_ = ZeroedArray<uint32_t>(row_dev_.size() * col_dev_.size());
    dense_ = true;
    std::unordered_map<uint64_t, int64_t> rest;
    for (const auto& [k, b] : sparse_) {
      const auto sd = static_cast<uint32_t>(k >> 32), dd = static_cast<uint32_t>(k & 0xffffffffu);
      if (in_table(sd, dd) && b >= 0 && b < kInMap) {
        table_[index(sd, dd)] = static_cast<uint32_t>(b);
        continue;
      }
      if (in_table(sd, dd)) table_[index(sd, dd)] = kInMap;
      rest.emplace(k, b);
    }
    sparse_.swap(rest);
  }
  // Turns to the table where `distinct` distinct streams about to be added
  // (whether or not the map has them) would turn the map into it on their
  // own: add() would turn it while adding them, with the same bytes, after
  // building the map's nodes.
  void expect(size_t distinct, int64_t node_bytes) {
    if (!dense_ && dense_ok_ && distinct * static_cast<size_t>(node_bytes) * 4 >= table_bytes_)
      make_dense();
  }
  bool dense() const { return dense_; }
  size_t table_bytes() const { return table_bytes_; }
  // Adds `bytes` to the stream sd -> dd; returns whether it is a new entry
  // of the hash map (the caller counts those against its memory limit).
  bool add(uint32_t sd, uint32_t dd, int64_t bytes, int64_t node_bytes) {
    if (dense_ && in_table(sd, dd))
      return add_cell(table_.data() + row_base_[dd], dd, col_of_[sd], bytes);
    auto [it, fresh] = sparse_.try_emplace(device_pair_key(sd, dd), 0);
    add_to(it->second, bytes, "network_bytes");
    if (fresh && !dense_ && dense_ok_ &&
        sparse_.size() * static_cast<size_t>(node_bytes) * 4 >= table_bytes_) {
      make_dense();
      return false;
    }
    return fresh;
  }
  // While the table is in use: destination dd's row of it (null where dd
  // has none), indexed by column(sd) (-1 where sd has none), written with
  // add_cell.
  uint32_t* row(uint32_t dd) {
    return dense_ && row_base_[dd] >= 0 ? table_.data() + row_base_[dd] : nullptr;
  }
  // Adds `bytes` to column `col` of destination dd's row (row(dd)); true
  // where the stream moved to the map (a new entry there).
  bool add_cell(uint32_t* row, uint32_t dd, int32_t col, int64_t bytes) {
    uint32_t& v = row[col];
    if (static_cast<uint64_t>(bytes) < uint64_t{kInMap} - v) [[likely]] {
      v += static_cast<uint32_t>(bytes);
      return false;
    }
    return spill(v, dd, col, bytes);
  }
  // Adds bytes[k] to column c0 + k of destination dd's row (row(dd)), for
  // k < n: what add_cell does for each k in turn (bytes below kInMap),
  // a block of columns at a time where none of them reaches kInMap (the
  // block's sums vectorize), add_cell by add_cell in a block where one
  // does. Returns how many streams moved to the map as new entries there.
  size_t add_run(uint32_t* row, uint32_t dd, int32_t c0, const uint32_t* bytes, size_t n) {
    constexpr size_t kBlock = 64;
    size_t fresh = 0;
    size_t k0 = 0;
    for (; k0 + kBlock <= n; k0 += kBlock) {
      uint32_t* __restrict v = row + c0 + k0;
      const uint32_t* __restrict b = bytes + k0;
      uint32_t sum[kBlock];
      bool bad = false;
#if defined(__GNUC__)
      // Four lanes at a time (GCC's and Clang's vector extension: SSE2's
      // paddd and compares; -O2 leaves the plain loop scalar).
      using V = uint32_t __attribute__((vector_size(16)));
      using M = int32_t __attribute__((vector_size(16)));
      M badv = {0, 0, 0, 0};
      for (size_t k = 0; k < kBlock; k += 4) {
        V x, y;
        std::memcpy(&x, v + k, sizeof x);
        std::memcpy(&y, b + k, sizeof y);
        const V z = x + y;  // wraps where x + y > 2^32 - 1
        badv |= (z < x) | (z == kInMap);
        std::memcpy(sum + k, &z, sizeof z);
      }
      bad = (badv[0] | badv[1] | badv[2] | badv[3]) != 0;
#else
      for (size_t k = 0; k < kBlock; ++k) {
        sum[k] = v[k] + b[k];  // wraps where v + b > 2^32 - 1
        bad |= sum[k] < v[k] || sum[k] == kInMap;
      }
#endif
      if (!bad) [[likely]] {
        std::memcpy(v, sum, sizeof sum);
        continue;
      }
      for (size_t k = k0; k < k0 + kBlock; ++k)
        fresh += add_cell(row, dd, c0 + static_cast<int32_t>(k), bytes[k]);
    }
    for (size_t k = k0; k < n; ++k)
      fresh += add_cell(row, dd, c0 + static_cast<int32_t>(k), bytes[k]);
    return fresh;
  }
  // A cell whose stream is in the map.
  static constexpr uint32_t kInMap = UINT32_MAX;
  int32_t column(uint32_t sd) const { return dense_ ? col_of_[sd] : -1; }
  // The bytes of stream sd -> dd (0: none).
  int64_t get(uint32_t sd, uint32_t dd) const {
    if (dense_ && in_table(sd, dd) && table_[index(sd, dd)] != kInMap) return table_[index(sd, dd)];
    auto it = sparse_.find(device_pair_key(sd, dd));
    return it == sparse_.end() ? 0 : it->second;
  }
  // Calls f(sd, dd, bytes) for every stream: the map's entries, then the
  // table's with bytes.
  template <class F>
  void each(F&& f) const {
    each_sparse(f);
    each_row([&](uint32_t dd, std::span<const uint32_t> sources, const uint32_t* bytes) {
      for (size_t c = 0; c < sources.size(); ++c)
        if (bytes[c] > 0 && bytes[c] != kInMap) f(sources[c], dd, int64_t{bytes[c]});
    });
  }
  // The map's entries alone, f(sd, dd, bytes).
  template <class F>
  void each_sparse(F&& f) const {
    for (const auto& [k, b] : sparse_)
      f(static_cast<uint32_t>(k >> 32), static_cast<uint32_t>(k & 0xffffffffu), b);
  }
  // The table alone, a row at a time: f(dd, sources, bytes), bytes[c] those
  // of stream sources[c] -> dd (0: none; kInMap: in the map, which
  // each_sparse visits). Nothing while the map is in use.
  template <class F>
  void each_row(F&& f) const {
    if (!dense_) return;
    const size_t nc = col_dev_.size();
    for (size_t r = 0; r < row_dev_.size(); ++r)
      f(row_dev_[r], std::span<const uint32_t>(col_dev_), table_.data() + r * nc);
  }

 private:
  // sd and dd are dense device indices (below the size of `rows`/`cols`).
  bool in_table(uint32_t sd, uint32_t dd) const { return row_base_[dd] >= 0 && col_of_[sd] >= 0; }
  size_t index(uint32_t sd, uint32_t dd) const {
    return static_cast<size_t>(row_base_[dd]) + static_cast<size_t>(col_of_[sd]);
  }
  // add_cell's stream of 2^32 - 1 bytes or more (or a negative add): into
  // the map.
  bool spill(uint32_t& v, uint32_t dd, int32_t col, int64_t bytes) {
    const uint64_t k = device_pair_key(col_dev_[static_cast<size_t>(col)], dd);
    auto [it, fresh] = sparse_.try_emplace(k, 0);
    if (v != kInMap) {
      it->second = v;
      v = kInMap;
    }
    add_to(it->second, bytes, "network_bytes");
    return fresh;
  }
  std::vector<int32_t> col_of_;    // per device: its column, -1 where none
  std::vector<int64_t> row_base_;  // per device: its row x columns, -1 where none
  std::vector<uint32_t> row_dev_, col_dev_;
  size_t table_bytes_ = 0;
  bool dense_ok_ = false, dense_ = false;
  ZeroedArray<uint32_t> table_;
  std::unordered_map<uint64_t, int64_t> sparse_;
};

}  // namespace reshard::planning
