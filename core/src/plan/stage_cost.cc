#include "plan/stage_cost.h"

#include <algorithm>
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

}  // namespace

int64_t pipeline_rounds(const std::deque<std::vector<Acc>>& stage_acc, const Bounds& lb,
                        const PlanOptions& o) {
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
  if (moving < 2 || sum - most <= 0) return 1;
  if (o.alpha_seconds <= 0) return kMaxPipelineRounds;
  const double k = std::sqrt((1.0 + kForwardLagRounds) * (sum - most) / (o.alpha_seconds * moving));
  return std::clamp<int64_t>(std::llround(std::min(k, 1e6)), 1, kMaxPipelineRounds);
}

double stage_cost(const std::deque<std::vector<Acc>>& stage_acc,
                  const std::vector<int64_t>& stage_rounds, const Bounds& lb,
                  const PlanOptions& o) {
  const double a = o.alpha_seconds;
  const size_t ndev = stage_acc.empty() ? 0 : stage_acc[0].size();
  const size_t ng = lb.group_nics.size(), ns = stage_acc.size();
  // Links: [2d] device d's port out, [2d + 1] in; [2 ndev + 2g] NIC group g
  // out, [2 ndev + 2g + 1] in. Per link its seconds over every stage and
  // the first and last stage that uses it.
  const size_t nl = 2 * ndev + 2 * ng;
  std::vector<double> total(nl, 0.0), stage(nl), msgs(nl), msgs_before(nl, 0.0);
  std::vector<uint32_t> first(nl, UINT32_MAX), last(nl, 0);
  // Per stage one round's time (0 for a stage where nothing moves), and
  // its stall W_s behind earlier stages on the links it shares with them.
  std::vector<double> one_round(ns, 0.0), whole(ns, 0.0), stall(ns, 0.0);
  double sum = 0, rounds_most = 0;
  for (size_t s = 0; s < ns; ++s) {
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
    one_round[s] = t / k;
    whole[s] = t;
  }
  if (sum <= 0) return 0;
  // fill[s]: what stage s waits for before its first round, (1 + lag)
  // rounds of every stage before it (all of a stage with fewer rounds), or
  // its stall where that is longer; tail[s]: the last round of stage s and
  // of every later one.
  std::vector<double> fill(ns + 1, 0.0), tail(ns + 1, 0.0);
  for (size_t s = 0; s < ns; ++s) {
    const auto k =
        static_cast<double>(std::max<int64_t>(1, s < stage_rounds.size() ? stage_rounds[s] : 1));
    fill[s] = std::max(fill[s], stall[s]);
    fill[s + 1] = fill[s] + one_round[s] * std::min(k, 1.0 + kForwardLagRounds);
  }
  for (size_t s = ns; s-- > 0;) tail[s] = tail[s + 1] + one_round[s];
  // The pipeline: the stage that ends last, after its fill and before the
  // last round of each later stage.
  double pipeline = 0;
  for (size_t s = 0; s < ns; ++s)
    if (one_round[s] > 0) pipeline = std::max(pipeline, fill[s] + whole[s] + tail[s + 1]);
  // Each link waits for the fill of the first stage it serves, and what
  // it carries last still crosses the last round of every later stage.
  double busiest_link = 0;
  for (size_t i = 0; i < nl; ++i) {
    if (total[i] <= 0) continue;
    busiest_link =
        std::max(busiest_link, fill[first[i]] + total[i] + a * rounds_most + tail[last[i] + 1]);
  }
  return std::min(sum, std::max(busiest_link, pipeline));
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
