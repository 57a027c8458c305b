// `reshard simulate`: predict a plan's execution time on a cluster
// (reshard/simulate.h), its lower bound over all plans, and the time of the
// same data movement scheduled the way common systems do it.
#include <charconv>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "reshard/error.h"
#include "reshard/simulate.h"

namespace reshard::cli {
namespace {

using ojson = nlohmann::ordered_json;

// --chunks best: each pipelined peer (rank0_broadcast, layered) is
// simulated at four chunks per hop, then at 4, 16, 64, ... chunks until its
// time stops improving, at most kMaxBestChunks chunks and kMaxBestMessages
// messages (the peer's best configuration, docs/simulate.md "Modelled
// peers").
constexpr int32_t kBestChunks = -1;
constexpr int32_t kMaxBestChunks = 4096;
constexpr size_t kMaxBestMessages = size_t{2} << 20;

struct SimulateArgs {
  InputOptions input;
  std::string topology;
  std::string format = "text";
  int32_t threads = 1;
  std::vector<std::string> peers = {"rank0_broadcast", "direct_p2p", "layered"};
  // The peers' chunks: a count (0: four per hop of the longest chain) or
  // kBestChunks, the count that makes each pipelined peer fastest.
  int32_t chunks = kBestChunks;
  int64_t max_sim_bytes = 0;     // plan_messages_by_part's max_bytes
  int64_t max_stats_pieces = 0;  // plan_messages_by_part's max_stats_pieces
  // The α–β costs the plan is made with: "topology" (the cluster's) or
  // "spec" (the spec's options).
  std::string plan_costs = "topology";
  bool plan_costs_given = false;
};

// The plan's cost options from the cluster it is simulated on (α, the
// intra-host and per-NIC bandwidths, NICs per host unless --nics-per-host
// set them): the planner then decides by an estimate of the same links
// (docs/simulate.md). The cluster's host link cap has no planner option.
void plan_for_cluster(PlanOptions& o, const ClusterTopology& c, const InputOptions& in) {
  o.alpha_seconds = c.alpha_seconds;
  o.intra_host_bytes_per_second = c.intra_host_bytes_per_second;
  o.inter_host_bytes_per_second = c.nic_bytes_per_second;
  if (in.nics_per_host < 0) o.nics_per_host = c.nics_per_host;
  try {
    validate(o);
  } catch (const Error& e) {
    throw InvalidInput("--topology: its costs cannot plan (" + std::string(e.what()) +
                       "); --plan-costs spec plans with the spec's options");
  }
}

ojson link_json(const SimLink& l) {
  ojson j;
  j["link"] = std::string(link_class_name(l.cls));
  j["host"] = l.host;
  if (l.device >= 0) j["device"] = l.device;
  if (l.nic >= 0) j["nic_group"] = l.nic;
  j["bytes_per_second"] = l.bytes_per_second;
  return j;
}

std::string link_text(const SimLink& l) {
  std::string s = std::string(link_class_name(l.cls)) + " of host " + std::to_string(l.host);
  if (l.device >= 0) s += ", device " + std::to_string(l.device);
  if (l.nic >= 0) s += ", NIC group " + std::to_string(l.nic);
  return s;
}

struct Run {
  SimResult result;
  double seconds = 0;   // wall time of planning + simulating
  int32_t chunks = 0;   // the chunks simulated (pipelined peers)
  std::string tried;    // --chunks best: "4: 0.167 s, 16: ..." (text)
  ojson tried_json;     // the same, [[chunks, seconds], ...]
  bool capped = false;  // the search stopped at its message cap
};

// A pipelined peer at `chunks`, or at its fastest count (kBestChunks).
Run pipelined_peer(const std::string& name, const PlanInput& input, const ClusterTopology& cluster,
                   int32_t chunks) {
  auto messages = [&](int32_t c) {
    return name == "rank0_broadcast" ? rank0_broadcast_messages(input, c)
                                     : layered_messages(input, c);
  };
  Run best;
  if (chunks != kBestChunks) {
    best.result = simulate(input.topology, cluster, messages(chunks));
    best.chunks = chunks;
    return best;
  }
  best.tried_json = ojson::array();
  bool have = false;
  // One count: simulated, kept if fastest so far; its time.
  auto run = [&](int32_t c, std::vector<SimMessage> m) {
    SimResult r = simulate(input.topology, cluster, std::move(m));
    const double seconds = r.seconds;
    best.tried_json.push_back({c, seconds});
    best.tried += (best.tried.empty() ? "" : ", ") +
                  (c == 0 ? std::string("4 per hop") : std::to_string(c)) + ": " +
                  human_seconds(seconds);
    if (!have || seconds < best.result.seconds) {
      best.result = std::move(r);
      best.chunks = c;
      have = true;
    }
    return seconds;
  };
  // The default (four chunks per hop of the longest chain), then 4, 16,
  // 64, ... until a count is no faster than the one before it.
  run(0, messages(0));
  double previous = 0;
  for (int32_t c = 4; c <= kMaxBestChunks; c *= 4) {
    std::vector<SimMessage> m = messages(c);
    if (m.size() > kMaxBestMessages) {
      best.capped = true;
      break;
    }
    const double seconds = run(c, std::move(m));
    if (c > 4 && !(seconds < previous)) break;
    previous = seconds;
  }
  return best;
}

int run_simulate(const SimulateArgs& args) {
  // --plan FILE: the messages of the plan bytes (every part), its inputs
  // for the bound and the peers.
  std::optional<Plan> from_file = load_plan_file(args.input);
  if (from_file) {
    for (int32_t p : from_file->processes())
      if (!from_file->parts().count(p))
        throw InvalidInput(
            "--plan: the file holds only some process parts; simulating needs "
            "every part (write it without --process, or give --spec)");
  }
  Spec spec = load_input(args.input);  // --budget with --plan refused there
  ClusterTopology cluster;
  try {
    cluster = load_cluster_topology(args.topology);
  } catch (const Error& e) {
    throw InvalidInput("--topology " + args.topology + ": " + e.what());
  }
  if (from_file && args.plan_costs_given)
    throw UsageError("--plan-costs cannot be combined with --plan (the plan is made already)");
  if (!from_file && args.plan_costs == "topology")
    plan_for_cluster(spec.input.options, cluster, args.input);
  const PlanInput& input = spec.input;
  auto t0 = WaitClock::now();
  Progress progress;
  // Our plan, streamed (simulate_plan): planned part by part and simulated
  // from compact records; its memory is estimated and checked first.
  SimResult ours;
  if (from_file) {
    ours = simulate_plan(*from_file, cluster);
  } else {
    try {
      SimPlanOptions so;
      so.threads = args.threads;
      so.parts_planned = [&](int64_t done, int64_t total) {
        progress.update("planning parts\u2026", done, total);
      };
      so.max_bytes = args.max_sim_bytes;
      so.max_stats_pieces = args.max_stats_pieces;
      ours = simulate_plan(input, cluster, so);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kResourceExhausted) throw;
      // The statistics' work, refused before they start: not the messages.
      if (e.field() == "request.max_stats_pieces")
        throw Error(e.code(), resource_message(e.what(), std::string()));
      throw Error(ErrorCode::kResourceExhausted,
                  std::string("--max-sim-bytes: ") + e.what() +
                      "; raise --max-sim-bytes (-1: no limit), or make fewer messages (--budget "
                      "0: unbounded staging, one round per stream, or a larger --budget)");
    }
  }
  const bool planned_here = !from_file;
  from_file.reset();
  const double plan_seconds = ours.plan_seconds;
  const double sim_seconds = seconds_since(t0) - plan_seconds;
  const SimBound bound = simulate_lower_bound(input, cluster);
  std::vector<std::pair<std::string, Run>> peers;
  for (const std::string& name : args.peers) {
    progress.update("simulating peer " + name + "\u2026");
    t0 = WaitClock::now();
    Run run;
    if (name == "direct_p2p") {
      // The single-hop plan, streamed like ours.
      PlanInput single = input;
      single.options.relays = false;
      single.options.reduce_scatter = false;
      SimPlanOptions so;
      so.threads = args.threads;
      so.max_bytes = args.max_sim_bytes;
      so.max_stats_pieces = args.max_stats_pieces;
      run.result = simulate_plan(single, cluster, so);
    } else {
      run = pipelined_peer(name, input, cluster, args.chunks);
    }
    run.seconds = seconds_since(t0);
    peers.emplace_back(name, std::move(run));
  }
  progress.clear();
  const double ratio = PlanStats::ratio(ours.seconds, bound.seconds);

  if (args.format == "json") {
    ojson j;
    j["topology"] = nlohmann::ordered_json::parse(cluster_topology_json(cluster));
    j["plan_costs"] = planned_here ? args.plan_costs : "plan";
    j["predicted_seconds"] = ours.seconds;
    j["lower_bound_seconds"] = bound.seconds;
    j["ratio"] = ratio;
    // The plan's α–β estimate (what the planner decides by) beside the
    // simulated time (what judges it).
    j["estimate_seconds"] = ours.estimate_seconds;
    j["estimate_ratio"] = PlanStats::ratio(ours.estimate_seconds, ours.seconds);
    ojson binding;
    if (ours.binding) {
      binding = link_json(*ours.binding);
      binding["saturated_seconds"] = ours.binding_saturated_seconds;
    }
    j["binding"] = binding;
    j["lower_bound"] = {{"kind", bound.kind},
                        {"id", bound.id},
                        {"bytes", bound.bytes},
                        {"bytes_per_second", bound.bytes_per_second},
                        {"fan", bound.fan}};
    ojson stages = ojson::array();
    for (const SimStage& s : ours.per_stage)
      stages.push_back({{"stage", s.stage},
                        {"start_seconds", s.start_seconds},
                        {"end_seconds", s.end_seconds},
                        {"messages", s.messages},
                        {"bytes", s.bytes}});
    j["per_stage"] = stages;
    j["messages"] = ours.messages;
    j["bytes"] = ours.bytes;
    j["events"] = ours.events;
    j["plan_seconds"] = plan_seconds;
    j["simulate_seconds"] = sim_seconds;
    ojson pj = ojson::object();
    for (const auto& [name, run] : peers) {
      ojson p;
      p["predicted_seconds"] = run.result.seconds;
      p["ratio"] = PlanStats::ratio(run.result.seconds, bound.seconds);
      p["messages"] = run.result.messages;
      p["events"] = run.result.events;
      p["bytes"] = run.result.bytes;
      if (name == "direct_p2p") {
        p["estimate_seconds"] = run.result.estimate_seconds;
        p["estimate_ratio"] = PlanStats::ratio(run.result.estimate_seconds, run.result.seconds);
      }
      if (run.result.binding) p["binding"] = link_json(*run.result.binding);
      if (name != "direct_p2p") {
        p["chunks"] = run.chunks;
        if (!run.tried_json.is_null()) {
          p["chunks_tried"] = run.tried_json;
          p["chunks_capped"] = run.capped;
        }
      }
      p["wall_seconds"] = run.seconds;
      pj[name] = p;
    }
    j["peers"] = pj;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "simulated on " << (cluster.name.empty() ? args.topology : cluster.name) << ": "
            << with_commas(ours.messages) << " messages, "
            << human_bytes(static_cast<double>(ours.bytes)) << "\n";
  if (planned_here)
    std::cout << "  planned with "
              << (args.plan_costs == "topology" ? "the topology's" : "the spec's")
              << " costs (alpha " << human_seconds(input.options.alpha_seconds) << ", intra-host "
              << human_bytes(input.options.intra_host_bytes_per_second) << "/s, NIC "
              << human_bytes(input.options.inter_host_bytes_per_second) << "/s, NICs per host "
              << input.options.nics_per_host << ")\n";
  std::cout << "  predicted    " << human_seconds(ours.seconds) << "\n";
  std::cout << "  lower bound  " << human_seconds(bound.seconds) << " (" << bound.kind << " "
            << bound.id << ": " << human_bytes(static_cast<double>(bound.bytes)) << " at "
            << human_bytes(bound.bytes_per_second) << "/s)\n";
  std::cout << "  ratio        " << ratio_str(ratio) << "\n";
  if (ours.estimate_seconds > 0)
    std::cout << "  estimate     " << human_seconds(ours.estimate_seconds) << " ("
              << ratio_str(PlanStats::ratio(ours.estimate_seconds, ours.seconds))
              << " of the simulated time)\n";
  if (ours.binding)
    std::cout << "  binding      " << link_text(*ours.binding) << " (saturated "
              << human_seconds(ours.binding_saturated_seconds) << ")\n";
  for (const SimStage& s : ours.per_stage)
    std::cout << "  stage " << s.stage << "      " << human_seconds(s.start_seconds) << " .. "
              << human_seconds(s.end_seconds) << ", " << with_commas(s.messages) << " messages, "
              << human_bytes(static_cast<double>(s.bytes)) << "\n";
  for (const auto& [name, run] : peers) {
    std::cout << "  peer " << name << ": " << human_seconds(run.result.seconds) << " (ratio "
              << ratio_str(PlanStats::ratio(run.result.seconds, bound.seconds)) << ", "
              << with_commas(run.result.messages) << " messages";
    if (name != "direct_p2p")
      std::cout << ", "
                << (run.chunks == 0 ? std::string("4 chunks per hop")
                                    : std::to_string(run.chunks) + " chunks");
    if (!run.tried.empty())
      std::cout << "; tried " << run.tried << (run.capped ? ", then capped" : "");
    std::cout << ")\n";
  }
  std::cout << "  planning took " << human_seconds(plan_seconds) << ", simulating "
            << human_seconds(sim_seconds) << " (" << with_commas(ours.events) << " events)\n";
  return 0;
}

}  // namespace

Runner add_simulate_command(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Predict a plan's time on a cluster, its lower bound and modelled peers");
  add_input_options(cmd, args->input);
  add_plan_file_option(cmd, args->input);
  cmd->add_option("--topology", args->topology,
                  "cluster topology JSON (alpha_seconds, intra_host_bytes_per_second, "
                  "nic_bytes_per_second, nics_per_host, host_link_bytes_per_second)")
      ->required()
      ->type_name("FILE");
  cmd->add_option("--format", args->format, "output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads,
                  "threads planning each part (0: every hardware thread)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--peers", args->peers, "modelled peers to simulate (none: --peers '')")
      ->check(CLI::IsMember({"rank0_broadcast", "direct_p2p", "layered", ""}))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--chunks",
         [args](const std::string& v) { args->chunks = v == "best" ? kBestChunks : std::stoi(v); },
         "chunks of the peers' pipelined chains (rank0_broadcast, layered): 'best' (4 per "
         "hop, then 4, 16, 64, ... until the peer's time stops improving, at most 2,097,152 "
         "messages), or a count (0: 4 per hop) [best]")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "best") return {};
            int32_t c = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), c);
            if (ec != std::errc() || end != v.data() + v.size() || c < 0)
              return "'best' or a count >= 0 expected, got '" + v + "'";
            return {};
          },
          "best|N"))
      ->type_name("best|N");
  cmd->add_option_function<std::string>(
         "--plan-costs",
         [args](const std::string& v) {
           args->plan_costs = v;
           args->plan_costs_given = true;
         },
         "the alpha-beta costs the plan is made with: 'topology' (the cluster's alpha, "
         "bandwidths and NICs per host, so the planner decides for the cluster simulated; "
         "--nics-per-host still wins) or 'spec' (the spec's options) [topology]")
      ->check(CLI::IsMember({"topology", "spec"}));
  add_memory_limit_option(
      cmd, "--max-sim-bytes", args->max_sim_bytes,
      "memory planning and simulating the plan may take, estimated from its message count "
      "before any part is planned (bytes, or 8G, 512M, ...); above it the command stops "
      "with the estimate. 0: half the memory available; -1 or none: no limit");
  add_max_stats_pieces_option(cmd, args->max_stats_pieces);
  cmd->footer(
      "Example:\n  reshard simulate --spec bench/specs/rl_sync_fsdp8_to_2x_tp4.json "
      "--topology bench/topologies/h100_8gpu_ndr400.json --format json\n\n"
      "Model and output: docs/simulate.md.\n");
  return [args]() {
    std::erase(args->peers, std::string());
    return run_simulate(*args);
  };
}

}  // namespace reshard::cli
