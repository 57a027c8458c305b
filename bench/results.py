#!/usr/bin/env python3
"""Regenerates the tables of docs/results.md from the benchmarks' output.

Each table of the page sits between two markers,

    <!-- results:NAME -->
    ...generated...
    <!-- /results:NAME -->

and is written by the function of this script named after it: the function
runs its benchmark (or reads the JSON a benchmark wrote), renders the
Markdown table, and stamps it with the command, the date, the machine
(cores, CPU model) and the commit the build was made from. Nothing between
the markers is edited by hand; the text outside them says what the tables
mean.

    python3 bench/results.py                       # every table but the costly ones (ON_REQUEST)
    python3 bench/results.py --all                 # every table on the page
    python3 bench/results.py --only plan_scale     # one table (repeat --only for more)
    python3 bench/results.py --build build/dev     # the build whose binaries run (default)
    python3 bench/results.py --check               # markers well formed, one per table; runs nothing
    python3 bench/results.py --list                # the tables and their commands

Python 3 standard library only. Run CPU-heavy regenerations under
`nice -n 10` on a shared machine; the figures that matter are ratios
against a baseline measured in the same run.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "results.md")
H100 = "bench/topologies/h100_8gpu_ndr400.json"


# --------------------------------------------------------------- helpers

class Ctx:
    def __init__(self, build):
        self.build = build if os.path.isabs(build) else os.path.join(ROOT, build)
        self.build_rel = build
        self.reshard = os.path.join(self.build, "tools", "reshard")

    def bin(self, rel):
        path = os.path.join(self.build, rel)
        if not os.path.exists(path):
            sys.exit(f"{path}: not built (build the dev preset, or pass --build DIR)")
        return path

    def show(self, path):
        """A binary's path as the page shows it: relative to the build's source tree."""
        rel = os.path.relpath(path, build_source(self))
        return path if rel.startswith("..") else rel

    def env(self):
        e = dict(os.environ)
        e["RESHARD_BACKEND_DIR"] = os.path.join(self.build, "lib")
        e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        e.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        return e



def bound_term(b):
    """The binding term of a simulated bound: a device or host by id, or
    every device ("devices") or host ("hosts") together (id -1), with its
    fan-out where its bytes are needed on several devices beyond it."""
    term = b["kind"] if b["id"] < 0 else f"{b['kind']} {b['id']}"
    return term + (f", fan {b['fan']}" if b.get("fan", 1) > 1 else "")

def run(ctx, argv, timeout=1800):
    """Runs argv from the repository root; returns stdout (stderr on failure)."""
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=ctx.env(),
                       timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {shlex.join(argv)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def mpirun(np_):
    argv = [shutil.which("mpirun") or "mpirun", "--allow-run-as-root"]
    if (os.cpu_count() or 1) < np_:
        argv.append("--oversubscribe")
    return argv + ["-np", str(np_)]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_source(ctx):
    """The source tree the build was configured from."""
    src = ROOT
    try:
        with open(os.path.join(ctx.build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    src = line.split("=", 1)[1].strip()
    except OSError:
        pass
    return src


def build_commit(ctx):
    """The commit of the source tree the build was configured from."""
    src = build_source(ctx)
    try:
        c = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True).stdout.strip()
    except OSError:
        c = ""
    return c or "unknown"


def stamp(ctx, command, seconds):
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"`{command}` — {now}, {os.cpu_count()} cores ({cpu_model()}), "
            f"load average {load:.1f} at the end, build `{build_name(ctx)}` of commit "
            f"{build_commit(ctx)}, {seconds:.0f} s.")


def build_name(ctx):
    rel = os.path.relpath(ctx.build, build_source(ctx))
    return ctx.build_rel if rel.startswith("..") else rel


def table(header, rows, align=None):
    align = align or ["---"] * len(header)
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def mib(b):
    return f"{b / 1048576:,.1f}"


def num(text):
    """A figure printed by a benchmark, with thousands separators."""
    return f"{float(text):,.1f}" if "." in text else f"{int(text):,}"


def ratio(x):
    return "—" if x is None or x != x else f"{x:.3f}"


# --------------------------------------------------------------- tables
# Each returns (command shown in the stamp, Markdown body).

def t_weight_sync(ctx, names="dsv3_m2n,dsv3_nemorl,kimi_k2,kimi_k2_fp8,qwen3_m2n", extra=(),
                  topologies="both"):
    out = tempfile.mkdtemp(prefix="ws-")
    argv = [sys.executable, "bench/weight_sync.py", "--reshard", ctx.reshard, "--only", names,
            "--out-dir", out, "--threads", "1", "--jobs", "2", "--topologies", topologies, *extra]
    run(ctx, argv, timeout=7200)
    rows, pub = [], []
    peers = ["rank0_broadcast", "direct_p2p", "layered"]

    def peer_cell(d, p):
        if p not in d.get("peers", {}):
            return "—"
        q = d["peers"][p]
        # A pipelined peer at its best count of chunks, shown beside it.
        return f"{q['predicted_seconds']:.3f}" + (f" ({q['chunks'] or '4/hop'})" if "chunks" in q else "")

    for n in names.split(","):
        published = ""
        for f in sorted(glob.glob(os.path.join(out, glob.escape(n) + "*.result.json"))):
            d = json.load(open(f))
            if d["case"] != n:
                continue
            published = d["published"]
            b = d["lower_bound"]
            rows.append([n, d["gpus"], d["topology_file"], f"{d['predicted_seconds']:.3f}",
                         f"{d['lower_bound_seconds']:.3f}", f"{d['ratio']:.2f}",
                         *[peer_cell(d, p) for p in peers], bound_term(b), f"{d['messages']:,}"])
        pub.append(f"- {n}: {published}")
    shutil.rmtree(out, ignore_errors=True)
    shown = ctx.show(ctx.reshard)
    cmd = ("python3 bench/weight_sync.py --only " + names + " --threads 1 --jobs 2 --topologies "
           + topologies + ("" if shown == "build/dev/tools/reshard" else " --reshard " + shown)
           + ("" if not extra else " " + " ".join(extra)))
    body = table(["case", "GPUs (train + inference)", "topology", "ours (s)", "bound (s)",
                  "ours / bound", *[f"{p} (s{', chunks' if p != 'direct_p2p' else ''})"
                                    for p in peers], "bound term", "messages"],
                 rows, ["---", "---", "---", "---:", "---:", "---:", "---:", "---:", "---:",
                        "---", "---:"])
    body += "\n\nPublished measurements on real clusters (quoted from `bench/weight_sync.py`, " \
            "**published, not ours**):\n\n" + "\n".join(pub)
    return cmd, body


def t_weight_sync_405b(ctx):
    return t_weight_sync(ctx, "llama405b", ("--peers", "direct_p2p,layered", "--chunks", "256"),
                         topologies="own")


def t_plan_scale(ctx):
    exe = ctx.bin("bench/bench_plan_scale")
    argv = [exe, "--repeat", "3", "--threads", "2"]
    text = run(ctx, argv)
    rows = []
    head = None
    budget = ""
    for line in text.splitlines():
        m = re.match(r"== staging budget: (.*)", line)
        if m:
            budget = m.group(1).strip()
        m = re.match(r"(\S.*?): (\d+) tensors, (\d+) pieces in the whole plan, network ([\d.]+) GiB "
                     r"\(bound ([\d.]+) GiB\), max send ([\d.]+) GiB \(bound ([\d.]+)\)", line)
        if m:
            head = {"case": m.group(1), "pieces": int(m.group(3)),
                    "net": f"{num(m.group(4))} / {num(m.group(5))}",
                    "send": f"{m.group(6)} / {m.group(7)}"}
            continue
        m = re.search(r"process 0 plan bytes: ([\d.]+) MiB \(([\d.]+) B/piece\), encode ([\d.]+) ms, "
                      r"decode\+verify ([\d.]+) ms", line)
        if m and head:
            head["bytes"] = f"{m.group(1)} MiB ({m.group(3)} / {m.group(4)} ms)"
            continue
        m = re.search(r"global statistics: ([\d.]+) ms\s+process 0 part: ([\d.]+) ms \((\d+) pieces, "
                      r"(\d+) messages\), (\d+) rounds", line)
        if m and head:
            head.update(glob=m.group(1), part=m.group(2), ppieces=int(m.group(3)),
                        rounds=m.group(5))
            continue
        m = re.search(r"process 0 part on (\d+) threads: ([\d.]+) ms, ([\d.]+)x", line)
        if m and head:
            rows.append([head["case"], budget, f"{head['pieces']:,}", head["net"], head["send"],
                         head["glob"], head["part"], f"{m.group(2)} ({m.group(3)}x)",
                         f"{head['ppieces']:,}", head["rounds"], head.get("bytes", "")])
            head = None
    naive = re.search(r"naive all-pairs vs reshard.*?naive ([\d.]+) ms, reshard ([\d.]+) ms, "
                      r"ratio ([\d.]+)x \(pieces (\d+) vs (\d+)\)", text)
    body = table(["case", "staging budget", "pieces (whole plan)", "network GiB / bound",
                  "max send GiB / bound", "global statistics (ms)", "process 0's part (ms)",
                  "part on 2 threads (ms, speed-up)", "part pieces", "rounds",
                  "process 0 bytes (encode / decode+verify)"],
                 rows, ["---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:",
                        "---:", "---"])
    if naive:
        body += (f"\n\nNaive all-pairs planner against `make_plan` (8 layers, 64 → 8×8 devices, "
                 f"every part): naive {naive.group(1)} ms, reshard {naive.group(2)} ms, "
                 f"**{naive.group(3)}×** (pieces {int(naive.group(4)):,} vs "
                 f"{int(naive.group(5)):,}).")
    return shlex.join([ctx.show(exe)] + argv[1:]), body


def plan_json(ctx, spec, *flags):
    return json.loads(run(ctx, [ctx.reshard, "plan", "--spec", spec, "--format", "json", *flags]))


def stats_of(doc):
    return doc.get("stats", doc)


def t_plan_fleet(ctx):
    out = tempfile.mkdtemp(prefix="pf-")
    rows_json = os.path.join(out, "plan_fleet.json")
    argv = [sys.executable, "bench/plan_scale.py", "--reshard", ctx.reshard, "--timeout", "120",
            "--json", rows_json]
    text = run(ctx, argv, timeout=4 * 3600)
    shutil.rmtree(out, ignore_errors=True)
    shown = ctx.show(ctx.reshard)
    cmd = ("python3 bench/plan_scale.py --timeout 120"
           + ("" if shown == "build/dev/tools/reshard" else " --reshard " + shown))
    return cmd, text.strip()


def t_bounds(ctx):
    specs = sorted(f for f in os.listdir(os.path.join(ROOT, "bench", "specs")) if f.endswith(".json"))
    rows = []
    for f in specs:
        spec = "bench/specs/" + f
        for label, flags in (("staged", ()), ("single-hop", ("--no-relays", "--no-reduce-scatter"))):
            s = stats_of(plan_json(ctx, spec, *flags))
            nic = max(s["max_host_send_bytes"], s["max_host_recv_bytes"])
            nic_b = max(s["lower_bound_max_host_send_bytes"], s["lower_bound_max_host_recv_bytes"])
            rows.append([f"`{f[:-5]}`" if label == "staged" else "", label, s["stages"],
                         f"{s['messages']:,}", mib(s["network_bytes"]),
                         ratio(s["network_bytes_ratio"]), mib(s["cross_host_bytes"]),
                         ratio(s["cross_host_bytes_ratio"]), ratio(nic / nic_b if nic_b else None),
                         ratio(s["max_send_bytes_ratio"]),
                         f"{s['cost_seconds'] * 1e3:.3f}", ratio(s["cost_seconds_ratio"]),
                         s["lower_bound_binding"]])
    body = table(["spec (`bench/specs/`)", "plan", "stages", "messages", "network MiB",
                  "/ bound", "cross-host MiB", "/ bound", "busiest NIC / bound",
                  "busiest sender / bound", "α–β estimate (ms)", "/ bound", "binding bound"],
                 rows, ["---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:",
                        "---:", "---:", "---:", "---"])
    return ("for F in bench/specs/*.json: reshard plan --spec F --format json "
            "[--no-relays --no-reduce-scatter]"), body


def t_simulate(ctx):
    specs = sorted(f for f in os.listdir(os.path.join(ROOT, "bench", "specs")) if f.endswith(".json"))
    rows = []
    peers = ["direct_p2p", "layered"]
    for f in specs:
        spec = "bench/specs/" + f
        d = json.loads(run(ctx, [ctx.reshard, "simulate", "--spec", spec, "--topology", H100,
                                 "--format", "json", "--peers", ",".join(peers)]))
        b = d["lower_bound"]
        rows.append([f"`{f[:-5]}`", f"{d['messages']:,}", f"{d['predicted_seconds'] * 1e3:.3f}",
                     f"{d['lower_bound_seconds'] * 1e3:.3f}", f"{d['ratio']:.2f}",
                     f"{d['estimate_seconds'] * 1e3:.3f}", f"{d['estimate_ratio']:.3f}",
                     *[f"{d['peers'][p]['predicted_seconds'] * 1e3:.3f}"
                       + (f" ({d['peers'][p]['chunks'] or '4/hop'})" if "chunks" in d["peers"][p] else "")
                       for p in peers],
                     bound_term(b)])
    body = table(["spec (`bench/specs/`)", "messages", "ours (ms)", "bound (ms)", "ours / bound",
                  "estimate (ms)", "estimate / simulated",
                  *[f"{p} (ms{', chunks' if p != 'direct_p2p' else ''})" for p in peers],
                  "bound term"],
                 rows, ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:",
                        "---"])
    return (f"for F in bench/specs/*.json: reshard simulate --spec F --topology {H100} "
            f"--format json --peers {','.join(peers)}"), body


def t_exec(ctx):
    exe = ctx.bin("bench/bench_exec")
    argv = [exe, "--repeat", "7", "--csv"]
    rows = []
    for line in run(ctx, argv).splitlines():
        cells = line.split("\t")
        if len(cells) != 5:
            continue
        name, threads, nbytes, ours, mem = cells[0], cells[1], int(cells[2]), float(cells[3]), float(cells[4])
        rows.append([name, threads, mib(nbytes), f"{ours * 1e3:.1f}", f"{mem * 1e3:.1f}",
                     f"**{mem / ours:.2f}**"])
    body = table(["layout change (f32, 1 GiB)", "threads", "MiB moved", "ours (ms)", "memcpy (ms)",
                  "memcpy / ours"], rows, ["---", "---:", "---:", "---:", "---:", "---:"])
    return shlex.join([ctx.show(exe)] + argv[1:]), body


def t_engine_cache(ctx):
    exe = ctx.bin("bench/bench_engine_cache")
    argv = mpirun(2) + [exe, "--iters", "200", "--csv"]
    rows = []
    for line in run(ctx, argv).splitlines():
        c = line.split("\t")
        if len(c) != 7 or c[0] == "case":
            continue
        rows.append([c[0], c[1], f"{int(c[2]):,}", mib(int(c[3])), f"{float(c[4]):,.0f}",
                     f"{float(c[5]):,.0f}", f"**{float(c[6]):.2f}**"])
    body = table(["case", "packing", "messages per execution", "network MiB", "without cache (µs)",
                  "with cache (µs)", "without / with"], rows,
                 ["---", "---", "---:", "---:", "---:", "---:", "---:"])
    return ("mpirun -np 2 " + ctx.show(exe) + " --iters 200 --csv"), body


def t_overlap(ctx, link="100mbit"):
    """bench/overlap_bench.py: a staged plan with its stages overlapped,
    one after another, and each alone; on emulated hosts whose NICs are
    shaped to `link` (root: network namespaces), or on this machine's
    shared memory (link None)."""
    if link and os.geteuid() != 0:
        sys.exit("overlap: the emulated hosts need root (network namespaces, tc)")
    flags = (["--link", link] if link else []) + ["--repeat", "5", "--iters", "3"]
    text = run(ctx, [sys.executable, "bench/overlap_bench.py", "--reshard", ctx.reshard, *flags],
               timeout=3600)
    shown = ctx.show(ctx.reshard)
    cmd = shlex.join(["python3", "bench/overlap_bench.py", *flags]
                     + ([] if shown == "build/dev/tools/reshard" else ["--reshard", shown]))
    return cmd, text.strip()


def t_overlap_shm(ctx):
    return t_overlap(ctx, None)


def t_scalapack(ctx):
    exe = ctx.bin("bench/scalapack/bench_scalapack")
    argv = mpirun(4) + [exe, "--n", "4000", "--iters", "10"]
    text = run(ctx, argv)
    return ("mpirun -np 4 " + ctx.show(exe) + " --n 4000 --iters 10"), \
        "```\n" + text.strip() + "\n```"


def t_scalapack_contention(ctx):
    # As root, the job's and the spinners' sessions get a raised autogroup
    # priority, so that other work on a shared machine weighs less.
    nice = ["--autogroup-nice", "-10"] if os.geteuid() == 0 else []
    argv = [sys.executable, "bench/scalapack/contention.py", "--build", ctx.build, "--rounds", "2",
            "--iters", "10", *nice, "--markdown"]
    text = run(ctx, argv, timeout=2400)
    return ("python3 bench/scalapack/contention.py --build " + ctx.build_rel +
            " --rounds 2 --iters 10 " + " ".join(nice + ["--markdown"])), text.strip()


def t_hostile(ctx):
    argv = [sys.executable, "tests/hostile/hostile_test.py", ctx.reshard, "--table"]
    text = run(ctx, argv)
    return f"python3 tests/hostile/hostile_test.py {ctx.show(ctx.reshard)} --table", text.strip()


def t_soak(ctx):
    out = tempfile.mkdtemp(prefix="soak-")
    md = os.path.join(out, "soak.md")
    argv = [sys.executable, "tests/soak/soak.py", "--binary", ctx.bin("tests/soak/soak_rank"),
            "--budget", "90", "--max-cases", "20", "--timeout", "6", "--seed", "200",
            "--every-fault", "--table", md]
    run(ctx, argv, timeout=1200)
    body = open(md).read().strip()  # soak.py's own summary line, then its table
    shutil.rmtree(out, ignore_errors=True)
    return ("python3 tests/soak/soak.py --binary " + ctx.show(ctx.bin("tests/soak/soak_rank")) + " "
            "--budget 90 --max-cases 20 --timeout 6 --seed 200 --every-fault --table F"), \
        body


# name -> (function, what it runs, rough cost on 2 cores)
TABLES = {
    "weight_sync": (t_weight_sync, "bench/weight_sync.py: 5 models on the peers' layouts, both clusters", "15-20 min idle (two cases at once)"),
    "weight_sync_405b": (t_weight_sync_405b, "bench/weight_sync.py --only llama405b", "4-5 min"),
    "plan_scale": (t_plan_scale, "bench_plan_scale: the 405B plan at 1,024 devices", "< 1 min"),
    "plan_fleet": (t_plan_fleet, "bench/plan_scale.py: dense and MoE, 1,024 to 65,536 devices",
                   "4-40 min"),
    "bounds": (t_bounds, "reshard plan on bench/specs, staged and single-hop", "< 1 min"),
    "simulate": (t_simulate, "reshard simulate on bench/specs, H100 topology", "2 min"),
    "exec": (t_exec, "bench_exec: host executor against memcpy", "< 1 min"),
    "engine_cache": (t_engine_cache, "bench_engine_cache over MPI, 2 ranks", "< 1 min"),
    "overlap": (t_overlap, "bench/overlap_bench.py --link 100mbit: stage overlap over MPI on "
                "emulated hosts (root)", "5-7 min"),
    "overlap_shm": (t_overlap_shm, "bench/overlap_bench.py: the same on shared memory", "2-4 min"),
    "scalapack": (t_scalapack, "bench_scalapack over MPI, 4 ranks", "< 1 min"),
    "scalapack_contention": (t_scalapack_contention,
                             "bench/scalapack/contention.py: idle and beside 2 spinning processes, "
                             "two placements",
                             "3-10 min"),
    "hostile": (t_hostile, "tests/hostile/hostile_test.py --table", "< 1 min"),
    "soak": (t_soak, "tests/soak/soak.py, 90 s of jobs", "2 min"),
}


# Tables regenerated only when named (--only) or with --all: too costly for
# a routine run on 2 cores.
ON_REQUEST = {"weight_sync_405b", "scalapack_contention", "plan_fleet", "overlap"}


# --------------------------------------------------------------- the page

MARK = re.compile(r"<!-- (/?)results:([a-z0-9_]+) -->")


def check(text):
    """Problems with the markers: unknown names, unbalanced or nested pairs, duplicates."""
    problems, open_name, seen = [], None, set()
    for m in MARK.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if name not in TABLES:
            problems.append(f"line {line}: unknown table {name!r}")
        if not closing:
            if open_name:
                problems.append(f"line {line}: {name} opens inside {open_name}")
            if name in seen:
                problems.append(f"line {line}: {name} appears twice")
            open_name = name
            seen.add(name)
        else:
            if open_name != name:
                problems.append(f"line {line}: /{name} closes {open_name or 'nothing'}")
            open_name = None
    if open_name:
        problems.append(f"{open_name} never closes")
    return problems, seen


def replace(text, name, body):
    pat = re.compile(rf"(<!-- results:{name} -->\n).*?(<!-- /results:{name} -->)", re.S)
    if not pat.search(text):
        sys.exit(f"{PAGE}: no markers for {name}")
    return pat.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(2), text, count=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], help="regenerate this table only")
    ap.add_argument("--build", default="build/dev", help="build directory whose binaries run")
    ap.add_argument("--check", action="store_true", help="check the markers, run nothing")
    ap.add_argument("--all", action="store_true", help="also the tables regenerated on request")
    ap.add_argument("--list", action="store_true", help="list the tables")
    ap.add_argument("--page", default=PAGE, help=argparse.SUPPRESS)
    args = ap.parse_args()
    text = open(args.page).read()
    problems, seen = check(text)
    if args.list:
        for n, (_, what, cost) in TABLES.items():
            where = "on the page" if n in seen else "not on the page"
            print(f"{n:18} {where:16} {cost:10} {'on request ' if n in ON_REQUEST else ''}{what}")
        return 0
    if args.check:
        for p in problems:
            print(f"{args.page}: {p}", file=sys.stderr)
        print(f"{len(seen)} tables marked, {len(problems)} problems")
        return 1 if problems else 0
    if problems:
        sys.exit("\n".join(problems))
    names = args.only or [n for n in TABLES if n in seen and (args.all or n not in ON_REQUEST)]
    for n in names:
        if n not in TABLES:
            sys.exit(f"unknown table {n}; known: {', '.join(TABLES)}")
    ctx = Ctx(args.build)
    for n in names:
        t0 = time.time()
        print(f"{n}: running ...", file=sys.stderr, flush=True)
        cmd, body = TABLES[n][0](ctx)
        dt = time.time() - t0
        body = stamp(ctx, cmd, dt) + "\n\n" + body
        text = replace(open(args.page).read(), n, body)
        with open(args.page, "w") as f:
            f.write(text)
        print(f"{n}: {dt:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
