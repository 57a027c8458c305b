"""NcclExecutor on one GPU: a one-rank NCCL group (reshard's own
communicator from a unique id), whole plans of several plan devices, on
its own stream and on torch's current stream without a host wait."""
import numpy as np
import pytest

import reshard
from gpu_util import host_oracle, needs_nccl, random_sources, random_spec, same_bits, torch

pytestmark = needs_nccl


@pytest.fixture(scope="module")
def uid():
    u = reshard.nccl_unique_id()
    assert isinstance(u, bytes) and len(u) == 128 and any(u)
    return u


def _run(ex, seed):
    rng = np.random.default_rng(seed)
    plan = reshard.plan(random_spec(rng, n_devices=4))  # every device on process 0
    src = random_sources(plan, rng)
    want = host_oracle(plan, src)
    dst = [[torch.empty(e.shape, dtype=w.dtype, device="cuda") for e, w in zip(t.dst.entries, ws)]
           for t, ws in zip(plan.tensors, want)]
    ex.execute(plan, [[x.cuda() for x in row] for row in src], dst)
    return plan, want, dst


def test_own_communicator(uid):
    ex = reshard.NcclExecutor(0, rank=0, size=1, unique_id=uid)
    assert ex.info()["transport"] == "nccl" and ex.rank == 0 and ex.size == 1
    for seed in range(6):
        plan, want, dst = _run(ex, seed)
        torch.cuda.synchronize()
        for t, ws, ds in zip(plan.tensors, want, dst):
            assert all(same_bits(w, d) for w, d in zip(ws, ds)), (seed, t.name)


def test_torch_stream_without_host_wait():
    """On torch's current (side) stream with wait=False: ordered on that
    stream, the result visible after the stream is synchronised."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        ex = reshard.NcclExecutor(0, rank=0, size=1, unique_id=reshard.nccl_unique_id(),
                                  stream=torch.cuda.current_stream(), wait=False)
        assert ex.stream == side.cuda_stream and ex.info()["wait"] is False
        plan, want, dst = _run(ex, 42)
    side.synchronize()
    assert all(same_bits(w, d) for ws, ds in zip(want, dst) for w, d in zip(ws, ds))


def test_cpu_tensor_refused(uid):
    ex = reshard.NcclExecutor(0, rank=0, size=1, unique_id=reshard.nccl_unique_id())
    spec = {"meshes": {"a": {"axis_names": ["x"], "shape": [2]}},
            "tensors": [{"name": "w", "shape": [4, 6], "dtype": "f32",
                         "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "a", "spec": [None, "x"]}}]}
    plan = reshard.plan(spec)
    src = [[torch.zeros(2, 6), torch.zeros(2, 6, device="cuda")]]
    dst = [[torch.zeros(4, 3, device="cuda"), torch.zeros(4, 3, device="cuda")]]
    with pytest.raises(reshard.InvalidArgumentError, match=r"sources\['w'\]\[0\]: tensor on cpu"):
        ex.execute(plan, src, dst)


def test_prepared_on_another_stream_without_host_wait(uid):
    """The executor on its own torch stream, the caller on another, no host
    wait: each run() orders the executor after the caller's updates and the
    caller after the executor's writes (events both ways)."""
    s_exec, s_user = torch.cuda.Stream(), torch.cuda.Stream()
    ex = reshard.NcclExecutor(0, rank=0, size=1, unique_id=reshard.nccl_unique_id(),
                              stream=s_exec, wait=False)
    rng = np.random.default_rng(5)
    plan = reshard.plan(random_spec(rng, n_devices=4, dtypes=("f32",)))
    base = random_sources(plan, rng)
    with torch.cuda.stream(s_user):
        src = [[x.cuda() for x in row] for row in base]
        dst = [[torch.zeros(e.shape, device="cuda") for e in t.dst.entries] for t in plan.tensors]
        with ex.prepare(plan, src, dst) as run:
            for step in range(3):
                for row in src:
                    for x in row:
                        for _ in range(10):  # queued work on the caller's stream
                            x.add_(1.0)
                run()
                got = [[d.clone() for d in row] for row in dst]  # on s_user, after the writes
                want = host_oracle(plan, [[x.cpu() for x in row] for row in src])
                assert all(same_bits(w, g) for ws, gs in zip(want, got)
                           for w, g in zip(ws, gs)), step
    torch.cuda.synchronize()
