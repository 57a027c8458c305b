"""CudaLocalExecutor on one GPU holding several plan devices, against the
host executor (the oracle the CPU tests check against NumPy)."""
import numpy as np
import pytest

import reshard
from gpu_util import (host_oracle, needs_cuda, on_gpus, random_sources, random_spec, same_bits,
                      torch)

pytestmark = needs_cuda


@pytest.fixture(scope="module")
def ex():
    return reshard.CudaLocalExecutor()


def _cuda(rows):
    return [[x.cuda() for x in row] for row in rows]


@pytest.mark.parametrize("seed", range(24))
def test_random_layouts_equal_host(ex, seed):
    """Random meshes over 2-6 plan devices on GPU 0, uneven shards,
    replication, cross-mesh moves, partial sums of f32/bf16/f16: every
    destination byte equals the host executor's."""
    rng = np.random.default_rng(seed)
    plan = reshard.plan(random_spec(rng, n_devices=int(rng.integers(2, 7))))
    src = random_sources(plan, rng)
    want = host_oracle(plan, src)
    dst = [[torch.full(e.shape, 7, dtype=w.dtype, device="cuda") for e, w in zip(t.dst.entries, ws)]
           for t, ws in zip(plan.tensors, want)]
    ex.execute(plan, _cuda(src), dst)
    for t, ws, ds in zip(plan.tensors, want, dst):
        for i, (w, d) in enumerate(zip(ws, ds)):
            assert same_bits(w, d), f"{t.name} dst entry {i} (device {t.dst.entries[i].device})"


def test_bf16_partial_sum_large(ex):
    """A 2-way partial sum of bf16 (accumulated in f32, rounded once) into
    a column split, on 4 plan devices of one GPU: equal to the host's bits."""
    spec = {"meshes": {"g": {"axis_names": ["dp", "tp"], "shape": [2, 2], "ordinals": [0] * 4}},
            "tensors": [{"name": "grad", "shape": [256, 384], "dtype": "bf16",
                         "src": {"mesh": "g", "spec": [None, "tp"], "partial": {"axes": ["dp"]}},
                         "dst": {"mesh": "g", "spec": [None, ["dp", "tp"]]}}]}
    plan = reshard.plan(spec)
    t = plan.tensors[0]
    g = torch.Generator().manual_seed(3)
    src = [[torch.randn(e.shape, generator=g).to(torch.bfloat16) for e in t.src.entries]]
    want = host_oracle(plan, src)
    dst = [[torch.empty(e.shape, dtype=torch.bfloat16, device="cuda") for e in t.dst.entries]]
    ex.execute(plan, _cuda(src), dst)
    assert all(same_bits(w, d) for w, d in zip(want[0], dst[0]))


def test_prepared_reads_new_contents(ex):
    """A prepared execution on fixed CUDA buffers moves the sources' current
    contents on every call (updated in place on torch's current stream)."""
    rng = np.random.default_rng(7)
    plan = reshard.plan(random_spec(rng, n_devices=4, dtypes=("f32",)))
    src = _cuda(random_sources(plan, rng))
    dst = [[torch.empty(e.shape, device="cuda") for e in t.dst.entries] for t in plan.tensors]
    with ex.prepare(plan, src, dst) as run:
        for step in range(3):
            for row in src:
                for x in row:
                    x.add_(1)
            run()
            want = host_oracle(plan, [[x.cpu() for x in row] for row in src])
            assert all(same_bits(w, d) for ws, ds in zip(want, dst) for w, d in zip(ws, ds)), step


def test_side_stream_producer_is_ordered(ex):
    """Sources written on a torch side stream (the current stream while
    executing) are complete before the executor's copies read them."""
    spec = {"meshes": {"a": {"axis_names": ["x"], "shape": [2], "ordinals": [0, 0]},
                       "b": {"axis_names": ["y"], "shape": [2], "devices": [2, 3],
                             "ordinals": [0, 0]}},
            "tensors": [{"name": "w", "shape": [2048, 2048], "dtype": "f32",
                         "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "b", "spec": [None, "y"]}}]}
    plan = reshard.plan(spec)
    t = plan.tensors[0]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        src = [[torch.zeros(e.shape, device="cuda") for e in t.src.entries]]
        torch.cuda.synchronize()
        for x in src[0]:
            for _ in range(20):  # queued work the copies must wait for
                x.add_(1.0)
        dst = [[torch.empty(e.shape, device="cuda") for e in t.dst.entries]]
        ex.execute(plan, src, dst)
    assert all(bool((d == 20.0).all()) for d in dst[0])


def test_dlpack_buffers(ex):
    """Objects exporting DLPack on CUDA (not torch tensors: a wrapper that
    only has __dlpack__ / __dlpack_device__) are read in place."""
    class Only:
        def __init__(self, x):
            self.x = x

        def __dlpack__(self, **kw):
            return self.x.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.x.__dlpack_device__()

    rng = np.random.default_rng(11)
    plan = reshard.plan(random_spec(rng, n_devices=3, n_tensors=2, dtypes=("f32", "bf16")))
    src = random_sources(plan, rng)
    want = host_oracle(plan, src)
    dst = [[torch.empty(e.shape, dtype=w.dtype, device="cuda") for e, w in zip(t.dst.entries, ws)]
           for t, ws in zip(plan.tensors, want)]
    ex.execute(plan, [[Only(x) for x in row] for row in _cuda(src)],
               [[Only(x) for x in row] for row in dst])
    assert all(same_bits(w, d) for ws, ds in zip(want, dst) for w, d in zip(ws, ds))


def _one_plan():
    spec = {"meshes": {"a": {"axis_names": ["x"], "shape": [2], "ordinals": [0, 0]}},
            "tensors": [{"name": "w", "shape": [4, 6], "dtype": "f32",
                         "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "a", "spec": [None, "x"]}}]}
    return reshard.plan(spec)


def test_errors_name_the_buffer(ex):
    plan = _one_plan()
    src = [[torch.zeros(2, 6, device="cuda"), torch.zeros(2, 6, device="cuda")]]
    dst = [[torch.zeros(4, 3, device="cuda"), torch.zeros(4, 3, device="cuda")]]
    cases = [
        (0, 1, torch.zeros(2, 6), "sources['w'][1]: tensor on cpu"),
        (0, 0, torch.zeros(2, 6, device="cuda", dtype=torch.float64),
         "sources['w'][0]: dtype f64 given, tensor 'w' is f32"),
        (0, 0, torch.zeros(3, 6, device="cuda"), "sources['w'][0]: shape (3, 6) given"),
        (1, 1, torch.zeros(3, 4, device="cuda").t(), "destinations['w'][1]: not contiguous"),
        (1, 0, np.zeros((4, 3), np.float32), "destinations['w'][0]: host memory"),
    ]
    for side, i, bad, msg in cases:
        s = [list(src[0])]
        d = [list(dst[0])]
        (s if side == 0 else d)[0][i] = bad
        with pytest.raises(reshard.InvalidArgumentError) as e:
            ex.execute(plan, s, d)
        assert msg in str(e.value), str(e.value)


@pytest.mark.skipif(not torch or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_wrong_gpu_is_refused(ex):
    plan = _one_plan()
    src = [[torch.zeros(2, 6, device="cuda:1"), torch.zeros(2, 6, device="cuda")]]
    dst = [[torch.zeros(4, 3, device="cuda"), torch.zeros(4, 3, device="cuda")]]
    with pytest.raises(reshard.InvalidArgumentError, match=r"sources\['w'\]\[0\]: on GPU 1"):
        ex.execute(plan, src, dst)


@pytest.mark.skipif(not torch or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("seed", range(8))
def test_random_layouts_across_gpus(ex, seed):
    """Plan devices spread over every GPU of the machine (peer copies)."""
    gpus = torch.cuda.device_count()
    rng = np.random.default_rng(100 + seed)
    plan = reshard.plan(random_spec(rng, n_devices=int(rng.integers(2, 2 * gpus + 1)), gpus=gpus))
    src = random_sources(plan, rng)
    want = host_oracle(plan, src)
    dst = on_gpus(plan, [[torch.zeros_like(w) for w in ws] for ws in want], "dst")
    ex.execute(plan, on_gpus(plan, src, "src"), dst)
    for t, ws, ds in zip(plan.tensors, want, dst):
        assert all(same_bits(w, d) for w, d in zip(ws, ds)), t.name
