// verify_plan (reshard/oracle.h): the oracle's data through an engine, and
// the check of every destination element — in one process (a whole plan on
// the local transport) or collectively, each rank its own shards.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/oracle.h"

namespace reshard {
namespace {

OracleReport verify_whole(Engine& engine, const Plan& plan, const ExecuteOptions& options,
                          const VerifyOptions& verify) {
  OracleBuffers buffers = fill_sources(plan, verify.max_bytes);
  const std::vector<TensorBuffers> views = buffers.views();
  if (verify.last_stage >= 0) {
    ExecuteOptions o = options;
    o.last_stage = verify.last_stage;
    engine.execute(plan, kAllProcesses, views, o);
    return check_destinations_through_stage(plan, buffers, static_cast<uint32_t>(verify.last_stage),
                                            verify.max_reported);
  }
  engine.execute(plan, kAllProcesses, views, options);
  return check_destinations(plan, buffers, verify.max_reported);
}

OracleReport verify_part(Engine& engine, const Plan& plan, int32_t process,
                         const ExecuteOptions& options, const VerifyOptions& verify) {
  const std::vector<TensorSpec>& tensors = plan.tensors();
  const Topology& topology = plan.topology();
  const auto mine = [&](const Layout& l, size_t e) {
    return topology.info(l.device(e)).process == process;
  };
  // The same plan on every rank: every rank refuses the same way, before
  // any communication.
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (tensors[t].dst.partial()) {
      fail(ErrorCode::kUnsupported,
           "plan: tensors[" + std::to_string(t) + "] (\"" + tensors[t].name +
               "\") has a partial destination, whose value is spread over summands on several "
               "processes: verify the plan in one process (kAllProcesses, the local transport)");
    }
  }
  if (verify.max_bytes < kUnlimitedPlanBytes) {
    fail(ErrorCode::kInvalidArgument,
         "max_bytes: " + std::to_string(verify.max_bytes) +
             " is invalid (0: half the memory available; N > 0: N bytes; -1: no limit)");
  }
  const int64_t limit = verify.max_bytes == 0 ? default_max_plan_bytes() : verify.max_bytes;
  int64_t need = 0;
  for (const TensorSpec& t : tensors) {
    for (const Layout* l : {&t.src, &t.dst}) {
      for (size_t e = 0; e < l->num_entries(); ++e) {
        if (mine(*l, e))
          need += l->box(e).volume() * dtype_size(l == &t.dst ? out_dtype(t) : t.dtype);
      }
    }
  }
  if (limit != kUnlimitedPlanBytes && need > limit) {
    fail(ErrorCode::kResourceExhausted, "oracle: the shards of process " + std::to_string(process) +
                                            " need " + std::to_string(need) +
                                            " bytes of memory, above the limit of " +
                                            std::to_string(limit) + " bytes");
  }
  // This process's shards: sources from the oracle, destinations poisoned;
  // the other entries {null, 0}.
  std::vector<std::vector<std::vector<std::byte>>> src(tensors.size()), dst(tensors.size());
  std::vector<TensorBuffers> views(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& spec = tensors[t];
    // This process's shards of one side (others stay empty), filled or
    // poisoned, and their views.
    auto side = [&](const Layout& layout, std::vector<std::vector<std::byte>>& shards, bool source,
                    auto& out) {
      shards.resize(layout.num_entries());
      for (size_t e = 0; e < layout.num_entries(); ++e) {
        if (!mine(layout, e)) {
          out.push_back({});
          continue;
        }
        const int64_t elem = dtype_size(source ? spec.dtype : out_dtype(spec));
        shards[e].resize(static_cast<size_t>(layout.box(e).volume() * elem));
        if (source)
          fill_source_shard(spec, static_cast<uint32_t>(t), e, shards[e]);
        else
          poison_plan_destination_shard(tensors, static_cast<uint32_t>(t), e, shards[e]);
        out.push_back({shards[e].data(), static_cast<int64_t>(shards[e].size())});
      }
    };
    side(spec.src, src[t], true, views[t].src);
    side(spec.dst, dst[t], false, views[t].dst);
  }
  ExecuteOptions o = options;
  o.last_stage = verify.last_stage;
  engine.execute(plan, process, views, o);
  // Through a stage: the elements this process's part writes by then.
  StageCoverage cov;
  if (verify.last_stage >= 0) cov = stage_coverage(plan, static_cast<uint32_t>(verify.last_stage));
  OracleReport report;
  for (size_t t = 0; t < tensors.size(); ++t) {
    for (size_t e = 0; e < tensors[t].dst.num_entries(); ++e) {
      if (!mine(tensors[t].dst, e)) continue;
      const std::vector<uint8_t>* only = nullptr;
      if (verify.last_stage >= 0) {
        only = &cov.written[t][e];
        if (only->empty()) continue;  // nothing written by then
      }
      check_plan_destination_shard(tensors, static_cast<uint32_t>(t), e, dst[t][e], report,
                                   verify.max_reported, only);
    }
  }
  // Every rank's counts.
  const int64_t mine_counts[3] = {report.elements, report.bytes, report.mismatches};
  const auto all = engine.transport().allgather(
      std::as_bytes(std::span<const int64_t>(mine_counts)), options.timeout_seconds);
  report.elements = report.bytes = report.mismatches = 0;
  for (const std::vector<std::byte>& r : all) {
    int64_t counts[3] = {0, 0, 0};
    if (r.size() != sizeof counts) {
      fail(ErrorCode::kMismatch,
           "verify: a rank sent a report of " + std::to_string(r.size()) + " bytes");
    }
    std::memcpy(counts, r.data(), sizeof counts);
    report.elements += counts[0];
    report.bytes += counts[1];
    report.mismatches += counts[2];
  }
  report.tensors = static_cast<int64_t>(tensors.size());
  return report;
}

}  // namespace

OracleReport verify_plan(Engine& engine, const Plan& plan, int32_t process,
                         const ExecuteOptions& options, const VerifyOptions& verify) {
  if (verify.last_stage < -1) {
    fail(ErrorCode::kInvalidArgument,
         "last_stage: " + std::to_string(verify.last_stage) + " is below -1 (-1: every stage)");
  }
  if (process == kAllProcesses) return verify_whole(engine, plan, options, verify);
  return verify_part(engine, plan, process, options, verify);
}

}  // namespace reshard
