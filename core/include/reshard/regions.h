// reshard — a process part's regions: boxes stored by the part's rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

#include "reshard/box.h"

namespace reshard {

// A list of boxes (ProcessPart::regions) stored in
// 1 + 16 × stride bytes each, stride the highest rank pushed so far: a
// rank byte per box and one array of coordinates, per box its lo then its
// hi, `stride` each, the unused ones 0. A Box is 136 bytes whatever its
// rank; a part's regions are its largest array (13.2 M in the 405B part at
// 16,384 devices, rank 3: 49 bytes each). Boxes are read by value
// (operator[]) and written whole (push_back, set).
class Regions {
 public:
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Box;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Box;
    const_iterator() = default;
    const_iterator(const Regions* r, size_t i) : r_(r), i_(i) {}
    Box operator*() const { return (*r_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++i_;
      return old;
    }
    friend bool operator==(const const_iterator& a, const const_iterator& b) {
      return a.i_ == b.i_;
    }

   private:
    const Regions* r_ = nullptr;
    size_t i_ = 0;
  };

  size_t size() const { return ranks_.size(); }
  bool empty() const { return ranks_.empty(); }
  size_t capacity() const { return ranks_.capacity(); }
  // Coordinates per box and side: the highest rank pushed or asked for.
  int stride() const { return stride_; }
  // Room for n boxes at rank up to `rank` (the stride grows to it first).
  void reserve(size_t n, int rank = 0) {
    widen(rank);
    ranks_.reserve(n);
    coords_.reserve(n * 2 * static_cast<size_t>(stride_));
  }
  // n boxes, the new ones rank 0, the stride at least `rank`: slots for
  // set() (which never widens a list another thread writes into).
  void resize(size_t n, int rank = 0) {
    widen(rank);
    ranks_.resize(n);
    coords_.resize(n * 2 * static_cast<size_t>(stride_));
  }
  void clear() {
    ranks_.clear();
    coords_.clear();
  }
  void widen(int rank) {
    if (rank > stride_) restride(rank > kMaxRank ? kMaxRank : rank);
  }
  void push_back(const Box& b) {
    widen(b.rank);
    ranks_.push_back(rank_of(b));
    const size_t at = coords_.size(), s = static_cast<size_t>(stride_);
    coords_.resize(at + 2 * s);
    write(coords_.data() + at, b);
  }
  // Box i replaced by b; b.rank above stride() widens the list first.
  void set(size_t i, const Box& b) {
    widen(b.rank);
    ranks_[i] = rank_of(b);
    write(coords_.data() + i * 2 * static_cast<size_t>(stride_), b);
  }
  // Box i replaced by b where b.rank <= stride() (the list is not
  // widened: threads may fill distinct slots of one list).
  void place(size_t i, const Box& b) {
    ranks_[i] = rank_of(b);
    write(coords_.data() + i * 2 * static_cast<size_t>(stride_), b);
  }
  void append(const Regions& o) {
    widen(o.stride_);
    if (o.stride_ == stride_) {
      ranks_.insert(ranks_.end(), o.ranks_.begin(), o.ranks_.end());
      coords_.insert(coords_.end(), o.coords_.begin(), o.coords_.end());
      return;
    }
    reserve(size() + o.size());
    for (size_t i = 0; i < o.size(); ++i) push_back(o[i]);
  }
  Box operator[](size_t i) const {
    Box b;
    const int r = ranks_[i];
    b.rank = r;
    const int64_t* c = lo(i);
    for (int d = 0; d < r; ++d) {
      b.lo[d] = c[d];
      b.hi[d] = c[stride_ + d];
    }
    return b;
  }
  int rank(size_t i) const { return ranks_[i]; }
  // Box i's rank(i) lower and upper bounds.
  const int64_t* lo(size_t i) const {
    return coords_.data() + i * 2 * static_cast<size_t>(stride_);
  }
  const int64_t* hi(size_t i) const { return lo(i) + stride_; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }
  // Bytes the boxes take (the vectors' sizes, not their capacities).
  size_t bytes() const { return ranks_.size() + coords_.size() * sizeof(int64_t); }

  friend bool operator==(const Regions& a, const Regions& b) {
    if (a.size() != b.size()) return false;
    if (a.stride_ == b.stride_) return a.ranks_ == b.ranks_ && a.coords_ == b.coords_;
    for (size_t i = 0; i < a.size(); ++i)
      if (!(a[i] == b[i])) return false;
    return true;
  }

 private:
  // A rank outside [0, kMaxRank] (never a box reshard builds) is stored
  // clamped to it.
  static uint8_t rank_of(const Box& b) {
    return static_cast<uint8_t>(b.rank < 0 ? 0 : b.rank > kMaxRank ? kMaxRank : b.rank);
  }
  void write(int64_t* c, const Box& b) const {
    for (int d = 0; d < stride_; ++d) {
      c[d] = d < b.rank ? b.lo[d] : 0;
      c[stride_ + d] = d < b.rank ? b.hi[d] : 0;
    }
  }
  void restride(int rank) {
    const size_t s = static_cast<size_t>(stride_), n = size(), r = static_cast<size_t>(rank);
    std::vector<int64_t> wide(n * 2 * r, 0);
    for (size_t i = 0; i < n; ++i)
      for (size_t d = 0; d < s; ++d) {
        wide[i * 2 * r + d] = coords_[i * 2 * s + d];
        wide[i * 2 * r + r + d] = coords_[i * 2 * s + s + d];
      }
    wide.reserve(ranks_.capacity() * 2 * r);
    coords_ = std::move(wide);
    stride_ = rank;
  }

  int32_t stride_ = 0;
  std::vector<uint8_t> ranks_;
  std::vector<int64_t> coords_;
};

}  // namespace reshard
