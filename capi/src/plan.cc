// Planning: reshard_plan_create, fingerprints and statistics.
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "internal.h"

using reshard::ErrorCode;
using reshard::PlanScope;
using reshard::capi::check_index;
using reshard::capi::check_out_struct;
using reshard::capi::guard;
using reshard::capi::read_struct;
using reshard::capi::require;
using reshard::capi::write_struct;

static_assert(RESHARD_PLAN_SCOPE_ALL == static_cast<int32_t>(PlanScope::kAll));
static_assert(RESHARD_PLAN_SCOPE_GLOBAL == static_cast<int32_t>(PlanScope::kGlobal));
static_assert(RESHARD_PLAN_SCOPE_PROCESS == static_cast<int32_t>(PlanScope::kProcess));

namespace {

constexpr size_t kPlanRequestV1Size = RESHARD_CAPI_V1_SIZE(reshard_plan_request_t, reserved0);
constexpr size_t kPlanRequestV1_1Size = RESHARD_CAPI_V1_SIZE(reshard_plan_request_t, reserved1);
constexpr size_t kPlanRequestV1_2Size =
    RESHARD_CAPI_V1_SIZE(reshard_plan_request_t, max_plan_bytes);
constexpr size_t kPlanStatsV1Size = RESHARD_CAPI_V1_SIZE(reshard_plan_stats_t, num_devices);
constexpr size_t kPlanStatsV1_2Size =
    RESHARD_CAPI_V1_SIZE(reshard_plan_stats_t, lower_bound_binding_id);
constexpr size_t kPlanStatsV1_3Size = RESHARD_CAPI_V1_SIZE(reshard_plan_stats_t, forwarded_bytes);
constexpr size_t kPlanStatsV1_5Size = RESHARD_CAPI_V1_SIZE(reshard_plan_stats_t, max_scratch_bytes);
constexpr size_t kDeviceTrafficV1Size =
    RESHARD_CAPI_V1_SIZE(reshard_device_traffic_t, recv_messages);
static_assert(kPlanRequestV1Size == offsetof(reshard_plan_request_t, threads));
static_assert(kPlanRequestV1_1Size == offsetof(reshard_plan_request_t, max_plan_bytes));
static_assert(kPlanRequestV1_2Size == sizeof(reshard_plan_request_t));
static_assert(RESHARD_PLAN_BYTES_UNLIMITED == reshard::kUnlimitedPlanBytes);
static_assert(RESHARD_ERROR_RESOURCE_EXHAUSTED ==
              static_cast<int32_t>(ErrorCode::kResourceExhausted));
static_assert(kPlanStatsV1Size == offsetof(reshard_plan_stats_t, stages));
static_assert(kPlanStatsV1_2Size == offsetof(reshard_plan_stats_t, forwarded_bytes));
static_assert(kPlanStatsV1_3Size == offsetof(reshard_plan_stats_t, max_scratch_bytes));
static_assert(kPlanStatsV1_5Size == sizeof(reshard_plan_stats_t));
static_assert(RESHARD_BOUND_HOST_SEND == static_cast<int32_t>(reshard::BoundKind::kHostSend));
static_assert(RESHARD_BOUND_DEVICE_RECV == static_cast<int32_t>(reshard::BoundKind::kDeviceRecv));
static_assert(kDeviceTrafficV1Size == sizeof(reshard_device_traffic_t));

// The core's words for the request's fields in this header's terms.
std::string c_terms(std::string m) {
  static const std::pair<std::string_view, std::string_view> kTerms[] = {
      {"request.max_plan_bytes", "request->max_plan_bytes"},
      {"PlanScope::kProcess", "RESHARD_PLAN_SCOPE_PROCESS"},
      {"(-1: no limit)", "(RESHARD_PLAN_BYTES_UNLIMITED: no limit)"},
      {"-1: no limit)", "RESHARD_PLAN_BYTES_UNLIMITED: no limit)"},
  };
  for (const auto& [from, to] : kTerms)
    for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + to.size()))
      m.replace(at, from.size(), to);
  return m;
}

const reshard::PlanStats& stats_of(const reshard_plan_t* plan) {
  if (!plan->plan.has_stats()) {
    reshard::fail(ErrorCode::kUnsupported,
                  "plan: has no statistics (planned for one process with global_stats = 0)");
  }
  return plan->plan.stats();
}

}  // namespace

extern "C" {

reshard_error_t* reshard_plan_create(const reshard_plan_input_t* input,
                                     const reshard_plan_request_t* request,
                                     reshard_plan_t** out_plan) {
  return guard([&] {
    require(input, "input");
    require(out_plan, "out_plan");
    reshard_plan_request_t r = RESHARD_PLAN_REQUEST_INIT;
    if (request != nullptr) read_struct(request, kPlanRequestV1Size, "request", &r);
    if (r.scope != RESHARD_PLAN_SCOPE_ALL && r.scope != RESHARD_PLAN_SCOPE_GLOBAL &&
        r.scope != RESHARD_PLAN_SCOPE_PROCESS) {
      reshard::capi::bad_enum("request->scope", r.scope, "a RESHARD_PLAN_SCOPE_ constant");
    }
    reshard::PlanRequest cpp;
    cpp.scope = static_cast<PlanScope>(r.scope);
    cpp.process = r.process;
    cpp.global_stats = r.global_stats != 0;
    cpp.threads = reshard::capi::threads_from_c(r.threads, reshard::capi::CThreads::kPlanRequest,
                                                "request->threads");
    // 0 (what 1.1-sized and zeroed structs give) is the default in both.
    cpp.max_plan_bytes = r.max_plan_bytes;
    auto handle = std::make_unique<reshard_plan>();
    try {
      handle->plan = reshard::make_plan(input->input, cpp);
    } catch (const reshard::Error& e) {
      if (e.code() != ErrorCode::kResourceExhausted && e.code() != ErrorCode::kInvalidArgument)
        throw;
      fail(e.code(), c_terms(e.what()));
    }
    *out_plan = handle.release();
  });
}

void reshard_plan_destroy(reshard_plan_t* plan) {
  // Waits for executions using the plan; a plan destroyed before is left alone.
  if (plan == nullptr || !reshard::capi::retire_handle(reshard::capi::HandleKind::kPlan, plan))
    return;
  std::unique_ptr<reshard_plan>{plan}.reset();
}

reshard_error_t* reshard_plan_fingerprint(const reshard_plan_t* plan, uint64_t* out_fingerprint) {
  return guard([&] {
    require(plan, "plan");
    require(out_fingerprint, "out_fingerprint");
    *out_fingerprint = plan->plan.fingerprint();
  });
}

reshard_error_t* reshard_plan_stats(const reshard_plan_t* plan, reshard_plan_stats_t* out_stats) {
  return guard([&] {
    require(plan, "plan");
    check_out_struct(out_stats, kPlanStatsV1Size, "out_stats");
    const reshard::PlanStats& s = stats_of(plan);
    reshard_plan_stats_t c = RESHARD_PLAN_STATS_INIT;
    c.network_bytes = s.network_bytes;
    c.local_bytes = s.local_bytes;
    c.cross_host_bytes = s.cross_host_bytes;
    c.cross_process_bytes = s.cross_process_bytes;
    c.max_send_bytes = s.max_send_bytes;
    c.max_recv_bytes = s.max_recv_bytes;
    c.messages = s.messages;
    c.pieces = s.pieces;
    c.rounds = s.rounds;
    c.peak_staging_bytes = s.peak_staging_bytes;
    c.lower_bound_network_bytes = s.lower_bound_network_bytes;
    c.lower_bound_max_send_bytes = s.lower_bound_max_send_bytes;
    c.lower_bound_max_recv_bytes = s.lower_bound_max_recv_bytes;
    c.cost_seconds = s.cost_seconds;
    c.lower_bound_cost_seconds = s.lower_bound_cost_seconds;
    c.plan_seconds = s.plan_seconds;
    c.num_devices = s.per_device.size();
    c.stages = s.stages;
    c.max_host_send_bytes = s.max_host_send_bytes;
    c.max_host_recv_bytes = s.max_host_recv_bytes;
    c.lower_bound_cross_host_bytes = s.lower_bound_cross_host_bytes;
    c.lower_bound_max_host_send_bytes = s.lower_bound_max_host_send_bytes;
    c.lower_bound_max_host_recv_bytes = s.lower_bound_max_host_recv_bytes;
    c.lower_bound_binding = static_cast<reshard_bound_kind_t>(s.lower_bound_binding);
    c.lower_bound_binding_id = s.lower_bound_binding_id;
    c.forwarded_bytes = s.forwarded_bytes;
    c.max_scratch_bytes = s.max_scratch_bytes;
    write_struct(c, out_stats);
  });
}

reshard_error_t* reshard_plan_device_traffic(const reshard_plan_t* plan, size_t index,
                                             reshard_device_traffic_t* out_traffic) {
  return guard([&] {
    require(plan, "plan");
    check_out_struct(out_traffic, kDeviceTrafficV1Size, "out_traffic");
    const reshard::PlanStats& s = stats_of(plan);
    check_index(index, s.per_device.size(), "index", "devices");
    const reshard::DeviceTraffic& d = s.per_device[index];
    reshard_device_traffic_t c = RESHARD_DEVICE_TRAFFIC_INIT;
    c.device = d.device;
    c.send_bytes = d.send_bytes;
    c.recv_bytes = d.recv_bytes;
    c.local_bytes = d.local_bytes;
    c.send_messages = d.send_messages;
    c.recv_messages = d.recv_messages;
    write_struct(c, out_traffic);
  });
}

}  // extern "C"
