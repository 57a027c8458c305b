#!/usr/bin/env python3
"""reshard's MPI execution against ScaLAPACK's pdgemr2d on an idle machine
and beside busy processes (a host shared with a trainer's data loaders and
threads).

Runs bench_scalapack (4 ranks, the three redistributions rows -> columns,
2x2 -> columns, rows -> 2x2 of an n x n double matrix) in rounds; each round
runs it once on the machine as it is ("idle") and once per placement of
BUSY processes that spin beside the job (what `yes > /dev/null` does):

  same  the spinners in the job's own session, so in its scheduling group
        when the kernel groups sessions (sched_autogroup_enabled=1), and
        alongside it where it does not: a trainer's data loaders next to
        the weight sync. There a program that calls sched_yield while it
        waits (Open MPI does, in every idle progress call, when ranks
        outnumber cores) hands the spinners its time slices.
  own   each spinner in a session of its own (`yes > /dev/null &` typed in
        another terminal): with autogroups each session gets an equal share
        of the cores, so the job gets a third of them; yields stay inside
        the job's group.

The job always runs in a session of its own. --autogroup-nice N (root, for
N < 0) gives the job's session and the own-session spinners that autogroup
priority, so that other work on a shared machine weighs less against both.
Inside each run reshard and pdgemr2d alternate iteration by iteration, so
that background load hits both alike; the iterations of every round are
pooled before the median and minimum are taken. Printed per case and
condition: wall time of the slowest rank (median / minimum), CPU seconds
per rank (mean over ranks, median over iterations), the ratio reshard /
pdgemr2d, the 1-minute load average, and each one's busy / idle slowdown
per placement.

    python3 bench/scalapack/contention.py [--build build/dev] [--rounds 2]
        [--iters 10] [--busy 2] [--placement both|same|own] [--n 4000]
        [--autogroup-nice N] [--json FILE] [--markdown]

Exit status 0 whatever the figures say (a benchmark, not a test); the last
lines say, per placement, whether reshard met the targets: faster than
pdgemr2d in both conditions on each case, and a busy / idle slowdown no
worse than its.
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


def set_autogroup_nice(pid, nice):
    """Gives the autogroup (session) of `pid` the priority `nice`."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError as e:
        sys.exit(f"--autogroup-nice {nice}: cannot write /proc/{pid}/autogroup ({e}; "
                 "needs CONFIG_SCHED_AUTOGROUP, and root for a negative value)")


# Starts `busy` spinners, then the command ("$@"), in one session: the
# spinners share the job's session and scheduling group. They end with it.
SAME_SESSION = ('pids=; i=0; while [ "$i" -lt "$1" ]; do yes > /dev/null & pids="$pids $!"; '
                'i=$((i + 1)); done; shift; "$@"; rc=$?; '
                '[ -n "$pids" ] && kill $pids; exit $rc')


def run_bench(args, exe, busy, placement):
    """One run of bench_scalapack in a session of its own, with `busy`
    spinning processes placed in its session ("same") or each in a session
    of its own ("own")."""
    fd, path = tempfile.mkstemp(prefix="scalapack-", suffix=".json")
    os.close(fd)
    own = busy if placement == "own" else 0
    same = busy if placement == "same" else 0
    spinners = []
    try:
        for _ in range(own):
            spinners.append(subprocess.Popen(["yes"], stdout=subprocess.DEVNULL,
                                             start_new_session=True))
            if args.autogroup_nice is not None:
                set_autogroup_nice(spinners[-1].pid, args.autogroup_nice)
        argv = ["sh", "-c", SAME_SESSION, "sh", str(same)] + mpirun(4) + [
            exe, "--n", str(args.n), "--iters", str(args.iters), "--json", path]
        job = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env(args.build), start_new_session=True)
        if args.autogroup_nice is not None:
            set_autogroup_nice(job.pid, args.autogroup_nice)
        try:
            out, err = job.communicate(timeout=1200)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, 9)
            job.communicate()
            sys.exit("bench_scalapack: no answer within 1200 s")
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    if job.returncode != 0:
        sys.exit(f"bench_scalapack failed ({job.returncode}):\n{out}\n{err}")
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
    ap.add_argument("--placement", choices=["both", "same", "own"], default="both",
                    help="where the spinners run: in the job's session, each in its own, or both "
                         "(one busy condition each)")
    ap.add_argument("--autogroup-nice", type=int, default=None,
                    help="autogroup priority of the job's and the own-session spinners' sessions")
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--json", help="write the pooled figures here")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    if args.busy < 1:
        sys.exit(f"--busy {args.busy}: must be at least 1 (the spinning processes beside the job)")
    if args.rounds < 1 or args.iters < 1:
        sys.exit("--rounds and --iters: must be at least 1")
    if args.autogroup_nice is not None and not -20 <= args.autogroup_nice <= 19:
        sys.exit(f"--autogroup-nice {args.autogroup_nice}: must be in [-20, 19]")
    args.build = args.build if os.path.isabs(args.build) else os.path.join(ROOT, args.build)
    exe = os.path.join(args.build, "bench", "scalapack", "bench_scalapack")
    if not os.path.exists(exe):
        sys.exit(f"{exe}: not built (needs libscalapack-openmpi-dev; build the dev preset)")

    placements = ["same", "own"] if args.placement == "both" else [args.placement]
    busy_label = {"same": f"busy (+{args.busy} spinning, job's session)",
                  "own": f"busy (+{args.busy} spinning, own sessions)"}
    conditions = ["idle"] + placements
    runs = {c: [] for c in conditions}
    for r in range(args.rounds):
        for c in conditions:
            runs[c].append(run_bench(args, exe, 0 if c == "idle" else args.busy, c))
            print(f"round {r + 1}/{args.rounds} {c}: done", file=sys.stderr)

    names = [case["name"] for case in runs["idle"][0]["cases"]]
    result = {"n": args.n, "iters": args.iters, "rounds": args.rounds, "busy": args.busy,
              "placements": placements, "autogroup_nice": args.autogroup_nice,
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
        for p in placements:
            row[p + "_slowdown"] = {
                who: row[p][who]["median_s"] / row["idle"][who]["median_s"]
                for who in ("reshard", "pdgemr2d")}
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
            lines.append([row["name"], "idle" if c == "idle" else busy_label[c],
                          f"{ms(o['median_s'])} / {ms(o['min_s'])}",
                          f"{ms(t['median_s'])} / {ms(t['min_s'])}",
                          f"{o['median_s'] / t['median_s']:.2f}" + ("" if cell["ok"] else " WRONG"),
                          ms(o["cpu_s"]), ms(t["cpu_s"]), load])
        for p in placements:
            sd = row[p + "_slowdown"]
            lines.append([row["name"], f"slowdown busy / idle ({p})", f"{sd['reshard']:.2f}x",
                          f"{sd['pdgemr2d']:.2f}x", "", "", "", ""])
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("| " + " | ".join(["---", "---"] + ["---:"] * (len(header) - 2)) + " |")
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        widths = [max(len(str(x[k])) for x in [header] + lines) for k in range(len(header))]
        for l in [header] + lines:
            print("  ".join(str(x).ljust(widths[k]) for k, x in enumerate(l)))
    met = lambda ok: "met" if ok else "NOT met"
    nice = ("" if args.autogroup_nice is None else
            f", job and own-session spinners at autogroup nice {args.autogroup_nice}")
    print()
    print(f"{args.n} x {args.n} doubles, 4 ranks on {os.cpu_count()} cores, {args.rounds} rounds "
          f"x {args.iters} iterations per condition, pooled{nice}. Targets, per placement of the "
          f"{args.busy} spinning processes:")
    result["targets"] = {}
    for p in placements:
        faster = all(row[c]["reshard"]["median_s"] < row[c]["pdgemr2d"]["median_s"]
                     for row in result["cases"] for c in ("idle", p))
        steadier = all(row[p + "_slowdown"]["reshard"] <= row[p + "_slowdown"]["pdgemr2d"]
                       for row in result["cases"])
        result["targets"][p] = {"faster_everywhere": faster, "slowdown_no_worse": steadier}
        where = "in the job's session" if p == "same" else "in sessions of their own"
        print(f"- spinners {where}: reshard faster than pdgemr2d idle and busy on each case: "
              f"{met(faster)}; busy/idle slowdown no worse than pdgemr2d's: {met(steadier)}.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
