// The launch shell of the fused copy kernels (kernels.cu): one launch per
// Launch of copy_plan.h, blocks striding over its tiles.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_body.h"

namespace reshard::cuda_backend {

// Launches run_tile<element, multi, swizzled> over `tiles` tiles of the `n` works at
// `works` / `tile_start` / `tile_work` (null, or each tile's Work) /
// `sources` (the summands of kReduceN Works) / `grids` (the scaled shards
// of kBlockScales and kQuantise Works; device memory, valid until the
// kernel completes), with at most `max_blocks` blocks, on `stream` of the
// current device. Returns the launch status.
cudaError_t launch_tiles(bool element, bool multi, bool swizzled, const Work* works,
                         const int64_t* tile_start, const int32_t* tile_work, const SrcRef* sources,
                         const ScaleGrid* grids, int n, int64_t tiles, int max_blocks,
                         cudaStream_t stream);

}  // namespace reshard::cuda_backend
