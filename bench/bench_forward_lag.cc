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
//                     [--simulate 1] [--estimate 1] [--stagger P] [--subs P]
//                     [--nic-relay BANDS]
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
// rounds carry one message per stream, docs/planner.md §11.) --subs P: a
// real plan of the same kind: the whole plan with every piece cut by P row
// bands of its tensor's first dimension, of widths in the proportions 1, 2,
// ..., P (small first; --band-dim D cuts dimension D instead, -1 each
// tensor's longest; --key-block B repeats the bands in every block of B
// rows instead of cutting the whole dimension once), and each message into one sub-message
// (Message::sub) per band it holds; a forward's sub then waits for the
// messages that brought its band only. Checked against the oracle
// (execute_host; --verify 0 skips it) and simulated, beside the plan as
// planned and the lower bound.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/enumerate/types.h"
#include "plan/plan_builder.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/simulate.h"
#include "reshard/spec.h"
#include "reshard/wire.h"
#include "util/nic_groups.h"

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

// A single-stage plan's messages with every message that crosses hosts
// carried by every NIC group of both hosts: message s -> d of host A -> B is
// cut into one part per (group of A, group of B), sized by the groups' NICs,
// and each part into `bands` bands; a part leaves A from a device f of its
// group (stage 0 s -> f inside A where f != s), crosses f -> e (stage 1) and
// is passed on inside B (stage 2 e -> d where e != d), band j waiting for
// band j of the hop before. What relays through devices that do not need the
// bytes (a transit buffer, PXN-like) would give; the plan has no such route.
std::vector<SimMessage> nic_relayed(const std::vector<SimMessage>& m, const Topology& topo,
                                    int32_t nics, int64_t bands) {
  std::map<int32_t, std::vector<int64_t>> host_devices;
  for (const DeviceInfo& d : topo.devices()) host_devices[d.host].push_back(d.device);
  // Per host: (group's devices, group's NICs) by group.
  std::map<int32_t, std::vector<std::pair<std::vector<int64_t>, int32_t>>> groups;
  for (const auto& [h, devs] : host_devices) {
    auto& g = groups[h];
    for (size_t i = 0; i < devs.size(); ++i) {
      const auto [k, n] =
          nic_group(static_cast<int64_t>(i), static_cast<int64_t>(devs.size()), nics);
      if (static_cast<size_t>(k) >= g.size()) g.resize(k + 1);
      g[k].first.push_back(devs[i]);
      g[k].second = n;
    }
  }
  std::vector<SimMessage> out;
  uint64_t turn = 0;
  for (const SimMessage& s : m) {
    if (s.stage != 0) throw Error(ErrorCode::kUnsupported, "--nic-relay: single-stage plans only");
    const int32_t ha = topo.info(s.src_device).host, hb = topo.info(s.dst_device).host;
    if (ha == hb) {
      out.push_back(s);
      out.back().after.clear();
      continue;
    }
    const auto &ga = groups.at(ha), &gb = groups.at(hb);
    int32_t na = 0, nb = 0;
    for (const auto& g : ga) na += g.second;
    for (const auto& g : gb) nb += g.second;
    int64_t left = s.bytes;
    const int64_t parts = static_cast<int64_t>(ga.size() * gb.size()) * bands;
    int64_t made = 0;
    for (const auto& a : ga)
      for (const auto& b : gb) {
        const int64_t f = a.first[turn % a.first.size()], e = b.first[turn % b.first.size()];
        ++turn;
        const double share = static_cast<double>(a.second) * b.second / (double(na) * nb) / bands;
        for (int64_t j = 0; j < bands; ++j) {
          const int64_t bytes =
              ++made == parts ? left : static_cast<int64_t>(share * static_cast<double>(s.bytes));
          left -= bytes;
          if (bytes <= 0) continue;
          std::vector<uint32_t> after;
          if (f != s.src_device) {
            out.push_back({s.src_device, f, 0, static_cast<uint32_t>(j), bytes, {}});
            after.push_back(static_cast<uint32_t>(out.size() - 1));
          }
          out.push_back({f, e, 1, static_cast<uint32_t>(j), bytes, after});
          if (e != s.dst_device)
            out.push_back({e,
                           s.dst_device,
                           2,
                           static_cast<uint32_t>(j),
                           bytes,
                           {static_cast<uint32_t>(out.size() - 1)}});
        }
      }
  }
  return out;
}

// The dimension --subs cuts in bands (--band-dim; -1: each tensor's
// longest).
int g_band_dim = 0;
// --key-block: the rows of a key block (0: the whole dimension is one).
int64_t g_key_block = 0;

// The rows [lo, hi) of band j of `n` rows cut in the proportions 1, 2, ...,
// p.
std::pair<int64_t, int64_t> band(int64_t n, int64_t p, int64_t j) {
  const int64_t total = p * (p + 1) / 2;
  const auto at = [&](int64_t k) { return n * (k * (k + 1) / 2) / total; };
  return {at(j), at(j + 1)};
}

// `list`'s messages, each cut into one sub-message per band its pieces
// reach (module docs, --subs), their pieces cut by the bands; new regions
// are appended to part.regions.
void cut_by_bands(const Plan& plan, ProcessPart& part, std::vector<Message>& list,
                  std::vector<Piece>& pieces, int64_t p) {
  std::vector<Message> out_msgs;
  std::vector<Piece> out_pieces;
  for (const Message& m : list) {
    uint32_t sub = 0;
    for (int64_t j = 0; j < p; ++j) {
      Message s = m;
      s.sub = sub;
      s.first_piece = out_pieces.size();
      s.num_pieces = 0;
      s.bytes = 0;
      for (uint64_t k = m.first_piece; k < m.first_piece + m.num_pieces; ++k) {
        Piece x = pieces[k];
        const Box r = plan.region(part, x);
        const auto add = [&](const Box& b) {
          x.region = static_cast<uint32_t>(part.regions.size());
          part.regions.push_back(b);
          out_pieces.push_back(x);
          ++s.num_pieces;
          s.bytes += plan.piece_bytes(part, x);
        };
        if (r.rank == 0) {
          if (j == 0) add(r);
          continue;
        }
        const std::vector<int64_t>& shape = plan.tensors()[x.tensor].shape;
        const int d =
            g_band_dim >= 0
                ? std::min<int>(g_band_dim, r.rank - 1)
                : static_cast<int>(std::max_element(shape.begin(), shape.end()) - shape.begin());
        // Key blocks of g_key_block rows (0: the whole dimension), each cut
        // in the proportions 1, 2, ..., p.
        const int64_t block = g_key_block > 0 ? g_key_block : shape[static_cast<size_t>(d)];
        const auto [lo, hi] = band(block, p, j);
        for (int64_t b0 = r.lo[d] / block * block; b0 < r.hi[d]; b0 += block) {
          Box c = r;
          c.lo[d] = std::max(r.lo[d], b0 + lo);
          c.hi[d] = std::min(r.hi[d], b0 + hi);
          if (!c.empty()) add(c);
        }
      }
      if (s.num_pieces == 0) continue;
      out_msgs.push_back(s);
      ++sub;
    }
  }
  list = std::move(out_msgs);
  pieces = std::move(out_pieces);
}

Plan with_band_subs(Plan plan, int64_t p) {
  for (auto& [process, part] : Plan::Builder::parts(plan)) {
    cut_by_bands(plan, part, part.sends, part.send_pieces, p);
    cut_by_bands(plan, part, part.recvs, part.recv_pieces, p);
  }
  return plan;
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec_path, topology_path;
  int64_t budget = -1;
  bool per_round = false, simulate_only = false, estimate_only = false;
  int64_t stagger = 0, subs = 0, nic_relay = 0;
  bool verify = true;
  std::string dump_path;
  bool flat = false;
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
    } else if (!std::strcmp(argv[i], "--nic-relay")) {
      nic_relay = std::atoll(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--subs")) {
      subs = std::atoll(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--band-dim")) {
      g_band_dim = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--key-block")) {
      g_key_block = std::atoll(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--flat")) {
      flat = std::atoi(argv[i + 1]) != 0;
    } else if (!std::strcmp(argv[i], "--dump")) {
      dump_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--verify")) {
      verify = std::atoi(argv[i + 1]) != 0;
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
        "[--rounds 1] [--simulate 1] [--estimate 1] [--stagger P] [--subs P [--band-dim D] "
        "[--verify 0]] [--nic-relay BANDS] [--dump FILE] [--flat 1]\n",
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
    if (subs > 0) {
      const Plan plan = make_plan(spec.input);
      const Plan cut = with_band_subs(plan, subs);
      size_t n0 = 0, n1 = 0;
      for (const auto& [q, part] : plan.parts()) n0 += part.sends.size();
      for (const auto& [q, part] : cut.parts()) n1 += part.sends.size();
      // Through the bytes: the decoder's checks (order, exactness).
      const Plan back = decode_plan(encode_plan(cut));
      bool ok = true;
      if (verify) {
        OracleBuffers buffers = fill_sources(back);
        const std::vector<TensorBuffers> views = buffers.views();
        execute_host(back, views);
        ok = check_destinations(back, buffers).ok();
      }
      const double bound = simulate_lower_bound(spec.input, c).seconds;
      const double t0 = simulate_plan(plan, c).seconds;
      const double t1 = simulate_plan(back, c).seconds;
      std::printf(
          "subs %lld: planned %.6g s (%.3f of bound, %zu messages), with subs %.6g s (%.3f of "
          "bound, %zu messages), bound %.6g s, oracle %s\n",
          static_cast<long long>(subs), t0, t0 / bound, n0, t1, t1 / bound, n1, bound,
          verify ? (ok ? "ok" : "MISMATCH") : "skipped");
      return ok ? 0 : 1;
    }
    if (simulate_only) {
      const SimResult r = simulate_plan(spec.input, c);
      std::printf("simulated %.6g s, estimate %.6g s, %lld messages\n", r.seconds,
                  r.estimate_seconds, static_cast<long long>(r.messages));
      return 0;
    }
    const std::vector<SimMessage> m = plan_messages_by_part(spec.input, 1);
    if (!dump_path.empty()) {
      // One line per message: src dst stage round bytes, then its `after`.
      FILE* f = std::fopen(dump_path.c_str(), "w");
      if (f == nullptr)
        throw Error(ErrorCode::kInvalidArgument, "--dump: cannot write " + dump_path);
      for (const SimMessage& s : m) {
        std::fprintf(f, "%lld %lld %u %u %lld", static_cast<long long>(s.src_device),
                     static_cast<long long>(s.dst_device), s.stage, s.round,
                     static_cast<long long>(s.bytes));
        for (uint32_t a : s.after) std::fprintf(f, " %u", a);
        std::fprintf(f, "\n");
      }
      std::fclose(f);
    }
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
    if (flat) {
      // Every message in round 0 of its stage: what the rounds' barriers cost.
      std::vector<SimMessage> f = m;
      for (SimMessage& s : f) s.round = 0;
      const double t = simulate(spec.input.topology, c, f).seconds;
      std::printf("every message in round 0  %.6g s  (%.3f of planned)\n", t, t / planned);
      f = m;
      for (SimMessage& s : f) s.after.clear();
      const double t2 = simulate(spec.input.topology, c, f).seconds;
      std::printf("no dependencies           %.6g s  (%.3f of planned)\n", t2, t2 / planned);
    }
    for (int64_t lag : {1, 0}) {
      const double t = simulate(spec.input.topology, c, within_lag(m, lag)).seconds;
      std::printf("dependencies at most %lld late %.6g s  (%.3f of planned)\n",
                  static_cast<long long>(lag), t, planned > 0 ? t / planned : 1.0);
    }
    if (nic_relay > 0) {
      const std::vector<SimMessage> r =
          nic_relayed(m, spec.input.topology, c.nics_per_host, nic_relay);
      const double t = simulate(spec.input.topology, c, r).seconds;
      std::printf(
          "crossing through every NIC group of both hosts, %lld bands: %.6g s  (%.3f of planned, "
          "%zu messages)\n",
          static_cast<long long>(nic_relay), t, planned > 0 ? t / planned : 1.0, r.size());
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
