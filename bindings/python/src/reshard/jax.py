"""JAX adapter: reshard pytrees of ``jax.Array`` to new ``Sharding``\\ s.

``reshard(tree, shardings)`` returns what ``jax.device_put(tree, shardings)``
returns, computed by a reshard plan executed on the arrays' host buffers
(CPU devices) in one process, or across processes over MPI, or on their
device buffers (GPUs of one process) by ``CudaLocalExecutor``. Plans are made
once per (shapes, dtypes, source and target shardings) and cached, so a
training loop that syncs weights every step plans only on the first
(``cache_resharding_plans=False`` and ``clear_plan_cache()`` turn that off).

It takes what ``jax.device_put`` takes: PRNG key arrays move as their key
data and come back as key arrays; NumPy arrays and scalars (host values,
nothing to reshard) are placed by ``jax.device_put``; a bare
``PartitionSpec`` uses the mesh of ``jax.set_mesh``; ``donate`` deletes the
sources. It runs eagerly: inside ``jax.jit`` it is a ``TypeError``. Errors
name the leaf by its key path (``tree['opt']['step']``).

Layouts map one to one (docs/spec.md, "From JAX"): a ``Mesh`` becomes a spec
mesh (axis names, shape, device ids in the mesh's order, process indices), a
``PartitionSpec`` entry becomes a spec entry (``None``, an axis, or a tuple of
axes major first; a spec shorter than the rank leaves the rest unsplit).
Shardings that are not ``NamedSharding`` (a single device, ``GSPMDSharding``,
...) become explicit boxes from ``devices_indices_map``.
"""
from __future__ import annotations

import collections
import functools
import itertools
import operator
import re
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import jax
from jax.sharding import NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from . import _core
from ._core import Executor, Plan
from ._ffi import InvalidArgumentError, InternalError, ReshardError

__all__ = ["spec_for", "plan", "reshard", "Resharder", "clear_plan_cache", "layout_json",
           "mesh_json"]

_ALIGN = 64  # XLA's CPU client aliases host memory aligned to this instead of copying

# One global array from its per-device NumPy pieces in one C++ call (what
# jax.device_put does for a NumPy array with a sharding). Private to JAX:
# when a JAX version lacks it, outputs go through the public
# jax.device_put + jax.make_array_from_single_device_arrays (slower for
# pytrees of many small arrays, same values).
_ArrayImpl: Any = None
_ShapedArray: Any = None
_FAST_PUT: Any = None
_BLOCK: Any = None
try:
    from jax._src import array as _jax_array
    from jax._src import core as _jax_core
    from jax._src.lib import xla_client as _xc
    _ArrayImpl, _ShapedArray = _jax_array.ArrayImpl, _jax_core.ShapedArray
    _FAST_PUT, _BLOCK = _xc.batched_device_put, _xc.batched_block_until_ready
except (ImportError, AttributeError):  # pragma: no cover - depends on the JAX version
    _ArrayImpl = _ShapedArray = _FAST_PUT = _BLOCK = None

# Tracers (a leaf inside jax.jit, vmap, grad) and whether JAX is tracing at
# all; private to JAX, looked up where they have been since 0.4.
_Tracer: Any = None
_TRACE_STATE_CLEAN: Optional[Callable[[], bool]] = None
try:
    from jax._src import core as _jax_src_core
    _Tracer = _jax_src_core.Tracer
    _TRACE_STATE_CLEAN = _jax_src_core.trace_state_clean
except (ImportError, AttributeError):  # pragma: no cover - depends on the JAX version
    pass

# The sharding of a key array's key data (one more trailing dimension per
# key) for a sharding of the key array: JAX's own rule where it has one.
_PHYSICAL_SHARDING: Any = None
try:
    from jax._src import sharding_impls as _sharding_impls
    _PHYSICAL_SHARDING = _sharding_impls.physical_sharding
except (ImportError, AttributeError):  # pragma: no cover - depends on the JAX version
    pass


def mesh_json(mesh: Any) -> Dict[str, Any]:
    """The spec mesh of a ``jax.sharding.Mesh``."""
    devs = list(mesh.devices.flat)
    out = {"axis_names": [str(a) for a in mesh.axis_names],
           "shape": [int(n) for n in mesh.devices.shape],
           "devices": [int(d.id) for d in devs],
           "processes": [int(d.process_index) for d in devs]}
    if any(d.platform != "cpu" for d in devs):
        # The GPU of each device (its CUDA ordinal in its process), where the
        # in-process CUDA executor puts its shards.
        out["ordinals"] = [_ordinal(d) for d in devs]
    return out


def _ordinal(d: Any) -> int:
    """A device's local index on its host (the CUDA ordinal of a GPU)."""
    h = getattr(d, "local_hardware_id", None)
    return int(h) if h is not None else int(d.id)


def _entry(e: Any) -> Any:
    if e is None:
        return None
    if isinstance(e, str):
        return e
    return [str(a) for a in e]


def layout_json(sharding: Sharding, shape: Sequence[int], mesh_name: Optional[str] = None
                ) -> Dict[str, Any]:
    """The spec layout of ``sharding`` for an array of ``shape``: a named
    layout on ``mesh_name`` for a ``NamedSharding``, explicit boxes otherwise."""
    if isinstance(sharding, NamedSharding) and mesh_name is not None:
        spec = sharding.spec
        out: Dict[str, Any] = {"mesh": mesh_name, "spec": [_entry(e) for e in spec]}
        unreduced = getattr(spec, "unreduced", None)
        if unreduced:
            out["partial"] = {"axes": sorted(str(a) for a in unreduced), "op": "sum"}
        return out
    boxes = []
    for dev, idx in sorted(sharding.devices_indices_map(tuple(shape)).items(), key=lambda kv: kv[0].id):
        lo, hi = [], []
        for n, s in zip(shape, idx):
            a, b, step = s.indices(n)
            if step != 1:
                raise InvalidArgumentError(f"sharding: strided index {s} is not a box")
            lo.append(a)
            hi.append(b)
        boxes.append({"device": int(dev.id), "lo": lo, "hi": hi})
    return {"boxes": boxes}


def _as_sharding(s: Any, where: str) -> Optional[Sharding]:
    if s is None or isinstance(s, Sharding):
        return s
    if isinstance(s, jax.Device):
        return SingleDeviceSharding(s)
    raise TypeError(f"{where}: expected a jax.sharding.Sharding, a jax.Device, a PartitionSpec "
                    f"(with jax.set_mesh) or None, got {type(s).__name__}")


def _is_sharding_leaf(s: Any) -> bool:
    return s is None or isinstance(s, (Sharding, jax.Device, PartitionSpec))


def _ambient_mesh() -> Any:
    """The concrete mesh of ``jax.set_mesh`` / ``jax.sharding.use_mesh``
    (what ``jax.device_put`` resolves a bare ``PartitionSpec`` against), or
    None."""
    get = getattr(jax.sharding, "get_mesh", None)
    mesh = get() if get is not None else None
    if mesh is None or getattr(mesh, "empty", False):
        return None
    return mesh


def _first_leaf_name(tree: Any) -> str:
    with_path = jax.tree_util.tree_flatten_with_path(tree)[0]
    return jax.tree_util.keystr(with_path[0][0]) if with_path else ""


def _resolve_specs(shardings: Any, tree: Any = None) -> Any:
    """``shardings`` with every bare ``PartitionSpec`` made a ``NamedSharding``
    on the ambient mesh, as ``jax.device_put`` does. Errors name the leaf of
    ``tree`` (or the path in ``shardings`` when there is no tree)."""
    leaves = jax.tree_util.tree_leaves(shardings, is_leaf=_is_sharding_leaf)
    if not any(isinstance(s, PartitionSpec) for s in leaves):
        return shardings
    mesh = _ambient_mesh()

    def one(path: Any, s: Any) -> Any:
        if not isinstance(s, PartitionSpec):
            return s
        if mesh is None:
            where = jax.tree_util.keystr(path)
            where = f"tree{where or _first_leaf_name(tree)}" if tree is not None else \
                f"shardings{where}"
            how = ("inside `with jax.set_mesh(mesh):`" if hasattr(jax, "set_mesh") else
                   "inside `with jax.sharding.use_mesh(mesh):`")
            raise InvalidArgumentError(
                f"{where}: the target is a bare PartitionSpec {s!r} but no mesh is set; call "
                f"reshard {how}, or pass NamedSharding(mesh, spec)")
        return NamedSharding(mesh, s)
    return jax.tree_util.tree_map_with_path(one, shardings, is_leaf=_is_sharding_leaf)


def _per_leaf(what: str, prefix: Any, tree: Any, is_leaf: Callable[[Any], bool]
              ) -> List[Tuple[str, Any]]:
    """``prefix`` (one value, or a pytree prefix of ``tree``, as
    ``jax.device_put`` takes its shardings and ``donate``) broadcast to one
    ``(path in prefix, value)`` per leaf of ``tree``."""
    n = len(jax.tree_util.tree_leaves(tree))
    if is_leaf(prefix):
        return [("", prefix)] * n
    p_leaves, p_def = jax.tree_util.tree_flatten_with_path(prefix, is_leaf=is_leaf)
    try:
        subtrees = p_def.flatten_up_to(tree)
    except ValueError as e:
        raise InvalidArgumentError(f"{what}: not a pytree prefix of the tree ({e})") from None
    out: List[Tuple[str, Any]] = []
    for (path, v), sub in zip(p_leaves, subtrees):
        out += [(jax.tree_util.keystr(path), v)] * len(jax.tree_util.tree_leaves(sub))
    if len(out) != n:
        raise InvalidArgumentError(f"{what}: {len(out)} values for {n} leaves")
    return out


def _flatten(tree: Any, shardings: Any) -> Tuple[List[Any], Any, List[Optional[Sharding]], List[str]]:
    """Leaves, treedef, one target sharding per leaf (``shardings`` may be a
    single sharding or a pytree prefix of ``tree``, as for jax.device_put;
    a bare ``PartitionSpec`` is resolved against the ambient mesh) and leaf
    names (their key paths)."""
    with_path, treedef = jax.tree_util.tree_flatten_with_path(tree)
    leaves = [x for _, x in with_path]
    names = [jax.tree_util.keystr(p) for p, _ in with_path]  # "" for a bare array
    shardings = _resolve_specs(shardings, tree)
    per_leaf = [_as_sharding(s, f"shardings{path}")
                for path, s in _per_leaf("shardings", shardings, tree, _is_sharding_leaf)]
    return leaves, treedef, per_leaf, names


def _is_key(dtype: Any) -> bool:
    return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))


def _leaf_info(x: Any, name: str) -> Tuple[Tuple[int, ...], Any, Sharding]:
    if _Tracer is not None and isinstance(x, _Tracer):
        raise TypeError(_in_jit_message(f"tree{name}: a {type(x).__name__}"))
    sharding = getattr(x, "sharding", None)
    if sharding is None or not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise InvalidArgumentError(f"tree{name}: {type(x).__name__} is not a jax.Array (or a "
                                   "jax.ShapeDtypeStruct with a sharding)")
    if _is_key(x.dtype):
        raise InvalidArgumentError(
            f"tree{name}: a PRNG key array ({x.dtype}); plan its key data "
            "(jax.random.key_data), which is what reshard.jax.reshard moves")
    return tuple(int(n) for n in x.shape), x.dtype, sharding


def _in_jit_message(what: str) -> str:
    return (f"{what} (JAX is tracing: inside jax.jit, vmap, grad, ...): reshard.jax.reshard "
            "runs eagerly on concrete arrays; call it outside jit, or use jax.device_put "
            "(or jax.lax.with_sharding_constraint) inside jit")


def _renamed(e: ReshardError, names: List[str]) -> ReshardError:
    """``e`` with the C library's ``tensors[i]`` / ``buffers[i]`` (tensor i
    of the plan) replaced by the leaf's key path ``tree['w']``."""
    def sub(m: "re.Match[str]") -> str:
        i = int(m.group(2))
        return f"tree{names[i]}" if i < len(names) else m.group(0)
    out = type(e)(re.sub(r"\b(tensors|buffers)\[(\d+)\]", sub, e.message), e.code)
    return out


class _SpecBuilder:
    def __init__(self) -> None:
        self.meshes: Dict[Any, str] = {}
        self.mesh_json: Dict[str, Any] = {}
        self.box_devices: Dict[int, int] = {}
        self.box_ordinals: Dict[int, int] = {}

    def layout(self, sharding: Sharding, shape: Tuple[int, ...]) -> Dict[str, Any]:
        if isinstance(sharding, NamedSharding):
            m = sharding.mesh
            key = (tuple(m.axis_names), m.devices.shape, tuple(int(d.id) for d in m.devices.flat))
            if key not in self.meshes:
                name = f"m{len(self.meshes)}"
                self.meshes[key] = name
                self.mesh_json[name] = mesh_json(m)
            return layout_json(sharding, shape, self.meshes[key])
        for d in sharding.device_set:
            self.box_devices[int(d.id)] = int(d.process_index)
            if d.platform != "cpu":
                self.box_ordinals[int(d.id)] = _ordinal(d)
        return layout_json(sharding, shape)

    def meshes_json(self) -> Dict[str, Any]:
        out = dict(self.mesh_json)
        if self.box_devices:  # places the devices of box layouts on their processes
            ids = sorted(self.box_devices)
            out["_devices"] = {"axis_names": ["d"], "shape": [len(ids)], "devices": ids,
                               "processes": [self.box_devices[i] for i in ids]}
            if self.box_ordinals:
                out["_devices"]["ordinals"] = [self.box_ordinals.get(i, 0) for i in ids]
        return out


def spec_for(tree: Any, shardings: Any, *, options: Optional[Dict[str, Any]] = None
             ) -> Dict[str, Any]:
    """The reshard spec (a dict, docs/spec.md) that moves every leaf of ``tree``
    (``jax.Array``\\ s, or ``jax.ShapeDtypeStruct``\\ s with a sharding) from its
    sharding to the matching one of ``shardings`` (one sharding, or a pytree
    prefix of ``tree``; ``None`` keeps a leaf's sharding; a bare
    ``PartitionSpec`` uses the mesh of ``jax.set_mesh``). Tensors are named by
    their key paths (``"['layers'][0]['w']"``; ``"x"`` for a bare array)."""
    leaves, _, targets, names = _flatten(tree, shardings)
    return _spec(leaves, targets, names, options)


def _spec(leaves: List[Any], targets: List[Optional[Sharding]], names: List[str],
          options: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    b = _SpecBuilder()
    tensors = []
    for x, dst, name in zip(leaves, targets, names):
        shape, dtype, src = _leaf_info(x, name)
        try:
            dname = _core.dtype_name(dtype)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"tree{name}.{e.message}; jax.device_put moves it") from None
        tensors.append({"name": name or "x", "shape": list(shape), "dtype": dname,
                        "src": b.layout(src, shape), "dst": b.layout(dst or src, shape)})
    spec: Dict[str, Any] = {"meshes": b.meshes_json(), "tensors": tensors}
    if options:
        spec["options"] = dict(options)
    return spec


def _plan(leaves: List[Any], targets: List[Optional[Sharding]], names: List[str], *,
          process: Optional[int] = None, **kwargs: Any) -> Plan:
    """Plans the leaves; the C library's errors name the leaves' key paths."""
    options = kwargs.pop("options", None)
    spec = _spec(leaves, targets, names, options)
    try:
        return _core.plan(spec, process=process, **kwargs)
    except ReshardError as e:
        raise _renamed(e, names) from None


def plan(tree: Any, shardings: Any, *, process: Optional[int] = None, **kwargs: Any) -> Plan:
    """Plans ``spec_for(tree, shardings)`` (see :func:`reshard.plan` for the
    keyword arguments)."""
    leaves, _, targets, names = _flatten(tree, shardings)
    return _plan(leaves, targets, names, process=process, **kwargs)


class _Slab:
    """One call's output allocation: host memory aligned to ``_ALIGN`` that
    holds every output shard, and, on the fast path, the NumPy views of it
    that become the output arrays' shards (made with the allocation, reused
    with it)."""

    __slots__ = ("mem", "addr", "views", "mem_refs", "view_refs", "busy")

    def __init__(self, nbytes: int) -> None:
        self.mem = np.empty(nbytes + _ALIGN, np.uint8)
        base = self.mem.__array_interface__["data"][0]
        self.addr = base + (-base) % _ALIGN
        self.views: Optional[List[List[np.ndarray]]] = None
        self.busy = True
        self.view_refs = 0
        self.mem_refs = sys.getrefcount(self.mem)

    def make_views(self, specs: List[Any], pooled: bool) -> None:
        """Views per output array (``specs``: per array ``(dtype, [(offset,
        shape), ...])``), and for a pooled allocation the reference counts
        of one nobody else holds, measured now (every view of the memory
        refers to ``mem``, and JAX keeps the views it was given)."""
        nd, pad = np.ndarray, self.addr - self.mem.__array_interface__["data"][0]
        self.views = [[nd(shape, dt, self.mem, pad + off) for off, shape in views]
                      for dt, views in specs]
        if not pooled:
            return
        self.mem_refs = sys.getrefcount(self.mem)
        self.view_refs = max(map(sys.getrefcount, itertools.chain.from_iterable(self.views)),
                             default=0)

    def free(self) -> bool:
        """Whether no output array of an earlier call aliases the memory any
        more (then a new call may overwrite it)."""
        if self.busy or sys.getrefcount(self.mem) != self.mem_refs:
            return False
        return self.views is None or max(
            map(sys.getrefcount, itertools.chain.from_iterable(self.views)),
            default=0) == self.view_refs


_LEAF_KEY = operator.attrgetter("shape", "dtype", "sharding")
_ARRAYS = operator.attrgetter("_arrays")
_POINTER = operator.methodcaller("unsafe_buffer_pointer")


class _Prepared:
    """A plan with everything an execution needs precomputed: per leaf, the
    device of each source entry, and the destination slab layout; on the
    fast path, index arrays that turn a call's Python work into a few
    vectorised steps and one C++ call per output array."""

    def __init__(self, leaves: List[Any], targets: List[Optional[Sharding]], names: List[str],
                 executor: Executor, reuse: bool = True) -> None:
        self.executor = executor
        self.reuse = reuse
        self._pool: List[_Slab] = []
        self._lock = threading.Lock()
        self.names = names
        process = executor.process
        me = jax.process_index()
        if process is not None and process != me:
            raise InvalidArgumentError(f"executor: rank {process} differs from "
                                       f"jax.process_index() {me}; plan process "
                                       "p must be JAX process p")
        self.shapes, self.dtypes, self.dst_shardings = [], [], []
        for x, dst, name in zip(leaves, targets, names):
            shape, dtype, src = _leaf_info(x, name)
            self.shapes.append(shape)
            self.dtypes.append(np.dtype(dtype))
            self.dst_shardings.append(dst or src)
            for s in (src, dst or src):
                for d in s.device_set:
                    if d.process_index == me and d.platform != "cpu":
                        raise InvalidArgumentError(
                            f"tree{name}: device {d} is a {d.platform} device; reshard.jax "
                            "executes on CPU devices (host memory) only")
                    if d.process_index != me and process is None:
                        # A host executor moves bytes inside this process only.
                        raise InvalidArgumentError(
                            f"executor: tree{name} has devices in process {d.process_index} "
                            f"(this is process {me} of {jax.process_count()}); arrays that "
                            "span processes need executor=reshard.MPIExecutor(comm) with "
                            "comm's rank == jax.process_index(), every process calling "
                            "reshard with the same tree and shardings")
        self.plan = _plan(leaves, targets, names, process=process)
        local = None if process is None else self.plan.local_entries(process)
        devices = {d.id: d for d in jax.devices()}
        self.src_devices: List[List[int]] = []  # per leaf, entry -> device id, -1: not ours
        self.dst_views: List[List[Tuple[int, int, Tuple[int, ...]]]] = []  # (offset, bytes, shape)
        self.dst_devices: List[List[Any]] = []
        off = 0
        for t, x, dst_s in zip(self.plan.tensors, leaves, self.dst_shardings):
            keep_src = None if local is None else set(local[t.index][0])
            keep_dst = None if local is None else set(local[t.index][1])
            self.src_devices.append([e.device if keep_src is None or i in keep_src else -1
                                     for i, e in enumerate(t.src.entries)])
            # The plan's boxes must be JAX's shards, or the arrays would be wrong.
            src_s = x.sharding
            for s, lay in ((src_s, t.src), (dst_s, t.dst)):
                jmap = {d.id: idx for d, idx in s.devices_indices_map(t.shape).items()}
                for e in lay.entries:
                    idx = jmap.get(e.device)
                    got = None if idx is None else tuple(sl.indices(n)[:2] for sl, n in zip(idx, t.shape))
                    if got != tuple(zip(e.lo, e.hi)):
                        raise InternalError(f"tree{names[t.index]}: the plan's box {e.lo}..{e.hi} on device "
                                            f"{e.device} differs from JAX's shard {got}")
            views, devs = [], []
            item = self.dtypes[t.index].itemsize
            for i, e in enumerate(t.dst.entries):
                if keep_dst is not None and i not in keep_dst:
                    continue
                n = int(np.prod(e.shape, dtype=np.int64)) * item
                views.append((off, n, e.shape))
                devs.append(devices[e.device])
                off += (n + _ALIGN - 1) // _ALIGN * _ALIGN
            self.dst_views.append(views)
            self.dst_devices.append(devs)
        self.slab_bytes = off
        # The buffer table: the entries this process gives, their sizes
        # written once; a call writes the addresses only.
        tab = _core._table(self.plan)
        src_given = np.zeros(len(tab.src_bytes), bool)
        dst_given = np.zeros(len(tab.dst_bytes), bool)
        dst_offsets = np.zeros(len(tab.dst_bytes), np.uint64)
        for t, devs in zip(self.plan.tensors, self.src_devices):
            for i, d in enumerate(devs):
                src_given[tab.src_off[t.index] + i] = d >= 0
            keep_dst = None if local is None else set(local[t.index][1])
            k = 0
            for i, _ in enumerate(t.dst.entries):
                if keep_dst is not None and i not in keep_dst:
                    continue
                dst_offsets[tab.dst_off[t.index] + i] = self.dst_views[t.index][k][0]
                dst_given[tab.dst_off[t.index] + i] = True
                k += 1
        self._src_given, self._dst_given = src_given, dst_given
        self.dst_slots = np.flatnonzero(dst_given)
        self.dst_offsets = dst_offsets[self.dst_slots]
        self._table = _core._PointerTable(self.plan, src_given, dst_given)
        self._table_lock = threading.Lock()
        self.all_dst_devices = [d for devs in self.dst_devices for d in devs]
        self._fast = _FAST_PUT is not None and all(
            type(x) is _ArrayImpl for x in leaves)
        if self._fast:
            self._prepare_fast(leaves)

    def _prepare_fast(self, leaves: List[Any]) -> None:
        """Source addresses come from every leaf's per-device buffers
        (``_arrays``, in the order of the sharding's addressable devices)
        gathered into the plan's entry order, and each output array is made
        by one ``batched_device_put`` from its views of the slab."""
        tab = _core._table(self.plan)
        slots, gather = [], []
        base = 0
        for t, x, devs in zip(self.plan.tensors, leaves, self.src_devices):
            order = {int(d.id): k for k, d in enumerate(x.sharding._addressable_device_assignment)}
            for i, d in enumerate(devs):
                if d >= 0:
                    slots.append(tab.src_off[t.index] + i)
                    gather.append(base + order[d])
            base += len(order)
        self.num_shards = base
        self.src_slots = np.asarray(slots, np.intp)
        self.src_gather = np.asarray(gather, np.intp)
        # Per leaf: the views in the order of the target sharding's
        # addressable devices (what an ArrayImpl holds).
        self.out_views: List[Tuple[np.dtype, List[Tuple[int, Tuple[int, ...]]]]] = []
        self.out_avals, self.out_devices, self.out_local = [], [], []
        for t, shape, dt, s, views, devs in zip(self.plan.tensors, self.shapes, self.dtypes,
                                                 self.dst_shardings, self.dst_views,
                                                 self.dst_devices):
            by_id = {int(d.id): v for d, v in zip(devs, views)}
            addressable = list(s._addressable_device_assignment)
            local = bool(addressable) and sorted(by_id) == sorted(int(d.id) for d in addressable)
            self.out_local.append(local)  # False: no local shard, or not one per device
            self.out_avals.append(_ShapedArray(shape, dt))
            self.out_devices.append(addressable)
            self.out_views.append((dt, [(by_id[int(d.id)][0], by_id[int(d.id)][2])
                                        for d in addressable] if local else []))
        self.all_local = all(self.out_local)

    def _write_sources(self, leaves: List[Any], src_ptr: np.ndarray) -> None:
        if self._fast:
            ptrs = np.fromiter(map(_POINTER, itertools.chain.from_iterable(map(_ARRAYS, leaves))),
                               np.uint64, count=self.num_shards)
            src_ptr[self.src_slots] = ptrs[self.src_gather]
            return
        k = 0
        for x, devs in zip(leaves, self.src_devices):
            ptr = {s.device.id: s.data.unsafe_buffer_pointer() for s in x.addressable_shards}
            for d in devs:
                if d >= 0:
                    src_ptr[k] = ptr[d]
                k += 1

    def _take_slab(self) -> _Slab:
        with self._lock:
            if self.reuse:
                # An allocation whose arrays are all gone is reused: no
                # fresh pages to fault in, and its views are made already.
                for s in self._pool:
                    if s.free():
                        s.busy = True
                        return s
            slab = _Slab(self.slab_bytes)
            if self.reuse:
                self._pool.append(slab)
                if len(self._pool) > 4:
                    self._pool.pop(0)
        if self._fast:
            slab.make_views(self.out_views, self.reuse)
        return slab

    def run(self, leaves: List[Any]) -> List[Any]:
        if self._fast:
            _BLOCK(leaves)
        else:
            jax.block_until_ready(leaves)
        slab = self._take_slab()
        try:
            # One table per concurrent call (the usual case: this one).
            mine = self._table_lock.acquire(blocking=False)
            table = self._table if mine else _core._PointerTable(self.plan, self._src_given,
                                                                  self._dst_given)
            try:
                self._write_sources(leaves, table.src_ptr)
                table.dst_ptr[self.dst_slots] = self.dst_offsets + np.uint64(slab.addr)
                try:
                    self.executor._execute_table(table)
                except ReshardError as e:
                    raise _renamed(e, self.names) from None
            finally:
                if mine:
                    self._table_lock.release()
            return self._outputs_fast(slab) if self._fast else self._outputs(slab)
        finally:
            slab.busy = False

    def _outputs(self, slab: _Slab) -> List[Any]:
        """Public JAX API: one jax.device_put for every shard, then an array
        per leaf."""
        pad = slab.addr - slab.mem.__array_interface__["data"][0]
        views = []
        for dt, vs in zip(self.dtypes, self.dst_views):
            for off, n, shape in vs:
                views.append(slab.mem[pad + off:pad + off + n].view(dt).reshape(shape))
        arrays = jax.device_put(views, self.all_dst_devices)
        out, k = [], 0
        for shape, dt, s, devs in zip(self.shapes, self.dtypes, self.dst_shardings, self.dst_devices):
            # dtype: a process may hold no shard of an array (another mesh)
            out.append(jax.make_array_from_single_device_arrays(shape, s, arrays[k:k + len(devs)],
                                                                dtype=dt))
            k += len(devs)
        return out

    def _outputs_fast(self, slab: _Slab) -> List[Any]:
        """One ``batched_device_put`` per output array (XLA aliases the
        views: no copy), called from C through ``map``."""
        assert slab.views is not None
        if self.all_local:
            return list(map(_FAST_PUT, self.out_avals, self.dst_shardings, slab.views,
                            self.out_devices, itertools.repeat(True)))
        out = []
        for local, aval, s, xs, devs, shape, dt in zip(
                self.out_local, self.out_avals, self.dst_shardings, slab.views, self.out_devices,
                self.shapes, self.dtypes):
            if local:
                out.append(_FAST_PUT(aval, s, xs, devs, True))
            else:
                out.append(jax.make_array_from_single_device_arrays(shape, s, [], dtype=dt))
        return out


def _on_gpu(leaves: List[Any], targets: List[Optional[Sharding]], names: List[str]) -> bool:
    """Whether the leaves live on GPUs (then every source and target device
    must be a GPU of this process), or on CPU devices."""
    kinds = set()
    for x, dst, name in zip(leaves, targets, names):
        s = getattr(x, "sharding", None)
        for sh in (s, dst):
            if sh is None:
                continue
            for d in sh.device_set:
                kinds.add(d.platform == "cpu")
                if len(kinds) > 1:
                    raise InvalidArgumentError(
                        f"tree{name}: device {d} is a {d.platform} device among CPU devices (or "
                        "the reverse); reshard.jax moves CPU arrays to CPU devices and GPU "
                        "arrays to GPUs of this process (jax.device_put moves between them)")
    return kinds == {False}


_CUDA_LOCAL: List[Executor] = []


def _default_cuda_executor() -> Executor:
    if not _CUDA_LOCAL:
        from ._cuda import CudaLocalExecutor
        _CUDA_LOCAL.append(CudaLocalExecutor())
    return _CUDA_LOCAL[0]


class _GpuPrepared:
    """A plan of GPU arrays in one process, executed by a CUDA executor of
    this process (``CudaLocalExecutor``): the sources' device buffers are
    read in place (``unsafe_buffer_pointer``, after
    ``block_until_ready``); each output array is first made by a jitted
    ``jnp.zeros`` with the target sharding (waited for), and its shards'
    device buffers are then written in place by the executor, which returns
    once they hold their data. No host copy."""

    def __init__(self, leaves: List[Any], targets: List[Optional[Sharding]], names: List[str],
                 executor: Executor) -> None:
        if getattr(executor, "memory", "host") != "cuda" or executor.process is not None:
            raise InvalidArgumentError(
                f"executor: a {executor.transport} executor for arrays on GPUs; reshard.jax "
                "moves GPU arrays within one process: pass reshard.CudaLocalExecutor() or None")
        me = jax.process_index()
        self.executor = executor
        self.names = names
        self.dst_shardings: List[Sharding] = []
        for x, dst, name in zip(leaves, targets, names):
            shape, dtype, src = _leaf_info(x, name)
            self.dst_shardings.append(dst or src)
            for sh in (src, dst or src):
                for d in sh.device_set:
                    if d.process_index != me:
                        raise InvalidArgumentError(
                            f"tree{name}: device {d} is in process {d.process_index} (this is "
                            f"process {me}); reshard.jax moves GPU arrays within one process")
        self.plan = _plan(leaves, targets, names)
        for t, x, dst_s in zip(self.plan.tensors, leaves, self.dst_shardings):
            for s, lay in ((x.sharding, t.src), (dst_s, t.dst)):
                jmap = {d.id: idx for d, idx in s.devices_indices_map(t.shape).items()}
                for e in lay.entries:
                    idx = jmap.get(e.device)
                    got = None if idx is None else tuple(sl.indices(n)[:2]
                                                         for sl, n in zip(idx, t.shape))
                    if got != tuple(zip(e.lo, e.hi)):
                        raise InternalError(f"tree{names[t.index]}: the plan's box {e.lo}..{e.hi} "
                                            f"on device {e.device} differs from JAX's shard {got}")
        self.src_devices = [[e.device for e in t.src.entries] for t in self.plan.tensors]
        self.dst_devices = [[e.device for e in t.dst.entries] for t in self.plan.tensors]
        tab = _core._table(self.plan)
        self._table = _core._PointerTable(self.plan, np.ones(len(tab.src_bytes), bool),
                                          np.ones(len(tab.dst_bytes), bool))
        # A src/dst row of the table holds at least one slot: entries only.
        self._nsrc = sum(map(len, self.src_devices))
        self._ndst = sum(map(len, self.dst_devices))
        self._table.src[self._nsrc:, 1] = 0
        self._table.dst[self._ndst:, 1] = 0
        import jax.numpy as jnp
        self._zeros = [jax.jit(functools.partial(jnp.zeros, tuple(t.shape), x.dtype),
                               out_shardings=s)
                       for t, x, s in zip(self.plan.tensors, leaves, self.dst_shardings)]
        self._lock = threading.Lock()

    @staticmethod
    def _pointers(arrays: List[Any], devices: List[List[int]], out: np.ndarray) -> None:
        k = 0
        for x, devs in zip(arrays, devices):
            ptr = {int(s.device.id): s.data.unsafe_buffer_pointer() for s in x.addressable_shards}
            for d in devs:
                out[k] = ptr[d]
                k += 1

    def run(self, leaves: List[Any]) -> List[Any]:
        jax.block_until_ready(leaves)
        outs = [f() for f in self._zeros]
        jax.block_until_ready(outs)  # the fills are done before reshard writes
        with self._lock:
            self._pointers(leaves, self.src_devices, self._table.src_ptr)
            self._pointers(outs, self.dst_devices, self._table.dst_ptr)
            try:
                self.executor._execute_table(self._table)
            except ReshardError as e:
                raise _renamed(e, self.names) from None
        return outs


class _Split:
    """How a tree that is not all plain ``jax.Array``\\ s is moved: the
    indices of the leaves the plan moves (arrays, and key arrays through
    their key data), the key impls to wrap back (None: a plain array), and
    the other leaves (NumPy, scalars), placed by ``jax.device_put``."""

    __slots__ = ("idx", "impls", "leaves", "targets", "names", "host")

    def __init__(self) -> None:
        self.idx: List[int] = []
        self.impls: List[Any] = []
        self.leaves: List[Any] = []
        self.targets: List[Optional[Sharding]] = []
        self.names: List[str] = []
        self.host: List[int] = []


def _key_data_sharding(key: Any, dst: Optional[Sharding]) -> Optional[Sharding]:
    """The sharding of the key data of ``key`` placed at ``dst``."""
    if dst is None or _PHYSICAL_SHARDING is None:
        return dst  # a NamedSharding's spec leaves the trailing key dimension whole
    return _PHYSICAL_SHARDING(key.aval, dst)


def _check_eager(leaves: List[Any], names: Optional[List[str]] = None) -> None:
    """A clear error inside ``jax.jit`` (a tracer, or JAX tracing at all):
    reshard executes eagerly, outside any trace."""
    if _Tracer is not None:
        for i, x in enumerate(leaves):
            if isinstance(x, _Tracer):
                name = names[i] if names is not None else f"<leaf {i}>"
                raise TypeError(_in_jit_message(f"tree{name}: a {type(x).__name__}"))
    if _TRACE_STATE_CLEAN is not None and not _TRACE_STATE_CLEAN():
        raise TypeError(_in_jit_message("reshard.jax.reshard called while tracing"))


class Resharder:
    """Reshards pytrees of one structure to fixed target shardings, planning
    once per distinct (shapes, dtypes, shardings) and reusing the plan: the
    weight-sync loop of an RL trainer.

    shardings: one target (a ``Sharding``, a ``jax.Device``, or a bare
        ``PartitionSpec``, resolved against the mesh of ``jax.set_mesh``
        current when the ``Resharder`` is made) or a pytree prefix of the
        trees it will be called on; ``None`` keeps a leaf's sharding.
    executor: ``None`` for one process (a host executor over this process's
        CPU devices, ``CudaLocalExecutor`` over its GPUs), or a
        :class:`reshard.MPIExecutor` whose rank is
        ``jax.process_index()`` for arrays spread over processes (omitting it
        then is an ``InvalidArgumentError`` that says so).
    cache_size: plans kept (least recently used dropped; 0 keeps none, so
        every call plans afresh).
    reuse_buffers: outputs live in one host allocation per call (aliased by
        the returned arrays, no copy); with ``True`` an allocation whose arrays
        have all been freed is reused by a later call instead of allocating
        fresh pages (up to 4 per plan are kept).

    Called on a tree, it takes what ``jax.device_put`` takes: ``jax.Array``
    leaves are moved by the plan; PRNG key arrays (``jax.random.key``) by
    their key data, given back as key arrays of the same impl; NumPy arrays
    and Python scalars are converted and placed by ``jax.device_put`` (there
    is nothing to reshard). ``donate`` as for :func:`reshard`.
    """

    def __init__(self, shardings: Any, *, executor: Optional[Executor] = None,
                 cache_size: int = 32, reuse_buffers: bool = True) -> None:
        self.reuse_buffers = reuse_buffers
        self.shardings = _resolve_specs(shardings)
        self.executor = executor  # None: host, or CudaLocalExecutor for GPU arrays
        self._cache: "collections.OrderedDict[Any, _Prepared]" = collections.OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._by_treedef: Dict[Any, Tuple[List[Optional[Sharding]], List[str]]] = {}

    def _targets(self, tree: Any, treedef: Any) -> Tuple[List[Optional[Sharding]], List[str]]:
        # The targets and names of a leaf depend only on the tree's structure
        # (self.shardings is fixed): matched once per structure, so a call
        # with a cached plan only flattens the tree and hashes its leaves'
        # shapes, dtypes and shardings.
        per_def = self._by_treedef.get(treedef)
        if per_def is None:
            _, _, targets, names = _flatten(tree, self.shardings)
            if len(self._by_treedef) >= 64:
                self._by_treedef.clear()
            per_def = self._by_treedef[treedef] = (targets, names)
        return per_def

    def _lookup(self, key: Any) -> Optional[_Prepared]:
        with self._lock:
            prep = self._cache.get(key)
            if prep is not None:
                self._cache.move_to_end(key)
            return prep

    def _plain_prepared(self, tree: Any, leaves: List[Any], treedef: Any) -> _Prepared:
        key = (treedef, tuple(map(_LEAF_KEY, leaves)))
        prep = self._lookup(key)
        if prep is None:
            targets, names = self._targets(tree, treedef)
            prep = self._prepared(key, leaves, targets, names)
        return prep

    def _prepared(self, key: Any, leaves: List[Any], targets: List[Optional[Sharding]],
                  names: List[str]) -> _Prepared:
        prep = self._lookup(key)
        if prep is not None:
            return prep
        made: Any  # _Prepared, or _GpuPrepared (the same run / plan interface)
        if _on_gpu(leaves, targets, names):
            ex = self.executor if self.executor is not None else _default_cuda_executor()
            made = _GpuPrepared(leaves, targets, names, ex)
        else:
            if self.executor is not None and getattr(self.executor, "memory", "host") != "host":
                raise InvalidArgumentError(
                    f"executor: a {self.executor.transport} executor (CUDA memory) for arrays "
                    "on CPU devices; pass a host or MPI executor, or None")
            made = _Prepared(leaves, targets, names,
                             self.executor or _core._default_executor(), self.reuse_buffers)
        with self._lock:
            self._cache[key] = made
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return made

    def _plain(self, leaves: List[Any]) -> bool:
        """Every leaf a plain ``jax.Array`` (the fast path: no key arrays, no
        NumPy, no tracers)."""
        if _ArrayImpl is not None:
            return all(type(x) is _ArrayImpl for x in leaves)
        return all(isinstance(x, jax.Array) and not _is_key(x.dtype)
                   and not (_Tracer is not None and isinstance(x, _Tracer)) for x in leaves)

    def _split(self, tree: Any, leaves: List[Any], treedef: Any) -> _Split:
        targets, names = self._targets(tree, treedef)
        _check_eager(leaves, names)
        sp = _Split()
        for i, (x, dst, name) in enumerate(zip(leaves, targets, names)):
            if isinstance(x, jax.Array):
                if _is_key(x.dtype):
                    sp.impls.append(jax.random.key_impl(x))
                    sp.leaves.append(jax.random.key_data(x))
                    sp.targets.append(_key_data_sharding(x, dst))
                else:
                    sp.impls.append(None)
                    sp.leaves.append(x)
                    sp.targets.append(dst)
                sp.idx.append(i)
                sp.names.append(name)
            elif isinstance(x, jax.ShapeDtypeStruct):
                raise InvalidArgumentError(
                    f"tree{name}: a jax.ShapeDtypeStruct has no data to move "
                    "(reshard.jax.plan and spec_for take it; reshard needs arrays)")
            else:
                sp.host.append(i)
        return sp

    def _split_key(self, treedef: Any, sp: _Split) -> Any:
        return (treedef, tuple(sp.idx), tuple(map(str, sp.impls)),
                tuple(map(_LEAF_KEY, sp.leaves)))

    def prepared(self, tree: Any) -> Tuple[_Prepared, List[Any], Any]:
        """The (cached) prepared plan of a tree of plain ``jax.Array``\\ s,
        its leaves and treedef."""
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        if self._plain(leaves):
            return self._plain_prepared(tree, leaves, treedef), leaves, treedef
        sp = self._split(tree, leaves, treedef)
        return (self._prepared(self._split_key(treedef, sp), sp.leaves, sp.targets, sp.names),
                sp.leaves, treedef)

    def plan(self, tree: Any) -> Plan:
        """The (cached) plan for ``tree`` (of its ``jax.Array`` leaves, key
        arrays as their key data)."""
        return self.prepared(tree)[0].plan

    def __call__(self, tree: Any, *, donate: Any = False) -> Any:
        """``tree`` with every leaf resharded; equal to
        ``jax.device_put(tree, shardings, donate=donate)`` (donated sources
        are always deleted)."""
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        # checked before anything moves: a bad donate leaves the sources be
        donated = None if donate is False else _donate_flags(tree, leaves, donate)
        if self._plain(leaves):
            if _TRACE_STATE_CLEAN is not None and not _TRACE_STATE_CLEAN():
                _check_eager(leaves)
            out = self._plain_prepared(tree, leaves, treedef).run(leaves)
        else:
            out = self._call_split(tree, leaves, treedef)
        if donated is not None:
            for x, d in zip(leaves, donated):
                if d and isinstance(x, jax.Array) and not x.is_deleted():
                    x.delete()
        return treedef.unflatten(out)

    def _call_split(self, tree: Any, leaves: List[Any], treedef: Any) -> List[Any]:
        sp = self._split(tree, leaves, treedef)
        out: List[Any] = [None] * len(leaves)
        if sp.idx:
            prep = self._prepared(self._split_key(treedef, sp), sp.leaves, sp.targets, sp.names)
            for i, y, impl in zip(sp.idx, prep.run(sp.leaves), sp.impls):
                out[i] = y if impl is None else jax.random.wrap_key_data(y, impl=impl)
        if sp.host:
            targets, names = self._targets(tree, treedef)
            for i in sp.host:
                out[i] = _put_host(leaves[i], targets[i], names[i])
        return out


def _put_host(x: Any, dst: Optional[Sharding], name: str) -> Any:
    """A leaf that is not a ``jax.Array`` (NumPy, a Python or NumPy scalar):
    converted and placed as ``jax.device_put`` does."""
    try:
        return jax.device_put(x, dst)
    except TypeError as e:
        raise TypeError(f"tree{name}: {type(x).__name__} is neither a jax.Array nor something "
                        f"jax.device_put converts ({e})") from None
    except ValueError as e:
        raise InvalidArgumentError(f"tree{name}: jax.device_put refuses it ({e})") from None


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


def _donate_flags(tree: Any, leaves: List[Any], donate: Any) -> List[bool]:
    """One flag per leaf from ``donate`` (a bool, or a pytree prefix of
    ``tree`` of bools). The donated source arrays are deleted after the move:
    using them raises JAX's deleted-array error. NumPy and scalar leaves have
    nothing to delete."""
    if _is_bool(donate):
        return [bool(donate)] * len(leaves)
    flags = []
    for path, v in _per_leaf("donate", donate, tree, lambda v: v is None or _is_bool(v)):
        if not _is_bool(v):
            raise TypeError(f"donate{path}: expected a bool, got {type(v).__name__}")
        flags.append(bool(v))
    return flags


_RESHARDERS: Dict[Any, Resharder] = {}


def clear_plan_cache() -> None:
    """Drops every plan :func:`reshard` has cached (and the output memory the
    plans keep for reuse); ``Resharder``\\ s you hold keep theirs."""
    _RESHARDERS.clear()


def reshard(tree: Any, shardings: Any, *, donate: Any = False,
            executor: Optional[Executor] = None, cache_resharding_plans: bool = True) -> Any:
    """Returns ``tree`` moved to ``shardings``, equal to
    ``jax.device_put(tree, shardings, donate=donate)``.

    tree: a pytree of ``jax.Array``\\ s on CPU devices, or on GPUs of this
        process (moved by a reshard plan), PRNG key arrays (moved through their key data, given back as
        key arrays of the same impl), NumPy arrays and Python scalars
        (converted and placed by ``jax.device_put``). Not inside ``jax.jit``:
        a tracer (or any call while JAX traces) is a ``TypeError``.
    shardings: one target or a pytree prefix of ``tree``: a ``Sharding``, a
        ``jax.Device``, a bare ``PartitionSpec`` (on the mesh of
        ``jax.set_mesh``), or ``None`` (keep the leaf's sharding).
    donate: a bool, or a pytree prefix of ``tree`` of bools: the donated
        source arrays are deleted once moved (using them raises JAX's
        "Array has been deleted" ``RuntimeError``).
    executor: ``None`` in one process (a host executor, or
        ``CudaLocalExecutor`` for GPU arrays); a :class:`reshard.MPIExecutor`
        (rank ``jax.process_index()``) when CPU arrays span processes
        (collective: every process calls it with the same tree and
        shardings).
    cache_resharding_plans: ``True`` (the default) plans once per (structure,
        shapes, dtypes, shardings, executor) and reuses the plan and its
        output memory; ``False`` plans afresh and keeps nothing.
        :func:`clear_plan_cache` drops what is cached; see :class:`Resharder`
        to hold a cache yourself.

    Errors name the leaf by its key path (``tree['step']``).
    """
    # The cache key: shardings flattened as JAX does by default (None is a
    # node of the structure there, so the key still tells every tree apart);
    # Resharder matches them to the leaves once per structure.
    sh_leaves, sh_def = jax.tree_util.tree_flatten(shardings)
    if any(isinstance(s, PartitionSpec) for s in sh_leaves):
        # resolved now: the key holds the mesh of this call
        shardings = _resolve_specs(shardings, tree)
        sh_leaves, sh_def = jax.tree_util.tree_flatten(shardings)
    if not cache_resharding_plans:
        return Resharder(shardings, executor=executor, cache_size=0,
                         reuse_buffers=False)(tree, donate=donate)
    key = (tuple(sh_leaves), sh_def, id(executor))
    try:
        hash(key)
    except TypeError:
        return Resharder(shardings, executor=executor)(tree, donate=donate)
    r = _RESHARDERS.get(key)
    if r is None:
        if len(_RESHARDERS) > 64:
            _RESHARDERS.clear()
        r = _RESHARDERS[key] = Resharder(shardings, executor=executor)
    return r(tree, donate=donate)
