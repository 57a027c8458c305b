"""PyTorch adapter: DTensor / ``DeviceMesh`` + placements to reshard specs, and
moving DTensors to another mesh and placements (CPU tensors over MPI, CUDA
tensors over NCCL or in one process).

``redistribute(tensors, (mesh, placements), executor=MPIExecutor(comm))``
returns DTensors on ``mesh`` with ``placements`` holding the same global
values: what ``DTensor.redistribute`` does on one mesh, and what it cannot do
across meshes (a training mesh to an inference mesh, a pipeline stage to
another). Every process of the default process group calls it collectively;
plan process p is global rank p. CPU tensors move over the host executor (one
process) or an ``MPIExecutor`` whose rank p is global rank p; CUDA tensors
(``"cuda"`` meshes) over ``CudaLocalExecutor`` (one process) or an
``NcclExecutor`` (:func:`nccl_executor`: one GPU per process), without host
copies. :class:`WeightSync` writes a trainer's state dict into an inference
engine's parameters in place.

Layouts map one to one (docs/spec.md, "From PyTorch DTensor"): a
``DeviceMesh`` becomes a spec mesh whose devices are its global ranks (one
device per process); placements have one entry per mesh dim:

- ``Shard(d)``: the mesh dim's axis splits tensor dim ``d``; several mesh dims
  on one tensor dim split it in mesh-dim order, the first one major;
- ``Replicate()``: nothing;
- ``Partial(op)``: the axis is in ``partial.axes`` (``"sum"``, ``"max"``,
  ``"min"``; ``"avg"`` is ``"mean"``, for floating-point sources only).

DTensor splits a dim over several mesh dims one after the other (each chunks
the previous local shard); where that differs from a spec's single
ceil-division split (a size that does not divide evenly), the layout is
written as explicit boxes with DTensor's own shard offsets, so the plan's
shards are always DTensor's.
"""
from __future__ import annotations

import collections
import math
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Placement, Replicate, Shard

from . import _core
from ._core import Executor, Plan
from ._ffi import InvalidArgumentError, UnsupportedError

__all__ = ["mesh_json", "layout_json", "shard_boxes", "spec_for", "plan", "redistribute",
           "Redistributor", "WeightSync", "as_dtensor", "nccl_executor", "dtype_name"]

Target = Tuple[DeviceMesh, Sequence[Placement]]

_DTYPES = {
    torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool",
}
for _name, _code in (("float8_e4m3fn", "f8e4m3"), ("float8_e5m2", "f8e5m2"), ("uint16", "u16"),
                     ("uint32", "u32"), ("uint64", "u64")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code
_OPS = {"sum": "sum", "max": "max", "min": "min", "avg": "mean"}  # DTensor -> spec


def dtype_name(dtype: torch.dtype) -> str:
    """The reshard dtype name (``"f32"``, ``"bf16"``, ...) of a torch dtype."""
    if dtype not in _DTYPES:
        raise InvalidArgumentError(f"dtype: {dtype} has no reshard equivalent (supported: "
                                   + ", ".join(str(d) for d in _DTYPES) + ")")
    return _DTYPES[dtype]


def _axis_names(mesh: DeviceMesh) -> List[str]:
    names = mesh.mesh_dim_names
    if names:
        return [str(n) for n in names]
    return [f"dim{i}" for i in range(mesh.ndim)]


def mesh_json(mesh: DeviceMesh) -> Dict[str, Any]:
    """The spec mesh of a ``DeviceMesh``: axis names (``mesh_dim_names``, or
    ``dim0``, ``dim1``, ... without them), shape, and its global ranks as
    device ids and processes."""
    ranks = [int(r) for r in mesh.mesh.flatten().tolist()]
    return {"axis_names": _axis_names(mesh), "shape": [int(n) for n in mesh.mesh.shape],
            "devices": ranks, "processes": ranks}


def _check_placements(mesh: DeviceMesh, placements: Sequence[Placement], shape: Sequence[int],
                      where: str) -> Tuple[Dict[int, List[int]], List[int], str]:
    """Per tensor dim the mesh dims sharding it (mesh-dim order), the partial
    mesh dims and their op, after checking every placement."""
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise InvalidArgumentError(f"{where}: {len(placements)} placements for a mesh of "
                                   f"{mesh.ndim} dims (one per mesh dim)")
    split: Dict[int, List[int]] = {}
    partial: List[int] = []
    op: Optional[str] = None
    for m, p in enumerate(placements):
        if isinstance(p, Shard) and type(p) is Shard:
            d = p.dim + len(shape) if p.dim < 0 else p.dim
            if not 0 <= d < len(shape):
                raise InvalidArgumentError(f"{where}[{m}]: Shard({p.dim}) of a rank-{len(shape)} "
                                           "tensor")
            split.setdefault(d, []).append(m)
        elif isinstance(p, Replicate):
            continue
        elif isinstance(p, Partial):
            if p.reduce_op not in _OPS:
                raise UnsupportedError(f"{where}[{m}]: Partial({p.reduce_op!r}) has no reshard "
                                       "equivalent (sum, max, min, avg)")
            if op is not None and op != p.reduce_op:
                raise UnsupportedError(f"{where}[{m}]: Partial({p.reduce_op!r}) mixed with "
                                       f"Partial({op!r})")
            op = p.reduce_op
            partial.append(m)
        else:
            raise UnsupportedError(f"{where}[{m}]: {p!r} is not supported (Shard, Replicate, "
                                   "Partial)")
    return split, partial, _OPS[op or "sum"]


def shard_boxes(mesh: DeviceMesh, placements: Sequence[Placement], shape: Sequence[int]
                ) -> List[Tuple[int, int, Tuple[int, ...], Tuple[int, ...]]]:
    """DTensor's shards of a tensor of ``shape``: ``(rank, summand, lo, hi)``
    per rank of ``mesh`` in mesh order. Shard placements are applied in
    mesh-dim order, each chunking the previous local range
    (``torch.chunk``: ceil-sized chunks, trailing ones smaller or empty)."""
    split, partial, _ = _check_placements(mesh, placements, shape, "placements")
    grid = [int(n) for n in mesh.mesh.shape]
    ranks = [int(r) for r in mesh.mesh.flatten().tolist()]
    out = []
    for flat, rank in enumerate(ranks):
        coord = []
        rest = flat
        for n in reversed(grid):
            coord.append(rest % n)
            rest //= n
        coord.reverse()
        lo = [0] * len(shape)
        hi = [int(n) for n in shape]
        for d, mdims in split.items():
            for m in mdims:
                k, c = grid[m], coord[m]
                size = hi[d] - lo[d]
                chunk = -(-size // k) if size else 0
                a = min(hi[d], lo[d] + c * chunk)
                b = min(hi[d], lo[d] + (c + 1) * chunk)
                lo[d], hi[d] = a, b
        summand = 0
        for m in partial:
            summand = summand * grid[m] + coord[m]
        out.append((rank, summand, tuple(lo), tuple(hi)))
    return out


def layout_json(mesh: DeviceMesh, placements: Sequence[Placement], shape: Sequence[int],
                mesh_name: str) -> Dict[str, Any]:
    """The spec layout of ``placements`` on ``mesh`` (called ``mesh_name`` in
    the spec) for a tensor of ``shape``: a named layout where it has DTensor's
    shards, explicit boxes (:func:`shard_boxes`) otherwise."""
    split, partial, op = _check_placements(mesh, placements, shape, "placements")
    names = _axis_names(mesh)
    grid = [int(n) for n in mesh.mesh.shape]
    # One mesh dim per tensor dim, or sizes every split divides: a single
    # ceil-division split gives DTensor's nested chunks.
    named = all(len(ms) == 1 or int(shape[d]) % math.prod(grid[m] for m in ms) == 0
                for d, ms in split.items())
    if named:
        spec: List[Any] = []
        for d in range(len(shape)):
            ms = split.get(d, [])
            spec.append(None if not ms else names[ms[0]] if len(ms) == 1 else [names[m] for m in ms])
        out: Dict[str, Any] = {"mesh": mesh_name, "spec": spec}
        if partial:
            out["partial"] = {"axes": [names[m] for m in partial], "op": op}
        return out
    boxes = [{"device": r, "lo": list(lo), "hi": list(hi), "summand": s}
             for r, s, lo, hi in shard_boxes(mesh, placements, shape)]
    out = {"boxes": boxes}
    if partial:
        out["summands"] = math.prod(grid[m] for m in partial)
        out["op"] = op
    return out


def _is_target(x: Any) -> bool:
    return (isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], DeviceMesh)
            and isinstance(x[1], (list, tuple)))


def _flatten(tensors: Any, targets: Any) -> Tuple[List[Any], List[str], List[Optional[Target]], Any]:
    """Leaves (DTensors), their names, one target each (or None: keep), and a
    function rebuilding the input's structure from new leaves."""
    if isinstance(tensors, DTensor):
        leaves, names = [tensors], ["x"]

        def rebuild(xs: List[Any]) -> Any:
            return xs[0]
    elif isinstance(tensors, dict):
        names = [str(k) for k in tensors]
        leaves = list(tensors.values())
        keys = list(tensors)

        def rebuild(xs: List[Any]) -> Any:
            return dict(zip(keys, xs))
    elif isinstance(tensors, (list, tuple)):
        leaves = list(tensors)
        names = [f"[{i}]" for i in range(len(leaves))]
        kind = type(tensors)

        def rebuild(xs: List[Any]) -> Any:
            return kind(xs) if kind in (list, tuple) else list(xs)
    else:
        raise TypeError(f"tensors: expected a DTensor, a dict or a list of DTensors, got "
                        f"{type(tensors).__name__}")
    for n, x in zip(names, leaves):
        if not isinstance(x, DTensor):
            raise TypeError(f"tensors[{n}]: {type(x).__name__} is not a DTensor")
    if targets is None or _is_target(targets):
        per = [targets] * len(leaves)
    elif isinstance(tensors, dict) and isinstance(targets, dict):
        unknown = set(targets) - set(tensors)
        if unknown:
            raise InvalidArgumentError(f"targets: unknown tensor(s) {sorted(map(str, unknown))}")
        per = [targets.get(k) for k in tensors]
    elif isinstance(tensors, (list, tuple)) and isinstance(targets, (list, tuple)):
        if len(targets) != len(leaves):
            raise InvalidArgumentError(f"targets: {len(targets)} targets for {len(leaves)} tensors")
        per = list(targets)
    else:
        raise TypeError("targets: expected (DeviceMesh, placements), or a dict / list of them "
                        "matching tensors")
    for n, t in zip(names, per):
        if t is not None and not _is_target(t):
            raise TypeError(f"targets[{n}]: expected a (DeviceMesh, placements) pair, got "
                            f"{type(t).__name__}")
    return leaves, names, per, rebuild


class _SpecBuilder:
    def __init__(self, ordinal: Optional[int] = None) -> None:
        self.names: Dict[Any, str] = {}
        self.meshes: Dict[str, Any] = {}
        # The CUDA device of every rank of a CUDA mesh, in one process only
        # (the in-process executor places devices by ordinal; over NCCL a
        # process's one GPU holds all its devices, and ranks would disagree).
        self.ordinal = ordinal

    def mesh(self, mesh: DeviceMesh) -> str:
        key = (tuple(_axis_names(mesh)), tuple(mesh.mesh.shape), tuple(mesh.mesh.flatten().tolist()))
        if key not in self.names:
            name = f"m{len(self.names)}"
            self.names[key] = name
            self.meshes[name] = mesh_json(mesh)
            if self.ordinal is not None and mesh.device_type == "cuda":
                self.meshes[name]["ordinals"] = [self.ordinal] * mesh.mesh.numel()
        return self.names[key]


def _describe(leaves: List[Any], names: List[str], targets: List[Optional[Target]]
              ) -> List[Tuple[Tuple[int, ...], torch.dtype, Target, Target]]:
    out: List[Tuple[Tuple[int, ...], torch.dtype, Target, Target]] = []
    for x, n, t in zip(leaves, names, targets):
        src = (x.device_mesh, tuple(x.placements))
        dst = t if t is not None else src
        kinds = (x.device_mesh.device_type, dst[0].device_type)
        if kinds not in (("cpu", "cpu"), ("cuda", "cuda")):
            raise UnsupportedError(f"tensors[{n}]: meshes of device type {kinds[0]!r} -> "
                                   f"{kinds[1]!r}; reshard.torch moves CPU tensors to CPU meshes "
                                   "and CUDA tensors to CUDA meshes")
        out.append((tuple(int(s) for s in x.shape), x.dtype, src, (dst[0], tuple(dst[1]))))
    return out


def spec_for(tensors: Any, targets: Any, *, options: Optional[Dict[str, Any]] = None
             ) -> Dict[str, Any]:
    """The reshard spec (a dict, docs/spec.md) moving every DTensor of
    ``tensors`` (one, a dict by name, or a list) from its mesh and placements
    to its target: one ``(DeviceMesh, placements)`` pair for all, or a dict /
    list of them (``None`` keeps a tensor where it is). Tensors are named by
    their dict keys (``"[i]"`` in a list, ``"x"`` alone)."""
    leaves, names, per, _ = _flatten(tensors, targets)
    return _spec(leaves, names, per, options)


def _spec(leaves: List[Any], names: List[str], per: List[Optional[Target]],
          options: Optional[Dict[str, Any]] = None, ordinal: Optional[int] = None
          ) -> Dict[str, Any]:
    b = _SpecBuilder(ordinal)
    out = []
    for name, (shape, dtype, src, dst) in zip(names, _describe(leaves, names, per)):
        out.append({"name": name, "shape": list(shape), "dtype": dtype_name(dtype),
                    "src": layout_json(src[0], src[1], shape, b.mesh(src[0])),
                    "dst": layout_json(dst[0], dst[1], shape, b.mesh(dst[0]))})
    spec: Dict[str, Any] = {"meshes": b.meshes, "tensors": out}
    if options:
        spec["options"] = dict(options)
    return spec


def plan(tensors: Any, targets: Any, *, process: Optional[int] = None, **kwargs: Any) -> Plan:
    """Plans ``spec_for(tensors, targets)`` (see :func:`reshard.plan` for the
    keyword arguments; ``process``: only that rank's part)."""
    options = kwargs.pop("options", None)
    return _core.plan(spec_for(tensors, targets, options=options), process=process, **kwargs)


def _contiguous_stride(shape: Sequence[int]) -> Tuple[int, ...]:
    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(stride))


class _Prepared:
    """A plan of this rank's part with, per tensor, where this rank's source
    and destination entries are."""

    def __init__(self, leaves: List[Any], names: List[str], per: List[Optional[Target]],
                 executor: Executor, rank: int) -> None:
        self.executor = executor
        self.rank = rank
        self.described = _describe(leaves, names, per)
        self.cuda = bool(self.described) and self.described[0][2][0].device_type == "cuda"
        ordinal = None
        if self.cuda and executor.process is None:
            # One process (cuda_local): its devices are on the GPU of the
            # sources' local tensors (or the current device).
            locals_ = [x._local_tensor for x in leaves if x._local_tensor.is_cuda]
            ordinal = (locals_[0].device.index if locals_ else torch.cuda.current_device())
        self.ordinal = ordinal
        self.plan = _core.plan(_spec(leaves, names, per, ordinal=ordinal),
                               process=None if executor.process is None else rank)
        self.src_entry: List[Optional[int]] = []
        self.dst_entry: List[Optional[int]] = []
        for t, (shape, dtype, src, dst) in zip(self.plan.tensors, self.described):
            mine = []
            for lay in (t.src, t.dst):
                idx = [i for i, e in enumerate(lay.entries) if e.device == rank]
                if len(idx) > 1:  # a rank is one device of a DeviceMesh
                    raise InvalidArgumentError(f"tensors[{t.name}]: rank {rank} holds "
                                               f"{len(idx)} entries")
                mine.append(idx[0] if idx else None)
            self.src_entry.append(mine[0])
            self.dst_entry.append(mine[1])

    def _device(self) -> torch.device:
        if not self.cuda:
            return torch.device("cpu")
        if self.ordinal is not None:
            return torch.device("cuda", self.ordinal)
        return torch.device("cuda", int(getattr(self.executor, "device")))

    def sources(self, leaves: List[Any]) -> List[List[Any]]:
        out: List[List[Any]] = []
        for t, x, s in zip(self.plan.tensors, leaves, self.src_entry):
            row: List[Any] = [None] * len(t.src.entries)
            if s is not None:
                local = x._local_tensor if isinstance(x, DTensor) else x
                want = "cuda" if self.cuda else "cpu"
                if local.device.type != want:
                    raise InvalidArgumentError(
                        f"tensors[{t.name}]: local tensor on {local.device}, its mesh is a "
                        f"{want!r} mesh")
                row[s] = local if local.is_contiguous() else local.contiguous()
            out.append(row)
        return out

    def run(self, leaves: List[Any], outs: Optional[List[Optional[torch.Tensor]]] = None
            ) -> List[torch.Tensor]:
        """Executes on the leaves' local tensors; ``outs``: this rank's
        destination tensors (written in place), else new ones. Returns this
        rank's destination local tensors (empty ones off the target mesh)."""
        ts = self.plan.tensors
        sources = self.sources(leaves)
        destinations: List[List[Any]] = []
        result: List[torch.Tensor] = []
        device = self._device()
        for i, (t, x, d) in enumerate(zip(ts, leaves, self.dst_entry)):
            drow: List[Any] = [None] * len(t.dst.entries)
            out = None if outs is None else outs[i]
            if d is not None:
                if out is None:
                    out = torch.empty(t.dst.entries[d].shape, dtype=x.dtype, device=device)
                drow[d] = out
            elif out is None:
                out = torch.empty(0, dtype=x.dtype, device=device)
            destinations.append(drow)
            result.append(out)
        self.executor.execute(self.plan, sources, destinations)
        return result

    def wrap(self, locals_: List[torch.Tensor]) -> List[Any]:
        result = []
        for (shape, dtype, src, dst), out in zip(self.described, locals_):
            mesh, placements = dst
            result.append(DTensor.from_local(out, mesh, placements, run_check=False,
                                             shape=torch.Size(shape),
                                             stride=_contiguous_stride(shape)))
        return result


_CUDA_LOCAL: List[Executor] = []
_NCCL: Dict[Any, Executor] = {}
_UID_CALLS = [0]


def _default_cuda_executor() -> Executor:
    if not _CUDA_LOCAL:
        from ._cuda import CudaLocalExecutor
        _CUDA_LOCAL.append(CudaLocalExecutor())
    return _CUDA_LOCAL[0]


def nccl_executor(*, device: Optional[int] = None, comm: str = "reshard", stream: Any = "current",
                  timeout: float = 300.0, wait: bool = True, **options: Any) -> Executor:
    """A :class:`reshard.NcclExecutor` over the default process group's
    processes: plan process p is global rank p, this process's GPU is
    ``device`` (default ``torch.cuda.current_device()``). Collective: every
    rank calls it.

    comm: ``"reshard"`` (default): reshard creates its own non-blocking NCCL
        communicator from a unique id that rank 0 makes and sends to the
        others through the default group's store
        (``torch.distributed.distributed_c10d._get_default_store()``);
        ``"torch"``: the communicator of the default group's
        ``ProcessGroupNCCL`` (``pg._get_backend(cuda)._comm_ptr()``, a private
        torch API, after one all-reduce has made sure it exists); reshard
        never destroys it, cannot time out on it (torch's communicators are
        blocking), and its executions must not run concurrently with torch
        collectives on that group.
    stream: ``"current"`` (default): ``torch.cuda.current_stream(device)`` at
        creation, which the executor keeps for its life; ``None``: its own
        stream; or a ``torch.cuda.Stream`` / ``cudaStream_t`` int.
    timeout, wait, options: see :class:`reshard.NcclExecutor`.
    """
    from ._cuda import NcclExecutor, nccl_unique_id
    if not dist.is_initialized():
        raise InvalidArgumentError("nccl_executor: torch.distributed is not initialised "
                                   "(init_process_group first)")
    rank, world = dist.get_rank(), dist.get_world_size()
    if device is None:
        device = torch.cuda.current_device()
    if isinstance(stream, str):
        if stream != "current":
            raise InvalidArgumentError(f"stream: unknown {stream!r} (\"current\", None, a "
                                       "torch.cuda.Stream or an int)")
        stream = torch.cuda.current_stream(device).cuda_stream
    if comm == "torch":
        pg = dist.distributed_c10d._get_default_group()
        try:
            backend = pg._get_backend(torch.device("cuda", device))
        except RuntimeError as e:
            raise UnsupportedError(f"comm: the default group has no CUDA backend ({e}); use "
                                   "comm=\"reshard\"") from None
        get_ptr = getattr(backend, "_comm_ptr", None)
        if get_ptr is None:
            raise UnsupportedError(f"comm: the default group's backend "
                                   f"{type(backend).__name__} has no _comm_ptr() (not NCCL, or "
                                   "a torch without it); use comm=\"reshard\"")
        dist.all_reduce(torch.zeros(1, device=torch.device("cuda", device)))  # creates the comm
        torch.cuda.synchronize(device)
        ptr = int(get_ptr() if callable(get_ptr) else get_ptr)
        if ptr == 0:
            raise UnsupportedError("comm: ProcessGroupNCCL._comm_ptr() returned 0 (no "
                                   "communicator yet); use comm=\"reshard\"")
        return NcclExecutor(device, comm=ptr, rank=rank, stream=stream, timeout=timeout,
                            wait=wait, **options)
    if comm != "reshard":
        raise InvalidArgumentError(f"comm: unknown {comm!r} (\"reshard\" or \"torch\")")
    store = dist.distributed_c10d._get_default_store()
    key = f"reshard/nccl_unique_id/{_UID_CALLS[0]}"
    _UID_CALLS[0] += 1
    if rank == 0:
        try:
            uid = nccl_unique_id()
        except Exception as e:  # tell the others instead of leaving them waiting
            store.set(key, b"error:" + str(e).encode())
            raise
        store.set(key, uid)
    else:
        uid = bytes(store.get(key))
        if uid.startswith(b"error:"):
            raise UnsupportedError(f"nccl_executor: rank 0 could not make an NCCL unique id: "
                                   f"{uid[6:].decode(errors='replace')}")
    return NcclExecutor(device, rank=rank, size=world, unique_id=uid, stream=stream,
                        timeout=timeout, wait=wait, **options)


def _default_nccl_executor() -> Executor:
    pg = dist.distributed_c10d._get_default_group()
    key = (id(pg), torch.cuda.current_device())
    ex = _NCCL.get(key)
    if ex is None:
        ex = _NCCL[key] = nccl_executor()
    return ex


def _pick_executor(executor: Optional[Executor], cuda: bool) -> Tuple[Executor, int]:
    """The executor (the one given, or a default) and this process's rank,
    after checking they fit the tensors' memory and the process group."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    ex = executor
    if ex is None:
        if cuda:
            ex = _default_cuda_executor() if world == 1 else _default_nccl_executor()
        elif world != 1:
            raise InvalidArgumentError(f"executor: None with {world} processes; pass a "
                                       "reshard.MPIExecutor(comm) whose rank is the global rank")
        else:
            return _core._default_executor(), rank
    if cuda and getattr(ex, "memory", "host") != "cuda":
        raise InvalidArgumentError(f"executor: a {ex.transport} executor (host memory) for CUDA "
                                   "tensors; pass reshard.CudaLocalExecutor() (one process) or "
                                   "reshard.torch.nccl_executor(), or None")
    if not cuda and getattr(ex, "memory", "host") == "cuda":
        raise InvalidArgumentError(f"executor: a {ex.transport} executor (CUDA memory) for CPU "
                                   "tensors; pass a host or MPI executor, or None")
    if ex.process is not None and ex.process != rank:
        raise InvalidArgumentError(f"executor: rank {ex.process} differs from "
                                   f"torch.distributed rank {rank}; plan process p must be "
                                   "global rank p")
    if ex.process is None and world != 1:
        raise InvalidArgumentError(f"executor: a {ex.transport} executor with {world} processes; "
                                   "pass a reshard.MPIExecutor(comm) (CPU) or "
                                   "reshard.torch.nccl_executor() (CUDA)")
    return ex, rank


class Redistributor:
    """Moves DTensors of one structure to fixed targets, planning once per
    distinct (shapes, dtypes, source and target meshes and placements): a
    weight-sync loop.

    targets: one ``(DeviceMesh, placements)`` pair, or a dict / list of them
        matching the tensors.
    executor: a :class:`reshard.MPIExecutor` whose rank is the global rank
        (``torch.distributed.get_rank()``), or ``None`` in a single process
        (a host executor).
    """

    def __init__(self, targets: Any, *, executor: Optional[Executor] = None,
                 cache_size: int = 32) -> None:
        self.targets = targets
        self.executor = executor
        self._cache: "collections.OrderedDict[Any, _Prepared]" = collections.OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _executor_and_rank(self, cuda: bool) -> Tuple[Executor, int]:
        return _pick_executor(self.executor, cuda)

    def prepared(self, tensors: Any) -> Tuple[_Prepared, List[Any], Any]:
        leaves, names, per, rebuild = _flatten(tensors, self.targets)
        key = (tuple(names), tuple((tuple(x.shape), x.dtype, x.device_mesh, tuple(x.placements),
                                    None if t is None else (t[0], tuple(t[1])))
                                   for x, t in zip(leaves, per)))
        with self._lock:
            prep = self._cache.get(key)
            if prep is not None:
                self._cache.move_to_end(key)
        if prep is None:
            ex, rank = self._executor_and_rank(bool(leaves) and
                                               leaves[0].device_mesh.device_type == "cuda")
            prep = _Prepared(leaves, names, per, ex, rank)
            with self._lock:
                self._cache[key] = prep
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return prep, leaves, rebuild

    def plan(self, tensors: Any) -> Plan:
        """The (cached) plan for ``tensors``."""
        return self.prepared(tensors)[0].plan

    def __call__(self, tensors: Any) -> Any:
        """``tensors`` moved to the targets, as new DTensors (same structure)."""
        prep, leaves, rebuild = self.prepared(tensors)
        return rebuild(prep.wrap(prep.run(leaves)))


def as_dtensor(local: Optional[torch.Tensor], mesh: DeviceMesh, placements: Sequence[Placement],
               shape: Sequence[int]) -> DTensor:
    """A plain tensor holding this rank's shard of a tensor of global
    ``shape`` laid out by ``placements`` on ``mesh``, as a DTensor (no copy,
    no communication: ``DTensor.from_local`` with the shape given and
    ``run_check=False``), for :func:`redistribute` and :class:`Redistributor`.
    ``None`` on ranks off ``mesh``. The local tensor's shape is checked when
    it is moved (it must be DTensor's shard of this rank)."""
    shape = tuple(int(n) for n in shape)
    if local is None:
        local = torch.empty(0, device=mesh.device_type if mesh.device_type == "cpu" else
                            torch.device(mesh.device_type, torch.cuda.current_device()))
    return DTensor.from_local(local, mesh, tuple(placements), run_check=False,
                              shape=torch.Size(shape), stride=_contiguous_stride(shape))


class WeightSync:
    """Writes a trainer's weights into an inference engine's parameters in
    place: the RL weight-sync step (trainer layout -> inference layout, on
    CPU tensors over MPI or CUDA tensors over NCCL / in one process).

    params: name -> the inference parameter this rank holds, either a
        DTensor (its local tensor is written) or a ``(tensor, mesh,
        placements)`` triple whose ``tensor`` is this rank's local shard
        (a plain tensor, as an inference engine keeps it; ``None`` or an
        empty tensor on ranks off ``mesh``). Local tensors must be
        contiguous and exactly their shard's shape; they are written in
        place, never replaced.
    executor: as for :class:`Redistributor` (``None``: the host executor or
        ``CudaLocalExecutor`` in one process, :func:`nccl_executor` for CUDA
        tensors over several processes).
    strict: refuse state-dict entries that ``params`` lacks (default: they
        are not moved).

    ``sync(state_dict)`` (collective) moves every entry of ``params`` from
    ``state_dict[name]`` (a DTensor, or a ``(tensor, mesh, placements)``
    triple of the trainer's local shard) and returns ``params``' local
    tensors. The plan is made on the first call and reused while shapes,
    dtypes, meshes and placements stay the same.
    """

    def __init__(self, params: Dict[str, Any], *, executor: Optional[Executor] = None,
                 strict: bool = False) -> None:
        if not isinstance(params, dict):
            raise TypeError(f"params: expected a dict of name -> DTensor or (tensor, mesh, "
                            f"placements), got {type(params).__name__}")
        self.names = [str(k) for k in params]
        self.params = params
        self.executor = executor
        self.strict = strict
        self.dst: List[Tuple[Optional[torch.Tensor], DeviceMesh, Tuple[Placement, ...]]] = []
        for k, v in params.items():
            if isinstance(v, DTensor):
                self.dst.append((v._local_tensor, v.device_mesh, tuple(v.placements)))
            elif (isinstance(v, tuple) and len(v) == 3 and isinstance(v[1], DeviceMesh)
                  and isinstance(v[2], (list, tuple))):
                if v[0] is not None and not isinstance(v[0], torch.Tensor):
                    raise TypeError(f"params[{k!r}][0]: expected a tensor or None, got "
                                    f"{type(v[0]).__name__}")
                self.dst.append((v[0], v[1], tuple(v[2])))
            else:
                raise TypeError(f"params[{k!r}]: expected a DTensor or a (tensor, mesh, "
                                f"placements) triple, got {type(v).__name__}")
        self._cache: Dict[Any, _Prepared] = {}

    def _source(self, name: str, x: Any, dst_shape: Optional[Tuple[int, ...]]) -> DTensor:
        if isinstance(x, DTensor):
            return x
        if (isinstance(x, tuple) and len(x) == 3 and isinstance(x[1], DeviceMesh)
                and isinstance(x[2], (list, tuple))):
            local = x[0] if x[0] is not None else torch.empty(0)
            if dst_shape is None:
                raise InvalidArgumentError(f"state_dict[{name!r}]: a (tensor, mesh, placements) "
                                           "triple needs its global shape from a DTensor "
                                           f"params[{name!r}]")
            return DTensor.from_local(local, x[1], tuple(x[2]), run_check=False,
                                      shape=torch.Size(dst_shape),
                                      stride=_contiguous_stride(dst_shape))
        raise TypeError(f"state_dict[{name!r}]: expected a DTensor or a (tensor, mesh, "
                        f"placements) triple, got {type(x).__name__}")

    def __call__(self, state_dict: Any) -> List[torch.Tensor]:
        if self.strict:
            extra = sorted(set(map(str, state_dict)) - set(self.names))
            if extra:
                raise InvalidArgumentError(f"state_dict: {len(extra)} entries params lacks: "
                                           f"{extra[:5]}")
        missing = [n for n in self.names if n not in state_dict]
        if missing:
            raise InvalidArgumentError(f"state_dict: lacks {len(missing)} of params' entries: "
                                       f"{missing[:5]}")
        leaves, targets, outs = [], [], []
        for name, (local, mesh, placements) in zip(self.names, self.dst):
            p = self.params[name]
            dshape = tuple(int(n) for n in p.shape) if isinstance(p, DTensor) else None
            x = self._source(name, state_dict[name], dshape)
            if dshape is not None and tuple(x.shape) != dshape:
                raise InvalidArgumentError(f"params[{name!r}]: global shape {dshape}, "
                                           f"state_dict[{name!r}] is {tuple(x.shape)}")
            if local is not None and local.numel() > 0 and local.dtype != x.dtype:
                raise InvalidArgumentError(f"params[{name!r}]: dtype {local.dtype}, "
                                           f"state_dict[{name!r}] is {x.dtype} (reshard moves "
                                           "bytes; convert the trainer's weights first)")
            leaves.append(x)
            targets.append((mesh, placements))
            outs.append(local)
        key = tuple((tuple(x.shape), x.dtype, x.device_mesh, tuple(x.placements), t[0], t[1])
                    for x, t in zip(leaves, targets))
        prep = self._cache.get(key)
        if prep is None:
            cuda = bool(leaves) and leaves[0].device_mesh.device_type == "cuda"
            ex, rank = _pick_executor(self.executor, cuda)
            prep = _Prepared(leaves, list(self.names), list(targets), ex, rank)
            self._cache.clear()
            self._cache[key] = prep
        for name, o, d in zip(self.names, outs, prep.dst_entry):
            if d is not None and o is None:
                raise InvalidArgumentError(f"params[{name!r}]: None on rank {prep.rank}, which "
                                           "is on its mesh: pass this rank's local tensor")
        # Ranks off a destination mesh hold no entry: their outs are unused.
        return prep.run(leaves, [o if d is not None else None
                                 for o, d in zip(outs, prep.dst_entry)])


def redistribute(tensors: Any, targets: Any, *, executor: Optional[Executor] = None) -> Any:
    """Returns ``tensors`` (a DTensor, or a dict / list of them) moved to
    ``targets`` (one ``(DeviceMesh, placements)`` pair, or a dict / list of
    them): new DTensors with the same global values, on any mesh. Collective
    over the default process group; ``executor``: a
    :class:`reshard.MPIExecutor` when there are several processes. For a
    loop, hold a :class:`Redistributor`; this function keeps one per
    (targets, executor) too, so repeated calls plan once."""
    try:
        key = (_target_key(targets), id(executor))
        hash(key)
    except TypeError:
        return Redistributor(targets, executor=executor)(tensors)
    r = _REDISTRIBUTORS.get(key)
    if r is None or r.executor is not executor:
        if len(_REDISTRIBUTORS) > 64:
            _REDISTRIBUTORS.clear()
        r = _REDISTRIBUTORS[key] = Redistributor(targets, executor=executor)
    return r(tensors)


_REDISTRIBUTORS: Dict[Any, Redistributor] = {}


def _target_key(targets: Any) -> Any:
    if targets is None or _is_target(targets):
        return None if targets is None else (targets[0], tuple(targets[1]))
    if isinstance(targets, dict):
        return ("dict", tuple((k, _target_key(v)) for k, v in targets.items()))
    if isinstance(targets, (list, tuple)):
        return ("seq", tuple(_target_key(v) for v in targets))
    raise TypeError("unhashable")
