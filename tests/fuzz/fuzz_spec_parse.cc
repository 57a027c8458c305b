// libFuzzer target: the JSON spec parser (docs/spec.md). Any input either
// parses or throws reshard::Error; nothing else may escape, crash, or trip a
// sanitizer. Seeds: examples/specs/*.json.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "reshard/error.h"
#include "reshard/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return -1;  // specs of interest are small; keep runs fast
  try {
    const reshard::Spec spec =
        reshard::parse_spec(std::string_view(reinterpret_cast<const char*>(data), size));
    // Touch what the parser built so lazily broken layouts would show.
    for (const auto& t : spec.input.tensors) {
      (void)t.src.num_entries();
      (void)t.dst.num_entries();
    }
  } catch (const reshard::Error&) {
  }
  return 0;
}
