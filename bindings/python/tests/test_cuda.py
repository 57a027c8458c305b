"""The CUDA executors' Python side without a GPU: refusals where the CUDA
backend is missing, argument checks that run before anything is loaded, and
the conversion of CUDA buffers (DLPack kDLCUDA capsules and
``__cuda_array_interface__``) checked end to end by running the resulting
pointer table on host memory labelled as CUDA memory."""
import ctypes

import numpy as np
import pytest

import reshard
from reshard import _core, _cuda
from reshard._ffi import api, check, ffi

CUDA_OK, CUDA_WHY = reshard.transport_available("cuda_local")
NCCL_OK, NCCL_WHY = reshard.transport_available("nccl")
no_gpu = pytest.mark.skipif(CUDA_OK, reason="a GPU is present: the refusals do not happen")

SPEC = {"meshes": {"a": {"axis_names": ["x"], "shape": [2], "ordinals": [0, 0]},
                   "b": {"axis_names": ["y"], "shape": [3], "devices": [2, 3, 4],
                         "ordinals": [0, 0, 1]}},
        "tensors": [{"name": "w", "shape": [4, 6], "dtype": "f32",
                     "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "b", "spec": [None, "y"]}}]}


# ----------------------------------------------------------- availability
@no_gpu
def test_transports_unavailable_say_why():
    for t in ("cuda_local", "nccl"):
        ok, why = reshard.transport_available(t)
        assert not ok and "CUDA" in why, why


@no_gpu
def test_cuda_local_executor_refused_without_gpu():
    with pytest.raises(reshard.UnsupportedError) as e:
        reshard.CudaLocalExecutor()
    assert e.value.message == CUDA_WHY or "CUDA" in e.value.message, e.value.message


@no_gpu
def test_nccl_refused_without_gpu():
    # ncclGetUniqueId needs no GPU: with the backend loaded it works anyway
    try:
        uid = reshard.nccl_unique_id()
        assert isinstance(uid, bytes) and len(uid) == 128 and any(uid)
    except reshard.UnsupportedError as e:
        assert "libreshard_cuda" in e.message or "NCCL" in e.message, e.message
    with pytest.raises(reshard.UnsupportedError, match="CUDA"):
        reshard.NcclExecutor(0, rank=0, size=1, unique_id=b"\1" * 128)
    # a caller's communicator (any integer here: nothing dereferences it first)
    with pytest.raises(reshard.UnsupportedError, match="CUDA"):
        reshard.NcclExecutor(0, comm=0x1234, stream=77)


# ------------------------------------------------------ NcclExecutor arguments
@pytest.mark.parametrize("kwargs, cls, msg", [
    (dict(device=-1, rank=0, size=1, unique_id=b"\1" * 128), reshard.InvalidArgumentError,
     "device: -1 is negative"),
    (dict(device="0", rank=0, size=1, unique_id=b"\1" * 128), TypeError, "device: expected"),
    (dict(device=0, rank=0, size=1), reshard.InvalidArgumentError, "unique_id, comm: pass exactly one"),
    (dict(device=0, rank=0, size=1, unique_id=b"\1" * 128, comm=5), reshard.InvalidArgumentError,
     "unique_id, comm: pass exactly one"),
    (dict(device=0, rank=0, size=1, unique_id=b"\1" * 5), reshard.InvalidArgumentError,
     "unique_id: 5 bytes given"),
    (dict(device=0, unique_id=b"\1" * 128), reshard.InvalidArgumentError, "rank, size: required"),
    (dict(device=0, rank=2, size=2, unique_id=b"\1" * 128), reshard.InvalidArgumentError,
     r"rank: 2 is outside \[0, 2\)"),
    (dict(device=0, rank=0, size=0, unique_id=b"\1" * 128), reshard.InvalidArgumentError,
     "size: 0 is not positive"),
    (dict(device=0, comm=0), reshard.InvalidArgumentError, "comm: expected a non-null"),
    (dict(device=0, rank=0, size=1, unique_id=b"\1" * 128, agreement="never"),
     reshard.InvalidArgumentError, "agreement: unknown 'never'"),
    (dict(device=0, rank=0, size=1, unique_id=b"\1" * 128, packing="zip"),
     reshard.InvalidArgumentError, "packing: unknown 'zip'"),
    (dict(device=0, rank=0, size=1, unique_id=b"\1" * 128, stream="s"), TypeError, "stream: expected"),
    (dict(device=0, rank=0, size=1, unique_id=b"\1" * 128, stream=-3), reshard.InvalidArgumentError,
     "stream: -3 is not a stream pointer"),
    # checked by the library, before the backend loads
    (dict(device=0, rank=0, size=1, unique_id=bytes(128)), reshard.InvalidArgumentError,
     "unique_id: all zero"),
    (dict(device=0, rank=0, size=1, unique_id=b"\1" * 128, timeout=-1.0),
     reshard.InvalidArgumentError, "timeout_seconds"),
])
def test_nccl_executor_arguments(kwargs, cls, msg):
    device = kwargs.pop("device")
    with pytest.raises(cls, match=msg):
        reshard.NcclExecutor(device, **kwargs)


def test_stream_pointer():
    class TorchLike:
        cuda_stream = 1234

    class CupyLike:
        ptr = 99

    assert _cuda.stream_pointer(None) == 0
    assert _cuda.stream_pointer(77) == 77
    assert _cuda.stream_pointer(TorchLike()) == 1234
    assert _cuda.stream_pointer(CupyLike()) == 99
    with pytest.raises(TypeError, match="stream: expected"):
        _cuda.stream_pointer(True)


# ------------------------------------------------- CUDA buffers, emulated
def _capsule(m, versioned):
    """A PyCapsule around a cffi-made DLManagedTensor(Versioned), no deleter."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    name = b"dltensor_versioned" if versioned else b"dltensor"
    return new(int(ffi.cast("uintptr_t", m)), name, None)


class FakeCuda:
    """A DLPack exporter that labels a NumPy array's host memory as CUDA
    memory on GPU ``device`` (its capsule is made here, with cffi)."""

    CODES = {"float32": (2, 32), "float64": (2, 64), "uint16": (4, 16), "int32": (0, 32)}

    def __init__(self, a, device=0, versioned=True, read_only=False, strides=None, offset=0,
                 dtype=None, device_type=2):
        self.a, self.device, self.versioned = a, device, versioned
        self.read_only, self.strides, self.offset = read_only, strides, offset
        self.dtype = dtype or self.CODES[a.dtype.name]
        self.device_type = device_type
        self.streams = []

    def __dlpack_device__(self):
        return (self.device_type, self.device)

    def __dlpack__(self, stream=None, max_version=None):
        self.streams.append(stream)
        versioned = self.versioned and max_version is not None
        m = ffi.new("DLManagedTensorVersioned*" if versioned else "DLManagedTensor*")
        shape = ffi.new("int64_t[]", list(self.a.shape) or [1])
        t = m.dl_tensor
        t.data = ffi.cast("void*", self.a.__array_interface__["data"][0] - self.offset)
        t.byte_offset = self.offset
        t.device.device_type, t.device.device_id = self.device_type, self.device
        t.ndim = self.a.ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = self.dtype[0], self.dtype[1], 1
        t.shape = shape
        keep = [m, shape]
        if self.strides is not None:
            st = ffi.new("int64_t[]", list(self.strides))
            t.strides = st
            keep.append(st)
        if versioned:
            m.version.major, m.version.minor = 1, 0
            m.flags = 1 if self.read_only else 0
        self._keep = keep  # the capsule has no deleter: this object owns the memory
        return _capsule(m, versioned)


class FakeCAI:
    def __init__(self, a, readonly=False, typestr=None, strides=None):
        self.a = a
        self.__cuda_array_interface__ = {
            "shape": a.shape, "typestr": typestr or a.dtype.str,
            "data": (a.__array_interface__["data"][0], readonly), "version": 3,
            "strides": strides, "stream": None}


class EmulatedCuda(_cuda._CudaExecutor):
    """A host executor behind the CUDA executors' Python path: what the
    conversion produces is executed on host memory."""

    transport = "cuda_local"

    def __init__(self):
        opts = ffi.new("reshard_executor_options_t*")
        opts.struct_size = ffi.sizeof("reshard_executor_options_t")
        opts.transport = 1
        opts.threads = 1
        opts.timeout_seconds = 60.0
        out = ffi.new("reshard_executor_t**")
        check(api.executor_create(opts, out))
        super().__init__(_ptr=out[0])

    def _converter(self, plan):
        return _cuda._CudaConverter(self.transport, lambda d: plan.device_location(d)[2], 1, 0)


def _buffers(plan, wrap_src, wrap_dst, fill=-1.0):
    g = np.arange(24, dtype=np.float32).reshape(4, 6)
    src_np = plan.scatter({"w": g})
    dst_np = plan.allocate("dst", fill=fill)
    return g, src_np, dst_np, [[wrap_src(a, e) for a, e in zip(src_np[0], plan.tensors[0].src.entries)]], \
        [[wrap_dst(a, e) for a, e in zip(dst_np[0], plan.tensors[0].dst.entries)]]


def _gpu_of(plan):
    return lambda a, e: plan.device_location(e.device)[2]


@pytest.mark.parametrize("versioned", [True, False])
def test_dlpack_cuda_pointers_reach_the_library(versioned):
    """Capsules labelled kDLCUDA, on the GPU the plan's ordinals name, with
    byte offsets: the table holds exactly the exporters' addresses (the
    host executor behind them moves the right bytes), and the exporters were
    asked for stream 1 (the legacy default stream)."""
    p = reshard.plan(SPEC)
    gpu = _gpu_of(p)
    made = []

    def wrap(a, e):
        f = FakeCuda(a, device=gpu(a, e), versioned=versioned, offset=16)
        made.append(f)
        return f
    g, _, dst_np, src, dst = _buffers(p, wrap, wrap)
    EmulatedCuda().execute(p, src, dst)
    assert np.array_equal(p.gather(dst_np)["w"], g)
    assert all(f.streams == [1] * len(f.streams) and f.streams for f in made)


def test_cuda_array_interface_and_prepare():
    p = reshard.plan(SPEC)
    g, src_np, dst_np, src, dst = _buffers(p, lambda a, e: FakeCAI(a), lambda a, e: FakeCAI(a))
    g = g.copy()  # (scatter's pieces may be views of g)
    ex = EmulatedCuda()
    with ex.prepare(p, src, dst) as run:
        for k in range(3):
            for a in src_np[0]:
                a += 1
            run()
            assert np.array_equal(p.gather(dst_np)["w"], g + k + 1)


def _refused(p, side, i, bad, msg, cls=reshard.InvalidArgumentError):
    gpu = _gpu_of(p)
    _, _, _, src, dst = _buffers(p, lambda a, e: FakeCuda(a, gpu(a, e)),
                                 lambda a, e: FakeCuda(a, gpu(a, e)))
    rows = src if side == "sources" else dst
    rows[0][i] = bad(rows[0][i].a)
    with pytest.raises(cls) as e:
        EmulatedCuda().execute(p, src, dst)
    assert msg in str(e.value), str(e.value)


@pytest.mark.parametrize("side, i, bad, msg", [
    ("sources", 0, lambda a: a, "sources['w'][0]: host memory (ndarray on DLPack device type 1, "
     "device 0) given to a cuda_local executor"),
    ("destinations", 1, lambda a: FakeCuda(a, 1), "destinations['w'][1]: on GPU 1, the "
     "cuda_local executor puts device 3 of tensor 'w' on GPU 0"),
    ("destinations", 2, lambda a: FakeCuda(a, 0), "destinations['w'][2]: on GPU 0, the "
     "cuda_local executor puts device 4 of tensor 'w' on GPU 1"),
    ("sources", 1, lambda a: FakeCuda(a, 0, device_type=1), "sources['w'][1]: host memory (FakeCuda "
     "on DLPack device type 1, device 0) given to a cuda_local executor, which needs CUDA device "
     "memory (kDLCUDA = 2)"),
    ("sources", 1, lambda a: FakeCuda(a.astype(np.float64), 0), "sources['w'][1]: dtype f64 given, "
     "tensor 'w' is f32"),
    ("sources", 1, lambda a: FakeCuda(a.view(np.uint16)[:, ::2].copy(), 0, dtype=(4, 16)),
     "sources['w'][1]: dtype bf16 given, tensor 'w' is f32"),
    ("sources", 0, lambda a: FakeCuda(a.reshape(3, 4), 0), "sources['w'][0]: shape (3, 4) given, "
     "entry of device 0 of tensor 'w' is box [0:2, 0:6], shape (2, 6)"),
    ("sources", 0, lambda a: FakeCuda(a, 0, strides=(1, 2)), "sources['w'][0]: not contiguous"),
    ("destinations", 0, lambda a: FakeCuda(a, 0, read_only=True), "destinations['w'][0]: the "
     "DLPack export is read-only"),
    ("destinations", 0, lambda a: FakeCAI(a, readonly=True), "destinations['w'][0]: "
     "__cuda_array_interface__ is read-only"),
    ("sources", 0, lambda a: FakeCAI(a, typestr="<i4"), "sources['w'][0]: dtype i32 given"),
    ("sources", 0, lambda a: FakeCAI(a, strides=(4, 24)), "sources['w'][0]: not contiguous"),
    ("sources", 0, lambda a: FakeCuda(a, 0, dtype=(5, 64)), "sources['w'][0]: dtype code 5 bits "
     "64 lanes 1 (no reshard equivalent) given"),
])
def test_bad_cuda_buffers_name_the_argument(side, i, bad, msg):
    _refused(reshard.plan(SPEC), side, i, bad, msg)


def test_not_a_buffer_is_a_type_error():
    _refused(reshard.plan(SPEC), "sources", 0, lambda a: object(),
             "sources['w'][0]: object is not a CUDA buffer", TypeError)


def test_explicit_c_strides_are_contiguous():
    p = reshard.plan(SPEC)
    gpu = _gpu_of(p)
    g, _, dst_np, src, dst = _buffers(
        p, lambda a, e: FakeCuda(a, gpu(a, e), strides=(a.shape[1], 1)),
        lambda a, e: FakeCuda(a, gpu(a, e)))
    EmulatedCuda().execute(p, src, dst)
    assert np.array_equal(p.gather(dst_np)["w"], g)


def test_nccl_converter_checks_the_executor_gpu():
    """An NCCL executor's entries are all on its one GPU, whatever the
    plan's ordinals."""
    conv = _cuda._CudaConverter("nccl", lambda d: 3, 1, 0)
    p = reshard.plan(SPEC)
    t, e = p.tensors[0], p.tensors[0].src.entries[0]
    a = np.zeros((2, 6), np.float32)
    pinned = _core._Pinned()
    assert conv(FakeCuda(a, 3), t, e, "x", False, pinned) == a.__array_interface__["data"][0]
    with pytest.raises(reshard.InvalidArgumentError, match="x: on GPU 0, the nccl executor puts "
                       "device 0 of tensor 'w' on GPU 3"):
        conv(FakeCuda(a, 0), t, e, "x", False, pinned)
    pinned.release()


def test_nccl_converter_asks_exporters_for_the_executor_stream():
    conv = _cuda._CudaConverter("nccl", lambda d: 0, 1234, 1234)
    p = reshard.plan(SPEC)
    f = FakeCuda(np.zeros((2, 6), np.float32), 0)
    pinned = _core._Pinned()
    conv(f, p.tensors[0], p.tensors[0].src.entries[0], "x", False, pinned)
    assert f.streams == [1234]
    pinned.release()


class _FakeStream:
    def __init__(self, log, name, ptr):
        self.log, self.name, self.cuda_stream = log, name, ptr

    def wait_stream(self, other):
        self.log.append((self.name, "waits for", other.name))


class _FakeTorch:
    """What _CudaConverter.before/after use of torch.cuda, recording the
    stream waits they enqueue."""

    def __init__(self, current_ptr):
        self.log = []
        log = self.log

        class cuda:
            @staticmethod
            def current_stream(d):
                return _FakeStream(log, f"current{d}", current_ptr)

            @staticmethod
            def default_stream(d):
                return _FakeStream(log, f"default{d}", 0)

            @staticmethod
            def ExternalStream(ptr, device):
                return _FakeStream(log, f"executor{device}", ptr)
        self.cuda = cuda


@pytest.mark.parametrize("current, executor_stream, waited, want", [
    # torch on its default stream, executor's own stream: nothing to order
    (0, 0, True, []),
    # torch on a side stream, the in-process executor: default waits for it
    (77, 0, True, [("default0", "waits for", "current0")]),
    # NCCL on torch's current stream: one stream, nothing to order
    (77, 77, False, []),
    # NCCL on another stream without a host wait: both directions
    (77, 99, False, [("executor0", "waits for", "current0"), ("current0", "waits for", "executor0")]),
    # ... with a host wait: only before
    (77, 99, True, [("executor0", "waits for", "current0")]),
])
def test_torch_stream_order(monkeypatch, current, executor_stream, waited, want):
    fake = _FakeTorch(current)
    monkeypatch.setitem(__import__("sys").modules, "torch", fake)
    conv = _cuda._CudaConverter("nccl", lambda d: 0, executor_stream or 1, executor_stream)
    conv.torch_devices.add(0)
    conv.before()
    conv.after(waited)
    assert fake.log == want
