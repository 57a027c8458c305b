#include "exec/engine/engine_cache.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

namespace reshard::engine_detail {
namespace {

// Layouts are immutable and share their geometry: the same geometry and
// shape is the same layout (the common case, a plan executed again), and
// only layouts that do not share it are compared entry by entry.
bool same_layout(const Layout& a, const Layout& b) {
  return (a.geometry() == b.geometry() && a.shape() == b.shape()) || a == b;
}

// Equal vectors; elements whose equal values have equal bytes (no padding:
// pieces, messages) compared as bytes.
template <class T>
bool same_elements(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  if constexpr (std::has_unique_object_representations_v<T>) {
    return a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
  } else {
    return a == b;
  }
}

// ProcessPart's operator==, its piece and message lists compared as bytes:
// a cached schedule's part is compared on every hit, replays included.
bool same_part(const ProcessPart& a, const ProcessPart& b) {
  static_assert(sizeof(ProcessPart) == 8 + 6 * sizeof(std::vector<Piece>) + sizeof(Regions),
                "ProcessPart has another field: compare it here");
  static_assert(std::has_unique_object_representations_v<Piece> &&
                std::has_unique_object_representations_v<Message>);
  return a.process == b.process && same_elements(a.local, b.local) &&
         same_elements(a.sends, b.sends) && same_elements(a.send_pieces, b.send_pieces) &&
         same_elements(a.recvs, b.recvs) && same_elements(a.recv_pieces, b.recv_pieces) &&
         a.regions == b.regions && same_elements(a.scratch, b.scratch);
}

}  // namespace

bool ScheduleCache::same_plan_inputs(const Entry& e, const Plan& plan) {
  // A whole-plan entry's inputs are those of its copy of the plan.
  const std::vector<TensorSpec>& kept = e.plan ? e.plan->tensors() : e.tensors;
  const PlanOptions& kept_options = e.plan ? e.plan->options() : e.plan_options;
  const Topology& kept_topology = e.plan ? e.plan->topology() : e.topology;
  const std::vector<TensorSpec>& tensors = plan.tensors();
  if (tensors.size() != kept.size() || !(plan.options() == kept_options)) return false;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& a = tensors[t];
    const TensorSpec& b = kept[t];
    if (a.dtype != b.dtype || out_dtype(a) != out_dtype(b) || a.shape != b.shape ||
        !same_layout(a.src, b.src) || !same_layout(a.dst, b.dst)) {
      return false;
    }
  }
  return plan.topology() == kept_topology;
}

bool ScheduleCache::same_inputs(const Entry& e, const Plan& plan, const ProcessPart& part) {
  return e.part != nullptr && same_plan_inputs(e, plan) && same_part(part, *e.part);
}

bool ScheduleCache::same_whole(const Entry& e, const Plan& plan) {
  if (e.plan == nullptr || !same_plan_inputs(e, plan)) return false;
  const auto& a = plan.parts();
  const auto& b = e.plan->parts();
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) {
           return x.first == y.first && same_part(x.second, y.second);
         });
}

// The entry for `key` whose inputs equal the plan's (and `part`, or every
// part when null), moved to the front; an entry with the same key and other
// inputs (a fingerprint collision, or a damaged plan) is dropped.
ScheduleCache::Entry* ScheduleCache::find(const Key& key, const Plan& plan,
                                          const ProcessPart* part) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!(it->key == key)) continue;
    if (part != nullptr ? same_inputs(*it, plan, *part) : same_whole(*it, plan)) {
      entries_.splice(entries_.begin(), entries_, it);
      return &entries_.front();
    }
    entries_.erase(it);
    break;
  }
  return nullptr;
}

Schedule& ScheduleCache::insert(Entry e) {
  while (entries_.size() >= capacity_) entries_.pop_back();
  entries_.push_front(std::move(e));
  return entries_.front().schedule;
}

ScheduleCache::Key ScheduleCache::key_of(const Plan& plan, int32_t process,
                                         const TransportInfo& transport,
                                         const ExecuteOptions& options) {
  return {plan.fingerprint(), process,
          transport.gather && options.packing != ExecuteOptions::Packing::kStaging,
          options.overlap};
}

Schedule* ScheduleCache::find(const Plan& plan, int32_t process, const TransportInfo& transport,
                              const ExecuteOptions& options) {
  Entry* e = find(key_of(plan, process, transport, options), plan, &plan.part(process));
  return e != nullptr ? &e->schedule : nullptr;
}

Schedule& ScheduleCache::get(const Plan& plan, int32_t process, const TransportInfo& transport,
                             const ExecuteOptions& options, bool* hit) {
  const Key key = key_of(plan, process, transport, options);
  const ProcessPart& part = plan.part(process);
  if (Entry* e = find(key, plan, &part)) {
    *hit = true;
    return e->schedule;
  }
  *hit = false;
  Entry e;
  e.key = key;
  e.part = std::make_shared<const ProcessPart>(part);
  // Built from the copy, so that its pieces outlive `plan`.
  e.schedule = build_schedule(plan, process, *e.part, transport, options);
  e.schedule.owned_part = e.part;
  e.tensors = plan.tensors();
  e.topology = plan.topology();
  e.plan_options = plan.options();
  return insert(std::move(e));
}

Schedule& ScheduleCache::get_whole(const Plan& plan, bool* hit) {
  const Key key{plan.fingerprint(), kAllProcesses, false, false};
  if (Entry* e = find(key, plan, nullptr)) {
    *hit = true;
    return e->schedule;
  }
  *hit = false;
  Entry e;
  e.key = key;
  e.plan = std::make_shared<const Plan>(plan);
  // Built from the copy, so that its pieces outlive `plan`.
  e.schedule = build_whole_schedule(*e.plan);
  return insert(std::move(e));
}

}  // namespace reshard::engine_detail
