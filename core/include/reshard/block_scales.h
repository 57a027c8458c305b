// reshard — block scales for fp8 destinations (docs/spec.md "Block scales"):
// the scale tensor's shape and layouts, derived from the tensor it scales
// (TensorSpec::scale_tensor, TensorSpec::scale_block), and the one
// quantiser every executor and the oracle use.
//
// A tensor cast to f8e4m3 or f8e5m2 may carry block scales: its elements
// are grouped into blocks of `block` (per dim; the last block of a dim may
// be short), and each block b has one f32 scale
//   s_b = amax_b / M,  amax_b = max |x| over the block's finite elements,
// M = 448 (f8e4m3) or 57344 (f8e5m2), rounded once (f32 division, nearest
// even), and at least the least normal f32 (2^-126: a subnormal scale has
// too few bits, and x / s could round past M); s_b = 1 where amax is 0 (a
// block of zeros or of non-finite values only). The destination holds
// q = cast(x / s_b) (f32 division, then the cast's rules of reshard/cast.h:
// nearest even, NaN stays NaN, ±Inf becomes NaN in f8e4m3 and stays ±Inf in
// f8e5m2), and the scale tensor, of shape ceil(shape / block), holds s_b:
// x ≈ q · s_b (DeepSeek-V3's weight_dequant with 128×128 blocks).
//
// Scales are computed where the values are read, on the sending side, so
// every block must lie whole in every source shard that holds part of it:
// each source entry's box starts on a block boundary and ends on one or at
// the end of the dim ("block-aligned"). Other source layouts are refused.
// The scale tensor's source layout has one entry per source entry of the
// tensor, on the same device, holding the blocks of its box; its destination
// layout has one entry per destination entry, on the same device, holding
// every block its box touches. Executors compute the source side themselves
// (a caller gives no source buffers for a scale tensor).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reshard/box.h"
#include "reshard/dtype.h"
#include "reshard/error.h"
#include "reshard/layout.h"
#include "reshard/plan.h"

namespace reshard {

// The largest finite value of an fp8 destination with block scales: 448
// (f8e4m3), 57344 (f8e5m2); 0 for any other dtype (no block scales).
float block_scale_max(DType dst);

// The scale of one block from amax (the largest |x| over its finite
// elements, 0 when none): max(amax / block_scale_max(dst), 2^-126), or 1
// where amax is 0.
float block_scale(float amax, DType dst);

// MXFP8 (scale dtype e8m0): the block extent along the last dim.
inline constexpr int64_t kMxBlock = 32;

// The exponent of the largest power of two an fp8 destination holds: 8
// (f8e4m3), 15 (f8e5m2); 0 for any other dtype.
int mx_emax(DType dst);

// The E8M0 bits of an MXFP8 block's scale from amax, the largest |x| over
// all its elements (NaN or infinite when one is): 255 (NaN) where amax is
// not finite, else floor(log2(amax)) - mx_emax(dst) + 127, at least 0 (a
// block of zeros gets 0).
uint8_t mx_scale_bits(float amax, DType dst);

// The value of E8M0 bits: 2^(bits - 127), NaN for 255.
float e8m0_to_f32(uint8_t bits);

// True when `scale_dtype` names a block-scale rule: f32 (amax / M) or e8m0
// (MXFP8).
bool scale_dtype_supported(DType scale_dtype);

// ceil(shape[d] / block[d]) per dim.
std::vector<int64_t> scale_shape(std::span<const int64_t> shape, std::span<const int64_t> block);

// The blocks a box touches (destination side) and the blocks it holds whole
// (source side, where the box is block-aligned these are the same), as a
// box of the scale tensor.
Box blocks_touched(const Box& box, std::span<const int64_t> block);

// The scale tensor's layouts for tensor `value` with blocks `block`. The
// source layout requires block-aligned source boxes: otherwise throws
// kUnsupported naming `field` and the first entry whose box cuts a block.
Layout scale_src_layout(const TensorSpec& value, std::span<const int64_t> block,
                        const std::string& field);
Layout scale_dst_layout(const TensorSpec& value, std::span<const int64_t> block,
                        const std::string& field);

// Gives tensors[value] block scales: appends its scale tensor, named
// `name`, of dtype `scale_dtype` (f32 or e8m0), at the end of `tensors` and
// sets the value's scale_tensor and scale_block. Errors name `field` (the
// spec's "tensors[i].dst.scales"): block of the wrong rank or with an
// extent below 1, or for e8m0 not [1, ..., 1, 32] (".block"), a tensor not
// cast to f8e4m3 or f8e5m2, source boxes that cut a block.
void add_block_scales(std::vector<TensorSpec>& tensors, size_t value, std::string name,
                      std::vector<int64_t> block, const std::string& field,
                      DType scale_dtype = DType::kF32);

// Checks every tensor's block scales (make_plan: `code` kInvalidArgument,
// the plan decoder: kCorrupt): the block's rank and extents, the value's
// cast, the scale tensor's index (another tensor, scaling none itself,
// scale of no other), its dtype (f32 or e8m0, no cast; e8m0 with the MXFP8
// block), shape and both layouts (equal to the derived ones), and that no
// other tensor has dtype e8m0. Errors name "tensors[i].scale_tensor",
// "tensors[i].scale_block", "tensors[i].dtype" or the scale tensor's field.
void validate_block_scales(std::span<const TensorSpec> tensors, ErrorCode code);

// Sets every tensor's scale_dtype from its scale tensor's dtype (an index
// out of range is left for validate_block_scales).
void derive_scale_dtypes(std::vector<TensorSpec>& tensors);

// True for tensors that are some tensor's scale tensor (indexed like
// `tensors`).
std::vector<uint8_t> scale_tensor_flags(std::span<const TensorSpec> tensors);

// Quantises one source shard of a tensor with block scales: `box` (block-
// aligned) of `value`'s source dtype at `src` (row-major), into `scales`
// (blocks_touched(box), row-major, of `scale_dtype`: the scale tensor's,
// f32 or e8m0) and `out` (box, the source dtype: each q widened back to it,
// exactly, so that the executors' ordinary cast to the destination dtype
// reproduces q bit for bit).
void quantise_shard(const TensorSpec& value, DType scale_dtype, const Box& box, const void* src,
                    void* scales, void* out);

// quantise_shard restricted to `part`, a box of quantise_parts(box, ...):
// writes the scales of the part's blocks and the part's elements, at their
// places in the shard's `scales` and `out`, and reads nothing else. The
// parts of a shard may be quantised at once on different threads.
void quantise_part(const TensorSpec& value, DType scale_dtype, const Box& box, const Box& part,
                   const void* src, void* scales, void* out);

// Splits a block-aligned source box into parts of whole blocks of about
// `elements` elements each (at least one block): dim 0 in runs of whole
// blocks, and where one block of dim 0 holds more than `elements`, the last
// dim in runs of whole blocks too. Empty for an empty box.
std::vector<Box> quantise_parts(const Box& box, std::span<const int64_t> block, int64_t elements);

}  // namespace reshard
