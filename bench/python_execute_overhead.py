#!/usr/bin/env python3
"""What a call of the Python core API costs beyond the executor, on a plan of
many small tensors: the transformer of layout_bench.py (layers of q, k, v,
o, w1, w3, w2 and two norms, bf16, FSDP rows over devices 0-7 -> column /
row parallel over devices 4-7, norms replicated; 10 layers: 90 tensors, 720
source and 360 destination NumPy buffers, about 61 MiB written).

Times, interleaved in every repetition (median and fastest of --repeat):
  memcpy      one memcpy of the bytes written (pre-faulted buffers)
  execute     reshard.Executor.execute(plan, sources, destinations): every
              buffer checked and converted to an address in the call
  prepared    PreparedExecution.execute() of Executor.prepare(plan, sources,
              destinations), the same buffers bound once: one C call
  bind        the checks and conversion alone (what prepare pays once)
Needs no JAX (NumPy and ml_dtypes for bf16). With a library whose Python
package lacks Executor.prepare, only memcpy and execute are timed.

    RESHARD_LIBRARY=build/dev/capi/libreshard.so.1 PYTHONPATH=bindings/python/src \\
      build/python-venv/bin/python bench/python_execute_overhead.py [--layers 10] [--repeat 30]
"""
import argparse
import ctypes
import gc
import os
import statistics
import time

import numpy as np

import reshard
from reshard import _core


def spec(layers, d=512, ff=1408):
    fsdp = {"mesh": "fsdp", "spec": ["x"]}
    col, row, rep = ({"mesh": "tp", "spec": [None, "tp"]}, {"mesh": "tp", "spec": ["tp", None]},
                     {"mesh": "tp", "spec": []})
    tensors = []
    for layer in range(layers):
        for name, shape, dst in (("q", [d, d], col), ("k", [d, d], col), ("v", [d, d], col),
                                 ("o", [d, d], row), ("w1", [d, ff], col), ("w3", [d, ff], col),
                                 ("w2", [ff, d], row), ("n1", [d], rep), ("n2", [d], rep)):
            tensors.append({"name": f"l{layer}.{name}", "shape": shape, "dtype": "bf16",
                            "src": fsdp, "dst": dst})
    return {"meshes": {"fsdp": {"axis_names": ["x"], "shape": [8], "devices": list(range(8))},
                       "tp": {"axis_names": ["tp"], "shape": [4], "devices": [4, 5, 6, 7]}},
            "tensors": tensors}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    p = reshard.plan(spec(args.layers))
    rng = np.random.default_rng(0)
    glob = {t.name: rng.standard_normal(t.shape, np.float32).astype(t.numpy_dtype)
            for t in p.tensors}
    src, dst = p.scatter(glob), p.allocate("dst", fill=0)
    nbuf = sum(len(r) for r in src) + sum(len(r) for r in dst)
    nbytes = sum(b.nbytes for r in dst for b in r)
    ex = reshard.Executor(threads=args.threads)
    ex.execute(p, src, dst)
    out = p.gather(dst)
    assert all(np.array_equal(out[k], glob[k]) for k in glob)
    msrc, mdst = np.ones(nbytes, np.uint8), np.ones(nbytes, np.uint8)
    has_prepare = hasattr(ex, "prepare")
    fns = {"memcpy": lambda: ctypes.memmove(mdst.ctypes.data, msrc.ctypes.data, nbytes),
           "execute": lambda: ex.execute(p, src, dst)}
    if has_prepare:
        run = ex.prepare(p, src, dst)

        def bind():
            pin = _core._Pinned()
            _core._bind(p, src, dst, pin)
            pin.release()
        fns.update(prepared=run.execute, bind=bind)
    times = {k: [] for k in fns}
    print(f"reshard {reshard.__version__} ({reshard.LIBRARY_PATH}, package {_core.__file__}); "
          f"{len(p.tensors)} tensors, {nbuf} buffers, {nbytes / 2**20:.1f} MiB written, "
          f"{args.threads} thread(s), {args.repeat} repetitions; load average "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
    gc.disable()
    for r in range(args.repeat):
        order = list(fns)
        order = order[r % len(order):] + order[:r % len(order)]
        for k in order:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    gc.enable()
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {k:9s} median {med[k] * 1e3:7.3f} ms   fastest {min(v) * 1e3:7.3f} ms")
    print(f"  of memcpy (medians): execute {med['memcpy'] / med['execute']:.2f}"
          + (f", prepared {med['memcpy'] / med['prepared']:.2f}; conversion "
             f"{med['bind'] / nbuf * 1e6:.2f} us per buffer" if has_prepare else ""))
    print(f"load average at the end: {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
