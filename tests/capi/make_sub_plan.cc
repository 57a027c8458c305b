// Writes the C ABI tests' plan with sub-messages (capi.sub_messages): a
// planner plan whose messages are cut into subs (tests/core/sub_messages.h),
// encoded, into argv[1]; and into argv[2] the number of its messages (sends
// and receives of every part) with sub above 0, as text.
#include <cstdio>
#include <fstream>
#include <vector>

#include "core/sub_messages.h"
#include "reshard/wire.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_sub_plan PLAN_FILE COUNT_FILE\n");
    return 2;
  }
  using namespace reshard;
  const Plan plan = sub_messages::with_subs(make_plan(sub_messages::relay_input()), 3);
  const std::vector<uint8_t> bytes = encode_plan(plan);
  std::ofstream(argv[1], std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  std::ofstream(argv[2]) << sub_messages::count_subs(plan) << "\n";
  return 0;
}
