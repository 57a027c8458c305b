// Input of every subcommand: `--spec FILE` or flags describing one tensor.
// The flags are turned into the JSON spec they stand for, so both paths
// share one parser; errors name the flag their field came from.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "cli.h"
#include "reshard/error.h"
#include "reshard/wire.h"

namespace reshard::cli {
namespace {

using json = nlohmann::json;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) return out;
    start = p + 1;
  }
}

std::string trim(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  return s;
}

int64_t to_int(const std::string& s, const std::string& flag) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw UsageError(flag + ": \"" + s + "\" is not an integer");
  return v;
}

// "0-3,8,0*4": items are N, A-B (inclusive) or N*COUNT.
std::vector<int64_t> int_list(const std::string& text, const std::string& flag) {
  std::vector<int64_t> out;
  if (trim(text).empty()) return out;
  for (std::string item : split(text, ',')) {
    item = trim(item);
    const size_t star = item.find('*');
    const size_t dash = item.find('-', 1);
    if (star != std::string::npos) {
      const int64_t v = to_int(item.substr(0, star), flag);
      const int64_t n = to_int(item.substr(star + 1), flag);
      if (n < 0 || n > (1 << 24)) throw UsageError(flag + ": bad repeat count in \"" + item + "\"");
      out.insert(out.end(), static_cast<size_t>(n), v);
    } else if (dash != std::string::npos) {
      const int64_t a = to_int(item.substr(0, dash), flag);
      const int64_t b = to_int(item.substr(dash + 1), flag);
      if (b < a || b - a > (1 << 24)) throw UsageError(flag + ": bad range \"" + item + "\"");
      for (int64_t v = a; v <= b; ++v) out.push_back(v);
    } else {
      out.push_back(to_int(item, flag));
    }
  }
  return out;
}

// "dp=4,tp=2"
json mesh_json(const std::string& text, const std::string& devices, const std::string& processes,
               const std::string& hosts, const std::string& flag, const std::string& side) {
  json m = json::object();
  m["axis_names"] = json::array();
  m["shape"] = json::array();
  if (!trim(text).empty()) {
    for (std::string item : split(text, ',')) {
      item = trim(item);
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0)
        throw UsageError(flag + ": expected NAME=SIZE items like dp=4,tp=2, got \"" + item + "\"");
      m["axis_names"].push_back(item.substr(0, eq));
      m["shape"].push_back(to_int(item.substr(eq + 1), flag));
    }
  }
  if (!devices.empty()) m["devices"] = int_list(devices, "--" + side + "-devices");
  if (!processes.empty()) m["processes"] = int_list(processes, "--" + side + "-processes");
  if (!hosts.empty()) m["hosts"] = int_list(hosts, "--" + side + "-hosts");
  return m;
}

// "dp,_,tp+sp": one entry per dim, "_" (or "null", or nothing) replicates;
// fewer entries than dims leave the rest replicated, as in the spec file.
json spec_json(const std::string& text) {
  json spec = json::array();
  if (trim(text).empty()) return spec;
  for (std::string item : split(text, ',')) {
    item = trim(item);
    if (item.empty() || item == "_" || item == "null" || item == "None") {
      spec.push_back(nullptr);
      continue;
    }
    const auto axes = split(item, '+');
    if (axes.size() == 1) {
      spec.push_back(trim(axes[0]));
    } else {
      json list = json::array();
      for (const auto& a : axes) list.push_back(trim(a));
      spec.push_back(list);
    }
  }
  return spec;
}

// "dp" or "dp+tp:max"
json partial_json(const std::string& text) {
  json p = json::object();
  std::string axes = text;
  const size_t colon = text.find(':');
  if (colon != std::string::npos) {
    axes = text.substr(0, colon);
    p["op"] = trim(text.substr(colon + 1));
  }
  p["axes"] = json::array();
  for (const auto& a : split(axes, '+')) p["axes"].push_back(trim(a));
  return p;
}

json layout_json(const std::string& mesh, const std::string& spec, const std::string& partial) {
  json l = json::object();
  l["mesh"] = mesh;
  if (!spec.empty()) l["spec"] = spec_json(spec);
  if (!partial.empty()) l["partial"] = partial_json(partial);
  return l;
}

// The message of an error about the spec built from the flags, its field
// (Error::field()) renamed to the flag it came from.
std::string flag_message(const Error& e) {
  static const std::pair<std::string_view, const char*> kMap[] = {
      {"meshes.src.devices", "--src-devices"},
      {"meshes.src.processes", "--src-processes"},
      {"meshes.src.hosts", "--src-hosts"},
      {"meshes.src", "--src-mesh"},
      {"meshes.dst.devices", "--dst-devices"},
      {"meshes.dst.processes", "--dst-processes"},
      {"meshes.dst.hosts", "--dst-hosts"},
      {"meshes.dst", "--dst-mesh"},
      {"tensors[0].src.spec", "--src-spec"},
      {"tensors[0].src.partial", "--src-partial"},
      {"tensors[0].src", "--src-spec"},
      {"tensors[0].dst.spec", "--dst-spec"},
      {"tensors[0].dst.partial", "--dst-partial"},
      {"tensors[0].dst", "--dst-spec"},
      {"tensors[0].shape", "--shape"},
      {"tensors[0].dtype", "--dtype"},
      {"tensors[0].name", "--name"},
  };
  const std::string_view field = e.field();
  for (const auto& [path, flag] : kMap)
    if (field.starts_with(path))
      return flag + std::string(field.substr(path.size())) + ": " + std::string(e.detail());
  return e.what();
}

}  // namespace

const char* const kSingleTensorHelp =
    "One tensor from flags instead of --spec:\n"
    "  --shape 4096,11008 --dtype bf16 --src-mesh dp=4,tp=2 --src-spec dp,tp\n"
    "  --dst-mesh tp=8 --dst-devices 8-15 --dst-spec _,tp\n"
    "Mesh: NAME=SIZE,... (devices default 0..N-1; --*-devices, --*-processes and\n"
    "--*-hosts take lists like 0-7,12 or 0*4,1*4; hosts default to processes).\n"
    "Spec: one entry per dim, \"_\" replicates, \"dp+tp\" splits one dim over two\n"
    "axes, dims past the last entry are replicated. Partial: --src-partial\n"
    "dp[:sum|max|min]. Without --dst-mesh the destination uses the source mesh.\n";

void add_max_input_bytes_option(CLI::App* cmd, InputOptions& in) {
  if (cmd->get_option_no_throw("--max-input-bytes")) return;
  cmd->add_option("--max-input-bytes", in.max_input_bytes,
                  "largest --spec or --plan file read, e.g. 256MiB (default: 64 MiB for a spec, "
                  "2 GiB for a plan)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::PositiveNumber)
      ->type_name("BYTES");
}

void add_input_options(CLI::App* cmd, InputOptions& in) {
  cmd->add_option("--spec", in.spec, "JSON spec file (format: docs/spec.md)")->type_name("FILE");
  add_max_input_bytes_option(cmd, in);
  cmd->add_flag("--no-relays", in.no_relays,
                "single-hop plan: no relays (overrides the spec's options.relays)");
  cmd->add_flag("--no-reduce-scatter", in.no_reduce_scatter,
                "partial sources: every device receives every summand (overrides the spec's "
                "options.reduce_scatter)");
  cmd->add_flag(
      "--no-single-hop-guard", in.no_single_hop_guard,
      "keep every route (relays, reduce-scatter) even where the single-hop plan is faster "
      "by the estimate (overrides the spec's options.single_hop_guard)");
  cmd->add_option("--nics-per-host", in.nics_per_host,
                  "NICs per host for the cost model, 0 for one per device (overrides the spec's "
                  "options.nics_per_host)")
      ->check(CLI::Range(0, 1 << 20))
      ->type_name("N");
  cmd->add_option("--budget", in.budget,
                  "staging budget per device, e.g. 64MiB (overrides the spec's "
                  "options.staging_budget_bytes, 1 GiB unless set; 0: unbounded)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return !v.empty() && v.front() == '-' ? "must be 0 or more bytes, not " + v : "";
          },
          "", "NONNEGATIVE"))
      ->type_name("BYTES");
  const char* const kGroup = "Single tensor (instead of --spec)";
  in.shape_option =
      cmd->add_option("--shape", in.shape, "shape, e.g. 4096,11008 (\"\" for a scalar)")
          ->type_name("DIMS")
          ->group(kGroup);
  cmd->add_option("--name", in.name, "tensor name")->group(kGroup)->capture_default_str();
  cmd->add_option("--dtype", in.dtype, "dtype (f32, bf16, i8, ...)")
      ->group(kGroup)
      ->capture_default_str();
  struct Flag {
    const char* name;
    std::string* target;
    const char* help;
  };
  const Flag flags[] = {
      {"--src-mesh", &in.src_mesh, "source mesh, e.g. dp=4,tp=2"},
      {"--src-spec", &in.src_spec, "source spec, e.g. dp,tp or _,dp+tp"},
      {"--src-devices", &in.src_devices, "source mesh devices, e.g. 0-7"},
      {"--src-processes", &in.src_processes, "process of each source device, e.g. 0*4,1*4"},
      {"--src-hosts", &in.src_hosts, "host of each source device (default: its process)"},
      {"--src-partial", &in.src_partial, "partial source axes, e.g. dp:sum"},
      {"--dst-mesh", &in.dst_mesh, "destination mesh (default: the source mesh)"},
      {"--dst-spec", &in.dst_spec, "destination spec"},
      {"--dst-devices", &in.dst_devices, "destination mesh devices, e.g. 8-15"},
      {"--dst-processes", &in.dst_processes, "process of each destination device"},
      {"--dst-hosts", &in.dst_hosts, "host of each destination device (default: its process)"},
      {"--dst-partial", &in.dst_partial, "partial destination axes"},
  };
  for (const Flag& f : flags)
    cmd->add_option(f.name, *f.target, f.help)->type_name("TEXT")->group(kGroup);
}

void add_plan_file_option(CLI::App* cmd, InputOptions& in) {
  cmd->add_option("--plan", in.plan_file,
                  "plan file written by `reshard plan --out` (instead of --spec)")
      ->type_name("FILE");
  add_max_input_bytes_option(cmd, in);
  add_key_file_option(cmd, in,
                      "require the --plan file to carry an HMAC-SHA-256 made with the key in "
                      "FILE (its bytes, exactly; `reshard plan --out --key-file`)");
}

void add_key_file_option(CLI::App* cmd, InputOptions& in, const std::string& what) {
  cmd->add_option("--key-file", in.key_file, what)->type_name("FILE");
}

std::optional<std::vector<uint8_t>> read_key_file(const InputOptions& in) {
  if (in.key_file.empty()) return std::nullopt;
  std::ifstream f(in.key_file, std::ios::binary);
  if (!f) throw UsageError("--key-file: cannot read \"" + in.key_file + "\"");
  // One byte past the limit is enough to refuse a key too long (or
  // /dev/zero) without reading it all.
  std::vector<uint8_t> key(kPlanMacKeyMaxBytes + 1);
  f.read(reinterpret_cast<char*>(key.data()), static_cast<std::streamsize>(key.size()));
  if (f.bad()) throw UsageError("--key-file: cannot read \"" + in.key_file + "\"");
  key.resize(static_cast<size_t>(f.gcount()));
  try {
    check_plan_mac_key(key, "--key-file");
  } catch (const Error& e) {
    throw InvalidInput(std::string(e.what()) + " (\"" + in.key_file + "\") [" +
                       error_code_name(e.code()) + "]");
  }
  return key;
}

std::optional<Plan> load_plan_file(const InputOptions& in) {
  if (in.plan_file.empty()) {
    if (!in.key_file.empty()) throw UsageError("--key-file needs --plan (the plan it checks)");
    return std::nullopt;
  }
  if (!in.spec.empty()) throw UsageError("--plan cannot be combined with --spec");
  DecodeOptions options;
  options.mac_key = read_key_file(in);
  try {
    return load_plan(in.plan_file, in.max_input_bytes > 0 ? in.max_input_bytes : kMaxPlanFileBytes,
                     options);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInvalidArgument)
      throw UsageError("--plan: cannot read \"" + in.plan_file + "\"");
    // The path is the message's field: "--plan FILE: what failed [code]".
    throw InvalidInput("--plan " + std::string(e.what()) + " [" + error_code_name(e.code()) + "]");
  }
}

namespace {
Spec load_input_as_given(const InputOptions& in);
}  // namespace

Spec load_input(const InputOptions& in) {
  Spec spec = load_input_as_given(in);
  if (in.no_relays) spec.input.options.relays = false;
  if (in.no_reduce_scatter) spec.input.options.reduce_scatter = false;
  if (in.no_single_hop_guard) spec.input.options.single_hop_guard = false;
  if (in.nics_per_host >= 0) spec.input.options.nics_per_host = in.nics_per_host;
  if (in.budget >= 0) spec.input.options.staging_budget_bytes = in.budget;
  return spec;
}

namespace {
Spec load_input_as_given(const InputOptions& in) {
  const bool any_flag = !in.shape.empty() || !in.src_mesh.empty() || !in.src_spec.empty() ||
                        !in.src_devices.empty() || !in.src_processes.empty() ||
                        !in.src_hosts.empty() || !in.src_partial.empty() || !in.dst_mesh.empty() ||
                        !in.dst_spec.empty() || !in.dst_devices.empty() ||
                        !in.dst_processes.empty() || !in.dst_hosts.empty() ||
                        !in.dst_partial.empty();
  if (!in.plan_file.empty()) {
    if (!in.spec.empty()) throw UsageError("--plan cannot be combined with --spec");
    if (any_flag || (in.shape_option && in.shape_option->count() > 0))
      throw UsageError(
          "--plan cannot be combined with the single-tensor flags (--shape, --src-*, --dst-*)");
    if (in.no_relays || in.no_reduce_scatter || in.no_single_hop_guard || in.nics_per_host >= 0 ||
        in.budget >= 0)
      throw UsageError(std::string(in.no_relays             ? "--no-relays"
                                   : in.no_reduce_scatter   ? "--no-reduce-scatter"
                                   : in.no_single_hop_guard ? "--no-single-hop-guard"
                                   : in.nics_per_host >= 0  ? "--nics-per-host"
                                                            : "--budget") +
                       " cannot be combined with --plan (the plan is already made)");
    // The plan carries its inputs: tensors with layouts, topology, options.
    const Plan plan = *load_plan_file(in);
    Spec spec;
    spec.input.tensors = plan.tensors();
    spec.input.topology = plan.topology();
    spec.input.options = plan.options();
    return spec;
  }
  if (!in.spec.empty() && any_flag)
    throw UsageError(
        "--spec cannot be combined with the single-tensor flags (--shape, --src-*, --dst-*)");
  if (!in.spec.empty()) {
    try {
      return load_spec(in.spec,
                       in.max_input_bytes > 0 ? in.max_input_bytes : kDefaultMaxSpecFileBytes);
    } catch (const Error& e) {
      throw InvalidInput(e.what());
    }
  }
  const bool has_shape = in.shape_option && in.shape_option->count() > 0;
  if (in.src_mesh.empty() && !has_shape)
    throw UsageError("give --spec FILE, or one tensor with --shape and --src-mesh (see --help)");
  if (in.src_mesh.empty()) throw UsageError("--shape needs --src-mesh");
  if (!has_shape) throw UsageError("--src-mesh needs --shape");
  json doc = json::object();
  doc["meshes"]["src"] =
      mesh_json(in.src_mesh, in.src_devices, in.src_processes, in.src_hosts, "--src-mesh", "src");
  const bool own_dst_mesh = !in.dst_mesh.empty() || !in.dst_devices.empty() ||
                            !in.dst_processes.empty() || !in.dst_hosts.empty();
  if (own_dst_mesh)
    doc["meshes"]["dst"] =
        mesh_json(in.dst_mesh.empty() ? in.src_mesh : in.dst_mesh, in.dst_devices, in.dst_processes,
                  in.dst_hosts, "--dst-mesh", "dst");
  json t = json::object();
  t["name"] = in.name;
  t["dtype"] = in.dtype;
  t["shape"] = int_list(in.shape, "--shape");
  t["src"] = layout_json("src", in.src_spec, in.src_partial);
  t["dst"] = layout_json(own_dst_mesh ? "dst" : "src", in.dst_spec, in.dst_partial);
  doc["tensors"] = json::array({t});
  try {
    return parse_spec(doc.dump());
  } catch (const Error& e) {
    throw UsageError(flag_message(e));
  }
}
}  // namespace

}  // namespace reshard::cli
