"""Run by scripts/test-python.sh in a fresh virtual environment that holds
only the installed reshard wheel (or sdist) and its runtime dependencies,
with no compiler on PATH: the package imports from site-packages, loads its
bundled libreshard.so.1, plans a small reshard and executes it correctly.
Not collected by pytest (no test_ prefix)."""
import os
import shutil
import sys

import numpy as np

import reshard

assert reshard.LIBRARY_PATH.startswith(sys.prefix), reshard.LIBRARY_PATH
for cc in ("cc", "gcc", "g++", "c++", "clang"):
    assert shutil.which(cc) is None, f"{cc} on PATH ({shutil.which(cc)}): the check wants none"

spec = {
    "meshes": {"train": {"axis_names": ["dp", "tp"], "shape": [2, 4]},
               "infer": {"axis_names": ["tp"], "shape": [2], "devices": [8, 9]}},
    "tensors": [{"name": "w", "shape": [6, 10], "dtype": "f32",
                 "src": {"mesh": "train", "spec": ["dp", "tp"]},
                 "dst": {"mesh": "infer", "spec": ["tp", None]}}],
}
p = reshard.plan(spec)
w = np.arange(60, dtype=np.float32).reshape(6, 10)
dst = p.allocate("dst")
reshard.execute(p, p.scatter({"w": w}), dst)
assert np.array_equal(p.gather(dst)["w"], w)
assert p.verify()["mismatches"] == 0
print(f"reshard {reshard.__version__} (C ABI {reshard.ABI_VERSION[0]}.{reshard.ABI_VERSION[1]}) "
      f"from {os.path.relpath(reshard.LIBRARY_PATH, sys.prefix)}: "
      f"{p.stats['network_bytes']} bytes moved, exact")
