#!/usr/bin/env python3
"""Planning at fleet scale (issue 36): for each fleet size and workload,
the time and memory of the global statistics (`reshard plan`) and of one
process's part (`reshard plan --process P --out FILE`, what a worker
plans), with the plan's pieces and the part's plan bytes.

Workloads, N devices in all, 8 per host, one process per device:
  dense  the 405B model (bench/models/llama405b.py): FSDP over the N
         devices -> DP(N/8) x TP8 on the same devices.
  moe    DeepSeek-V3 (bench/models/deepseek.py): trainer PP4 x EDP(N/128)
         x EP16 on devices 0..N/2-1 -> inference DP(N/16) x TP8 (experts
         TP8) on the other N/2.

Each command runs once (its own process, one thread) with the default
options (1 GiB staging budget); its CPU seconds (user + system) and peak
RSS come from os.wait4, next to the planner's own wall-clock figure
(global_seconds; the part's plan_seconds). A command past --timeout
seconds of CPU is stopped and recorded as giving no answer (the part's
command is then not run: it computes the global statistics first); a
refusal (the planner's memory estimate, or its count of the statistics'
work against --max-stats-pieces, before planning) is recorded with its
message. The part is process 0's for the dense case and the first
inference process's (N/2) for the MoE case (its receiver, the busier side).

    python3 bench/plan_scale.py [--reshard build/dev/tools/reshard]
        [--sizes 1024,4096,16384,65536] [--workloads dense,moe]
        [--timeout 300] [--json OUT] [--check]

--check (CI, the smallest size): asserts the counts, not the times:
pieces equal to the figures below (a change of plan shows here), the
part's plan bytes within 128 bytes a piece (and 1 MiB), and peak RSS
within --max-rss (default 1 GiB) for both commands.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))

import deepseek  # noqa: E402
import llama405b  # noqa: E402

# Pieces of the whole plan (default options) at --check's size, per
# workload: what the planner's statistics report; a plan change shows here
# (update with the new figures when a change of plan is intended).
EXPECTED_PIECES = {(1024, "dense"): 384090282, (1024, "moe"): 47442432}


def build(workload, n):
    if workload == "dense":
        return llama405b.build(llama405b.LLAMA_405B, n, 8, 8)
    half = n // 2
    return deepseek.build(deepseek.DEEPSEEK_V3, ("megatron", 4, half // 64, 16),
                          (half // 8, 8, "tp"), 8)


def part_process(workload, n):
    return 0 if workload == "dense" else n // 2


def cpu_seconds_of(pid):
    """User + system seconds of a running process (/proc), 0 where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def run(argv, timeout):
    """(returncode or 'timeout', stdout, stderr, wall seconds, cpu seconds, peak RSS bytes).
    The command is stopped past `timeout` seconds of CPU (a shared machine
    stretches wall time) or 10 times that of wall time."""
    t0 = time.time()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err)
        rc = None
        while rc is None:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if cpu_seconds_of(p.pid) > timeout or time.time() - t0 > 10 * timeout:
                p.kill()
                _, status, ru = os.wait4(p.pid, 0)
                rc = "timeout"
                break
            time.sleep(0.02)
        p.returncode = 0  # reaped above
        out.seek(0)
        err.seek(0)
        return (rc, out.read().decode(), err.read().decode(), time.time() - t0,
                ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024)


def measure(reshard, workload, n, timeout, tmp):
    spec = os.path.join(tmp, f"{workload}_{n}.json")
    build(workload, n).write(spec)
    row = {"devices": n, "workload": workload}
    rc, out, err, wall, cpu, rss = run([reshard, "plan", "--spec", spec, "--format", "json"], timeout)
    row["global"] = {"rc": rc, "wall_seconds": wall, "cpu_seconds": cpu, "peak_rss": rss}
    if rc == 0:
        j = json.loads(out)
        row["global"]["seconds"] = j["global_seconds"]
        row["pieces"] = j["stats"]["pieces"]
        row["messages"] = j["stats"]["messages"]
    else:
        row["global"]["error"] = (err or out).strip().splitlines()[-1:] if rc != "timeout" else []
    p = part_process(workload, n)
    if rc == "timeout":
        # The part's command computes the global statistics first (the
        # estimate of every part): it cannot answer sooner.
        row["part"] = {"rc": "skipped", "process": p, "wall_seconds": 0, "cpu_seconds": 0,
                       "peak_rss": 0}
        os.remove(spec)
        return row
    plan_file = os.path.join(tmp, "part.rsplan")
    rc, out, err, wall, cpu, rss = run([reshard, "plan", "--spec", spec, "--format", "json",
                                        "--process", str(p), "--out", plan_file], timeout)
    row["part"] = {"rc": rc, "process": p, "wall_seconds": wall, "cpu_seconds": cpu,
                   "peak_rss": rss}
    if rc == 0:
        j = json.loads(out)
        row["part"]["seconds"] = j["process"]["plan_seconds"]
        pr = j["process"]
        row["part"]["pieces"] = pr["local_pieces"] + pr["send_pieces"] + pr["recv_pieces"]
        row["part"]["plan_bytes"] = os.path.getsize(plan_file)
    else:
        row["part"]["error"] = (err or out).strip().splitlines()[-1:] if rc != "timeout" else []
    if os.path.exists(plan_file):
        os.remove(plan_file)
    os.remove(spec)
    return row


def cell_seconds(c):
    """CPU seconds of the command (the machine is shared: wall time moves with
    its load), and the planner's own wall-clock figure."""
    if c["rc"] == "timeout":
        return "no answer"
    if c["rc"] == "skipped":
        return "not run"
    if c["rc"] != 0:
        return "refused"
    return f"{c['cpu_seconds']:.2f} ({c['seconds']:.2f})"


def render(rows):
    print("| devices | workload | global statistics, CPU s (planner's wall s) | peak RSS (MiB) | "
          "process part, CPU s (planner's wall s) | peak RSS (MiB) | pieces (whole plan) | "
          "part pieces | part plan bytes (MiB) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    notes = []
    for r in rows:
        g, p = r["global"], r["part"]
        print(f"| {r['devices']:,} | {r['workload']} | {cell_seconds(g)} | "
              f"{g['peak_rss'] / 1048576:,.0f} | {cell_seconds(p)} | {p['peak_rss'] / 1048576:,.0f} | "
              + (f"{r['pieces']:,}" if "pieces" in r else "—") + " | "
              + (f"{p['pieces']:,}" if "pieces" in p else "—") + " | "
              + (f"{p['plan_bytes'] / 1048576:,.1f}" if "plan_bytes" in p else "—") + " |")
        for what, c in (("global statistics", g), ("process part", p)):
            if c["rc"] == "timeout":
                notes.append(f"- {r['devices']:,} {r['workload']}, {what}: no answer within "
                             f"{c['cpu_seconds']:.0f} s of CPU ({c['wall_seconds']:.0f} s of wall "
                             f"time, peak RSS {c['peak_rss'] / 1048576:,.0f} MiB by then)")
            elif c["rc"] == "skipped":
                notes.append(f"- {r['devices']:,} {r['workload']}, {what}: not run (its command "
                             "computes the global statistics first)")
            elif c["rc"] != 0:
                notes.append(f"- {r['devices']:,} {r['workload']}, {what}: refused after "
                             f"{c['wall_seconds']:.1f} s: " + " ".join(c.get("error", [])))
    if notes:
        print()
        print("\n".join(notes))


def check(rows, max_rss):
    bad = []
    for r in rows:
        key = (r["devices"], r["workload"])
        for what in ("global", "part"):
            c = r[what]
            if c["rc"] != 0:
                bad.append(f"{key} {what}: exit {c['rc']} {c.get('error')}")
            elif c["peak_rss"] > max_rss:
                bad.append(f"{key} {what}: peak RSS {c['peak_rss']} above {max_rss}")
        if key in EXPECTED_PIECES and r.get("pieces") != EXPECTED_PIECES[key]:
            bad.append(f"{key}: {r.get('pieces')} pieces, expected {EXPECTED_PIECES[key]}")
        p = r["part"]
        if "plan_bytes" in p and p["plan_bytes"] > 128 * max(p["pieces"], 1) + (1 << 20):
            bad.append(f"{key}: part plan {p['plan_bytes']} bytes for {p['pieces']} pieces")
    for b in bad:
        print("plan_scale check: " + b, file=sys.stderr)
    return not bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reshard", default=os.path.join(ROOT, "build", "dev", "tools", "reshard"))
    ap.add_argument("--sizes", default="1024,4096,16384,65536")
    ap.add_argument("--workloads", default="dense,moe")
    ap.add_argument("--timeout", type=float, default=300,
                    help="CPU seconds a command may take (and 10x that of wall time)")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    ap.add_argument("--check", action="store_true", help="assert counts and memory (CI)")
    ap.add_argument("--max-rss", type=int, default=1 << 30)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="plan-scale-") as tmp:
        for n in [int(s) for s in a.sizes.split(",")]:
            for w in a.workloads.split(","):
                print(f"plan_scale: {w} at {n:,} devices ...", file=sys.stderr, flush=True)
                rows.append(measure(a.reshard, w, n, a.timeout, tmp))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    render(rows)
    if a.check:
        return 0 if check(rows, a.max_rss) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
