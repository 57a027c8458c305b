// reshard — shard buffers: what executors read and write, and what the
// oracle (reshard/oracle.h) fills and checks. A plain description of memory;
// it knows nothing of executors (reshard/exec.h and reshard/engine.h include
// it).
#pragma once

#include <cstdint>
#include <vector>

namespace reshard {

struct ConstBuffer {
  const void* data = nullptr;
  int64_t bytes = 0;
};
struct MutableBuffer {
  void* data = nullptr;
  int64_t bytes = 0;
};

// The shard buffers of one tensor, indexed by layout entry (the plan's
// tensors()[t].src / .dst entry order, i.e. sorted by device). Each buffer is
// dense, row-major, exactly the shape of its entry's box.
struct TensorBuffers {
  std::vector<ConstBuffer> src;
  std::vector<MutableBuffer> dst;
};

}  // namespace reshard
