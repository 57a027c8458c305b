// reshard: plan, draw, verify and benchmark reshards from the command line.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

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

// Edit distance (insertions, deletions, substitutions, adjacent swaps).
size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The known name closest to `word` when it is close enough to be a typo
// (at most a third of its length, at least 1, away), else "".
std::string closest(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;
  for (const std::string& k : known) {
    const size_t d = distance(word, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

// "Did you mean" for a mistyped subcommand (the first word) or flag (a
// --word the chosen subcommand does not know), from the parser's own lists.
std::string suggestion(const CLI::App& app, int argc, char** argv) {
  if (argc < 2) return "";
  std::vector<std::string> subs;
  for (const CLI::App* s : app.get_subcommands({})) subs.push_back(s->get_name());
  const std::string first = argv[1];
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands({}))
    if (s->get_name() == first) sub = s;
  if (!sub) {
    if (first.empty() || first[0] == '-') return "";
    const std::string c = closest(first, subs);
    return c.empty() ? "" : "'" + first + "' is not a subcommand; did you mean '" + c + "'?";
  }
  std::vector<std::string> flags;
  for (const CLI::Option* o : sub->get_options())
    for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
  for (int i = 2; i < argc; ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) != 0 || word == "--") continue;
    word = word.substr(0, word.find('='));
    if (std::find(flags.begin(), flags.end(), word) != flags.end()) continue;
    const std::string c = closest(word, flags);
    if (!c.empty())
      return "'" + word + "' is not an option of '" + first + "'; did you mean '" + c + "'?";
  }
  return "";
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
    const std::string hint = suggestion(app, argc, argv);
    return usage_error(app,
                       hint.empty() ? std::string(e.what()) : e.what() + std::string(": ") + hint);
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
