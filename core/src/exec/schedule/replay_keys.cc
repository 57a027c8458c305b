// engine_schedule.h: the buffer lists and keys with which a cached
// schedule's recorded execution is replayed (Replay).
#include <atomic>

#include "exec/schedule/engine_schedule.h"

namespace reshard::engine_detail {

std::vector<uint64_t> buffer_list(std::span<const TensorBuffers> buffers) {
  size_t n = 0;
  for (const TensorBuffers& b : buffers) n += 2 + 2 * (b.src.size() + b.dst.size());
  std::vector<uint64_t> out;
  out.reserve(n);
  for (const TensorBuffers& b : buffers) {
    out.push_back(b.src.size());
    out.push_back(b.dst.size());
    for (const ConstBuffer& e : b.src) {
      out.push_back(reinterpret_cast<uintptr_t>(e.data));
      out.push_back(static_cast<uint64_t>(e.bytes));
    }
    for (const MutableBuffer& e : b.dst) {
      out.push_back(reinterpret_cast<uintptr_t>(e.data));
      out.push_back(static_cast<uint64_t>(e.bytes));
    }
  }
  return out;
}

bool same_buffers(std::span<const uint64_t> list, std::span<const TensorBuffers> buffers) {
  size_t at = 0;
  const auto next = [&](uint64_t v) { return at < list.size() && list[at++] == v; };
  for (const TensorBuffers& b : buffers) {
    if (!next(b.src.size()) || !next(b.dst.size())) return false;
    for (const ConstBuffer& e : b.src) {
      if (!next(reinterpret_cast<uintptr_t>(e.data)) || !next(static_cast<uint64_t>(e.bytes))) {
        return false;
      }
    }
    for (const MutableBuffer& e : b.dst) {
      if (!next(reinterpret_cast<uintptr_t>(e.data)) || !next(static_cast<uint64_t>(e.bytes))) {
        return false;
      }
    }
  }
  return at == list.size();
}

uint64_t next_call_key() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace reshard::engine_detail
