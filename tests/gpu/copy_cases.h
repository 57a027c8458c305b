// Test support for the fused copy kernels: random CopyOps (every kind,
// dtype and reduce op; strided, packed, unpacked, long runs, misaligned
// pointers) over host buffers, and the host reference that applies a CopyOp
// with the box-copy core's host functions (reshard/box_copy.h). Used by the
// CPU emulation test and by the GPU kernel test, which must agree with it
// byte for byte.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/copy_op_host.h"
#include "reshard/box_copy.h"
#include "reshard/numeric.h"
#include "reshard/transport.h"

namespace reshard::gpu_testing {

inline constexpr DType kAllDTypes[] = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                                       DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                                       DType::kI16,    DType::kI8,     DType::kU64, DType::kU32,
                                       DType::kU16,    DType::kU8,     DType::kBool};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

// Bytes of a buffer that starts `shift` bytes into its allocation, so that
// misaligned pointers are tested too.
struct Buffer {
  std::vector<std::byte> storage;
  int shift = 0;
  int64_t bytes = 0;
  std::byte* data() { return storage.data() + shift; }
  const std::byte* data() const { return storage.data() + shift; }
  std::vector<std::byte> contents() const { return std::vector<std::byte>(data(), data() + bytes); }
};

inline Buffer make_buffer(int64_t bytes, int shift) {
  Buffer b;
  b.shift = shift;
  b.bytes = bytes;
  // 16-byte aligned storage start (vector<std::byte> is allocated by
  // operator new, 16-aligned on x86-64), plus the shift.
  b.storage.assign(static_cast<size_t>(bytes + shift + 16), std::byte{0});
  return b;
}

// Random finite values: floats in [-100, 100] (quarter steps, so narrow
// types see exact and rounded values), integers and bools of any bits. No
// NaN or infinity: a GPU's NaN payloads differ from the host's, which is
// not what these tests are about.
class Values {
 public:
  explicit Values(uint64_t seed) : rng_(seed) {}
  std::mt19937_64& rng() { return rng_; }

  float real() {
    return static_cast<float>(std::uniform_int_distribution<int>(-400, 400)(rng_)) / 4;
  }

  // Fills n elements of `dtype` (acc = true: its accumulation type).
  void fill(DType dtype, bool acc, std::byte* out, int64_t n) {
    const int64_t size = acc ? acc_size(dtype) : dtype_size(dtype);
    const bool narrow = dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kF8E4M3 ||
                        dtype == DType::kF8E5M2;
    for (int64_t i = 0; i < n; ++i) {
      std::byte* p = out + i * size;
      if (dtype == DType::kF64) {
        const double v = real();
        std::memcpy(p, &v, 8);
      } else if (dtype == DType::kF32 || (acc && narrow)) {
        const float v = real();
        std::memcpy(p, &v, 4);
      } else if (dtype == DType::kF16) {
        const uint16_t v = numeric::f32_to_f16(real());
        std::memcpy(p, &v, 2);
      } else if (dtype == DType::kBF16) {
        const uint16_t v = numeric::f32_to_bf16(real());
        std::memcpy(p, &v, 2);
      } else if (dtype == DType::kF8E4M3) {
        const uint8_t v = numeric::f32_to_f8e4m3(real());
        std::memcpy(p, &v, 1);
      } else if (dtype == DType::kF8E5M2) {
        const uint8_t v = numeric::f32_to_f8e5m2(real());
        std::memcpy(p, &v, 1);
      } else if (dtype == DType::kBool) {
        const uint8_t v = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 3)(rng_));
        std::memcpy(p, &v, 1);  // 2 and 3 read as true as well
      } else {
        const uint64_t v = rng_();
        std::memcpy(p, &v, static_cast<size_t>(size));
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

// A plain copy of `count` contiguous elements of `dtype`.
inline CopyOp dense_copy(DType dtype, const void* src, void* dst, int64_t count) {
  Box box;
  box.rank = 1;
  box.hi[0] = count;
  CopyOp op;
  op.kind = CopyOp::Kind::kCopy;
  op.dtype = dtype;
  op.desc = make_copy_desc(box, box, box);
  op.src = src;
  op.dst = dst;
  return op;
}

// Applies `op` on host memory with the host functions of box_copy.h (the
// reference). Misaligned typed buffers go through aligned copies; the
// buffers are `src_bytes` and `dst_bytes` long.
inline void host_apply(const CopyOp& op, int64_t src_bytes, int64_t dst_bytes) {
  const auto aligned = [](const void* p, int64_t bytes) {
    std::vector<uint64_t> v(static_cast<size_t>((bytes + 7) / 8) + 1);
    if (p != nullptr && bytes > 0) std::memcpy(v.data(), p, static_cast<size_t>(bytes));
    return v;
  };
  std::vector<uint64_t> s = aligned(op.src, src_bytes);
  std::vector<uint64_t> d = aligned(op.dst, dst_bytes);
  testing::apply_copy_op(op, s.data(), d.data());
  if (dst_bytes > 0) std::memcpy(op.dst, d.data(), static_cast<size_t>(dst_bytes));
}

// One random CopyOp with its own buffers.
struct RandomCopy {
  CopyOp op;
  Buffer src;
  Buffer dst;
  std::string what;  // for failure messages
};

inline Box random_sub_box(std::mt19937_64& rng, const Box& outer, bool allow_empty) {
  Box b;
  b.rank = outer.rank;
  for (int k = 0; k < outer.rank; ++k) {
    const int64_t n = outer.extent(k);
    int64_t a = std::uniform_int_distribution<int64_t>(0, n)(rng);
    int64_t c = std::uniform_int_distribution<int64_t>(0, n)(rng);
    if (a > c) std::swap(a, c);
    if (!allow_empty && a == c) {
      if (c < n) {
        ++c;
      } else {
        --a;
      }
    }
    b.lo[k] = outer.lo[k] + a;
    b.hi[k] = outer.lo[k] + c;
  }
  return b;
}

// A random copy or reduction: the region of a random global box copied
// between two random boxes containing it (general, pack, or unpack), ranks
// 0-4, sometimes with runs longer than a kernel chunk.
inline RandomCopy random_box_op(Values& values, CopyOp::Kind kind, DType dtype, ReduceOp op) {
  std::mt19937_64& rng = values.rng();
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const bool big = uni(0, 9) == 0;
  Box global;
  global.rank = static_cast<int32_t>(big ? uni(1, 2) : uni(0, 4));
  for (int k = 0; k < global.rank; ++k) {
    global.lo[k] = uni(-3, 3);
    const int64_t n = big && k == global.rank - 1 ? uni(3000, 40000) : uni(1, 9);
    global.hi[k] = global.lo[k] + n;
  }
  const bool allow_empty = uni(0, 19) == 0;
  Box region = random_sub_box(rng, global, allow_empty);
  Box src_box = random_sub_box(rng, global, false);
  Box dst_box = random_sub_box(rng, global, false);
  const int64_t mode = uni(0, 2);  // 0 general, 1 pack, 2 unpack
  // Boxes must contain the region: grow them to the hull.
  for (int k = 0; k < global.rank; ++k) {
    src_box.lo[k] = std::min(src_box.lo[k], region.lo[k]);
    src_box.hi[k] = std::max(src_box.hi[k], region.hi[k]);
    dst_box.lo[k] = std::min(dst_box.lo[k], region.lo[k]);
    dst_box.hi[k] = std::max(dst_box.hi[k], region.hi[k]);
  }
  if (mode == 1) dst_box = region;
  if (mode == 2) src_box = region;
  RandomCopy c;
  c.op.kind = kind;
  c.op.dtype = dtype;
  c.op.op = op;
  c.op.desc = make_copy_desc(region, src_box, dst_box);
  const int64_t es = dtype_size(dtype);
  const int64_t ds = kind == CopyOp::Kind::kReduce ? acc_size(dtype) : es;
  c.src = make_buffer(std::max<int64_t>(src_box.volume(), 1) * es,
                      static_cast<int>(uni(0, 3) == 0 ? uni(1, 15) : 0));
  c.dst = make_buffer(std::max<int64_t>(dst_box.volume(), 1) * ds,
                      static_cast<int>(uni(0, 3) == 0 ? uni(1, 15) : 0));
  values.fill(dtype, false, c.src.data(), c.src.bytes / es);
  values.fill(dtype, kind == CopyOp::Kind::kReduce, c.dst.data(), c.dst.bytes / ds);
  c.op.src = c.src.data();
  c.op.dst = c.dst.data();
  c.what = std::string(kind == CopyOp::Kind::kReduce ? "reduce " : "copy ") +
           std::string(dtype_name(dtype)) + " op " + std::to_string(static_cast<int>(op)) +
           " region " + to_string(region) + " src " + to_string(src_box) + " dst " +
           to_string(dst_box) + " shifts " + std::to_string(c.src.shift) + "/" +
           std::to_string(c.dst.shift);
  return c;
}

// A random fill (accumulator or elements) or store of `count` elements.
inline RandomCopy random_linear_op(Values& values, CopyOp::Kind kind, DType dtype, ReduceOp op) {
  std::mt19937_64& rng = values.rng();
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t count = uni(0, 4) == 0 ? uni(5000, 20000) : uni(0, 300);
  const int64_t es = dtype_size(dtype);
  const int64_t as = acc_size(dtype);
  RandomCopy c;
  c.op.kind = kind;
  c.op.dtype = dtype;
  c.op.op = op;
  c.op.count = count;
  const int64_t dst_size = kind == CopyOp::Kind::kFillAcc ? as : es;
  c.dst = make_buffer(std::max<int64_t>(count, 1) * dst_size,
                      static_cast<int>(uni(0, 3) == 0 ? uni(1, 15) : 0));
  values.fill(dtype, kind == CopyOp::Kind::kFillAcc, c.dst.data(), c.dst.bytes / dst_size);
  if (kind == CopyOp::Kind::kStore) {
    c.src = make_buffer(std::max<int64_t>(count, 1) * as,
                        static_cast<int>(uni(0, 3) == 0 ? uni(1, 15) : 0));
    values.fill(dtype, true, c.src.data(), c.src.bytes / as);
    c.op.src = c.src.data();
  }
  c.op.dst = c.dst.data();
  c.what = std::string(kind == CopyOp::Kind::kStore     ? "store "
                       : kind == CopyOp::Kind::kFillAcc ? "fill acc "
                                                        : "fill elements ") +
           std::string(dtype_name(dtype)) + " op " + std::to_string(static_cast<int>(op)) +
           " count " + std::to_string(count) + " shift " + std::to_string(c.dst.shift);
  return c;
}

// ------------------------------------------------------------ scenarios

// Ordered op sequences over a few buffers of one shape: copies between
// buffers, reductions into them, fills and stores, so that later ops read
// or overwrite what earlier ones wrote (what run_copies must keep in order).
struct Scenario {
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  Box shape;                  // every buffer is a dense box of this shape
  std::vector<Buffer> elems;  // dtype buffers
  std::vector<Buffer> accs;   // accumulation-type buffers
  std::vector<CopyOp> ops;
  std::vector<std::pair<int64_t, int64_t>> sizes;  // per op: src and dst buffer bytes
};

inline Scenario random_scenario(Values& values, DType dtype, ReduceOp op, int nops) {
  std::mt19937_64& rng = values.rng();
  const auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Scenario s;
  s.dtype = dtype;
  s.op = op;
  s.shape.rank = static_cast<int32_t>(uni(1, 3));
  for (int k = 0; k < s.shape.rank; ++k) s.shape.hi[k] = uni(2, 7);
  const int64_t n = s.shape.volume();
  const int64_t es = dtype_size(dtype);
  const int64_t as = acc_size(dtype);
  for (int i = 0; i < 4; ++i) {
    s.elems.push_back(make_buffer(n * es, uni(0, 2) == 0 ? static_cast<int>(uni(1, 7)) : 0));
    values.fill(dtype, false, s.elems.back().data(), n);
  }
  for (int i = 0; i < 2; ++i) {
    s.accs.push_back(make_buffer(n * as, 0));
    values.fill(dtype, true, s.accs.back().data(), n);
  }
  // A copy of a random region between two placements of the shape.
  const auto region_desc = [&]() {
    Box region = random_sub_box(rng, s.shape, false);
    Box src_box = s.shape;
    Box dst_box = s.shape;
    for (int k = 0; k < s.shape.rank; ++k) {
      // Shift the buffers' origins so source and destination positions differ.
      const int64_t e = region.extent(k);
      const int64_t a = uni(0, s.shape.hi[k] - e);
      const int64_t b = uni(0, s.shape.hi[k] - e);
      region.lo[k] = 0;
      region.hi[k] = e;
      src_box.lo[k] = -a;
      src_box.hi[k] = s.shape.hi[k] - a;
      dst_box.lo[k] = -b;
      dst_box.hi[k] = s.shape.hi[k] - b;
    }
    return make_copy_desc(region, src_box, dst_box);
  };
  const bool narrow = !acc_is_elem(dtype);
  for (int i = 0; i < nops; ++i) {
    CopyOp c;
    c.dtype = dtype;
    c.op = op;
    const int64_t kind = uni(0, 4);
    const size_t a = static_cast<size_t>(uni(0, 3));
    size_t b = static_cast<size_t>(uni(0, 2));
    if (b >= a) ++b;  // another buffer
    const size_t acc = static_cast<size_t>(uni(0, 1));
    if (kind == 0 || kind == 1) {
      c.kind = CopyOp::Kind::kCopy;
      c.desc = region_desc();
      c.src = s.elems[a].data();
      c.dst = s.elems[b].data();
      s.sizes.push_back({n * es, n * es});
    } else if (kind == 2) {
      c.kind = CopyOp::Kind::kReduce;
      c.desc = region_desc();
      c.src = s.elems[a].data();
      c.dst = narrow ? s.accs[acc].data() : s.elems[b].data();
      s.sizes.push_back({n * es, n * as});
    } else if (kind == 3) {
      c.kind = uni(0, 1) == 0 ? CopyOp::Kind::kFillElements : CopyOp::Kind::kFillAcc;
      c.count = uni(1, n);
      const bool to_acc = c.kind == CopyOp::Kind::kFillAcc && narrow;
      c.dst = to_acc ? s.accs[acc].data() : s.elems[b].data();
      s.sizes.push_back({0, n * (to_acc ? as : es)});
    } else {
      c.kind = CopyOp::Kind::kStore;
      c.count = uni(1, n);
      c.src = narrow ? s.accs[acc].data() : s.elems[a].data();
      c.dst = s.elems[b].data();
      s.sizes.push_back({n * as, n * es});
    }
    s.ops.push_back(c);
  }
  return s;
}

}  // namespace reshard::gpu_testing
