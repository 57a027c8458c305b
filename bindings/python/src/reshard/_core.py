"""The core API: plans, executors and host buffers, over the C ABI."""
from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import weakref
from dataclasses import dataclass, replace
from typing import (Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union)

import numpy as np

from ._ffi import (LIBRARY_PATH, MACROS, InvalidArgumentError, UnsupportedError, api, check,
                   ffi)

SCRATCH_ENTRY: int = MACROS["RESHARD_SCRATCH_ENTRY"]
"""A piece's ``src_entry`` or ``dst_entry`` naming a scratch buffer (C ABI 1.6;
:meth:`Plan.scratch`) instead of a layout entry."""

Spec = Union[Mapping[str, Any], str, "os.PathLike[str]"]
BufferLike = Any
"""A host buffer: a NumPy array, anything with ``__dlpack__`` on the CPU
(JAX, PyTorch, CuPy's host arrays...) or the buffer protocol, or ``None``
for an entry this process does not hold."""
Buffers = Union[Mapping[str, Sequence[Optional[BufferLike]]], Sequence[Sequence[Optional[BufferLike]]]]

SRC = 1  # RESHARD_SIDE_SRC
DST = 2  # RESHARD_SIDE_DST

# reshard dtype name -> NumPy dtype name (bf16 and f8 need ml_dtypes, which JAX installs).
_NUMPY_NAMES = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
    "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "i64": "int64", "i32": "int32",
    "i16": "int16", "i8": "int8", "u64": "uint64", "u32": "uint32", "u16": "uint16",
    "u8": "uint8", "bool": "bool", "e8m0": "float8_e8m0fnu",
}
_FROM_NUMPY = {v: k for k, v in _NUMPY_NAMES.items()}
# NumPy dtype -> reshard dtype name, for the dtypes NumPy has without ml_dtypes.
_FROM_NUMPY_DTYPE = {np.dtype(v): k for k, v in _NUMPY_NAMES.items()
                     if v not in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")}
# Bytes per element, without NumPy dtypes (bf16 and f8 need ml_dtypes there).
_ITEMSIZE = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "f8e4m3": 1, "f8e5m2": 1, "i64": 8,
             "i32": 4, "i16": 2, "i8": 1, "u64": 8, "u32": 4, "u16": 2, "u8": 1, "bool": 1,
             "e8m0": 1}  # e8m0: MXFP8 scale tensors only
# DLPack dtypes NumPy's from_dlpack refuses: (code, bits) -> reshard dtype name
# (DLPack 1.1 codes: kDLBfloat, kDLFloat8_e4m3fn, kDLFloat8_e5m2; kDLBool for
# NumPy versions that lack it). _from_dlpack relabels them as the unsigned
# integer of their width for NumPy to read.
_RELABEL = {(4, 16): "bf16", (10, 8): "f8e4m3", (12, 8): "f8e5m2", (6, 8): "bool"}
_NOT_IN_NUMPY = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")  # dtype names (JAX, PyTorch)
_DLUINT = 1
# struct module format characters of the buffer protocol -> reshard dtype name.
_FROM_FORMAT = {"d": "f64", "f": "f32", "e": "f16", "q": "i64", "l": "i64", "i": "i32",
                "h": "i16", "b": "i8", "Q": "u64", "L": "u64", "I": "u32", "H": "u16",
                "B": "u8", "?": "bool"}
_BOUND_KINDS = {0: "none", 1: "device_recv", 2: "device_send", 3: "host_recv", 4: "host_send"}
_DLCPU, _DLCUDAHOST = 1, 3

_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a reshard dtype name (``"bf16"`` needs ``ml_dtypes``)."""
    n = _NUMPY_NAMES[dtype_name(name)]
    if n in _NOT_IN_NUMPY:
        import ml_dtypes  # noqa: F401  (registers the names with NumPy)
        return np.dtype(getattr(ml_dtypes, n))
    return np.dtype(n)


def dtype_name(dtype: Any) -> str:
    """The reshard name (``"f32"``, ``"bf16"``, ...) of a reshard name, a NumPy
    dtype, or anything ``numpy.dtype`` accepts (JAX and ml_dtypes dtypes)."""
    if isinstance(dtype, str) and dtype.lower() in ("e8m0", "float8_e8m0fnu"):
        return "e8m0"  # MXFP8 scale tensors; the C ABI parses no name for it
    if isinstance(dtype, str) and not dtype.startswith(("float", "int", "uint", "bfloat", "bool")):
        out = ffi.new("int32_t*")
        check(api.dtype_from_name(dtype.encode(), out))
        return ffi.string(api.dtype_name(out[0])).decode()
    name = np.dtype(dtype).name
    if name not in _FROM_NUMPY:
        raise InvalidArgumentError(f"dtype: {name} has no reshard equivalent "
                                   f"(supported: {', '.join(_FROM_NUMPY)})")
    return _FROM_NUMPY[name]


def _dtype_code(name: str) -> int:
    out = ffi.new("int32_t*")
    check(api.dtype_from_name(name.encode(), out))
    return int(out[0])


# ------------------------------------------------------------------ plans
@dataclass(frozen=True)
class Entry:
    """One shard of a layout: the box ``[lo, hi)`` of summand ``summand`` on
    ``device``. Its buffer is dense, row-major, of shape ``hi - lo``."""
    device: int
    summand: int
    lo: Tuple[int, ...]
    hi: Tuple[int, ...]

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(h - l for l, h in zip(self.lo, self.hi))

    @property
    def index(self) -> Tuple[slice, ...]:
        """The box as a tuple of slices into the global array."""
        return tuple(slice(l, h) for l, h in zip(self.lo, self.hi))


@dataclass(frozen=True)
class Layout:
    """A tensor's source or destination layout: entries sorted by device."""
    entries: Tuple[Entry, ...]
    num_summands: int
    op: str  # "sum", "max", "min", "mean"


@dataclass(frozen=True)
class Tensor:
    """A tensor of a plan: buffers are passed per entry of ``src`` / ``dst``.
    Source buffers hold ``dtype``, destination buffers ``dst_dtype`` (the
    same unless the plan casts the tensor in flight: docs/spec.md "Casts")."""
    index: int
    name: str
    shape: Tuple[int, ...]
    dtype: str  # reshard name: "f32", "bf16", ...
    src: Layout
    dst: Layout
    dst_dtype: str
    #: Block scales (docs/spec.md "Block scales"): the index of the tensor
    #: that holds this tensor's scales (f32, shape ceil(shape / block)) and
    #: the block's extent per dim; None without. A scale tensor takes
    #: destination buffers only: the executor computes its source.
    scale_tensor: Optional[int] = None
    scale_block: Optional[Tuple[int, ...]] = None

    @property
    def numpy_dtype(self) -> np.dtype:
        """The NumPy dtype of the source buffers."""
        return numpy_dtype(self.dtype)

    @property
    def dst_numpy_dtype(self) -> np.dtype:
        """The NumPy dtype of the destination buffers."""
        return numpy_dtype(self.dst_dtype)

    def side(self, dst: bool) -> "Tensor":
        """This tensor as one side's buffers see it: ``dtype`` is the
        destination's for ``dst`` (the buffer checks read ``dtype``)."""
        return replace(self, dtype=self.dst_dtype) if dst and self.dst_dtype != self.dtype else self


def _spec_text(spec: Spec) -> bytes:
    if isinstance(spec, Mapping):
        return json.dumps(spec).encode()
    if isinstance(spec, (bytes, bytearray)):
        return bytes(spec)
    if isinstance(spec, str) and spec.lstrip().startswith("{"):
        return spec.encode()
    if isinstance(spec, (str, os.PathLike)):
        with open(spec, "rb") as f:
            return f.read()
    raise TypeError(f"spec: expected a dict, JSON text or a path, got {type(spec).__name__}")


@dataclass(frozen=True)
class FlatTensor:
    """A tensor of a flat layout: its index in the plan (``plan.tensors``)
    and, per entry of its flat-side layout, the rank whose flat buffer holds
    that box and the byte offset there."""
    tensor: int
    ranks: Tuple[int, ...]
    byte_offsets: Tuple[int, ...]


@dataclass(frozen=True)
class Flat:
    """A flat layout of a spec (docs/spec.md, "Flat layouts"): one buffer
    per rank holding its tensors' boxes back to back (FSDP1 flat parameters,
    ZeRO-3 partitions, Megatron buckets, vLLM's fused qkv and gate_up
    parameters), as their source or destination."""
    name: str
    is_source: bool
    devices: Tuple[int, ...]  # per rank
    shard_bytes: int          # of every rank's buffer
    tensors: Tuple[FlatTensor, ...]  # in buffer order

    def views(self, plan: "Plan", buffers: Sequence[Any]) -> Dict[int, List[Any]]:
        """Per tensor of this layout (by index in ``plan.tensors``), its
        entries' shard buffers as views into the ranks' flat buffers, shaped
        and typed like each entry's box: pass ``out[t]`` as tensor ``t``'s
        sources (or destinations). ``buffers[r]`` is rank r's flat buffer, at
        least ``shard_bytes`` long and contiguous: a NumPy array, a torch
        tensor (on any device; the views stay on it) or a writable bytes
        object (bytearray, memoryview)."""
        if len(buffers) != len(self.devices):
            raise InvalidArgumentError(f"buffers: {len(buffers)} given, flat layout {self.name!r} "
                                       f"has {len(self.devices)} ranks")
        raw = [_flat_bytes(b, f"buffers[{r}]", self.shard_bytes) for r, b in enumerate(buffers)]
        out: Dict[int, List[Any]] = {}
        for ft in self.tensors:
            t = plan.tensors[ft.tensor]
            layout = t.src if self.is_source else t.dst
            views = []
            for e, rank, off in zip(layout.entries, ft.ranks, ft.byte_offsets):
                n = int(np.prod(e.shape, dtype=np.int64)) * int(api.dtype_size(_dtype_code(t.dtype)))
                views.append(_flat_view(raw[rank], off, n, t.dtype, e.shape))
            out[ft.tensor] = views
        return out


def _flat_bytes(buf: Any, where: str, need: int) -> Any:
    """A flat buffer as a 1-D byte array of its own kind (torch or NumPy)."""
    mod = type(buf).__module__
    if mod.startswith("torch"):
        if not buf.is_contiguous():
            raise InvalidArgumentError(f"{where}: not contiguous")
        import torch
        flat = buf.reshape(-1).view(torch.uint8)
        size = flat.numel()
    else:
        arr = np.asarray(buf)
        if not arr.flags.c_contiguous:
            raise InvalidArgumentError(f"{where}: not contiguous")
        flat = arr.reshape(-1).view(np.uint8)
        size = flat.size
    if size < need:
        raise InvalidArgumentError(f"{where}: {size} bytes, the flat layout needs {need}")
    return flat


def _flat_view(flat: Any, offset: int, nbytes: int, dtype: str, shape: Tuple[int, ...]) -> Any:
    part = flat[offset:offset + nbytes]
    if type(flat).__module__.startswith("torch"):
        import torch
        return part.view(getattr(torch, _NUMPY_NAMES[dtype])).view(shape)  # torch's names
    return part.view(numpy_dtype(dtype)).reshape(shape)


def _read_flats(inp: Any) -> Tuple[Flat, ...]:
    """The flat layouts of a plan input (ABI 1.10); none from older libraries."""
    if int(api.abi_minor) < 10:
        return ()
    count = ffi.new("size_t*")
    check(api.plan_input_num_flats(inp, count))
    flats = []
    for f in range(int(count[0])):
        name = ffi.new("char**")
        is_src = ffi.new("int32_t*")
        world = ffi.new("size_t*")
        ntens = ffi.new("size_t*")
        shard = ffi.new("int64_t*")
        check(api.plan_input_flat_info(inp, f, ffi.cast("const char**", name), is_src, world,
                                       ntens, shard))
        devices = []
        dev = ffi.new("int64_t*")
        for r in range(int(world[0])):
            check(api.plan_input_flat_device(inp, f, r, dev))
            devices.append(int(dev[0]))
        tensors = []
        tidx = ffi.new("size_t*")
        nent = ffi.new("size_t*")
        for k in range(int(ntens[0])):
            check(api.plan_input_flat_tensor(inp, f, k, tidx, nent, 0, ffi.NULL, ffi.NULL))
            n = int(nent[0])
            ranks = ffi.new("uint64_t[]", max(n, 1))
            offs = ffi.new("int64_t[]", max(n, 1))
            check(api.plan_input_flat_tensor(inp, f, k, tidx, nent, n, ranks, offs))
            tensors.append(FlatTensor(int(tidx[0]), tuple(int(ranks[i]) for i in range(n)),
                                      tuple(int(offs[i]) for i in range(n))))
        flats.append(Flat(ffi.string(ffi.cast("const char*", name[0])).decode(), bool(is_src[0]),
                          tuple(devices), int(shard[0]), tuple(tensors)))
    return tuple(flats)


class Plan:
    """A reshard plan (``reshard_plan_t``): immutable, thread-safe.

    Make one with :func:`reshard.plan` or :meth:`Plan.from_bytes`.
    """

    __slots__ = ("_ptr", "_tensors", "_tables", "_by_name", "_flats", "__weakref__")

    def __init__(self, ptr: Any, flats: Tuple[Flat, ...] = ()) -> None:
        self._ptr = ffi.gc(ptr, api.plan_destroy)
        self._tensors: Optional[Tuple[Tensor, ...]] = None
        self._by_name: Optional[Dict[str, int]] = None
        self._tables: Dict[Any, Any] = {}
        self._flats = flats

    @property
    def flats(self) -> Tuple[Flat, ...]:
        """The flat layouts of the spec this plan was made from (by name);
        empty for a plan decoded from bytes (they are the spec's, not the
        plan's)."""
        return self._flats

    def flat(self, name: str) -> Flat:
        """The flat layout ``name`` (:attr:`flats`)."""
        for f in self._flats:
            if f.name == name:
                return f
        raise InvalidArgumentError(f"flat: no flat layout {name!r} (the plan has "
                                   f"{', '.join(repr(f.name) for f in self._flats) or 'none'})")

    # -- bytes
    @classmethod
    def from_bytes(cls, data: Union[bytes, bytearray, memoryview],
                   key: Optional[Union[bytes, bytearray, memoryview]] = None) -> "Plan":
        """Verifies and decodes plan bytes (from :meth:`to_bytes`, ``reshard plan
        --out`` or any binding). Corrupt bytes raise :class:`CorruptError`.

        With ``key`` (16 to 1024 bytes) the bytes must carry an HMAC-SHA-256
        under it (:meth:`to_bytes` with ``key``, ``reshard plan --key-file``):
        :class:`CorruptError` "mac: missing" or "mac: does not match"
        otherwise; a bad key is :class:`InvalidArgumentError` naming
        ``options->key_size``. Without one a MAC is not checked."""
        buf = ffi.from_buffer(data)
        out = ffi.new("reshard_plan_t**")
        if key is None:
            check(api.plan_deserialize(buf, len(buf), out))
        else:
            opts, keep = _deserialize_options(key)
            check(api.plan_deserialize_with_options(buf, len(buf), opts, out))
            del keep
        return cls(out[0])

    def to_bytes(self, process: Optional[int] = None,
                 key: Optional[Union[bytes, bytearray, memoryview]] = None) -> bytes:
        """The plan's FlatBuffers bytes: every part it holds, or only the part of
        ``process`` (a worker's bytes). With ``key`` (16 to 1024 bytes) they end
        with an HMAC-SHA-256 trailer under it (docs/design.md §4)."""
        opts = ffi.new("reshard_serialize_options_t*")
        opts.struct_size = ffi.sizeof("reshard_serialize_options_t")
        opts.all_parts = 1 if process is None else 0
        opts.process = 0 if process is None else process
        keep = None
        if key is not None:
            _require_mac_abi()
            keep = _key_buffer(key)
            opts.key = keep
            opts.key_size = len(bytes(key))
        out = ffi.new("reshard_buffer_t**")
        check(api.plan_serialize(self._ptr, opts, out))
        del keep
        try:
            return bytes(ffi.buffer(api.buffer_data(out[0]), api.buffer_size(out[0])))
        finally:
            api.buffer_destroy(out[0])

    # -- identity and statistics
    @property
    def fingerprint(self) -> int:
        """Hash of the plan's canonical inputs (equal on every process that
        planned the same inputs)."""
        out = ffi.new("uint64_t*")
        check(api.plan_fingerprint(self._ptr, out))
        return int(out[0])

    @property
    def stats(self) -> Dict[str, Any]:
        """Global statistics (``reshard_plan_stats_t`` as a dict): bytes,
        messages, pieces, rounds, lower bounds, cost estimates. Raises
        :class:`UnsupportedError` for a worker's part planned without them."""
        s = ffi.new("reshard_plan_stats_t*")
        s.struct_size = ffi.sizeof("reshard_plan_stats_t")
        check(api.plan_stats(self._ptr, s))
        out: Dict[str, Any] = {}
        for name, _ in ffi.typeof("reshard_plan_stats_t").fields:
            if name == "struct_size" or name.startswith("reserved"):
                continue
            v = getattr(s, name)
            out[name] = _BOUND_KINDS.get(int(v), str(v)) if name == "lower_bound_binding" else v
        return out

    def device_traffic(self) -> List[Dict[str, int]]:
        """Per device (sorted by id): bytes and messages sent, received and
        copied locally."""
        n = self.stats["num_devices"]
        t = ffi.new("reshard_device_traffic_t*")
        rows = []
        for i in range(n):
            t.struct_size = ffi.sizeof("reshard_device_traffic_t")
            check(api.plan_device_traffic(self._ptr, i, t))
            rows.append({k: int(getattr(t, k)) for k, _ in ffi.typeof("reshard_device_traffic_t").fields
                         if k != "struct_size"})
        return rows

    # -- tensors
    @property
    def tensors(self) -> Tuple[Tensor, ...]:
        """The plan's tensors, in plan order, with both layouts."""
        if self._tensors is None:
            self._tensors = tuple(self._read_tensor(t) for t in range(self._num_tensors()))
            self._by_name = {t.name: t.index for t in self._tensors}
        return self._tensors

    def tensor(self, name: str) -> Tensor:
        """The tensor called ``name``."""
        self.tensors
        assert self._by_name is not None
        if name not in self._by_name:
            raise KeyError(f"plan has no tensor {name!r}")
        return self._tensors[self._by_name[name]]  # type: ignore[index]

    def _num_tensors(self) -> int:
        n = ffi.new("size_t*")
        check(api.plan_num_tensors(self._ptr, n))
        return int(n[0])

    def _read_tensor(self, t: int) -> Tensor:
        p = self._ptr
        name = ffi.new("const char**")
        check(api.plan_tensor_name(p, t, name))
        dt = ffi.new("int32_t*")
        check(api.plan_tensor_dtype(p, t, dt))
        ddt = ffi.new("int32_t*")
        check(api.plan_tensor_dst_dtype(p, t, ddt))
        rank = ffi.new("size_t*")
        check(api.plan_tensor_rank(p, t, rank))
        r = int(rank[0])
        shape = ffi.new("int64_t[]", max(r, 1))
        check(api.plan_tensor_shape(p, t, shape))
        layouts = []
        for side in (SRC, DST):
            n = ffi.new("size_t*")
            check(api.plan_tensor_num_entries(p, t, side, n))
            dev = ffi.new("int64_t*")
            summand = ffi.new("int32_t*")
            lo = ffi.new("int64_t[]", 8)
            hi = ffi.new("int64_t[]", 8)
            entries = []
            for e in range(int(n[0])):
                check(api.plan_tensor_entry(p, t, side, e, dev, summand, lo, hi))
                entries.append(Entry(int(dev[0]), int(summand[0]), tuple(lo[0:r]), tuple(hi[0:r])))
            ns = ffi.new("int32_t*")
            op = ffi.new("int32_t*")
            check(api.plan_tensor_partial(p, t, side, ns, op))
            layouts.append(Layout(tuple(entries), int(ns[0]),
                                  {1: "sum", 2: "max", 3: "min", 4: "mean"}.get(int(op[0]), "sum")))
        scale_tensor: Optional[int] = None
        scale_block: Optional[Tuple[int, ...]] = None
        if int(api.abi_minor) >= 12:  # reshard_plan_tensor_scales
            st = ffi.new("int64_t*")
            block = ffi.new("int64_t[]", max(r, 1))
            check(api.plan_tensor_scales(p, t, st, block))
            if int(st[0]) >= 0:
                scale_tensor, scale_block = int(st[0]), tuple(block[0:r])
        return Tensor(t, ffi.string(name[0]).decode(), tuple(shape[0:r]),
                      ffi.string(api.dtype_name(dt[0])).decode(), layouts[0], layouts[1],
                      ffi.string(api.dtype_name(ddt[0])).decode(), scale_tensor, scale_block)

    # -- processes
    @property
    def processes(self) -> Tuple[int, ...]:
        """The processes that own at least one device of the plan (sorted)."""
        n = ffi.new("size_t*")
        check(api.plan_num_processes(self._ptr, n))
        out = ffi.new("int32_t*")
        procs = []
        for i in range(int(n[0])):
            check(api.plan_process(self._ptr, i, out))
            procs.append(int(out[0]))
        return tuple(procs)

    def has_part(self, process: int) -> bool:
        """Whether the plan holds the part (pieces and messages) of ``process``."""
        out = ffi.new("int32_t*")
        check(api.plan_has_part(self._ptr, process, out))
        return bool(out[0])

    def part_info(self, process: int) -> Dict[str, int]:
        """Sizes of the part of ``process``: local pieces, messages sent and
        received and their pieces."""
        info = ffi.new("reshard_part_info_t*")
        info.struct_size = ffi.sizeof("reshard_part_info_t")
        check(api.plan_part_info(self._ptr, process, info))
        return {k: int(getattr(info, k)) for k, _ in ffi.typeof("reshard_part_info_t").fields
                if k != "struct_size"}

    def scratch(self, process: int) -> List[Dict[str, Any]]:
        """The scratch buffers of ``process``'s part (C ABI 1.6), sorted by tensor,
        device, then box: each a dict with ``tensor``, ``device``, ``bytes`` and
        its box ``lo``, ``hi`` (global coordinates). A scratch starts at the
        identity of its tensor's reduce op, pieces written into it combine, and
        pieces of later stages read it once complete; pieces name it with
        ``src_entry`` or ``dst_entry`` equal to ``SCRATCH_ENTRY``."""
        if int(api.abi_minor) < 6:
            raise UnsupportedError(f"scratch: {LIBRARY_PATH} has C ABI "
                                   f"{int(api.abi_major)}.{int(api.abi_minor)}; "
                                   f"scratch buffers need 1.6")
        n = self.part_info(process)["num_scratch"]
        x = ffi.new("reshard_scratch_t*")
        x.struct_size = ffi.sizeof("reshard_scratch_t")
        lo = ffi.new("int64_t[%d]" % MACROS["RESHARD_MAX_RANK"])
        hi = ffi.new("int64_t[%d]" % MACROS["RESHARD_MAX_RANK"])
        out: List[Dict[str, Any]] = []
        for i in range(n):
            check(api.plan_part_scratch(self._ptr, process, i, x, lo, hi))
            rank = len(self.tensors[int(x.tensor)].shape)
            out.append({"tensor": int(x.tensor), "device": int(x.device), "bytes": int(x.bytes),
                        "lo": [int(lo[d]) for d in range(rank)],
                        "hi": [int(hi[d]) for d in range(rank)]})
        return out

    def device_location(self, device: int) -> Tuple[int, int, int]:
        """``(process, host, ordinal)`` of a plan device."""
        out = ffi.new("int32_t[3]")
        check(api.plan_device_location(self._ptr, device, out, out + 1, out + 2))
        return int(out[0]), int(out[1]), int(out[2])

    def local_entries(self, process: int) -> List[Tuple[List[int], List[int]]]:
        """Per tensor, the source and destination entry indices whose device is on
        ``process``."""
        key = ("local", process)
        if key not in self._tables:
            loc: Dict[int, int] = {}

            def proc(d: int) -> int:
                if d not in loc:
                    loc[d] = self.device_location(d)[0]
                return loc[d]
            self._tables[key] = [
                ([i for i, e in enumerate(t.src.entries) if proc(e.device) == process],
                 [i for i, e in enumerate(t.dst.entries) if proc(e.device) == process])
                for t in self.tensors]
        return self._tables[key]

    # -- host-buffer helpers
    def allocate(self, side: str = "dst", process: Optional[int] = None,
                 fill: Optional[float] = None) -> List[List[Optional[np.ndarray]]]:
        """NumPy buffers for every entry of ``side`` (``"src"`` or ``"dst"``),
        or only those on ``process`` (``None`` elsewhere): one list per tensor,
        in plan order. ``fill``: an initial value (default: uninitialised)."""
        out: List[List[Optional[np.ndarray]]] = []
        local = None if process is None else self.local_entries(process)
        for t in self.tensors:
            lay = t.src if side == "src" else t.dst
            keep = None if local is None else set(local[t.index][0 if side == "src" else 1])
            row: List[Optional[np.ndarray]] = []
            for i, e in enumerate(lay.entries):
                if keep is not None and i not in keep:
                    row.append(None)
                    continue
                a = np.empty(e.shape, t.numpy_dtype if side == "src" else t.dst_numpy_dtype)
                if fill is not None:
                    a.fill(fill)
                row.append(a)
            out.append(row)
        return out

    def scatter(self, arrays: Mapping[str, Any], process: Optional[int] = None
                ) -> List[List[Optional[np.ndarray]]]:
        """Source buffers cut from global arrays (``name -> array``, copies):
        every source entry, or only those on ``process``."""
        out: List[List[Optional[np.ndarray]]] = []
        local = None if process is None else self.local_entries(process)
        for t in self.tensors:
            g = np.asarray(arrays[t.name])
            if g.shape != t.shape:
                raise InvalidArgumentError(f"arrays[{t.name!r}]: shape {g.shape}, the plan's "
                                           f"tensor has {t.shape}")
            keep = None if local is None else set(local[t.index][0])
            out.append([None if keep is not None and i not in keep else
                        np.ascontiguousarray(g[e.index], dtype=t.numpy_dtype)
                        for i, e in enumerate(t.src.entries)])
        return out

    def gather(self, destinations: Buffers) -> Dict[str, np.ndarray]:
        """Global arrays assembled from destination buffers (every entry given
        must hold its box; entries given as ``None`` are skipped, elements no
        given entry covers are zero). Not for partial destinations."""
        rows = _rows(self, destinations, "destinations")
        out = {}
        for t, row in zip(self.tensors, rows):
            g = np.zeros(t.shape, t.dst_numpy_dtype)
            for e, b in zip(t.dst.entries, row):
                if b is not None:
                    g[e.index] = np.asarray(b).reshape(e.shape)
            out[t.name] = g
        return out

    def verify(self, threads: int = 0) -> Dict[str, int]:
        """What ``reshard verify`` does: executes the plan in this process on
        oracle data and checks every destination element; returns the report
        (``mismatches`` 0: correct)."""
        ex = Executor(threads=threads)
        rep = ffi.new("reshard_verify_report_t*")
        rep.struct_size = ffi.sizeof("reshard_verify_report_t")
        check(api.executor_verify(ex._ptr, self._ptr, rep))
        return {k: int(getattr(rep, k)) for k in ("tensors", "elements", "bytes", "mismatches")}

    def __repr__(self) -> str:
        return f"<reshard.Plan {len(self.tensors)} tensors, fingerprint {self.fingerprint:#018x}>"


def plan(spec: Spec, *, process: Optional[int] = None, threads: int = 0,
         max_plan_bytes: Optional[int] = None, global_stats: bool = True) -> Plan:
    """Plans a spec (docs/spec.md): a dict, JSON text, or a path to a JSON file.

    process: ``None`` plans every process part (what in-process execution
        needs); an int plans only that process's part (a worker's plan for a
        distributed executor).
    threads: planning threads (0 or 1: this thread; -1: one per hardware
        thread); the plan is the same for every value.
    max_plan_bytes: the memory limit of the plan's parts (``None``: half the
        memory; ``-1``: none); above it :class:`ResourceExhaustedError`.
    global_stats: ``False`` skips the global statistics of a worker's part.
    """
    text = _spec_text(spec)
    inp = ffi.new("reshard_plan_input_t**")
    check(api.plan_input_from_spec(text, len(text), inp))
    inp_ptr = ffi.gc(inp[0], api.plan_input_destroy)
    out = _plan_input(inp_ptr, process=process, threads=threads, max_plan_bytes=max_plan_bytes,
                      global_stats=global_stats)
    out._flats = _read_flats(inp_ptr)
    return out


def _plan_input(inp: Any, *, process: Optional[int], threads: int,
                max_plan_bytes: Optional[int], global_stats: bool) -> Plan:
    req = ffi.new("reshard_plan_request_t*")
    # A 1.1 library reads only the fields it knows (min(struct_size, its sizeof)).
    req.struct_size = ffi.sizeof("reshard_plan_request_t")
    req.scope = 0 if process is None else 2
    req.process = 0 if process is None else process
    req.global_stats = 1 if global_stats else 0
    req.threads = threads
    req.max_plan_bytes = 0 if max_plan_bytes is None else max_plan_bytes
    out = ffi.new("reshard_plan_t**")
    check(api.plan_create(inp, req, out))
    return Plan(out[0])


def spec_fingerprint(spec: Spec) -> int:
    """The fingerprint a plan of ``spec`` would have, without planning."""
    text = _spec_text(spec)
    inp = ffi.new("reshard_plan_input_t**")
    check(api.plan_input_from_spec(text, len(text), inp))
    p = ffi.gc(inp[0], api.plan_input_destroy)
    out = ffi.new("uint64_t*")
    check(api.plan_input_fingerprint(p, out))
    return int(out[0])


def verify_bytes(data: Union[bytes, bytearray, memoryview],
                 key: Optional[Union[bytes, bytearray, memoryview]] = None) -> None:
    """Verifies plan bytes without keeping the plan; raises :class:`CorruptError`.
    With ``key``, the MAC is required first, as in :meth:`Plan.from_bytes`."""
    buf = ffi.from_buffer(data)
    if key is None:
        check(api.plan_verify_bytes(buf, len(buf)))
        return
    opts, keep = _deserialize_options(key)
    check(api.plan_verify_bytes_with_options(buf, len(buf), opts))
    del keep


def _require_mac_abi() -> None:
    if api.abi_minor < 9:
        raise UnsupportedError(f"reshard: {LIBRARY_PATH} has ABI {api.abi_major}.{api.abi_minor}; "
                               "signed plans (key=) need ABI 1.9")


def _key_buffer(key: Union[bytes, bytearray, memoryview]) -> Any:
    # A C copy, never empty: an empty key reaches the library as a key of size
    # 0, which it reports as empty.
    raw = bytes(key)
    return ffi.new("unsigned char[]", raw if raw else b"\0")


def _deserialize_options(key: Union[bytes, bytearray, memoryview]) -> Tuple[Any, Any]:
    _require_mac_abi()
    keep = _key_buffer(key)
    opts = ffi.new("reshard_deserialize_options_t*")
    opts.struct_size = ffi.sizeof("reshard_deserialize_options_t")
    opts.key = keep
    opts.key_size = len(bytes(key))
    return opts, keep


# --------------------------------------------------------------- buffers
class _Pinned:
    """What keeps the memory of converted buffers alive during one execution
    (arrays NumPy made from DLPack capsules release their exports when
    dropped)."""

    def __init__(self) -> None:
        self.keep: List[Any] = []

    def release(self) -> None:
        self.keep.clear()


class _Export:
    """``obj``'s DLPack protocol, for ``numpy.from_dlpack``: notes whether the
    capsule given is a legacy (unversioned) one, and with ``relabel``, writes
    a dtype NumPy lacks (``_RELABEL``) as the unsigned integer of its width
    into the capsule's ``DLTensor`` before NumPy reads it."""

    __slots__ = ("obj", "relabel", "legacy", "dtype", "dl_dtype")

    def __init__(self, obj: Any, relabel: bool) -> None:
        self.obj = obj
        self.relabel = relabel
        self.legacy = False
        self.dtype: Optional[str] = None  # the relabelled dtype's reshard name
        self.dl_dtype: Tuple[int, int, int] = (0, 0, 0)  # the export's (code, bits, lanes)

    def __dlpack_device__(self) -> Any:
        return self.obj.__dlpack_device__() if hasattr(self.obj, "__dlpack_device__") else (_DLCPU, 0)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        # A TypeError (an exporter without max_version) goes back to NumPy,
        # which asks again for a legacy capsule.
        cap = self.obj.__dlpack__(*args, **kwargs)
        self.legacy = not _capsule_valid(cap, b"dltensor_versioned")
        if self.relabel:
            name = b"dltensor" if self.legacy else b"dltensor_versioned"
            raw = _capsule_get(cap, name)
            m = ffi.cast("DLManagedTensor*" if self.legacy else "DLManagedTensorVersioned*", raw)
            dt = m.dl_tensor.dtype
            self.dl_dtype = (int(dt.code), int(dt.bits), int(dt.lanes))
            self.dtype = _RELABEL.get(self.dl_dtype[:2]) if dt.lanes == 1 else None
            if self.dtype is not None:
                dt.code = _DLUINT
        return cap


def _from_dlpack(obj: Any, where: str, writable: bool) -> Tuple[np.ndarray, str]:
    """``numpy.from_dlpack`` of an object exporting DLPack on the CPU: the
    array and its reshard dtype name. Zero-copy: the array is the exporter's
    memory and holds the export until dropped. ``writable``: refuses an
    export that says it is read-only."""
    dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (_DLCPU, 0)
    if int(dev[0]) not in (_DLCPU, _DLCUDAHOST):
        raise InvalidArgumentError(f"{where}: buffer on DLPack device type {int(dev[0])} "
                                   f"(device {int(dev[1])}); host executors need CPU memory")
    a: Optional[np.ndarray] = None
    name: Optional[str] = None
    legacy: Optional[bool] = None  # whether the capsule was a legacy one, when known
    first: Optional[BaseException] = None
    # Straight to NumPy, unless the exporter's dtype attribute (JAX, ml_dtypes,
    # PyTorch) names one NumPy lacks.
    if str(getattr(obj, "dtype", "")).rpartition(".")[2] not in _NOT_IN_NUMPY:
        try:
            a = np.from_dlpack(obj)
            name = _FROM_NUMPY_DTYPE.get(a.dtype)
        except (BufferError, RuntimeError, ValueError) as err:
            first = err  # e.g. "Unsupported dtype in DLTensor" (bf16, f8)
    if a is None:
        # Exported (again) and relabelled for NumPy.
        ex = _Export(obj, True)
        try:
            a = np.from_dlpack(ex)
        except (BufferError, RuntimeError, ValueError) as err:
            if ex.dtype is None and ex.dl_dtype != (0, 0, 0):
                code, bits, lanes = ex.dl_dtype
                raise InvalidArgumentError(f"{where}: DLPack dtype code {code} bits {bits} lanes "
                                           f"{lanes} has no reshard equivalent") from None
            raise InvalidArgumentError(f"{where}: numpy.from_dlpack refused the export: "
                                       f"{err}") from first
        name = ex.dtype if ex.dtype is not None else _FROM_NUMPY_DTYPE.get(a.dtype)
        legacy = ex.legacy
    if name is None:
        raise InvalidArgumentError(f"{where}: DLPack dtype {a.dtype.name} has no reshard "
                                   "equivalent")
    if writable and not a.flags.writeable:
        # NumPy marks the arrays of legacy capsules read-only: they cannot say
        # whether they are. Which was it (export again to see)?
        if legacy is None:
            ex = _Export(obj, False)
            a = np.from_dlpack(ex)
            legacy = ex.legacy
        if not legacy:
            raise InvalidArgumentError(f"{where}: the DLPack export is read-only; destinations "
                                       "must be writable")
    return a, name


def _where(where: Any) -> str:
    """``sources['w'][3]`` from ``("sources", "w", 3)`` (built only when needed)."""
    if isinstance(where, tuple):
        side, name, i = where
        return f"{side}[{name!r}][{i}]"
    return where


def _convert(obj: Any, t: Tensor, e: Entry, where: Any, writable: bool, pinned: _Pinned) -> int:
    """The address of a host buffer holding entry ``e`` of ``t``, after checking
    dtype, shape, contiguity, device and writability. ``where`` names the
    buffer in messages: a string, or ``(side, tensor name, entry index)``."""
    where = _where(where)
    t = t.side(writable)
    shape = e.shape
    if isinstance(obj, np.ndarray):
        if obj.dtype.name != _NUMPY_NAMES[t.dtype]:
            raise InvalidArgumentError(f"{where}: dtype {obj.dtype.name} given, tensor {t.name!r} "
                                       f"is {t.dtype} ({_NUMPY_NAMES[t.dtype]})")
        if not obj.dtype.isnative:
            raise InvalidArgumentError(f"{where}: dtype {obj.dtype.str!r} is not in this machine's "
                                       "byte order; pass x.astype(x.dtype.newbyteorder('='))")
        if obj.shape != shape:
            raise InvalidArgumentError(f"{where}: shape {obj.shape} given, entry of device "
                                       f"{e.device} of tensor {t.name!r} is box {_box(e)}, shape {shape}")
        if not obj.flags.c_contiguous:
            raise InvalidArgumentError(f"{where}: array is not C-contiguous (strides "
                                       f"{obj.strides}); pass numpy.ascontiguousarray(x)")
        if writable and not obj.flags.writeable:
            raise InvalidArgumentError(f"{where}: array is read-only; destinations must be writable")
        pinned.keep.append(obj)
        return int(obj.__array_interface__["data"][0])
    if hasattr(obj, "__dlpack__"):
        if writable and type(obj).__module__.startswith(("jax", "jaxlib")):
            raise InvalidArgumentError(f"{where}: a jax.Array is immutable and cannot be a "
                                       "destination; pass NumPy buffers (Plan.allocate) or use "
                                       "reshard.jax.reshard")
        a, dt = _from_dlpack(obj, where, writable)
        # (Legacy exporters of bool, older PyTorch, give uint8.)
        if dt != t.dtype and not (dt == "u8" and t.dtype == "bool"):
            raise InvalidArgumentError(f"{where}: dtype {dt} given, tensor {t.name!r} is {t.dtype}")
        if a.shape != shape:
            raise InvalidArgumentError(f"{where}: shape {a.shape} given, entry of device {e.device} "
                                       f"of tensor {t.name!r} is box {_box(e)}, shape {shape}")
        if not a.flags.c_contiguous:
            strides = tuple(s // a.itemsize for s in a.strides)
            raise InvalidArgumentError(f"{where}: not contiguous (strides {strides} elements); "
                                       "pass a contiguous copy")
        pinned.keep.append(a)
        return int(a.__array_interface__["data"][0])
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{where}: {type(obj).__name__} is not a buffer (expected a NumPy array, "
                        "an object with __dlpack__, the buffer protocol, or None)") from None
    if writable and mv.readonly:
        raise InvalidArgumentError(f"{where}: buffer is read-only; destinations must be writable")
    if not mv.c_contiguous:
        raise InvalidArgumentError(f"{where}: buffer is not C-contiguous")
    fmt = mv.format.lstrip("@=<" if sys.byteorder == "little" else "@=>")
    nbytes = int(np.prod(shape, dtype=np.int64)) * _ITEMSIZE[t.dtype]
    raw = fmt in ("B", "b", "c") and mv.ndim == 1
    if raw:  # untyped bytes: only the size can be checked
        if mv.nbytes != nbytes:
            raise InvalidArgumentError(f"{where}: {mv.nbytes} bytes given, box {_box(e)} of "
                                       f"{t.dtype} needs {nbytes}")
    else:
        if _FROM_FORMAT.get(fmt) != t.dtype:
            raise InvalidArgumentError(f"{where}: buffer format {mv.format!r} given, tensor "
                                       f"{t.name!r} is {t.dtype}")
        if tuple(mv.shape or ()) != shape:
            raise InvalidArgumentError(f"{where}: shape {tuple(mv.shape or ())} given, entry of device "
                                       f"{e.device} of tensor {t.name!r} is shape {shape}")
    cd = ffi.from_buffer(mv, require_writable=writable)
    pinned.keep.extend((mv, cd))
    return int(ffi.cast("uintptr_t", cd))


def _box(e: Entry) -> str:
    return "[" + ", ".join(f"{l}:{h}" for l, h in zip(e.lo, e.hi)) + "]"


def _rows(plan: Plan, buffers: Buffers, what: str) -> List[Sequence[Optional[BufferLike]]]:
    ts = plan.tensors
    if isinstance(buffers, Mapping):
        unknown = set(buffers) - {t.name for t in ts}
        if unknown:
            raise InvalidArgumentError(f"{what}: unknown tensor(s) {sorted(unknown)}")
        return [buffers.get(t.name, ()) for t in ts]
    rows = list(buffers)
    if len(rows) != len(ts):
        raise InvalidArgumentError(f"{what}: {len(rows)} tensors given, the plan has {len(ts)}")
    return rows


class _Table:
    """The ``reshard_tensor_buffers_t`` array of a plan, with the per-entry
    sizes filled in once; executions only write the data pointers."""

    def __init__(self, plan: Plan, local: Optional[List[Tuple[List[int], List[int]]]]) -> None:
        ts = plan.tensors
        nsrc = [len(t.src.entries) for t in ts]
        ndst = [len(t.dst.entries) for t in ts]
        self.src = np.zeros((max(sum(nsrc), 1), 2), np.uint64)
        self.dst = np.zeros((max(sum(ndst), 1), 2), np.uint64)
        self.src_bytes = np.zeros(len(self.src), np.uint64)
        self.dst_bytes = np.zeros(len(self.dst), np.uint64)
        self.src_off: List[int] = []
        self.dst_off: List[int] = []
        self.tb = ffi.new("reshard_tensor_buffers_t[]", max(len(ts), 1))
        sp = ffi.cast("reshard_src_buffer_t*", ffi.from_buffer(self.src))
        dp = ffi.cast("reshard_dst_buffer_t*", ffi.from_buffer(self.dst))
        so = do = 0
        for t in ts:
            item, dst_item = _ITEMSIZE[t.dtype], _ITEMSIZE[t.dst_dtype]
            for i, e in enumerate(t.src.entries):
                self.src_bytes[so + i] = int(np.prod(e.shape, dtype=np.int64)) * item
            for i, e in enumerate(t.dst.entries):
                self.dst_bytes[do + i] = int(np.prod(e.shape, dtype=np.int64)) * dst_item
            tb = self.tb[t.index]
            tb.src, tb.num_src = sp + so, nsrc[t.index]
            tb.dst, tb.num_dst = dp + do, ndst[t.index]
            self.src_off.append(so)
            self.dst_off.append(do)
            so += nsrc[t.index]
            do += ndst[t.index]
        self.num_tensors = len(ts)
        self.plan = plan
        # For the NumPy fast path of _bind: each entry's shape, and each
        # tensor's NumPy dtypes, source and destination (None where ml_dtypes
        # is missing: slow path).
        self.src_shapes = [[e.shape for e in t.src.entries] for t in ts]
        self.dst_shapes = [[e.shape for e in t.dst.entries] for t in ts]
        self.np_dtypes: List[Optional[np.dtype]] = []
        self.dst_np_dtypes: List[Optional[np.dtype]] = []
        for t in ts:
            for out, name in ((self.np_dtypes, t.dtype), (self.dst_np_dtypes, t.dst_dtype)):
                try:
                    out.append(np.dtype(numpy_dtype(name)))
                except ImportError:
                    out.append(None)


class _PointerTable:
    """A private ``reshard_tensor_buffers_t`` table for repeated executions of
    one plan with a fixed set of given entries (an adapter's cached plan):
    sizes are written once, and a call writes only the addresses, into
    ``src_ptr`` and ``dst_ptr`` (one per entry, all tensors back to back, in
    the order of :func:`_table`); entries not given keep address and size 0.
    Not for concurrent use: one per thread."""

    def __init__(self, plan: Plan, src_given: np.ndarray, dst_given: np.ndarray) -> None:
        tab = _table(plan)
        self.plan = plan
        self.num_tensors = tab.num_tensors
        self.src = np.zeros_like(tab.src)
        self.dst = np.zeros_like(tab.dst)
        # given: one flag per entry (tab.src / tab.dst have at least one row)
        self.src[:len(src_given), 1] = np.where(src_given, tab.src_bytes[:len(src_given)], 0)
        self.dst[:len(dst_given), 1] = np.where(dst_given, tab.dst_bytes[:len(dst_given)], 0)
        self.src_ptr = self.src[:, 0]  # views: writing them writes the table
        self.dst_ptr = self.dst[:, 0]
        self.tb = ffi.new("reshard_tensor_buffers_t[]", max(tab.num_tensors, 1))
        sp = ffi.cast("reshard_src_buffer_t*", ffi.from_buffer(self.src))
        dp = ffi.cast("reshard_dst_buffer_t*", ffi.from_buffer(self.dst))
        for t in range(tab.num_tensors):
            self.tb[t].src, self.tb[t].num_src = sp + tab.src_off[t], tab.tb[t].num_src
            self.tb[t].dst, self.tb[t].num_dst = dp + tab.dst_off[t], tab.tb[t].num_dst


def _table(plan: Plan) -> _Table:
    tab = plan._tables.get("table")
    if tab is None:
        tab = plan._tables["table"] = _Table(plan, None)
    return tab


def _bind(plan: Plan, sources: Buffers, destinations: Buffers, pinned: _Pinned,
          convert: Any = None) -> Tuple[np.ndarray, np.ndarray, Any, int]:
    """Checks and converts every buffer: the (source, destination) address and
    size arrays, a ``reshard_tensor_buffers_t`` table pointing into them (new
    for each call: a plan may run on several threads at once), and the tensor
    count. ``pinned`` holds what keeps the buffers' memory alive. ``convert``:
    the conversion of one buffer (``_convert``'s signature); ``None``: host
    memory (``_convert``, with a fast path for NumPy arrays)."""
    host = convert is None
    if host:
        convert = _convert
    src_rows = _rows(plan, sources, "sources")
    dst_rows = _rows(plan, destinations, "destinations")
    tab = _table(plan)
    src = np.zeros((len(tab.src), 2), np.uint64)
    dst = np.zeros((len(tab.dst), 2), np.uint64)
    keep = pinned.keep
    ndarray = np.ndarray
    for t in plan.tensors:
        ti = t.index
        for side, rows, arr, off, sizes, lay, shapes, writable, want in (
                ("sources", src_rows, src, tab.src_off, tab.src_bytes, t.src, tab.src_shapes, False,
                 tab.np_dtypes[ti]),
                ("destinations", dst_rows, dst, tab.dst_off, tab.dst_bytes, t.dst, tab.dst_shapes,
                 True, tab.dst_np_dtypes[ti])):
            row = rows[ti]
            if row is None:
                row = ()
            n = len(lay.entries)
            if len(row) not in (0, n):
                raise InvalidArgumentError(
                    f"{side}[{t.name!r}]: {len(row)} buffers given, the layout has "
                    f"{n} entries (pass None for entries of other processes)")
            base = off[ti]
            shp = shapes[ti]
            for i, b in enumerate(row):
                if b is None:
                    continue
                # NumPy arrays that pass every check take this path; any
                # other buffer, or an array that fails a check, is converted
                # (and its error reported) by _convert.
                if (host and type(b) is ndarray and want is not None and b.dtype == want
                        and b.shape == shp[i] and b.flags.c_contiguous
                        and (not writable or b.flags.writeable)):
                    keep.append(b)
                    ptr = b.ctypes.data
                else:
                    ptr = convert(b, t, lay.entries[i], (side, t.name, i), writable, pinned)
                arr[base + i, 0] = ptr
                arr[base + i, 1] = sizes[base + i]
    tb = ffi.new("reshard_tensor_buffers_t[]", max(tab.num_tensors, 1))
    sp = ffi.cast("reshard_src_buffer_t*", ffi.from_buffer(src))
    dp = ffi.cast("reshard_dst_buffer_t*", ffi.from_buffer(dst))
    for t in plan.tensors:
        i = t.index
        src_given = len(src_rows[i] or ()) > 0
        dst_given = len(dst_rows[i] or ()) > 0
        tb[i].src = sp + tab.src_off[i] if src_given else ffi.NULL
        tb[i].num_src = len(t.src.entries) if src_given else 0
        tb[i].dst = dp + tab.dst_off[i] if dst_given else ffi.NULL
        tb[i].num_dst = len(t.dst.entries) if dst_given else 0
    return src, dst, tb, tab.num_tensors


class PreparedExecution:
    """One plan bound to fixed buffers by :meth:`Executor.prepare` (or
    :func:`reshard.prepare`): every buffer was checked and converted to an
    address once, and :meth:`execute` is one call into the library.

    The buffers' memory must stay where it is: the object keeps every
    buffer alive (and DLPack exports unreleased) until :meth:`release`, the
    end of a ``with`` block, or garbage collection. Their contents may change
    between executions; that is what each execution reads and writes.
    Executing concurrently from several threads is allowed by the library
    (the table is only read) but writes the same destinations. The object is
    thread-safe: :meth:`release` on one thread waits for executions in
    flight on others, and later executions raise.
    """

    def __init__(self, executor: "Executor", plan: Plan, sources: Buffers,
                 destinations: Buffers) -> None:
        pinned = _Pinned()
        self._src: Optional[np.ndarray]
        self._dst: Optional[np.ndarray]
        # CUDA executors: the conversion, which also orders streams around
        # every execution (reshard._cuda).
        self._conv = executor._converter(plan) if executor.memory == "cuda" else None
        try:
            self._src, self._dst, self._tb, self._num_tensors = _bind(
                plan, sources, destinations, pinned, self._conv)
        except BaseException:
            pinned.release()
            raise
        self.executor = executor
        self.plan = plan
        # Executions in flight (the library runs them without the GIL) and
        # whether release() was called: release waits for the first to end
        # before it lets the buffers go.
        self._state = threading.Condition(threading.Lock())
        self._in_flight = 0
        self._released = False
        # DLPack deleters run on release or collection; not at interpreter
        # exit, when the exporting framework may be gone already.
        self._release = weakref.finalize(self, pinned.release)
        self._release.atexit = False

    @property
    def released(self) -> bool:
        return self._released

    def execute(self) -> None:
        """Runs the plan on the bound buffers (collective for MPI executors,
        as :meth:`Executor.execute`). After :meth:`release` (even one that
        is waiting for another thread's execution) it raises
        :class:`InvalidArgumentError` and touches nothing."""
        with self._state:
            if self._released:
                raise InvalidArgumentError(
                    "prepared execution: released; prepare the buffers again")
            self._in_flight += 1
            tb = self._tb
        try:
            if self._conv is not None:
                self._conv.before()
            check(api.executor_execute(self.executor._ptr, self.plan._ptr, tb, self._num_tensors))
            if self._conv is not None:
                self._conv.after(self.executor.waits)
        finally:
            with self._state:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._state.notify_all()

    __call__ = execute

    def release(self) -> None:
        """Drops the references to the buffers (and releases DLPack exports);
        :meth:`execute` raises afterwards. Thread-safe: executions already
        running on other threads finish first (release waits for them, so
        the buffers never go while the library uses them); executions
        starting after release was called raise. Idempotent."""
        with self._state:
            self._released = True
            while self._in_flight:
                self._state.wait()
            self._tb = None
            self._src = self._dst = None
        self._release()

    def __enter__(self) -> "PreparedExecution":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "ready"
        return f"<reshard.PreparedExecution {state}, {self._num_tensors} tensors>"


# -------------------------------------------------------------- executors
class Executor:
    """A host executor (``RESHARD_TRANSPORT_HOST``): every plan device is in
    this process and its buffers are host memory. Immutable; several threads
    may execute with it at once on distinct destinations.

    threads: worker threads (0: one per hardware thread).
    timeout: the deadline of each execution, in seconds (> 0): copies still
        running past it raise :class:`ReshardTimeoutError` (a
        ``TimeoutError``), the destinations holding unspecified data.
    """

    transport = "host"
    memory = "host"  # where its buffers are ("cuda": reshard._cuda's executors)
    waits = True  # execute returns once the destinations hold their data

    def __init__(self, threads: int = 0, *, timeout: float = 300.0, _ptr: Any = None) -> None:
        if _ptr is None:
            opts = ffi.new("reshard_executor_options_t*")
            opts.struct_size = ffi.sizeof("reshard_executor_options_t")
            opts.transport = 1
            opts.threads = threads
            opts.timeout_seconds = timeout
            out = ffi.new("reshard_executor_t**")
            check(api.executor_create(opts, out))
            _ptr = out[0]
        self._ptr = ffi.gc(_ptr, api.executor_destroy)
        info = ffi.new("reshard_executor_info_t*")
        info.struct_size = ffi.sizeof("reshard_executor_info_t")
        check(api.executor_info(self._ptr, info))
        self.rank: int = int(info.rank)
        self.size: int = int(info.size)

    @property
    def process(self) -> Optional[int]:
        """The plan process whose entries this executor moves (``None``: all)."""
        return None

    def execute(self, plan: Plan, sources: Buffers, destinations: Buffers) -> None:
        """Fills every destination buffer of ``plan`` from the source buffers.

        ``sources`` / ``destinations``: per tensor (a list in plan order, or a
        dict by name), one buffer per layout entry in entry order (see
        :attr:`Plan.tensors`); ``None`` for entries of other processes. Buffers
        are checked (dtype, shape, contiguity, CPU device, writability) before
        anything is written; memory is never copied. Every call checks and
        converts every buffer again (about a microsecond per NumPy array,
        more through DLPack); to execute many times on the same buffers, pay
        that once with :meth:`prepare`.
        """
        pinned = _Pinned()
        try:
            src, dst, tb, n = _bind(plan, sources, destinations, pinned)  # tb points into src, dst
            check(api.executor_execute(self._ptr, plan._ptr, tb, n))
            del src, dst
        finally:
            pinned.release()

    def prepare(self, plan: Plan, sources: Buffers,
                destinations: Buffers) -> "PreparedExecution":
        """Checks and converts the buffers once, as :meth:`execute` does, and
        returns a :class:`PreparedExecution` whose ``execute()`` runs ``plan``
        on them with one C call: for loops that execute a plan again and
        again on the same buffers (their contents may change between calls,
        their memory may not move). The buffers are kept alive (DLPack
        exports held) until :meth:`PreparedExecution.release`."""
        return PreparedExecution(self, plan, sources, destinations)

    def _converter(self, plan: Plan) -> Any:
        return None  # host memory: _convert

    def _execute_table(self, table: "_PointerTable") -> None:
        """Executes ``table.plan`` with the addresses written into ``table``."""
        check(api.executor_execute(self._ptr, table.plan._ptr, table.tb, table.num_tensors))

    def _execute_pointers(self, plan: Plan, src_ptrs: Any, dst_ptrs: Any) -> None:
        """Executes with raw addresses (one per entry, all tensors back to back,
        0 for entries not given); sizes come from the plan. For adapters that
        have checked their buffers already."""
        tab = _table(plan)
        tab.src[:, 0] = src_ptrs
        tab.src[:, 1] = np.where(tab.src[:, 0] != 0, tab.src_bytes, 0)
        tab.dst[:, 0] = dst_ptrs
        tab.dst[:, 1] = np.where(tab.dst[:, 0] != 0, tab.dst_bytes, 0)
        check(api.executor_execute(self._ptr, plan._ptr, tab.tb, tab.num_tensors))

    def info(self) -> Dict[str, Any]:
        """Transport, rank and size of the executor."""
        return {"transport": self.transport, "rank": self.rank, "size": self.size}


_AGREEMENT = {"first_use": 0, "every_call": 1, "skip": 2}
_PACKING = {"auto": 0, "staging": 1, "gather": 2}


class MPIExecutor(Executor):
    """An executor over MPI (``RESHARD_TRANSPORT_MPI``, host memory): plan
    process p is rank p of ``comm``. Creating it and executing are collective.

    comm: an ``mpi4py.MPI.Comm`` (its Fortran handle crosses the C ABI, see
        reshard_mpi.h), or ``None`` for ``MPI_COMM_WORLD`` (initialised by
        reshard if nobody has).
    timeout: the longest wait for one step, in seconds.
    agreement: ``"first_use"``, ``"every_call"`` or ``"skip"``: when the ranks
        compare plan fingerprints before executing.
    packing: ``"auto"``, ``"staging"`` or ``"gather"``.
    """

    transport = "mpi"

    def __init__(self, comm: Any = None, *, timeout: float = 300.0, agreement: str = "first_use",
                 packing: str = "auto", overlap: bool = True, max_batches_in_flight: int = 8,
                 library: Optional[str] = None) -> None:
        o = ffi.new("reshard_mpi_executor_options_t*")
        o.struct_size = ffi.sizeof("reshard_mpi_executor_options_t")
        if comm is None:
            o.comm_kind, o.comm = 0, 0
        else:
            o.comm_kind, o.comm = 1, int(comm.py2f())
        o.initialize = 1
        o.max_batches_in_flight = max_batches_in_flight
        o.timeout_seconds = timeout
        try:
            o.agreement = _AGREEMENT[agreement]
            o.packing = _PACKING[packing]
        except KeyError as k:
            raise InvalidArgumentError(f"unknown option value {k}") from None
        o.overlap = 1 if overlap else 0
        lib_c = ffi.new("char[]", library.encode()) if library else ffi.NULL
        o.library = lib_c
        out = ffi.new("reshard_executor_t**")
        check(api.mpi_executor_create(o, out))
        super().__init__(_ptr=out[0])

    @property
    def process(self) -> Optional[int]:
        return self.rank


def execute(plan: Plan, sources: Buffers, destinations: Buffers, *,
            executor: Optional[Executor] = None) -> None:
    """Executes ``plan`` on host buffers (see :meth:`Executor.execute`); with no
    executor, on a host executor using every hardware thread."""
    (executor or _default_executor()).execute(plan, sources, destinations)


def prepare(plan: Plan, sources: Buffers, destinations: Buffers, *,
            executor: Optional[Executor] = None) -> PreparedExecution:
    """Binds ``plan`` to fixed buffers for repeated executions (see
    :meth:`Executor.prepare`); with no executor, the host executor using
    every hardware thread that :func:`execute` uses."""
    return (executor or _default_executor()).prepare(plan, sources, destinations)


_DEFAULT: List[Executor] = []


def _default_executor() -> Executor:
    if not _DEFAULT:
        _DEFAULT.append(Executor())
    return _DEFAULT[0]


def transport_available(transport: str) -> Tuple[bool, str]:
    """Whether executors over ``transport`` (``"host"``, ``"mpi"``, ``"nccl"``,
    ``"cuda_local"``) can be created here, and if not, why."""
    code = {"host": 1, "mpi": 2, "nccl": 3, "cuda_local": 4}.get(transport)
    if code is None:
        raise InvalidArgumentError(f"transport: unknown {transport!r}")
    ok = ffi.new("int32_t*")
    why = ffi.new("char[]", 1024)
    check(api.transport_available(code, ok, why, 1024))
    return bool(ok[0]), ffi.string(why).decode()
