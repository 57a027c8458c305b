// reshard: plan, draw, verify and benchmark reshards from the command line.
#include <iostream>
#include <string>

#include "cli.h"
#include "reshard/error.h"
#include "reshard/reshard.h"  // version macros only: the CLI links the core, not libreshard

namespace {

int usage_error(const CLI::App& app, const std::string& message, bool hint = true) {
  std::cerr << "reshard: error: " << message << "\n";
  if (!hint) return 2;
  std::string path = "reshard";
  for (const CLI::App* sub = &app; sub;) {
    const auto subs = sub->get_subcommands();
    if (subs.empty()) break;
    sub = subs.front();
    path += " " + sub->get_name();
  }
  std::cerr << "Run '" << path << " --help' for usage.\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace reshard::cli;
  CLI::App app{"reshard: plan and execute resharding of tensors between device meshes"};
  app.require_subcommand(1);
  // The release of the sources this binary was built from (the core is linked
  // in) and the C ABI version libreshard.so of the same release provides.
  app.set_version_flag("--version", "reshard " RESHARD_VERSION_STRING " (C ABI " +
                                        std::to_string(RESHARD_ABI_MAJOR) + "." +
                                        std::to_string(RESHARD_ABI_MINOR) + ")");
  app.footer(
      "Examples:\n"
      "  reshard plan --spec examples/specs/small_transformer.json\n"
      "  reshard show --spec examples/specs/small_transformer.json --tensor layers.0.attn.q\n"
      "  reshard verify --spec examples/specs/small_transformer.json\n"
      "  reshard bench plan --spec examples/specs/small_transformer.json\n"
      "\nExit status: 0 success, 1 failure (planning, execution, verification), 2 bad usage or\n"
      "invalid spec.");
  const Runner plan = add_plan_command(app);
  const Runner show = add_show_command(app);
  const Runner verify = add_verify_command(app);
  const Runner bench = add_bench_command(app);
  const Runner run = add_run_command(app);
  const Runner simulate = add_simulate_command(app);
  const Runner calibrate = add_calibrate_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return usage_error(app, e.what());
  }
  try {
    if (app.got_subcommand("plan")) return plan();
    if (app.got_subcommand("show")) return show();
    if (app.got_subcommand("verify")) return verify();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("run")) return run();
    if (app.got_subcommand("simulate")) return simulate();
    if (app.got_subcommand("calibrate")) return calibrate();
    return usage_error(app, "unknown subcommand");
  } catch (const InvalidInput& e) {
    return usage_error(app, e.what(), false);
  } catch (const UsageError& e) {
    return usage_error(app, e.what());
  } catch (const Failure& e) {
    std::cerr << "reshard: error: " << e.what() << "\n";
    return 1;
  } catch (const reshard::Error& e) {
    std::cerr << "reshard: error: " << e.what() << " [" << reshard::error_code_name(e.code())
              << "]\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "reshard: error: " << e.what() << "\n";
    return 1;
  }
}
