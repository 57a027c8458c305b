// One transport copy operation (reshard/transport.h, CopyOp) applied on host
// memory with the host functions of reshard/box_copy.h of the same names:
// the reference the GPU kernels are checked against (tests/gpu/copy_cases.h)
// and what the emulated device transports of the engine tests run
// (thread_transport.h).
#pragma once

#include "reshard/box_copy.h"
#include "reshard/cast.h"
#include "reshard/transport.h"

namespace reshard::testing {

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
  }
}

}  // namespace reshard::testing
