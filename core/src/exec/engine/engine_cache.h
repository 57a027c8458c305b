// Internal: the engine's schedule cache (EngineOptions::schedule_cache_entries).
//
// Building a schedule validates the part and derives messages, rounds,
// staging offsets and reductions from it: work proportional to the part, on
// every execute. A schedule holds no buffer address (engine_schedule.h), so
// it can serve every later execution of the same plan. What it depends on is
// the key (fingerprint, process, gather or stage, overlap) and, exactly, the
// plan's inputs and this process's part: an entry keeps copies of both (the
// layouts by reference, they are immutable and shared) and a hit requires
// equality, so a plan whose fingerprint collides, or a damaged plan with an
// honest fingerprint, gets its own schedule built (and validated).
//
// Bounded: at most `capacity` entries, least recently used evicted first.
// Not thread-safe, like the Engine that owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "exec/schedule/engine_schedule.h"
#include "reshard/engine.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

namespace reshard::engine_detail {

class ScheduleCache {
 public:
  // capacity >= 1 (an engine without a cache has no ScheduleCache).
  explicit ScheduleCache(size_t capacity) : capacity_(capacity) {}

  // The schedule of `process`'s part of `plan` under `options`: a cached
  // one (*hit = true) or one built now and cached (evicting the least
  // recently used entry when full). Valid until the next call or the
  // cache's destruction. Throws what build_schedule throws (nothing is
  // cached then).
  Schedule& get(const Plan& plan, int32_t process, const TransportInfo& transport,
                const ExecuteOptions& options, bool* hit);
  // The cached schedule get() would return (*hit = true), or null: builds
  // nothing.
  Schedule* find(const Plan& plan, int32_t process, const TransportInfo& transport,
                 const ExecuteOptions& options);
  // The whole-plan schedule of `plan` (every part, kAllProcesses), likewise:
  // the entry keeps a copy of the plan, so its pieces outlive `plan`, and a
  // hit requires the plan's inputs and every part to equal the copy's.
  Schedule& get_whole(const Plan& plan, bool* hit);

  size_t size() const { return entries_.size(); }

 private:
  struct Key {
    uint64_t fingerprint = 0;
    int32_t process = 0;
    bool gather = false;
    bool overlap = false;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct Entry {
    Key key;
    // What the schedule was built from, compared on every hit (whole-plan
    // entries: those of `plan`, these stay empty).
    std::vector<TensorSpec> tensors;
    Topology topology;
    PlanOptions plan_options;
    std::shared_ptr<const ProcessPart> part;  // per-process entries
    std::shared_ptr<const Plan> plan;         // whole-plan entries
    Schedule schedule;                        // its pieces point into *part (or *plan's parts)
  };

  static Key key_of(const Plan& plan, int32_t process, const TransportInfo& transport,
                    const ExecuteOptions& options);
  static bool same_plan_inputs(const Entry& e, const Plan& plan);
  static bool same_inputs(const Entry& e, const Plan& plan, const ProcessPart& part);
  static bool same_whole(const Entry& e, const Plan& plan);
  Entry* find(const Key& key, const Plan& plan, const ProcessPart* part);
  Schedule& insert(Entry e);

  size_t capacity_;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace reshard::engine_detail
