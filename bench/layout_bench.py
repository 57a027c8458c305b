#!/usr/bin/env python3
"""The host executor on many layout families, against memcpy of the same bytes
and against jax.device_put, in one process, interleaved (issue 12).

Every repetition times, in turn and per family:
  jax/warm    jax.device_put(x, dst) of a source JAX has moved before (its
              cached host copy is reused)
  jax/fresh   the same from a fresh copy of the source (made untimed)
  memcpy T    memcpy of the destination bytes (source and destination
              pre-faulted), split over T threads (T = 1, 2)
  ours T pre  reshard's executor on T threads into pre-faulted destinations
  ours T new  the same into freshly allocated destinations, one buffer per
              destination shard from the allocator (np.empty: malloc), as
              jax.device_put allocates its outputs; the allocator may hand
              back memory freed before (no page faults), as it does for JAX
  ours 2 slab the same into one fresh slab holding every destination shard
              (np.empty of ~64 MiB: above glibc's mmap threshold, so every
              call maps, faults in and zeroes new pages), for reference
both reshard columns with the warm and with the fresh source. The partial-sum
families compare against a jitted jnp.sum over the summand axis (JAX has no
device_put of unreduced values) and against the memory bound: (bytes read +
bytes written) at memcpy's bandwidth (memcpy reads and writes each byte once).

Every family's result is checked against JAX's once before timing.

    XLA_FLAGS=--xla_force_host_platform_device_count=32 \\
      RESHARD_LIBRARY=build/dev/capi/libreshard.so PYTHONPATH=bindings/python/src \\
      build/python-venv/bin/python bench/layout_bench.py [--mib 64] [--repeat 7] [--only NAME]

--dump-specs DIR writes each family's spec (JSON) to DIR and exits: for
`build/dev/bench/bench_exec --spec DIR/NAME.json`, which times the same plans
against memcpy without Python around them (for perf).

Prints one table of medians (ms) and ratios, the memcpy ratios of the fastest
repetitions too, and the geometric means. The figures are same-run ratios;
absolute times on shared machines mean little.
"""
import argparse
import concurrent.futures
import ctypes
import gc
import math
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=32")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import reshard  # noqa: E402
import reshard.jax as rj  # noqa: E402
from reshard import _core  # noqa: E402

ALIGN = 64


# ------------------------------------------------------------------ families
class Family:
    """One layout change: JAX source arrays (a list of (shape, dtype,
    sharding)), target shardings, and, for partial sums, the summand count
    (the source is then [k, ...] sharded over its first dim: device i holds
    summand i)."""

    def __init__(self, name, tensors, targets, summands=0, jax=True):
        self.name, self.tensors, self.targets, self.summands = name, tensors, targets, summands
        self.jax = jax  # False: JAX cannot hold the layout (uneven splits)
        self.aliased = False  # JAX's output shards share buffers (found when run)


def _rows_for(mib, cols, item):
    return max(8, int(mib * 2**20 / (cols * item)) // 64 * 64)


def families(mib):
    d = jax.devices()
    assert len(d) >= 32, f"need 32 CPU devices, got {len(d)}"
    x8 = Mesh(np.array(d[:8]), ("x",))
    ab = Mesh(np.array(d[:8]).reshape(2, 4), ("a", "b"))
    rc = Mesh(np.array(d[:8]).reshape(4, 2), ("r", "c"))
    rev8 = Mesh(np.array(d[:8][::-1]), ("x",))
    x32 = Mesh(np.array(d[:32]), ("x",))
    two = Mesh(np.array(d[:2]), ("h",))
    four = Mesh(np.array(d[4:8]), ("rep",))
    hi4 = Mesh(np.array(d[4:8]), ("tp",))
    f32, bf16 = jnp.float32, jnp.bfloat16
    S = int(math.sqrt(mib * 2**20 / 4)) // 64 * 64  # square f32 of `mib`
    ns = lambda m, *s: NamedSharding(m, P(*s))  # noqa: E731
    out = [
        Family("rows -> columns (8)", [((S, S), f32, ns(x8, "x"))], [ns(x8, None, "x")]),
        Family("columns -> rows (8)", [((S, S), f32, ns(x8, None, "x"))], [ns(x8, "x")]),
        Family("2x4 blocks -> columns (8)", [((S, S), f32, ns(ab, "a", "b"))],
               [ns(ab, None, ("a", "b"))]),
        Family("device permutation: rows -> reversed rows (8)", [((S, S), f32, ns(x8, "x"))],
               [ns(rev8, "x")]),
    ]
    # Replicated destinations: bytes written = replicas x tensor.
    S4 = int(math.sqrt(mib / 4 * 2**20 / 4)) // 64 * 64
    out.append(Family("column halves (2) -> 4x replicated", [((S4, S4), f32, ns(two, None, "h"))],
                      [ns(four)]))
    S8 = int(math.sqrt(mib / 8 * 2**20 / 4)) // 64 * 64
    out.append(Family("rows (8) -> 8x replicated (gather)", [((S8, S8), f32, ns(x8, "x"))],
                      [ns(x8)]))
    out.append(Family("replicated sources 4x2 -> rows (8)", [((S, S), f32, ns(rc, None, "c"))],
                      [ns(rc, ("r", "c"))]))
    # Short runs: 2560 f32 columns over 32 devices: 320-byte runs.
    R = _rows_for(mib, 2560, 4)
    out.append(Family("rows -> columns (32), 320 B runs", [((R, 2560), f32, ns(x32, "x"))],
                      [ns(x32, None, "x")]))
    # Medium runs: 2880 f32 columns over 8: 1440-byte runs.
    R = _rows_for(mib, 2880, 4)
    out.append(Family("rows -> columns (8), 1440 B runs", [((R, 2880), f32, ns(x8, "x"))],
                      [ns(x8, None, "x")]))
    # Uneven: neither dim divides 8 or 32. JAX's NamedSharding needs even
    # splits, so this family has no JAX column.
    out.append(Family("uneven rows (8) -> columns (32), no JAX",
                      [((S + 5, S + 3), f32, (x8, ("x",)))], [(x32, (None, "x"))], jax=False))
    # Rank 3: attention-like [heads, seq, d] bf16, heads-sharded -> seq-sharded.
    seq = _rows_for(mib, 32 * 128, 2)
    out.append(Family("rank 3 bf16: heads -> sequence (8)",
                      [((32, seq, 128), bf16, ns(x8, "x", None, None))],
                      [ns(x8, None, "x", None)]))
    # Rank 4: [4, 8, a, b] f32, 2x4 on the leading dims -> on the trailing ones.
    a = int(math.sqrt(mib * 2**20 / (32 * 4))) // 8 * 8
    out.append(Family("rank 4: leading 2x4 -> trailing 2x4",
                      [((4, 8, a, a), f32, ns(ab, "a", "b", None, None))],
                      [ns(ab, None, None, "a", "b")]))
    # Many small tensors: a transformer's weights, FSDP over 8 -> TP over 4.
    out.append(transformer(mib, x8, hi4))
    # Partial sums: 8 summands -> rows over 8 (reduce-scatter), f32 and bf16;
    # the summands hold 2x `mib`, the result a quarter of it.
    Sp = int(math.sqrt(mib / 4 * 2**20 / 4)) // 64 * 64
    out.append(Family("partial sum f32, 8 summands -> rows (8)",
                      [((8, Sp, Sp), f32, ns(x8, "x", None, None))], [ns(x8, "x")], summands=8))
    Sb = int(math.sqrt(mib / 4 * 2**20 / 2)) // 64 * 64
    out.append(Family("partial sum bf16, 8 summands -> rows (8)",
                      [((8, Sb, Sb), bf16, ns(x8, "x", None, None))], [ns(x8, "x")], summands=8))
    return out


def transformer(mib, x8, hi4):
    """Layers of q, k, v, o, w1, w3, w2 (bf16, d x d and d x 2.75d) and two
    norms, scaled to about `mib`; FSDP rows over 8 -> column / row parallel
    over 4 other devices, norms replicated."""
    d = 512
    ff = 1408
    per_layer = (4 * d * d + 3 * d * ff + 2 * d) * 2
    layers = max(2, int(mib * 2**20 / per_layer))
    fsdp = NamedSharding(x8, P("x"))
    col, row, rep = (NamedSharding(hi4, P(None, "tp")), NamedSharding(hi4, P("tp", None)),
                     NamedSharding(hi4, P()))
    tensors, targets = [], []
    for _ in range(layers):
        for shape, dst in (((d, d), col), ((d, d), col), ((d, d), col), ((d, d), row),
                           ((d, ff), col), ((d, ff), col), ((ff, d), row), ((d,), rep), ((d,), rep)):
            tensors.append((shape, jnp.bfloat16, fsdp))
            targets.append(dst)
    return Family(f"transformer: {len(tensors)} bf16 tensors FSDP8 -> TP4", tensors, targets)


# ------------------------------------------------------------------ sources
def make_sources(fam):
    key = jax.random.PRNGKey(0)
    out = []
    for i, (shape, dtype, sharding) in enumerate(fam.tensors):
        x = jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32).astype(dtype)
        out.append(jax.device_put(x, sharding))
    jax.block_until_ready(out)
    return out


_copy = jax.jit(lambda xs: [x + jnp.zeros((), x.dtype) for x in xs])


def fresh_copy(xs):
    """New source buffers with the same shardings (and no cached host copy)."""
    ys = _copy(xs)
    jax.block_until_ready(ys)
    assert all(y.sharding == x.sharding for x, y in zip(xs, ys))
    return ys


def jax_fn(fam):
    if fam.summands:
        outs = tuple(fam.targets)
        f = jax.jit(lambda xs: [jnp.sum(x, axis=0, dtype=jnp.float32).astype(x.dtype) for x in xs],
                    out_shardings=list(outs))
        return f
    return lambda xs: jax.device_put(xs, fam.targets)


# ------------------------------------------------------------------ reshard
def spec_of(fam, xs):
    if not fam.jax:  # (mesh, spec) pairs; JAX cannot hold these layouts
        meshes, tensors = {}, []
        for i, ((shape, dtype, (sm, ss)), (dm, ds)) in enumerate(zip(fam.tensors, fam.targets)):
            for m in (sm, dm):
                meshes.setdefault(id(m), (f"m{len(meshes)}", rj.mesh_json(m)))
            tensors.append({"name": f"t{i}", "shape": list(shape),
                            "dtype": _core.dtype_name(dtype),
                            "src": {"mesh": meshes[id(sm)][0], "spec": list(ss)},
                            "dst": {"mesh": meshes[id(dm)][0], "spec": list(ds)}})
        return {"meshes": dict(meshes.values()), "tensors": tensors}
    if not fam.summands:
        return rj.spec_for(xs, fam.targets)
    b = rj._SpecBuilder()
    tensors = []
    for i, (x, dst) in enumerate(zip(xs, fam.targets)):
        shape = list(x.shape[1:])
        src_mesh = x.sharding.mesh
        src = b.layout(NamedSharding(src_mesh, P(*([None] * len(shape)))), tuple(shape))
        src["partial"] = {"axes": [src_mesh.axis_names[0]], "op": "sum"}
        tensors.append({"name": f"t{i}", "shape": shape, "dtype": _core.dtype_name(x.dtype),
                        "src": src, "dst": b.layout(dst, tuple(shape))})
    return {"meshes": b.meshes_json(), "tensors": tensors}


class HostSources:
    """Source shards in numpy arrays, for layouts JAX cannot hold: the
    full arrays, and per (tensor, device) a contiguous copy of its box."""

    def __init__(self, plan, fulls, shards=None):
        self.fulls = fulls
        self.shards = shards or {
            (t.index, e.device): np.ascontiguousarray(fulls[t.index][e.index])
            for t in plan.tensors for e in t.src.entries}

    def fresh(self):
        return HostSources(None, self.fulls, {k: v.copy() for k, v in self.shards.items()})

    def pointers(self):
        return {k: v.__array_interface__["data"][0] for k, v in self.shards.items()}

    def reference(self, t, entry):
        return self.fulls[t][entry.index]


def jax_pointers(xs):
    return {(i, s.device.id): s.data.unsafe_buffer_pointer()
            for i, x in enumerate(xs) for s in x.addressable_shards}


class Ours:
    """A plan of the family, its destination slab layout and executors."""

    def __init__(self, fam, xs):
        self.plan = reshard.plan(spec_of(fam, xs))
        self.execs = {t: reshard.Executor(threads=t) for t in (1, 2)}
        self.src_dev = []  # per source entry: (tensor index, device)
        self.dst = []  # per destination entry: (offset, bytes, shape, dtype, device, tensor)
        off = 0
        for t in self.plan.tensors:
            item = np.dtype(t.numpy_dtype).itemsize
            for e in t.src.entries:
                self.src_dev.append((t.index, e.device))
            for e in t.dst.entries:
                n = int(np.prod(e.shape, dtype=np.int64)) * item
                self.dst.append((off, n, e, t.numpy_dtype, e.device, t.index))
                off += (n + ALIGN - 1) // ALIGN * ALIGN
        self.slab_bytes = off
        self.dst_bytes = sum(n for _, n, *_ in self.dst)
        self.read_bytes = self.dst_bytes
        if fam.summands:
            self.read_bytes = self.dst_bytes * fam.summands
        self.pre = self.alloc()
        self.pre[:] = 1  # pre-faulted

    def alloc(self):
        return np.empty(self.slab_bytes + ALIGN, np.uint8)

    def alloc_shards(self):
        """One new buffer per destination entry, as jax.device_put makes."""
        return [np.empty(n, np.uint8) for _, n, *_ in self.dst]

    def pointers(self, xs, slab):
        ptr = xs.pointers() if isinstance(xs, HostSources) else jax_pointers(xs)
        src = np.array([ptr[k] for k in self.src_dev], np.uint64)
        if isinstance(slab, list):
            return src, np.array([a.ctypes.data for a in slab], np.uint64), 0
        base = slab.__array_interface__["data"][0]
        pad = (-base) % ALIGN
        dst = np.array([base + pad + off for off, *_ in self.dst], np.uint64)
        return src, dst, pad

    def run(self, threads, xs, slab):
        src, dst, _ = self.pointers(xs, slab)
        self.execs[threads]._execute_pointers(self.plan, src, dst)

    def check(self, xs, slab, want):
        """Every destination entry equals JAX's shard on its device (or the
        numpy slice of the full array)."""
        _, _, pad = self.pointers(xs, slab)
        for off, n, e, dt, dev, t in self.dst:
            shape = tuple(e.shape)
            got = slab[pad + off:pad + off + n].view(dt).reshape(shape)
            if want is None:
                ref = xs.reference(t, e)
            else:
                shard = [s for s in want[t].addressable_shards if s.device.id == dev][0]
                ref = np.asarray(shard.data).reshape(shape)
            if not np.array_equal(got.view(np.uint8), ref.view(np.uint8)):
                if not np.allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-2,
                                   atol=1e-2):
                    raise AssertionError(f"tensor {t} on device {dev}: reshard differs from JAX")
                return "close"  # sums: JAX's order of summation differs from ours
        return "equal"


# ------------------------------------------------------------------ memcpy
_memmove = ctypes.memmove  # a CFUNCTYPE: releases the GIL
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)


def memcpy(dst, src, n, threads):
    d = dst.__array_interface__["data"][0]
    s = src.__array_interface__["data"][0]
    if threads == 1:
        _memmove(d, s, n)
        return
    cut = [n * i // threads // 64 * 64 for i in range(threads)] + [n]
    futs = [_pool.submit(_memmove, d + cut[i], s + cut[i], cut[i + 1] - cut[i])
            for i in range(1, threads)]
    _memmove(d, s, cut[1])
    for f in futs:
        f.result()


# ------------------------------------------------------------------ main
def timed(f):
    t0 = time.perf_counter()
    r = f()
    if r is not None:
        jax.block_until_ready(r)
    return time.perf_counter() - t0, r


def bench_family(fam, repeat):
    if fam.jax:
        xs = make_sources(fam)
        f = jax_fn(fam)
        ours = Ours(fam, xs)
        want = f(xs)
        jax.block_until_ready(want)
    else:
        ours = Ours(fam, None)
        rng = np.random.default_rng(0)
        xs = HostSources(ours.plan, [rng.standard_normal(shape, np.float32).astype(dtype)
                                     for shape, dtype, _ in fam.tensors])
        f = want = None
    slab = ours.alloc()
    ours.run(2, xs, slab)
    verdict = ours.check(xs, slab, want)
    if want is not None:
        # On CPU devices JAX may give replicated outputs one buffer for all
        # their shards (no copy at all); say so where it does.
        shards = [s for w in want for s in w.addressable_shards]
        ptrs = {s.data.unsafe_buffer_pointer() for s in shards}
        if len(ptrs) < len(shards):
            verdict += f"; JAX's {len(shards)} output shards share {len(ptrs)} buffer(s)"
            fam.aliased = True
    del want, slab
    # memcpy of the bytes written; for sums, of half the bytes read and
    # written (memcpy reads and writes each byte once), so that its time is
    # the memory-bound time of the sum, measured at the same size.
    ours.copy_bytes = ours.dst_bytes if not fam.summands else (ours.read_bytes + ours.dst_bytes) // 2
    msrc = np.ones(ours.copy_bytes, np.uint8)
    mdst = np.ones(ours.copy_bytes, np.uint8)
    cols = ["jax/warm", "jax/fresh"] + [f"memcpy {t}" for t in (1, 2)] + [
        f"ours {t} {d} {s}" for t in (1, 2) for d in ("pre", "new") for s in ("warm", "fresh")] + [
        "ours 2 slab warm"]
    times = {c: [] for c in cols}
    if f is not None:
        r = f(xs)  # warm-up: JAX caches the source's host copy here
        jax.block_until_ready(r)
        del r
    gc.collect()
    for _ in range(repeat):
        for mode in ("warm", "fresh"):
            if mode == "warm":
                src = xs
            else:
                src = xs.fresh() if f is None else fresh_copy(xs)
            if f is not None:
                dt, r = timed(lambda: f(src))
                times[f"jax/{mode}"].append(dt)
                del r
            for t in (1, 2):
                if mode == "warm":
                    dt, _ = timed(lambda: memcpy(mdst, msrc, ours.copy_bytes, t))
                    times[f"memcpy {t}"].append(dt)
                dt, _ = timed(lambda: ours.run(t, src, ours.pre))
                times[f"ours {t} pre {mode}"].append(dt)

                def fresh_run():
                    ours.run(t, src, ours.alloc_shards())
                    return None

                dt, _ = timed(fresh_run)
                times[f"ours {t} new {mode}"].append(dt)
                if t == 2 and mode == "warm":

                    def slab_run():
                        ours.run(t, src, ours.alloc())
                        return None

                    dt, _ = timed(slab_run)
                    times["ours 2 slab warm"].append(dt)
            del src
            gc.collect()
    med = {c: statistics.median(v) if v else math.nan for c, v in times.items()}
    # The fastest repetition too: on a shared machine medians move with the
    # load, the fastest runs of interleaved timings less so.
    med.update({f"fastest {c}": min(v) if v else math.nan for c, v in times.items()})
    return med, ours, verdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=64, help="bytes each family writes (about)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", action="append", default=[], help="substring of family names")
    ap.add_argument("--dump-specs", metavar="DIR", help="write each family's spec JSON and exit")
    args = ap.parse_args()
    if args.dump_specs:
        import json
        import re
        os.makedirs(args.dump_specs, exist_ok=True)
        for fam in families(args.mib):
            if args.only and not any(o in fam.name for o in args.only):
                continue
            spec = spec_of(fam, make_sources(fam) if fam.jax else None)
            name = re.sub(r"[^a-z0-9]+", "_", fam.name.lower()).strip("_")
            with open(os.path.join(args.dump_specs, name + ".json"), "w") as f:
                json.dump(spec, f)
            print(os.path.join(args.dump_specs, name + ".json"))
        return
    print(f"JAX {jax.__version__}, reshard {reshard.__version__} ({reshard.LIBRARY_PATH}), "
          f"{os.cpu_count()} cores, {len(jax.devices())} CPU devices, ~{args.mib:g} MiB per "
          f"family, median of {args.repeat}, interleaved", flush=True)
    rows = []
    for fam in families(args.mib):
        if args.only and not any(o in fam.name for o in args.only):
            continue
        med, ours, verdict = bench_family(fam, args.repeat)
        rows.append((fam, med, ours, verdict))
        print(f"  {fam.name}: done ({verdict})", file=sys.stderr, flush=True)
        gc.collect()
    print()
    print("Ratios: `of memcpy` = memcpy time / ours (pre-faulted destinations, warm source), "
          "same thread count; partial sums: memory-bound time / ours, the bound being "
          "(bytes read + written) at memcpy bandwidth (memcpy of half those bytes, same run). `JAX /` = jax time / ours (2 threads), "
          "per (JAX source, our destination: pre-faulted, or new buffers per shard as JAX allocates). "
          "`slab` = ours (2 threads) into one fresh ~64 MiB slab (page faults included).")
    print()
    print("| family | MiB written | memcpy 1T ms | ours 1T ms | of memcpy 1T | memcpy 2T ms | "
          "ours 2T ms | of memcpy 2T | JAX warm ms | JAX fresh ms | JAX/ours warm,pre | "
          "warm,new | fresh,pre | fresh,new | slab ms | fastest 1T | fastest 2T |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
          "---: | ---: | ---: | ---: | ---: |")
    g = {1: [], 2: []}
    gf = {1: [], 2: []}
    jr = []
    for fam, med, ours, _ in rows:
        ratio = {}
        fast = {}
        for t in (1, 2):
            bound = med[f"memcpy {t}"]  # for sums: memcpy of (read + written) / 2
            ratio[t] = bound / med[f"ours {t} pre warm"]
            g[t].append(ratio[t])
            fast[t] = med[f"fastest memcpy {t}"] / med[f"fastest ours {t} pre warm"]
            gf[t].append(fast[t])
        js = [med[f"jax/{s}"] / med[f"ours 2 {d} {s}"] for s in ("warm", "fresh")
              for d in ("pre", "new")]
        if fam.jax:
            jr.append(js)
        print(f"| {fam.name} | {ours.dst_bytes / 2**20:.1f} | {med['memcpy 1'] * 1e3:.1f} | "
              f"{med['ours 1 pre warm'] * 1e3:.1f} | {ratio[1]:.2f} | "
              f"{med['memcpy 2'] * 1e3:.1f} | {med['ours 2 pre warm'] * 1e3:.1f} | "
              f"{ratio[2]:.2f} | {med['jax/warm'] * 1e3:.1f} | {med['jax/fresh'] * 1e3:.1f} | "
              + " | ".join(f"{x:.2f}" for x in js) + f" | {med['ours 2 slab warm'] * 1e3:.1f} | {fast[1]:.2f} | {fast[2]:.2f} |")
    geo = lambda v: math.exp(sum(math.log(x) for x in v) / len(v))  # noqa: E731
    print()
    for t in (1, 2):
        print(f"{t} thread(s): of memcpy geomean {geo(g[t]):.2f}, min {min(g[t]):.2f}; "
              f"fastest runs: geomean {geo(gf[t]):.2f}, min {min(gf[t]):.2f}")
    flat = [x for js in jr for x in js]
    print(f"JAX / ours (2 threads), all four combinations: geomean {geo(flat):.2f}, "
          f"min {min(flat):.2f}")
    own = [x for (fam, *_), js in zip([r for r in rows if r[0].jax], jr) if not fam.aliased
           for x in js]
    if own and len(own) < len(flat):
        print(f"  ... over the families where JAX writes every output shard (not aliased): "
              f"geomean {geo(own):.2f}, min {min(own):.2f}")


if __name__ == "__main__":
    main()
