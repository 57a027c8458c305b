// Plan inputs: topology, tensors with source and destination layouts,
// planner options; built call by call or parsed from a JSON spec.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "internal.h"
#include "reshard/spec.h"

using reshard::ErrorCode;
using reshard::capi::guard;
using reshard::capi::read_struct;
using reshard::capi::require;

namespace {

constexpr size_t kPlanOptionsV1Size =
    RESHARD_CAPI_V1_SIZE(reshard_plan_options_t, staging_budget_bytes);

reshard_plan_options_t to_c(const reshard::PlanOptions& o) {
  reshard_plan_options_t c = RESHARD_PLAN_OPTIONS_INIT;
  c.split_min_bytes = o.split_min_bytes;
  c.alpha_seconds = o.alpha_seconds;
  c.intra_host_bytes_per_second = o.intra_host_bytes_per_second;
  c.inter_host_bytes_per_second = o.inter_host_bytes_per_second;
  c.staging_budget_bytes = o.staging_budget_bytes;
  c.relays = o.relays ? 1 : 0;
  c.reduce_scatter = o.reduce_scatter ? 1 : 0;
  c.nics_per_host = o.nics_per_host;
  c.single_hop_guard = o.single_hop_guard ? 1 : 0;
  return c;
}

const reshard::SpecFlat& flat_at(const reshard_plan_input_t* input, size_t flat) {
  if (flat >= input->flats.size())
    reshard::fail(ErrorCode::kOutOfRange, "flat",
                  std::to_string(flat) + " is not below the " +
                      std::to_string(input->flats.size()) + " flat layouts of the input");
  return input->flats[flat];
}

}  // namespace

// A struct filled by RESHARD_PLAN_OPTIONS_INIT plans exactly like
// PlanOptions{}: the macro's defaults are the C++ defaults.
constexpr reshard_plan_options_t kInit = RESHARD_PLAN_OPTIONS_INIT;
constexpr reshard::PlanOptions kDefaults{};
static_assert(kInit.split_min_bytes == kDefaults.split_min_bytes);
static_assert(kInit.alpha_seconds == kDefaults.alpha_seconds);
static_assert(kInit.intra_host_bytes_per_second == kDefaults.intra_host_bytes_per_second);
static_assert(kInit.inter_host_bytes_per_second == kDefaults.inter_host_bytes_per_second);
static_assert(kInit.staging_budget_bytes == kDefaults.staging_budget_bytes);
static_assert((kInit.relays != 0) == kDefaults.relays);
static_assert((kInit.reduce_scatter != 0) == kDefaults.reduce_scatter);
static_assert(kInit.nics_per_host == kDefaults.nics_per_host);
static_assert((kInit.single_hop_guard != 0) == kDefaults.single_hop_guard);
static_assert(kPlanOptionsV1Size == offsetof(reshard_plan_options_t, relays),
              "reshard_plan_options_t: keep kPlanOptionsV1Size at the 1.0 size");

extern "C" {

// ------------------------------------------------------------------ topology

reshard_error_t* reshard_topology_create(reshard_topology_t** out_topology) {
  return guard([&] {
    require(out_topology, "out_topology");
    *out_topology = std::make_unique<reshard_topology>().release();
  });
}

void reshard_topology_destroy(reshard_topology_t* topology) {
  std::unique_ptr<reshard_topology>{topology}.reset();
}

reshard_error_t* reshard_topology_add_device(reshard_topology_t* topology, int64_t device,
                                             int32_t process, int32_t host, int32_t ordinal) {
  return guard([&] {
    require(topology, "topology");
    // Topology::add changes nothing when it throws.
    topology->topology.add({device, process, host, ordinal}, "device");
  });
}

reshard_error_t* reshard_topology_num_devices(const reshard_topology_t* topology,
                                              size_t* out_count) {
  return guard([&] {
    require(topology, "topology");
    require(out_count, "out_count");
    *out_count = topology->topology.devices().size();
  });
}

// ---------------------------------------------------------------- plan input

reshard_error_t* reshard_plan_input_create(reshard_plan_input_t** out_input) {
  return guard([&] {
    require(out_input, "out_input");
    *out_input = std::make_unique<reshard_plan_input>().release();
  });
}

reshard_error_t* reshard_plan_input_from_spec(const char* json, size_t length,
                                              reshard_plan_input_t** out_input) {
  return guard([&] {
    if (length > 0) require(json, "json");
    require(out_input, "out_input");
    reshard::Spec spec = reshard::parse_spec(std::string_view(json == nullptr ? "" : json, length));
    auto handle = std::make_unique<reshard_plan_input>();
    handle->input = std::move(spec.input);
    handle->flats = std::move(spec.flats);
    *out_input = handle.release();
  });
}

void reshard_plan_input_destroy(reshard_plan_input_t* input) {
  std::unique_ptr<reshard_plan_input>{input}.reset();
}

reshard_error_t* reshard_plan_input_add_tensor(reshard_plan_input_t* input, const char* name,
                                               size_t rank, const int64_t* shape,
                                               reshard_dtype_t dtype, const reshard_layout_t* src,
                                               const reshard_layout_t* dst) {
  return guard([&] {
    require(input, "input");
    require(name, "name");
    require(src, "src");
    require(dst, "dst");
    if (*name == '\0') reshard::fail(ErrorCode::kInvalidArgument, "name: must not be empty");
    if (!reshard::dtype_valid(dtype)) {
      reshard::capi::bad_enum("dtype", dtype, "a RESHARD_DTYPE_ constant");
    }
    reshard::TensorSpec tensor;
    tensor.name = name;
    tensor.dtype = static_cast<reshard::DType>(dtype);
    tensor.shape = reshard::capi::copy_array(shape, rank, "shape");
    reshard::validate_shape(tensor.shape, reshard::dtype_size(tensor.dtype), "shape");
    auto check_layout = [&](const reshard::Layout& layout, const char* side) {
      if (layout.shape() == tensor.shape) return;
      auto str = [](const std::vector<int64_t>& s) {
        std::string r = "[";
        for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
      };
      reshard::fail(ErrorCode::kMismatch, std::string(side) + ": layout shape " +
                                              str(layout.shape()) + " differs from shape " +
                                              str(tensor.shape));
    };
    check_layout(src->layout, "src");
    check_layout(dst->layout, "dst");
    tensor.src = src->layout;
    tensor.dst = dst->layout;
    input->input.tensors.push_back(std::move(tensor));
  });
}

reshard_error_t* reshard_plan_input_set_topology(reshard_plan_input_t* input,
                                                 const reshard_topology_t* topology) {
  return guard([&] {
    require(input, "input");
    require(topology, "topology");
    reshard::Topology topo = topology->topology;
    // The slots of flat layouts go on their devices' processes and hosts.
    for (const reshard::SpecFlat& f : input->flats)
      reshard::add_flat_slots(topo, f.lowered, "topology");
    input->input.topology = std::move(topo);
  });
}

reshard_error_t* reshard_plan_input_set_options(reshard_plan_input_t* input,
                                                const reshard_plan_options_t* options) {
  return guard([&] {
    require(input, "input");
    reshard_plan_options_t o = to_c(reshard::PlanOptions{});
    read_struct(options, kPlanOptionsV1Size, "options", &o);
    reshard::PlanOptions cpp;
    cpp.split_min_bytes = o.split_min_bytes;
    cpp.alpha_seconds = o.alpha_seconds;
    cpp.intra_host_bytes_per_second = o.intra_host_bytes_per_second;
    cpp.inter_host_bytes_per_second = o.inter_host_bytes_per_second;
    cpp.staging_budget_bytes = o.staging_budget_bytes;
    if (o.relays != 0 && o.relays != 1)
      reshard::fail(ErrorCode::kInvalidArgument, "options->relays",
                    std::to_string(o.relays) + " is neither 0 nor 1");
    if (o.reduce_scatter != 0 && o.reduce_scatter != 1)
      reshard::fail(ErrorCode::kInvalidArgument, "options->reduce_scatter",
                    std::to_string(o.reduce_scatter) + " is neither 0 nor 1");
    cpp.relays = o.relays == 1;
    cpp.reduce_scatter = o.reduce_scatter == 1;
    if (o.nics_per_host < 0 || o.nics_per_host > (1 << 20))
      reshard::fail(ErrorCode::kInvalidArgument, "options->nics_per_host",
                    "must be in [0, 1048576] (0: one NIC per device), got " +
                        std::to_string(o.nics_per_host));
    cpp.nics_per_host = o.nics_per_host;
    if (o.single_hop_guard != 0 && o.single_hop_guard != 1)
      reshard::fail(ErrorCode::kInvalidArgument, "options->single_hop_guard",
                    std::to_string(o.single_hop_guard) + " is neither 0 nor 1");
    cpp.single_hop_guard = o.single_hop_guard == 1;
    input->input.options = cpp;
  });
}

reshard_error_t* reshard_plan_input_num_tensors(const reshard_plan_input_t* input,
                                                size_t* out_count) {
  return guard([&] {
    require(input, "input");
    require(out_count, "out_count");
    *out_count = input->input.tensors.size();
  });
}

reshard_error_t* reshard_plan_input_fingerprint(const reshard_plan_input_t* input,
                                                uint64_t* out_fingerprint) {
  return guard([&] {
    require(input, "input");
    require(out_fingerprint, "out_fingerprint");
    *out_fingerprint = reshard::plan_fingerprint(input->input);
  });
}

reshard_error_t* reshard_plan_input_num_flats(const reshard_plan_input_t* input,
                                              size_t* out_count) {
  return guard([&] {
    require(input, "input");
    require(out_count, "out_count");
    *out_count = input->flats.size();
  });
}

reshard_error_t* reshard_plan_input_flat_info(const reshard_plan_input_t* input, size_t flat,
                                              const char** out_name, int32_t* out_is_source,
                                              size_t* out_world_size, size_t* out_num_tensors,
                                              int64_t* out_shard_bytes) {
  return guard([&] {
    require(input, "input");
    const reshard::SpecFlat& f = flat_at(input, flat);
    if (out_name) *out_name = f.name.c_str();
    if (out_is_source) *out_is_source = f.source ? 1 : 0;
    if (out_world_size) *out_world_size = static_cast<size_t>(f.lowered.world_size);
    if (out_num_tensors) *out_num_tensors = f.tensors.size();
    if (out_shard_bytes) *out_shard_bytes = f.lowered.shard_bytes;
  });
}

reshard_error_t* reshard_plan_input_flat_device(const reshard_plan_input_t* input, size_t flat,
                                                size_t rank, int64_t* out_device) {
  return guard([&] {
    require(input, "input");
    require(out_device, "out_device");
    const reshard::SpecFlat& f = flat_at(input, flat);
    if (rank >= f.layout.devices.size())
      reshard::fail(ErrorCode::kOutOfRange, "rank",
                    std::to_string(rank) + " is not below the world size " +
                        std::to_string(f.layout.devices.size()));
    *out_device = f.layout.devices[rank];
  });
}

reshard_error_t* reshard_plan_input_flat_tensor(const reshard_plan_input_t* input, size_t flat,
                                                size_t index, size_t* out_tensor,
                                                size_t* out_num_entries, size_t capacity,
                                                uint64_t* out_ranks, int64_t* out_byte_offsets) {
  return guard([&] {
    require(input, "input");
    require(out_tensor, "out_tensor");
    require(out_num_entries, "out_num_entries");
    const reshard::SpecFlat& f = flat_at(input, flat);
    if (index >= f.tensors.size())
      reshard::fail(ErrorCode::kOutOfRange, "index",
                    std::to_string(index) + " is not below the " +
                        std::to_string(f.tensors.size()) + " tensors of flat layout \"" + f.name +
                        "\"");
    const std::vector<int32_t>& ranks = f.lowered.entry_ranks[index];
    const std::vector<int64_t>& offsets = f.lowered.entry_offsets[index];
    if (capacity != 0) {
      if (capacity < ranks.size())
        reshard::fail(ErrorCode::kInvalidArgument, "capacity",
                      std::to_string(capacity) + " is below the " + std::to_string(ranks.size()) +
                          " entries");
      require(out_ranks, "out_ranks");
      require(out_byte_offsets, "out_byte_offsets");
      for (size_t e = 0; e < ranks.size(); ++e) {
        out_ranks[e] = static_cast<uint64_t>(ranks[e]);
        out_byte_offsets[e] = offsets[e];
      }
    }
    *out_tensor = f.tensors[index];
    *out_num_entries = ranks.size();
  });
}

}  // extern "C"
