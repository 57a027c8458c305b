"""Helpers shared by the benchmark scripts that run specs over MPI
(relay_bench.py, sim_validate.py): running a command, how many processes a
spec needs, and a spec with every tensor scaled down."""
import copy
import subprocess
import sys


def run(cmd, env=None):
    """The command's stdout; exits with its output when it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def processes(doc):
    """The number of processes a spec's meshes name (one per device when a
    mesh names none)."""
    procs = set()
    for mesh in doc["meshes"].values():
        n = 1
        for s in mesh["shape"]:
            n *= s
        procs.update(mesh.get("processes", range(n)))
    return max(procs) + 1


def scaled(doc, scale):
    """A copy of the spec with every tensor dimension divided by `scale`
    (at least 1)."""
    out = copy.deepcopy(doc)
    for t in out["tensors"]:
        t["shape"] = [max(1, s // scale) for s in t["shape"]]
    return out
