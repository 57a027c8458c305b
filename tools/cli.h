// The `reshard` command line: shared pieces of the subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reshard/plan.h"
#include "reshard/spec.h"
#include "reshard/wait.h"

namespace reshard::cli {

// Bad command line or invalid input: exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// An invalid spec (also exit status 2, without the usage hint).
class InvalidInput : public UsageError {
 public:
  using UsageError::UsageError;
};
// A failure while doing the work (planning, executing, a verification
// mismatch): exit status 1.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where the tensors come from: a spec file, or flags describing one tensor.
struct InputOptions {
  std::string spec;
  std::string name = "tensor";
  std::string shape;
  const CLI::Option* shape_option = nullptr;  // set by add_input_options
  std::string dtype = "f32";
  std::string src_mesh, src_spec, src_devices, src_processes, src_hosts, src_partial;
  std::string dst_mesh, dst_spec, dst_devices, dst_processes, dst_hosts, dst_partial;
  std::string plan_file;             // --plan FILE (commands that accept plan bytes)
  bool no_relays = false;            // --no-relays: PlanOptions::relays = false
  bool no_reduce_scatter = false;    // --no-reduce-scatter
  bool no_single_hop_guard = false;  // --no-single-hop-guard
  int32_t nics_per_host = -1;        // --nics-per-host: PlanOptions::nics_per_host (-1: the spec's)
  int64_t budget = -1;               // --budget: PlanOptions::staging_budget_bytes (-1: the spec's)
  int64_t max_input_bytes = 0;       // --max-input-bytes: 0 the defaults (64 MiB spec, 2 GiB plan)
  std::string key_file;              // --key-file: the MAC key plans are signed or checked with
};
void add_input_options(CLI::App* cmd, InputOptions& in);
// Adds `--plan FILE`: read a plan written by `reshard plan --out` instead of
// planning from a spec.
void add_plan_file_option(CLI::App* cmd, InputOptions& in);
// Adds `--key-file FILE`: the MAC key (the file's bytes, exactly) a plan is
// signed with (`plan --out`) or must carry (`--plan`); `what` says which.
void add_key_file_option(CLI::App* cmd, InputOptions& in, const std::string& what);
// The key of --key-file, or nothing without one. An unreadable file is a
// UsageError; a key that is empty, too short or too long an InvalidInput
// naming --key-file.
std::optional<std::vector<uint8_t>> read_key_file(const InputOptions& in);
// The decoded plan of --plan FILE (verified: reshard::decode_plan; with
// --key-file its MAC checked first), or nothing when no --plan was given.
// Corrupt bytes, or a MAC missing or wrong, are an InvalidInput.
std::optional<Plan> load_plan_file(const InputOptions& in);
// Loads the spec; every problem is a UsageError.
Spec load_input(const InputOptions& in);
// The flags' help text, for footers.
extern const char* const kSingleTensorHelp;

// Subcommands: each registers itself and returns the function to run.
using Runner = std::function<int()>;
Runner add_plan_command(CLI::App& app);
Runner add_show_command(CLI::App& app);
Runner add_verify_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_run_command(CLI::App& app);
Runner add_simulate_command(CLI::App& app);
Runner add_calibrate_command(CLI::App& app);

// ---- formatting helpers (format.cc)
std::string human_bytes(double bytes);      // "1.50 MiB"
std::string compact_bytes(double bytes);    // "1.5M", for matrix cells
std::string human_seconds(double seconds);  // "1.23 ms"
std::string with_commas(int64_t n);         // "1,234,567"
std::string hex64(uint64_t v);              // "0123456789abcdef"
std::string ratio_str(double r);            // "1.000"
// "0-3,8,10-11"
std::string device_ranges(std::vector<int64_t> devices);
std::string shape_str(const std::vector<int64_t>& shape);

// make_plan, with input errors (a spec the planner rejects: uncovered
// regions, mismatched shapes) turned into InvalidInput, and a plan above
// the memory limit (kResourceExhausted) explained in the command line's
// terms: "--max-plan-bytes", and `process_hint` for PlanScope::kProcess
// ("--process P"; empty: the command cannot plan one part, the hint is
// dropped). On a terminal, planning many parts shows its progress on
// stderr (Progress).
Plan plan_spec(const PlanInput& input, const PlanRequest& request,
               const std::string& process_hint = "--process P");
// estimate_plan(input, request, stats), its errors turned as plan_spec's.
PlanEstimate estimate_spec(const PlanInput& input, const PlanRequest& request,
                           PlanStats* stats = nullptr);
// plan_part_after_estimate (reshard/plan.h), its errors turned as
// plan_spec's: `check` sees the estimate before the part is planned.
Plan plan_part_spec(const PlanInput& input, const PlanRequest& estimate_request,
                    const PlanRequest& part_request, PlanStats* stats,
                    const std::function<void(const PlanEstimate&)>& check);
// A kResourceExhausted message of make_plan in the command line's terms
// (see plan_spec).
std::string resource_message(const std::string& message, const std::string& process_hint);

// `--max-plan-bytes SIZE`: PlanRequest::max_plan_bytes. SIZE is bytes with
// an optional binary suffix (K, M, G, T, KiB, ...), 0 for the library's
// default (half the memory) or -1 / "none" for no limit.
void add_max_plan_bytes_option(CLI::App* cmd, int64_t& target);
// `--max-stats-pieces N` into target (PlanRequest::max_stats_pieces).
void add_max_stats_pieces_option(CLI::App* cmd, int64_t& target);
// A size option of the same syntax under another name (`--max-sim-bytes`):
// bytes or 8G, 512MiB, ...; 0 the default (half the memory); -1 or none
// kUnlimitedPlanBytes.
void add_memory_limit_option(CLI::App* cmd, const std::string& name, int64_t& target,
                             const std::string& help);

// `--last-stage K`: run stages 0..K of a staged plan only and check what they
// wrote (ExecuteOptions::last_stage, VerifyOptions::last_stage).
void add_last_stage_option(CLI::App* cmd, int32_t& target);

// One status line on stderr, redrawn in place ("planning 1,024 parts... 37%"),
// only when stderr is a terminal: pipes, files and CI logs see nothing.
class Progress {
 public:
  Progress();
  ~Progress();  // clears the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  bool active() const { return active_; }
  // Draws `what` followed by the percentage done/total (when total > 0);
  // redraws only when the text changes.
  void update(const std::string& what, int64_t done = 0, int64_t total = 0);
  void clear();

 private:
  bool active_ = false;
  std::string shown_;
};

// Devices, processes and hosts that the tensors' layouts use.
struct PlanFootprint {
  std::vector<int64_t> devices;  // sorted
  int64_t processes = 0;
  int64_t hosts = 0;
};
PlanFootprint footprint(const PlanInput& input);

// Wall-clock timing: reshard::seconds_since (reshard/wait.h).
using reshard::seconds_since;

// ---- drawing (draw.cc)
// Text picture of a layout in the style of jax.debug.visualize_array_sharding.
std::string draw_layout_text(const Layout& layout);
// Send-bytes matrix (device × device, or summarised for many devices).
struct Traffic {
  std::vector<int64_t> devices;  // sorted
  // (source device, destination device) -> bytes; local copies on the diagonal.
  std::map<std::pair<int64_t, int64_t>, int64_t> bytes;
  // The part of `bytes` that relays forward (messages of stage > 0), by
  // (relay device, destination device).
  std::map<std::pair<int64_t, int64_t>, int64_t> forwarded;
  Topology topology;
};
Traffic traffic_of(const Plan& plan, const std::vector<int64_t>& devices);
std::string draw_traffic_text(const Traffic& traffic);

// SVG document built section by section, readable at any fleet size: layouts
// with more than 16 parts along a dim are drawn in bands, at most kMaxGroups
// layout pairs are drawn, the send matrix is by device up to 32 devices and
// by host (or bands of hosts, at most 128) beyond; text never overlaps.
class Svg {
 public:
  static constexpr size_t kMaxGroups = 12;
  void title(const std::string& text);
  void layouts(const std::string& heading, const Layout& src, const Layout& dst);
  void traffic(const Traffic& traffic);
  // Without a send matrix (too many pieces): per host, bytes sent and
  // received; `why` says why there is no matrix.
  void totals(const std::vector<DeviceTraffic>& per_device, const Topology& topology,
              const std::string& why);
  std::string finish();

 private:
  void flush_omitted();
  double y_ = 10;
  double width_ = 820;
  size_t groups_ = 0, omitted_ = 0;
  std::string body_;
};

}  // namespace reshard::cli
