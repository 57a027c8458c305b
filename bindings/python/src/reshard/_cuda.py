"""Executors for CUDA memory (``RESHARD_TRANSPORT_CUDA_LOCAL`` and
``RESHARD_TRANSPORT_NCCL``) and the conversion of CUDA buffers to the
device pointers the C ABI takes.

No CUDA library is loaded here: ``libreshard.so.1`` loads its CUDA backend
(``libreshard_cuda.so.1``) when the first CUDA executor is made, and this
module only reads pointers, shapes and dtypes from what the caller passes.

Buffers (one per layout entry, as for the host executor) may be:

- a ``torch.Tensor`` on a CUDA device (read through ``data_ptr()``; a
  tensor that requires grad is fine: its memory is read or written, never
  its autograd graph);
- an object exporting DLPack on a CUDA device (``__dlpack_device__`` type
  ``kDLCUDA`` = 2, or ``kDLCUDAManaged`` = 13): JAX, CuPy, ...; exported with
  ``__dlpack__(stream=...)`` so that the exporter orders its pending work
  before the executor's stream (DLPack's stream protocol); the capsule is
  held (the export alive) until the execution ends;
- an object with ``__cuda_array_interface__`` (version 2 or 3) and no
  DLPack: its pointer is read as is. Its ``stream`` field is not waited
  on: the caller synchronises the producer first.

Each buffer is checked before anything runs: a CUDA device (a CPU tensor or
a NumPy array is an ``InvalidArgumentError`` naming it), the GPU the plan
puts the entry's device on (a topology ordinal for the in-process executor,
the executor's GPU for NCCL), dtype, shape (the entry's box), contiguity,
and for destinations writability. The library then checks once per
allocation that the entry's GPU can address the pointer.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ._ffi import InvalidArgumentError, api, check, ffi
from ._core import (_FROM_NUMPY, _ITEMSIZE, _AGREEMENT, _PACKING, Executor, Plan, Tensor, Entry,
                    _box, _Pinned, _capsule_get, _capsule_valid, _where)

_DLCUDA, _DLCUDA_MANAGED = 2, 13
# DLPack (code, bits) -> reshard dtype name.
_DL_DTYPES: Dict[Tuple[int, int], str] = {
    (2, 64): "f64", (2, 32): "f32", (2, 16): "f16", (4, 16): "bf16", (10, 8): "f8e4m3",
    (12, 8): "f8e5m2", (0, 64): "i64", (0, 32): "i32", (0, 16): "i16", (0, 8): "i8",
    (1, 64): "u64", (1, 32): "u32", (1, 16): "u16", (1, 8): "u8", (6, 8): "bool",
}
# __cuda_array_interface__ typestr (without byte order) -> reshard dtype name.
_CAI_DTYPES = {"f8": "f64", "f4": "f32", "f2": "f16", "i8": "i64", "i4": "i32", "i2": "i16",
               "i1": "i8", "u8": "u64", "u4": "u32", "u2": "u16", "u1": "u8", "b1": "bool"}
_READ_ONLY_FLAG = 1  # DLPACK_FLAG_BITMASK_READ_ONLY


def stream_pointer(stream: Any, where: str = "stream") -> int:
    """A ``cudaStream_t`` as an integer: ``None`` (0: the executor's own
    stream), an ``int``, or an object with ``cuda_stream`` (a
    ``torch.cuda.Stream``) or ``ptr`` (a CuPy stream)."""
    if stream is None:
        return 0
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr) and not isinstance(stream, int):
            stream = getattr(stream, attr)
            break
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"{where}: expected None, an int (cudaStream_t) or an object with "
                        f"cuda_stream, got {type(stream).__name__}")
    if stream < 0:
        raise InvalidArgumentError(f"{where}: {stream} is not a stream pointer")
    return stream


def _is_torch_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr") \
        and hasattr(obj, "is_cuda")


def _dtype_from_name(name: str) -> Optional[str]:
    """``"torch.bfloat16"`` / ``"bfloat16"`` / ``"float32"`` -> reshard name."""
    return _FROM_NUMPY.get(name.rpartition(".")[2])


class _CudaConverter:
    """Converts the buffers of one execution (or one prepared execution) on
    a CUDA executor: the callable ``_core._bind`` takes in place of the host
    conversion. ``ordinal_of(device)`` is the GPU a plan device's entries must
    be on (``None``: not checked); ``dlpack_stream`` the stream DLPack
    exporters order their work before (1: the legacy default stream, which
    the executor's own blocking streams follow). Torch tensors are not
    exported: their devices are collected, and :meth:`before` orders the
    executor's stream after torch's current stream on each of them."""

    def __init__(self, transport: str, ordinal_of: Callable[[int], Optional[int]],
                 dlpack_stream: int, executor_stream: int) -> None:
        self.transport = transport
        self.ordinal_of = ordinal_of
        self.dlpack_stream = dlpack_stream
        self.executor_stream = executor_stream
        self.torch_devices: Set[int] = set()

    # -------------------------------------------------------------- checks
    def _check(self, where: str, t: Tensor, e: Entry, dtype: Optional[str], shape: Tuple[int, ...],
               contiguous: bool, ordinal: Optional[int], what: str) -> None:
        if dtype != t.dtype and not (dtype == "u8" and t.dtype == "bool"):
            raise InvalidArgumentError(f"{where}: dtype {dtype or what} given, tensor {t.name!r} "
                                       f"is {t.dtype}")
        if shape != e.shape:
            raise InvalidArgumentError(f"{where}: shape {shape} given, entry of device {e.device} "
                                       f"of tensor {t.name!r} is box {_box(e)}, shape {e.shape}")
        if not contiguous:
            raise InvalidArgumentError(f"{where}: not contiguous; pass a contiguous copy "
                                       "(x.contiguous())")
        want = self.ordinal_of(e.device)
        if ordinal is not None and want is not None and ordinal != want:
            raise InvalidArgumentError(f"{where}: on GPU {ordinal}, the {self.transport} executor "
                                       f"puts device {e.device} of tensor {t.name!r} on GPU {want}")

    def __call__(self, obj: Any, t: Tensor, e: Entry, where: Any, writable: bool,
                 pinned: _Pinned) -> int:
        where = _where(where)
        t = t.side(writable)  # a destination holds the tensor's destination dtype
        if _is_torch_tensor(obj):
            return self._torch(obj, t, e, where, pinned)
        if hasattr(obj, "__dlpack__"):
            if writable and type(obj).__module__.startswith(("jax", "jaxlib")):
                raise InvalidArgumentError(f"{where}: a jax.Array is immutable and cannot be a "
                                           "destination; use reshard.jax.reshard")
            return self._dlpack(obj, t, e, where, writable, pinned)
        cai = getattr(obj, "__cuda_array_interface__", None)
        if cai is not None:
            return self._cai(cai, obj, t, e, where, writable, pinned)
        if hasattr(obj, "__array_interface__") or isinstance(obj, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"{where}: host memory ({type(obj).__name__}) given to a "
                                       f"{self.transport} executor, which needs CUDA device memory")
        raise TypeError(f"{where}: {type(obj).__name__} is not a CUDA buffer (expected a CUDA "
                        "torch.Tensor, an object with __dlpack__ on a CUDA device, or "
                        "__cuda_array_interface__)")

    def _torch(self, x: Any, t: Tensor, e: Entry, where: str, pinned: _Pinned) -> int:
        if not x.is_cuda:
            raise InvalidArgumentError(f"{where}: tensor on {x.device}, the {self.transport} "
                                       "executor needs CUDA tensors (x.cuda())")
        dtype = _dtype_from_name(str(x.dtype))
        self._check(where, t, e, dtype, tuple(int(n) for n in x.shape), x.is_contiguous(),
                    int(x.device.index), str(x.dtype))
        self.torch_devices.add(int(x.device.index))
        pinned.keep.append(x)
        return int(x.data_ptr())

    def _dlpack(self, obj: Any, t: Tensor, e: Entry, where: str, writable: bool,
                pinned: _Pinned) -> int:
        dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else None
        if dev is not None and int(dev[0]) not in (_DLCUDA, _DLCUDA_MANAGED):
            kind = "host memory" if int(dev[0]) in (1, 3) else "memory"
            raise InvalidArgumentError(f"{where}: {kind} ({type(obj).__name__} on DLPack device "
                                       f"type {int(dev[0])}, device {int(dev[1])}) given to a "
                                       f"{self.transport} executor, which needs CUDA device "
                                       "memory (kDLCUDA = 2)")
        try:
            cap = obj.__dlpack__(stream=self.dlpack_stream, max_version=(1, 0))
        except TypeError:  # an exporter without max_version: a legacy capsule
            cap = obj.__dlpack__(stream=self.dlpack_stream)
        versioned = bool(_capsule_valid(cap, b"dltensor_versioned"))
        if versioned:
            m = ffi.cast("DLManagedTensorVersioned*", _capsule_get(cap, b"dltensor_versioned"))
            if writable and int(m.flags) & _READ_ONLY_FLAG:
                raise InvalidArgumentError(f"{where}: the DLPack export is read-only; "
                                           "destinations must be writable")
        elif _capsule_valid(cap, b"dltensor"):
            m = ffi.cast("DLManagedTensor*", _capsule_get(cap, b"dltensor"))
        else:
            raise InvalidArgumentError(f"{where}: __dlpack__ did not return a DLPack capsule")
        dl = m.dl_tensor
        if int(dl.device.device_type) not in (_DLCUDA, _DLCUDA_MANAGED):
            raise InvalidArgumentError(f"{where}: DLPack tensor on device type "
                                       f"{int(dl.device.device_type)}; the {self.transport} "
                                       "executor needs CUDA device memory (kDLCUDA = 2)")
        code, bits, lanes = int(dl.dtype.code), int(dl.dtype.bits), int(dl.dtype.lanes)
        dtype = _DL_DTYPES.get((code, bits)) if lanes == 1 else None
        shape = tuple(int(dl.shape[i]) for i in range(int(dl.ndim)))
        contiguous = True
        if dl.strides != ffi.NULL:
            expect = 1
            for i in reversed(range(len(shape))):
                if shape[i] != 1 and int(dl.strides[i]) != expect:
                    contiguous = False
                expect *= shape[i]
        self._check(where, t, e, dtype, shape, contiguous, int(dl.device.device_id),
                    f"code {code} bits {bits} lanes {lanes} (no reshard equivalent)")
        pinned.keep.append(cap)  # dropping the unconsumed capsule calls the deleter
        return int(ffi.cast("uintptr_t", dl.data)) + int(dl.byte_offset)

    def _cai(self, cai: Dict[str, Any], obj: Any, t: Tensor, e: Entry, where: str, writable: bool,
             pinned: _Pinned) -> int:
        ptr, readonly = cai["data"]
        if writable and readonly:
            raise InvalidArgumentError(f"{where}: __cuda_array_interface__ is read-only; "
                                       "destinations must be writable")
        typestr = str(cai["typestr"])
        dtype = _CAI_DTYPES.get(typestr[1:])
        shape = tuple(int(n) for n in cai["shape"])
        strides = cai.get("strides")
        contiguous = True
        if strides is not None:
            expect = _ITEMSIZE.get(t.dtype, 1)
            for n, s in zip(reversed(shape), reversed(tuple(strides))):
                if n != 1 and int(s) != expect:
                    contiguous = False
                expect *= n
        if typestr[0] == ">":
            raise InvalidArgumentError(f"{where}: typestr {typestr!r} is big-endian")
        self._check(where, t, e, dtype, shape, contiguous, None, f"typestr {typestr!r}")
        pinned.keep.append(obj)
        return int(ptr)

    # ------------------------------------------------------------ ordering
    def before(self) -> None:
        """Orders the executor's stream after torch's current stream on
        every GPU a torch tensor of this execution is on (an event, no host
        wait; nothing when they are the same stream)."""
        if not self.torch_devices:
            return
        import torch
        for d in self.torch_devices:
            cur = torch.cuda.current_stream(d)
            target = self._torch_stream(torch, d)
            if cur.cuda_stream != target.cuda_stream:
                target.wait_stream(cur)

    def after(self, waited: bool) -> None:
        """With an executor that did not wait on the host: torch's current
        stream waits for the executor's work (an event, no host wait)."""
        if waited or not self.torch_devices:
            return
        import torch
        for d in self.torch_devices:
            cur = torch.cuda.current_stream(d)
            src = self._torch_stream(torch, d)
            if cur.cuda_stream != src.cuda_stream:
                cur.wait_stream(src)

    def _torch_stream(self, torch: Any, device: int) -> Any:
        # The executor's own streams are blocking streams, ordered with the
        # legacy default stream (torch's default stream, cuda_stream 0).
        if self.executor_stream == 0:
            return torch.cuda.default_stream(device)
        return torch.cuda.ExternalStream(self.executor_stream, device=device)


class _CudaExecutor(Executor):
    """What the CUDA executors share: buffer conversion and stream order."""

    memory = "cuda"
    waits = True  # execute returns once the destinations hold their data

    def _converter(self, plan: Plan) -> _CudaConverter:
        raise NotImplementedError

    def execute(self, plan: Plan, sources: Any, destinations: Any) -> None:
        """Fills every destination buffer of ``plan`` from the source buffers,
        all CUDA memory (see the module's documentation for what a buffer may
        be). Checked before anything runs; never copied through the host."""
        from ._core import _bind
        pinned = _Pinned()
        conv = self._converter(plan)
        try:
            src, dst, tb, n = _bind(plan, sources, destinations, pinned, conv)
            conv.before()
            check(api.executor_execute(self._ptr, plan._ptr, tb, n))
            conv.after(self.waits)
            del src, dst
        finally:
            pinned.release()


class CudaLocalExecutor(_CudaExecutor):
    """An executor over CUDA memory in one process
    (``RESHARD_TRANSPORT_CUDA_LOCAL``): every plan device is in this process,
    on the GPU of its topology ordinal (a spec mesh's ``ordinals``; by
    default a device's position among its host's devices). Several plan
    devices may share one GPU.

    Streams: the executor orders its copies on blocking streams of its own
    (one per GPU), which follow the legacy default stream; the C ABI takes no
    stream for this transport. ``execute`` returns once the destinations hold
    their data (a host wait), so any stream may read them afterwards. Before
    the copies start, torch's current stream on each GPU of a torch tensor is
    made to precede them (an event on the default stream), and DLPack
    exporters are asked to order their work before the legacy default stream
    (``__dlpack__(stream=1)``).

    timeout: the longest wait for the GPUs, in seconds.
    Raises :class:`UnsupportedError` (the message says what is missing: the
    CUDA backend, the driver, a GPU) where CUDA cannot run.
    """

    transport = "cuda_local"

    def __init__(self, *, timeout: float = 300.0) -> None:
        opts = ffi.new("reshard_executor_options_t*")
        opts.struct_size = ffi.sizeof("reshard_executor_options_t")
        opts.transport = 4  # RESHARD_TRANSPORT_CUDA_LOCAL
        opts.threads = 0
        opts.timeout_seconds = timeout
        out = ffi.new("reshard_executor_t**")
        check(api.executor_create(opts, out))
        super().__init__(_ptr=out[0])

    def _converter(self, plan: Plan) -> _CudaConverter:
        return _CudaConverter(self.transport, lambda d: plan.device_location(d)[2], 1, 0)


def nccl_unique_id(library: Optional[str] = None) -> bytes:
    """A fresh NCCL unique id (128 bytes; ``ncclGetUniqueId`` through the CUDA
    backend). Make it on one process and send it to the others (a
    ``torch.distributed`` store, ``broadcast_object_list``, MPI...).
    Raises :class:`UnsupportedError` without the backend, NCCL, a driver or
    a GPU."""
    out = ffi.new("reshard_nccl_unique_id_t*")
    lib_c = ffi.new("char[]", library.encode()) if library else ffi.NULL
    check(api.nccl_unique_id(lib_c, out))
    return bytes(ffi.buffer(out.internal, 128))


class NcclExecutor(_CudaExecutor):
    """An executor over NCCL (``RESHARD_TRANSPORT_NCCL``) with one GPU in this
    process: plan process p is rank p of the group, every entry of this
    process is on GPU ``device``. Creating it and executing are collective.

    Either reshard creates the communicator (non-blocking, destroyed with
    the executor) from ``unique_id`` (:func:`nccl_unique_id` on one process,
    sent to all), ``rank`` and ``size``; or ``comm`` is the caller's
    ``ncclComm_t`` as an integer (never destroyed by reshard; ``rank`` is
    then the plan process, by default its NCCL rank).

    stream: the ``cudaStream_t`` (an int, or a ``torch.cuda.Stream``) the
        executor orders its work on, for its whole life (it must outlive the
        executor); ``None``: a blocking stream of the executor, ordered after
        the legacy default stream.
    wait: ``True`` (default): ``execute`` returns once the destinations hold
        their data, and NCCL errors and timeouts raise. ``False``: it returns
        once the work is enqueued on ``stream``; torch's current stream is
        made to wait for it (an event) when the buffers are torch tensors;
        the caller keeps every buffer alive until then, and NCCL failures
        are not seen by reshard.
    timeout, agreement, packing, overlap, max_batches_in_flight,
    check_pointers, abort_borrowed_on_failure, library: as
        ``reshard_nccl_executor_options_t`` (reshard_nccl.h).
    """

    transport = "nccl"

    def __init__(self, device: int, *, rank: Optional[int] = None, size: Optional[int] = None,
                 unique_id: Optional[bytes] = None, comm: Optional[int] = None,
                 stream: Any = None, timeout: float = 300.0, wait: bool = True,
                 agreement: str = "first_use", packing: str = "auto", overlap: bool = True,
                 max_batches_in_flight: int = 8, check_pointers: bool = True,
                 abort_borrowed_on_failure: bool = False, library: Optional[str] = None) -> None:
        if isinstance(device, bool) or not isinstance(device, int):
            raise TypeError(f"device: expected a CUDA device index (int), got "
                            f"{type(device).__name__}")
        if device < 0:
            raise InvalidArgumentError(f"device: {device} is negative")
        if (unique_id is None) == (comm is None):
            raise InvalidArgumentError("unique_id, comm: pass exactly one (unique_id: reshard "
                                       "creates the communicator; comm: the caller's ncclComm_t)")
        self._stream = stream_pointer(stream)
        o = ffi.new("reshard_nccl_executor_options_t*")
        o.struct_size = ffi.sizeof("reshard_nccl_executor_options_t")
        gpu = ffi.new("reshard_nccl_device_t*")
        gpu.ordinal = device
        gpu.nccl_rank = -1
        gpu.comm = ffi.NULL
        gpu.stream = ffi.cast("cudaStream_t", self._stream)
        if unique_id is not None:
            uid = bytes(unique_id)
            if len(uid) != 128:
                raise InvalidArgumentError(f"unique_id: {len(uid)} bytes given, an NCCL unique id "
                                           "has 128 (reshard.nccl_unique_id())")
            if size is None or rank is None:
                raise InvalidArgumentError("rank, size: required with unique_id (this process's "
                                           "NCCL rank and the number of ranks)")
            if size < 1:
                raise InvalidArgumentError(f"size: {size} is not positive")
            if not 0 <= rank < size:
                raise InvalidArgumentError(f"rank: {rank} is outside [0, {size})")
            gpu.nccl_rank = rank
            o.nccl_ranks = size
            ffi.memmove(o.unique_id.internal, uid, 128)
            o.process = rank
        else:
            if isinstance(comm, bool) or not isinstance(comm, int) or comm <= 0:
                raise InvalidArgumentError(f"comm: expected a non-null ncclComm_t as an int, got "
                                           f"{comm!r}")
            gpu.comm = ffi.cast("ncclComm_t", comm)
            o.process = -1 if rank is None else rank
            if size is not None:
                o.nccl_ranks = size
        o.devices = gpu
        o.num_devices = 1
        o.timeout_seconds = timeout
        o.wait = 1 if wait else 0
        o.check_pointers = 1 if check_pointers else 0
        o.abort_borrowed_on_failure = 1 if abort_borrowed_on_failure else 0
        o.max_batches_in_flight = max_batches_in_flight
        try:
            o.agreement = _AGREEMENT[agreement]
        except KeyError:
            raise InvalidArgumentError(f"agreement: unknown {agreement!r} (first_use, every_call, "
                                       "skip)") from None
        try:
            o.packing = _PACKING[packing]
        except KeyError:
            raise InvalidArgumentError(f"packing: unknown {packing!r} (auto, staging, "
                                       "gather)") from None
        o.overlap = 1 if overlap else 0
        lib_c = ffi.new("char[]", library.encode()) if library else ffi.NULL
        o.library = lib_c
        out = ffi.new("reshard_executor_t**")
        check(api.nccl_executor_create(o, out))
        self.device = device
        self.waits = bool(wait)
        self.comm = comm
        super().__init__(_ptr=out[0])

    @property
    def stream(self) -> int:
        """The stream the executor orders its work on (0: its own)."""
        return self._stream

    @property
    def process(self) -> Optional[int]:
        return self.rank

    def _converter(self, plan: Plan) -> _CudaConverter:
        dev = self.device
        return _CudaConverter(self.transport, lambda d: dev, self._stream or 1, self._stream)

    def info(self) -> Dict[str, Any]:
        out = super().info()
        out.update(device=self.device, stream=self._stream, wait=self.waits)
        return out


__all__: List[str] = ["CudaLocalExecutor", "NcclExecutor", "nccl_unique_id", "stream_pointer"]
