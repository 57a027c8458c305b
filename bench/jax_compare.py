#!/usr/bin/env python3
"""reshard's host executor against JAX on the same reshards, in one run.

JAX: jax.device_put of a 1 GiB f32 array from one NamedSharding to another on
8 CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8). reshard:
bench_exec (the in-process host executor, 8 logical devices, same shapes).
Needs `pip install jax` (network), so it is not part of the test command.

    python3 bench/jax_compare.py [--build build/dev] [--repeat 5]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

CASES = [  # (name as printed by bench_exec, src spec, dst spec, mesh shape)
    ("rows -> columns, 8 devices", ("x", None), (None, "x"), None),
    ("2x4 blocks -> columns, 8 devices", ("a", "b"), (None, ("a", "b")), None),
    ("columns -> rows, 8 devices", (None, "x"), ("x", None), None),
]


def jax_times(side, repeat):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devs = jax.devices()
    assert len(devs) >= 8, f"need 8 CPU devices, got {len(devs)}"
    mesh1 = Mesh(np.array(devs[:8]), ("x",))
    mesh2 = Mesh(np.array(devs[:8]).reshape(2, 4), ("a", "b"))
    out = {}
    for name, src, dst, _ in CASES:
        mesh = mesh2 if "a" in str(src) + str(dst) else mesh1
        s_src = NamedSharding(mesh, P(*src))
        s_dst = NamedSharding(mesh, P(*dst))
        x = jax.device_put(jnp.arange(side * side, dtype=jnp.float32).reshape(side, side), s_src)
        x.block_until_ready()
        y = jax.device_put(x, s_dst)  # warm up
        y.block_until_ready()
        assert np.array_equal(np.asarray(y[:2, :2]), np.asarray(x[:2, :2]))
        del y
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            y = jax.device_put(x, s_dst)
            y.block_until_ready()
            ts.append(time.perf_counter() - t0)
            del y
        out[name] = statistics.median(ts)
        del x
    return out, jax.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/dev")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    exe = os.path.join(args.build, "bench", "bench_exec")
    if not os.path.exists(exe):
        sys.exit(f"{exe} not found: run scripts/test.sh or cmake --build --preset dev first")
    res = subprocess.run([exe, "--csv", "--repeat", str(args.repeat)], check=True,
                         capture_output=True, text=True).stdout
    ours = {}
    for line in res.strip().splitlines():
        name, threads, nbytes, te, tm = line.split("\t")
        ours.setdefault(name, {})[int(threads)] = (float(te), float(tm), int(nbytes))
    side = 16384
    jt, version = jax_times(side, args.repeat)
    print(f"JAX {version}, {os.cpu_count()} cores, 1 GiB f32 [{side}, {side}], median of {args.repeat}")
    print(f"{'case':36} {'JAX ms':>9} {'reshard ms':>11} {'memcpy ms':>10} {'JAX/reshard':>12}")
    worst = None
    for name, *_ in CASES:
        threads = max(ours[name])
        te, tm, _ = ours[name][threads]
        r = jt[name] / te
        worst = r if worst is None else min(worst, r)
        print(f"{name:36} {jt[name]*1e3:9.1f} {te*1e3:11.1f} {tm*1e3:10.1f} {r:11.2f}x")
    print(f"reshard is faster than JAX on every case: {worst > 1.0} (smallest speedup {worst:.2f}x)")


if __name__ == "__main__":
    main()
