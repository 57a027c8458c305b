#!/usr/bin/env python3
"""Stage overlap over MPI: a staged plan's time with the engine's overlap of
stages on, against the same plan with its stages one after another and
against each stage's own time.

For every case (a spec, resized, under a staging budget that cuts each stage
into rounds a relay can forward one by one) the variants below run under
`mpirun reshard run --transport mpi`, interleaved --repeat times, each run
timing --iters executions (the slowest rank's, after a barrier) and
verifying every destination element on every rank:

    overlap      ExecuteOptions::overlap on: a relay forwards round r of
                 stage s + 1 while round r + 1 of stage s still arrives
    sequential   --no-overlap: each round starts after the previous one (of
                 every stage) completed, so the stages run one at a time
    through K    --no-overlap --last-stage K, for every stage K but the last

The engine cannot run a later stage without the earlier ones (they write
what it reads), so each stage's own time is derived from the sequential
runs of the same repeat: stage K = through K - through K-1 (stage 0 =
through 0; the last stage = sequential - through its predecessor). Nothing
else runs beside a stage there, so that difference is the stage alone; the
stages' times add up to the sequential time. The table gives overlap /
slowest stage (1.0: the plan takes as long as its slowest stage) and
overlap / sum of the stages (= overlap / sequential), as medians over the
repeats with their range.

--link RATE (tc's rate syntax: 400mbit, 1gbit) runs every case on emulated
hosts: each host of the spec is a Linux network namespace with one NIC (a
veth pair into a bridge) shaped to RATE in each direction by `tc tbf`; the
processes of one host exchange messages through shared memory (Open MPI's
vader), hosts through TCP over their NICs. Open MPI starts one daemon per
host through a launch agent that enters the host's namespace (and gives it
its own host name), as ssh would on a cluster. Needs root (CAP_NET_ADMIN,
CAP_SYS_ADMIN), `ip`, `tc`, `unshare` and `nsenter`; everything runs inside
a private network namespace (`unshare --net`), so the machine's own
interfaces are untouched. Without --link every rank shares this machine's
memory: messages are copies by the CPU, which binds there.

    python3 bench/overlap_bench.py [--link 400mbit] [--repeat 5] [--iters 5]
                                   [--reshard build/dev/tools/reshard]
"""
import argparse
import ctypes
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

from spec_tools import processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSIDE = "RESHARD_OVERLAP_BENCH_NETNS"  # set once in the private namespace
SUBNET = "10.77.0"
# For the simulator's topology of the emulated hosts: assumed, not measured.
ALPHA = 50e-6  # per message: TCP through a veth and a bridge, and MPI
SHM_BYTES_PER_SECOND = 2e9  # inside a host: Open MPI's shared memory

# (name shown, spec, factor on every tensor's first dimension, staging budget)
CASES = [
    ("relays across 3 hosts (stages 0-2)", "tests/mpi/specs/relay_one_holder_3_hosts.json", 8,
     "256KiB"),
    ("reduce-scatter + all-gather psum, 4 hosts", "tests/mpi/specs/psum_reduce_scatter.json", 4,
     "256KiB"),
    ("psum, 4 hosts of 2 (reduce-scatter, gather, pass on)", "bench/specs/psum_dp4_hosts_of_2.json",
     0.25, "256KiB"),
    ("psum relayed along a chain of 4 hosts", "tests/mpi/specs/psum_chain_4_hosts.json", 16,
     "256KiB"),
]


def rate_bytes(rate):
    """tc's rate (400mbit, 1gbit, 50mbps) in bytes per second."""
    units = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "bit": 1 / 8, "kbps": 1e3,
             "mbps": 1e6, "gbps": 1e9, "bps": 1}
    for u, scale in units.items():
        if rate.lower().endswith(u):
            return float(rate[:-len(u)]) * scale
    sys.exit(f"--link {rate}: a rate such as 400mbit or 1gbit")


def resized(doc, factor):
    """The spec with every tensor's first dimension multiplied by `factor`."""
    out = json.loads(json.dumps(doc))
    for t in out["tensors"]:
        t["shape"][0] = max(1, int(t["shape"][0] * factor))
    return out


def host_of_process(doc):
    """process -> host, from the meshes' `processes` and `hosts` arrays."""
    hosts = {}
    for name, mesh in doc["meshes"].items():
        if "processes" not in mesh or "hosts" not in mesh:
            sys.exit(f"mesh {name}: --link needs `processes` and `hosts` on every mesh")
        for p, h in zip(mesh["processes"], mesh["hosts"]):
            if hosts.setdefault(p, h) != h:
                sys.exit(f"mesh {name}: process {p} on hosts {hosts[p]} and {h}")
    return hosts


class EmulatedHosts:
    """One network namespace per host, each with a NIC shaped to `rate`
    in both directions, bridged together; a hostfile and a launch agent for
    mpirun. Call inside a private network namespace."""

    def __init__(self, n_hosts, rate, workdir):
        self.sleepers, self.dir = [], workdir
        sh(["ip", "link", "set", "lo", "up"])
        sh(["ip", "link", "add", "br0", "type", "bridge"])
        sh(["ip", "addr", "add", f"{SUBNET}.254/24", "dev", "br0"])
        sh(["ip", "link", "set", "br0", "up"])
        self.pids = []
        for h in range(n_hosts):
            # A process holds the host's namespace open while the runs last.
            p = subprocess.Popen(["unshare", "--net", "sleep", "infinity"],
                                 preexec_fn=die_with_parent)
            self.sleepers.append(p)
            self.pids.append(p.pid)
        for h, pid in enumerate(self.pids):
            # `unshare` must have entered the namespace before the NIC moves.
            for _ in range(100):
                if os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                    break
                subprocess.run(["sleep", "0.02"])
            ns = ["nsenter", "-t", str(pid), "-n"]
            sh(["ip", "link", "add", f"vh{h}", "type", "veth", "peer", "name", "eth0", "netns",
                str(pid)])
            sh(["ip", "link", "set", f"vh{h}", "master", "br0"])
            sh(["ip", "link", "set", f"vh{h}", "up"])
            sh(ns + ["ip", "addr", "add", f"{SUBNET}.{h + 1}/24", "dev", "eth0"])
            sh(ns + ["ip", "link", "set", "eth0", "up"])
            sh(ns + ["ip", "link", "set", "lo", "up"])
            # Sends leave through eth0, receives through vh<h>: each shaped.
            tbf = ["root", "tbf", "rate", rate, "burst", "32kb", "latency", "2s"]
            sh(ns + ["tc", "qdisc", "add", "dev", "eth0"] + tbf)
            sh(["tc", "qdisc", "add", "dev", f"vh{h}"] + tbf)
        self.agent = os.path.join(workdir, "agent.sh")
        cases = "".join(f'  {SUBNET}.{h + 1}) pid={pid} name=host{h} ;;\n'
                        for h, pid in enumerate(self.pids))
        with open(self.agent, "w") as f:
            f.write("#!/bin/sh\n# mpirun's launch agent: AGENT [options] HOST COMMAND...\n"
                    'while [ "${1#-}" != "$1" ]; do shift; done\n'
                    'host=$1; shift\ncase "$host" in\n' + cases +
                    '  *) echo "unknown host $host" >&2; exit 1 ;;\nesac\n'
                    'exec nsenter -t "$pid" -n unshare --uts /bin/sh -c "hostname $name; $*"\n')
        os.chmod(self.agent, 0o755)

    def mpirun(self, procs_per_host):
        hostfile = os.path.join(self.dir, "hosts")
        with open(hostfile, "w") as f:
            for h, n in enumerate(procs_per_host):
                f.write(f"{SUBNET}.{h + 1} slots={n}\n")
        return ["mpirun", "--allow-run-as-root", "--hostfile", hostfile, "--bind-to", "none",
                "--mca", "plm_rsh_agent", self.agent, "--mca", "routed", "direct",
                "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", f"{SUBNET}.0/24",
                "--mca", "oob_tcp_if_include", f"{SUBNET}.0/24", "-x", "RESHARD_BACKEND_DIR",
                "-np", str(sum(procs_per_host))]

    def close(self):
        for p in self.sleepers:
            p.kill()
            p.wait()


def die_with_parent():
    """In a child before exec: SIGKILL when this script dies, however it dies
    (prctl PR_SET_PDEATHSIG), so that no host's namespace outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def sh(argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{p.stderr}")


def run_json(argv, env):
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0 or "{" not in p.stdout:
        sys.exit(f"failed ({p.returncode}): {' '.join(argv)}\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout[p.stdout.index("{"):])


def spread(values, fmt):
    return f"{fmt(statistics.median(values))} [{fmt(min(values))}–{fmt(max(values))}]"


def bench_case(args, hosts_env, env, workdir, case):
    name, spec, factor, budget = case
    doc = resized(json.load(open(os.path.join(ROOT, spec))), factor)
    path = os.path.join(workdir, os.path.basename(spec))
    json.dump(doc, open(path, "w"))
    np_ = processes(doc)
    plan = run_json([args.reshard, "plan", "--spec", path, "--format", "json", "--budget", budget],
                    env)["stats"]
    stages = plan["stages"]
    if args.link:
        host = host_of_process(doc)
        order = [host[p] for p in range(np_)]
        if order != sorted(order) or sorted(set(order)) != list(range(len(set(order)))):
            sys.exit(f"{spec}: --link needs the processes of each host contiguous, host 0 first")
        mpirun = hosts_env.mpirun([order.count(h) for h in range(len(set(order)))])
    else:
        mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
                  str(np_)]
    base = mpirun + [args.reshard, "run", "--spec", path, "--transport", "mpi", "--format", "json",
                     "--iters", str(args.iters), "--timeout", "120", "--budget", budget]
    variants = [("overlap", []), ("sequential", ["--no-overlap"])]
    variants += [(f"through {k}", ["--no-overlap", "--last-stage", str(k)])
                 for k in range(stages - 1)]
    t = {v: [] for v, _ in variants}
    overlapped = []
    for _ in range(args.repeat):
        for v, flags in variants:
            out = run_json(base + flags, env)
            if not out["verified"]:
                sys.exit(f"{spec} {v}: not verified")
            t[v].append(out["median_seconds"])
            if v == "overlap":
                overlapped.append(out["overlapped_stage_batches"])
                rounds = out["rounds"]
    # Per repeat: each stage alone, from the sequential prefixes.
    prefix = [t[f"through {k}"] for k in range(stages - 1)] + [t["sequential"]]
    stage_t = [[prefix[k][r] - (prefix[k - 1][r] if k else 0) for r in range(args.repeat)]
               for k in range(stages)]
    slowest = [max(s[r] for s in stage_t) for r in range(args.repeat)]
    ms = lambda x: f"{x * 1e3:.1f}"
    # No order of the messages beats the busiest NIC's bytes (every stage's,
    # sends or receives) at the link's rate (TCP/IP headers not counted).
    nic = max(plan["max_host_send_bytes"], plan["max_host_recv_bytes"])
    nic_cell = ms(nic / rate_bytes(args.link)) if args.link else "—"
    sim_cell = "—"
    if args.link:
        # The simulator's prediction for the same plan (the spec's costs)
        # on these links; α and the shared-memory bandwidth are assumed.
        topo = os.path.join(workdir, "links.json")
        json.dump({"name": f"emulated hosts, one {args.link} NIC each",
                   "alpha_seconds": ALPHA, "intra_host_bytes_per_second": SHM_BYTES_PER_SECOND,
                   "nic_bytes_per_second": rate_bytes(args.link), "nics_per_host": 1},
                  open(topo, "w"))
        sim = run_json([args.reshard, "simulate", "--spec", path, "--topology", topo,
                        "--plan-costs", "spec", "--format", "json", "--budget", budget], env)
        sim_cell = ms(sim["predicted_seconds"])
    return [name, f"{np_} ({len(set(host_of_process(doc).values()))})",
            f"{plan['network_bytes'] / 2**20:.1f}", f"{stages} / {rounds}", budget,
            spread(t["overlap"], ms), spread(t["sequential"], ms),
            " + ".join(ms(statistics.median(s)) for s in stage_t),
            spread([t["overlap"][r] / slowest[r] for r in range(args.repeat)], lambda x: f"{x:.2f}"),
            spread([t["overlap"][r] / t["sequential"][r] for r in range(args.repeat)],
                   lambda x: f"{x:.2f}"), nic_cell, sim_cell,
            f"{statistics.median(overlapped):.0f}"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reshard", default=os.path.join(ROOT, "build/dev/tools/reshard"))
    ap.add_argument("--link", help="emulate hosts whose NICs move RATE each way (tc rate: 400mbit)")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved runs per variant")
    ap.add_argument("--iters", type=int, default=5, help="timed executions per run (median)")
    ap.add_argument("--only", action="append", default=[], help="cases whose spec contains this")
    args = ap.parse_args()
    args.reshard = os.path.abspath(args.reshard)
    if args.link and os.environ.get(INSIDE) != "1":
        # Everything below in a private network namespace: the bridge, the
        # hosts' namespaces and their shaping vanish with it.
        env = dict(os.environ, **{INSIDE: "1"})
        os.execvpe("unshare", ["unshare", "--net", sys.executable] + sys.argv, env)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    env.setdefault("RESHARD_BACKEND_DIR",
                   os.path.join(os.path.dirname(os.path.dirname(args.reshard)), "lib"))
    cases = [c for c in CASES if not args.only or any(o in c[1] for o in args.only)]
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        hosts_env = None
        if args.link:
            n_hosts = max(len(set(host_of_process(json.load(open(os.path.join(ROOT, c[1])))).values()))
                          for c in cases)
            hosts_env = EmulatedHosts(n_hosts, args.link, workdir)
        try:
            for case in cases:
                rows.append(bench_case(args, hosts_env, env, workdir, case))
        finally:
            if hosts_env:
                hosts_env.close()
    if args.link:
        where = (f"emulated hosts, one NIC each shaped to {args.link} per direction (tc tbf), "
                 "shared memory inside a host; simulated: `reshard simulate` of the same plan on "
                 f"these links, α {ALPHA * 1e6:.0f} µs and {SHM_BYTES_PER_SECOND / 1e9:.0f} GB/s "
                 "inside a host assumed")
    else:
        where = "every rank on this machine's shared memory (no link limit: the CPU binds)"
        rows = [r[:-3] + r[-1:] for r in rows]  # no link: no NIC floor, no simulation
    print(f"{where}; {args.repeat} interleaved runs x {args.iters} executions, medians "
          "[min–max over runs]; every run verified element by element\n")
    head = ["case", "ranks (hosts)", "network MiB", "stages / rounds", "budget", "overlap (ms)",
            "sequential (ms)", "stages alone (ms)", "overlap / slowest stage",
            "overlap / sum of stages", "busiest NIC at the link rate (ms)", "simulated (ms)",
            "overlapped stage batches"]
    if not args.link:
        head = head[:-3] + head[-1:]
    print("| " + " | ".join(head) + " |")
    print("| --- " + "| ---: " * (len(head) - 1) + "|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")


if __name__ == "__main__":
    main()
