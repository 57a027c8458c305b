"""reshard.torch's CUDA paths where no GPU is needed, in a world of one
process (gloo): WeightSync writing inference parameters in place (on CPU
tensors: the same code as on CUDA tensors but the executor), the executor
checks, and clean refusals of the CUDA executors without a GPU. The GPU
runs are bindings/python/tests_gpu (scripts/test-python-gpu.sh)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import reshard
import reshard.torch as rt
from reshard import _cuda
from reshard._ffi import api, check, ffi

CUDA_OK, CUDA_WHY = reshard.transport_available("cuda_local")


@pytest.fixture(scope="module")
def mesh():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield DeviceMesh("cpu", [0], mesh_dim_names=("tp",))
    dist.destroy_process_group()


class EmulatedCuda(_cuda._CudaExecutor):
    """An executor that says it moves CUDA memory (a host one behind it)."""

    transport = "cuda_local"

    def __init__(self):
        opts = ffi.new("reshard_executor_options_t*")
        opts.struct_size = ffi.sizeof("reshard_executor_options_t")
        opts.transport, opts.threads, opts.timeout_seconds = 1, 1, 60.0
        out = ffi.new("reshard_executor_t**")
        check(api.executor_create(opts, out))
        super().__init__(_ptr=out[0])

    def _converter(self, plan):
        return _cuda._CudaConverter(self.transport, lambda d: 0, 1, 0)


def test_nccl_executor_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group exists")
    with pytest.raises(reshard.InvalidArgumentError, match="nccl_executor: torch.distributed is "
                       "not initialised"):
        rt.nccl_executor()


def test_weight_sync_writes_in_place(mesh):
    trainer = {"w1": distribute_tensor(torch.randn(16, 12), mesh, [Shard(0)]),
               "w2": distribute_tensor(torch.randn(6).to(torch.bfloat16), mesh, [Replicate()]),
               "opt.step": distribute_tensor(torch.zeros(1), mesh, [Replicate()])}
    w1 = torch.empty(16, 12)
    w2 = distribute_tensor(torch.zeros(6, dtype=torch.bfloat16), mesh, [Shard(0)])
    ptrs = (w1.data_ptr(), w2.to_local().data_ptr())
    sync = rt.WeightSync({"w1": (w1, mesh, [Shard(1)]), "w2": w2})
    for step in range(3):
        for v in trainer.values():
            v.to_local().add_(1)
        out = sync(trainer)
        assert torch.equal(w1, trainer["w1"].full_tensor()), step
        assert torch.equal(w2.full_tensor(), trainer["w2"].full_tensor()), step
        assert out[0] is w1 and out[1] is w2._local_tensor
    assert (w1.data_ptr(), w2.to_local().data_ptr()) == ptrs
    assert len(sync._cache) == 1  # planned once


def test_weight_sync_from_plain_trainer_shards(mesh):
    """The trainer's side as (local tensor, mesh, placements) triples too;
    the global shape comes from the DTensor parameter."""
    full = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    p = distribute_tensor(torch.zeros(4, 5), mesh, [Shard(1)])
    rt.WeightSync({"w": p})({"w": (full.clone(), mesh, [Replicate()])})
    assert torch.equal(p.full_tensor(), full)


def test_weight_sync_errors(mesh):
    x = distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
    w = torch.empty(4, 4, dtype=torch.bfloat16)
    with pytest.raises(reshard.InvalidArgumentError, match=r"params\['w'\]: dtype torch.bfloat16, "
                       r"state_dict\['w'\] is torch.float32"):
        rt.WeightSync({"w": (w, mesh, [Replicate()])})({"w": x})
    with pytest.raises(reshard.InvalidArgumentError, match=r"state_dict: lacks 1 of params' "
                       r"entries: \['w'\]"):
        rt.WeightSync({"w": (w, mesh, [Replicate()])})({})
    with pytest.raises(reshard.InvalidArgumentError, match=r"state_dict: 1 entries params lacks"):
        rt.WeightSync({"w": (w.float(), mesh, [Replicate()])}, strict=True)({"w": x, "v": x})
    p = distribute_tensor(torch.zeros(4, 5), mesh, [Shard(1)])
    with pytest.raises(reshard.InvalidArgumentError, match=r"params\['w'\]: global shape \(4, 5\), "
                       r"state_dict\['w'\] is \(4, 4\)"):
        rt.WeightSync({"w": p})({"w": x})
    with pytest.raises(reshard.InvalidArgumentError, match=r"destinations\['w'\]\[0\]: shape "
                       r"\(4, 3\) given"):
        rt.WeightSync({"w": (torch.empty(4, 3), mesh, [Replicate()])})({"w": x})
    with pytest.raises(reshard.InvalidArgumentError, match=r"params\['w'\]: None on rank 0, which "
                       "is on its mesh"):
        rt.WeightSync({"w": (None, mesh, [Replicate()])})({"w": x})
    with pytest.raises(TypeError, match=r"params\['w'\]: expected a DTensor or a \(tensor, mesh, "
                       "placements\\) triple"):
        rt.WeightSync({"w": torch.empty(4)})
    with pytest.raises(TypeError, match="params: expected a dict"):
        rt.WeightSync([x])


def test_executor_must_fit_the_memory(mesh):
    x = distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
    with pytest.raises(reshard.InvalidArgumentError, match="executor: a cuda_local executor "
                       r"\(CUDA memory\) for CPU tensors"):
        rt.redistribute(x, (mesh, [Replicate()]), executor=EmulatedCuda())
    with pytest.raises(reshard.InvalidArgumentError, match="executor: a host executor "
                       r"\(host memory\) for CUDA tensors"):
        rt._pick_executor(reshard.Executor(), cuda=True)


def test_cuda_mesh_spec_has_ordinals_in_one_process(mesh):
    m = DeviceMesh("cuda", torch.arange(2), _init_backend=False)
    b = rt._SpecBuilder(ordinal=3)
    assert b.meshes[b.mesh(m)]["ordinals"] == [3, 3]
    b = rt._SpecBuilder()  # several processes: one GPU each, no ordinals
    assert "ordinals" not in b.meshes[b.mesh(m)]
    assert "ordinals" not in rt._SpecBuilder(ordinal=0).meshes.get(
        rt._SpecBuilder(ordinal=0).mesh(mesh), {})


def test_cpu_tensor_refused_by_cuda_conversion():
    spec = {"meshes": {"a": {"axis_names": ["x"], "shape": [1]}},
            "tensors": [{"name": "w", "shape": [4], "dtype": "f32",
                         "src": {"mesh": "a", "spec": [None]}, "dst": {"mesh": "a", "spec": [None]}}]}
    p = reshard.plan(spec)
    with pytest.raises(reshard.InvalidArgumentError, match=r"sources\['w'\]\[0\]: tensor on cpu, "
                       "the cuda_local executor needs CUDA tensors"):
        EmulatedCuda().execute(p, [[torch.zeros(4)]], [[torch.zeros(4)]])


@pytest.mark.skipif(CUDA_OK, reason="a GPU is present")
def test_no_gpu_refusals(mesh):
    with pytest.raises(reshard.UnsupportedError, match="CUDA"):
        rt._default_cuda_executor()
    # rank 0 cannot make a unique id: it says why (and tells the store)
    with pytest.raises(reshard.UnsupportedError, match="CUDA"):
        rt.nccl_executor(device=0, stream=None)
    with pytest.raises(reshard.UnsupportedError, match=r"comm: the default group"):
        rt.nccl_executor(device=0, stream=None, comm="torch")
    with pytest.raises(reshard.InvalidArgumentError, match="comm: unknown 'mine'"):
        rt.nccl_executor(device=0, stream=None, comm="mine")
    with pytest.raises(reshard.InvalidArgumentError, match="stream: unknown 'later'"):
        rt.nccl_executor(device=0, stream="later")


@pytest.mark.skipif(CUDA_OK, reason="a GPU is present")
def test_gpu_example_says_it_needs_a_gpu():
    example = Path(__file__).resolve().parents[3] / "examples" / "python" / "torch_gpu_weight_sync.py"
    r = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert "needs a GPU" in r.stdout or "needs reshard's CUDA backend" in r.stdout, r.stdout


def test_plain_tensors_with_placements(mesh):
    """as_dtensor: a plain local shard as a DTensor (no copy), redistributed."""
    full = torch.arange(30, dtype=torch.float32).reshape(5, 6)
    x = rt.as_dtensor(full.clone(), mesh, [Replicate()], (5, 6))
    assert x.to_local().data_ptr() != full.data_ptr() and x.shape == (5, 6)
    out = rt.redistribute(x, (mesh, [Shard(1)]))
    assert torch.equal(out.full_tensor(), full)


_TWO_RANKS = r"""
import sys
import torch
import torch.distributed as dist
import reshard
import reshard.torch as rt

rank, path = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
try:
    rt.nccl_executor(device=0, stream=None)
    raise AssertionError("an NCCL executor without a GPU")
except reshard.UnsupportedError as e:
    msg = e.message
store = dist.distributed_c10d._get_default_store()
uid = bytes(store.get("reshard/nccl_unique_id/0"))
got = [None, None]
dist.all_gather_object(got, (uid, msg))
if rank == 0:
    (u0, m0), (u1, m1) = got
    assert u0 == u1, "the ranks saw different ids"
    if u0.startswith(b"error:"):  # no backend: rank 0's reason reached rank 1
        assert "rank 0 could not make an NCCL unique id" in m1, m1
    else:  # backend without a driver: the id went through, the executor refused
        assert len(u0) == 128 and "CUDA" in m0 and "CUDA" in m1, (m0, m1)
    print("OK", "error" if u0.startswith(b"error:") else "id", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.skipif(CUDA_OK, reason="a GPU is present")
def test_nccl_executor_sends_the_unique_id_through_the_store(tmp_path):
    """Two processes (gloo): rank 0's unique id (or its failure) reaches rank
    1 through the default group's store; both refuse cleanly without a GPU."""
    script = tmp_path / "two_ranks.py"
    script.write_text(_TWO_RANKS)
    store = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(store)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert outs[0][0].startswith("OK"), outs
