"""Four MPI processes with a gloo process group: reshard.torch against
DTensor.redistribute and across meshes (mpi_torch_worker.py)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import reshard

HERE = Path(__file__).resolve().parent


def test_torch_four_processes():
    ok, why = reshard.transport_available("mpi")
    assert ok, why
    exe = shutil.which("mpirun")
    assert exe, "mpirun not found (Debian: openmpi-bin; scripts/deps.sh installs it)"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [exe, "--allow-run-as-root", "--oversubscribe", "-np", "4", sys.executable,
           str(HERE / "mpi_torch_worker.py")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    for k in range(4):
        assert f"rank {k}: OK" in r.stdout, r.stdout
    print(r.stdout)


def test_example_torch_weight_sync():
    """examples/python/torch_weight_sync.py as a user runs it (it checks itself)."""
    exe = shutil.which("mpirun")
    example = HERE.parents[2] / "examples" / "python" / "torch_weight_sync.py"
    cmd = [exe, "--allow-run-as-root", "--oversubscribe", "-np", "4", sys.executable, str(example)]
    r = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert "step 2: synced" in r.stdout and "equal to the trainer's weights: True" in r.stdout, r.stdout
