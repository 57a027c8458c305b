// `reshard show`: draw source and destination shardings and the send matrix.
#include <fstream>
#include <iostream>
#include <map>

#include "cli.h"
#include "reshard/error.h"

namespace reshard::cli {
namespace {

// Materialising every piece is fine up to this many; beyond, the matrix is
// summarised from the global statistics.
constexpr int64_t kMaxPiecesForMatrix = 2'000'000;

struct ShowArgs {
  InputOptions input;
  std::string tensor;
  std::string svg;
  int64_t max_plan_bytes = 0;  // PlanRequest::max_plan_bytes of the send matrix's plan
};

int run_show(const ShowArgs& args) {
  Spec spec = load_input(args.input);
  PlanInput input = spec.input;
  if (!args.tensor.empty()) {
    std::vector<TensorSpec> kept;
    for (const TensorSpec& t : input.tensors)
      if (t.name == args.tensor) kept.push_back(t);
    if (kept.empty()) {
      std::string names;
      for (size_t i = 0; i < input.tensors.size() && i < 8; ++i)
        names += (i ? ", " : "") + input.tensors[i].name;
      if (input.tensors.size() > 8) names += ", ...";
      throw UsageError("--tensor: no tensor named \"" + args.tensor + "\" (tensors: " + names +
                       ")");
    }
    input.tensors = std::move(kept);
  }

  // Tensors with equal layouts draw alike: draw each pair of layouts once.
  struct Group {
    size_t first;
    std::vector<size_t> others;
  };
  std::vector<Group> groups;
  std::map<std::pair<uint64_t, uint64_t>, size_t> by_layouts;
  for (size_t i = 0; i < input.tensors.size(); ++i) {
    const TensorSpec& t = input.tensors[i];
    auto [it, inserted] =
        by_layouts.emplace(std::make_pair(t.src.hash(), t.dst.hash()), groups.size());
    if (inserted)
      groups.push_back({i, {}});
    else
      groups[it->second].others.push_back(i);
  }

  Svg svg;
  svg.title("reshard: " +
            (args.input.spec.empty() ? std::string("tensor from flags") : args.input.spec));
  for (const Group& g : groups) {
    const TensorSpec& t = input.tensors[g.first];
    std::string heading =
        t.name + "  " + shape_str(t.shape) + " " + std::string(dtype_name(t.dtype)) +
        (has_cast(t) ? " -> " + std::string(dtype_name(out_dtype(t))) : std::string());
    if (has_block_scales(t)) {
      std::string block;
      for (size_t d = 0; d < t.scale_block.size(); ++d)
        block += (d ? "x" : "") + std::to_string(t.scale_block[d]);
      heading += ", scales " + block + " in " + input.tensors[t.scale_tensor].name;
    }
    std::string also;
    if (!g.others.empty()) {
      for (size_t k = 0; k < g.others.size() && k < 3; ++k)
        also += (k ? ", " : "") + input.tensors[g.others[k]].name;
      if (g.others.size() > 3) also += ", and " + std::to_string(g.others.size() - 3) + " more";
    }
    std::cout << "\u2501\u2501 " << heading << "\n";
    if (!also.empty()) std::cout << "   same layouts: " << also << "\n";
    std::cout << "source:\n"
              << draw_layout_text(t.src) << "destination:\n"
              << draw_layout_text(t.dst) << "\n";
    svg.layouts(heading + (also.empty() ? "" : "  (also " + also + ")"), t.src, t.dst);
  }

  const PlanFootprint fp = footprint(input);
  const Plan global = plan_spec(input, PlanRequest{PlanScope::kGlobal, 0, true});
  std::cout << "\u2501\u2501 plan";
  if (!args.tensor.empty()) std::cout << " of " << args.tensor;
  std::cout << ": network " << human_bytes(static_cast<double>(global.stats().network_bytes))
            << " (ratio to bound "
            << ratio_str(
                   PlanStats::ratio(static_cast<double>(global.stats().network_bytes),
                                    static_cast<double>(global.stats().lower_bound_network_bytes)))
            << "), local " << human_bytes(static_cast<double>(global.stats().local_bytes)) << ", "
            << with_commas(global.stats().messages) << " messages\n";
  bool drawn = false;
  std::string why = with_commas(global.stats().pieces) + " pieces, more than " +
                    with_commas(kMaxPiecesForMatrix) + ": no send matrix";
  if (global.stats().pieces <= kMaxPiecesForMatrix) {
    PlanRequest request{PlanScope::kAll, 0, true};
    request.max_plan_bytes = args.max_plan_bytes;
    try {
      const Plan plan = plan_spec(input, request, "");
      const Traffic traffic = traffic_of(plan, fp.devices);
      std::cout << draw_traffic_text(traffic);
      svg.traffic(traffic);
      drawn = true;
    } catch (const Error& e) {
      // Too big to plan whole here: the summary below needs no parts.
      if (e.code() != ErrorCode::kResourceExhausted) throw;
      std::cout << "(no send matrix: " << e.what() << ")\n";
      why = std::string("no send matrix: ") + e.what();
    }
  }
  if (!drawn) {
    // Too many pieces to list: the busiest devices from the statistics.
    auto per = global.stats().per_device;
    std::sort(per.begin(), per.end(), [](const DeviceTraffic& a, const DeviceTraffic& b) {
      return a.send_bytes != b.send_bytes ? a.send_bytes > b.send_bytes : a.device < b.device;
    });
    std::cout << with_commas(global.stats().pieces) << " pieces: busiest senders\n";
    for (size_t i = 0; i < per.size() && i < 10; ++i)
      std::cout << "  device " << per[i].device << ": sends "
                << human_bytes(static_cast<double>(per[i].send_bytes)) << " in "
                << per[i].send_messages << " messages, receives "
                << human_bytes(static_cast<double>(per[i].recv_bytes)) << "\n";
    svg.totals(global.stats().per_device, global.topology(), why);
  }
  if (!args.svg.empty()) {
    std::ofstream out(args.svg, std::ios::binary);
    out << svg.finish();
    out.close();
    if (!out) throw Failure("--svg: cannot write " + args.svg);
    std::cout << "wrote " << args.svg << "\n";
  }
  return 0;
}

}  // namespace

Runner add_show_command(CLI::App& app) {
  auto args = std::make_shared<ShowArgs>();
  CLI::App* cmd = app.add_subcommand(
      "show", "Draw source and destination shardings and the device-to-device send matrix");
  add_input_options(cmd, args->input);
  add_plan_file_option(cmd, args->input);
  cmd->add_option("--tensor", args->tensor, "draw (and plan) only this tensor")->type_name("NAME");
  cmd->add_option("--svg", args->svg, "also write the pictures as an SVG file")->type_name("FILE");
  add_max_plan_bytes_option(cmd, args->max_plan_bytes);
  cmd->footer(std::string("Example:\n  reshard show --spec examples/specs/small_transformer.json "
                          "--tensor layers.0.attn.q --svg q.svg\n"
                          "  reshard show --plan plan.rsplan --tensor layers.0.attn.q\n\n") +
              kSingleTensorHelp);
  return [args]() { return run_show(*args); };
}

}  // namespace reshard::cli
