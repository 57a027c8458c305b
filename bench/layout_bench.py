#!/usr/bin/env python3
"""The host executor on many layout families, against memcpy of the same bytes
and against jax.device_put, in one process, interleaved (issue 12).

Every repetition times, in turn and per family:
  jax/warm    jax.device_put(x, dst) of a source JAX has moved before (its
              cached host copy is reused), as JAX does it: output shards may
              be slices of that host copy, replicas all one buffer (no copy)
  jax/fresh   the same from a fresh copy of the source (made untimed)
  jaxd/warm   JAX asked for one buffer of its own per output shard, the
  jaxd/fresh  contract of reshard's executor (one filled buffer per
              destination device, as on GPUs): `jax.device_put(...,
              may_alias=False)` does not give it (replicas still share one
              buffer in JAX 0.10), so leaves that JAX moves through its host
              copy are put with JAX's own `batched_device_put(...,
              force_copy=True)` (--jax-distinct force_copy, the default; see
              jax_distinct_fn) or, public API only, `jax.device_put` followed
              by a jitted copy (--jax-distinct jit_copy). After every call,
              every output shard is checked to be a buffer of its own (not
              another shard's, not in a source buffer or host copy).
  memcpy T    memcpy of the destination bytes (source and destination
              pre-faulted), split over T threads (T = 1, 2); its source
              is memory of the kind the family's sources are (a JAX
              buffer, from XLA's allocator, 4 KiB pages; NumPy's for
              the families without JAX, transparent huge pages), its
              destination a NumPy array as our destinations are (huge
              pages): with a NumPy source on huge pages a 64 MiB memcpy
              ran 5-10% faster than from 4 KiB pages
  ours T pre  reshard's executor on T threads into pre-faulted destinations.
              With the warm source the buffers never change, and are bound
              once (reshard.Executor.prepare: checked and converted before
              timing, as memcpy's addresses are), so the time is one call
              into the library; with a fresh source its addresses are read
              in the timed call, the way reshard.jax reads them (one
              vectorised gather of `unsafe_buffer_pointer` over the arrays'
              per-device buffers)
  ours T new  the same into freshly allocated destinations, one buffer per
              destination shard from the allocator (np.empty: malloc), as
              jax.device_put allocates its outputs; the allocator may hand
              back memory freed before (no page faults), as it does for JAX;
              allocation and reading the new addresses are timed
  ours 2 slab the same into one fresh slab holding every destination shard
              (np.empty of ~64 MiB: above glibc's mmap threshold, so every
              call maps, faults in and zeroes new pages), for reference
both reshard columns with the warm and with the fresh source.
`memcpy T` and `ours T pre` (warm) each follow an untimed call of the same
operation, so that each pays for what it leaves in the caches, as a loop
of it would: glibc's memcpy of 64 MiB here uses plain stores (its
non-temporal threshold comes from the L3 size the VM reports) and leaves
a cache of dirty destination lines, whose write-backs the call timed
after it paid (ours ~10% slower right after a memcpy than after itself).
--after-memcpy times them the old way (ours right after memcpy). The partial-sum
families compare against a jitted jnp.sum over the summand axis (JAX has no
device_put of unreduced values; its outputs are buffers of their own, so
both JAX columns time it) and against the memory bound: (bytes read + bytes
written) at memcpy's bandwidth (memcpy reads and writes each byte once).

Every family's result is checked against JAX's once before timing (the
prepared executions, the per-call path and the new per-shard buffers each),
and JAX's distinct result against its aliased one.

    XLA_FLAGS=--xla_force_host_platform_device_count=32 \\
      RESHARD_LIBRARY=build/dev/capi/libreshard.so.1 PYTHONPATH=bindings/python/src \\
      build/python-venv/bin/python bench/layout_bench.py [--mib 64] [--repeat 7] [--only NAME]
      [--jax-distinct force_copy|jit_copy]

--dump-specs DIR writes each family's spec (JSON) to DIR and exits: for
`build/dev/bench/bench_exec --spec DIR/NAME.json`, which times the same plans
against memcpy without Python around them (for perf).

Prints one table of medians (ms) and ratios, the memcpy ratios of the fastest
repetitions too, the geometric means, and the load average at the start and
the end. "Faster than JAX" is evaluated against the distinct columns, which
fill the same buffers reshard fills; the aliased columns are JAX as it runs
by default. The figures are same-run ratios; absolute times on shared
machines mean little.
"""
import argparse
import bisect
import concurrent.futures
import ctypes
import gc
import itertools
import math
import operator
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


_ARRAYS = operator.attrgetter("_arrays")  # a jax.Array's per-device buffers
_POINTER = operator.methodcaller("unsafe_buffer_pointer")
_DATA = operator.attrgetter("ctypes.data")


class Ours:
    """A plan of the family, its destination slab layout and executors.

    Per-call address work is what a user pays: buffers that stay the same
    from call to call (the warm source and the pre-faulted destinations)
    are bound once with Executor.prepare; new buffers (a fresh source, new
    destinations) have their addresses read in the timed call, the way
    reshard.jax reads them (one vectorised gather over the arrays' buffers)."""

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
        self.pre_ptrs = self._slab_pointers(self.pre)
        if xs is not None and not isinstance(xs, HostSources):
            # Source entry k reads buffer gather[k] of the flattened
            # per-device buffers of all leaves (each leaf's in the order of
            # its sharding's addressable devices, as `_arrays` holds them).
            pos, base = {}, 0
            for i, x in enumerate(xs):
                for k, d in enumerate(x.sharding._addressable_device_assignment):
                    pos[(i, d.id)] = base + k
                base += len(x.sharding._addressable_device_assignment)
            self.num_bufs = base
            self.gather = np.array([pos[k] for k in self.src_dev], np.intp)

    def alloc(self):
        return np.empty(self.slab_bytes + ALIGN, np.uint8)

    def alloc_shards(self):
        """One new buffer per destination entry, as jax.device_put makes."""
        return [np.empty(n, np.uint8) for _, n, *_ in self.dst]

    def _slab_pointers(self, slab):
        base = slab.__array_interface__["data"][0]
        pad = (-base) % ALIGN
        return np.array([base + pad + off for off, *_ in self.dst], np.uint64), pad

    def src_pointers(self, xs):
        if isinstance(xs, HostSources):
            ptr = xs.pointers()
            return np.array([ptr[k] for k in self.src_dev], np.uint64)
        bufs = np.fromiter(map(_POINTER, itertools.chain.from_iterable(map(_ARRAYS, xs))),
                           np.uint64, count=self.num_bufs)
        return bufs[self.gather]

    def pointers(self, xs, slab):
        src = self.src_pointers(xs)
        if isinstance(slab, list):
            return src, np.fromiter(map(_DATA, slab), np.uint64, count=len(slab)), 0
        if slab is self.pre:
            return (src, *self.pre_ptrs)
        return (src, *self._slab_pointers(slab))

    def run(self, threads, xs, slab):
        """One execution whose addresses are read in the call (new buffers)."""
        src, dst, _ = self.pointers(xs, slab)
        self.execs[threads]._execute_pointers(self.plan, src, dst)

    def prepare(self, threads, xs):
        """The warm source and the pre-faulted destinations, bound once
        (reshard.Executor.prepare: checked, converted, kept alive)."""
        if isinstance(xs, HostSources):
            srcs = [[xs.shards[(t.index, e.device)] for e in t.src.entries]
                    for t in self.plan.tensors]
        else:
            # NumPy views of the JAX shards' memory (partial sums' shards
            # carry a leading summand dim of 1, which the plan's boxes do not
            # have); `xs` keeps that memory alive while the bench runs.
            srcs = []
            for t in self.plan.tensors:
                item = np.dtype(t.numpy_dtype).itemsize
                by_dev = {s.device.id: s.data for s in xs[t.index].addressable_shards}
                row = []
                for e in t.src.entries:
                    n = int(np.prod(e.shape, dtype=np.int64)) * item
                    mem = (ctypes.c_uint8 * n).from_address(by_dev[e.device].unsafe_buffer_pointer())
                    row.append(np.ctypeslib.as_array(mem).view(t.numpy_dtype).reshape(tuple(e.shape)))
                srcs.append(row)
        pad = self.pre_ptrs[1]
        dsts = [[] for _ in self.plan.tensors]
        for off, n, e, dt, dev, t in self.dst:
            dsts[t].append(self.pre[pad + off:pad + off + n].view(dt).reshape(tuple(e.shape)))
        return self.execs[threads].prepare(self.plan, srcs, dsts)

    def views(self, slab):
        """Per destination entry, its array in `slab` (or in the list of
        per-entry buffers)."""
        if isinstance(slab, list):
            return [buf.view(dt).reshape(tuple(e.shape))
                    for buf, (_, _, e, dt, *_) in zip(slab, self.dst)]
        pad = self._slab_pointers(slab)[1]
        return [slab[pad + off:pad + off + n].view(dt).reshape(tuple(e.shape))
                for off, n, e, dt, *_ in self.dst]

    def check(self, xs, slab, want):
        """Every destination entry equals JAX's shard on its device (or the
        numpy slice of the full array)."""
        verdict = "equal"
        for got, (off, n, e, dt, dev, t) in zip(self.views(slab), self.dst):
            shape = tuple(e.shape)
            if want is None:
                ref = xs.reference(t, e)
            else:
                shard = [s for s in want[t].addressable_shards if s.device.id == dev][0]
                ref = np.asarray(shard.data).reshape(shape)
            if not np.array_equal(got.view(np.uint8), ref.view(np.uint8)):
                if not np.allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-2,
                                   atol=1e-2):
                    raise AssertionError(f"tensor {t} on device {dev}: reshard differs from JAX")
                verdict = "close"  # sums: JAX's order of summation differs from ours
        return verdict


# ------------------------------------------------------------------ JAX, one buffer per shard
def host_path_leaves(xs, f):
    """Runs f(xs) once (JAX's warm-up) and returns its result and, per leaf,
    whether JAX moved it through its host copy of the source (the array's
    cached `_npy_value`, made by that call): `device_put` of a sharded array
    to a sharding it cannot reach by reordering devices or by copying whole
    shards gathers the array on the host and hands each target device a
    slice of that copy, without a copy wherever the slice is contiguous and
    aligned (replicas all share it)."""
    assert all(x._npy_value is None for x in xs), "a source already has a host copy"
    r = f(xs)
    jax.block_until_ready(r)
    return r, [x._npy_value is not None for x in xs]


def jax_distinct_fn(fam, host, method):
    """JAX asked for one buffer of its own per output shard, what reshard's
    executor writes (the C ABI's contract). `jax.device_put(..., may_alias=False)`
    does not give that: on the host path JAX 0.10 passes the host copy on
    with copy semantics REUSE_INPUT (`shard_sharded_device_array_slow_path`),
    and `_shard_np_array` ignores copy semantics, so replicas still alias one
    buffer. Leaves JAX moves another way get `jax.device_put(...,
    may_alias=False)`; host-path leaves get, per `method`:

      force_copy  what `_shard_np_array` does with ALWAYS_COPY honoured: JAX's
                  own `batched_device_put(aval, sharding, slices of the host
                  copy, devices, committed=True, force_copy=True)` (private;
                  the call `jax.device_put(x, device, may_alias=False)` makes
                  for single-device arrays)
      jit_copy    public API only: `jax.device_put` then a jitted `.copy()` of
                  the results (two steps; where JAX copied already, twice)
    """
    if fam.summands:
        return jax_fn(fam)  # a jitted computation: its outputs are its own
    from jax._src.lib import xla_client as xc
    targets = fam.targets
    hp = [i for i, h in enumerate(host) if h]
    other = [i for i, h in enumerate(host) if not h]
    slices = {}
    for i in hp:
        shape, s = fam.tensors[i][0], targets[i]
        devs = list(s._addressable_device_assignment)
        idx = s.addressable_devices_indices_map(shape)
        slices[i] = (devs, [idx[d] for d in devs])
    jcopy = jax.jit(lambda ys: [y.copy() for y in ys], out_shardings=[targets[i] for i in hp])

    def f(xs):
        out = [None] * len(xs)
        if other:
            for i, y in zip(other, jax.device_put([xs[i] for i in other],
                                                  [targets[i] for i in other], may_alias=False)):
                out[i] = y
        if method == "jit_copy":
            ys = jax.device_put([xs[i] for i in hp], [targets[i] for i in hp], may_alias=False)
            for i, y in zip(hp, jcopy(ys)):
                out[i] = y
            return out
        for i in hp:
            x = xs[i]
            h = x._value  # JAX's host copy: cached when warm, gathered when fresh
            devs, idx = slices[i]
            out[i] = xc.batched_device_put(x.aval, targets[i], [h[ix] for ix in idx], devs,
                                           True, True)
        return out
    return f


def own_buffers(ys, xs):
    """(shards, shards sharing a buffer with another shard or lying in a
    source's buffers or host copy): 0 in the second means one buffer per
    output shard."""
    spans = []
    for x in xs:
        for sh in x.addressable_shards:
            p = sh.data.unsafe_buffer_pointer()
            spans.append((p, p + max(sh.data.nbytes, 1)))
        h = getattr(x, "_npy_value", None)
        if h is not None:
            p = h.__array_interface__["data"][0]
            spans.append((p, p + max(h.nbytes, 1)))
    spans.sort()
    starts = [lo for lo, _ in spans]
    seen, bad, n = set(), 0, 0
    for y in ys:
        for sh in y.addressable_shards:
            p = sh.data.unsafe_buffer_pointer()
            n += 1
            k = bisect.bisect_right(starts, p) - 1  # allocations do not overlap
            if p in seen or (k >= 0 and p < spans[k][1]):
                bad += 1
            seen.add(p)
    return n, bad


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


def memcpy_source(n, from_jax):
    """n bytes of memory of the kind the family's sources are: a JAX
    buffer (XLA's allocator) when they are JAX arrays, else NumPy's; and
    the object that owns them (keep it while the array is used)."""
    if not from_jax:
        a = np.ones(n, np.uint8)
        return a, a
    x = jnp.ones((n,), jnp.uint8, device=jax.devices()[0])
    x.block_until_ready()
    mem = (ctypes.c_uint8 * n).from_address(x.unsafe_buffer_pointer())
    return np.ctypeslib.as_array(mem), x


def bench_family(fam, repeat, distinct_method, after_memcpy=False):
    host = None
    if fam.jax:
        xs = make_sources(fam)
        f = jax_fn(fam)
        ours = Ours(fam, xs)
        want, host = host_path_leaves(xs, f)  # also JAX's warm-up
        fd = jax_distinct_fn(fam, host, distinct_method)
    else:
        ours = Ours(fam, None)
        rng = np.random.default_rng(0)
        xs = HostSources(ours.plan, [rng.standard_normal(shape, np.float32).astype(dtype)
                                     for shape, dtype, _ in fam.tensors])
        f = fd = want = None
    # The warm source and the pre-faulted destinations, bound once per executor.
    prepared = {t: ours.prepare(t, xs) for t in (1, 2)}
    slab = ours.alloc()
    ours.run(2, xs, slab)
    verdict = ours.check(xs, slab, want)
    for t in (1, 2):
        ours.pre[:] = 0
        prepared[t].execute()
        assert ours.check(xs, ours.pre, want) == verdict
    shards = ours.alloc_shards()
    ours.run(1, xs, shards)
    assert ours.check(xs, shards, want) == verdict
    del shards
    if want is not None:
        # On CPU devices JAX may hand out slices of its host copy of the
        # source (replicas all share one buffer) and copy nothing; say so
        # where it does. The `distinct` columns ask JAX for one buffer per
        # output shard; checked here for values, and after every timed call
        # for buffers.
        n, bad = own_buffers(want, xs)
        if bad:
            verdict += f"; {bad} of JAX's {n} output shards are not buffers of their own"
            fam.aliased = True
        wd = fd(xs)
        jax.block_until_ready(wd)
        n, bad = own_buffers(wd, xs)
        assert not bad, f"{fam.name}: JAX distinct: {bad} of {n} output shards share buffers"
        for w, v in zip(want, wd):
            for a, b in zip(w.addressable_shards, v.addressable_shards):
                assert a.device == b.device and a.index == b.index
                assert np.array_equal(np.asarray(a.data), np.asarray(b.data)), fam.name
        del wd
        if any(host):
            verdict += f"; {sum(host)} of {len(host)} leaves through JAX's host copy"
    del want, slab
    # memcpy of the bytes written; for sums, of half the bytes read and
    # written (memcpy reads and writes each byte once), so that its time is
    # the memory-bound time of the sum, measured at the same size.
    ours.copy_bytes = ours.dst_bytes if not fam.summands else (ours.read_bytes + ours.dst_bytes) // 2
    msrc, msrc_owner = memcpy_source(ours.copy_bytes, fam.jax)
    mdst = np.ones(ours.copy_bytes, np.uint8)
    cols = ["jax/warm", "jax/fresh", "jaxd/warm", "jaxd/fresh"] + [
        f"memcpy {t}" for t in (1, 2)] + [
        f"ours {t} {d} {s}" for t in (1, 2) for d in ("pre", "new") for s in ("warm", "fresh")] + [
        "ours 2 slab warm"]
    times = {c: [] for c in cols}
    if fd is not None:
        r = fd(xs)  # warm-up of the distinct path (the aliased one ran above)
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
                # Each JAX variant gets a source of its own when fresh: a
                # device_put through the host path caches the host copy.
                srcd = xs if mode == "warm" else fresh_copy(xs)
                dt, r = timed(lambda: f(src))
                times[f"jax/{mode}"].append(dt)
                del r
                dt, r = timed(lambda: fd(srcd))
                times[f"jaxd/{mode}"].append(dt)
                n, bad = own_buffers(r, srcd)
                assert not bad, f"{fam.name}: JAX distinct ({mode}): {bad} of {n} shards shared"
                del r, srcd
            for t in (1, 2):
                if mode == "warm":
                    if not after_memcpy:
                        memcpy(mdst, msrc, ours.copy_bytes, t)  # settle (see the docstring)
                    dt, _ = timed(lambda: memcpy(mdst, msrc, ours.copy_bytes, t))
                    times[f"memcpy {t}"].append(dt)
                    if not after_memcpy:
                        prepared[t].execute()
                    dt, _ = timed(prepared[t].execute)
                else:
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
    for p in prepared.values():
        p.release()
    del msrc, msrc_owner
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
    ap.add_argument("--jax-distinct", choices=("force_copy", "jit_copy"), default="force_copy",
                    help="how JAX is asked for one buffer per output shard (see jax_distinct_fn)")
    ap.add_argument("--dump-specs", metavar="DIR", help="write each family's spec JSON and exit")
    ap.add_argument("--after-memcpy", action="store_true",
                    help="time ours right after memcpy and memcpy right after other calls, "
                         "without an untimed call of the same operation first (the old order)")
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
          f"family, median of {args.repeat}, interleaved"
          f"{' (ours timed right after memcpy)' if args.after_memcpy else ''}; "
          f"JAX distinct: {args.jax_distinct}; "
          f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}", flush=True)
    rows = []
    for fam in families(args.mib):
        if args.only and not any(o in fam.name for o in args.only):
            continue
        med, ours, verdict = bench_family(fam, args.repeat, args.jax_distinct, args.after_memcpy)
        rows.append((fam, med, ours, verdict))
        print(f"  {fam.name}: done ({verdict})", file=sys.stderr, flush=True)
        gc.collect()
    print()
    print("Ratios: `of memcpy` = memcpy time / ours (pre-faulted destinations, warm source: "
          "buffers bound once with Executor.prepare, as memcpy's are given), same thread count; "
          "partial sums: memory-bound time / ours, the bound being (bytes read + written) at "
          "memcpy bandwidth (memcpy of half those bytes, same run). "
          "`JAX /` = jax.device_put time / ours (2 threads), per (JAX source warm or fresh, "
          "our destination: pre-faulted, or new buffers per shard as JAX allocates); ours with "
          "a fresh source or new destinations reads their addresses inside the timed call. "
          "`aliased`: jax.device_put as it is, whose output shards may be slices of its host "
          "copy of the source (replicas share one buffer: no copy); `distinct`: JAX asked for "
          "one buffer of its own per output shard (checked after every call), the contract "
          "reshard's executor fulfils: the target `faster than JAX` is evaluated against "
          "`distinct`. `slab` = ours (2 threads) into one fresh ~64 MiB slab (page faults "
          "included).")
    print()
    print("| family | MiB written | memcpy 1T ms | ours 1T ms | of memcpy 1T | memcpy 2T ms | "
          "ours 2T ms | of memcpy 2T | JAX warm ms aliased / distinct | JAX fresh ms aliased / "
          "distinct | JAX/ours warm,pre aliased / distinct | warm,new | fresh,pre | fresh,new | "
          "slab ms | fastest 1T | fastest 2T |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
          "---: | ---: | ---: | ---: | ---: |")
    g = {1: [], 2: []}
    gf = {1: [], 2: []}
    jr, jd = [], []
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
        ds = [med[f"jaxd/{s}"] / med[f"ours 2 {d} {s}"] for s in ("warm", "fresh")
              for d in ("pre", "new")]
        if fam.jax:
            jr.append(js)
            jd.append(ds)
        pair = lambda a, b: f"{a:.1f} / {b:.1f}"  # noqa: E731
        print(f"| {fam.name} | {ours.dst_bytes / 2**20:.1f} | {med['memcpy 1'] * 1e3:.1f} | "
              f"{med['ours 1 pre warm'] * 1e3:.1f} | {ratio[1]:.2f} | "
              f"{med['memcpy 2'] * 1e3:.1f} | {med['ours 2 pre warm'] * 1e3:.1f} | "
              f"{ratio[2]:.2f} | {pair(med['jax/warm'] * 1e3, med['jaxd/warm'] * 1e3)} | "
              f"{pair(med['jax/fresh'] * 1e3, med['jaxd/fresh'] * 1e3)} | "
              + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(js, ds))
              + f" | {med['ours 2 slab warm'] * 1e3:.1f} | {fast[1]:.2f} | {fast[2]:.2f} |")
    geo = lambda v: math.exp(sum(math.log(x) for x in v) / len(v))  # noqa: E731
    print()
    for t in (1, 2):
        print(f"{t} thread(s): of memcpy geomean {geo(g[t]):.2f}, min {min(g[t]):.2f}; "
              f"fastest runs: geomean {geo(gf[t]):.2f}, min {min(gf[t]):.2f}")
    if jr:
        flat = [x for js in jr for x in js]
        flatd = [x for ds in jd for x in ds]
        print(f"JAX distinct / ours (2 threads), all four combinations, every family with JAX: "
              f"geomean {geo(flatd):.2f}, min {min(flatd):.2f} (the target's comparison)")
        print(f"JAX aliased / ours (2 threads), all four combinations: geomean {geo(flat):.2f}, "
              f"min {min(flat):.2f}")
        own = [x for (fam, *_), js in zip([r for r in rows if r[0].jax], jr) if not fam.aliased
               for x in js]
        if own and len(own) < len(flat):
            print(f"  ... over the families where JAX's output shards are buffers of their own "
                  f"(not aliased): geomean {geo(own):.2f}, min {min(own):.2f}")
    print(f"load average at the end: {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
