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
    with pytest.raises(reshard.InvalidArgumentError, match="not contiguous"):
        reshard.execute(p, bad, dst)


def test_read_only_dlpack_destination():
    p = reshard.plan(DLOPEN_SPEC)
    src, dst = p.scatter({"w": np.zeros((6, 10))}), p.allocate("dst")
    dst[0][0].flags.writeable = False
    with pytest.raises((reshard.InvalidArgumentError, BufferError)):
        reshard.execute(p, src, [[OnlyDLPack(d) for d in dst[0]]])


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
        from reshard._core import _Pinned, _from_dlpack
        pin = _Pinned()
        ptr, dt, shape, _ = _from_dlpack(src[0][0], "x", False, pin)
        assert ptr == src[0][0].unsafe_buffer_pointer() and dt == "f32" and shape == (3, 3)
        pin.release()
        with pytest.raises(reshard.InvalidArgumentError, match="immutable"):
            reshard.execute(p, src, [[jax.numpy.zeros(e.shape) for e in p.tensors[0].dst.entries]])
