// fill_identity_elements (reshard/box_copy.h): identity fills of whole
// destination buffers, on the host (the engine's partial destinations) and in
// device backends' descriptor preparation.
#include <cstddef>
#include <cstring>

#include "reshard/box_copy.h"

namespace reshard {

void fill_identity_elements(DType dtype, ReduceOp op, void* dst, int64_t n) {
  if (n <= 0) return;
  if (acc_is_elem(dtype)) {
    fill_identity(dtype, op, dst, n);
    return;
  }
  // Store the identity once, then replicate the element.
  alignas(8) std::byte acc[8];
  fill_identity(dtype, op, acc, 1);
  store_from_acc(dtype, acc, dst, 1);
  const int64_t elem = dtype_size(dtype);
  for (int64_t i = 1; i < n; ++i) {
    std::memcpy(static_cast<std::byte*>(dst) + i * elem, dst, static_cast<size_t>(elem));
  }
}

}  // namespace reshard
