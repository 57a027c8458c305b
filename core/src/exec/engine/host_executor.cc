// execute_host (reshard/exec.h): the engine over the `local` transport,
// executing every process part of a plan in this process (docs/design.md
// §3.2). No schedule cache (each call builds its schedule, as the host
// executor always did) and no agreement (one process has nothing to agree
// on).
#include "reshard/engine.h"
#include "reshard/exec.h"

namespace reshard {

void execute_host(const Plan& plan, std::span<const TensorBuffers> buffers,
                  const HostExecuteOptions& options) {
  EngineOptions engine_options;
  engine_options.schedule_cache_entries = 0;
  Engine engine(make_local_transport(), engine_options);
  ExecuteOptions execute;
  execute.agreement = ExecuteOptions::Agreement::kSkip;
  execute.threads = options.threads;  // the same meaning (0: every hardware thread)
  execute.timeout_seconds = options.timeout_seconds;
  engine.execute(plan, kAllProcesses, buffers, execute);
}

}  // namespace reshard
