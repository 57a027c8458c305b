// Internal: cast on send with block scales (reshard/block_scales.h), the
// sending side's two passes, used by the engine
// (exec/engine/scaled_sources.h). First the scales of each source shard
// (block_scales_part), then every copy out of the shard quantises straight
// to the fp8 destination dtype (quantise_span, quantise_runs): one byte per
// element, bit for bit quantise_shard's values cast to the destination.
// Defined in block_quantise.cc beside the quantiser they share.
#pragma once

#include <cstdint>

#include "reshard/block_scales.h"
#include "reshard/box_copy.h"

namespace reshard {

// The scales of `part` (a box of quantise_parts(box, ...)) of a source
// shard, written at their places in the shard's `scales`
// (blocks_touched(box), row-major, of `scale_dtype`), reading only the
// part: quantise_part's scales, without its values.
void block_scales_part(const TensorSpec& value, DType scale_dtype, const Box& box, const Box& part,
                       const void* src, void* scales);

// Elements [offset, offset + n) of the shard (row-major in `box`, at
// `src`) quantised straight to out_dtype(value) at `dst`, one byte each,
// with the shard's `scales` from block_scales_part.
void quantise_span(const TensorSpec& value, DType scale_dtype, const Box& box, const void* scales,
                   const void* src, int64_t offset, int64_t n, void* dst);

// quantise_span over runs [first_run, last_run) of `desc`, a copy out of
// the shard (its source offsets index `box`) into fp8 elements at `dst`:
// how a message is packed, or a local copy made, from a scaled source.
void quantise_runs(const TensorSpec& value, DType scale_dtype, const Box& box, const void* scales,
                   const CopyDesc& desc, int64_t first_run, int64_t last_run, const void* src,
                   void* dst);

}  // namespace reshard
