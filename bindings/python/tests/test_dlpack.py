"""Buffers through DLPack (NumPy, JAX) and the buffer protocol, zero-copy."""
import array
import json

import numpy as np
import pytest

import reshard
from test_core import DLOPEN_SPEC


class OnlyDLPack:
    """Hides everything of an array but the DLPack protocol."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class LegacyDLPack(OnlyDLPack):
    """An exporter of the unversioned (pre-1.0) capsule only."""

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()


@pytest.mark.parametrize("wrap", [OnlyDLPack, LegacyDLPack])
def test_numpy_through_dlpack_is_zero_copy(wrap):
    p = reshard.plan(DLOPEN_SPEC)
    g = np.arange(60, dtype=np.float64).reshape(6, 10)
    src = [[wrap(a) for a in p.scatter({"w": g})[0]]]
    dst_np = p.allocate("dst", fill=-1)
    # destinations written through the DLPack pointer land in the NumPy arrays
    reshard.execute(p, src, [[wrap(a) for a in dst_np[0]]])
    assert np.array_equal(p.gather(dst_np)["w"], g)


def test_dlpack_checks_dtype_shape_strides():
    p = reshard.plan(DLOPEN_SPEC)
    g = np.arange(60, dtype=np.float64).reshape(6, 10)
    src, dst = p.scatter({"w": g}), p.allocate("dst")
    bad = [list(src[0])]
    bad[0][0] = OnlyDLPack(src[0][0].astype(np.int64))
    with pytest.raises(reshard.InvalidArgumentError, match="dtype i64 given"):
        reshard.execute(p, bad, dst)
    bad[0][0] = OnlyDLPack(src[0][0].reshape(-1))
    with pytest.raises(reshard.InvalidArgumentError, match="shape"):
        reshard.execute(p, bad, dst)
    bad[0][0] = OnlyDLPack(np.zeros((3, 6))[:, ::2])
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"sources\['w'\]\[0\]: not contiguous \(strides \(6, 2\) elements\)"):
        reshard.execute(p, bad, dst)
    # column-major: contiguous, but not in C order
    bad[0][0] = OnlyDLPack(np.asfortranarray(src[0][0]))
    with pytest.raises(reshard.InvalidArgumentError, match=r"strides \(1, 3\) elements"):
        reshard.execute(p, bad, dst)


def test_read_only_dlpack_destination():
    p = reshard.plan(DLOPEN_SPEC)
    src, dst = p.scatter({"w": np.zeros((6, 10))}), p.allocate("dst")
    dst[0][0].flags.writeable = False
    # A versioned capsule says it is read-only (DLPACK_FLAG_BITMASK_READ_ONLY).
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"destinations\['w'\]\[0\]: the DLPack export is read-only"):
        reshard.execute(p, src, [[OnlyDLPack(d) for d in dst[0]]])
    # NumPy will not export it as a legacy capsule, which cannot say so.
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"destinations\['w'\]\[0\]: numpy.from_dlpack refused the export"):
        reshard.execute(p, src, [[LegacyDLPack(d) for d in dst[0]]])
    # As a source, a read-only export is fine.
    ro = [a.copy() for a in src[0]]
    for a in ro:
        a.flags.writeable = False
    reshard.execute(p, [[OnlyDLPack(a) for a in ro]], p.allocate("dst"))


# An even split: source entries [2, 2], destination entries [2, 8].
EVEN = {
    "meshes": {"train": {"axis_names": ["dp", "tp"], "shape": [2, 4]},
               "infer": {"axis_names": ["tp"], "shape": [2], "devices": [8, 9]}},
    "tensors": [{"name": "w", "shape": [4, 8], "dtype": "f64",
                 "src": {"mesh": "train", "spec": ["dp", "tp"]},
                 "dst": {"mesh": "infer", "spec": ["tp", None]}}],
}
ALL_DTYPES = ["f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i64", "i32", "i16", "i8", "u64",
              "u32", "u16", "u8", "bool"]
NOT_IN_NUMPY = ["bf16", "f8e4m3", "f8e5m2"]  # what NumPy's from_dlpack refuses


def _values(dtype, shape):
    """Distinct bit patterns of `dtype` (every byte differs between elements)."""
    dt = reshard.numpy_dtype(dtype)
    n = int(np.prod(shape))
    if dtype == "bool":
        return (np.arange(n) % 3 == 1).reshape(shape)
    raw = (np.arange(n * dt.itemsize) * 7 + 3).astype(np.uint8)
    a = raw.view(dt).reshape(shape).copy()
    if dt.kind == "f":  # no NaN: compare by value and by bits
        a[~np.isfinite(a.astype(np.float64))] = 1
    return a


def _exporters(dtype):
    """Ways to hand an array of `dtype` over by DLPack: NumPy through the
    versioned and the legacy capsule, JAX (which also exports bf16 and f8)."""
    out = []
    if dtype not in NOT_IN_NUMPY:
        out += [("numpy", OnlyDLPack), ("numpy-legacy", LegacyDLPack)]
    try:
        import jax  # noqa: F401
        if dtype not in ("f64", "i64", "u64"):  # (64-bit types need jax_enable_x64)
            out += [("jax", OnlyDLPack), ("jax-legacy", LegacyDLPack)]
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_through_dlpack(dtype):
    """Each reshard dtype, from each exporter: the array NumPy makes is the
    exporter's memory (zero-copy), of the right dtype, shape and strides, and
    executing moves the exact bits."""
    from reshard._core import _from_dlpack
    spec = json.loads(json.dumps(EVEN))
    spec["tensors"][0]["dtype"] = dtype
    p = reshard.plan(spec)
    g = _values(dtype, (4, 8))
    exporters = _exporters(dtype)
    if not exporters:
        pytest.skip("bf16 and f8 arrays come from JAX here")
    for kind, wrap in exporters:
        parts = p.scatter({"w": g})[0]
        if kind.startswith("jax"):
            import jax
            parts = [jax.device_put(a, jax.devices("cpu")[0]) for a in parts]
            ptrs = [a.unsafe_buffer_pointer() for a in parts]
        else:
            ptrs = [a.ctypes.data for a in parts]
        for a, ptr in zip(parts, ptrs):
            got, name = _from_dlpack(wrap(a), "x", False)
            assert name == dtype, (kind, name)
            assert got.ctypes.data == ptr, kind  # zero-copy
            assert got.shape == (2, 2) and got.strides == (2 * got.itemsize, got.itemsize), kind
            assert np.array_equal(np.asarray(got).view(np.uint8),
                                  np.asarray(a).view(np.uint8)), kind
        # The relabelling leaves the exporter's own arrays as they were.
        assert str(np.asarray(parts[0]).dtype) == reshard.numpy_dtype(dtype).name
        dst = p.allocate("dst", fill=0)
        out_wrap = (lambda d: d) if dtype in NOT_IN_NUMPY else OnlyDLPack  # (NumPy cannot export bf16)
        reshard.execute(p, [[wrap(a) for a in parts]], [[out_wrap(d) for d in dst[0]]])
        out = p.gather(dst)["w"]
        assert out.dtype == g.dtype and np.array_equal(out.view(np.uint8), g.view(np.uint8)), kind


@pytest.mark.parametrize("dtype", NOT_IN_NUMPY + ["bool"])
def test_relabel_for_numpy(dtype):
    """The one hand-written step: a capsule of a dtype NumPy refuses gets the
    code of the unsigned integer of its width (bool: only for NumPy versions
    without DLPack's bool), and NumPy reads it."""
    from reshard._core import _Export
    a = _values(dtype, (3, 4))
    if dtype != "bool":
        jax = pytest.importorskip("jax")
        a = jax.device_put(a, jax.devices("cpu")[0])
        with pytest.raises((RuntimeError, BufferError), match="dtype"):
            np.from_dlpack(a)  # NumPy's refusal, which the relabelling works around
    ex = _Export(a, True)
    got = np.from_dlpack(ex)
    assert ex.dtype == dtype
    assert got.dtype == np.dtype(f"u{reshard.numpy_dtype(dtype).itemsize}")
    assert got.shape == (3, 4) and got.strides == (4 * got.itemsize, got.itemsize)
    assert np.array_equal(got, np.asarray(a).view(got.dtype))


def test_dlpack_views_strides_and_offsets():
    """Views: an interior slice (a data pointer inside another buffer) moves
    its own elements; a size-1 dim's stride does not matter; a padded row
    does."""
    p = reshard.plan(EVEN)
    g = np.arange(32, dtype=np.float64).reshape(4, 8)
    src = p.scatter({"w": g})
    big = np.full(100, -1.0)
    views = []
    for i, a in enumerate(src[0]):  # each entry inside a larger buffer, at an offset
        v = big[10 + 8 * i:14 + 8 * i].reshape(2, 2)
        v[...] = a
        views.append(OnlyDLPack(v))
    dst = p.allocate("dst", fill=0)
    reshard.execute(p, [views], dst)
    assert np.array_equal(p.gather(dst)["w"], g)
    one = dict(EVEN, tensors=[dict(EVEN["tensors"][0], shape=[2, 4])])  # entries [1, 1]
    q = reshard.plan(one)
    col = np.arange(12.0).reshape(4, 3)[:1, :1]  # shape (1, 1), strides (24, 8)
    assert np.from_dlpack(OnlyDLPack(col)).flags.c_contiguous
    reshard.execute(q, [[OnlyDLPack(col) for _ in q.tensors[0].src.entries]], q.allocate("dst"))
    with pytest.raises(reshard.InvalidArgumentError, match=r"not contiguous \(strides \(4, 1\)"):
        reshard.execute(p, [[OnlyDLPack(np.zeros((2, 4))[:, :2])] * 8], p.allocate("dst"))


def test_dlpack_dtype_and_device_errors():
    p = reshard.plan(EVEN)
    src, dst = p.scatter({"w": np.zeros((4, 8))}), p.allocate("dst")
    bad = [list(src[0])]
    bad[0][3] = OnlyDLPack(np.zeros((2, 2), np.complex128))
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"sources\['w'\]\[3\]: DLPack dtype complex128 has no reshard"):
        reshard.execute(p, bad, dst)
    bad[0][3] = OnlyDLPack(np.zeros((2, 2), np.float32))
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"sources\['w'\]\[3\]: dtype f32 given, tensor 'w' is f64"):
        reshard.execute(p, bad, dst)

    class OnGPU(OnlyDLPack):
        def __dlpack_device__(self):
            return (2, 1)

    bad[0][3] = OnGPU(np.zeros((2, 2)))
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"sources\['w'\]\[3\]: buffer on DLPack device type 2 \(device 1\); "
                             "host executors need CPU memory"):
        reshard.execute(p, bad, dst)

    class NoDevice:  # no __dlpack_device__: taken as the CPU
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

    reshard.execute(p, [[NoDevice(a) for a in src[0]]], dst)


def test_buffer_protocol():
    p = reshard.plan(DLOPEN_SPEC)
    g = np.arange(60, dtype=np.float64).reshape(6, 10)
    t = p.tensors[0]
    src = [[array.array("d", g[e.index].ravel()) if i % 2 else memoryview(np.ascontiguousarray(g[e.index]))
            for i, e in enumerate(t.src.entries)]]
    # typed 1-D buffers must have the entry's shape; raw bytes only its size
    with pytest.raises(reshard.InvalidArgumentError, match="shape"):
        reshard.execute(p, src, p.allocate("dst"))
    src = [[bytearray(np.ascontiguousarray(g[e.index]).tobytes()) for e in t.src.entries]]
    dst = [[bytearray(8 * int(np.prod(e.shape))) for e in t.dst.entries]]
    reshard.execute(p, src, dst)
    out = np.concatenate([np.frombuffer(b).reshape(e.shape) for b, e in zip(dst[0], t.dst.entries)])
    assert np.array_equal(out, g)
    with pytest.raises(reshard.InvalidArgumentError, match="format 'i'"):
        reshard.execute(p, [[array.array("i", [0] * 3) for _ in t.src.entries]], dst)


def test_jax_arrays_through_dlpack():
    jax = pytest.importorskip("jax")
    spec = json.loads(json.dumps(DLOPEN_SPEC))
    spec["tensors"][0]["dtype"] = "f32"
    p = reshard.plan(spec)
    g = np.arange(60, dtype=np.float32).reshape(6, 10)
    if True:
        src = [[jax.device_put(a, jax.devices()[i]) for i, a in enumerate(p.scatter({"w": g})[0])]]
        dst = p.allocate("dst")
        reshard.execute(p, src, dst)
        assert np.array_equal(p.gather(dst)["w"], g)
        # zero-copy: the pointer the DLPack capsule gives is the array's buffer
        from reshard._core import _from_dlpack
        a, dt = _from_dlpack(src[0][0], "x", False)
        assert a.ctypes.data == src[0][0].unsafe_buffer_pointer()
        assert dt == "f32" and a.shape == (3, 3)
        with pytest.raises(reshard.InvalidArgumentError, match="immutable"):
            reshard.execute(p, src, [[jax.numpy.zeros(e.shape) for e in p.tensors[0].dst.entries]])
