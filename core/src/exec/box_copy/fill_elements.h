// Internal: identity fills of whole destination buffers, on the host (the
// engine's partial destinations) and in the CUDA backend's descriptor
// preparation.
#pragma once

#include <cstdint>

#include "reshard/box_copy.h"
#include "reshard/dtype.h"

namespace reshard::exec_detail {

// Fills the n elements of a destination buffer of `dtype` with the identity
// of `op` (used for partial destinations: elements no piece writes then hold
// the identity, so the destination summands still combine to the value).
void fill_identity_elements(DType dtype, ReduceOp op, void* dst, int64_t n);

}  // namespace reshard::exec_detail
