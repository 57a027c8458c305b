// Which executor and plan handles are alive, and how many calls are using
// each (issue 37: nothing a caller passes may crash the library). An
// execution marks its executor and plan as in use; destroying either on
// another thread meanwhile waits for the execution to end instead of
// freeing what it reads, and a handle that was destroyed is refused by the
// calls that check it (reshard_executor_execute, reshard_executor_verify)
// and ignored by a second destroy.
#pragma once

namespace reshard::capi {

enum class HandleKind { kExecutor, kPlan };

// Records a new handle (its constructor).
void register_handle(HandleKind kind, const void* handle) noexcept;
// Forgets a handle whose memory is going (its destructor); a no-op for one
// already retired.
void forget_handle(HandleKind kind, const void* handle) noexcept;
// For a destroy function: waits until no call uses `handle`, then forgets
// it. False when it was not live (destroyed before, or never made here):
// the caller must not free it again.
bool retire_handle(HandleKind kind, const void* handle) noexcept;

// One call's use of a handle, from construction to destruction. Throws
// kInvalidArgument "<name>: not a live ..." when the handle is not live.
class HandleUse {
 public:
  HandleUse(HandleKind kind, const void* handle, const char* name);
  HandleUse(const HandleUse&) = delete;
  HandleUse& operator=(const HandleUse&) = delete;
  ~HandleUse();

 private:
  HandleKind kind_;
  const void* handle_;
};

}  // namespace reshard::capi
