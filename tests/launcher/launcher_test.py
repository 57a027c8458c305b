#!/usr/bin/env python3
"""Tests of scripts/mpirun_bounded.py (label `mpi`): each case runs the
launcher on launcher_rank (launcher_rank.c) and checks its exit status, its
message, how long it took and that afterwards no process of the job is
alive (each run marks its processes with a unique environment variable,
looked for in /proc/*/environ).

  launcher_test.py --launcher PATH --rank PATH [--mpirun PATH] [CASE ...]
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid

ARGS = None


def marked(mark):
    """Live (not zombie) processes whose environment holds `mark`."""
    needle = ("LAUNCHER_TEST_MARK=%s" % mark).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        state = stat.rsplit(b")", 1)[1].split()[0]
        if needle in env and state != b"Z":
            found.append((int(name), stat.split(b" ", 2)[1].decode(errors="replace")))
    return found


class Run:
    """The launcher on `np` ranks of launcher_rank MODE VICTIM SECONDS DIR."""

    def __init__(self, np, mode, victim=0, seconds=1000, launcher_opts=()):
        self.mark = uuid.uuid4().hex
        self.dir = tempfile.mkdtemp(prefix="launcher-test-")
        self.np = np
        opts = ["--oversubscribe", "-np", str(np)]
        if os.geteuid() == 0:
            opts.insert(0, "--allow-run-as-root")
        cmd = [sys.executable, ARGS.launcher, "--mpirun", ARGS.mpirun, *launcher_opts, *opts,
               "--", ARGS.rank, mode, str(victim), str(seconds), self.dir]
        env = dict(os.environ, LAUNCHER_TEST_MARK=self.mark)
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def wait_initialised(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len([n for n in os.listdir(self.dir) if n.startswith("init.")]) == self.np:
                return
            if self.proc.poll() is not None:
                raise AssertionError("the job ended before every rank initialised: %s"
                                     % self.proc.stderr.read())
            time.sleep(0.1)
        raise AssertionError("not every rank initialised within %d s" % timeout)

    def finish(self, timeout):
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
            self.kill_leftovers()
            raise AssertionError("the launcher did not end within %g s" % timeout)
        self.wall = time.monotonic() - self.t0
        self.stderr = err
        # Right at the launcher's exit, nothing of the job may be alive.
        left = marked(self.mark)
        if left:
            self.kill_leftovers()
            raise AssertionError("processes of the job outlived the launcher: %s\nstderr: %s"
                                 % (left, err[-2000:]))
        return self.proc.returncode

    def kill_leftovers(self):
        for pid, _ in marked(self.mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_ok():
    """Every rank initialises and exits: the job's status, 0."""
    r = Run(3, "ok", launcher_opts=["--init-timeout", "60"])
    rc = r.finish(120)
    assert rc == 0, (rc, r.stderr)


def test_stall_before_init():
    """Regression: a rank that starts but stalls before MPI_Init left the
    others waiting in MPI_Init forever. The launcher ends the job after
    --init-timeout naming the rank."""
    r = Run(3, "stall", victim=1, seconds=1000, launcher_opts=["--init-timeout", "8"])
    rc = r.finish(60)
    assert rc == 124, (rc, r.stderr)
    assert "rank(s) 1 of 3 did not call MPI_Init within 8 s" in r.stderr, r.stderr
    assert "rank(s) 0, 2 waited in MPI_Init" in r.stderr, r.stderr
    assert r.wall < 8 + 5 + 15, r.wall


def test_exit0_before_init():
    """A rank that exits 0 before MPI_Init: the same, naming it."""
    r = Run(3, "exit0", victim=2, launcher_opts=["--init-timeout", "8"])
    rc = r.finish(60)
    # Either the launcher's watch names it, or mpirun notices first (when
    # the others are already past MPI_Init) and ends the job itself, saying
    # so or (under load) not, when the launcher names the ranks that never
    # entered MPI_Init; all end the job with an error that names the rank.
    if rc == 124:
        assert "rank(s) 2 of 3 did not call MPI_Init" in r.stderr, r.stderr
    else:
        assert rc != 0, (rc, r.stderr)
        skipped = re.search(r"rank\(s\) ([0-9, ]+) of 3 had started but not called MPI_Init",
                            r.stderr)
        assert ('did not call "init" before exiting' in r.stderr
                or (skipped and "2" in skipped.group(1).split(", "))), (rc, r.stderr)


def test_never_start():
    """A rank whose program never starts (--hold-rank): named as not started."""
    r = Run(2, "ok", launcher_opts=["--start-timeout", "6", "--hold-rank", "1"])
    rc = r.finish(60)
    assert rc == 124, (rc, r.stderr)
    assert "rank(s) 1 of 2 did not start within 6 s" in r.stderr, r.stderr


def _signalled(sig, mode="sleep", grace="3"):
    r = Run(3, mode, victim=2, launcher_opts=["--grace", grace])
    r.wait_initialised()
    r.proc.send_signal(sig)
    rc = r.finish(60)
    assert rc == 128 + sig, (rc, r.stderr)
    return r


def test_sigterm():
    """Regression: SIGTERM to the launcher (what `timeout` and CI send) left
    mpirun and its ranks running, re-parented to init. Now the job ends and
    the launcher exits 128 + 15 with no process of the job left."""
    _signalled(signal.SIGTERM)


def test_sigint():
    _signalled(signal.SIGINT)


def test_sigterm_rank_ignores_it():
    """A rank that ignores SIGTERM is SIGKILLed after the grace period."""
    r = _signalled(signal.SIGTERM, mode="ignore_term", grace="2")
    assert r.wall < 60, r.wall


def test_launcher_killed():
    """SIGKILL to the launcher (nothing can be run then): mpirun gets SIGTERM
    from the kernel (PR_SET_PDEATHSIG) and ends its ranks."""
    r = Run(3, "sleep")
    r.wait_initialised()
    r.proc.kill()
    r.proc.communicate()
    deadline = time.monotonic() + 30
    while marked(r.mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = marked(r.mark)
    r.kill_leftovers()
    assert not left, "processes outlived a SIGKILLed launcher by 30 s: %s" % left


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--rank", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("cases", nargs="*")
    ARGS = ap.parse_args()
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    failed = 0
    for name, fn in tests:
        if ARGS.cases and name not in ARGS.cases and name[5:] not in ARGS.cases:
            continue
        t0 = time.monotonic()
        try:
            fn()
            print("ok   %s (%.1f s)" % (name, time.monotonic() - t0), flush=True)
        except AssertionError as e:
            failed += 1
            print("FAIL %s (%.1f s): %s" % (name, time.monotonic() - t0, e), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
