// Host casts (reshard/cast.h): the reference conversion over a CopyDesc.
#include "reshard/cast.h"

#include <string>

#include "reshard/error.h"

namespace reshard {

void cast_box(const CopyDesc& desc, DType from, DType to, const void* src, void* dst) {
  if (!cast_supported(from, to))
    fail(ErrorCode::kInvalidArgument, "cast_box: no cast from " + std::string(dtype_name(from)) +
                                          " to " + std::string(dtype_name(to)));
  cast_desc_runs(desc, from, to, 0, copy_desc_runs(desc), src, dst);
}

}  // namespace reshard
