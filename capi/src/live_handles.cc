// Live handles and their users (live_handles.h). One mutex for all: taken
// twice per execution, which costs far less than the execution.
#include "live_handles.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "reshard/error.h"

namespace reshard::capi {
namespace {

struct Registry {
  std::mutex mutex;
  std::condition_variable idle;
  // (kind, handle) -> calls using it
  std::map<std::pair<HandleKind, const void*>, int> live;
};

Registry& registry() {
  // Never destroyed: handles may be released by other static destructors.
  // In the library's static storage rather than on the heap, so that
  // unloading the library (dlclose) leaves no allocation behind.
  alignas(Registry) static unsigned char storage[sizeof(Registry)];
  static Registry* r = new (storage) Registry;
  return *r;
}

}  // namespace

void register_handle(HandleKind kind, const void* handle) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  try {
    r.live[{kind, handle}] = 0;
  } catch (...) {
    // Out of memory: the handle is then refused as not live, never misused.
  }
}

void forget_handle(HandleKind kind, const void* handle) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live.erase({kind, handle});
}

bool retire_handle(HandleKind kind, const void* handle) noexcept {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex);
  auto it = r.live.find({kind, handle});
  if (it == r.live.end()) return false;
  r.idle.wait(lock, [&] {
    it = r.live.find({kind, handle});
    return it == r.live.end() || it->second == 0;
  });
  if (it == r.live.end()) return false;  // another destroy won
  r.live.erase(it);
  return true;
}

HandleUse::HandleUse(HandleKind kind, const void* handle, const char* name)
    : kind_(kind), handle_(handle) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find({kind, handle});
  if (it == r.live.end()) {
    fail(ErrorCode::kInvalidArgument, std::string(name) + ": not a live " +
                                          (kind == HandleKind::kExecutor ? "executor" : "plan") +
                                          " (destroyed, or not made by this library)");
  }
  ++it->second;
}

HandleUse::~HandleUse() {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.live.find({kind_, handle_});
    if (it != r.live.end()) --it->second;
  }
  r.idle.notify_all();
}

}  // namespace reshard::capi
