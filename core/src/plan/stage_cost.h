// Internal: the α–β estimate of a plan's time from its per-stage, per-device
// bytes (docs/planner.md, "The α–β estimate"; the fleet simulator's links,
// reshard/simulate.h), and the rounds a plan of several stages is cut into
// for pipelining (plan/rounds.h, RoundRule).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "plan/bounds.h"
#include "reshard/plan.h"

namespace reshard::planning {

// A device's bytes in one stage: sent, received, copied locally, and the
// parts of those sent and received across hosts; and the messages it sends
// and receives in the stage (stage_cost's share of a link between stages).
struct Acc {
  int64_t send = 0, recv = 0, local = 0, send_inter = 0, recv_inter = 0;
  int64_t send_msgs = 0, recv_msgs = 0;
  // Of send and recv, the bytes of relay bands above 0: each its own
  // message, in a round after the one that carries the rest of its stream
  // (plan/rounds.h), unless the stage is pipelined (RoundRule::pipeline).
  int64_t send_late = 0, recv_late = 0;
};

// How many rounds after its own a forward's round waits for in the stage
// before it. A forward stream's rounds are cut at its own bytes, not at the
// cuts of the streams that fed it (a region split over a replicated
// source's holders arrives in each holder's stream in turn; a relay's
// outgoing streams cut the same bytes at other chunks), so round r of a
// forward reads what arrived up to round r + 1 of the stage before. The
// fleet simulator derives these dependencies from the pieces
// (SimMessage::after): on bench/specs/two_holder_hosts_to_6_hosts.json
// 432 of its 504 stage-1 messages wait for round r + 1, and on
// psum_dp4_hosts_of_2.json a forward of round 0 waits for both rounds of
// its summands.
inline constexpr double kForwardLagRounds = 1.0;

// The rounds a plan is cut into for pipelining (rounds.h, RoundRule): S
// stages of busiest-link seconds T_s in k rounds each take about
// (1 + L) Σ_s T_s / k + max_s T_s (1 - (1 + L) / k) + α k S when a relay's
// rounds wait on one another (each stage's α charged one after the other,
// as the fleet simulator's per-process rounds do; L = kForwardLagRounds),
// least at k = sqrt((1 + L) (Σ_s T_s - max_s T_s) / (α S)); clamped to [1,
// kMaxPipelineRounds], 1 with fewer than two stages that move data
// (`moving`, where not null, receives their number).
// (Charging α once per stage instead, stage_cost's pipeline, gave
// k = sqrt(.. / α), which the simulator found slower than one round on
// small plans of three stages.)
int64_t pipeline_rounds(const std::deque<std::vector<Acc>>& stage_acc, const Bounds& lb,
                        const PlanOptions& o, int* moving = nullptr);

// How a stage's bytes spread over its rounds: kBands, its streams' pieces
// of no band (and band 0) in the first round and each band above 0 in a
// round of its own (Acc::send_late, recv_late); kEven, in equal rounds
// (the pipelined rounds of RoundRule, whose messages merge the bands).
enum class RoundSizes { kBands, kEven };

// The α–β estimate, on the links the fleet simulator models
// (reshard/simulate.h): per device an intra-host port out and in, per NIC
// group an out and in link carrying all its devices' cross-host bytes
// (Bounds::group_nics; one NIC per device by default). Stage s moves
// L_s(link) = bytes / bandwidth over each link and has k_s rounds (its
// relay bands, or its pipelined rounds: RoundRule); its messages are
// concurrent, so it takes
//   T_s = α·k_s + max over links of L_s(link).
// Its rounds are even (T_s / k_s each) unless `sizes` is kBands and it has
// late bytes: then its first round takes H_s = α + the busiest link
// without the late bytes (at least T_s / k_s) and each later round
// (T_s − H_s) / (k_s − 1) (unpipelined on
// bench/specs/rl_sync_uneven_replicas_4_to_2_hosts.json, the first round
// carries four fifths of stage 0, and the forwards wait for it).
// Stages overlap as the engine runs them: a later stage forwards a round
// once what it reads arrived, which is up to L = kForwardLagRounds rounds
// after its own in the stage before. So stage s waits for the first
// min(1 + L, k_j) rounds of each stage j before it (the fill F_s, their
// sum), and its last min(1 + L, k_s) rounds wait for the end of the stage
// before it (its drain; D_s, the drains of every stage after s). The plan
// takes the larger of
//   - for every link, what it carries over every stage, Σ_s L_s(link),
//     plus α·max k_s, after the fill of the first stage it serves and
//     before the drain of the last;
//   - for every link and every later stage t that uses it, from t's start
//     (F_t without stalls) on: Σ_{j>=t} L_j(link) and what is left then of
//     each earlier stage j, L_j(link) · (F_j + T_j − F_t) / T_j clamped to
//     [0, 1] (stage j spreads its bytes on the link over its own time: a
//     stage paced by another link leaves this one part idle before t
//     starts), plus α·max k_s and the drains after the link's last stage
//     (on bench/specs/two_holder_hosts_to_6_hosts.json the receiving
//     hosts' NICs take stage 0 at the holders' pace, and their forwards
//     of stage 1 queue behind the rest of it);
//   - the pipeline: max_s (F_s + T_s + D_{s+1}), the stage that ends last;
// and never more than the stages one after the other, Σ_s T_s.
// A stage also shares its links with the stages before it, and the fleet
// simulator shares a link max-min fairly among the messages on it, so a
// later stage with few messages on a link that earlier stages keep busy
// with many gets little of it. Stage s starts no earlier than its stall
//   W_s = max over links l it uses of E / (1 - φ) · (1 - φ / ρ), where φ < ρ;
// E = Σ_{j<s} L_j(l) (what earlier stages carry over l), φ = n_s / (n_s +
// n_<s) (its share of l: its messages on l against those of earlier
// stages, Acc::send_msgs / recv_msgs, a NIC group's summed over its
// devices) and ρ = L_s(l) / max_l' L_s(l') (the share of l it needs to
// run at the pace of its busiest link). Earlier stages hold l for about
// E / (1 - φ), in which stage s moves at φ / ρ of its pace: F_s becomes
// max(F_s, W_s).
// (bench/weight_sync.py's qwen3_m2n on H100: relays receive ~60 messages
// of stage 0 a round against ~9 of stage 1, so stage 1, which needs 82% of
// their NICs, moves at a sixth of its pace until stage 0 ends.)
//
// Keyed cuts (plan/rounds.h, RoundRule::keys; `keyed` given): round r of a
// forward reads only what arrived in round r of the stage before (lag 0),
// and rounds are as uneven as their keys' bytes. Round r of stage s takes
// R_s(r) = α + its busiest link's seconds of key r (keyed->seconds[s][r];
// nothing for a round no stream of the stage holds), scaled so that the
// stage's rounds add up to its busiest link's seconds over the stage (the
// busiest link of one round need not be that of another, and links run side
// by side: summed unscaled, the rounds of rl_sync_uneven_replicas_4_to_2_hosts
// would count its busiest links' peaks one after the other). A stage waits for the
// first round of each stage before it (lead), and its last round for the
// end of the stage before (drain). The pipeline is the critical path of
// the rounds: round r of stage s ends at
//   C_s(r) = max(C_s(r − 1), C_{s−1}(r)) + R_s(r)
// (C_s(−1) its stall), the plan at the latest C_s of a last round.
// Where the streams of a stage above 0 are known (keyed->streams[s]), the
// path is followed per stream and process, as the fleet simulator's lanes
// run (a process's messages of a stage go round by round together): the
// message of stream x (device d to e) in round r starts at
//   B_x(r) = max(L_p(d)(r − 1), L_p(e)(r − 1), C_{s−1}(r − 1) + Φ_x(r))
// and ends at B_x(r) + α + the busier of its two links in key r, where
// L_p(r) is the latest end of a message of process p in round r (its
// stall before round 0), C_{s−1}(−1) the start of the first round of
// stage s − 1, and Φ_x(r) = α + the busiest link of d's feed in key r:
// the streams into d that feed the kinds of forward x makes (a sending- or
// receiving-side transit, a pre-reduction, a destination's forward); a
// term of no bytes is 0, and each is scaled as R_s. C_s(r) is the latest
// end of a round-r message, and the stage's lead (what the links it first
// uses wait for) the earliest B_x. A link that carries a feed is followed
// by the last round of the senders it feeds (and the drains of the stages
// after theirs), a link that carries none by no drain. A relay fed over
// NVLink while the NICs of its stage carry the rest forwards that early:
// on bench/specs/axis_swap_4_hosts_of_8.json (each host's two devices
// without cross-host targets relay both ways) the simulator starts the
// forwards at 9 µs, not after the 36 µs of a whole round. The
// link terms and the sum of the stages stay as above.
//
// Sub-messages (`subs` set; Message::sub): the keys of a stage are subs of
// one round instead of rounds of their own: every stream sends its keys as
// messages side by side, and the message of sub j reads only sub j of what
// its sender received (the fleet simulator's dependencies, from the
// pieces). Each stage has one round (pass stage_rounds of 1). The pipeline
// follows each sub through the links as the simulator does (sub_pipeline):
// device d holds sub j at ready_d(j), the latest end of a sub-j stream into
// d in an earlier stage (a reducer waits for every summand, a relay for its
// sender); its sub-j streams start α after max(ready_d(j), W_s). Each link
// (stage_cost's ports and NIC groups) is shared by its flows in proportion
// to their messages, as the simulator shares it among messages (sub_ends
// with weights): on a port out one flow per sub, on a NIC group out one per
// (device, sub), on a port or NIC group in one per (device, sub) from its
// earliest sender's start; each flow's work is the link's seconds of the
// sub's bytes (`sub_rows`). A stage's flows share a link with those of the
// stages before it (at most kSubLinkFlows flows a link), whose ends are not
// revised for their dependents, but the latest end on the link counts. A
// stream's sub ends at the later end of its flows on its two links (ports
// within a host, NIC groups across): a late summand ends no earlier than
// its own sender's link allows. The pipeline is the latest end. So subs of
// widths growing with j (small first) end one after another and their
// forwards overlap what is still flowing; subs of equal widths end
// together and overlap nothing. A stage's lead (what the next stage waits
// for before any of its subs) is α plus its first sub's busiest link
// seconds (keyed->seconds, scaled as above) times its stage's subs, its
// drain α plus its last sub's; the link terms and the sum of the stages
// stay as above, with α once per stage. Cost O(stages × subs × (devices +
// streams)) plus, per link, the square of its flows.
struct SubStream {
  uint32_t src = 0, dst = 0;  // dense devices
  uint32_t mask = 0;          // bit j: it holds sub j
};
struct KeyedRounds {
  std::vector<std::vector<double>> seconds;  // per stage, per round: busiest link, no α
  // Keyed cuts, per stage above 0: its streams, each with the keys it
  // holds, its kinds of forward (a bit each) and the processes of its ends
  // (a process's messages of a stage go round by round together, as the
  // fleet simulator's lanes do), and the senders' feeds:
  // per device and kind of forward (senders_at[s][d * kForwardKinds + k],
  // −1 for none) the busiest link per round of the stage before of the
  // streams into it that feed that kind (seconds, no α; 0 where none
  // holds the key), and the busiest link of its own streams per round of
  // its stage. Per stage and round the links' seconds (link_loads). Empty
  // for a stage: its rounds follow the stage's `seconds`.
  static constexpr size_t kForwardKinds = 4;
  struct Stream {
    uint32_t src = 0, dst = 0, mask = 0, kinds = 0;
    uint32_t src_lane = 0, dst_lane = 0;  // their processes, numbered from 0
  };
  size_t lanes = 0;  // processes
  struct Sender {
    std::vector<double> feed, own;
  };
  std::vector<std::vector<Stream>> streams = {};
  std::vector<std::vector<Sender>> senders = {};
  std::vector<std::vector<int32_t>> senders_at = {};
  std::vector<std::vector<std::vector<double>>> loads = {};
  // The busiest feed of stream x of stage s in round r, over its kinds.
  double feed_of(size_t s, const Stream& x, size_t r) const {
    double v = 0;
    for (size_t k = 0; k < kForwardKinds; ++k) {
      if (!(x.kinds >> k & 1) || s >= senders_at.size() || senders_at[s].empty()) continue;
      const int32_t at = senders_at[s][x.src * kForwardKinds + k];
      if (at < 0) continue;
      const std::vector<double>& f = senders[s][static_cast<size_t>(at)].feed;
      if (r < f.size()) v = std::max(v, f[r]);
    }
    return v;
  }
  // Per stage whose next stage's senders are known, per link (link_loads'
  // numbering): where streams of their feed use it, the latest last round
  // of the senders they feed (the busiest link of its own streams, no α),
  // else 0.
  std::vector<std::vector<double>> feed_links = {};
  bool subs = false;
  // Subs: per stage, sub and device the sub's rows, and per stage its
  // streams (the pipeline needs both).
  const std::deque<std::vector<std::vector<Acc>>>* sub_rows = nullptr;
  std::vector<std::vector<SubStream>> sub_streams = {};
};

// The subs' pipeline of stage_cost (KeyedRounds with subs and sub_rows):
// the latest end of a stream's sub, given each stage's time (`whole`, 0
// where nothing moves) and stall W_s.
double sub_pipeline(const KeyedRounds& kr, const std::vector<double>& whole,
                    const std::vector<double>& stall, const Bounds& lb, const PlanOptions& o);

// The ends of flows on one link shared max-min fairly among those flowing
// (processor sharing at rate 1): flow j starts at start[j] and needs
// work[j] seconds of the link alone; a flow of no work ends at its start.
// O(n^2) for n flows.
// With `weight`, flow j gets weight[j] / (the flowing flows' weights) of
// the link (1 where none or not above 0).
std::vector<double> sub_ends(const std::vector<double>& start, const std::vector<double>& work,
                             const std::vector<double>& weight = {});
// The rounds' shares of each stage's bytes under spread cuts of bounds `q`
// (rounds.h, RoundRule::spread, spread_bounds),
// as KeyedRounds for stage_cost (which scales each stage's shares to its
// busiest link): stage 0 q_(r+1) - q_r, a stage above 0 the widths between
// its forward bounds (spread_forward_bound). Round r of a forward reads the
// keys of stage-0 rounds r - 1 and r (lag 0: stage_cost's critical path of
// keyed rounds), and the estimate takes each stream's bytes as spread over
// the keys like its stage's (a stream holds tensors of every key range).
KeyedRounds spread_rounds(size_t nstages, const std::vector<double>& q);

double stage_cost(const std::deque<std::vector<Acc>>& stage_acc,
                  const std::vector<int64_t>& stage_rounds, const Bounds& lb, const PlanOptions& o,
                  RoundSizes sizes = RoundSizes::kBands, const KeyedRounds* keyed = nullptr);

// The busiest link's seconds of a stage's rows (stage_cost's links).
double busiest_link_seconds(const std::vector<Acc>& stage, const Bounds& lb, const PlanOptions& o);

// Each of stage_cost's links' seconds in the rows `stage`: [2d] device
// d's port out, [2d + 1] in; [2 ndev + 2g] NIC group g out, + 1 in.
std::vector<double> link_loads(const std::vector<Acc>& stage, const Bounds& lb,
                               const PlanOptions& o);

// The links (out, in) of a stream from dense device `src` to `dst` in
// link_loads' numbering: its ports within a host, its NIC groups across.
std::pair<size_t, size_t> stream_links(const Bounds& lb, size_t ndev, uint32_t src, uint32_t dst);

// A floor of stage_cost with any rounds: the most seconds one link carries
// over every stage plus α, or α per stage where something moves, if more
// (each of stage_cost's terms is at least that). It never falls as bytes
// are added, so the global statistics stop a pass the single-hop guard will
// reject once this passes the single-hop plan's estimate
// (Context::single_hop_estimate, GuardStop): keep it below stage_cost
// whenever the model changes (PlanSingleHop.StageCostFloorIsAFloor).
double stage_cost_floor(const std::deque<std::vector<Acc>>& stage_acc, const Bounds& lb,
                        const PlanOptions& o);

}  // namespace reshard::planning
