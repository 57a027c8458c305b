#include "plan/stage_cost.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "plan/rounds.h"

namespace reshard::planning {

namespace {

// Seconds each link carries in one stage (`x`: the stage's rows): [2d]
// device d's port out, [2d + 1] in; [2 ndev + 2g] NIC group g out,
// [2 ndev + 2g + 1] in.
void link_seconds(const std::vector<Acc>& x, const Bounds& lb, const PlanOptions& o,
                  std::vector<double>& stage, std::vector<double>* msgs = nullptr) {
  const double bi = 1.0 / o.intra_host_bytes_per_second, bx = 1.0 / o.inter_host_bytes_per_second;
  const size_t ndev = x.size();
  stage.assign(2 * ndev + 2 * lb.group_nics.size(), 0.0);
  for (size_t d = 0; d < ndev; ++d) {
    const size_t g = lb.group_of_device[d];
    const double bxg = bx / lb.group_nics[g];
    stage[2 * d] += bi * static_cast<double>(x[d].send - x[d].send_inter);
    stage[2 * d + 1] += bi * static_cast<double>(x[d].recv - x[d].recv_inter);
    stage[2 * ndev + 2 * g] += bxg * static_cast<double>(x[d].send_inter);
    stage[2 * ndev + 2 * g + 1] += bxg * static_cast<double>(x[d].recv_inter);
  }
  if (!msgs) return;
  // Messages on each link: a device's own on its port (those that stay in
  // the host) and on its NIC group (those that leave it); its messages are
  // not split by where they go, so each link with bytes counts them all.
  msgs->assign(stage.size(), 0.0);
  for (size_t d = 0; d < ndev; ++d) {
    const size_t g = lb.group_of_device[d];
    const auto out = static_cast<double>(x[d].send_msgs), in = static_cast<double>(x[d].recv_msgs);
    if (x[d].send > x[d].send_inter) (*msgs)[2 * d] += out;
    if (x[d].recv > x[d].recv_inter) (*msgs)[2 * d + 1] += in;
    if (x[d].send_inter > 0) (*msgs)[2 * ndev + 2 * g] += out;
    if (x[d].recv_inter > 0) (*msgs)[2 * ndev + 2 * g + 1] += in;
  }
}

// Whether a stream from dense device `src` to `dst` crosses hosts.
bool crosses_hosts(const Bounds& lb, uint32_t src, uint32_t dst) {
  return lb.host_of_device.empty() ? lb.group_of_device[src] != lb.group_of_device[dst]
                                   : lb.host_of_device[src] != lb.host_of_device[dst];
}

}  // namespace

int64_t pipeline_rounds(const std::deque<std::vector<Acc>>& stage_acc, const Bounds& lb,
                        const PlanOptions& o, int* moving_out) {
  std::vector<double> stage;
  double sum = 0, most = 0;
  int moving = 0;
  for (const std::vector<Acc>& x : stage_acc) {
    link_seconds(x, lb, o, stage);
    const double t = stage.empty() ? 0.0 : *std::max_element(stage.begin(), stage.end());
    if (t <= 0) continue;
    ++moving;
    sum += t;
    most = std::max(most, t);
  }
  if (moving_out) *moving_out = moving;
  if (moving < 2 || sum - most <= 0) return 1;
  if (o.alpha_seconds <= 0) return kMaxPipelineRounds;
  const double k = std::sqrt((1.0 + kForwardLagRounds) * (sum - most) / (o.alpha_seconds * moving));
  return std::clamp<int64_t>(std::llround(std::min(k, 1e6)), 1, kMaxPipelineRounds);
}

namespace {

// Acc rows of one stage less the bytes of its later rounds
// (Acc::send_late, recv_late): what its first round moves when its rounds
// are its streams' bands. A device's cross-host share of its late bytes is
// taken as that of all its bytes.
void first_round_rows(const std::vector<Acc>& x, std::vector<Acc>& out) {
  out = x;
  auto drop = [](int64_t& all, int64_t& inter, int64_t late) {
    if (late <= 0 || all <= 0) return;
    const double keep = 1.0 - static_cast<double>(std::min(late, all)) / static_cast<double>(all);
    inter = static_cast<int64_t>(static_cast<double>(inter) * keep);
    all -= std::min(late, all);
  };
  for (Acc& a : out) {
    drop(a.send, a.send_inter, a.send_late);
    drop(a.recv, a.recv_inter, a.recv_late);
  }
}

}  // namespace

constexpr size_t kSubLinkFlows = 1024;

double sub_pipeline(const KeyedRounds& kr, const std::vector<double>& whole,
                    const std::vector<double>& stall, const Bounds& lb, const PlanOptions& o) {
  if (!kr.sub_rows) return 0;
  const std::deque<std::vector<std::vector<Acc>>>& rows = *kr.sub_rows;
  const double a = o.alpha_seconds;
  const double bi = 1.0 / o.intra_host_bytes_per_second, bx = 1.0 / o.inter_host_bytes_per_second;
  size_t P = 0;
  for (const auto& stage : rows) P = std::max(P, stage.size());
  const size_t ndev = lb.group_of_device.size(), ng = lb.group_nics.size();
  if (P == 0 || ndev == 0) return 0;
  std::vector<std::vector<uint32_t>> members(ng);
  for (size_t d = 0; d < ndev; ++d)
    members[lb.group_of_device[d]].push_back(static_cast<uint32_t>(d));
  auto cross = [&](const SubStream& x) { return crosses_hosts(lb, x.src, x.dst); };
  // Per (device, sub), at d * P + j: when d holds sub j; the earliest
  // start of a sub-j stream into d within its host [0] and across [1]; the
  // ends of its flows on its port out and in and its NIC group out and in;
  // its latest arrival in this stage.
  const size_t n = ndev * P;
  std::vector<double> ready(n, 0.0), arrive(n), port_out(n), port_in(n), nic_out(n), nic_in(n);
  std::array<std::vector<double>, 2> first_in, msgs_out, msgs_in;
  std::vector<double> st, wk, wt, en;
  std::vector<size_t> at;
  // Per link (stage_cost's numbering) the flows of earlier stages, which
  // the flows of a later one share it with (at most kSubLinkFlows in all,
  // else the stage's own alone).
  std::vector<std::vector<std::array<double, 3>>> past(2 * ndev + 2 * ng);  // start, work, weight
  double pipeline = 0;
  const std::vector<SubStream> none;
  for (size_t s = 0; s < rows.size() && s < whole.size(); ++s) {
    if (whole[s] <= 0 || rows[s].empty()) continue;
    const std::vector<std::vector<Acc>>& r = rows[s];
    const size_t k = r.size();
    const std::vector<SubStream>& streams = s < kr.sub_streams.size() ? kr.sub_streams[s] : none;
    auto begin = [&](size_t d, size_t j) { return std::max(stall[s], ready[d * P + j]) + a; };
    for (auto& f : first_in) f.assign(n, HUGE_VAL);
    for (auto& m : msgs_out) m.assign(n, 0.0);
    for (auto& m : msgs_in) m.assign(n, 0.0);
    for (std::vector<double>* v : {&port_out, &port_in, &nic_out, &nic_in, &arrive})
      std::fill(v->begin(), v->end(), 0.0);
    for (const SubStream& x : streams) {
      if (x.src == x.dst) continue;
      const size_t c = cross(x) ? 1 : 0;
      std::vector<double>& f = first_in[c];
      for (size_t j = 0; j < k; ++j) {
        if (!(x.mask >> j & 1)) continue;
        f[x.dst * P + j] = std::min(f[x.dst * P + j], begin(x.src, j));
        msgs_out[c][x.src * P + j] += 1;
        msgs_in[c][x.dst * P + j] += 1;
      }
    }
    auto first = [&](int c, size_t i) {
      const double v = first_in[static_cast<size_t>(c)][i];
      return v < HUGE_VAL ? v : stall[s] + a;
    };
    // Shares the link among the flows gathered in st, wk (at: where each
    // one's end goes in `out`).
    auto share = [&](size_t link, std::vector<double>& out) {
      if (st.empty()) return;
      std::vector<std::array<double, 3>>& before = past[link];
      const size_t m = before.size() + st.size() <= kSubLinkFlows ? before.size() : 0;
      const size_t own = st.size();
      for (size_t i = 0; i < m; ++i)
        st.push_back(before[i][0]), wk.push_back(before[i][1]), wt.push_back(before[i][2]);
      en = sub_ends(st, wk, wt);
      // The earlier stages' flows end later beside this stage's: their
      // dependents are not revised, but the link's last end counts.
      for (double e : en) pipeline = std::max(pipeline, e);
      for (size_t i = 0; i < own; ++i) {
        out[at[i]] = en[i];
        before.push_back({st[i], wk[i], wt[i]});
      }
      st.clear(), wk.clear(), wt.clear(), at.clear();
    };
    // A flow of `work` seconds from `start`, its weight its messages.
    auto flow = [&](double start, double work, double msgs, size_t i) {
      if (!(work > 0)) return;
      st.push_back(start), wk.push_back(work), wt.push_back(std::max(msgs, 1.0)), at.push_back(i);
    };
    for (size_t d = 0; d < ndev; ++d) {
      for (size_t j = 0; j < k; ++j)
        flow(begin(d, j), bi * static_cast<double>(r[j][d].send - r[j][d].send_inter),
             msgs_out[0][d * P + j], d * P + j);
      share(2 * d, port_out);
      for (size_t j = 0; j < k; ++j)
        flow(first(0, d * P + j), bi * static_cast<double>(r[j][d].recv - r[j][d].recv_inter),
             msgs_in[0][d * P + j], d * P + j);
      share(2 * d + 1, port_in);
    }
    for (size_t g = 0; g < ng; ++g) {
      const double bxg = bx / lb.group_nics[g];
      for (uint32_t d : members[g])
        for (size_t j = 0; j < k; ++j)
          flow(begin(d, j), bxg * static_cast<double>(r[j][d].send_inter), msgs_out[1][d * P + j],
               d * P + j);
      share(2 * ndev + 2 * g, nic_out);
      for (uint32_t d : members[g])
        for (size_t j = 0; j < k; ++j)
          flow(first(1, d * P + j), bxg * static_cast<double>(r[j][d].recv_inter),
               msgs_in[1][d * P + j], d * P + j);
      share(2 * ndev + 2 * g + 1, nic_in);
    }
    for (const SubStream& x : streams) {
      if (x.src == x.dst) continue;
      const bool c = cross(x);
      for (size_t j = 0; j < k; ++j) {
        if (!(x.mask >> j & 1)) continue;
        const size_t from = x.src * P + j, to = x.dst * P + j;
        const double e =
            c ? std::max(nic_out[from], nic_in[to]) : std::max(port_out[from], port_in[to]);
        arrive[to] = std::max(arrive[to], e);
        pipeline = std::max(pipeline, e);
      }
    }
    for (size_t i = 0; i < n; ++i) ready[i] = std::max(ready[i], arrive[i]);
  }
  return pipeline;
}

double stage_cost(const std::deque<std::vector<Acc>>& stage_acc,
                  const std::vector<int64_t>& stage_rounds, const Bounds& lb, const PlanOptions& o,
                  RoundSizes sizes, const KeyedRounds* keyed) {
  const double a = o.alpha_seconds;
  const size_t ndev = stage_acc.empty() ? 0 : stage_acc[0].size();
  const size_t ng = lb.group_nics.size(), ns = stage_acc.size();
  // Links: [2d] device d's port out, [2d + 1] in; [2 ndev + 2g] NIC group g
  // out, [2 ndev + 2g + 1] in. Per link its seconds in each stage and over
  // every stage, and the first and last stage that uses it.
  const size_t nl = 2 * ndev + 2 * ng;
  std::vector<double> total(nl, 0.0), msgs(nl), msgs_before(nl, 0.0);
  std::vector<std::vector<double>> per(ns);
  std::vector<uint32_t> first(nl, UINT32_MAX), last(nl, 0);
  // Per stage its time (0 for a stage where nothing moves), its first
  // round's and each later round's, and its stall W_s behind earlier
  // stages on the links it shares with them.
  std::vector<double> whole(ns, 0.0), head(ns, 0.0), rest(ns, 0.0), stall(ns, 0.0);
  std::vector<double> rounds(ns, 1.0);
  std::vector<Acc> early;
  std::vector<double> early_links;
  double sum = 0, rounds_most = 0;
  for (size_t s = 0; s < ns; ++s) {
    std::vector<double>& stage = per[s];
    link_seconds(stage_acc[s], lb, o, stage, &msgs);
    double busiest = 0;
    for (size_t i = 0; i < nl; ++i) busiest = std::max(busiest, stage[i]);
    for (size_t i = 0; i < nl; ++i) {
      if (stage[i] <= 0) continue;
      if (total[i] > 0) {
        const double phi = msgs[i] + msgs_before[i] > 0 ? msgs[i] / (msgs[i] + msgs_before[i]) : 0;
        const double rho = stage[i] / busiest;
        if (phi < rho) stall[s] = std::max(stall[s], total[i] / (1 - phi) * (1 - phi / rho));
      }
      total[i] += stage[i];
      msgs_before[i] += msgs[i];
      first[i] = std::min(first[i], static_cast<uint32_t>(s));
      last[i] = static_cast<uint32_t>(s);
    }
    if (busiest <= 0) continue;  // an empty stage (nothing moves)
    const auto k =
        static_cast<double>(std::max<int64_t>(1, s < stage_rounds.size() ? stage_rounds[s] : 1));
    const double t = a * k + busiest;
    sum += t;
    rounds_most = std::max(rounds_most, k);
    rounds[s] = k;
    whole[s] = t;
    head[s] = rest[s] = t / k;
    if (sizes == RoundSizes::kBands && k > 1) {
      // Bands above 0 in rounds of their own: the first round carries the
      // rest of every stream (α plus its busiest link without the late
      // bytes), the later rounds share what is left.
      bool late = false;
      for (const Acc& x : stage_acc[s]) late = late || x.send_late > 0 || x.recv_late > 0;
      if (late) {
        first_round_rows(stage_acc[s], early);
        link_seconds(early, lb, o, early_links);
        double h = 0;
        for (double v : early_links) h = std::max(h, v);
        head[s] = std::clamp(a + h, t / k, t - a * (k - 1));
        rest[s] = (t - head[s]) / (k - 1);
      }
    }
  }
  if (sum <= 0) return 0;
  // lead[s]: the first 1 + lag rounds of stage s (all of a stage with fewer
  // rounds), what the stage after it waits for. fill[s]: what stage s
  // waits for before its first round, the leads of every stage before it,
  // or its stall where that is longer; start[s] the same without stalls.
  // drain[s]: the last 1 + lag rounds of stage s, which wait for the end of
  // the stage before it; tail[s]: the drains of stage s and every later one.
  // Keyed: round r of stage s takes R_s(r) (0 where no stream holds key r),
  // its busiest link's seconds scaled so that the stage's rounds add up to
  // its busiest link over the stage (each round's busiest link may be
  // another; they run side by side).
  std::vector<double> key_scale(ns, 1.0);
  if (keyed)
    for (size_t s = 0; s < ns && s < keyed->seconds.size(); ++s) {
      double raw = 0;
      for (double v : keyed->seconds[s]) raw += v;
      if (raw > 0 && whole[s] > 0) key_scale[s] = (whole[s] - a * rounds[s]) / raw;
    }
  auto keyed_round = [&](size_t s, size_t r) {
    if (!keyed || s >= keyed->seconds.size() || r >= keyed->seconds[s].size()) return 0.0;
    const double v = keyed->seconds[s][r] * key_scale[s];
    return v > 0 ? a + v : 0.0;
  };
  // Seconds `v` of a link in key r of stage s as a round's: α plus v
  // scaled as R_s, nothing where v is 0.
  auto keyed_term = [&](size_t s, double v) { return v > 0 ? a + v * key_scale[s] : 0.0; };
  const bool subs = keyed && keyed->subs;
  // Subs: a stage's subs that hold bytes, and its first and last one's.
  auto sub_count = [&](size_t s) {
    double n = 0;
    if (s < keyed->seconds.size())
      for (double v : keyed->seconds[s]) n += v > 0 ? 1 : 0;
    return n;
  };
  auto sub_edge = [&](size_t s, bool last_one) {
    if (s >= keyed->seconds.size()) return 0.0;
    const std::vector<double>& v = keyed->seconds[s];
    for (size_t i = 0; i < v.size(); ++i) {
      const double x = v[last_one ? v.size() - 1 - i : i];
      if (x > 0) return x * key_scale[s];
    }
    return 0.0;
  };
  auto lead = [&](size_t s) {
    if (subs) return std::min(whole[s], a + sub_edge(s, false) * sub_count(s));
    if (keyed) return std::min(whole[s], keyed_round(s, 0));
    const double n = std::min(rounds[s], 1.0 + kForwardLagRounds);
    return head[s] + rest[s] * (n - 1);
  };
  auto drain = [&](size_t s) {
    if (subs) return std::min(whole[s], a + sub_edge(s, true));
    if (keyed)
      return std::min(whole[s], keyed_round(s, static_cast<size_t>(std::max(rounds[s], 1.0)) - 1));
    return rounds[s] <= 1.0 + kForwardLagRounds ? whole[s] : rest[s] * (1.0 + kForwardLagRounds);
  };
  // Keyed cuts: the critical path of the rounds (C_s(r) above), per
  // sender where a stage's senders are known; there `begin` holds the
  // earliest start of a sender's first round (the stage's lead).
  double keyed_path = 0;
  std::vector<double> begin(ns, -1.0);
  if (keyed && !subs) {
    std::vector<double> prev, cur, lane_end, lane_next;  // C_{s−1}(r), C_s(r)
    double prev_start = 0;                               // C_{s−1}(−1)
    auto before = [&](size_t r) {
      return r < prev.size() ? prev[r] : prev.empty() ? 0.0 : prev.back();
    };
    for (size_t s = 0; s < ns; ++s) {
      if (whole[s] <= 0) continue;
      const auto k = static_cast<size_t>(rounds[s]);
      cur.assign(k, 0.0);
      double first = HUGE_VAL, last_start = stall[s];
      if (s == 0 || s >= keyed->streams.size() || keyed->streams[s].empty() ||
          s >= keyed->loads.size()) {
        double at = stall[s];
        for (size_t r = 0; r < k; ++r) {
          at = std::max(at, before(r));
          if (r == 0) last_start = at;
          at += keyed_round(s, r);
          cur[r] = at;
        }
      } else {
        // Lanes: each process's round r ends when its streams' messages of
        // round r have, and a message starts once both its lanes passed
        // round r − 1 and its sender's feed of round r arrived.
        const size_t ndev = stage_acc[s].size();
        const std::vector<std::vector<double>>& loads = keyed->loads[s];
        lane_end.assign(keyed->lanes, stall[s]);
        last_start = 0;
        for (size_t r = 0; r < k && r < loads.size(); ++r) {
          lane_next = lane_end;
          cur[r] = r > 0 ? cur[r - 1] : 0.0;
          for (const KeyedRounds::Stream& x : keyed->streams[s]) {
            if (!(x.mask >> r & 1)) continue;
            double at = std::max(lane_end[x.src_lane], lane_end[x.dst_lane]);
            const double fed = keyed->feed_of(s, x, r);
            if (fed > 0)
              at = std::max(at, (r == 0 ? prev_start : before(r - 1)) + keyed_term(s - 1, fed));
            first = std::min(first, at);
            if (r == 0) last_start = std::max(last_start, at);
            const auto [out, in] = stream_links(lb, ndev, x.src, x.dst);
            const double end = at + keyed_term(s, std::max(loads[r][out], loads[r][in]));
            lane_next[x.src_lane] = std::max(lane_next[x.src_lane], end);
            lane_next[x.dst_lane] = std::max(lane_next[x.dst_lane], end);
            cur[r] = std::max(cur[r], end);
          }
          lane_end.swap(lane_next);
        }
        if (first < HUGE_VAL) begin[s] = first;
      }
      if (k > 0) keyed_path = std::max(keyed_path, cur.back());
      prev_start = last_start;
      prev.swap(cur);
    }
  }
  std::vector<double> fill(ns + 1, 0.0), start(ns + 1, 0.0), tail(ns + 1, 0.0);
  for (size_t s = 0; s < ns; ++s) {
    fill[s] = std::max(fill[s], stall[s]);
    const double early = s + 1 < ns && begin[s + 1] >= 0 ? begin[s + 1] : HUGE_VAL;
    fill[s + 1] = std::min(early, fill[s] + lead(s));
    start[s + 1] = std::min(early, start[s] + lead(s));
  }
  for (size_t s = ns; s-- > 0;) tail[s] = tail[s + 1] + drain(s);
  // The pipeline: the stage that ends last, after its fill and before the
  // drains of the later stages.
  double pipeline = 0;
  if (subs && keyed->sub_rows) {
    pipeline = sub_pipeline(*keyed, whole, stall, lb, o);
  } else if (subs) {
    // Without the subs' rows, the busiest link's: sub j of stage s is ready
    // when sub j of the stage before ended there (its last where that has
    // fewer), or at its stall; it flows α later.
    std::vector<double> prev, ready, work;
    for (size_t s = 0; s < ns; ++s) {
      if (whole[s] <= 0) continue;
      const size_t k = s < keyed->seconds.size() ? keyed->seconds[s].size() : 0;
      ready.assign(k, stall[s]);
      work.assign(k, 0.0);
      for (size_t j = 0; j < k; ++j) {
        const double feed = j < prev.size() ? prev[j] : prev.empty() ? 0.0 : prev.back();
        ready[j] = std::max(stall[s], feed);
        work[j] = keyed->seconds[s][j] * key_scale[s];
      }
      std::vector<double> begin = ready;
      for (size_t j = 0; j < k; ++j)
        if (work[j] > 0) begin[j] += a;
      std::vector<double> ends = sub_ends(begin, work);
      for (double e : ends) pipeline = std::max(pipeline, e);
      prev.swap(ends);
    }
  } else if (keyed) {
    pipeline = keyed_path;
  } else {
    for (size_t s = 0; s < ns; ++s)
      if (whole[s] > 0) pipeline = std::max(pipeline, fill[s] + whole[s] + tail[s + 1]);
  }
  // Each link waits for the fill of the first stage it serves, and what
  // it carries last still crosses the drain of every later stage; where
  // the next stage's senders are known (keyed cuts), the last round of
  // those it feeds and the drains after their stage
  // (KeyedRounds::feed_links), or nothing where it feeds none.
  auto drains_after = [&](size_t i) {
    const size_t s = last[i];
    const bool known = keyed && !subs && s + 1 < keyed->senders.size() &&
                       !keyed->senders[s + 1].empty() && s < keyed->feed_links.size() &&
                       !keyed->feed_links[s].empty();
    if (!known) return tail[s + 1];
    const double fed = keyed->feed_links[s][i];
    return fed > 0 ? std::min(drain(s + 1), keyed_term(s + 1, fed)) + tail[s + 2] : 0.0;
  };
  // A link that a later stage t also uses carries, from t's start on, all of
  // stage t and later and what is left then of the earlier stages, each
  // spread over its own time (an earlier stage paced by another link
  // leaves this one part idle before t starts).
  double busiest_link = 0;
  for (size_t i = 0; i < nl; ++i) {
    if (total[i] <= 0) continue;
    const double after = a * rounds_most + drains_after(i);
    busiest_link = std::max(busiest_link, fill[first[i]] + total[i] + after);
  }
  // From a later stage's start, a link carries at most all it carries
  // (each earlier stage's rest is a fraction of it), and stages start in
  // order: a link whose last stage's start plus its total cannot exceed
  // what is already the answer changes nothing (a margin of a billionth
  // covers rounding), which leaves most links of a plan of many stages
  // unvisited. The answer is the same bits either way.
  const double known = std::max(busiest_link, pipeline);
  if (known >= sum) return sum;
  for (size_t i = 0; i < nl; ++i) {
    if (total[i] <= 0 || first[i] == last[i]) continue;
    const double after = a * rounds_most + drains_after(i);
    if ((start[last[i]] + total[i] + after) * (1 + 1e-9) < std::max(known, busiest_link)) continue;
    for (size_t t = first[i] + 1; t <= last[i]; ++t) {
      if (per[t][i] <= 0) continue;
      double load = 0;
      for (size_t j = first[i]; j <= last[i]; ++j) {
        if (j >= t) {
          load += per[j][i];
        } else if (whole[j] > 0) {
          load += per[j][i] * std::clamp((start[j] + whole[j] - start[t]) / whole[j], 0.0, 1.0);
        }
      }
      busiest_link = std::max(busiest_link, start[t] + load + after);
    }
  }
  return std::min(sum, std::max(busiest_link, pipeline));
}

std::vector<double> sub_ends(const std::vector<double>& start, const std::vector<double>& work,
                             const std::vector<double>& weight) {
  const size_t n = start.size();
  std::vector<double> end(n, 0.0), left(work);
  std::vector<bool> done(n, false);
  auto w = [&](size_t j) { return j < weight.size() && weight[j] > 0 ? weight[j] : 1.0; };
  for (size_t j = 0; j < n; ++j)
    if (!(work[j] > 0)) {
      end[j] = start[j];
      done[j] = true;
    }
  double now = HUGE_VAL;
  for (size_t j = 0; j < n; ++j)
    if (!done[j]) now = std::min(now, start[j]);
  // Event by event: the flows started by `now` share the link, each in
  // proportion to its weight; the next event is the first end among them
  // or the next start.
  for (;;) {
    double total = 0, next_start = HUGE_VAL, least = HUGE_VAL;
    for (size_t j = 0; j < n; ++j) {
      if (done[j]) continue;
      if (start[j] <= now) {
        total += w(j);
        least = std::min(least, left[j] / w(j));
      } else {
        next_start = std::min(next_start, start[j]);
      }
    }
    if (total == 0) {
      if (next_start == HUGE_VAL) break;
      now = next_start;
      continue;
    }
    // least: the fewest seconds of the link a unit of weight needs to end a flow.
    const double dt = std::min(least * total, next_start - now);
    const bool ends = least * total <= next_start - now;
    for (size_t j = 0; j < n; ++j) {
      if (done[j] || start[j] > now) continue;
      left[j] -= dt * w(j) / total;
      if (ends && left[j] <= least * w(j) * 1e-12) {
        done[j] = true;
        end[j] = now + dt;
      }
    }
    now += dt;
  }
  return end;
}

KeyedRounds spread_rounds(size_t nstages, const std::vector<double>& q) {
  KeyedRounds kr;
  kr.seconds.resize(nstages);
  for (size_t s = 0; s < nstages; ++s) {
    std::vector<double> b{0.0};
    for (size_t k = 1; k <= q.size(); ++k)
      b.push_back(s == 0 ? q[k - 1] : spread_forward_bound(q, k));
    b.push_back(1.0);
    for (size_t r = 0; r + 1 < b.size(); ++r) kr.seconds[s].push_back(b[r + 1] - b[r]);
  }
  return kr;
}

double busiest_link_seconds(const std::vector<Acc>& stage, const Bounds& lb, const PlanOptions& o) {
  std::vector<double> links;
  link_seconds(stage, lb, o, links);
  return links.empty() ? 0.0 : *std::max_element(links.begin(), links.end());
}

std::vector<double> link_loads(const std::vector<Acc>& stage, const Bounds& lb,
                               const PlanOptions& o) {
  std::vector<double> links;
  link_seconds(stage, lb, o, links);
  return links;
}

std::pair<size_t, size_t> stream_links(const Bounds& lb, size_t ndev, uint32_t src, uint32_t dst) {
  if (!crosses_hosts(lb, src, dst)) return {2 * size_t{src}, 2 * size_t{dst} + 1};
  return {2 * ndev + 2 * size_t{lb.group_of_device[src]},
          2 * ndev + 2 * size_t{lb.group_of_device[dst]} + 1};
}

double stage_cost_floor(const std::deque<std::vector<Acc>>& stage_acc, const Bounds& lb,
                        const PlanOptions& o) {
  std::vector<double> total, stage;
  double moving = 0;  // stages where something moves
  for (const std::vector<Acc>& x : stage_acc) {
    link_seconds(x, lb, o, stage);
    total.resize(stage.size(), 0.0);
    bool moves = false;
    for (size_t i = 0; i < stage.size(); ++i)
      if (stage[i] > 0) {
        total[i] += stage[i];
        moves = true;
      }
    moving += moves ? 1 : 0;
  }
  if (moving == 0) return 0;
  const double most = *std::max_element(total.begin(), total.end());
  // stage_cost's sum is at least α per moving stage plus any link's
  // total; its busiest link at least that total plus α; its pipeline at
  // least α per moving stage. Less a millionth of a millionth for rounding.
  return std::max(most + o.alpha_seconds, o.alpha_seconds * moving) * (1 - 1e-12);
}

}  // namespace reshard::planning
