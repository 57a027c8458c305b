#include "reshard/box.h"

namespace reshard {

std::string to_string(const Box& box) {
  std::string s = "[";
  for (int d = 0; d < box.rank; ++d) {
    if (d) s += ", ";
    s += std::to_string(box.lo[d]) + ":" + std::to_string(box.hi[d]);
  }
  return s + "]";
}

}  // namespace reshard
