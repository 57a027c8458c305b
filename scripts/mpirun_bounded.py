#!/usr/bin/env python3
"""mpirun with bounded waits for the two things reshard's own deadlines cannot
cover: a rank that never starts (the others wait inside MPI_Init, before any
reshard call, where --timeout cannot apply) and a job that outlives its time.

  scripts/mpirun_bounded.py [--start-timeout S] [--timeout T] [--mpirun PATH]
                            [MPIRUN OPTIONS ...] -- PROGRAM [ARGS ...]

Each rank's program is started through a one-line shell shim that first
records the rank as started (a file in a private directory, the rank from
OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK). If some rank has not started
within S seconds (default 60), or the job still runs after T seconds (default:
none), the whole job is ended (SIGTERM to mpirun's process group, SIGKILL 5 s
later) and the message names the ranks that never started. Exit status: the
job's, 124 when the job was ended here.

--hold-rank R (for fault tests): rank R's shim never starts its program, as if
its host never launched it.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SHIM = ('r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-x}}}; '
        'if [ "$r" = "$RESHARD_HOLD_RANK" ]; then exec sleep 100000; fi; '
        ': > "$RESHARD_STARTED_DIR/$r"; exec "$@"')


def ranks_of(argv):
    """-np/-n/--np N in the mpirun options (None when absent)."""
    for i, a in enumerate(argv):
        if a in ("-np", "-n", "--np", "--n") and i + 1 < len(argv):
            return int(argv[i + 1])
    return None


def end_job(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="%(prog)s [options] [MPIRUN OPTIONS] -- PROGRAM [ARGS]")
    p.add_argument("--start-timeout", type=float, default=60.0)
    p.add_argument("--timeout", type=float, default=0.0)
    p.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    p.add_argument("--hold-rank", type=int, default=None)
    argv = sys.argv[1:]
    if "--" not in argv:
        p.error("missing -- before the program")
    cut = argv.index("--")
    own, rest = p.parse_known_args(argv[:cut])
    program = argv[cut + 1:]
    if not program:
        p.error("no program after --")
    np = ranks_of(rest)
    if np is None:
        p.error("give the number of ranks (-np N) so that missing ranks can be told")
    started = tempfile.mkdtemp(prefix="reshard-started-")
    env = dict(os.environ, RESHARD_STARTED_DIR=started)
    env["RESHARD_HOLD_RANK"] = "" if own.hold_rank is None else str(own.hold_rank)
    cmd = [own.mpirun, "-x", "RESHARD_STARTED_DIR", "-x", "RESHARD_HOLD_RANK", *rest,
           "sh", "-c", SHIM, "sh", *program]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    missing = set(range(np))
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.1)
                return rc
            except subprocess.TimeoutExpired:
                pass
            elapsed = time.monotonic() - t0
            if missing:
                missing -= {int(n) for n in os.listdir(started) if n.isdigit()}
                if missing and elapsed > own.start_timeout:
                    end_job(proc)
                    print("mpirun_bounded: rank(s) %s of %d did not start within %g s; ended the "
                          "job (the other ranks wait in MPI_Init, where no reshard timeout "
                          "applies)" % (", ".join(map(str, sorted(missing))), np,
                                        own.start_timeout), file=sys.stderr, flush=True)
                    return 124
            if own.timeout > 0 and elapsed > own.timeout:
                end_job(proc)
                print("mpirun_bounded: the job ran past %g s; ended it" % own.timeout,
                      file=sys.stderr, flush=True)
                return 124
    finally:
        if proc.poll() is None:
            end_job(proc)
        shutil.rmtree(started, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
