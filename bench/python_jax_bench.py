#!/usr/bin/env python3
"""reshard.jax.reshard against jax.device_put on 8 CPU devices, and against
the C++ path running the same plan, in one run, interleaved (each repetition
times every method once, in an order rotated from one repetition to the next).

Methods, per case:
  jax      jax.device_put(tree, shardings); outputs freed before the next call
  warm     reshard.jax.reshard: cached plan, output memory reused once the
           previous outputs are freed (what a weight-sync loop sees)
  fresh    the same with reuse_buffers=False: new host memory every call
           (page faults included), like a first call with a cached plan
  C exec   of the warm time, the reshard_executor_execute call alone (the
           rest of the warm time is Python: flattening, cache lookup, source
           addresses, output arrays)
  plan     planning time of the case (once; not in the other columns)
  C++      the same spec (reshard.jax.spec_for of the case) run by the CLI,
           `reshard run --spec F --transport local --iters 3 --warmup 1`:
           execute_host on buffers filled and pre-faulted by a warm-up run,
           with every hardware thread, as the Python executor has; the
           median of its 3 timed iterations is this repetition's time
  warm x3  reshard warm timed as the C++ column is: one untimed call, then
           3 calls back to back, their median (the warm column pauses
           before its single call, which the C++ column does not)

Needs jax[cpu] and the reshard package (scripts/test-python.sh sets both up):
    XLA_FLAGS=--xla_force_host_platform_device_count=8 \\
      build/python-venv/bin/python bench/python_jax_bench.py [--repeat 7] [--gib 0.25] [--build build/dev]
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import reshard  # noqa: E402
import reshard.jax as rj  # noqa: E402


def transformer(layers, d, ff, vocab, mesh_src, mesh_dst):
    """A transformer's weights: FSDP (rows over 8 devices) -> TP over 4 other devices."""
    fsdp = NamedSharding(mesh_src, P(mesh_src.axis_names[0]))
    col = NamedSharding(mesh_dst, P(None, "tp"))
    row = NamedSharding(mesh_dst, P("tp", None))
    rep = NamedSharding(mesh_dst, P())
    tree, targets = {}, {}
    for i in range(layers):
        for name, shape, dst in (("q", (d, d), col), ("k", (d, d), col), ("v", (d, d), col),
                                 ("o", (d, d), row), ("w1", (d, ff), col), ("w3", (d, ff), col),
                                 ("w2", (ff, d), row), ("ln1", (d,), rep), ("ln2", (d,), rep)):
            tree[f"layers.{i}.{name}"] = (shape, jnp.bfloat16, fsdp)
            targets[f"layers.{i}.{name}"] = dst
    tree["embed"] = ((vocab, d), jnp.bfloat16, fsdp)
    targets["embed"] = NamedSharding(mesh_dst, P("tp", None))
    return tree, targets


def cases(side):
    d = jax.devices()
    assert len(d) >= 8, f"need 8 CPU devices, got {len(d)}"
    x8 = Mesh(np.array(d[:8]), ("x",))
    ab = Mesh(np.array(d[:8]).reshape(2, 4), ("a", "b"))
    rev = Mesh(np.array(d[:8][::-1]).reshape(4, 2), ("p", "q"))
    lo4 = Mesh(np.array(d[:4]), ("dp",))
    hi4 = Mesh(np.array(d[4:8]), ("tp",))
    big = (side, side)
    f32 = jnp.float32
    one = lambda s, src, dst: ({"w": (s, f32, src)}, {"w": dst})  # noqa: E731
    out = [
        ("rows -> columns, 8 devices", one(big, NamedSharding(x8, P("x")), NamedSharding(x8, P(None, "x"))), True),
        ("2x4 blocks -> columns, 8 devices", one(big, NamedSharding(ab, P("a", "b")), NamedSharding(ab, P(None, ("a", "b")))), True),
        ("columns -> rows, 8 devices", one(big, NamedSharding(x8, P(None, "x")), NamedSharding(x8, P("x"))), True),
        ("cross-mesh dp=4 (0-3) -> tp=4 (4-7)", one(big, NamedSharding(lo4, P("dp")), NamedSharding(hi4, P(None, "tp"))), True),
        ("2x4 -> reversed 4x2, tuple axes, bf16", ({"w": (big, jnp.bfloat16, NamedSharding(ab, P(("b", "a"))))},
                                                   {"w": NamedSharding(rev, P(None, ("q", "p")))}), True),
        ("rows over 8 -> replicated on 4 (gather)", one((side // 2, side // 2), NamedSharding(x8, P("x")), NamedSharding(hi4, P())), True),
        ("transformer 24 layers, 217 tensors, FSDP8 -> TP4", transformer(24, 512, 1408, 8192, x8, hi4), False),
        ("transformer 4 layers, 37 small tensors", transformer(4, 128, 256, 1024, x8, hi4), False),
    ]
    return out


def materialize(tree):
    key = jax.random.PRNGKey(0)
    out = {}
    for i, (name, (shape, dtype, sharding)) in enumerate(tree.items()):
        out[name] = jax.device_put(jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
                                   .astype(dtype), sharding)
    jax.block_until_ready(out)
    return out


_EXEC_TIMES = []


def _timed_execute_table(self, table, _inner=reshard.Executor._execute_table):
    t0 = time.perf_counter()
    _inner(self, table)
    _EXEC_TIMES.append(time.perf_counter() - t0)


reshard.Executor._execute_table = _timed_execute_table


def run_method(f, tree):
    t0 = time.perf_counter()
    y = f(tree)
    jax.block_until_ready(y)
    dt = time.perf_counter() - t0
    return dt, y


def cli_runner(build, tree, targets, tmp):
    """The C++ path: `reshard run --transport local` on the case's spec;
    returns a function timing one repetition (median of 3 iterations)."""
    exe = os.path.join(build, "tools", "reshard")
    if not os.path.exists(exe):
        return None
    path = os.path.join(tmp, "spec.json")
    with open(path, "w") as f:
        json.dump(rj.spec_for(tree, targets), f)

    def run():
        out = subprocess.run([exe, "run", "--spec", path, "--transport", "local", "--iters", "3",
                              "--warmup", "1", "--format", "json"], check=True,
                             capture_output=True, text=True).stdout
        j = json.loads(out)
        assert j["verified"], j
        return j["median_seconds"]
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--gib", type=float, default=0.25, help="size of the large f32 arrays")
    ap.add_argument("--build", default="build/dev", help="where tools/reshard is (the C++ column)")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this")
    args = ap.parse_args()
    side = int((args.gib * 2**30 / 4) ** 0.5) // 8 * 8
    print(f"JAX {jax.__version__}, reshard {reshard.__version__} ({reshard.LIBRARY_PATH}), "
          f"{os.cpu_count()} cores, 8 CPU devices, large arrays f32 [{side}, {side}], "
          f"median of {args.repeat}, interleaved; load average %.2f %.2f %.2f" % os.getloadavg())
    rows = []
    tmp = tempfile.mkdtemp()
    for name, (spec, targets), large in cases(side):
        if args.only not in name:
            continue
        tree = materialize(spec)
        nbytes = sum(x.nbytes for x in tree.values())
        t0 = time.perf_counter()
        warm_r = rj.Resharder(targets)
        warm_r.plan(tree)
        plan_s = time.perf_counter() - t0
        fresh_r = rj.Resharder(targets, reuse_buffers=False)
        fresh_r.plan(tree)
        methods = {"jax": lambda t: jax.device_put(t, targets), "warm": warm_r, "fresh": fresh_r}
        cli = cli_runner(args.build, tree, targets, tmp)
        # correctness once, then warm-up of every method
        want = jax.device_put(tree, targets)
        got = warm_r(tree)
        for k in tree:
            assert np.array_equal(np.asarray(got[k]), np.asarray(want[k])), (name, k)
        del got, want
        times = {m: [] for m in list(methods) + ["warm3"] + (["cpp"] if cli else [])}
        exec_times = []
        for m, f in methods.items():
            run_method(f, tree)
        gc.collect()
        order = list(times)
        gc.disable()  # as timeit does: no collection inside a timed call
        for rep in range(args.repeat):
            # Rotate the order each repetition, and pause before each method:
            # XLA's CPU worker threads keep spinning for a while after JAX's
            # work, which slows whatever runs next on 2 cores.
            for m in order[rep % len(order):] + order[:rep % len(order)]:
                time.sleep(0.05)
                if m == "cpp":
                    times[m].append(cli())
                    continue
                if m == "warm3":  # as the CLI times: a warm-up, then 3 back to back
                    ts = [run_method(warm_r, tree)[0] for _ in range(4)][1:]
                    times[m].append(statistics.median(ts))
                    continue
                _EXEC_TIMES.clear()
                dt, y = run_method(methods[m], tree)
                times[m].append(dt)
                if m == "warm":
                    exec_times.append(sum(_EXEC_TIMES))
                del y
        gc.enable()
        med = {m: statistics.median(v) for m, v in times.items()}
        med["exec"] = statistics.median(exec_times)
        rows.append((name, nbytes, len(tree), med, plan_s, large))
        del tree
        gc.collect()
    print()
    print("| case | tensors | MiB | jax.device_put ms | reshard warm ms | reshard fresh ms | "
          "JAX / warm | JAX / fresh | C exec ms (of warm) | plan ms | C++ run ms | warm / C++ | "
          "warm x3 ms | warm x3 / C++ |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: |")
    worst, cpp_large = [], []
    for name, nbytes, n, med, plan_s, large in rows:
        c = med.get("cpp")
        worst.append(min(med["jax"] / med["warm"], med["jax"] / med["fresh"]))
        if c is not None and large:
            cpp_large.append((med["warm"] / c, med["warm3"] / c))
        c_ms = "" if c is None else f"{c * 1e3:.2f}"
        c_ratio = "" if c is None else f"{med['warm'] / c:.2f}"
        c3_ratio = "" if c is None else f"{med['warm3'] / c:.2f}"
        print(f"| {name} | {n} | {nbytes / 2**20:.0f} | {med['jax']*1e3:.2f} | {med['warm']*1e3:.2f} | "
              f"{med['fresh']*1e3:.2f} | {med['jax']/med['warm']:.2f}x | {med['jax']/med['fresh']:.2f}x | "
              f"{med['exec']*1e3:.2f} | {plan_s*1e3:.1f} | {c_ms} | {c_ratio} | "
              f"{med['warm3']*1e3:.2f} | {c3_ratio} |")
    print("\nload average at the end: %.2f %.2f %.2f" % os.getloadavg())
    print(f"smallest JAX / reshard ratio over both reshard columns: {min(worst):.2f}x")
    if cpp_large:
        w, w3 = zip(*cpp_large)
        print(f"large single arrays, reshard warm / C++: {min(w):.2f} to {max(w):.2f}; "
              f"timed as the CLI is (warm x3 / C++): {min(w3):.2f} to {max(w3):.2f}")
    if not os.path.exists(os.path.join(args.build, "tools", "reshard")):
        print(f"(no {args.build}/tools/reshard: C++ column empty)", file=sys.stderr)


if __name__ == "__main__":
    main()
