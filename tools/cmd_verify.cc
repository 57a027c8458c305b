// `reshard verify`: plan, execute in this process (the engine over the local
// transport) with generated data, and check every destination element
// (verify_plan, reshard/oracle.h).
#include <iostream>

#include "cli.h"
#include "reshard/engine.h"
#include "reshard/oracle.h"

namespace reshard::cli {
namespace {

struct VerifyArgs {
  InputOptions input;
  int32_t threads = 0;
  double max_gib = 8;
  int64_t max_plan_bytes = 0;  // PlanRequest::max_plan_bytes
  int32_t last_stage = -1;     // VerifyOptions::last_stage
};

std::string index_str(const std::vector<int64_t>& index) {
  std::string out = "[";
  for (size_t i = 0; i < index.size(); ++i) out += (i ? ", " : "") + std::to_string(index[i]);
  return out + "]";
}

int run_verify(const VerifyArgs& args) {
  std::optional<Plan> from_file = load_plan_file(args.input);
  if (from_file) {
    for (int32_t p : from_file->processes())
      if (!from_file->parts().count(p))
        throw InvalidInput(
            "--plan: the file holds only some process parts; in-process "
            "verification needs every part (write it without --process)");
  }
  const Spec spec = load_input(args.input);
  // Sources and destinations live in this process's memory at once.
  double bytes = 0;
  for (const TensorSpec& t : spec.input.tensors) {
    const double size = static_cast<double>(dtype_size(t.dtype));
    for (const Layout* l : {&t.src, &t.dst})
      for (size_t e = 0; e < l->num_entries(); ++e)
        bytes += static_cast<double>(l->box(e).volume()) *
                 (l == &t.dst ? static_cast<double>(dtype_size(out_dtype(t))) : size);
  }
  if (bytes > args.max_gib * 1024 * 1024 * 1024)
    throw UsageError("the shards of this spec need " + human_bytes(bytes) +
                     " of memory, above --max-gib " + std::to_string(args.max_gib));

  PlanRequest request{PlanScope::kAll, 0, true};
  request.max_plan_bytes = args.max_plan_bytes;
  // In-process verification needs every part: no --process way out.
  const Plan plan = from_file ? std::move(*from_file) : plan_spec(spec.input, request, "");
  Engine engine(make_local_transport(), EngineOptions{.schedule_cache_entries = 0});
  ExecuteOptions options;
  options.agreement = ExecuteOptions::Agreement::kSkip;
  options.threads = args.threads;
  VerifyOptions verify;
  verify.max_bytes = static_cast<int64_t>(args.max_gib * 1024 * 1024 * 1024);
  verify.last_stage = args.last_stage;
  const OracleReport report = verify_plan(engine, plan, kAllProcesses, options, verify);
  if (report.ok()) {
    std::cout << "verified " << report.tensors << " tensors, " << report.elements << " elements, "
              << report.bytes << " bytes: OK\n";
    return 0;
  }
  std::cerr << "verify: " << report.mismatches << " of " << report.elements
            << " destination elements are wrong; the first " << report.first.size() << ":\n";
  for (const OracleMismatch& m : report.first)
    std::cerr << "  tensor " << m.tensor << " "
              << (m.device < 0 ? std::string("(sum of summands)")
                               : "device " + std::to_string(m.device))
              << " index " << index_str(m.index) << ": expected " << m.expected << ", got " << m.got
              << "\n";
  throw Failure("verification failed: " + std::to_string(report.mismatches) + " wrong elements");
}

}  // namespace

Runner add_verify_command(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Execute the plan in-process on generated data and check every destination element");
  add_input_options(cmd, args->input);
  add_plan_file_option(cmd, args->input);
  cmd->add_option("--threads", args->threads, "executor threads (0: all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-gib", args->max_gib,
                  "refuse specs whose shards need more memory than this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_max_plan_bytes_option(cmd, args->max_plan_bytes);
  add_last_stage_option(cmd, args->last_stage);
  cmd->footer(
      std::string(
          "Examples:\n  reshard verify --spec examples/specs/small_transformer.json\n"
          "  reshard plan --spec S --out plan.rsplan && reshard verify --plan plan.rsplan\n\n"
          "Values encode their global index (partial sources: summands that reduce\n"
          "exactly to a known value); exit 0 and one summary line when every element\n"
          "matches, exit 1 and the first 10 mismatches otherwise.\n\n") +
      kSingleTensorHelp);
  return [args]() { return run_verify(*args); };
}

}  // namespace reshard::cli
