// Runs copy_plan's launches on the CPU with the kernels' own code
// (kernel_body.h): every tile of every launch, every thread of a tile in
// turn. With `reverse` the tiles of a launch run last to first, which a
// missed dependency inside a launch would not survive. Used by the kernel
// and engine emulation tests.
#pragma once

#include <cstdint>
#include <vector>

#include "copy_plan.h"
#include "kernel_body.h"

namespace reshard::gpu_testing {

inline void emulate(const std::vector<cuda_backend::Launch>& launches, bool reverse = false) {
  for (const cuda_backend::Launch& l : launches) {
    const int n = static_cast<int>(l.works.size());
    const int32_t* tile_work = l.tile_work.empty() ? nullptr : l.tile_work.data();
    for (int64_t k = 0; k < l.tiles(); ++k) {
      const int64_t tile = reverse ? l.tiles() - 1 - k : k;
      for (int tid = 0; tid < cuda_backend::kThreads; ++tid) {
        if (l.swizzled) {
          cuda_backend::run_tile<false, false, true>(l.works.data(), l.tile_start.data(), tile_work,
                                                     l.sources.data(), l.grids.data(), n, tile,
                                                     tid);
        } else if (l.multi) {
          cuda_backend::run_tile<true, true>(l.works.data(), l.tile_start.data(), tile_work,
                                             l.sources.data(), l.grids.data(), n, tile, tid);
        } else if (l.element) {
          cuda_backend::run_tile<true>(l.works.data(), l.tile_start.data(), tile_work,
                                       l.sources.data(), l.grids.data(), n, tile, tid);
        } else {
          cuda_backend::run_tile<false>(l.works.data(), l.tile_start.data(), tile_work,
                                        l.sources.data(), l.grids.data(), n, tile, tid);
        }
      }
    }
  }
}

}  // namespace reshard::gpu_testing
