// Block scales (reshard/block_scales.h): the scale tensor's shape and
// layouts derived from the tensor it scales and their checks (the quantiser:
// block_quantise.cc).
#include "reshard/block_scales.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "reshard/cast.h"

namespace reshard {

namespace {

std::string block_str(std::span<const int64_t> b) {
  std::string r = "[";
  for (size_t i = 0; i < b.size(); ++i) r += (i ? ", " : "") + std::to_string(b[i]);
  return r + "]";
}

// The block's rank and extents, and the value's dtypes.
void check_block(const TensorSpec& value, std::span<const int64_t> block, const std::string& field,
                 const std::string& cast_field, ErrorCode code, DType scale_dtype) {
  if (value.shape.empty())
    fail(code, field,
         "block scales need a tensor of rank 1 or more (\"" + value.name + "\" is a scalar)");
  if (block.size() != value.shape.size())
    fail(code, field,
         "has " + std::to_string(block.size()) + " extents, the tensor has rank " +
             std::to_string(value.shape.size()));
  for (size_t d = 0; d < block.size(); ++d)
    if (block[d] < 1)
      fail(code, field + "[" + std::to_string(d) + "]",
           "a block extent must be at least 1, got " + std::to_string(block[d]));
  if (scale_dtype == DType::kE8M0) {
    // OCP MX: k = 32 consecutive elements; the shared exponent is defined
    // for a vector, so the other dims' extents are 1.
    for (size_t d = 0; d < block.size(); ++d) {
      const int64_t want = d + 1 == block.size() ? kMxBlock : 1;
      if (block[d] != want)
        fail(code, field + "[" + std::to_string(d) + "]",
             "e8m0 (MXFP8) scales need the block [1, ..., 1, 32] (32 consecutive elements of the "
             "last dim), got " +
                 block_str(block));
    }
  }
  const DType out = out_dtype(value);
  if (block_scale_max(out) == 0)
    fail(code == ErrorCode::kCorrupt ? code : ErrorCode::kUnsupported, cast_field,
         "block scales need a destination dtype of f8e4m3 or f8e5m2, not " +
             std::string(dtype_name(out)));
  if (value.dtype != DType::kF32 && value.dtype != DType::kBF16 && value.dtype != DType::kF16)
    fail(code == ErrorCode::kCorrupt ? code : ErrorCode::kUnsupported, cast_field,
         "block scales need a source dtype of f32, bf16 or f16, not " +
             std::string(dtype_name(value.dtype)));
}

// Every entry of `layout`, its box mapped by `map`, on the same device.
template <class Map>
Layout derived(const Layout& layout, std::span<const int64_t> shape, const std::string& field,
               Map map) {
  std::vector<LayoutEntry> entries;
  entries.reserve(layout.num_entries());
  for (size_t e = 0; e < layout.num_entries(); ++e)
    entries.push_back({layout.device(e), 0, map(e, layout.box(e))});
  return Layout::from_boxes(shape, std::move(entries), 1, ReduceOp::kSum, field);
}

}  // namespace

int mx_emax(DType dst) { return dst == DType::kF8E4M3 ? 8 : dst == DType::kF8E5M2 ? 15 : 0; }

uint8_t mx_scale_bits(float amax, DType dst) {
  if (!(amax <= std::numeric_limits<float>::max())) return 255;  // NaN or infinite
  if (amax == 0) return 0;
  // ilogb is floor(log2) for every finite non-zero value, subnormals included.
  const int e = std::max(std::ilogb(amax) - mx_emax(dst), -127);
  return static_cast<uint8_t>(e + 127);
}

float e8m0_to_f32(uint8_t bits) {
  if (bits == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);
}

bool scale_dtype_supported(DType scale_dtype) {
  return scale_dtype == DType::kF32 || scale_dtype == DType::kE8M0;
}

float block_scale_max(DType dst) {
  return dst == DType::kF8E4M3 ? 448.0f : dst == DType::kF8E5M2 ? 57344.0f : 0.0f;
}

float block_scale(float amax, DType dst) {
  if (!(amax > 0)) return 1.0f;
  // Not below the least normal f32: a subnormal scale has too few bits, and
  // x / s could round past the destination's largest value.
  return std::max(amax / block_scale_max(dst), std::numeric_limits<float>::min());
}

std::vector<int64_t> scale_shape(std::span<const int64_t> shape, std::span<const int64_t> block) {
  std::vector<int64_t> r(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) r[d] = (shape[d] + block[d] - 1) / block[d];
  return r;
}

Box blocks_touched(const Box& box, std::span<const int64_t> block) {
  Box r;
  r.rank = box.rank;
  for (int d = 0; d < box.rank; ++d) {
    r.lo[d] = box.lo[d] / block[d];
    r.hi[d] = box.hi[d] > box.lo[d] ? (box.hi[d] + block[d] - 1) / block[d] : r.lo[d];
  }
  return r;
}

Layout scale_src_layout(const TensorSpec& value, std::span<const int64_t> block,
                        const std::string& field) {
  const std::vector<int64_t> shape = scale_shape(value.shape, block);
  return derived(value.src, shape, field, [&](size_t e, const Box& box) {
    for (int d = 0; box.volume() > 0 && d < box.rank; ++d) {
      const bool lo_ok = box.lo[d] % block[d] == 0;
      const bool hi_ok = box.hi[d] % block[d] == 0 || box.hi[d] == value.shape[d];
      if (!lo_ok || !hi_ok)
        fail(ErrorCode::kUnsupported, field,
             "source entry " + std::to_string(e) + " (device " +
                 std::to_string(value.src.device(e)) + ") holds " + to_string(box) +
                 ", which cuts a block of " + block_str(block) + " in dim " + std::to_string(d) +
                 ": block scales are computed on the sending side, so every source shard must "
                 "start and end on block boundaries");
    }
    return blocks_touched(box, block);
  });
}

Layout scale_dst_layout(const TensorSpec& value, std::span<const int64_t> block,
                        const std::string& field) {
  return derived(value.dst, scale_shape(value.shape, block), field,
                 [&](size_t, const Box& box) { return blocks_touched(box, block); });
}

void add_block_scales(std::vector<TensorSpec>& tensors, size_t value, std::string name,
                      std::vector<int64_t> block, const std::string& field, DType scale_dtype) {
  TensorSpec& v = tensors[value];
  if (!scale_dtype_supported(scale_dtype))
    fail(ErrorCode::kUnsupported, field + ".dtype",
         "block scales are f32 (DeepSeek-V3's) or e8m0 (MXFP8's), not " +
             std::string(dtype_name(scale_dtype)));
  check_block(v, block, field + ".block", field, ErrorCode::kInvalidArgument, scale_dtype);
  TensorSpec s;
  s.name = std::move(name);
  s.shape = scale_shape(v.shape, block);
  s.dtype = scale_dtype;
  s.src = scale_src_layout(v, block, field + ".block");
  s.dst = scale_dst_layout(v, block, field + ".block");
  v.scale_tensor = static_cast<int32_t>(tensors.size());
  v.scale_block = std::move(block);
  v.scale_dtype = scale_dtype;
  tensors.push_back(std::move(s));
}

void validate_block_scales(std::span<const TensorSpec> tensors, ErrorCode code) {
  std::vector<int64_t> scaled_by(tensors.size(), -1);
  // e8m0 is a scale dtype only.
  const std::vector<uint8_t> is_scale = scale_tensor_flags(tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    if ((t.dtype == DType::kE8M0 || out_dtype(t) == DType::kE8M0) && !(is_scale[i] && !has_cast(t)))
      fail(code, "tensors[" + std::to_string(i) + "].dtype",
           "e8m0 is only the dtype of MXFP8 block scales (a destination's \"scales\"), not of a "
           "tensor of its own");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& v = tensors[i];
    const std::string f = "tensors[" + std::to_string(i) + "]";
    if (v.scale_tensor < 0) {
      if (v.scale_tensor != -1)
        fail(code, f + ".scale_tensor",
             "must be -1 (none) or a tensor index, got " + std::to_string(v.scale_tensor));
      if (!v.scale_block.empty()) fail(code, f + ".scale_block", "given without a scale tensor");
      continue;
    }
    const size_t s = static_cast<size_t>(v.scale_tensor);
    if (s >= tensors.size() || s == i)
      fail(code, f + ".scale_tensor",
           std::to_string(s) + " is " + (s == i ? "the tensor itself" : "out of range"));
    if (scaled_by[s] >= 0)
      fail(code, f + ".scale_tensor",
           "tensors[" + std::to_string(s) + "] already scales tensors[" +
               std::to_string(scaled_by[s]) + "]");
    scaled_by[s] = static_cast<int64_t>(i);
    const TensorSpec& t = tensors[s];
    const std::string g = "tensors[" + std::to_string(s) + "]";
    check_block(v, v.scale_block, f + ".scale_block", f + ".dst_dtype", code, t.dtype);
    if (t.scale_tensor >= 0)
      fail(code, g + ".scale_tensor",
           "the scale tensor of tensors[" + std::to_string(i) + "] has block scales itself");
    if (!scale_dtype_supported(t.dtype) || has_cast(t))
      fail(code, g + ".dtype",
           "the scale tensor of tensors[" + std::to_string(i) +
               "] must be f32 or e8m0 without a cast");
    if (v.scale_dtype != t.dtype)
      fail(code, f + ".scale_dtype",
           std::string(dtype_name(v.scale_dtype)) + " is not the dtype of its scale tensor (" +
               std::string(dtype_name(t.dtype)) + ")");
    if (t.shape != scale_shape(v.shape, v.scale_block))
      fail(code, g + ".shape",
           block_str(t.shape) + " is not the scale shape " +
               block_str(scale_shape(v.shape, v.scale_block)) + " of tensors[" + std::to_string(i) +
               "] (ceil of its shape over the block)");
    if (!(t.src == scale_src_layout(v, v.scale_block, f + ".scale_block")))
      fail(code, g + ".src",
           "is not the layout derived from tensors[" + std::to_string(i) +
               "]'s source (one entry per source entry, the blocks its box holds)");
    if (!(t.dst == scale_dst_layout(v, v.scale_block, f + ".scale_block")))
      fail(code, g + ".dst",
           "is not the layout derived from tensors[" + std::to_string(i) +
               "]'s destination (one entry per destination entry, the blocks its box touches)");
  }
}

void derive_scale_dtypes(std::vector<TensorSpec>& tensors) {
  for (TensorSpec& t : tensors)
    if (t.scale_tensor >= 0 && static_cast<size_t>(t.scale_tensor) < tensors.size())
      t.scale_dtype = tensors[static_cast<size_t>(t.scale_tensor)].dtype;
}

std::vector<uint8_t> scale_tensor_flags(std::span<const TensorSpec> tensors) {
  std::vector<uint8_t> r(tensors.size(), 0);
  for (const TensorSpec& t : tensors)
    if (t.scale_tensor >= 0 && static_cast<size_t>(t.scale_tensor) < r.size())
      r[static_cast<size_t>(t.scale_tensor)] = 1;
  return r;
}

}  // namespace reshard
