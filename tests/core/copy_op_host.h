// One transport copy operation (reshard/transport.h, CopyOp) applied on host
// memory with the host functions of reshard/box_copy.h of the same names:
// the reference the GPU kernels are checked against (tests/gpu/copy_cases.h)
// and what the emulated device transports of the engine tests run
// (thread_transport.h).
#pragma once

#include "layout/quantise_copy.h"
#include "reshard/box_copy.h"
#include "reshard/cast.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

namespace reshard::testing {

// The tensor of a kBlockScales or kQuantise op's shard, as the host
// quantiser reads it (dtype, destination dtype, block).
inline TensorSpec scaled_value(const CopyOp& op) {
  TensorSpec v;
  v.dtype = op.dtype;
  v.dst_dtype = op.to_dtype;
  v.scale_block.assign(op.shard->block.begin(), op.shard->block.begin() + op.shard->box.rank);
  return v;
}

// Applies `op` reading `src` and writing `dst` in place of op.src and op.dst
// (the caller may pass aligned copies of them).
inline void apply_copy_op(const CopyOp& op, const void* src, void* dst) {
  switch (op.kind) {
    case CopyOp::Kind::kCopy:
      copy_box(op.desc, dtype_size(op.dtype), src, dst);
      break;
    case CopyOp::Kind::kReduce:
      reduce_into(op.desc, op.dtype, op.op, src, dst);
      break;
    case CopyOp::Kind::kFillAcc:
      fill_identity(op.dtype, op.op, dst, op.count);
      break;
    case CopyOp::Kind::kFillElements:
      fill_identity_elements(op.dtype, op.op, dst, op.count);
      break;
    case CopyOp::Kind::kStore:
      if (op.divisor > 1) {
        store_mean_from_acc(op.dtype, src, dst, op.count, op.divisor);
      } else {
        store_from_acc(op.dtype, src, dst, op.count);
      }
      break;
    case CopyOp::Kind::kCast:
      cast_box(op.desc, op.dtype, op.to_dtype, src, dst);
      break;
    case CopyOp::Kind::kBlockScales:
      block_scales_part(scaled_value(op), op.shard->scale_dtype, op.shard->box, op.shard->box, src,
                        dst);
      break;
    case CopyOp::Kind::kQuantise:
      quantise_runs(scaled_value(op), op.shard->scale_dtype, op.shard->box, op.shard->scales,
                    op.desc, 0, copy_desc_runs(op.desc), src, dst);
      break;
  }
}

}  // namespace reshard::testing
