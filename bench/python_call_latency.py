#!/usr/bin/env python3
"""Per-call latency of a small execution from Python: the
``reshard_executor_execute`` call alone (the C ABI), for the 37-tensor
transformer pytree of python_jax_bench.py, with and without a 50 ms pause
before each call (a training loop's weight sync between steps: caches cold,
copy threads asleep), on an executor with every hardware thread and on one
with one thread. Then, after a pause, a whole ``reshard.jax`` call taken
apart (plan-cache lookup, source readiness, output slab, source addresses,
the C call, output arrays), with ``jax.device_put`` timed alternately.

    RESHARD_LIBRARY=build/dev/capi/libreshard.so.1 PYTHONPATH=bindings/python/src \\
      build/python-venv/bin/python bench/python_call_latency.py [--repeat 30] [--large]

Run it once per library to compare builds (same machine, back to back).
"""
import argparse
import gc
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import reshard  # noqa: E402
import reshard.jax as rj  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_jax_bench import materialize, transformer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--large", action="store_true", help="the 217-tensor pytree instead")
    args = ap.parse_args()
    d = jax.devices()
    x8, hi4 = Mesh(np.array(d[:8]), ("x",)), Mesh(np.array(d[4:8]), ("tp",))
    dims = (24, 512, 1408, 8192) if args.large else (4, 128, 256, 1024)
    spec, targets = transformer(*dims, x8, hi4)
    tree = materialize(spec)
    print(f"{reshard.LIBRARY_PATH}, {len(tree)} tensors, load average %.2f %.2f %.2f"
          % os.getloadavg())
    preps = {}
    for threads in (0, 1):
        r = rj.Resharder(targets, executor=reshard.Executor(threads=threads))
        del r(tree)  # plan, warm up
        preps[threads] = r.prepared(tree)[:2]
    gc.disable()
    for pause in (0.05, 0.0):
        for threads in (0, 1):
            prep, leaves = preps[threads]
            ts = []
            for _ in range(args.repeat):
                if pause:
                    time.sleep(pause)
                slab = prep._take_slab()
                table = prep._table
                prep._write_sources(leaves, table.src_ptr)
                table.dst_ptr[prep.dst_slots] = prep.dst_offsets + np.uint64(slab.addr)
                t0 = time.perf_counter()
                prep.executor._execute_table(table)
                ts.append(time.perf_counter() - t0)
                slab.busy = False
            print(f"C execute, pause {pause * 1e3:.0f} ms, threads {threads or 'all'}: "
                  f"median {statistics.median(ts) * 1e3:.3f} ms, fastest {min(ts) * 1e3:.3f} ms")
    # One reshard.jax call after a pause, taken apart.
    r = rj.Resharder(targets)
    del r(tree)
    parts = ("lookup", "ready", "slab", "addresses", "C execute", "outputs", "total", "jax")
    t = {k: [] for k in parts}
    for _ in range(args.repeat):
        time.sleep(0.05)
        c0 = time.perf_counter()
        prep, leaves, treedef = r.prepared(tree)
        c1 = time.perf_counter()
        jax.block_until_ready(leaves)
        c2 = time.perf_counter()
        slab = prep._take_slab()
        c3 = time.perf_counter()
        table = prep._table
        prep._write_sources(leaves, table.src_ptr)
        table.dst_ptr[prep.dst_slots] = prep.dst_offsets + np.uint64(slab.addr)
        c4 = time.perf_counter()
        prep.executor._execute_table(table)
        c5 = time.perf_counter()
        out = treedef.unflatten(prep._outputs_fast(slab) if prep._fast else prep._outputs(slab))
        c6 = time.perf_counter()
        slab.busy = False
        for k, a, b in zip(parts, (c0, c1, c2, c3, c4, c5, c0), (c1, c2, c3, c4, c5, c6, c6)):
            t[k].append(b - a)
        del out
        time.sleep(0.05)
        j0 = time.perf_counter()
        jax.block_until_ready(jax.device_put(tree, targets))
        t["jax"].append(time.perf_counter() - j0)
    gc.enable()
    print("reshard.jax call after a 50 ms pause, medians (ms): " +
          ", ".join(f"{k} {statistics.median(v) * 1e3:.3f}" for k, v in t.items()))
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
