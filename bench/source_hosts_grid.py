#!/usr/bin/env python3
"""Plans where the source spans as many hosts as receive, from two builds of
`reshard` side by side: the busiest device, host egress and the α–β estimate.

The grid: a trainer on H = 2-4 hosts of D = 1-8 devices (the tensor sharded
by rows or columns over all of them, over both mesh axes, or by rows on each
host) feeding R = 2..H inference replicas of M = 1-8 devices on other hosts
(sharded by columns or rows in each, replicated in each, or sharded over
both axes), α 0 and 5 µs, a 128 MiB and a 4 MiB f32 tensor: 5,760 plans,
global statistics only (`reshard plan --format json`). For each build it
prints how many plans have the busiest device (what it sends or takes in,
over the larger of its two bounds) or a host's egress above 1.05x its bound,
and, over the plans whose figures differ, the new build's estimate against
the old one's. With --topology, each changed plan is also simulated with
both builds (`reshard simulate --peers '' --budget 0`) and the predicted times
compared: the planner's estimate models one NIC per device, the simulator
the topology's NICs per host; --nics-per-host N gives the new build's plans
the option of that name (older builds do not know it), so its estimate
models the NICs the topology has.

    python3 bench/source_hosts_grid.py --old OLD/tools/reshard [--new build/dev/tools/reshard]
        [--alpha 5e-6] [--topology bench/topologies/h100_8gpu_ndr400.json ...]
        [--nics-per-host 8]
"""
import argparse
import itertools
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = {"rows": [["h", "d"], None], "cols": [None, ["h", "d"]], "2d": ["h", "d"],
           "host rows": ["d", None]}
DESTINATIONS = {"cols": [None, "k"], "rows": ["k", None], "replicated": [None, None],
                "2d": ["r", "k"]}


def spec(H, D, R, M, src, dst, alpha, big, nics=None):
    n_src, n_dst = H * D, R * M

    def mesh(names, shape, first, hosts):
        ids = list(range(first, first + len(hosts)))
        return {"axis_names": names, "shape": shape, "devices": ids, "processes": ids,
                "hosts": hosts}
    options = {"alpha_seconds": alpha, "staging_budget_bytes": 0}
    if nics is not None:
        options["nics_per_host"] = nics
    return {
        "options": options,
        "meshes": {"src": mesh(["h", "d"], [H, D], 0, [i // D for i in range(n_src)]),
                   "dst": mesh(["r", "k"], [R, M], n_src, [H + i // M for i in range(n_dst)])},
        "tensors": [{"name": "w", "shape": [8192, 4096] if big else [1024, 1024], "dtype": "f32",
                     "src": {"mesh": "src", "spec": src}, "dst": {"mesh": "dst", "spec": dst}}]}


def simulated(reshard, path, topology):
    out = subprocess.run([reshard, "simulate", "--spec", path, "--topology", topology, "--peers",
                          "", "--budget", "0", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["predicted_seconds"]


def summary(ratios):
    return (f"lower (< 0.99) on {sum(r < 0.99 for r in ratios)}, higher (> 1.01) on "
            f"{sum(r > 1.01 for r in ratios)}; min {min(ratios):.3f}, median "
            f"{statistics.median(ratios):.3f}, max {max(ratios):.3f}")


def figures(reshard, path):
    out = subprocess.run([reshard, "plan", "--spec", path, "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    st = json.loads(out)["stats"]
    device = max(st["max_send_bytes"], st["max_recv_bytes"]) / max(
        1, st["lower_bound_max_send_bytes"], st["lower_bound_max_recv_bytes"])
    egress = st["max_host_send_bytes"] / max(1, st["lower_bound_max_host_send_bytes"])
    return device, egress, st["cost_seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the reshard binary to compare against")
    ap.add_argument("--new", default=os.path.join(ROOT, "build/dev/tools/reshard"))
    ap.add_argument("--alpha", type=float, action="append",
                    help="α values of the grid (default: 0 and 5e-6)")
    ap.add_argument("--topology", action="append", default=[],
                    help="also simulate the changed plans on this topology (repeatable)")
    ap.add_argument("--nics-per-host", type=int,
                    help="options.nics_per_host of the new build's plans (default: not set)")
    args = ap.parse_args()
    alphas = args.alpha or [0.0, 5e-6]
    sims = {t: [] for t in args.topology}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path, new_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "new.json")
        for H, D, R, M, s, d, alpha, big in itertools.product(
                [2, 3, 4], [1, 2, 4, 8], [2, 3, 4], [1, 2, 4, 8], SOURCES, DESTINATIONS,
                alphas, [True, False]):
            if R > H or (D == 1 and s == "2d"):
                continue
            for p, nics in ((path, None), (new_path, args.nics_per_host)):
                with open(p, "w") as f:
                    json.dump(spec(H, D, R, M, SOURCES[s], DESTINATIONS[d], alpha, big, nics), f)
            old, new = figures(args.old, path), figures(args.new, new_path)
            rows.append((old, new))
            if old != new:
                for t in args.topology:
                    sims[t].append(simulated(args.new, new_path, t) / simulated(args.old, path, t))
    changed = [(o, n) for o, n in rows if o != n]
    print(f"{len(rows)} plans, {len(changed)} with different figures")
    for name, i in (("old", 0), ("new", 1)):
        print(f"  {name}: busiest device above 1.05x on {sum(r[i][0] > 1.05 for r in rows)} "
              f"(worst {max(r[i][0] for r in rows):.2f}), host egress above 1.05x on "
              f"{sum(r[i][1] > 1.05 for r in rows)}; of the changed plans "
              f"{sum(r[i][0] > 1.05 for r in changed)} and {sum(r[i][1] > 1.05 for r in changed)}")
    if changed:
        print(f"  estimate new/old on the changed plans: {summary([n[2] / o[2] for o, n in changed])}")
        for t, ratios in sims.items():
            print(f"  simulated new/old on {os.path.basename(t)}: {summary(ratios)}")


if __name__ == "__main__":
    main()
