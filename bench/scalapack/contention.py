#!/usr/bin/env python3
"""reshard's MPI execution against ScaLAPACK's pdgemr2d on an idle machine
and beside busy processes (a host shared with a trainer's data loaders and
threads).

Runs bench_scalapack (4 ranks, the three redistributions rows -> columns,
2x2 -> columns, rows -> 2x2 of an n x n double matrix) in rounds; each round
runs it once on the machine as it is ("idle") and once with BUSY processes
that spin beside the job ("busy": what `yes > /dev/null` does). Inside each
run reshard and pdgemr2d alternate iteration by iteration, so that
background load hits both alike; the iterations of every round are pooled
before the median and minimum are taken. Printed per case and condition:
wall time of the slowest rank (median / minimum), CPU seconds per rank
(mean over ranks, median over iterations), the ratio reshard / pdgemr2d,
the 1-minute load average, and then each one's busy / idle slowdown.

    python3 bench/scalapack/contention.py [--build build/dev] [--rounds 2]
        [--iters 10] [--busy 2] [--n 4000] [--json FILE] [--markdown]

Exit status 0 whatever the figures say (a benchmark, not a test); the last
line says whether reshard met the targets: faster than pdgemr2d in both
conditions on each case, and a busy / idle slowdown no worse than its.
Python 3 standard library only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def mpirun(np_):
    argv = [shutil.which("mpirun") or "mpirun", "--allow-run-as-root"]
    if (os.cpu_count() or 1) < np_:
        argv.append("--oversubscribe")
    return argv + ["-np", str(np_)]


def env(build):
    e = dict(os.environ)
    e["RESHARD_BACKEND_DIR"] = os.path.join(build, "lib")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    e.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    return e


def run_bench(args, exe, busy):
    """One run of bench_scalapack, with `busy` spinning processes beside it."""
    fd, path = tempfile.mkstemp(prefix="scalapack-", suffix=".json")
    os.close(fd)
    spinners = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(busy)]
    try:
        argv = mpirun(4) + [exe, "--n", str(args.n), "--iters", str(args.iters), "--json", path]
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env(args.build),
                           timeout=1200)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    if p.returncode != 0:
        sys.exit(f"bench_scalapack failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    with open(path) as f:
        doc = json.load(f)
    os.unlink(path)
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build/dev")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--busy", type=int, default=2)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--json", help="write the pooled figures here")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    args.build = args.build if os.path.isabs(args.build) else os.path.join(ROOT, args.build)
    exe = os.path.join(args.build, "bench", "scalapack", "bench_scalapack")
    if not os.path.exists(exe):
        sys.exit(f"{exe}: not built (needs libscalapack-openmpi-dev; build the dev preset)")

    conditions = ["idle", "busy"]
    runs = {c: [] for c in conditions}
    for r in range(args.rounds):
        for c in conditions:
            runs[c].append(run_bench(args, exe, args.busy if c == "busy" else 0))
            print(f"round {r + 1}/{args.rounds} {c}: done", file=sys.stderr)

    names = [case["name"] for case in runs["idle"][0]["cases"]]
    result = {"n": args.n, "iters": args.iters, "rounds": args.rounds, "busy": args.busy,
              "cores": os.cpu_count(), "cases": []}
    for i, name in enumerate(names):
        row = {"name": name}
        for c in conditions:
            cell = {"load": [(d["load_before"], d["load_after"]) for d in runs[c]]}
            ok = all(d["cases"][i]["ok"] for d in runs[c])
            for who in ("reshard", "pdgemr2d"):
                walls = [w for d in runs[c] for w in d["cases"][i][who]["wall_s"]]
                cpus = [x for d in runs[c] for x in d["cases"][i][who]["cpu_per_rank_s"]]
                cell[who] = {"median_s": median(walls), "min_s": min(walls),
                             "cpu_s": median(cpus)}
            cell["ok"] = ok
            row[c] = cell
        for who in ("reshard", "pdgemr2d"):
            row[who + "_slowdown"] = row["busy"][who]["median_s"] / row["idle"][who]["median_s"]
        result["cases"].append(row)

    ms = lambda s: f"{s * 1e3:.1f}"
    header = ["case", "condition", "reshard ms (med / min)", "pdgemr2d ms (med / min)",
              "reshard / pdgemr2d", "CPU ms per rank: reshard", "pdgemr2d", "load average"]
    lines = []
    for row in result["cases"]:
        for c in conditions:
            cell = row[c]
            o, t = cell["reshard"], cell["pdgemr2d"]
            load = ", ".join(f"{a:.1f}-{b:.1f}" for a, b in cell["load"])
            lines.append([row["name"], c + ("" if c == "idle" else f" (+{args.busy} spinning)"),
                          f"{ms(o['median_s'])} / {ms(o['min_s'])}",
                          f"{ms(t['median_s'])} / {ms(t['min_s'])}",
                          f"{o['median_s'] / t['median_s']:.2f}" + ("" if cell["ok"] else " WRONG"),
                          ms(o["cpu_s"]), ms(t["cpu_s"]), load])
        lines.append([row["name"], "slowdown busy / idle", f"{row['reshard_slowdown']:.2f}x",
                      f"{row['pdgemr2d_slowdown']:.2f}x", "", "", "", ""])
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("| " + " | ".join(["---", "---"] + ["---:"] * (len(header) - 2)) + " |")
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        widths = [max(len(str(x[k])) for x in [header] + lines) for k in range(len(header))]
        for l in [header] + lines:
            print("  ".join(str(x).ljust(widths[k]) for k, x in enumerate(l)))
    faster = all(row[c]["reshard"]["median_s"] < row[c]["pdgemr2d"]["median_s"]
                 for row in result["cases"] for c in conditions)
    steadier = all(row["reshard_slowdown"] <= row["pdgemr2d_slowdown"] for row in result["cases"])
    result["faster_everywhere"] = faster
    result["slowdown_no_worse"] = steadier
    print()
    print(f"{args.n} x {args.n} doubles, 4 ranks on {os.cpu_count()} cores, {args.rounds} rounds "
          f"x {args.iters} iterations per condition, pooled. Targets: reshard faster than "
          f"pdgemr2d in both conditions on each case: {'met' if faster else 'NOT met'}; "
          f"busy/idle slowdown no worse than pdgemr2d's: {'met' if steadier else 'NOT met'}.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
