#!/usr/bin/env python3
"""Soak and fault campaign over MPI: random multi-process reshards (np 2-8,
random budgets, packings, batches in flight, overlap, parts or whole plans,
tests/soak/soak_rank.cc) with injected faults, until a time budget is spent.

  soak.py --binary build/dev/tests/soak/soak_rank --budget SECONDS
          [--seed S] [--max-cases N] [--timeout T] [--every-fault]
          [--table FILE] [--keep DIR]

One job = one mpirun (through scripts/mpirun_bounded.py) running up to N random
cases; most jobs inject one fault at a random case on a random rank:

  never_start   the rank's program is never started (mpirun_bounded.py
                --hold-rank): the launcher must end the job naming the rank
  kill          the rank SIGKILLs itself after starting its n-th transfer
  stop          the rank SIGSTOPs itself (n-th transfer) for 2*T + 2 s
  plan          the rank executes another case's plan
  corrupt       one bit of the rank's plan file is flipped
  small_buffer  one destination buffer of the rank is one element short

Judged per job: no hang (every job ends within its bound), the cases before
the fault verified on every rank (every destination element equals
execute_host and the oracle), and at the fault every surviving rank either
succeeded with every element verified or failed within T + slack seconds
with an error naming the cause (the victim's rank, the plan file, the
shortened buffer). Any other outcome is a failure; exit status 1 then.
--every-fault runs each fault kind once before the random jobs.
"""
import argparse
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(HERE, "..", "..", "scripts", "mpirun_bounded.py")
FAULTS = ["never_start", "kill", "stop", "plan", "corrupt", "small_buffer"]
SLACK = 10.0  # seconds past T that an answer may take on a loaded 2-core machine


def names_rank(message, rank):
    """The message names `rank` as a rank ("rank 3", "rank(s) 1, 3"), other
    than as the rank that wrote it ("this is rank 3")."""
    message = re.sub(r"this is rank \d+", "", message)
    for m in re.finditer(r"rank(?:\(s\))?s? ((?:\d+(?:, ?| and )?)+)", message):
        if str(rank) in re.findall(r"\d+", m.group(1)):
            return True
    return False


class Job:
    def __init__(self, index, rng, args, fault=None):
        self.index = index
        self.np = rng.randint(2, 8)
        self.seed = args.seed * 1000 + index
        self.cases = rng.randint(1, args.max_cases)
        if fault is None:
            fault = "none" if rng.random() < 0.25 else rng.choice(FAULTS)
        self.fault = fault
        self.fault_case = rng.randint(0, self.cases - 1)
        self.victim = rng.randint(0, self.np - 1)
        self.timeout = args.timeout
        self.stop_seconds = 2 * args.timeout + 2


def run_job(job, args, workdir):
    d = os.path.join(workdir, "job%d" % job.index)
    os.makedirs(d)
    mpirun_opts = ["--oversubscribe", "--enable-recovery", "-np", str(job.np)]
    if os.geteuid() == 0:
        mpirun_opts.insert(0, "--allow-run-as-root")
    program = [args.binary, "--seed", str(job.seed), "--cases", str(job.cases),
               "--timeout", str(job.timeout), "--stop-seconds", str(job.stop_seconds),
               "--dir", d]
    if job.fault not in ("none", "never_start"):
        program += ["--fault", job.fault, "--fault-case", str(job.fault_case),
                    "--victim", str(job.victim)]
    start_timeout = 10.0
    bound = start_timeout + job.cases * 20 + job.stop_seconds + 4 * job.timeout + 60
    # MPI_Init of 8 oversubscribed ranks on a loaded machine takes seconds:
    # its bound is looser than the start's.
    cmd = [sys.executable, LAUNCHER, "--mpirun", args.mpirun, "--start-timeout",
           str(start_timeout), "--init-timeout", str(start_timeout + 30), "--timeout", str(bound)]
    if job.fault == "never_start":
        cmd += ["--hold-rank", str(job.victim)]
    cmd += mpirun_opts + ["--"] + program
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, errors="replace")
    wall = time.monotonic() - t0
    results = {}
    for r in range(job.np):
        path = os.path.join(d, "result.%d.json" % r)
        if os.path.exists(path):
            with open(path) as f:
                results[r] = json.load(f)
    return judge(job, p.returncode, p.stderr, results, wall, start_timeout), d, p


def judge(job, rc, stderr, results, wall, start_timeout):
    """Returns (outcome label, problems, facts) for one job."""
    problems = []
    facts = {"cases": 0, "elements": 0, "answer_seconds": 0.0, "wall": wall}
    V = job.victim
    if "mpirun_bounded: the job ran past" in stderr:
        return "hang", ["the job ran past its bound (%.0f s)" % wall], facts
    for r, res in results.items():
        if res.get("outcome") == "failure":
            problems.append("rank %d failed case %s without a fault: [%s] %s" % (
                r, res.get("failed_case"), res.get("code"), res.get("message")))
        facts["cases"] = max(facts["cases"], res.get("cases", 0))
        facts["elements"] += res.get("verified_elements", 0) + res.get("elements", 0)
    if job.fault == "never_start":
        if rc != 124 or not re.search(r"rank\(s\) %d of %d did not start" % (V, job.np), stderr):
            problems.append("rank %d never started but the launcher did not end the job naming "
                            "it (exit %s)" % (V, rc))
        if wall > start_timeout + SLACK:
            problems.append("ended after %.1f s" % wall)
        facts["answer_seconds"] = wall
        return ("launcher ended the job naming the rank" if not problems else "FAILED"), problems, facts
    survivors = [r for r in range(job.np) if not (job.fault == "kill" and r == V)]
    missing = [r for r in survivors if r not in results]
    if missing:
        problems.append("no answer from rank(s) %s (exit %s): %s" % (
            missing, rc, stderr.strip()[-400:]))
        return "FAILED", problems, facts
    if job.fault == "none":
        for r, res in results.items():
            if res.get("outcome") != "ok":
                problems.append("rank %d: %s" % (r, res.get("outcome")))
        if rc != 0:
            problems.append("exit %s" % rc)
        return ("verified" if not problems else "FAILED"), problems, facts
    if any(res.get("outcome") == "not_injected" for res in results.values()):
        return "no case where the fault applies", problems, facts
    kinds = collections.Counter()
    waiting = []
    for r in survivors:
        res = results[r]
        out, code, msg, secs = (res.get("outcome"), res.get("code"), res.get("message", ""),
                                res.get("seconds", 0.0))
        victim = r == V
        if out == "failure":
            continue  # reported above
        if not victim or job.fault != "stop":
            facts["answer_seconds"] = max(facts["answer_seconds"], secs)
            if secs > job.timeout + SLACK:
                problems.append("rank %d answered after %.1f s (deadline %g s + %g s)" % (
                    r, secs, job.timeout, SLACK))
        if out == "ok":
            # Success is fine where the fault may not touch this rank, and
            # means every destination element of this rank was verified.
            if job.fault == "plan" or (victim and job.fault == "small_buffer"):
                problems.append("rank %d succeeded despite the fault" % r)
            kinds["ok, verified"] += 1
            continue
        if victim:
            if job.fault == "stop":
                kinds["victim: %s" % code] += 1
            elif job.fault == "plan":
                if code != "mismatch":
                    problems.append("victim rank %d: [%s] %s, not a mismatch" % (r, code, msg))
                kinds["victim: mismatch"] += 1
            elif job.fault == "corrupt":
                named = "plan.%d.rsplan" % V in msg
                if code == "corrupt" and named:
                    kinds["victim: corrupt, naming the file"] += 1
                elif code == "mismatch":
                    kinds["victim: mismatch"] += 1
                else:
                    problems.append("victim rank %d: [%s] %s" % (r, code, msg))
            elif job.fault == "small_buffer":
                field = res.get("shortened", "?")
                if code == "invalid_argument" and field in msg:
                    kinds["victim: invalid_argument naming the buffer"] += 1
                else:
                    problems.append("victim rank %d: [%s] %s (shortened %s)" % (r, code, msg, field))
            continue
        if code in ("timeout", "transport", "mismatch") and names_rank(msg, V):
            kinds["%s naming the victim" % code] += 1
        elif code == "mismatch" and job.np == 2 and re.search(r"rank\(s\) %d\b" % r, msg):
            # Two ranks that disagree: neither is the odd one out, and each
            # names the side it sees as different (possibly itself).
            kinds["mismatch naming the other side (2 ranks)"] += 1
        else:
            waiting.append((r, code, msg))
    # A rank waiting on a rank that waits on the victim names the rank it
    # waits for (all it can know): accepted when that chain ends at the victim.
    blamed = {V} | {r for r in survivors if results[r].get("outcome") == "error"
                    and results[r].get("code") in ("timeout", "transport")
                    and names_rank(results[r].get("message", ""), V)}
    while True:
        more = [(r, c, m) for r, c, m in waiting if c == "timeout" and
                any(names_rank(m, b) for b in blamed)]
        if not more:
            break
        for r, c, m in more:
            blamed.add(r)
            kinds["timeout naming a rank that waits on the victim"] += 1
            waiting.remove((r, c, m))
    for r, code, msg in waiting:
        problems.append("rank %d: [%s] %s (names neither rank %d nor a rank waiting on it)" % (
            r, code, msg, V))
    facts["ranks"] = kinds
    label = ", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items()))
    return (label if not problems else "FAILED"), problems, facts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--budget", type=float, default=60, help="seconds of jobs to start")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-cases", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=4.0, help="engine deadline T (s)")
    ap.add_argument("--every-fault", action="store_true")
    ap.add_argument("--table", help="write the Markdown table here")
    ap.add_argument("--keep", help="keep every job's directory here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    workdir = args.keep or tempfile.mkdtemp(prefix="reshard-soak-")
    os.makedirs(workdir, exist_ok=True)
    t0 = time.monotonic()
    per_fault = collections.defaultdict(lambda: {"jobs": 0, "injected": 0,
                                                 "ranks": collections.Counter(),
                                                 "jobs_by": collections.Counter(),
                                                 "failed": 0, "max_answer": 0.0})
    totals = {"jobs": 0, "cases": 0, "elements": 0, "failed": 0}
    nps = collections.Counter()
    queue = list(FAULTS) + ["none"] if args.every_fault else []
    index = 0
    while queue or time.monotonic() - t0 < args.budget:
        job = Job(index, rng, args, queue.pop(0) if queue else None)
        index += 1
        (label, problems, facts), d, p = run_job(job, args, workdir)
        s = per_fault[job.fault]
        s["jobs"] += 1
        if "ranks" in facts:
            s["injected"] += 1
            s["ranks"].update(facts["ranks"])
        elif job.fault == "never_start" and not problems:
            s["injected"] += 1
            s["jobs_by"][label] += 1
        else:
            s["jobs_by"][label] += 1
        s["max_answer"] = max(s["max_answer"], facts["answer_seconds"])
        totals["jobs"] += 1
        totals["cases"] += facts["cases"] + (1 if job.fault not in ("none", "never_start") else 0)
        totals["elements"] += facts["elements"]
        nps[job.np] += 1
        print("job %d: np %d, %d case(s), fault %s (case %d, rank %d): %s [%.1f s]" % (
            job.index, job.np, job.cases, job.fault, job.fault_case, job.victim, label,
            facts["wall"]), flush=True)
        if problems:
            s["failed"] += 1
            totals["failed"] += 1
            for pr in problems:
                print("  FAIL: " + pr, flush=True)
            print("  kept in " + d, flush=True)
            with open(os.path.join(d, "stderr.txt"), "w") as f:
                f.write(p.stderr)
        elif not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    elapsed = time.monotonic() - t0
    lines = [
        "%d jobs (mpirun -np 2-8: %s) in %.0f s, %d reshards executed, %d destination elements "
        "verified, %d failed" % (
            totals["jobs"], ", ".join("np%d x%d" % kv for kv in sorted(nps.items())), elapsed,
            totals["cases"], totals["elements"], totals["failed"]),
        "",
        "| fault | jobs | injected | outcomes | slowest answer | failed jobs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for fault in ["none"] + FAULTS:
        if fault not in per_fault:
            continue
        s = per_fault[fault]
        outcomes = ["%d ranks: %s" % (n, k) for k, n in s["ranks"].most_common()]
        outcomes += ["%d jobs: %s" % (n, k) for k, n in s["jobs_by"].most_common()]
        lines.append("| %s | %d | %d | %s | %.1f s | %d |" % (
            fault, s["jobs"], s["injected"], "; ".join(outcomes), s["max_answer"], s["failed"]))
    text = "\n".join(lines)
    print(text)
    if args.table:
        with open(args.table, "w") as f:
            f.write(text + "\n")
    if not args.keep and totals["failed"] == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
