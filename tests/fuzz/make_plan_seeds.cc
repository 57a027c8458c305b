// Writes encoded plans into a directory, as the seed corpus of
// fuzz_plan_decode: the random cases of the property tests (named and
// explicit layouts, partial sums, split pieces, several processes) and, for
// each, one single-part encoding; and reduction trees with scratch
// buffers (core/scratch_plans.h), whole and part by part.
//   make_plan_seeds DIR [COUNT]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/random_cases.h"
#include "core/scratch_plans.h"
#include "reshard/wire.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [COUNT]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const int count = argc > 2 ? std::atoi(argv[2]) : 64;
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  };
  // Small sizes keep seeds short, as libFuzzer prefers.
  reshard::testing::CaseOptions options{3, 8, 2, 7, true, true};
  for (int c = 0; c < count; ++c) {
    reshard::testing::CaseGen gen(static_cast<uint64_t>(c) + 1, options);
    const reshard::Plan plan = reshard::make_plan(gen.input());
    write("plan-" + std::to_string(c) + ".rsplan", reshard::encode_plan(plan));
    if (!plan.processes().empty())
      write("part-" + std::to_string(c) + ".rsplan",
            reshard::encode_plan(plan, {false, plan.processes().back()}));
  }
  int k = 0;
  for (const reshard::DType dtype : {reshard::DType::kF32, reshard::DType::kBF16}) {
    for (const bool host_process : {false, true}) {
      reshard::scratch_plans::TreeCase c;
      c.per_host = {2, 1};
      c.dtype = dtype;
      c.host_process = host_process;
      c.rounds = host_process ? 2 : 1;
      const reshard::Plan plan = reshard::scratch_plans::tree_plan(c);
      write("scratch-" + std::to_string(k) + ".rsplan", reshard::encode_plan(plan));
      write("scratch-part-" + std::to_string(k) + ".rsplan",
            reshard::encode_plan(plan, {false, plan.processes().front()}));
      ++k;
    }
  }
  return 0;
}
