// libFuzzer target for the plan decoder (docs/design.md §4, §9.5): arbitrary bytes
// either fail with kCorrupt or decode to a plan that re-encodes to a plan
// equal to itself and that the host executor can run without touching memory
// outside its buffers (ASan and UBSan watch both).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/plan.h"
#include "reshard/wire.h"

namespace {

// Executes a plan holding every part on zero-filled buffers, if they are small.
void execute_on_zeros(const reshard::Plan& plan) {
  if (plan.parts().size() != plan.processes().size()) return;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<reshard::TensorBuffers> buffers(plan.tensors().size());
  int64_t total = 0;
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const reshard::TensorSpec& spec = plan.tensors()[t];
    for (const reshard::Layout* l : {&spec.src, &spec.dst})
      for (size_t e = 0; e < l->num_entries(); ++e) {
        const int64_t bytes = l->box(e).volume() * reshard::dtype_size(spec.dtype);
        if ((total += bytes) > (int64_t{1} << 22)) return;
        storage.emplace_back(static_cast<size_t>(bytes));
        if (l == &spec.src)
          buffers[t].src.push_back({storage.back().data(), bytes});
        else
          buffers[t].dst.push_back({storage.back().data(), bytes});
      }
  }
  reshard::execute_host(plan, buffers, {1});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reshard::Plan plan;
  try {
    plan = reshard::decode_plan(std::span<const uint8_t>(data, size));
  } catch (const reshard::Error& e) {
    if (e.code() != reshard::ErrorCode::kCorrupt) __builtin_trap();  // the contract: kCorrupt only
    return 0;
  }
  const std::vector<uint8_t> bytes = reshard::encode_plan(plan);
  const reshard::Plan again = reshard::decode_plan(bytes);
  if (again.parts() != plan.parts() || reshard::encode_plan(again) != bytes) __builtin_trap();
  execute_on_zeros(plan);
  return 0;
}
