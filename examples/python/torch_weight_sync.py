#!/usr/bin/env python3
"""RL weight sync with PyTorch DTensors: trainer weights (FSDP x TP on a 2x2
mesh of ranks 0-3) -> an inference engine's tensor-parallel layout on ranks
2 and 3 only (another mesh, which DTensor.redistribute cannot target),
planned once and executed after every training step over MPI.

Runs on one machine, 4 processes, CPU tensors, a gloo process group:

    pip install ./bindings/python torch mpi4py
    mpirun -np 4 python examples/python/torch_weight_sync.py

What to copy into a framework: build the inference mesh and placements once,
make one `reshard.torch.Redistributor` with an `MPIExecutor` on the same
ranks, call it on the trainer's DTensors every step (collectively). Ranks off
the inference mesh take part (they send) and get empty local shards back.
"""
import socket
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
port = None
if rank == 0:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
port = comm.bcast(port, root=0)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402
from torch.distributed.tensor import Replicate, Shard, distribute_tensor  # noqa: E402

import reshard  # noqa: E402
import reshard.torch  # noqa: E402

dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=comm.Get_size())
assert dist.get_world_size() == 4, "run with mpirun -np 4"
train_mesh = DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("fsdp", "tp"))
infer_mesh = DeviceMesh("cpu", torch.tensor([3, 2]), mesh_dim_names=("tp",))

D, FF, LAYERS = 256, 704, 4


def init_params():
    torch.manual_seed(0)  # the same global values on every rank
    params = {}
    for i in range(LAYERS):
        for name, shape, pl in ((f"layer{i}.attn.qkv", (D, 3 * D), [Shard(0), Shard(1)]),
                                (f"layer{i}.attn.out", (D, D), [Shard(1), Shard(0)]),
                                (f"layer{i}.mlp.up", (D, FF), [Shard(0), Shard(1)]),
                                (f"layer{i}.mlp.down", (FF, D), [Shard(1), Shard(0)]),
                                (f"layer{i}.norm", (D,), [Shard(0), Replicate()])):
            params[name] = distribute_tensor(torch.randn(shape) * 0.02, train_mesh, pl,
                                             src_data_rank=None)
    return params


def inference_placements(name):
    """Megatron-style TP: column-parallel in, row-parallel out, norms replicated."""
    if name.endswith(("qkv", "up")):
        return [Shard(1)]
    if name.endswith(("out", "down")):
        return [Shard(0)]
    return [Replicate()]


def main():
    params = init_params()
    targets = {k: (infer_mesh, inference_placements(k)) for k in params}
    sync = reshard.torch.Redistributor(targets, executor=reshard.MPIExecutor(comm))

    t0 = time.perf_counter()
    plan = sync.plan(params)  # this rank's part, planned once
    if rank == 0:
        print(f"planned {len(plan.tensors)} tensors in {(time.perf_counter() - t0) * 1e3:.1f} ms")
    for step in range(3):
        with torch.no_grad():  # stands in for an optimizer step: keeps the layout
            params = {k: v - 1e-3 * torch.sign(v) for k, v in params.items()}
        dist.barrier()
        t0 = time.perf_counter()
        infer = sync(params)  # collective, same plan every step
        dt = time.perf_counter() - t0
        # check: the inference shards are the trainer's global weights
        ok = True
        for k, v in params.items():
            full = v.full_tensor()  # collective (for the check only)
            local = infer[k].to_local()
            if rank in (2, 3):
                want = distribute_tensor(full, infer_mesh, targets[k][1], src_data_rank=None)
                ok &= torch.equal(local, want.to_local())
            else:
                ok &= local.numel() == 0
        ok = comm.allreduce(int(ok), op=MPI.MIN) == 1
        if rank == 0:
            print(f"step {step}: synced in {dt * 1e3:.2f} ms, equal to the trainer's weights: {ok}")
        assert ok
    assert len(sync._cache) == 1  # one plan for all steps
    w = infer["layer0.mlp.up"]
    print(f"rank {rank}: layer0.mlp.up local shard {tuple(w.to_local().shape)} on {w.device_mesh}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
