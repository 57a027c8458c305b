// What forwards waiting on later rounds cost (issue 35): for a spec's plan,
// planned with the topology's costs as `reshard simulate` plans it, every
// message of a stage above 0 waits for the messages that brought what it
// forwards (SimMessage::after); its lag is the latest such round minus its
// own. Prints, per stage, how many messages lag by how many rounds, then
// the simulated time as planned and with every dependency more than L
// rounds late dropped (L = 1, the estimate's kForwardLagRounds, and 0), as
// ratios to the plan's: what cutting a forward's rounds where its feeds
// were cut could gain. Usage:
//   bench_forward_lag --spec FILE --topology FILE [--budget BYTES]
//                     [--keyed GRANULE] [--spread EVEN] [--rounds 1]
//                     [--simulate 1] [--estimate 1] [--stagger P]
// (--budget: the staging budget instead of the spec's; 0 unbounded.
// --keyed: a pipelined plan takes keyed cuts of that granule in bytes,
// plan/rounds.h, an experiment the planner does not choose. --spread:
// spread cuts of EVEN even bounds are priced and taken where the estimate
// is faster, plan/rounds.h (the planner prices 24 by default; 0: off). --simulate 1:
// only the plan's simulated time and its estimate, streamed as `reshard
// simulate` does. --estimate 1: only the global statistics' estimate,
// rounds and messages. --rounds 1:
// also each round's bytes and its busiest sender and receiver. --stagger P:
// also the simulated time with every message split into P messages of the
// same round whose sizes grow as 1, 2, ..., P (and as 1.5^j), message j of
// a forward waiting for message j of each message it waited for: what a
// plan would take if each element had one of P keys of unequal widths and
// all keys shared a round, so that under the simulator's max-min sharing
// the small keys arrive first and are forwarded while the large ones still
// flow, without an α per round; exact where each stream spans enough
// elements of every key. An experiment the planner cannot build: its
// rounds carry one message per stream, docs/planner.md §11.)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "plan/enumerate/types.h"
#include "reshard/error.h"
#include "reshard/plan.h"
#include "reshard/simulate.h"
#include "reshard/spec.h"

using namespace reshard;

namespace {

// The plan's messages with every dependency more than `lag` rounds after
// the message's own round dropped.
std::vector<SimMessage> within_lag(std::vector<SimMessage> m, int64_t lag) {
  for (SimMessage& s : m) {
    std::vector<uint32_t> keep;
    for (uint32_t i : s.after)
      if (static_cast<int64_t>(m[i].round) <= static_cast<int64_t>(s.round) + lag)
        keep.push_back(i);
    s.after = std::move(keep);
  }
  return m;
}

// Every message split into sub-messages of the same stage and round with
// sizes in the proportions `f`; sub j waits for sub j of each message the
// message waited for.
std::vector<SimMessage> staggered(const std::vector<SimMessage>& m, const std::vector<double>& f) {
  double sum = 0;
  for (double v : f) sum += v;
  const auto n = static_cast<uint32_t>(f.size());
  std::vector<SimMessage> out;
  out.reserve(m.size() * n);
  for (const SimMessage& s : m) {
    int64_t left = s.bytes;
    for (uint32_t j = 0; j < n; ++j) {
      SimMessage x = s;
      x.bytes = j + 1 == n ? left : static_cast<int64_t>(static_cast<double>(s.bytes) * f[j] / sum);
      left -= x.bytes;
      x.after.clear();
      for (uint32_t a : s.after) x.after.push_back(a * n + j);
      out.push_back(std::move(x));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec_path, topology_path;
  int64_t budget = -1;
  bool per_round = false, simulate_only = false, estimate_only = false;
  int64_t stagger = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--spec")) {
      spec_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--topology")) {
      topology_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--keyed")) {
      reshard::planning::choice_override().keyed = std::atoll(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--spread")) {
      reshard::planning::choice_override().spread = std::atoll(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--estimate")) {
      estimate_only = std::atoi(argv[i + 1]) != 0;
    } else if (!std::strcmp(argv[i], "--simulate")) {
      simulate_only = std::atoi(argv[i + 1]) != 0;
    } else if (!std::strcmp(argv[i], "--rounds")) {
      per_round = std::atoi(argv[i + 1]) != 0;
    } else if (!std::strcmp(argv[i], "--stagger")) {
      stagger = std::atoll(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--budget")) {
      budget = std::atoll(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (spec_path.empty() || topology_path.empty() || argc % 2 == 0) {
    std::fprintf(
        stderr,
        "usage: %s --spec FILE --topology FILE [--budget BYTES] [--keyed GRANULE] [--spread EVEN] "
        "[--rounds 1] [--simulate 1] [--estimate 1] [--stagger P]\n",
        argv[0]);
    return 2;
  }
  try {
    Spec spec = load_spec(spec_path);
    const ClusterTopology c = load_cluster_topology(topology_path);
    PlanOptions& o = spec.input.options;
    o.alpha_seconds = c.alpha_seconds;
    o.intra_host_bytes_per_second = c.intra_host_bytes_per_second;
    o.inter_host_bytes_per_second = c.nic_bytes_per_second;
    o.nics_per_host = c.nics_per_host;
    if (budget >= 0) o.staging_budget_bytes = budget;
    if (estimate_only) {
      PlanRequest r;
      r.scope = PlanScope::kGlobal;
      const PlanStats st = make_plan(spec.input, r).stats();
      std::printf("estimate %.6g s, %d rounds, %lld messages, %lld pieces\n", st.cost_seconds,
                  st.rounds, static_cast<long long>(st.messages),
                  static_cast<long long>(st.pieces));
      return 0;
    }
    if (simulate_only) {
      const SimResult r = simulate_plan(spec.input, c);
      std::printf("simulated %.6g s, estimate %.6g s, %lld messages\n", r.seconds,
                  r.estimate_seconds, static_cast<long long>(r.messages));
      return 0;
    }
    const std::vector<SimMessage> m = plan_messages_by_part(spec.input, 1);
    // (stage, lag) -> messages
    std::map<std::pair<uint32_t, int64_t>, int64_t> lags;
    for (const SimMessage& s : m) {
      if (s.stage == 0 || s.after.empty()) continue;
      int64_t late = 0;
      for (uint32_t i : s.after) late = std::max<int64_t>(late, m[i].round);
      ++lags[{s.stage, late - static_cast<int64_t>(s.round)}];
    }
    for (const auto& [k, n] : lags)
      std::printf("stage %u: %lld messages wait for a round %lld after their own\n", k.first,
                  static_cast<long long>(n), static_cast<long long>(k.second));
    if (per_round) {
      // (stage, round) -> device -> bytes sent, received
      std::map<std::pair<uint32_t, uint32_t>, std::map<int64_t, std::pair<int64_t, int64_t>>> rb;
      for (const SimMessage& s : m) {
        rb[{s.stage, s.round}][s.src_device].first += s.bytes;
        rb[{s.stage, s.round}][s.dst_device].second += s.bytes;
      }
      for (const auto& [k, devs] : rb) {
        int64_t ms = 0, mr = 0, sum = 0;
        int64_t msd = 0;
        for (const auto& [d, v] : devs) {
          if (v.first > ms) msd = d;
          ms = std::max(ms, v.first);
          mr = std::max(mr, v.second);
          sum += v.first;
        }
        std::printf("stage %u round %u: sum %lld most send %lld (dev %lld) most recv %lld\n",
                    k.first, k.second, (long long)sum, (long long)ms, (long long)msd,
                    (long long)mr);
      }
    }
    const double planned = simulate(spec.input.topology, c, m).seconds;
    std::printf("simulated as planned       %.6g s\n", planned);
    for (int64_t lag : {1, 0}) {
      const double t = simulate(spec.input.topology, c, within_lag(m, lag)).seconds;
      std::printf("dependencies at most %lld late %.6g s  (%.3f of planned)\n",
                  static_cast<long long>(lag), t, planned > 0 ? t / planned : 1.0);
    }
    if (stagger > 1) {
      std::vector<double> linear, growing;
      for (int64_t j = 0; j < stagger; ++j) {
        linear.push_back(static_cast<double>(j + 1));
        growing.push_back(std::pow(1.5, static_cast<double>(j)));
      }
      for (const auto& [name, f] : {std::pair{"1, 2, ..., P", &linear}, {"1.5^j", &growing}}) {
        const double t = simulate(spec.input.topology, c, staggered(m, *f)).seconds;
        std::printf(
            "staggered in %lld messages of sizes %s: %.6g s  (%.3f of planned, %zu messages)\n",
            static_cast<long long>(stagger), name, t, planned > 0 ? t / planned : 1.0,
            m.size() * static_cast<size_t>(stagger));
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
