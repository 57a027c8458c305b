// libFuzzer target: the C ABI's spec and plan entry points with random
// option structs. The input's first bytes are a spec (or, in the built mode,
// drive meshes, named and box layouts with any reduce op); its last bytes
// fill reshard_plan_options_t, reshard_plan_request_t,
// reshard_serialize_options_t and reshard_plan_stats_t: any struct_size
// (0, short, 1.0-sized, current, longer with a garbage tail), any flags,
// budgets, limits, scopes, processes and thread counts.
//
// Invariants (a violation aborts, which libFuzzer reports):
//  - every call returns NULL or an error whose code is a documented one
//    other than INTERNAL, with a non-empty message, and leaves its output
//    untouched on error;
//  - a plan that was made serializes, the bytes verify and deserialize to a
//    plan with the same fingerprint, whose own bytes verify.
// Work is bounded: specs over 256 layout entries or 16 tensors are parsed, not
// planned, and the memory limit handed to the planner is at most 256 MiB.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "reshard/error.h"
#include "reshard/reshard.h"
#include "reshard/spec.h"

namespace {

[[noreturn]] void broken(const char* what, const reshard_error_t* e) {
  std::fprintf(stderr, "fuzz_capi_plan: %s: [%s] %s\n", what,
               e ? reshard_error_code_name(reshard_error_code(e)) : "-",
               e ? reshard_error_message(e) : "");
  std::abort();
}

// NULL, or an error that is documented and explained; consumes it.
bool ok(reshard_error_t* e, const char* what) {
  if (e == nullptr) return true;
  const reshard_error_code_t code = reshard_error_code(e);
  const char* message = reshard_error_message(e);
  if (code <= 0 || code > RESHARD_ERROR_RESOURCE_EXHAUSTED || code == RESHARD_ERROR_INTERNAL ||
      message == nullptr || message[0] == '\0')
    broken(what, e);
  reshard_error_destroy(e);
  return false;
}

// A struct_size: 0, short of the first field, a historical prefix, the
// current size, or longer (the tail then holds garbage).
size_t struct_size(FuzzedDataProvider& in, size_t current, size_t prefix) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      return 0;
    case 1:
      return in.ConsumeIntegralInRange<size_t>(1, current);
    case 2:
      return prefix;
    case 3:
      return current + in.ConsumeIntegralInRange<size_t>(1, 64);
    default:
      return current;
  }
}

// A bounded planner memory limit: small (refusals), the default, -1 mapped
// to 256 MiB (no unlimited runs), or an invalid value.
int64_t plan_limit(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      return in.ConsumeIntegralInRange<int64_t>(1, int64_t{1} << 20);
    case 1:
      return in.ConsumeIntegralInRange<int64_t>(INT64_MIN, -2);
    case 2:
      return int64_t{256} << 20;
    default:
      return 0;  // half the memory; the spec is small (see the bound below)
  }
}

// Garbage-tailed copies of option structs, so that a longer struct_size
// reads initialised bytes.
template <typename T>
struct Padded {
  T value;
  unsigned char tail[64];
};

reshard_plan_input_t* input_from_spec(const std::string& text) {
  // Bound the work: small specs only are planned.
  try {
    const reshard::Spec spec = reshard::parse_spec(text);
    if (spec.input.tensors.size() > 16) return nullptr;
    size_t entries = 0;
    for (const reshard::TensorSpec& t : spec.input.tensors)
      entries += t.src.num_entries() + t.dst.num_entries();
    if (entries > 256) return nullptr;
  } catch (const reshard::Error&) {
  }
  reshard_plan_input_t* input = reinterpret_cast<reshard_plan_input_t*>(0x1);
  if (!ok(reshard_plan_input_from_spec(text.data(), text.size(), &input), "from_spec")) {
    if (input != reinterpret_cast<reshard_plan_input_t*>(0x1)) broken("from_spec output", nullptr);
    return nullptr;
  }
  return input;
}

// Meshes, named and box layouts, tensors and a topology built from the
// bytes, with any reduce op and summand counts.
reshard_plan_input_t* input_built(FuzzedDataProvider& in) {
  reshard_plan_input_t* input = nullptr;
  if (!ok(reshard_plan_input_create(&input), "input_create")) return nullptr;
  const char* axis_names[] = {"a", "b", "c"};
  const size_t mrank = in.ConsumeIntegralInRange<size_t>(0, 3);
  int64_t shape[3] = {1, 1, 1};
  int64_t mesh_size = 1;
  for (size_t i = 0; i < mrank; ++i) mesh_size *= (shape[i] = in.ConsumeIntegralInRange(0, 4));
  std::vector<int64_t> devices(static_cast<size_t>(mesh_size));
  for (size_t i = 0; i < devices.size(); ++i)
    devices[i] = in.ConsumeBool() ? static_cast<int64_t>(i) : in.ConsumeIntegralInRange(-2, 70);
  reshard_mesh_t* mesh = nullptr;
  if (!ok(reshard_mesh_create(mrank, axis_names, shape, devices.data(), &mesh), "mesh_create"))
    mesh = nullptr;
  reshard_topology_t* topo = nullptr;
  if (ok(reshard_topology_create(&topo), "topology_create")) {
    for (int64_t d = 0; d < 70; d += in.ConsumeIntegralInRange(1, 9))
      ok(reshard_topology_add_device(topo, d, in.ConsumeIntegralInRange(-1, 3),
                                     in.ConsumeIntegralInRange(-1, 2),
                                     in.ConsumeIntegralInRange(-1, 2)),
         "add_device");
    ok(reshard_plan_input_set_topology(input, topo), "set_topology");
    reshard_topology_destroy(topo);
  }
  const int ntensors = in.ConsumeIntegralInRange(0, 3);
  for (int t = 0; t < ntensors; ++t) {
    const size_t rank = in.ConsumeIntegralInRange<size_t>(0, 3);
    int64_t tshape[3];
    for (size_t d = 0; d < rank; ++d) tshape[d] = in.ConsumeIntegralInRange<int64_t>(-1, 12);
    reshard_layout_t* layouts[2] = {nullptr, nullptr};
    for (reshard_layout_t*& l : layouts) {
      const reshard_reduce_op_t op =
          in.ConsumeBool() ? in.ConsumeIntegralInRange(0, 4) : in.ConsumeIntegral<int32_t>();
      if (in.ConsumeBool() && mesh != nullptr) {
        const char* names[3][3];
        reshard_axes_t dims[3];
        for (size_t d = 0; d < rank; ++d) {
          dims[d].count = in.ConsumeIntegralInRange<size_t>(0, mrank);
          for (size_t k = 0; k < dims[d].count; ++k)
            names[d][k] = axis_names[in.ConsumeIntegralInRange<size_t>(0, 2)];
          dims[d].names = names[d];
        }
        const char* pnames[3];
        reshard_axes_t partial{pnames, in.ConsumeIntegralInRange<size_t>(0, mrank)};
        for (size_t k = 0; k < partial.count; ++k)
          pnames[k] = axis_names[in.ConsumeIntegralInRange<size_t>(0, 2)];
        if (!ok(reshard_layout_create_named(mesh, rank, tshape, dims,
                                            in.ConsumeBool() ? &partial : nullptr, op, &l),
                "layout_named"))
          l = nullptr;
      } else {
        const size_t n = in.ConsumeIntegralInRange<size_t>(0, 6);
        std::vector<int64_t> dev(n), lo(n * rank + 1), hi(n * rank + 1);
        std::vector<int32_t> summands(n);
        const int32_t num_summands = in.ConsumeIntegralInRange(-1, 3);
        for (size_t e = 0; e < n; ++e) {
          dev[e] = in.ConsumeIntegralInRange(-1, 70);
          summands[e] = in.ConsumeIntegralInRange(-1, 3);
          for (size_t d = 0; d < rank; ++d) {
            lo[e * rank + d] = in.ConsumeIntegralInRange<int64_t>(-1, 12);
            hi[e * rank + d] = in.ConsumeIntegralInRange<int64_t>(-1, 13);
          }
        }
        if (!ok(reshard_layout_create_boxes(rank, tshape, n, dev.data(), summands.data(), lo.data(),
                                            hi.data(), num_summands, op, &l),
                "layout_boxes"))
          l = nullptr;
      }
    }
    const std::string name = t == 0 ? "w" : in.ConsumeBytesAsString(4);
    if (layouts[0] && layouts[1])
      ok(reshard_plan_input_add_tensor(input, name.c_str(), rank, tshape,
                                       in.ConsumeIntegralInRange(-1, 14), layouts[0], layouts[1]),
         "add_tensor");
    reshard_layout_destroy(layouts[0]);
    reshard_layout_destroy(layouts[1]);
  }
  reshard_mesh_destroy(mesh);
  return input;
}

void check_plan(reshard_plan_t* plan, FuzzedDataProvider& in) {
  Padded<reshard_plan_stats_t> stats;
  std::memset(&stats, 0xa5, sizeof stats);
  stats.value.struct_size =
      struct_size(in, sizeof(reshard_plan_stats_t), offsetof(reshard_plan_stats_t, stages));
  ok(reshard_plan_stats(plan, &stats.value), "plan_stats");
  Padded<reshard_serialize_options_t> so;
  std::memset(&so, 0x5a, sizeof so);
  // Defaults first: a struct_size that ends inside `key_size` takes the
  // caller's bytes before the cut and the default's after it, so the
  // caller's `key` must be a real one (here NULL: no key); garbage there
  // is a wild pointer no library can check.
  const reshard_serialize_options_t sdefaults = RESHARD_SERIALIZE_OPTIONS_INIT;
  so.value = sdefaults;
  so.value.struct_size =
      struct_size(in, sizeof(reshard_serialize_options_t), sizeof(reshard_serialize_options_t));
  so.value.all_parts = in.ConsumeIntegralInRange(-1, 1);
  so.value.process = in.ConsumeIntegralInRange(-1, 4);
  reshard_buffer_t* bytes = nullptr;
  if (!ok(reshard_plan_serialize(plan, in.ConsumeBool() ? &so.value : nullptr, &bytes),
          "serialize"))
    return;
  const void* data = reshard_buffer_data(bytes);
  const size_t size = reshard_buffer_size(bytes);
  reshard_error_t* verified = reshard_plan_verify_bytes(data, size);
  if (verified != nullptr) broken("the bytes of a plan do not verify", verified);
  reshard_plan_t* back = nullptr;
  reshard_error_t* e = reshard_plan_deserialize(data, size, &back);
  if (e != nullptr) broken("the bytes of a plan do not deserialize", e);
  uint64_t a = 0, b = 1;
  ok(reshard_plan_fingerprint(plan, &a), "fingerprint");
  ok(reshard_plan_fingerprint(back, &b), "fingerprint");
  if (a != b) broken("the deserialized plan has another fingerprint", nullptr);
  // The decoded plan serializes to bytes that verify again.
  reshard_buffer_t* again = nullptr;
  if (ok(reshard_plan_serialize(back, nullptr, &again), "serialize again")) {
    reshard_error_t* v =
        reshard_plan_verify_bytes(reshard_buffer_data(again), reshard_buffer_size(again));
    if (v != nullptr) broken("a deserialized plan's bytes do not verify", v);
  }
  reshard_buffer_destroy(again);
  reshard_plan_destroy(back);
  reshard_buffer_destroy(bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return -1;
  FuzzedDataProvider in(data, size);
  // The tail: the option structs (FuzzedDataProvider takes integers from
  // the end, bytes from the front, so seeds are plain spec files).
  Padded<reshard_plan_options_t> opts;
  std::memset(&opts, in.ConsumeIntegral<uint8_t>(), sizeof opts);
  const reshard_plan_options_t defaults = RESHARD_PLAN_OPTIONS_INIT;
  opts.value = defaults;
  opts.value.struct_size =
      struct_size(in, sizeof(reshard_plan_options_t), offsetof(reshard_plan_options_t, relays));
  const int which = in.ConsumeIntegralInRange(0, 7);
  switch (which) {
    case 0:
      opts.value.split_min_bytes = in.ConsumeIntegral<int64_t>();
      break;
    case 1:
      opts.value.alpha_seconds = in.ConsumeFloatingPoint<double>();
      break;
    case 2:
      opts.value.intra_host_bytes_per_second = in.ConsumeFloatingPoint<double>();
      break;
    case 3:
      opts.value.inter_host_bytes_per_second = in.ConsumeFloatingPoint<double>();
      break;
    case 4:
      opts.value.staging_budget_bytes =
          in.ConsumeBool() ? in.ConsumeIntegralInRange(-1, 4096) : in.ConsumeIntegral<int64_t>();
      break;
    case 5:
      opts.value.relays = in.ConsumeIntegral<int32_t>();
      opts.value.reduce_scatter = in.ConsumeIntegral<int32_t>();
      break;
    default:
      break;
  }
  Padded<reshard_plan_request_t> req;
  std::memset(&req, in.ConsumeIntegral<uint8_t>(), sizeof req);
  const reshard_plan_request_t rdefaults = RESHARD_PLAN_REQUEST_INIT;
  req.value = rdefaults;
  req.value.struct_size =
      struct_size(in, sizeof(reshard_plan_request_t), offsetof(reshard_plan_request_t, threads));
  req.value.scope = in.ConsumeIntegralInRange(-1, 3);
  req.value.process = in.ConsumeIntegralInRange(-1, 4);
  req.value.global_stats = in.ConsumeIntegralInRange(0, 2);
  req.value.threads = in.ConsumeIntegralInRange(-3, 3);
  req.value.max_plan_bytes = plan_limit(in);
  const bool set_options = in.ConsumeBool();
  const bool use_request = in.ConsumeBool();
  const bool built = in.ConsumeIntegralInRange(0, 3) == 0;

  reshard_plan_input_t* input =
      built ? input_built(in) : input_from_spec(in.ConsumeRemainingBytesAsString());
  if (input == nullptr) return 0;
  if (set_options) ok(reshard_plan_input_set_options(input, &opts.value), "set_options");
  uint64_t fingerprint = 0;
  ok(reshard_plan_input_fingerprint(input, &fingerprint), "input_fingerprint");
  reshard_plan_t* plan = reinterpret_cast<reshard_plan_t*>(0x1);
  if (ok(reshard_plan_create(input, use_request ? &req.value : nullptr, &plan), "plan_create")) {
    check_plan(plan, in);
    reshard_plan_destroy(plan);
  } else if (plan != reinterpret_cast<reshard_plan_t*>(0x1)) {
    broken("plan_create wrote its output on error", nullptr);
  }
  reshard_plan_input_destroy(input);
  return 0;
}
