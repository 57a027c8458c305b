"""Error paths: bad specs, wrong buffers, corrupted plan bytes."""
import json

import numpy as np
import pytest

import reshard
from test_core import DLOPEN_SPEC


def spec_with(**changes):
    s = json.loads(json.dumps(DLOPEN_SPEC))
    s["tensors"][0].update(changes)
    return s


def test_error_classes_carry_code_and_message():
    with pytest.raises(reshard.ParseError) as e:
        reshard.plan('{"tensors": [,]}')
    assert e.value.code == 5 and e.value.code_name == "parse_error" and "line 1" in e.value.message
    assert isinstance(e.value, reshard.ReshardError) and isinstance(e.value, ValueError)
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.plan(spec_with(src={"mesh": "train", "spec": ["dp", "tq"]}))
    assert e.value.code == 1
    assert e.value.message.startswith("tensors[0].src.spec[1]") and '"tq"' in e.value.message
    with pytest.raises(reshard.InvalidArgumentError, match="did you mean"):
        reshard.plan(spec_with(dtpe="f32"))
    with pytest.raises(reshard.InvalidArgumentError, match="dtype"):
        reshard.plan(spec_with(dtype="f31"))
    with pytest.raises(FileNotFoundError):
        reshard.plan("/nonexistent/spec.json")
    with pytest.raises(TypeError):
        reshard.plan(42)


def test_nics_per_host_passes_through_the_spec():
    # Spec options reach the planner unchanged: the NIC count (C ABI 1.7)
    # changes the estimate, not the bytes; a bad value names its field.
    def stats(**options):
        s = json.loads(json.dumps(DLOPEN_SPEC))
        s["meshes"]["train"]["hosts"] = [0] * 8
        s["meshes"]["infer"]["hosts"] = [1, 1]
        s["tensors"][0]["shape"] = [600, 1000]  # planned, not executed
        s.setdefault("options", {}).update(options)
        return reshard.plan(s).stats
    base, one = stats(), stats(nics_per_host=1)
    assert one["network_bytes"] == base["network_bytes"]
    assert one["cost_seconds"] > base["cost_seconds"]
    assert one["lower_bound_cost_seconds"] > base["lower_bound_cost_seconds"]
    with pytest.raises(reshard.InvalidArgumentError) as e:
        stats(nics_per_host=-1)
    assert e.value.message.startswith("options.nics_per_host: must be in [0, 1048576]")


def test_resource_exhausted_with_estimate():
    with pytest.raises(reshard.ResourceExhaustedError) as e:
        reshard.plan(DLOPEN_SPEC, max_plan_bytes=1)
    assert e.value.code == 12 and "max_plan_bytes" in e.value.message
    reshard.plan(DLOPEN_SPEC, max_plan_bytes=-1)


def test_corrupted_plan_bytes():
    good = reshard.plan(DLOPEN_SPEC).to_bytes()
    reshard.verify_bytes(good)
    for n in list(range(0, 64)) + list(range(len(good) - 16, len(good))):
        with pytest.raises(reshard.CorruptError):
            reshard.Plan.from_bytes(good[:n])
    rng = np.random.default_rng(0)
    flipped_ok = 0
    for bit in rng.choice(len(good) * 8, 300, replace=False):
        b = bytearray(good)
        b[bit // 8] ^= 1 << (bit % 8)
        try:
            p = reshard.Plan.from_bytes(bytes(b))
        except reshard.CorruptError:
            continue
        # a flip the verifier accepts (padding, statistics it recomputes...) must
        # still give a usable plan
        assert p.verify()["mismatches"] == 0
        flipped_ok += 1
    assert flipped_ok < 300
    with pytest.raises(reshard.CorruptError, match="identifier|RSHP|verification"):
        reshard.Plan.from_bytes(b"XXXX" + good[4:8] + b"XXXX" + good[12:])
    with pytest.raises(reshard.CorruptError):
        reshard.verify_bytes(b"\x00" * 32)


@pytest.fixture
def p():
    return reshard.plan(DLOPEN_SPEC)


def buffers(p):
    g = np.arange(60, dtype=np.float64).reshape(6, 10)
    return p.scatter({"w": g}), p.allocate("dst")


def test_wrong_dtype(p):
    src, dst = buffers(p)
    src[0][3] = src[0][3].astype(np.float32)
    with pytest.raises(reshard.InvalidArgumentError, match=r"sources\['w'\]\[3\]: dtype float32 given"):
        reshard.execute(p, src, dst)


def test_foreign_byte_order(p):
    # float64 in the other byte order has the same dtype name: it must be
    # refused, not reinterpreted.
    other = ">" if np.little_endian else "<"
    for side in ("sources", "destinations"):
        src, dst = buffers(p)
        bufs = src if side == "sources" else dst
        bufs[0][1] = bufs[0][1].astype(np.dtype(np.float64).newbyteorder(other))
        with pytest.raises(reshard.InvalidArgumentError,
                           match=rf"{side}\['w'\]\[1\]: dtype '{other}f8' is not in this "
                           "machine's byte order"):
            reshard.execute(p, src, dst)
        with pytest.raises(reshard.InvalidArgumentError, match="byte order"):
            reshard.prepare(p, src, dst)
        # the same buffer through the buffer protocol: its format says so
        bufs[0][1] = memoryview(bufs[0][1])
        with pytest.raises(reshard.InvalidArgumentError, match=rf"buffer format '{other}d' given"):
            reshard.execute(p, src, dst)


def test_wrong_size(p):
    src, dst = buffers(p)
    dst[0][1] = np.empty((2, 10))
    with pytest.raises(reshard.InvalidArgumentError, match=r"destinations\['w'\]\[1\]: shape \(2, 10\)"):
        reshard.execute(p, src, dst)
    src2, dst2 = buffers(p)
    src2[0][0] = bytearray(7)
    with pytest.raises(reshard.InvalidArgumentError, match="7 bytes given"):
        reshard.execute(p, src2, dst2)


def test_wrong_count_and_names(p):
    src, dst = buffers(p)
    with pytest.raises(reshard.InvalidArgumentError, match="3 buffers given"):
        reshard.execute(p, [src[0][:3]], dst)
    with pytest.raises(reshard.InvalidArgumentError, match="unknown tensor"):
        reshard.execute(p, {"v": src[0]}, dst)
    with pytest.raises(reshard.InvalidArgumentError, match="2 tensors given"):
        reshard.execute(p, src + src, dst)


def test_missing_buffer_is_named_by_the_library(p):
    src, dst = buffers(p)
    src[0][2] = None
    with pytest.raises(reshard.InvalidArgumentError, match=r"buffers\[0\]\.src\[2\]"):
        reshard.execute(p, src, dst)


def test_not_contiguous(p):
    src, dst = buffers(p)
    big = np.zeros((6, 20))
    dst[0][0] = big[:3, ::2]
    with pytest.raises(reshard.InvalidArgumentError, match="not C-contiguous"):
        reshard.execute(p, src, dst)


def test_read_only_destination(p):
    src, dst = buffers(p)
    dst[0][0].flags.writeable = False
    with pytest.raises(reshard.InvalidArgumentError, match="read-only"):
        reshard.execute(p, src, dst)
    src, dst = buffers(p)
    dst[0][0] = bytes(dst[0][0].nbytes)
    with pytest.raises(reshard.InvalidArgumentError, match="read-only"):
        reshard.execute(p, src, dst)


class FakeDevice:
    """A DLPack exporter claiming to live on a CUDA device (type 2)."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kw):
        raise AssertionError("must not be exported")


def test_wrong_device(p):
    src, dst = buffers(p)
    src[0][0] = FakeDevice(src[0][0])
    with pytest.raises(reshard.InvalidArgumentError, match="DLPack device type 2"):
        reshard.execute(p, src, dst)


def test_not_a_buffer(p):
    src, dst = buffers(p)
    src[0][0] = object()
    with pytest.raises(TypeError, match="is not a buffer"):
        reshard.execute(p, src, dst)


def test_nothing_written_on_error(p):
    src, dst = buffers(p)
    for d in dst[0]:
        d.fill(-1)
    src[0][7] = None
    with pytest.raises(reshard.InvalidArgumentError):
        reshard.execute(p, src, dst)
    assert all((d == -1).all() for d in dst[0])


def test_mpi_executor_options_errors():
    with pytest.raises(reshard.InvalidArgumentError, match="unknown option"):
        reshard.MPIExecutor(agreement="sometimes")


def test_host_execution_past_its_deadline_raises_timeout():
    """Regression (issue 37, ABI 1.9): a host execution had no deadline. With
    Executor(timeout=...) copies still running past it raise
    ReshardTimeoutError naming timeout_seconds; with time enough the plan is
    exact; a timeout that is not positive and finite is refused."""
    import math
    import numpy as np
    spec = {"meshes": {"a": {"axis_names": ["x"], "shape": [8]},
                       "b": {"axis_names": ["y"], "shape": [8],
                             "devices": list(range(8, 16))}},
            "tensors": [{"name": "w", "shape": [4096, 1024], "dtype": "f32",
                         "src": {"mesh": "a", "spec": ["x"]},
                         "dst": {"mesh": "b", "spec": [None, "y"]}}]}
    p = reshard.plan(spec)
    g = np.arange(4096 * 1024, dtype=np.float32).reshape(4096, 1024)
    src, dst = p.scatter({"w": g}), p.allocate("dst", fill=-1)
    with pytest.raises(reshard.ReshardTimeoutError, match=r"timeout_seconds 0\.0001 s"):
        reshard.Executor(threads=1, timeout=1e-4).execute(p, src, dst)
    reshard.Executor(threads=1, timeout=300).execute(p, src, dst)
    assert np.array_equal(p.gather(dst)["w"], g)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(reshard.InvalidArgumentError, match="options->timeout_seconds"):
            reshard.Executor(timeout=bad)


def test_signed_plan_bytes():
    # Authenticated plans (C ABI 1.9): signed bytes read with their key and
    # without one; every bad key and bad MAC raises with its field.
    p = reshard.plan(DLOPEN_SPEC)
    key = b"k" * 32
    plain = p.to_bytes()
    signed = p.to_bytes(key=key)
    assert len(signed) == len(plain) + 48 and signed[:len(plain)] == plain
    assert reshard.Plan.from_bytes(signed, key=key).fingerprint == p.fingerprint
    assert reshard.Plan.from_bytes(signed).fingerprint == p.fingerprint
    reshard.verify_bytes(signed, key=key)
    reshard.verify_bytes(p.to_bytes(process=0, key=key), key=key)
    with pytest.raises(reshard.CorruptError, match="mac: missing"):
        reshard.Plan.from_bytes(plain, key=key)
    with pytest.raises(reshard.CorruptError, match="mac: does not match"):
        reshard.verify_bytes(signed, key=b"j" * 32)
    edited = bytearray(signed)
    edited[len(plain) // 2] ^= 1
    with pytest.raises(reshard.CorruptError, match="mac: does not match"):
        reshard.Plan.from_bytes(bytes(edited), key=key)
    for bad, text in [(b"", "options->key_size: is 0"),
                      (b"x" * 15, "options->key_size: 15 bytes is shorter"),
                      (b"x" * 1025, "options->key_size: 1025 bytes exceeds")]:
        with pytest.raises(reshard.InvalidArgumentError) as e:
            reshard.verify_bytes(signed, key=bad)
        assert e.value.message.startswith(text), e.value.message
        with pytest.raises(reshard.InvalidArgumentError) as e:
            p.to_bytes(key=bad)
        assert e.value.message.startswith(text), e.value.message
