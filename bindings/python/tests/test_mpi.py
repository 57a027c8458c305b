"""Two MPI processes (mpirun -np 2): the MPI executor through mpi4py's communicator."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def mpirun(script, np_=2, extra_env=None, timeout=300):
    exe = shutil.which("mpirun")
    assert exe, "mpirun not found (Debian: openmpi-bin; scripts/deps.sh installs it)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.update(extra_env or {})
    cmd = [exe, "--allow-run-as-root", "--oversubscribe", "-np", str(np_),
           sys.executable, str(HERE / script)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_mpi_two_processes():
    import reshard
    ok, why = reshard.transport_available("mpi")
    assert ok, why
    out = mpirun("mpi_worker.py")
    assert "rank 0: OK" in out and "rank 1: OK" in out, out


def test_jax_two_processes():
    pytest.importorskip("jax")
    out = mpirun("mpi_jax_worker.py", extra_env={
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"})
    assert "rank 0: OK" in out and "rank 1: OK" in out, out


def test_docs_two_process_recipe(tmp_path):
    """The JAX two-process recipe of docs/python.md runs as written."""
    pytest.importorskip("jax")
    import re
    root = HERE.parents[2]
    doc = (root / "docs" / "python.md").read_text()
    m = re.search(r"^### Across processes\n.*?^```python\n(.*?)^```", doc, re.S | re.M)
    assert m, "docs/python.md: no python block under '### Across processes'"
    script = tmp_path / "jax_two_processes.py"
    script.write_text(m.group(1))
    out = mpirun(script)
    assert "process 0: 0 shards OK" in out and "process 1: 4 shards OK" in out, out
