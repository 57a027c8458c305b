"""reshard.torch on CUDA: DTensors on a 1-GPU mesh (a world of 1 with
ProcessGroupNCCL), through the in-process executor, reshard's own NCCL
communicator, and ProcessGroupNCCL's communicator; the weight-sync helper
writing inference parameters in place."""
import os
import socket

import pytest

import reshard
from gpu_util import CUDA_OK, NCCL_OK, NCCL_WHY, TORCH_GPU, needs_cuda, same_bits, torch

pytestmark = [needs_cuda, pytest.mark.skipif(not NCCL_OK, reason=f"nccl: {NCCL_WHY}")]


@pytest.fixture(scope="module")
def pg():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("tp",))
    yield mesh
    import reshard.torch as rt
    rt._NCCL.clear()
    dist.destroy_process_group()


def _dtensor(mesh, full, placements):
    from torch.distributed.tensor import distribute_tensor
    return distribute_tensor(full, mesh, placements)


def _cases():
    from torch.distributed.tensor import Replicate, Shard
    return [([Shard(0)], [Replicate()]), ([Replicate()], [Shard(1)]), ([Shard(1)], [Shard(0)])]


def test_redistribute_default_executor(pg):
    """World of 1: the default executor is CudaLocalExecutor."""
    import reshard.torch as rt
    for src_pl, dst_pl in _cases():
        full = torch.randn(9, 7, device="cuda").to(torch.bfloat16)
        out = rt.redistribute(_dtensor(pg, full, src_pl), (pg, dst_pl))
        assert out.placements == tuple(dst_pl) and out.to_local().is_cuda
        assert same_bits(out.full_tensor(), full)
    assert rt._default_cuda_executor().transport == "cuda_local"


@pytest.mark.parametrize("comm", ["reshard", "torch"])
def test_redistribute_over_nccl(pg, comm):
    """An NcclExecutor on the default group: reshard's own communicator
    (unique id through the store) or ProcessGroupNCCL's (_comm_ptr)."""
    import reshard.torch as rt
    ex = rt.nccl_executor(comm=comm)
    assert ex.transport == "nccl" and ex.rank == 0 and ex.size == 1
    assert ex.stream == torch.cuda.current_stream().cuda_stream
    tensors = {"a": _dtensor(pg, torch.randn(8, 5, device="cuda"), _cases()[0][0]),
               "b": _dtensor(pg, torch.arange(30, device="cuda", dtype=torch.int32).reshape(5, 6),
                             _cases()[1][0])}
    from torch.distributed.tensor import Replicate, Shard
    targets = {"a": (pg, [Replicate()]), "b": (pg, [Shard(1)])}
    sync = rt.Redistributor(targets, executor=ex)
    for step in range(2):
        out = sync(tensors)
        for k in tensors:
            assert same_bits(out[k].full_tensor(), tensors[k].full_tensor()), (comm, step, k)


def test_weight_sync_in_place(pg):
    """Trainer DTensors (Shard(0)) into inference params given as plain
    tensors with placements (Shard(1)) and as DTensors: written in place."""
    import reshard.torch as rt
    from torch.distributed.tensor import Replicate, Shard
    trainer = {"w1": _dtensor(pg, torch.randn(16, 12, device="cuda"), [Shard(0)]),
               "w2": _dtensor(pg, torch.randn(6, device="cuda").to(torch.bfloat16), [Replicate()])}
    w1 = torch.empty(16, 12, device="cuda")
    w2 = _dtensor(pg, torch.zeros(6, device="cuda", dtype=torch.bfloat16), [Shard(0)])
    ptrs = (w1.data_ptr(), w2.to_local().data_ptr())
    sync = rt.WeightSync({"w1": (w1, pg, [Shard(1)]), "w2": w2})
    for step in range(3):
        with torch.no_grad():
            for v in trainer.values():
                v.to_local().add_(1)
        sync(trainer)
        assert same_bits(w1, trainer["w1"].full_tensor()), step
        assert same_bits(w2.full_tensor(), trainer["w2"].full_tensor()), step
    assert (w1.data_ptr(), w2.to_local().data_ptr()) == ptrs


def test_errors(pg):
    import reshard.torch as rt
    from torch.distributed.tensor import Replicate, Shard
    x = _dtensor(pg, torch.randn(4, 4, device="cuda"), [Shard(0)])
    with pytest.raises(reshard.InvalidArgumentError, match="executor: a host executor"):
        rt.redistribute(x, (pg, [Replicate()]), executor=reshard.Executor())
    w = torch.empty(4, 4, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(reshard.InvalidArgumentError, match=r"params\['w'\]: dtype torch.bfloat16"):
        rt.WeightSync({"w": (w, pg, [Replicate()])})({"w": x})
    with pytest.raises(reshard.InvalidArgumentError, match=r"state_dict: lacks 1"):
        rt.WeightSync({"w": (w, pg, [Replicate()])})({})


def test_plain_cuda_tensor_with_placements(pg):
    import reshard.torch as rt
    from torch.distributed.tensor import Replicate, Shard
    full = torch.randn(6, 10, device="cuda")
    x = rt.as_dtensor(full.clone(), pg, [Replicate()], (6, 10))
    out = rt.redistribute(x, (pg, [Shard(1)]))
    assert out.to_local().is_cuda and same_bits(out.full_tensor(), full)
