// The simulator's lower bound (reshard/simulate.h): the planner's traffic
// bounds over all plans (core/src/plan/bounds.h: per device the bytes it
// must receive and must send, per host the bytes it must take in and send
// out) divided by the capacity each can use at best, and the messages of
// every device (the bytes crossing hosts) divided by the capacity of every
// device (host) together.
#include <algorithm>

#include "plan/bounds.h"
#include "plan/context.h"
#include "reshard/simulate.h"
#include "sim/nic_groups.h"

namespace reshard {

SimBound simulate_lower_bound(const PlanInput& input, const ClusterTopology& cluster) {
  validate(cluster);
  planning::Context ctx(input);
  ctx.build();
  const planning::Bounds lb = planning::compute_bounds(ctx);
  sim::HostMap hosts;
  for (const DeviceInfo& d : input.topology.devices()) hosts.add(d.host, d.device);
  for (int64_t d : ctx.devices) hosts.add(input.topology.info(d).host, d);
  hosts.finish();
  SimBound b;
  b.kind = "none";
  // An end moving `bytes` at `bps`, each byte needed on at least `fan`
  // devices beyond the end (bounds.h's fan-outs). No message flows before
  // α, so by time t at most bps (t - α) bytes crossed the end. A byte is
  // either sent across it once per needer (direct), or some needer takes it
  // from a device that is not a holder (outside the end sending, inside the
  // end receiving), whose forward starts α after the message that carried
  // the byte across completed: the byte crossed by T - α, T the plan's
  // time. With D the direct bytes and F the forwarded ones (D + F = bytes):
  // fan D + F <= bps (T - α) and F <= bps (T - 2α), so T >= bytes / bps +
  // (2 - 1/fan) α where T >= 2α, and T >= α + fan bytes / bps where F = 0
  // (docs/design.md §2.2).
  auto consider = [&](int64_t bytes, double bps, const char* kind, int64_t id, int64_t fan = 1) {
    if (bytes <= 0) return;
    const double a = cluster.alpha_seconds, x = static_cast<double>(bytes) / bps;
    double s = a + x;
    if (fan > 1) {
      const double n = static_cast<double>(fan);
      s = std::min(x + (2.0 - 1.0 / n) * a, a + n * x);
    }
    if (s > b.seconds) b = {s, kind, id, bytes, bps, std::max<int64_t>(1, fan)};
  };
  // Every message: the bytes each device must receive plus what reductions
  // take beyond one message per needer (bounds.h), moved by every device
  // together at best.
  int64_t messages = lb.extra_messages;
  double all_bps = 0;
  for (size_t d = 0; d < ctx.devices.size(); ++d) {
    const int64_t dev = ctx.devices[d];
    const int32_t host = input.topology.info(dev).host;
    // At best it uses its intra-host port and its whole NIC group at once.
    const double nic =
        hosts.nic_group(host, dev, cluster.nics_per_host).second * cluster.nic_bytes_per_second;
    const double bps = cluster.intra_host_bytes_per_second + nic;
    consider(lb.missing[d], bps, "device_recv", dev);
    consider(lb.forced[d], bps, "device_send", dev, lb.forced_fan[d]);
    messages += lb.missing[d];
    all_bps += bps;
  }
  consider(messages, all_bps, "devices", -1);
  // Bytes crossing hosts: at least what the hosts must take in plus the
  // reductions' extra crossings, and what they must send out. Taken in,
  // each element is needed on at least `in_fan` devices of every host that
  // takes it in (the fewest of Bounds::ingress_fan), so the crossings pay
  // the fan-out's second α as one end's do: a crossing that completes after
  // T - α is used by its receiver alone (a forward of it would start after
  // T), so keeping every earlier crossing and, per element and host whose
  // every needer takes a late one, the late crossings of the needer that
  // takes the fewest is still a scheme every host learns each element by,
  // of at least the hosts' bytes: early + late / in_fan >= in. With early
  // <= bps (T - 2α) and early + late <= bps (T - α), T >= in / bps + (2 -
  // 1/in_fan) α where T >= 2α (docs/simulate.md, "The lower bound").
  // A host's rate over every one of its NICs (the topology's devices, not
  // only the plan's), h an index into lb.hosts.
  auto host_bps = [&](size_t h) {
    const int32_t host = lb.hosts[h];
    const int32_t nics = cluster.nics_per_host != 0
                             ? cluster.nics_per_host
                             : static_cast<int32_t>(hosts.devices.at(host).size());
    double bps = nics * cluster.nic_bytes_per_second;
    if (cluster.host_link_bytes_per_second > 0)
      bps = std::min(bps, cluster.host_link_bytes_per_second);
    return bps;
  };
  int64_t in = lb.extra_crossings, out = 0, in_fan = 0;
  double all_nics = 0;
  for (size_t h = 0; h < lb.hosts.size(); ++h) {
    const int32_t host = lb.hosts[h];
    const double bps = host_bps(h);
    consider(lb.ingress[h], bps, "host_recv", host, lb.ingress_fan[h]);
    consider(lb.egress[h], bps, "host_send", host, lb.egress_fan[h]);
    if (lb.ingress[h] > 0) {
      const int64_t f = std::max<int64_t>(1, lb.ingress_fan[h]);
      in_fan = in_fan == 0 ? f : std::min(in_fan, f);
    }
    in += lb.ingress[h];
    out += lb.egress[h];
    all_nics += bps;
  }
  consider(in, all_nics, "hosts", -1, std::max<int64_t>(1, in_fan));
  consider(out, all_nics, "hosts", -1);
  // The hosts holding copies of an element together (bounds.h): what must
  // leave them, over their NICs together, named by their first host (-1:
  // every host holding anything). A byte needed on `fan` devices outside
  // them is sent out that often or forwarded outside, as one end's bytes.
  auto holders = [&](const planning::Bounds::HolderSet& set, int64_t id) {
    double bps = 0;
    for (uint32_t h : set.hosts) bps += host_bps(h);
    if (bps > 0) consider(set.bytes, bps, "holder_hosts", id, set.fan);
  };
  for (const planning::Bounds::HolderSet& set : lb.holder_sets)
    holders(set, lb.hosts[set.hosts.front()]);
  holders(lb.all_holders, -1);
  return b;
}

}  // namespace reshard
