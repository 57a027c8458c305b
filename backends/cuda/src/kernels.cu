// The fused pack / unpack / reduce kernels: a thin launch shell around
// run_tile (kernel_body.h), which is the box-copy core of reshard/box_copy.h
// compiled for the device. Blocks stride over the tiles of every Work of the
// launch, so one launch covers any number of descriptors.
#include "kernels.h"

namespace reshard::cuda_backend {
namespace {

template <bool kElement, bool kMulti, bool kSwizzled>
__global__ void __launch_bounds__(kThreads)
    tiles_kernel(const Work* __restrict__ works, const int64_t* __restrict__ tile_start,
                 const int32_t* __restrict__ tile_work, const SrcRef* __restrict__ sources,
                 const ScaleGrid* __restrict__ grids, int n, int64_t tiles) {
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    run_tile<kElement, kMulti, kSwizzled>(works, tile_start, tile_work, sources, grids, n, tile,
                                          static_cast<int>(threadIdx.x));
  }
}

}  // namespace

cudaError_t launch_tiles(bool element, bool multi, bool swizzled, const Work* works,
                         const int64_t* tile_start, const int32_t* tile_work, const SrcRef* sources,
                         const ScaleGrid* grids, int n, int64_t tiles, int max_blocks,
                         cudaStream_t stream) {
  if (n <= 0 || tiles <= 0) return cudaSuccess;
  const int64_t blocks64 = tiles < max_blocks ? tiles : max_blocks;
  const dim3 grid(static_cast<unsigned>(blocks64 > 0 ? blocks64 : 1));
  if (swizzled) {
    tiles_kernel<false, false, true>
        <<<grid, kThreads, 0, stream>>>(works, tile_start, tile_work, sources, grids, n, tiles);
  } else if (multi) {
    tiles_kernel<true, true, false>
        <<<grid, kThreads, 0, stream>>>(works, tile_start, tile_work, sources, grids, n, tiles);
  } else if (element) {
    tiles_kernel<true, false, false>
        <<<grid, kThreads, 0, stream>>>(works, tile_start, tile_work, sources, grids, n, tiles);
  } else {
    tiles_kernel<false, false, false>
        <<<grid, kThreads, 0, stream>>>(works, tile_start, tile_work, sources, grids, n, tiles);
  }
  return cudaGetLastError();
}

}  // namespace reshard::cuda_backend
