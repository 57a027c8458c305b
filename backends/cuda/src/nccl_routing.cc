#include "nccl_routing.h"

#include <algorithm>
#include <set>
#include <utility>

#include "reshard/error.h"

namespace reshard::cuda_backend {

NcclRouting::NcclRouting(std::vector<NcclRankEntry> table) : table_(std::move(table)) {
  std::set<std::pair<int32_t, int32_t>> seen;
  int32_t max_process = -1;
  for (size_t r = 0; r < table_.size(); ++r) {
    const NcclRankEntry& e = table_[r];
    if (e.process < 0) {
      fail(ErrorCode::kMismatch,
           "NCCL rank " + std::to_string(r) + " reports process " + std::to_string(e.process));
    }
    if (!seen.insert({e.process, e.ordinal}).second) {
      fail(ErrorCode::kMismatch, "two NCCL ranks claim process " + std::to_string(e.process) +
                                     " device " + std::to_string(e.ordinal) +
                                     " (is options.process right on every process?)");
    }
    max_process = std::max(max_process, e.process);
  }
  ranks_of_.assign(static_cast<size_t>(max_process + 1), {});
  for (size_t r = 0; r < table_.size(); ++r) {
    ranks_of_[static_cast<size_t>(table_[r].process)].push_back(static_cast<int32_t>(r));
  }
  for (size_t p = 0; p < ranks_of_.size(); ++p) {
    if (ranks_of_[p].empty()) {
      fail(ErrorCode::kMismatch, "process " + std::to_string(p) +
                                     " has no GPU in the NCCL group (processes must be "
                                     "numbered 0..P-1, each with at least one GPU)");
    }
  }
}

int32_t NcclRouting::peer_rank(int32_t process, int32_t remote_ordinal, int64_t remote_device,
                               const std::string& field) const {
  const std::vector<int32_t>& ranks = ranks_of(process);
  if (ranks.size() == 1) return ranks[0];
  for (int32_t r : ranks) {
    if (table_[static_cast<size_t>(r)].ordinal == remote_ordinal) return r;
  }
  std::string have;
  for (int32_t r : ranks) {
    have += (have.empty() ? "" : ", ") + std::to_string(table_[static_cast<size_t>(r)].ordinal);
  }
  fail(ErrorCode::kInvalidArgument,
       field + ": process " + std::to_string(process) + " has no NCCL rank on CUDA device " +
           std::to_string(remote_ordinal) + " (the ordinal of plan device " +
           std::to_string(remote_device) + "; its GPUs in the group: " + have + ")");
}

}  // namespace reshard::cuda_backend
