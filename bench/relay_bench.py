#!/usr/bin/env python3
"""Relays and reduce-scatter on and off, in the same run: plan figures and
execution time over MPI on this machine.

For every spec of bench/specs (and any given with --spec), the tensors are
scaled down by --scale per dimension (so that every rank's buffers fit one
machine), then each variant is planned (`reshard plan --format json`) and
executed under `mpirun -np <processes> reshard run --transport mpi`, the
variants interleaved --repeat times; the table gives the bytes the plan
moves across hosts, the busiest host's egress (its NICs: what relays and
reduce-scatter cut), and the median execution time.

Caveat printed with the table: every "host" here is a process on one 2-core
machine, so messages between hosts are shared-memory copies, not NIC
transfers. A relay's extra stage costs time here that a network would repay;
the time column shows the executor's overhead, not what the bytes buy on a
cluster.

    python3 bench/relay_bench.py [--reshard build/dev/tools/reshard] [--scale 4] [--budget 1MiB]

--budget plans and runs every variant under that staging budget (the
planner's `--budget`: bands, rounds), instead of the specs' own.
"""
import argparse
import glob
import json
import os
import statistics
import sys
import tempfile

from spec_tools import processes, run, scaled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (name, planner flags, engine flags): staged plans run with the engine's
# overlap of stages off (each round after the previous one) and on.
VARIANTS = [("single-hop", ["--no-relays", "--no-reduce-scatter"], []),
            ("staged, no overlap", [], ["--no-overlap"]), ("staged", [], [])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reshard", default=os.path.join(ROOT, "build/dev/tools/reshard"))
    ap.add_argument("--spec", action="append", default=[], help="more specs")
    ap.add_argument("--only", action="store_true", help="only the --spec files")
    ap.add_argument("--scale", type=int, default=4, help="divide every dimension by this")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs per variant")
    ap.add_argument("--iters", type=int, default=3, help="timed iterations per run")
    ap.add_argument("--budget", help="staging budget for every variant (e.g. 256KiB)")
    args = ap.parse_args()
    budget = ["--budget", args.budget] if args.budget else []
    specs = ([] if args.only else sorted(glob.glob(os.path.join(ROOT, "bench/specs/*.json")))) + args.spec
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for path in specs:
            doc = json.load(open(path))
            small = scaled(doc, args.scale)
            f = os.path.join(d, os.path.basename(path))
            json.dump(small, open(f, "w"))
            np = processes(small)
            stats, times = {}, {name: [] for name, _, _ in VARIANTS}
            for name, flags, _ in VARIANTS:
                stats[name] = json.loads(run([args.reshard, "plan", "--spec", f, "--format", "json",
                                              *flags, *budget]))["stats"]
            for _ in range(args.repeat):
                for name, flags, run_flags in VARIANTS:
                    out = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np),
                               args.reshard, "run", "--spec", f, "--transport", "mpi", "--format",
                               "json", "--iters", str(args.iters), *flags, *run_flags, *budget], env)
                    doc_out = json.loads(out[out.index("{"):])
                    if not doc_out["verified"]:
                        sys.exit(f"{path} {name}: not verified")
                    times[name].append(doc_out["median_seconds"])
            for name, _, _ in VARIANTS:
                s = stats[name]
                rows.append((os.path.basename(path), np, name, s["stages"], s["network_bytes"],
                             s["cross_host_bytes"], s["lower_bound_cross_host_bytes"],
                             s["max_host_send_bytes"], s["lower_bound_max_host_send_bytes"],
                             statistics.median(times[name])))
    mib = 1 << 20
    print(f"scale 1/{args.scale} per dimension, {args.repeat} interleaved runs x {args.iters} "
          "iterations, median; MiB as plan / bound"
          + (f"; staging budget {args.budget}" if args.budget else "") + "\n")
    print("| case (`bench/specs/`) | ranks | plan | stages | network | cross-host | busiest host sends | MPI time (ms) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for (case, np, name, stages, net, x, xb, hs, hsb, t) in rows:
        print(f"| `{case}` | {np} | {name} | {stages} | {net / mib:.1f} | {x / mib:.1f} / {xb / mib:.1f} "
              f"| {hs / mib:.1f} / {hsb / mib:.1f} | {t * 1e3:.1f} |")
    print("\nEvery host is a process on this machine: cross-host messages are shared-memory "
          "copies, so the time column shows executor overhead, not network time.")


if __name__ == "__main__":
    main()
