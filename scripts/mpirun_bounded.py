#!/usr/bin/env python3
"""mpirun with bounded waits for what reshard's own deadlines cannot cover,
and a clean end whatever happens: a rank that never starts, or that starts
but stalls or exits before MPI_Init completes (the other ranks then wait
inside MPI_Init, before any reshard call, where --timeout cannot apply), a
job that outlives its time, and the launcher itself being told to stop.

  scripts/mpirun_bounded.py [--start-timeout S] [--init-timeout I]
                            [--timeout T] [--grace G] [--mpirun PATH]
                            [MPIRUN OPTIONS ...] -- PROGRAM [ARGS ...]

Each rank's program is started through a one-line shell shim that records
the rank as started (a file in a private directory, the rank from
OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK) and preloads a small probe
(LD_PRELOAD; compiled once with the C compiler and cached) that wraps
MPI_Init and MPI_Init_thread through the MPI profiling interface (PMPI_*)
and records the rank as initialised once they return successfully. If some
rank has not started within S seconds (default 60), or has not completed
MPI_Init within I seconds (default: S; 0: not watched, for programs that do
not call MPI_Init), or the job still runs after T seconds (default: none),
the job is ended and the message names the ranks.

Ending a job (also on SIGTERM, SIGINT or SIGHUP to the launcher: what
`timeout` and CI runners send): SIGTERM to mpirun's process group, which
mpirun forwards to its ranks; after G seconds (default 5) SIGKILL to every
process of the job still alive. The job's processes are found by a token in
their environment, so a rank that left mpirun's process group or was
re-parented is found too; the launcher is their child subreaper (Linux), so
orphans are re-parented to it, not to init, and reaped. mpirun gets SIGTERM
should the launcher itself die (PR_SET_PDEATHSIG). Nothing of the job
outlives the launcher. Exit status: the job's; 124 when the job was ended
here for a deadline; 128 + N after signal N.

--hold-rank R (for fault tests): rank R's shim never starts its program, as if
its host never launched it.
"""
import argparse
import ctypes
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TOKEN_VAR = "RESHARD_LAUNCH_TOKEN"

SHIM = ('r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-x}}}; '
        'if [ "$r" = "$RESHARD_HOLD_RANK" ]; then exec sleep 100000; fi; '
        ': > "$RESHARD_STARTED_DIR/$r"; '
        'if [ -n "$RESHARD_INIT_PROBE" ]; then '
        'export LD_PRELOAD="$RESHARD_INIT_PROBE${LD_PRELOAD:+:$LD_PRELOAD}"; '
        # A preloaded library precedes the AddressSanitizer runtime of a
        # sanitized program, which would refuse to start otherwise.
        'export ASAN_OPTIONS="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"; fi; '
        'exec "$@"')

# The probe: MPI_Init and MPI_Init_thread through PMPI_*, then a file named
# after the rank. It declares what it calls itself (MPI_SUCCESS is 0 in
# every MPI), so it needs no mpi.h and works with any MPI implementation.
PROBE_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int PMPI_Init(int* argc, char*** argv);
int PMPI_Init_thread(int* argc, char*** argv, int required, int* provided);
static void reshard_record(const char* suffix) {
  const char* dir = getenv("RESHARD_INIT_DIR");
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = getenv("PMIX_RANK");
  if (!rank) rank = getenv("PMI_RANK");
  if (!dir || !rank) return;
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s%s", dir, rank, suffix) >= (int)sizeof path) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
}
int MPI_Init(int* argc, char*** argv) {
  reshard_record(".entered");
  int rc = PMPI_Init(argc, argv);
  if (rc == 0) reshard_record("");
  return rc;
}
int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  reshard_record(".entered");
  int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == 0) reshard_record("");
  return rc;
}
"""


def log(message):
    print("mpirun_bounded: " + message, file=sys.stderr, flush=True)


def init_probe(explicit):
    """Path of the compiled probe (cached by the hash of its source), or
    None when no C compiler is available (MPI_Init is then not watched)."""
    if explicit:
        return explicit
    digest = hashlib.sha256(PROBE_C.encode()).hexdigest()[:16]
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "reshard")
    path = os.path.join(cache, "mpi-init-probe-%s.so" % digest)
    if os.path.exists(path):
        return path
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    os.makedirs(cache, exist_ok=True)
    work = tempfile.mkdtemp(prefix="reshard-probe-")
    try:
        src = os.path.join(work, "probe.c")
        with open(src, "w") as f:
            f.write(PROBE_C)
        out = os.path.join(work, "probe.so")
        r = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", out, src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            log("cannot compile the MPI_Init probe (%s); MPI_Init is not watched:\n%s"
                % (cc, r.stderr[-2000:]))
            return None
        os.replace(out, path)  # atomic: concurrent launchers race harmlessly
        return path
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ranks_of(argv):
    """-np/-n/--np N in the mpirun options (None when absent)."""
    for i, a in enumerate(argv):
        if a in ("-np", "-n", "--np", "--n") and i + 1 < len(argv):
            return int(argv[i + 1])
    return None


_libc = None


def _prctl(option, value):
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the process-group and token sweeps still apply


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _mpirun_preexec():
    # In the child before exec: SIGTERM to mpirun when the launcher dies.
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def job_pids(token):
    """Pids of live processes whose environment holds our token (the job:
    mpirun, its daemons and ranks, and whatever they started)."""
    needle = ("%s=%s" % (TOKEN_VAR, token)).encode()
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                env = f.read()
            with open("/proc/%s/stat" % name, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and needle in env.split(b"\0"):
            pids.append(int(name))
    return pids


def reap():
    """Reaps exited children (orphans re-parented to this subreaper included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def signal_job(proc, token, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in job_pids(token):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_job(proc, token, grace):
    """SIGTERM to the job; SIGKILL to what is left after `grace` seconds;
    returns once no process of the job is alive."""
    signal_job(proc, token, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            reap()
            if not job_pids(token):
                return
        time.sleep(0.05)
    for _ in range(50):  # 5 s: processes SIGKILLed go at once
        signal_job(proc, token, signal.SIGKILL)
        try:
            proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass
        reap()
        if proc.poll() is not None and not job_pids(token):
            return
    log("processes of the job survived SIGKILL: %s" % job_pids(token))


class Stop(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum, frame):
    raise Stop(signum)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="%(prog)s [options] [MPIRUN OPTIONS] -- PROGRAM [ARGS]")
    p.add_argument("--start-timeout", type=float, default=60.0)
    p.add_argument("--init-timeout", type=float, default=None)
    p.add_argument("--timeout", type=float, default=0.0)
    p.add_argument("--grace", type=float, default=5.0)
    p.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    p.add_argument("--init-probe", default=None,
                   help="the MPI_Init probe library (default: compiled and cached here)")
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
    init_timeout = own.start_timeout if own.init_timeout is None else own.init_timeout
    probe = init_probe(own.init_probe)
    token = secrets.token_hex(16)
    private = tempfile.mkdtemp(prefix="reshard-launch-")
    started_dir = os.path.join(private, "started")
    init_dir = os.path.join(private, "init")
    os.mkdir(started_dir)
    os.mkdir(init_dir)
    env = dict(os.environ, RESHARD_STARTED_DIR=started_dir, RESHARD_INIT_DIR=init_dir,
               RESHARD_INIT_PROBE=probe or "")
    env[TOKEN_VAR] = token
    env["RESHARD_HOLD_RANK"] = "" if own.hold_rank is None else str(own.hold_rank)
    exported = []
    for var in ("RESHARD_STARTED_DIR", "RESHARD_INIT_DIR", "RESHARD_INIT_PROBE",
                "RESHARD_HOLD_RANK", TOKEN_VAR):
        exported += ["-x", var]
    cmd = [own.mpirun, *exported, *rest, "sh", "-c", SHIM, "sh", *program]
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, _on_signal)
    proc = None
    try:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                                preexec_fn=_mpirun_preexec)
        not_started = set(range(np))
        not_init = set(range(np)) if probe and init_timeout > 0 else set()
        while True:
            try:
                rc = proc.wait(timeout=0.1)
                if rc != 0 and probe:
                    # mpirun may end a job whose rank exited before
                    # MPI_Init without a word (seen under load): name the
                    # ranks that started and never entered MPI_Init.
                    names = os.listdir(init_dir)
                    entered = {int(n.split(".")[0]) for n in names
                               if n.endswith(".entered") or n.isdigit()}
                    started = {int(n) for n in os.listdir(started_dir) if n.isdigit()}
                    skipped = sorted(started - entered)
                    if skipped:
                        log("mpirun exited with status %d; rank(s) %s of %d had started but "
                            "not called MPI_Init (exited or were ended before it)"
                            % (rc, ", ".join(map(str, skipped)), np))
                return rc
            except subprocess.TimeoutExpired:
                pass
            elapsed = time.monotonic() - t0
            if not_started:
                not_started -= {int(n) for n in os.listdir(started_dir) if n.isdigit()}
                if not_started and elapsed > own.start_timeout:
                    end_job(proc, token, own.grace)
                    log("rank(s) %s of %d did not start within %g s; ended the job (the "
                        "other ranks wait in MPI_Init, where no reshard timeout applies)"
                        % (", ".join(map(str, sorted(not_started))), np, own.start_timeout))
                    return 124
            if not_init:
                names = os.listdir(init_dir)
                not_init -= {int(n) for n in names if n.isdigit()}
                if not_init and elapsed > init_timeout:
                    end_job(proc, token, own.grace)
                    # MPI_Init is collective: the ranks that entered it wait
                    # for those that did not; the latter are the cause.
                    entered = {int(n.split(".")[0]) for n in names if n.endswith(".entered")}
                    absent = sorted(not_init - entered - not_started)
                    waiting = sorted(not_init & entered)
                    if absent:
                        log("rank(s) %s of %d did not call MPI_Init within %g s (started, then "
                            "stalled or exited before MPI_Init)%s; ended the job (MPI_Init "
                            "waits for every rank, and no reshard timeout applies there)"
                            % (", ".join(map(str, absent)), np, init_timeout,
                               "; rank(s) %s waited in MPI_Init" % ", ".join(map(str, waiting))
                               if waiting else ""))
                    else:
                        log("rank(s) %s of %d did not complete MPI_Init within %g s; ended the "
                            "job" % (", ".join(map(str, waiting or sorted(not_init))), np,
                                     init_timeout))
                    return 124
            if own.timeout > 0 and elapsed > own.timeout:
                end_job(proc, token, own.grace)
                log("the job ran past %g s; ended it" % own.timeout)
                return 124
    except Stop as stop:
        # Signals arriving while the job ends are ignored: it is ending.
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        if proc is not None:
            log("got signal %d; ending the job" % stop.signum)
            end_job(proc, token, own.grace)
        return 128 + stop.signum
    finally:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        if proc is not None:
            if proc.poll() is None or job_pids(token):
                end_job(proc, token, own.grace)
            reap()
        shutil.rmtree(private, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
