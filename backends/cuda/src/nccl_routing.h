// Where the nccl transport sends (nccl_transport.cc): the NCCL group's
// table of (process, CUDA ordinal) per NCCL rank, exchanged when the
// transport is created, and the lookup from a message's peer process and
// remote device ordinal (TransferOp::peer, remote_ordinal) to the NCCL rank
// of the GPU that holds the remote device. Pure host code without CUDA or
// NCCL, so that the CPU tests check it (tests/gpu/nccl_routing_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace reshard::cuda_backend {

struct NcclRankEntry {
  int32_t process = 0;
  int32_t ordinal = 0;  // CUDA device index on that process
};

class NcclRouting {
 public:
  NcclRouting() = default;
  // `table[r]` is NCCL rank r. Throws kMismatch (the message names the
  // problem, without a prefix) when a process is negative, a (process,
  // ordinal) pair appears twice, or a process in 0..max has no GPU.
  explicit NcclRouting(std::vector<NcclRankEntry> table);

  int32_t processes() const { return static_cast<int32_t>(ranks_of_.size()); }
  const std::vector<NcclRankEntry>& table() const { return table_; }
  // The NCCL ranks of `process`, ascending.
  const std::vector<int32_t>& ranks_of(int32_t process) const {
    return ranks_of_[static_cast<size_t>(process)];
  }

  // The NCCL rank of the GPU of process `process` that holds a plan device
  // with Topology ordinal `remote_ordinal` (device `remote_device`, for the
  // message): the process's only GPU whatever the ordinal (plans often leave
  // ordinals at 0; see NcclTransportOptions), otherwise the GPU with that
  // ordinal. `process` must be in [0, processes()). Throws
  // kInvalidArgument naming `field` when a process with several GPUs has
  // none with that ordinal.
  int32_t peer_rank(int32_t process, int32_t remote_ordinal, int64_t remote_device,
                    const std::string& field) const;

 private:
  std::vector<NcclRankEntry> table_;            // per NCCL rank
  std::vector<std::vector<int32_t>> ranks_of_;  // per process: its NCCL ranks
};

}  // namespace reshard::cuda_backend
