// The agreement on the plan (agreement.h): one fixed-size record per rank,
// then checks every rank evaluates on the same records, so that every rank
// reaches the same verdict.
#include "exec/engine/agreement.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/wait.h"
#include "reshard/wire.h"
#include "util/hash.h"
#include "wire/digest.h"

namespace reshard::engine_detail {
namespace {

// "RSHDAGR2": the record of agreement on the whole plan (version 1 held the
// fingerprint, tensor count and dtype hash only, 32 bytes).
constexpr uint64_t kAgreeMagic = 0x32524741'44485352ull;

struct AgreeRecord {
  uint64_t magic = kAgreeMagic;
  uint64_t fingerprint = 0;
  uint64_t tensors = 0;
  uint64_t dtype_hash = 0;
  // whole_plan_digest of this rank's plan: a hash of the fingerprint and of
  // every process's part digest as its plan lists them; 0 when its plan
  // does not list them (it was made for one process).
  uint64_t plan_digest = 0;
  // AgreeSubject: the process executed (kAllProcesses, kNoPart) and the
  // digest of its part, recomputed from the part in memory.
  int64_t process = kNoPart;
  uint64_t part_digest = 0;
};
static_assert(sizeof(AgreeRecord) == 56);

// When the parts differ from the lists, each rank holding a list reports the
// ranks it finds differing (the first kReported, and how many).
constexpr size_t kReported = 8;
struct Verdict {
  uint64_t has_list = 0;
  uint64_t count = 0;
  int64_t ranks[kReported] = {};
};

uint64_t dtype_hash(const Plan& plan) {
  Hasher h;
  for (const TensorSpec& t : plan.tensors()) {
    h.i64(static_cast<int32_t>(t.dtype));
    if (has_cast(t)) h.i64(static_cast<int32_t>(t.dst_dtype));  // casts only: hashes kept
  }
  return h.value();
}

std::string hex(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 60; i >= 0; i -= 4) s += digits[(v >> i) & 15];
  return s;
}

// Groups ranks by `key`; returns the ranks outside the reference group (the
// largest; on a tie the one holding the lowest rank) and that group's key.
// Ranks whose key equals `skip` (when given) belong to no group.
template <class Key>
std::vector<int32_t> outliers(const std::vector<Key>& keys, Key* reference,
                              const Key* skip = nullptr) {
  std::map<Key, std::vector<int32_t>> groups;
  for (size_t r = 0; r < keys.size(); ++r) {
    if (skip != nullptr && keys[r] == *skip) continue;
    groups[keys[r]].push_back(static_cast<int32_t>(r));
  }
  const std::vector<int32_t>* best = nullptr;
  for (const auto& [key, ranks] : groups) {
    if (best == nullptr || ranks.size() > best->size() ||
        (ranks.size() == best->size() && ranks.front() < best->front())) {
      best = &ranks;
      *reference = key;
    }
  }
  std::vector<int32_t> out;
  for (size_t r = 0; r < keys.size(); ++r) {
    if (skip != nullptr && keys[r] == *skip) continue;
    if (!(keys[r] == *reference)) out.push_back(static_cast<int32_t>(r));
  }
  return out;
}

template <class T>
std::vector<std::vector<std::byte>> exchange(Transport& transport, const T& mine, double timeout) {
  try {
    return transport.allgather(std::as_bytes(std::span(&mine, 1)), timeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kTimeout) throw;
    fail(ErrorCode::kTimeout, std::string("execute: agreeing on the plan: ") + e.what() +
                                  " (did every rank call execute?)");
  }
}

template <class T>
std::vector<T> unpack(const std::vector<std::vector<std::byte>>& all, const char* what) {
  std::vector<T> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != sizeof(T)) {
      fail(ErrorCode::kMismatch, "execute: rank " + std::to_string(r) + " sent " + what + " of " +
                                     std::to_string(all[r].size()) + " bytes, not " +
                                     std::to_string(sizeof(T)) + " (another reshard version?)");
    }
    std::memcpy(&out[r], all[r].data(), sizeof(T));
  }
  return out;
}

void check_dtypes(Transport& transport, const Plan& plan, const std::vector<int32_t>& odd,
                  int32_t me, double timeout) {
  // Every rank saw the same records, so every rank runs this exchange.
  std::vector<std::byte> dtypes;
  for (const TensorSpec& t : plan.tensors()) {
    dtypes.push_back(static_cast<std::byte>(static_cast<int32_t>(t.dtype)));
  }
  const auto lists = transport.allgather(dtypes, timeout);
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    std::vector<int32_t> keys;
    for (const auto& l : lists) keys.push_back(t < l.size() ? static_cast<int32_t>(l[t]) : -1);
    int32_t ref = 0;
    const std::vector<int32_t> bad = outliers(keys, &ref);
    if (bad.empty()) continue;
    const auto name = [](int32_t v) {
      return dtype_valid(v) ? std::string(dtype_name(static_cast<DType>(v))) : "?";
    };
    fail(ErrorCode::kMismatch, "execute: dtype mismatch: tensors[" + std::to_string(t) + "] (\"" +
                                   plan.tensors()[t].name + "\") is " +
                                   name(keys[static_cast<size_t>(bad.front())]) + " on rank(s) " +
                                   rank_list(bad) + " and " + name(ref) +
                                   " on the others (this is rank " + std::to_string(me) + ")");
  }
  fail(ErrorCode::kMismatch, "execute: dtype mismatch on rank(s) " + rank_list(odd));
}

}  // namespace

AgreeSubject agree_subject(const Plan& plan, int32_t process) {
  if (process == kAllProcesses)
    return {kAllProcesses, whole_plan_digest(plan, listed_part_digests(plan))};
  if (!std::binary_search(plan.processes().begin(), plan.processes().end(), process))
    return {kNoPart, 0};
  return {process, part_digest(plan.fingerprint(), plan.part(process))};
}

void agree(Transport& transport, const Plan& plan, const AgreeSubject& subject, double timeout) {
  const std::vector<uint64_t> listed = listed_part_digests(plan);
  AgreeRecord mine;
  mine.fingerprint = plan.fingerprint();
  mine.tensors = plan.tensors().size();
  mine.dtype_hash = dtype_hash(plan);
  mine.plan_digest = whole_plan_digest(plan, listed);
  mine.process = subject.process;
  mine.part_digest = subject.part_digest;
  const std::vector<AgreeRecord> records =
      unpack<AgreeRecord>(exchange(transport, mine, timeout), "an agreement record");
  for (size_t r = 0; r < records.size(); ++r) {
    if (records[r].magic != kAgreeMagic) {
      fail(ErrorCode::kMismatch,
           "execute: rank " + std::to_string(r) +
               " sent an unexpected agreement record (another reshard version?)");
    }
  }
  const int32_t me = transport.info().rank;
  const std::string self = " (this is rank " + std::to_string(me) + ")";
  // Tensor counts, then dtypes, then the fingerprint, then the parts: the
  // first difference found is the most specific one to report.
  std::vector<uint64_t> keys;
  for (const AgreeRecord& r : records) keys.push_back(r.tensors);
  uint64_t ref = 0;
  std::vector<int32_t> odd = outliers(keys, &ref);
  if (!odd.empty()) {
    fail(ErrorCode::kMismatch, "execute: plan mismatch: rank(s) " + rank_list(odd) +
                                   " have a plan of " +
                                   std::to_string(keys[static_cast<size_t>(odd.front())]) +
                                   " tensors, the others " + std::to_string(ref) + self);
  }
  keys.clear();
  for (const AgreeRecord& r : records) keys.push_back(r.dtype_hash);
  odd = outliers(keys, &ref);
  if (!odd.empty()) check_dtypes(transport, plan, odd, me, timeout);
  keys.clear();
  for (const AgreeRecord& r : records) keys.push_back(r.fingerprint);
  odd = outliers(keys, &ref);
  if (!odd.empty()) {
    fail(ErrorCode::kMismatch,
         "execute: plan mismatch: rank(s) " + rank_list(odd) + " have plan fingerprint " +
             hex(keys[static_cast<size_t>(odd.front())]) + ", the others " + hex(ref) + self);
  }
  // The lists of part digests, among the ranks whose plan has one. The
  // digests themselves are not printed: they are what an editor would need.
  keys.clear();
  for (const AgreeRecord& r : records) keys.push_back(r.plan_digest);
  const uint64_t none = 0;
  ref = 0;
  odd = outliers(keys, &ref, &none);
  if (!odd.empty()) {
    fail(ErrorCode::kMismatch,
         "execute: plan mismatch: rank(s) " + rank_list(odd) +
             " hold a plan with other process parts than the others' (same inputs, a "
             "different plan: edited, or made by another planner version or options)" +
             self);
  }
  if (ref == 0) return;  // no rank's plan lists the parts: each planned its own
  const bool whole = std::any_of(records.begin(), records.end(),
                                 [](const AgreeRecord& r) { return r.process == kAllProcesses; });
  if (whole) return;  // one rank executes every part: its digest is its list's
  // The parts the ranks execute, against the lists: every rank computes the
  // same whole-plan digest from the records.
  std::vector<std::pair<int32_t, uint64_t>> executed;
  for (int32_t p : plan.processes()) {
    const size_t r = static_cast<size_t>(p);
    const bool runs = r < records.size() && records[r].process == p;
    executed.emplace_back(p, runs ? records[r].part_digest : 0);
  }
  if (parts_digest(plan.fingerprint(), executed) == ref) return;
  // Some part differs from the lists: each rank holding a list names the
  // ranks whose digest differs from its entry, and every rank reports the
  // verdict of the lowest such rank.
  Verdict verdict;
  if (!listed.empty() && mine.plan_digest == ref) {
    verdict.has_list = 1;
    for (size_t i = 0; i < executed.size(); ++i) {
      if (executed[i].second == listed[i]) continue;
      if (verdict.count < kReported) verdict.ranks[verdict.count] = executed[i].first;
      ++verdict.count;
    }
  }
  const std::vector<Verdict> verdicts =
      unpack<Verdict>(exchange(transport, verdict, timeout), "an agreement verdict");
  for (const Verdict& v : verdicts) {
    if (v.has_list == 0 || v.count == 0) continue;
    std::vector<int32_t> bad;
    for (uint64_t i = 0; i < std::min<uint64_t>(v.count, kReported); ++i)
      bad.push_back(static_cast<int32_t>(v.ranks[i]));
    fail(ErrorCode::kMismatch,
         "execute: plan mismatch: rank(s) " + rank_list(bad) +
             (v.count > kReported ? " (and " + std::to_string(v.count - kReported) + " more)"
                                  : std::string()) +
             " execute a process part other than the one the plan lists (an edited part, "
             "or one planned differently)" +
             self);
  }
  fail(ErrorCode::kMismatch,
       "execute: plan mismatch: the parts the ranks execute differ from the plan's list of part "
       "digests" +
           self);
}

}  // namespace reshard::engine_detail
