// The verification oracle (reshard/oracle.h): generated source values that
// encode their global index, and an element-by-element destination check.
#include "reshard/oracle.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <optional>
#include <type_traits>

#include "reshard/block_scales.h"
#include "reshard/cast.h"
#include "reshard/error.h"
#include "reshard/numeric.h"
#include "util/parallel.h"

namespace reshard {
namespace {

enum class Kind { kFloat, kSigned, kUnsigned, kBool };

// Everything the oracle needs to know about a dtype.
struct Traits {
  DType dtype;
  int bytes;
  int bits;
  Kind kind;
  int exp_bits = 0;  // floats
  int man_bits = 0;
  uint64_t mask() const { return bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }
  // Largest integer magnitude M such that every integer in [-M, M] (or
  // [0, M] unsigned) is exact.
  uint64_t max_exact() const {
    switch (kind) {
      case Kind::kFloat:
        return uint64_t{1} << (man_bits + 1);
      case Kind::kSigned:
        return (uint64_t{1} << (bits - 1)) - 1;
      case Kind::kUnsigned:
        return mask();
      case Kind::kBool:
        return 1;
    }
    return 1;
  }
};

Traits dtype_traits(DType d) {
  switch (d) {
    case DType::kF64:
      return {d, 8, 64, Kind::kFloat, 11, 52};
    case DType::kF32:
      return {d, 4, 32, Kind::kFloat, 8, 23};
    case DType::kF16:
      return {d, 2, 16, Kind::kFloat, 5, 10};
    case DType::kBF16:
      return {d, 2, 16, Kind::kFloat, 8, 7};
    case DType::kF8E4M3:
      return {d, 1, 8, Kind::kFloat, 4, 3};
    case DType::kF8E5M2:
      return {d, 1, 8, Kind::kFloat, 5, 2};
    case DType::kI64:
      return {d, 8, 64, Kind::kSigned};
    case DType::kI32:
      return {d, 4, 32, Kind::kSigned};
    case DType::kI16:
      return {d, 2, 16, Kind::kSigned};
    case DType::kI8:
      return {d, 1, 8, Kind::kSigned};
    case DType::kU64:
      return {d, 8, 64, Kind::kUnsigned};
    case DType::kU32:
      return {d, 4, 32, Kind::kUnsigned};
    case DType::kU16:
      return {d, 2, 16, Kind::kUnsigned};
    case DType::kU8:
      return {d, 1, 8, Kind::kUnsigned};
    case DType::kBool:
      return {d, 1, 8, Kind::kBool};
    case DType::kE8M0:  // only scale tensors, whose bits ScaleReference gives
      return {d, 1, 8, Kind::kUnsigned};
  }
  fail(ErrorCode::kInvalidArgument, "oracle: invalid dtype " + std::to_string(static_cast<int>(d)));
}

double to_double(const Traits& t, uint64_t bits) {
  switch (t.dtype) {
    case DType::kF64: {
      double v;
      std::memcpy(&v, &bits, 8);
      return v;
    }
    case DType::kF32:
      return numeric::f32_from_bits(static_cast<uint32_t>(bits));
    case DType::kF16:
      return numeric::f16_to_f32(static_cast<uint16_t>(bits));
    case DType::kBF16:
      return numeric::bf16_to_f32(static_cast<uint16_t>(bits));
    case DType::kF8E4M3:
      return numeric::f8e4m3_to_f32(static_cast<uint8_t>(bits));
    case DType::kF8E5M2:
      return numeric::f8e5m2_to_f32(static_cast<uint8_t>(bits));
    default:
      return 0;
  }
}
// Only called with values the dtype holds exactly.
uint64_t from_double(const Traits& t, double v) {
  switch (t.dtype) {
    case DType::kF64: {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      return bits;
    }
    case DType::kF32:
      return numeric::f32_bits(static_cast<float>(v));
    case DType::kF16:
      return numeric::f32_to_f16(static_cast<float>(v));
    case DType::kBF16:
      return numeric::f32_to_bf16(static_cast<float>(v));
    case DType::kF8E4M3:
      return numeric::f32_to_f8e4m3(static_cast<float>(v));
    case DType::kF8E5M2:
      return numeric::f32_to_f8e5m2(static_cast<float>(v));
    default:
      return 0;
  }
}
int64_t sign_extend(const Traits& t, uint64_t bits) {
  if (t.bits == 64) return static_cast<int64_t>(bits);
  const uint64_t sign = uint64_t{1} << (t.bits - 1);
  bits &= t.mask();
  return static_cast<int64_t>((bits ^ sign) - sign);
}

// An element value in the dtype's arithmetic domain.
struct Value {
  double f = 0;    // floats
  uint64_t u = 0;  // integers (two's complement bits, sign-extended) and bool
};

Value decode(const Traits& t, uint64_t bits) {
  Value v;
  if (t.kind == Kind::kFloat)
    v.f = to_double(t, bits);
  else if (t.kind == Kind::kSigned)
    v.u = static_cast<uint64_t>(sign_extend(t, bits));
  else
    v.u = bits & t.mask();
  return v;
}

bool value_equal(const Traits& t, const Value& a, const Value& b) {
  if (t.kind == Kind::kFloat) return a.f == b.f;
  if (t.kind == Kind::kBool) return (a.u != 0) == (b.u != 0);
  return ((a.u ^ b.u) & t.mask()) == 0;
}

Value reduce(const Traits& t, ReduceOp op, const Value& a, const Value& b) {
  Value r;
  switch (t.kind) {
    case Kind::kFloat:
      r.f = op == ReduceOp::kSum   ? a.f + b.f
            : op == ReduceOp::kMax ? (b.f > a.f ? b.f : a.f)
                                   : (b.f < a.f ? b.f : a.f);
      break;
    case Kind::kSigned: {
      const int64_t x = static_cast<int64_t>(a.u), y = static_cast<int64_t>(b.u);
      r.u = op == ReduceOp::kSum   ? static_cast<uint64_t>(sign_extend(t, a.u + b.u))
            : op == ReduceOp::kMax ? static_cast<uint64_t>(std::max(x, y))
                                   : static_cast<uint64_t>(std::min(x, y));
      break;
    }
    case Kind::kUnsigned:
      r.u = op == ReduceOp::kSum   ? (a.u + b.u) & t.mask()
            : op == ReduceOp::kMax ? std::max(a.u, b.u)
                                   : std::min(a.u, b.u);
      break;
    case Kind::kBool:
      // sum and max are "or", min is "and".
      r.u = op == ReduceOp::kMin ? (a.u && b.u) : (a.u || b.u);
      break;
  }
  return r;
}

std::string format_value(const Traits& t, uint64_t bits, bool show_bits) {
  char buf[96];
  bits &= t.mask();
  switch (t.kind) {
    case Kind::kFloat:
      if (show_bits)
        std::snprintf(buf, sizeof buf, "%.9g (0x%0*" PRIx64 ")", to_double(t, bits), t.bytes * 2,
                      bits);
      else
        std::snprintf(buf, sizeof buf, "%.9g", to_double(t, bits));
      break;
    case Kind::kSigned:
      std::snprintf(buf, sizeof buf, "%" PRId64, sign_extend(t, bits));
      break;
    case Kind::kUnsigned:
      std::snprintf(buf, sizeof buf, "%" PRIu64, bits);
      break;
    case Kind::kBool:
      if (bits > 1)
        std::snprintf(buf, sizeof buf, "0x%02" PRIx64 " (not a bool)", bits);
      else
        std::snprintf(buf, sizeof buf, "%s", bits ? "true" : "false");
      break;
  }
  return buf;
}
std::string format_reduced(const Traits& t, const Value& v) {
  if (t.kind == Kind::kFloat) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.9g", v.f);
    return std::string(buf) + " (reduced)";
  }
  return format_value(t, v.u, false) + " (reduced)";
}

// The values of one tensor (see oracle.h).
class Generator {
 public:
  Generator(const TensorSpec& tensor, uint32_t tensor_index)
      : t_(dtype_traits(tensor.dtype)),
        o_(dtype_traits(out_dtype(tensor))),
        cast_(has_cast(tensor)),
        salt_(static_cast<uint64_t>(tensor_index) * 0x9E3779B1u),
        partial_(tensor.src.partial()),
        summands_(static_cast<uint64_t>(tensor.src.num_summands())),
        op_(tensor.src.reduce_op()),
        band_(summands_ == 0 ? 0 : t_.max_exact() / summands_),
        modulus_(t_.kind == Kind::kUnsigned ? band_ + 1 : 2 * band_ + 1) {}

  const Traits& traits() const { return t_; }
  // The destination's (a cast: TensorSpec::dst_dtype).
  const Traits& out_traits() const { return o_; }
  bool partial_source() const { return partial_; }

  // Bits of source summand `s` at global element index `i`.
  uint64_t source(uint64_t i, uint64_t s) const {
    const uint64_t k = i + salt_;
    if (!partial_) return pattern(k);
    return encode(summand_value(k, s));
  }
  // Bits of the reduced value at `i`.
  uint64_t expected(uint64_t i) const {
    const uint64_t k = i + salt_;
    // A cast: the reference conversion (reshard/cast.h) of the source value.
    if (cast_) return cast_bits(t_.dtype, o_.dtype, static_cast<uint32_t>(pattern(k)));
    if (!partial_) return pattern(k);
    if (op_ == ReduceOp::kMean) return encode_mean(total_value(k));
    return encode(total_value(k));
  }

 private:
  // Non-partial: the index itself, wrapped to the width; finite floats only.
  uint64_t pattern(uint64_t k) const {
    if (t_.kind == Kind::kBool) return k & 1;
    uint64_t b = k & t_.mask();
    if (t_.kind == Kind::kFloat) {
      const uint64_t exp_mask = ((uint64_t{1} << t_.exp_bits) - 1) << t_.man_bits;
      if ((b & exp_mask) == exp_mask) b &= ~(uint64_t{1} << (t_.exp_bits + t_.man_bits - 1));
    }
    return b;
  }
  // Partial sources: exact small integers, as int64 (unsigned kinds stay
  // non-negative).
  int64_t summand_value(uint64_t k, uint64_t s) const {
    if (t_.kind == Kind::kBool) {
      if (op_ == ReduceOp::kMin) return s == k % summands_ ? static_cast<int64_t>(k & 1) : 1;
      return s == k % summands_ ? static_cast<int64_t>(k & 1) : 0;
    }
    if (op_ == ReduceOp::kSum || op_ == ReduceOp::kMean) {
      // Summand s of element k: h = k (2s + 1) + s, folded into [-b, b]
      // ([0, b] unsigned), b = M / summands.
      if (band_ == 0) return s == 0 ? static_cast<int64_t>(k & 1) : 0;
      const uint64_t h = k * (2 * s + 1) + s;
      return static_cast<int64_t>(h % modulus_) - offset();
    }
    const int64_t base = base_value(k);
    if (s == k % summands_) return base;
    const int64_t r = 1 + static_cast<int64_t>((k + s) % 2);
    return op_ == ReduceOp::kMax ? base - r : base + r;
  }
  int64_t base_value(uint64_t k) const {
    const uint64_t p = std::min<uint64_t>(t_.max_exact() / 2, uint64_t{1} << 40);
    // Unsigned max needs room below the value for the other summands.
    if (t_.kind == Kind::kUnsigned && op_ == ReduceOp::kMax)
      return 2 + static_cast<int64_t>(k % (p - 2));
    return static_cast<int64_t>(k % p);
  }
  int64_t total_value(uint64_t k) const {
    if (t_.kind == Kind::kBool) return static_cast<int64_t>(k & 1);
    if (op_ != ReduceOp::kSum && op_ != ReduceOp::kMean) return base_value(k);
    // Sums stay within [-M, M]; unsigned sums within [0, M] (may exceed
    // int64 for u64, hence the unsigned accumulation).
    uint64_t total = 0;
    // h grows by 2k + 1 from one summand to the next, so its residue does
    // too: one division per element instead of one per summand, where no h
    // wraps (always, for tensors that fit in memory).
    const uint64_t n = summands_;
    if (band_ == 0 || modulus_ == 0 || k > (UINT64_MAX - n) / (2 * n)) {
      for (uint64_t s = 0; s < n; ++s) total += static_cast<uint64_t>(summand_value(k, s));
      return static_cast<int64_t>(total);
    }
    const uint64_t step = (2 * k + 1) % modulus_;
    const uint64_t offset_bits = static_cast<uint64_t>(offset());
    uint64_t r = k % modulus_;
    for (uint64_t s = 0; s < n; ++s) {
      total += r - offset_bits;
      r += step;
      if (r >= modulus_) r -= modulus_;
    }
    return static_cast<int64_t>(total);
  }
  // What a residue is shifted by: b for signed and float kinds, 0 unsigned.
  int64_t offset() const { return t_.kind == Kind::kUnsigned ? 0 : static_cast<int64_t>(band_); }
  // The mean as executors compute it: the exact sum divided once in the
  // accumulation type (f64 for f64, else f32), then rounded to the dtype.
  uint64_t encode_mean(int64_t total) const {
    if (t_.bytes == 8) {
      return from_double(t_, static_cast<double>(total) / static_cast<double>(summands_));
    }
    const float q = static_cast<float>(total) / static_cast<float>(summands_);
    return from_double(t_, static_cast<double>(q));
  }
  uint64_t encode(int64_t v) const {
    if (t_.kind == Kind::kFloat) return from_double(t_, static_cast<double>(v));
    return static_cast<uint64_t>(v) & t_.mask();
  }

  Traits t_;
  Traits o_;
  bool cast_;
  uint64_t salt_;
  bool partial_;
  uint64_t summands_;
  ReduceOp op_;
  uint64_t band_;     // b = M / summands (sums)
  uint64_t modulus_;  // 2b + 1, or b + 1 for unsigned kinds
};

// Fixed-width element access (little-endian hosts); the width is a template
// parameter so the copies compile to single moves.
template <int B>
inline uint64_t load(const std::byte* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, B);
  return v;
}
template <int B>
inline void store(std::byte* p, uint64_t v) {
  std::memcpy(p, &v, B);
}
// Calls f(std::integral_constant<int, bytes>).
template <typename F>
void with_width(int bytes, F&& f) {
  switch (bytes) {
    case 1:
      f(std::integral_constant<int, 1>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 4:
      f(std::integral_constant<int, 4>{});
      break;
    default:
      f(std::integral_constant<int, 8>{});
      break;
  }
}

// The checks run on one thread per hardware thread, at most 32.
int oracle_threads() { return std::min(resolve_threads(0), 32); }

// Calls f(global_index, local_index) for every element of `box` (row-major
// within the box) of a tensor of `shape`.
template <typename F>
void for_each_element(const Box& box, const std::vector<int64_t>& shape, F&& f) {
  if (box.empty()) return;
  const int rank = box.rank;
  if (rank == 0) {
    f(uint64_t{0}, int64_t{0});
    return;
  }
  std::array<int64_t, kMaxRank> stride{};
  stride[rank - 1] = 1;
  for (int d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];
  std::array<int64_t, kMaxRank> c = box.lo;
  const int64_t row = box.extent(rank - 1);
  int64_t local = 0;
  for (;;) {
    int64_t g = 0;
    for (int d = 0; d < rank; ++d) g += c[d] * stride[d];
    for (int64_t j = 0; j < row; ++j) f(static_cast<uint64_t>(g + j), local++);
    int d = rank - 2;
    for (; d >= 0; --d) {
      if (++c[d] < box.hi[d]) break;
      c[d] = box.lo[d];
    }
    if (d < 0) return;
  }
}

std::vector<int64_t> unravel(uint64_t index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    out[d] = shape[d] == 0 ? 0 : static_cast<int64_t>(index % static_cast<uint64_t>(shape[d]));
    if (shape[d] != 0) index /= static_cast<uint64_t>(shape[d]);
  }
  return out;
}

// Block scales (reshard/block_scales.h), computed here from the source
// values the Generator makes, block by block, independently of the
// executors' quantiser (block_scales.cc quantise_shard): the scales of the
// blocks in `blocks` (a box of the scale tensor) and the expected elements.
class ScaleReference {
 public:
  ScaleReference(const TensorSpec& value, uint32_t value_index, const Box& blocks)
      : value_(value),
        blocks_(blocks),
        from_(value.dtype),
        to_(out_dtype(value)),
        mx_(value.scale_dtype == DType::kE8M0) {
    const Generator gen(value, value_index);
    scales_.assign(static_cast<size_t>(blocks.volume()), 0.0f);
    std::vector<int64_t> extents(static_cast<size_t>(blocks.rank));
    for (int d = 0; d < blocks.rank; ++d) extents[static_cast<size_t>(d)] = blocks.extent(d);
    for_each_element(blocks, blocks_shape(), [&](uint64_t, int64_t b) {
      // Block b's elements: its coordinates from its row-major index.
      Box box;
      box.rank = blocks.rank;
      int64_t rest = b;
      for (int d = blocks.rank - 1; d >= 0; --d) {
        const int64_t c = blocks.lo[d] + rest % extents[static_cast<size_t>(d)];
        rest /= extents[static_cast<size_t>(d)];
        box.lo[d] = c * value.scale_block[static_cast<size_t>(d)];
        box.hi[d] = std::min(value.shape[static_cast<size_t>(d)],
                             box.lo[d] + value.scale_block[static_cast<size_t>(d)]);
      }
      float amax = 0;
      bool special = false;  // a NaN or an infinity
      for_each_element(box, value.shape, [&](uint64_t g, int64_t) {
        unsigned char bytes[8];
        const uint64_t x = gen.source(g, 0);
        std::memcpy(bytes, &x, sizeof bytes);
        const float a = std::fabs(cast_detail::load_f32(from_, bytes));
        if (!(a <= std::numeric_limits<float>::max())) special = true;
        if (a <= std::numeric_limits<float>::max() && a > amax) amax = a;
      });
      // MXFP8: the E8M0 bits, kept as a float in the same place.
      scales_[static_cast<size_t>(b)] =
          mx_ ? static_cast<float>(special ? 255 : mx_scale_bits(amax, to_))
              : block_scale(amax, to_);
    });
  }
  // The bits of scale element `g` (a global index of the scale tensor).
  uint64_t scale_bits(uint64_t g) const {
    const float s = scales_[block_of_scale(g)];
    return mx_ ? static_cast<uint64_t>(s) : numeric::f32_bits(s);
  }
  // cast(x / s) (f32), or for MXFP8 the saturating q of block bits `e8m0`:
  // x · 2^(127 - bits) in double (exact), clamped to the largest finite fp8
  // value, then cast; the NaN scale gives every element the cast of +NaN.
  uint64_t q_bits(float x, float s) const {
    if (!mx_) return cast_bits(DType::kF32, to_, numeric::f32_bits(x / s));
    const int bits = static_cast<int>(s);
    if (bits == 255) return cast_bits(DType::kF32, to_, 0x7fc00000u);
    const double m = to_ == DType::kF8E4M3 ? 448.0 : 57344.0;
    const double y = std::clamp(std::ldexp(static_cast<double>(x), 127 - bits), -m, m);
    return cast_bits(DType::kF32, to_, numeric::f32_bits(static_cast<float>(y)));
  }
  // Calls f(global_index, local_index, bits) for every element of `box` of
  // the value tensor (row-major within the box), bits = cast(x / s): the
  // walk of for_each_element, each element's block found from its
  // coordinates.
  template <typename F>
  void each_value(const Generator& gen, const Box& box, F&& f) const {
    if (box.empty()) return;
    const int rank = box.rank;
    const std::vector<int64_t>& shape = value_.shape;
    const std::vector<int64_t>& block = value_.scale_block;
    std::array<int64_t, kMaxRank> stride{};
    stride[rank - 1] = 1;
    for (int d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[static_cast<size_t>(d)];
    std::array<int64_t, kMaxRank> c = box.lo;
    const int last = rank - 1;
    const int64_t row = box.extent(last);
    const int64_t bl = block[static_cast<size_t>(last)];
    int64_t local = 0;
    for (;;) {
      int64_t g = 0, b = 0;
      for (int d = 0; d < rank; ++d) g += c[d] * stride[d];
      for (int d = 0; d < last; ++d)
        b = b * blocks_.extent(d) + (c[d] / block[static_cast<size_t>(d)] - blocks_.lo[d]);
      b *= blocks_.extent(last);
      for (int64_t j = 0; j < row; ++j) {
        const uint64_t gi = static_cast<uint64_t>(g + j);
        unsigned char bytes[8];
        const uint64_t x = gen.source(gi, 0);
        std::memcpy(bytes, &x, sizeof bytes);
        const float s =
            scales_[static_cast<size_t>(b + (box.lo[last] + j) / bl - blocks_.lo[last])];
        f(gi, local++, q_bits(cast_detail::load_f32(from_, bytes), s));
      }
      int d = last - 1;
      for (; d >= 0; --d) {
        if (++c[d] < box.hi[d]) break;
        c[d] = box.lo[d];
      }
      if (d < 0) return;
    }
  }

 private:
  std::vector<int64_t> blocks_shape() const {
    return scale_shape(value_.shape, value_.scale_block);
  }
  // Row-major index within blocks_ of a scale tensor's element.
  size_t block_of_scale(uint64_t g) const {
    const std::vector<int64_t> c = unravel(g, blocks_shape());
    return local_index(c);
  }
  size_t local_index(const std::vector<int64_t>& c) const {
    int64_t i = 0;
    for (int d = 0; d < blocks_.rank; ++d)
      i = i * blocks_.extent(d) + (c[static_cast<size_t>(d)] - blocks_.lo[d]);
    return static_cast<size_t>(i);
  }
  const TensorSpec& value_;
  Box blocks_;
  DType from_, to_;
  bool mx_;                    // e8m0 scales (MXFP8)
  std::vector<float> scales_;  // per block: the f32 scale, or the E8M0 bits
};

int64_t shard_bytes(const TensorSpec& tensor, const Layout& layout, size_t entry) {
  const DType d = &layout == &tensor.dst ? out_dtype(tensor) : tensor.dtype;
  return layout.box(entry).volume() * dtype_size(d);
}

void check_size(const TensorSpec& tensor, const Layout& layout, size_t entry, size_t bytes,
                const char* side) {
  if (entry >= layout.num_entries())
    fail(ErrorCode::kInvalidArgument, "oracle: tensor \"" + tensor.name + "\" " + side +
                                          " has no entry " + std::to_string(entry));
  const int64_t want = shard_bytes(tensor, layout, entry);
  if (static_cast<int64_t>(bytes) != want)
    fail(ErrorCode::kInvalidArgument, "oracle: tensor \"" + tensor.name + "\" " + side + "[" +
                                          std::to_string(entry) + "]: buffer of " +
                                          std::to_string(bytes) + " bytes, the shard needs " +
                                          std::to_string(want));
}

// `make` builds the mismatch (formatting its values) only when it is kept:
// a check of a half-done execution counts millions of mismatches.
template <typename MakeMismatch>
void add_mismatch(OracleReport& report, size_t max_reported, MakeMismatch&& make) {
  ++report.mismatches;
  if (report.first.size() < max_reported) report.first.push_back(make());
}

// Partial destinations: reduce the summands per element, chunked along dim 0
// to bound memory.
void check_partial_destination(const TensorSpec& tensor, uint32_t tensor_index,
                               const std::vector<std::vector<std::byte>>& data,
                               OracleReport& report, size_t max_reported) {
  const Generator gen(tensor, tensor_index);
  const Traits& t = gen.traits();
  const Layout& dst = tensor.dst;
  const ReduceOp op = dst.reduce_op();
  const std::vector<int64_t>& shape = tensor.shape;
  const int rank = static_cast<int>(shape.size());
  int64_t inner = 1;
  for (int d = 1; d < rank; ++d) inner *= shape[d];
  const int64_t rows = rank == 0 ? 1 : shape[0];
  const int64_t chunk_rows =
      rank == 0 ? 1 : std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(inner, 1));
  const int64_t stride0 = inner;

  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t r1 = std::min(rows, r0 + chunk_rows);
    const size_t n = static_cast<size_t>((r1 - r0) * (rank == 0 ? 1 : inner));
    if (n == 0) continue;
    std::vector<Value> total(n);
    std::vector<uint8_t> covered(n, 0);
    std::vector<uint64_t> cur(n);
    std::vector<uint8_t> seen(n);
    for (int32_t s = 0; s < dst.num_summands(); ++s) {
      std::fill(seen.begin(), seen.end(), 0);
      for (size_t e = 0; e < dst.num_entries(); ++e) {
        if (dst.summand(e) != s) continue;
        const Box box = dst.box(e);
        Box part = box;
        if (rank > 0) {
          part.lo[0] = std::max(box.lo[0], r0);
          part.hi[0] = std::min(box.hi[0], r1);
          if (part.hi[0] <= part.lo[0]) continue;
        }
        // Offset of `part` inside the entry's buffer, in elements.
        const int64_t skip =
            rank == 0 ? 0 : (part.lo[0] - box.lo[0]) * (box.volume() / box.extent(0));
        const std::byte* base = data[e].data();
        const uint64_t chunk_base = static_cast<uint64_t>(r0 * stride0);
        for_each_element(part, shape, [&](uint64_t g, int64_t local) {
          const size_t c = static_cast<size_t>(g - chunk_base);
          uint64_t bits = 0;
          std::memcpy(&bits, base + (skip + local) * t.bytes, static_cast<size_t>(t.bytes));
          bits &= t.mask();
          if (!seen[c]) {
            seen[c] = 1;
            cur[c] = bits;
          } else if (cur[c] != bits) {
            add_mismatch(report, max_reported, [&] {
              return OracleMismatch{tensor.name, dst.device(e), unravel(g, shape),
                                    format_value(t, cur[c], true) +
                                        " (same as the other replica of summand " +
                                        std::to_string(s) + ")",
                                    format_value(t, bits, true)};
            });
          }
        });
      }
      for (size_t c = 0; c < n; ++c) {
        if (!seen[c]) continue;
        const Value v = decode(t, cur[c]);
        total[c] = covered[c] ? reduce(t, op, total[c], v) : v;
        covered[c] = 1;
      }
    }
    for (size_t c = 0; c < n; ++c) {
      if (!covered[c]) continue;
      const uint64_t g = static_cast<uint64_t>(r0 * stride0) + c;
      const uint64_t want_bits = gen.expected(g);
      const Value want = decode(t, want_bits);
      if (!value_equal(t, want, total[c]))
        add_mismatch(report, max_reported, [&] {
          return OracleMismatch{tensor.name, -1, unravel(g, shape),
                                format_value(t, want_bits, !gen.partial_source()),
                                format_reduced(t, total[c])};
        });
    }
  }
  for (size_t e = 0; e < dst.num_entries(); ++e) {
    report.elements += dst.box(e).volume();
    report.bytes += shard_bytes(tensor, dst, e);
  }
}

template <typename T>
std::vector<T> checked_alloc(size_t n) {
  try {
    return std::vector<T>(n);
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::kOutOfMemory, "oracle: cannot allocate " + std::to_string(n) + " bytes");
  }
}

}  // namespace

std::vector<TensorBuffers> OracleBuffers::views() {
  std::vector<TensorBuffers> out(src.size());
  for (size_t t = 0; t < src.size(); ++t) {
    for (auto& b : src[t]) out[t].src.push_back({b.data(), static_cast<int64_t>(b.size())});
    for (auto& b : dst[t]) out[t].dst.push_back({b.data(), static_cast<int64_t>(b.size())});
  }
  return out;
}

void fill_source_shard(const TensorSpec& tensor, uint32_t tensor_index, size_t entry,
                       std::span<std::byte> out) {
  check_size(tensor, tensor.src, entry, out.size(), "src");
  const Generator gen(tensor, tensor_index);
  const uint64_t s = static_cast<uint64_t>(tensor.src.summand(entry));
  std::byte* p = out.data();
  with_width(gen.traits().bytes, [&](auto width) {
    constexpr int B = decltype(width)::value;
    for_each_element(tensor.src.box(entry), tensor.shape,
                     [&](uint64_t g, int64_t local) { store<B>(p + local * B, gen.source(g, s)); });
  });
}

void poison_destination_shard(const TensorSpec& tensor, uint32_t tensor_index, size_t entry,
                              std::span<std::byte> out) {
  check_size(tensor, tensor.dst, entry, out.size(), "dst");
  if (tensor.dst.partial()) {
    std::fill(out.begin(), out.end(), std::byte{0xA5});
    return;
  }
  // The complement of the expected value can never pass.
  const Generator gen(tensor, tensor_index);
  std::byte* p = out.data();
  if (has_block_scales(tensor)) {
    // cast(x / s) is a NaN only where x is: the complement of any NaN or
    // of any other pattern of the byte is a different byte.
    const ScaleReference ref(tensor, tensor_index,
                             blocks_touched(tensor.dst.box(entry), tensor.scale_block));
    ref.each_value(gen, tensor.dst.box(entry),
                   [&](uint64_t, int64_t local, uint64_t q) { store<1>(p + local, ~q); });
    return;
  }
  with_width(gen.out_traits().bytes, [&](auto width) {
    constexpr int B = decltype(width)::value;
    for_each_element(tensor.dst.box(entry), tensor.shape,
                     [&](uint64_t g, int64_t local) { store<B>(p + local * B, ~gen.expected(g)); });
  });
}

void poison_plan_destination_shard(std::span<const TensorSpec> tensors, uint32_t tensor_index,
                                   size_t entry, std::span<std::byte> out) {
  if (tensor_index >= tensors.size())
    fail(ErrorCode::kInvalidArgument, "oracle: tensor " + std::to_string(tensor_index) +
                                          " is out of range (" + std::to_string(tensors.size()) +
                                          " tensors)");
  const TensorSpec& tensor = tensors[tensor_index];
  for (size_t v = 0; v < tensors.size(); ++v) {
    if (tensors[v].scale_tensor != static_cast<int32_t>(tensor_index)) continue;
    check_size(tensor, tensor.dst, entry, out.size(), "dst");
    const Box box = tensor.dst.box(entry);
    const ScaleReference ref(tensors[v], static_cast<uint32_t>(v), box);
    std::byte* p = out.data();
    with_width(static_cast<int>(dtype_size(tensor.dtype)), [&](auto width) {
      constexpr int B = decltype(width)::value;
      for_each_element(box, tensor.shape, [&](uint64_t g, int64_t local) {
        store<B>(p + local * B, ~ref.scale_bits(g));
      });
    });
    return;
  }
  poison_destination_shard(tensor, tensor_index, entry, out);
}

int64_t oracle_buffer_bytes(const Plan& plan) {
  // Shard sizes are validated products of the shapes; their sum can still
  // exceed 64 bits for absurd specs, so it saturates.
  int64_t total = 0;
  for (const TensorSpec& t : plan.tensors())
    for (const Layout* l : {&t.src, &t.dst})
      for (size_t e = 0; e < l->num_entries(); ++e)
        if (__builtin_add_overflow(total, shard_bytes(t, *l, e), &total)) return INT64_MAX;
  return total;
}

OracleBuffers fill_sources(const Plan& plan, int64_t max_bytes) {
  if (max_bytes < kUnlimitedPlanBytes)
    fail(ErrorCode::kInvalidArgument,
         "max_bytes: " + std::to_string(max_bytes) +
             " is invalid (0: half the memory available; N > 0: N bytes; -1: no limit)");
  const int64_t limit = max_bytes == 0 ? default_max_plan_bytes() : max_bytes;
  const int64_t need = oracle_buffer_bytes(plan);
  // Allocation succeeds far beyond physical memory (overcommit) and the
  // kernel kills the process while the shards are filled: refuse first.
  if (limit != kUnlimitedPlanBytes && need > limit)
    fail(ErrorCode::kResourceExhausted,
         "oracle: the shards of every device (sources and destinations) need " +
             std::to_string(need) + " bytes of memory, above the limit of " +
             std::to_string(limit) + " bytes" +
             (max_bytes == 0 ? " (half the memory available)" : std::string()) +
             "; verify one process's shards at a time (fill_source_shard, "
             "check_destination_shard)");
  OracleBuffers buf;
  const auto& tensors = plan.tensors();
  buf.src.resize(tensors.size());
  buf.dst.resize(tensors.size());
  // Allocate everything first, then fill shards in parallel.
  struct Task {
    uint32_t tensor;
    size_t entry;
    bool src;
  };
  std::vector<Task> tasks;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& ts = tensors[t];
    const uint32_t ti = static_cast<uint32_t>(t);
    for (size_t e = 0; e < ts.src.num_entries(); ++e) {
      buf.src[t].push_back(
          checked_alloc<std::byte>(static_cast<size_t>(shard_bytes(ts, ts.src, e))));
      tasks.push_back({ti, e, true});
    }
    for (size_t e = 0; e < ts.dst.num_entries(); ++e) {
      buf.dst[t].push_back(
          checked_alloc<std::byte>(static_cast<size_t>(shard_bytes(ts, ts.dst, e))));
      tasks.push_back({ti, e, false});
    }
  }
  parallel_for(oracle_threads(), tasks.size(), [&](size_t i) {
    const Task& k = tasks[i];
    if (k.src)
      fill_source_shard(tensors[k.tensor], k.tensor, k.entry, buf.src[k.tensor][k.entry]);
    else
      poison_plan_destination_shard(tensors, k.tensor, k.entry, buf.dst[k.tensor][k.entry]);
  });
  return buf;
}

namespace {

// check_destination_shard; `scaled` (with its index) for a scale tensor:
// the tensor it scales.
void check_shard(const TensorSpec& tensor, uint32_t tensor_index, size_t entry,
                 std::span<const std::byte> data, OracleReport& report, size_t max_reported,
                 const std::vector<uint8_t>* only, const TensorSpec* scaled,
                 uint32_t scaled_index) {
  if (tensor.dst.partial())
    fail(ErrorCode::kInvalidArgument, "oracle: tensor \"" + tensor.name +
                                          "\" has a partial destination; check it with "
                                          "check_destinations");
  check_size(tensor, tensor.dst, entry, data.size(), "dst");
  if (only && only->size() != static_cast<size_t>(tensor.dst.box(entry).volume()))
    fail(ErrorCode::kInvalidArgument, "oracle: the element mask of tensor \"" + tensor.name +
                                          "\" entry " + std::to_string(entry) + " has " +
                                          std::to_string(only->size()) + " bytes");
  const Generator gen(tensor, tensor_index);
  const Traits& t = gen.out_traits();
  const bool by_value = gen.partial_source();
  const std::byte* p = data.data();
  const int64_t device = tensor.dst.device(entry);
  const uint64_t mask = t.mask();
  const Box box = tensor.dst.box(entry);
  std::optional<ScaleReference> ref;
  if (scaled != nullptr) ref.emplace(*scaled, scaled_index, box);
  if (has_block_scales(tensor))
    ref.emplace(tensor, tensor_index, blocks_touched(box, tensor.scale_block));
  with_width(t.bytes, [&](auto width) {
    constexpr int B = decltype(width)::value;
    const auto one = [&](uint64_t g, int64_t local, uint64_t expected) {
      if (only) {
        if (!(*only)[static_cast<size_t>(local)]) return;
        ++report.elements;
        report.bytes += B;
      }
      const uint64_t got = load<B>(p + local * B) & mask;
      const uint64_t want = expected & mask;
      if (got == want) return;
      if (by_value && value_equal(t, decode(t, want), decode(t, got))) return;
      add_mismatch(report, max_reported, [&] {
        return OracleMismatch{tensor.name, device, unravel(g, tensor.shape),
                              format_value(t, want, !by_value), format_value(t, got, !by_value)};
      });
    };
    if (ref && scaled == nullptr) {
      ref->each_value(gen, box, one);  // a tensor with block scales: cast(x / s)
      return;
    }
    for_each_element(box, tensor.shape, [&](uint64_t g, int64_t local) {
      one(g, local, ref ? ref->scale_bits(g) : gen.expected(g));
    });
  });
  if (only) return;
  report.elements += tensor.dst.box(entry).volume();
  report.bytes += shard_bytes(tensor, tensor.dst, entry);
}

}  // namespace

void check_destination_shard(const TensorSpec& tensor, uint32_t tensor_index, size_t entry,
                             std::span<const std::byte> data, OracleReport& report,
                             size_t max_reported, const std::vector<uint8_t>* only) {
  check_shard(tensor, tensor_index, entry, data, report, max_reported, only, nullptr, 0);
}

void check_plan_destination_shard(std::span<const TensorSpec> tensors, uint32_t tensor_index,
                                  size_t entry, std::span<const std::byte> data,
                                  OracleReport& report, size_t max_reported,
                                  const std::vector<uint8_t>* only) {
  if (tensor_index >= tensors.size())
    fail(ErrorCode::kInvalidArgument, "oracle: tensor " + std::to_string(tensor_index) +
                                          " is out of range (" + std::to_string(tensors.size()) +
                                          " tensors)");
  const TensorSpec* scaled = nullptr;
  uint32_t scaled_index = 0;
  for (size_t v = 0; v < tensors.size(); ++v)
    if (tensors[v].scale_tensor == static_cast<int32_t>(tensor_index)) {
      scaled = &tensors[v];
      scaled_index = static_cast<uint32_t>(v);
    }
  check_shard(tensors[tensor_index], tensor_index, entry, data, report, max_reported, only, scaled,
              scaled_index);
}

OracleReport check_destinations(const Plan& plan, const OracleBuffers& buffers,
                                size_t max_reported) {
  const auto& tensors = plan.tensors();
  if (buffers.dst.size() != tensors.size())
    fail(ErrorCode::kInvalidArgument, "oracle: buffers for " + std::to_string(buffers.dst.size()) +
                                          " tensors, the plan has " +
                                          std::to_string(tensors.size()));
  // One task per shard (per tensor for partial destinations); the reports
  // merge in task order, so the result does not depend on the threads.
  struct Task {
    uint32_t tensor;
    size_t entry;  // SIZE_MAX: the whole (partial) tensor
  };
  std::vector<Task> tasks;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& ts = tensors[t];
    const auto& dst = buffers.dst[t];
    if (dst.size() != ts.dst.num_entries())
      fail(ErrorCode::kInvalidArgument,
           "oracle: tensors[" + std::to_string(t) + "].dst: " + std::to_string(dst.size()) +
               " buffers for " + std::to_string(ts.dst.num_entries()) + " entries");
    for (size_t e = 0; e < dst.size(); ++e) check_size(ts, ts.dst, e, dst[e].size(), "dst");
    if (ts.dst.partial())
      tasks.push_back({static_cast<uint32_t>(t), SIZE_MAX});
    else
      for (size_t e = 0; e < dst.size(); ++e) tasks.push_back({static_cast<uint32_t>(t), e});
  }
  std::vector<OracleReport> partial_reports(tasks.size());
  parallel_for(oracle_threads(), tasks.size(), [&](size_t i) {
    const Task& k = tasks[i];
    const TensorSpec& ts = tensors[k.tensor];
    if (k.entry == SIZE_MAX)
      check_partial_destination(ts, k.tensor, buffers.dst[k.tensor], partial_reports[i],
                                max_reported);
    else
      check_plan_destination_shard(tensors, k.tensor, k.entry, buffers.dst[k.tensor][k.entry],
                                   partial_reports[i], max_reported);
  });
  OracleReport report;
  report.tensors = static_cast<int64_t>(tensors.size());
  for (OracleReport& r : partial_reports) {
    report.elements += r.elements;
    report.bytes += r.bytes;
    report.mismatches += r.mismatches;
    for (OracleMismatch& m : r.first)
      if (report.first.size() < max_reported) report.first.push_back(std::move(m));
  }
  return report;
}

StageCoverage stage_coverage(const Plan& plan, uint32_t stage) {
  const auto& tensors = plan.tensors();
  StageCoverage cov;
  cov.stage = stage;
  cov.written.resize(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t)
    if (!tensors[t].dst.partial()) cov.written[t].resize(tensors[t].dst.num_entries());
  // `value` 1 marks a region written; 0 unmarks the region of a scratch's
  // contribution of a later stage (its reduction is not finished).
  const auto mark = [&](const ProcessPart& part, const Piece& piece, uint8_t value = 1) {
    if (piece.tensor >= tensors.size()) return;
    auto& entries = cov.written[piece.tensor];
    if (entries.empty()) return;  // partial destination
    // Scratch is internal to the executors: nothing to check there.
    if (piece.dst_entry >= entries.size()) return;
    const Box box = tensors[piece.tensor].dst.box(piece.dst_entry);
    std::vector<uint8_t>& mask = entries[piece.dst_entry];
    if (mask.empty()) mask.assign(static_cast<size_t>(box.volume()), 0);
    // The region relative to the entry's box: its index in that "shape" is
    // the element's index in the entry's buffer.
    Box rel = plan.region(part, piece);
    std::vector<int64_t> extents(static_cast<size_t>(box.rank));
    for (int d = 0; d < box.rank; ++d) {
      rel.lo[d] -= box.lo[d];
      rel.hi[d] -= box.lo[d];
      extents[static_cast<size_t>(d)] = box.extent(d);
    }
    for_each_element(rel, extents, [&](uint64_t local, int64_t) { mask[local] = value; });
  };
  for (const auto& [p, part] : plan.parts()) {
    for (const Piece& piece : part.local) mark(part, piece);
    for (const Message& m : part.recvs) {
      if (m.stage > stage) continue;
      for (uint64_t i = m.first_piece; i < m.first_piece + m.num_pieces; ++i)
        mark(part, part.recv_pieces[i]);
    }
  }
  for (const auto& [p, part] : plan.parts()) {
    for (const Message& m : part.recvs) {
      if (m.stage <= stage) continue;
      for (uint64_t i = m.first_piece; i < m.first_piece + m.num_pieces; ++i) {
        if (part.recv_pieces[i].src_entry == kScratchEntry) mark(part, part.recv_pieces[i], 0);
      }
    }
  }
  return cov;
}

OracleReport check_destinations_through_stage(const Plan& plan, const OracleBuffers& buffers,
                                              uint32_t stage, size_t max_reported) {
  const auto& tensors = plan.tensors();
  if (buffers.dst.size() != tensors.size())
    fail(ErrorCode::kInvalidArgument, "oracle: buffers for " + std::to_string(buffers.dst.size()) +
                                          " tensors, the plan has " +
                                          std::to_string(tensors.size()));
  for (int32_t p : plan.processes())
    if (!plan.parts().contains(p))
      fail(ErrorCode::kInvalidArgument,
           "oracle: the plan lacks the part of process " + std::to_string(p));
  const StageCoverage cov = stage_coverage(plan, stage);
  OracleReport report;
  report.tensors = static_cast<int64_t>(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (buffers.dst[t].size() != tensors[t].dst.num_entries())
      fail(ErrorCode::kInvalidArgument,
           "oracle: tensors[" + std::to_string(t) +
               "].dst: " + std::to_string(buffers.dst[t].size()) + " buffers for " +
               std::to_string(tensors[t].dst.num_entries()) + " entries");
    for (size_t e = 0; e < cov.written[t].size(); ++e) {
      if (cov.written[t][e].empty()) continue;
      check_plan_destination_shard(tensors, static_cast<uint32_t>(t), e, buffers.dst[t][e], report,
                                   max_reported, &cov.written[t][e]);
    }
  }
  return report;
}

}  // namespace reshard
