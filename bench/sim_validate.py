#!/usr/bin/env python3
"""The simulator against MPI executions on this machine: predicted vs measured.

1. Calibrates: `mpirun -np 2 reshard calibrate` measures α and bandwidth
   with the engine itself (ping-pong plans) and writes a topology file.
2. For every spec of bench/specs (scaled down by --scale per dimension so
   the ranks' buffers fit one machine), with relays on and off: predicts
   the execution time (`reshard simulate --topology <calibrated>`) and
   measures it (`mpirun -np P reshard run --transport mpi`, median of
   --repeat runs of --iters iterations, each the slowest rank's time).
3. Prints one markdown table: predicted, measured, measured / predicted.

Every "host" here is a process on one machine: the calibrated bandwidth is
that of one pair of processes copying through shared memory, while a plan
runs up to 16 processes on the machine's cores at once.

    python3 bench/sim_validate.py [--reshard build/dev/tools/reshard] [--scale 4]
"""
import argparse
import glob
import json
import os
import statistics
import sys
import tempfile

import spec_tools
from spec_tools import processes, scaled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = [("relays", []), ("single-hop", ["--no-relays", "--no-reduce-scatter"])]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def run(cmd):
    return spec_tools.run(cmd, ENV)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reshard", default=os.path.join(ROOT, "build/dev/tools/reshard"))
    ap.add_argument("--scale", type=int, default=4, help="divide every dimension by this")
    ap.add_argument("--repeat", type=int, default=3, help="mpirun runs per plan (median)")
    ap.add_argument("--iters", type=int, default=3, help="timed iterations per run")
    ap.add_argument("--topology", help="use this topology instead of calibrating")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        topo = args.topology or os.path.join(d, "calibrated.json")
        if not args.topology:
            run(MPIRUN + ["-np", "2", args.reshard, "calibrate", "--out", topo])
        cal = json.load(open(topo))
        rows = []
        for path in sorted(glob.glob(os.path.join(ROOT, "bench/specs/*.json"))):
            small = scaled(json.load(open(path)), args.scale)
            f = os.path.join(d, os.path.basename(path))
            json.dump(small, open(f, "w"))
            np = processes(small)
            for name, flags in VARIANTS:
                sim = json.loads(run([args.reshard, "simulate", "--spec", f, "--topology", topo,
                                      "--format", "json", "--peers", "", *flags]))
                times = []
                for _ in range(args.repeat):
                    out = run(MPIRUN + ["-np", str(np), args.reshard, "run", "--spec", f,
                                        "--transport", "mpi", "--format", "json", "--iters",
                                        str(args.iters), *flags])
                    doc = json.loads(out[out.index("{"):])
                    if not doc["verified"]:
                        sys.exit(f"{path} {name}: not verified")
                    times.append(doc["median_seconds"])
                rows.append((os.path.basename(path), np, name, sim["messages"], sim["bytes"],
                             sim["predicted_seconds"], statistics.median(times)))
    print(f"calibrated: alpha {cal['alpha_seconds'] * 1e6:.1f} us, "
          f"{cal['nic_bytes_per_second'] / 2**30:.2f} GiB/s per process pair; scale 1/{args.scale} "
          f"per dimension; measured = median of {args.repeat} runs x {args.iters} iterations\n")
    print("| case (`bench/specs/`) | ranks | plan | messages | MiB | predicted (ms) | measured (ms) | measured / predicted |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    ratios = []
    for (case, np, name, msgs, b, pred, meas) in rows:
        ratios.append(meas / pred if pred > 0 else float("nan"))
        print(f"| `{case}` | {np} | {name} | {msgs} | {b / 2**20:.1f} | {pred * 1e3:.2f} | "
              f"{meas * 1e3:.2f} | {ratios[-1]:.2f} |")
    print(f"\nmeasured / predicted: median {statistics.median(ratios):.2f}, "
          f"min {min(ratios):.2f}, max {max(ratios):.2f}")


if __name__ == "__main__":
    main()
