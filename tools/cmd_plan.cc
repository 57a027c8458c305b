// `reshard plan`: plan a reshard and print its statistics.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli.h"
#include "reshard/block_scales.h"
#include "reshard/error.h"
#include "reshard/wire.h"

namespace reshard::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct PlanArgs {
  InputOptions input;
  std::string format = "text";
  int32_t process = -1;
  std::string out;
  int32_t threads = 1;           // PlanRequest::threads of the parts planned
  int64_t max_plan_bytes = 0;    // PlanRequest::max_plan_bytes of the parts planned
  int64_t max_stats_pieces = 0;  // PlanRequest::max_stats_pieces
  int64_t max_output_bytes = 0;  // --max-output-bytes: the largest --out file; 0: 2 GiB - 1
};

PlanRequest part_request(const PlanArgs& args, PlanScope scope, int32_t process,
                         bool global_stats) {
  PlanRequest r{scope, process, global_stats};
  r.threads = args.threads;
  r.max_plan_bytes = args.max_plan_bytes;
  r.max_stats_pieces = args.max_stats_pieces;
  return r;
}

// The most bytes one plan buffer (FlatBuffers) holds.
constexpr int64_t kMaxPlanFileBytes = (int64_t{1} << 31) - 1;

// `--out` of every part: the plan, then its bytes built beside it (the
// FlatBuffers builder grows by doubling, then the bytes are copied out: up
// to three times their size). Refuses before planning when the estimate of
// every part `e` (estimate_plan of PlanScope::kAll with args' limit) is
// above what a plan file holds or above --max-plan-bytes.
void check_whole_plan_file(const PlanArgs& args, const PlanEstimate& e) {
  const std::string what = "writing every process part (" + with_commas(e.parts) + " parts, " +
                           with_commas(e.pieces) + " pieces)";
  if (e.encoded_bytes > kMaxPlanFileBytes)
    throw Error(ErrorCode::kResourceExhausted,
                "--out: " + what + " makes about " +
                    human_bytes(static_cast<double>(e.encoded_bytes)) +
                    " of plan bytes, more than one plan file holds (2 GiB); write one process's "
                    "part per file (--process P)");
  const int64_t need = e.memory_bytes + 3 * e.encoded_bytes;
  if (e.limit_bytes != kUnlimitedPlanBytes && need > e.limit_bytes)
    throw Error(
        ErrorCode::kResourceExhausted,
        "--max-plan-bytes: " + what + " needs about " + human_bytes(static_cast<double>(need)) +
            " of memory (the plan " + human_bytes(static_cast<double>(e.memory_bytes)) +
            ", its bytes " + human_bytes(static_cast<double>(e.encoded_bytes)) +
            " built up to three times), above the limit of " +
            human_bytes(static_cast<double>(e.limit_bytes)) + " (" + with_commas(e.limit_bytes) +
            " bytes" + (args.max_plan_bytes == 0 ? ": the default, half the memory)" : ")") +
            "; write one process's part at a time (--process P), or raise "
            "--max-plan-bytes (-1: no limit)");
}

// `--process P --out`: refuses before planning the part where its plan
// bytes, estimated from the global statistics' counts of its pieces,
// messages and regions (PlanEstimate::process_encoded_bytes, which errs
// high: 1.4x on the 405B part at 1,024 devices), are above what one plan
// file holds or --max-output-bytes.
void check_part_plan_file(const PlanArgs& args, const PlanEstimate& e) {
  const int64_t most = args.max_output_bytes > 0
                           ? std::min(args.max_output_bytes, kMaxPlanFileBytes)
                           : kMaxPlanFileBytes;
  if (e.process_encoded_bytes <= most) return;
  throw Error(ErrorCode::kResourceExhausted,
              "--out: process " + std::to_string(args.process) + "'s part makes about " +
                  human_bytes(static_cast<double>(e.process_encoded_bytes)) +
                  " of plan bytes (at least " +
                  human_bytes(static_cast<double>(e.process_least_encoded_bytes)) + "; " +
                  with_commas(e.process_pieces) + " pieces, " + with_commas(e.process_messages) +
                  " messages, " + with_commas(e.process_regions) +
                  " regions, estimated from the global statistics before planning it), more than " +
                  (most == kMaxPlanFileBytes
                       ? std::string("one plan file holds (2 GiB)")
                       : "--max-output-bytes allows (" + with_commas(most) + " bytes)") +
                  "; raise the staging budget (--budget: fewer rounds cut each stream into fewer "
                  "messages; 0: none), or plan the part in the process that runs it (reshard run, "
                  "PlanScope::kProcess) instead of writing it");
}

ojson stats_json(const PlanStats& s) {
  ojson j;
  j["network_bytes"] = s.network_bytes;
  j["local_bytes"] = s.local_bytes;
  j["cross_host_bytes"] = s.cross_host_bytes;
  j["cross_process_bytes"] = s.cross_process_bytes;
  j["max_send_bytes"] = s.max_send_bytes;
  j["max_recv_bytes"] = s.max_recv_bytes;
  j["messages"] = s.messages;
  j["pieces"] = s.pieces;
  j["rounds"] = s.rounds;
  j["peak_staging_bytes"] = s.peak_staging_bytes;
  j["lower_bound_network_bytes"] = s.lower_bound_network_bytes;
  j["lower_bound_max_send_bytes"] = s.lower_bound_max_send_bytes;
  j["lower_bound_max_recv_bytes"] = s.lower_bound_max_recv_bytes;
  j["cost_seconds"] = s.cost_seconds;
  j["lower_bound_cost_seconds"] = s.lower_bound_cost_seconds;
  j["plan_seconds"] = s.plan_seconds;
  j["stages"] = s.stages;
  j["max_host_send_bytes"] = s.max_host_send_bytes;
  j["max_host_recv_bytes"] = s.max_host_recv_bytes;
  j["lower_bound_cross_host_bytes"] = s.lower_bound_cross_host_bytes;
  j["lower_bound_max_host_send_bytes"] = s.lower_bound_max_host_send_bytes;
  j["lower_bound_max_host_recv_bytes"] = s.lower_bound_max_host_recv_bytes;
  j["lower_bound_binding"] = std::string(bound_kind_name(s.lower_bound_binding));
  j["lower_bound_binding_id"] = s.lower_bound_binding_id;
  j["forwarded_bytes"] = s.forwarded_bytes;
  j["max_scratch_bytes"] = s.max_scratch_bytes;
  auto r = [](int64_t f, int64_t b) {
    return PlanStats::ratio(static_cast<double>(f), static_cast<double>(b));
  };
  j["network_bytes_ratio"] = r(s.network_bytes, s.lower_bound_network_bytes);
  j["max_send_bytes_ratio"] = r(s.max_send_bytes, s.lower_bound_max_send_bytes);
  j["max_recv_bytes_ratio"] = r(s.max_recv_bytes, s.lower_bound_max_recv_bytes);
  j["cross_host_bytes_ratio"] = r(s.cross_host_bytes, s.lower_bound_cross_host_bytes);
  j["max_host_send_bytes_ratio"] = r(s.max_host_send_bytes, s.lower_bound_max_host_send_bytes);
  j["max_host_recv_bytes_ratio"] = r(s.max_host_recv_bytes, s.lower_bound_max_host_recv_bytes);
  j["cost_seconds_ratio"] = PlanStats::ratio(s.cost_seconds, s.lower_bound_cost_seconds);
  ojson per = ojson::array();
  for (const DeviceTraffic& d : s.per_device)
    per.push_back({{"device", d.device},
                   {"send_bytes", d.send_bytes},
                   {"recv_bytes", d.recv_bytes},
                   {"local_bytes", d.local_bytes},
                   {"send_messages", d.send_messages},
                   {"recv_messages", d.recv_messages}});
  j["per_device"] = per;
  return j;
}

std::string bytes_line(const char* label, int64_t v) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-22s %12s  (%s B)\n", label,
                human_bytes(static_cast<double>(v)).c_str(), with_commas(v).c_str());
  return buf;
}
std::string bound_line(const char* label, int64_t v, int64_t bound) {
  char buf[200];
  std::snprintf(
      buf, sizeof buf, "  %-22s %12s  (lower bound %s, ratio %s)\n", label,
      human_bytes(static_cast<double>(v)).c_str(), human_bytes(static_cast<double>(bound)).c_str(),
      ratio_str(PlanStats::ratio(static_cast<double>(v), static_cast<double>(bound))).c_str());
  return buf;
}
std::string count_line(const char* label, int64_t v) {
  char buf[120];
  std::snprintf(buf, sizeof buf, "  %-22s %12s\n", label, with_commas(v).c_str());
  return buf;
}

// uncast: the network bytes without casts in flight, when the spec has some.
std::string stats_text(const PlanStats& s, std::optional<int64_t> uncast = {}) {
  std::string out;
  out += bound_line("network bytes", s.network_bytes, s.lower_bound_network_bytes);
  if (uncast) out += bytes_line("  before casts", *uncast);
  out += bytes_line("  cross-process", s.cross_process_bytes);
  out += bound_line("  cross-host", s.cross_host_bytes, s.lower_bound_cross_host_bytes);
  out += bytes_line("local copy bytes", s.local_bytes);
  out += bound_line("max send per device", s.max_send_bytes, s.lower_bound_max_send_bytes);
  out += bound_line("max recv per device", s.max_recv_bytes, s.lower_bound_max_recv_bytes);
  out += bound_line("max send per host", s.max_host_send_bytes, s.lower_bound_max_host_send_bytes);
  out += bound_line("max recv per host", s.max_host_recv_bytes, s.lower_bound_max_host_recv_bytes);
  out += count_line("stages", s.stages);
  if (s.forwarded_bytes > 0) out += bytes_line("  forwarded by relays", s.forwarded_bytes);
  if (s.max_scratch_bytes > 0) out += bytes_line("max scratch per device", s.max_scratch_bytes);
  out += count_line("messages", s.messages);
  out += count_line("pieces", s.pieces);
  out += count_line("rounds", s.rounds);
  out += bytes_line("peak staging", s.peak_staging_bytes);
  char buf[200];
  std::snprintf(buf, sizeof buf, "  %-22s %12s  (lower bound %s, ratio %s)\n", "cost estimate",
                human_seconds(s.cost_seconds).c_str(),
                human_seconds(s.lower_bound_cost_seconds).c_str(),
                ratio_str(PlanStats::ratio(s.cost_seconds, s.lower_bound_cost_seconds)).c_str());
  out += buf;
  if (s.lower_bound_binding != BoundKind::kNone) {
    const bool host = s.lower_bound_binding == BoundKind::kHostRecv ||
                      s.lower_bound_binding == BoundKind::kHostSend;
    std::snprintf(buf, sizeof buf, "    %-20s %s (%s %lld)\n", "bound that binds",
                  std::string(bound_kind_name(s.lower_bound_binding)).c_str(),
                  host ? "host" : "device", static_cast<long long>(s.lower_bound_binding_id));
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "  %-22s %12s\n", "plan time",
                human_seconds(s.plan_seconds).c_str());
  out += buf;
  return out;
}

struct PartSummary {
  int64_t local_pieces = 0, send_messages = 0, send_pieces = 0, send_bytes = 0;
  int64_t recv_messages = 0, recv_pieces = 0, recv_bytes = 0, local_bytes = 0;
};
PartSummary summarize(const Plan& plan, const ProcessPart& part) {
  PartSummary s;
  s.local_pieces = static_cast<int64_t>(part.local.size());
  for (const Piece& p : part.local) s.local_bytes += plan.piece_bytes(part, p);
  s.send_messages = static_cast<int64_t>(part.sends.size());
  s.send_pieces = static_cast<int64_t>(part.send_pieces.size());
  for (const Message& m : part.sends) s.send_bytes += m.bytes;
  s.recv_messages = static_cast<int64_t>(part.recvs.size());
  s.recv_pieces = static_cast<int64_t>(part.recv_pieces.size());
  for (const Message& m : part.recvs) s.recv_bytes += m.bytes;
  return s;
}

// `--out FILE`: the whole plan (every process part), or with --process P
// only that worker's part, with the global statistics, as FlatBuffers bytes.
// `whole`: the estimate of every part run_plan computed.
// `part`: process P's part planned already (--process P, with the global
// statistics), else null.
void write_plan_file(const PlanArgs& args, const PlanInput& input, const PlanEstimate& whole,
                     const Plan* part) {
  const bool one = args.process >= 0;
  if (!one) check_whole_plan_file(args, whole);
  std::optional<Plan> planned;
  if (!part)
    planned = plan_spec(input, one ? part_request(args, PlanScope::kProcess, args.process, true)
                                   : part_request(args, PlanScope::kAll, 0, true));
  const Plan& plan = part ? *part : *planned;
  EncodeOptions eo;
  eo.all_parts = !one;
  eo.process = one ? args.process : 0;
  eo.mac_key = read_key_file(args.input);
  // The bytes go to the file from where the encoder built them (the 405B
  // part at 16,384 devices is 1.1 GB: no zeroed vector, no second copy);
  // the file is opened once they are whole, so a failure to encode leaves
  // it as it was.
  size_t written = 0;
  {
    Progress progress;
    progress.update("encoding the plan\u2026");
    encode_plan_to(plan, eo, [&](std::span<const uint8_t> bytes) {
      std::ofstream f(args.out, std::ios::binary | std::ios::trunc);
      if (!f) throw Failure("--out: cannot write \"" + args.out + "\"");
      f.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
      f.close();
      if (!f) throw Failure("--out: writing \"" + args.out + "\" failed");
      written = bytes.size();
    });
  }
  std::cerr << "wrote " << with_commas(static_cast<int64_t>(written)) << " bytes ("
            << (one ? "process " + std::to_string(args.process) + "'s part"
                    : std::string("every process part"))
            << ") to " << args.out << "\n";
}

// One line per mesh whose hosts defaulted to its processes (Spec::
// hosts_defaulted): with one process per GPU, every GPU then counts as its
// own host and traffic inside a machine is costed as network traffic.
std::vector<std::string> hosts_notes(const Spec& spec, bool from_flags) {
  std::vector<std::string> notes;
  for (const std::string& name : spec.hosts_defaulted) {
    std::set<int32_t> hosts;
    const std::vector<int64_t>& devices = spec.meshes.at(name)->devices;
    for (int64_t d : devices) hosts.insert(spec.input.topology.info(d).host);
    const std::string what = from_flags ? "--" + name + "-mesh" : "mesh \"" + name + "\"";
    const std::string key = from_flags ? "--" + name + "-hosts" : "\"hosts\"";
    notes.push_back(what + " gives no " + key + ": each process counts as its own host (" +
                    std::to_string(hosts.size()) + (hosts.size() == 1 ? " host" : " hosts") +
                    " for " + std::to_string(devices.size()) + " devices); give " + key +
                    " when processes share a machine");
  }
  return notes;
}

int run_plan(const PlanArgs& args) {
  if (!args.input.key_file.empty() && args.out.empty())
    throw UsageError("--key-file needs --out (the plan file it signs)");
  // The key before any planning: a bad one fails at once.
  (void)read_key_file(args.input);
  const Spec spec = load_input(args.input);
  const PlanFootprint fp = footprint(spec.input);

  // Global statistics (no piece lists, cheap at any scale) and what every
  // part (--out) would take, computed once: estimate_plan's statistics are
  // those of PlanScope::kGlobal.
  auto t0 = WaitClock::now();
  PlanStats global_stats;
  // (request.process: the figures of --process P's part beside them.)
  const PlanRequest whole_request =
      part_request(args, PlanScope::kAll, std::max(args.process, 0), true);
  PlanEstimate whole;
  double global_seconds = 0, part_seconds = 0;
  std::optional<Plan> part_plan;
  if (args.process >= 0 && !args.out.empty()) {
    // --process P --out: the part planned on the estimate's decisions and
    // global statistics (one computation of them), refused first where
    // the file cannot hold it.
    part_plan = plan_part_spec(spec.input, whole_request,
                               part_request(args, PlanScope::kProcess, args.process, true),
                               &global_stats, [&](const PlanEstimate& e) {
                                 whole = e;
                                 global_seconds = seconds_since(t0);
                                 check_part_plan_file(args, whole);
                                 t0 = WaitClock::now();
                               });
    part_seconds = seconds_since(t0);
  } else {
    whole = estimate_spec(spec.input, whole_request, &global_stats);
    global_seconds = seconds_since(t0);
  }
  const uint64_t fingerprint = plan_fingerprint(spec.input);
  // Casts in flight: the bytes the same move would take without them (the
  // inputs planned again, every destination in its source's dtype, without
  // block scales and their scale tensors).
  std::optional<int64_t> uncast_network_bytes;
  if (std::any_of(spec.input.tensors.begin(), spec.input.tensors.end(),
                  [](const TensorSpec& t) { return has_cast(t); })) {
    PlanInput uncast = spec.input;
    const std::vector<uint8_t> scales = scale_tensor_flags(spec.input.tensors);
    uncast.tensors.clear();
    for (size_t i = 0; i < spec.input.tensors.size(); ++i) {
      if (scales[i]) continue;
      TensorSpec t = spec.input.tensors[i];
      t.dst_dtype = DType{};
      t.scale_tensor = -1;
      t.scale_block.clear();
      t.scale_dtype = DType::kF32;
      uncast.tensors.push_back(std::move(t));
    }
    PlanStats s;
    (void)estimate_spec(uncast, part_request(args, PlanScope::kAll, 0, true), &s);
    uncast_network_bytes = s.network_bytes;
  }

  if (args.process >= 0 && args.out.empty()) {
    t0 = WaitClock::now();
    part_plan = plan_spec(spec.input, part_request(args, PlanScope::kProcess, args.process, false));
    part_seconds = seconds_since(t0);
  }
  const ProcessPart* part = nullptr;
  if (part_plan) {
    auto it = part_plan->parts().find(args.process);
    if (it != part_plan->parts().end()) part = &it->second;
  }
  const PartSummary ps = part ? summarize(*part_plan, *part) : PartSummary{};

  if (args.format == "json") {
    ojson j;
    j["fingerprint"] = hex64(fingerprint);
    j["tensors"] = spec.input.tensors.size();
    j["devices"] = fp.devices.size();
    j["processes"] = fp.processes;
    j["hosts"] = fp.hosts;
    // Names of the meshes whose hosts defaulted to their processes.
    j["hosts_defaulted"] = spec.hosts_defaulted;
    j["global_seconds"] = global_seconds;
    j["stats"] = stats_json(global_stats);
    if (uncast_network_bytes) j["stats"]["network_bytes_before_casts"] = *uncast_network_bytes;
    j["estimate"] = {{"parts", whole.parts},
                     {"pieces", whole.pieces},
                     {"messages", whole.messages},
                     {"regions", whole.regions},
                     {"memory_bytes", whole.memory_bytes},
                     {"encoded_bytes", whole.encoded_bytes},
                     {"limit_bytes", whole.limit_bytes}};
    if (args.process >= 0) {
      // --process P's part alone (PlanEstimate::process_*).
      j["estimate"]["process_pieces"] = whole.process_pieces;
      j["estimate"]["process_messages"] = whole.process_messages;
      j["estimate"]["process_regions"] = whole.process_regions;
      j["estimate"]["process_encoded_bytes"] = whole.process_encoded_bytes;
      j["estimate"]["process_least_encoded_bytes"] = whole.process_least_encoded_bytes;
    }
    if (part_plan) {
      j["process"] = {
          {"process", args.process},           {"plan_seconds", part_seconds},
          {"threads", args.threads},           {"fingerprint", hex64(part_plan->fingerprint())},
          {"local_pieces", ps.local_pieces},   {"local_bytes", ps.local_bytes},
          {"send_messages", ps.send_messages}, {"send_pieces", ps.send_pieces},
          {"send_bytes", ps.send_bytes},       {"recv_messages", ps.recv_messages},
          {"recv_pieces", ps.recv_pieces},     {"recv_bytes", ps.recv_bytes}};
    }
    // The file first (issue 37: --format json used to return before
    // writing it): a failure to write exits non-zero with nothing on stdout.
    if (!args.out.empty())
      write_plan_file(args, spec.input, whole, part_plan ? &*part_plan : nullptr);
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "plan: " << spec.input.tensors.size() << " tensors, " << fp.devices.size()
            << " devices, " << fp.processes << " processes, " << fp.hosts << " hosts; fingerprint "
            << hex64(fingerprint) << "\n";
  for (const std::string& note : hosts_notes(spec, args.input.spec.empty()))
    std::cout << "note: " << note << "\n";
  std::cout << stats_text(global_stats, uncast_network_bytes);
  std::cout << "  global statistics took " << human_seconds(global_seconds)
            << " (PlanScope::kGlobal, with the estimate below)\n";
  std::cout << "every part (" << with_commas(whole.parts)
            << "), estimated: " << human_bytes(static_cast<double>(whole.memory_bytes))
            << " of memory to plan, " << human_bytes(static_cast<double>(whole.encoded_bytes))
            << " as plan bytes; limit "
            << (whole.limit_bytes == kUnlimitedPlanBytes
                    ? std::string("none")
                    : human_bytes(static_cast<double>(whole.limit_bytes)))
            << " (--max-plan-bytes)\n";
  if (part_plan) {
    std::cout << "process " << args.process << " part (PlanScope::kProcess), planned in "
              << human_seconds(part_seconds)
              << (args.threads == 1
                      ? std::string()
                      : " on " + (args.threads == 0 ? std::string("one thread per usable core")
                                                    : std::to_string(args.threads) + " threads"))
              << ":\n";
    if (!part) {
      std::cout << "  (process " << args.process << " owns no device of this plan)\n";
    } else {
      std::cout << count_line("local pieces", ps.local_pieces)
                << bytes_line("local bytes", ps.local_bytes)
                << count_line("send messages", ps.send_messages)
                << count_line("send pieces", ps.send_pieces)
                << bytes_line("send bytes", ps.send_bytes)
                << count_line("recv messages", ps.recv_messages)
                << count_line("recv pieces", ps.recv_pieces)
                << bytes_line("recv bytes", ps.recv_bytes);
    }
    if (part_plan->fingerprint() != fingerprint)
      throw Failure("fingerprint of the process part differs from the global plan's");
  }
  if (!args.out.empty())
    write_plan_file(args, spec.input, whole, part_plan ? &*part_plan : nullptr);
  return 0;
}

}  // namespace

Runner add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Plan a reshard and print its statistics");
  add_input_options(cmd, args->input);
  cmd->add_option("--format", args->format, "output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--process", args->process,
                  "also plan only this process's part (as a worker would) and print its pieces, "
                  "messages and planning time")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--out", args->out,
                  "write the plan as FlatBuffers bytes (every part; with --process only that "
                  "part) for `reshard verify --plan` / `show --plan` or another process")
      ->type_name("FILE");
  add_key_file_option(cmd, args->input,
                      "sign the --out file with an HMAC-SHA-256 under the key in FILE (its "
                      "bytes, exactly: 16 to 1024 random bytes, e.g. head -c 32 /dev/urandom)");
  cmd->add_option("--threads", args->threads,
                  "threads planning the parts (--process, --out); 0 = every hardware thread. "
                  "The plan is the same for any value")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add_max_plan_bytes_option(cmd, args->max_plan_bytes);
  add_max_stats_pieces_option(cmd, args->max_stats_pieces);
  cmd->add_option("--max-output-bytes", args->max_output_bytes,
                  "largest --out file of one process's part (--process P), e.g. 512MiB: above "
                  "it the part is refused before it is planned, from the global statistics' "
                  "counts (default and most: 2 GiB, what one plan file holds)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::PositiveNumber)
      ->type_name("BYTES");
  cmd->footer(
      std::string("Example:\n  reshard plan --spec examples/specs/small_transformer.json "
                  "--format json\n\n"
                  "A mesh without \"hosts\" puts each process on its own host; the output\n"
                  "says so (\"note:\" lines; \"hosts_defaulted\": mesh names, in JSON).\n\n") +
      kSingleTensorHelp);
  return [args]() { return run_plan(*args); };
}

}  // namespace reshard::cli
