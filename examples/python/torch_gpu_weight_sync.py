#!/usr/bin/env python3
"""RL weight sync on GPUs: a trainer's FSDP layout (every weight split by
rows over the trainer's shards) -> an inference engine's tensor-parallel
layout (column- and row-parallel linear layers, replicated norms), on CUDA
tensors, no host copies, planned once, the inference buffers written in
place after every training step.

Two ways to run it (it checks itself after every step):

    python examples/python/torch_gpu_weight_sync.py
        one process: the trainer's 4 FSDP shards and the engine's 2 TP shards
        are plan devices on this process's GPU(s), moved by
        reshard.CudaLocalExecutor through a prepared execution (the buffers
        bound once, one C call per sync).

    torchrun --nproc-per-node N examples/python/torch_gpu_weight_sync.py
        one GPU per process over NCCL: trainer DTensors FSDP-sharded over all
        N ranks -> an inference mesh of the last ceil(N/2) ranks with TP
        placements, through reshard.torch.WeightSync (reshard's own NCCL
        communicator, its unique id sent through torch.distributed's store).

Without a GPU (or without reshard's CUDA backend) it says so and exits.
"""
import os
import sys

import torch

import reshard

H, F, LAYERS = 1024, 2816, 2
STEPS = 3


def shapes():
    """name -> (shape, inference TP split dim or None: replicated)."""
    out = {}
    for i in range(LAYERS):
        p = f"layers.{i}."
        out[p + "qkv"] = ((3 * H, H), 0)   # column parallel
        out[p + "o"] = ((H, H), 1)         # row parallel
        out[p + "up"] = ((F, H), 0)
        out[p + "down"] = ((H, F), 1)
        out[p + "norm"] = ((H,), None)
    return out


def one_process():
    gpus = torch.cuda.device_count()
    trainer, infer = [0, 1, 2, 3], [4, 5]
    # Each plan device on a GPU: round robin over this machine's GPUs.
    ordinal = {d: d % gpus for d in trainer + infer}
    spec = {"meshes": {
        "train": {"axis_names": ["fsdp"], "shape": [4], "devices": trainer,
                  "ordinals": [ordinal[d] for d in trainer]},
        "infer": {"axis_names": ["tp"], "shape": [2], "devices": infer,
                  "ordinals": [ordinal[d] for d in infer]}},
        "tensors": [{"name": n, "shape": list(s), "dtype": "bf16",
                     "src": {"mesh": "train", "spec": ["fsdp"]},
                     "dst": {"mesh": "infer",
                             "spec": [None] * len(s) if d is None else
                             [("tp" if k == d else None) for k in range(len(s))]}}
                    for n, (s, d) in shapes().items()]}
    plan = reshard.plan(spec)
    st = plan.stats
    print(f"plan: {len(plan.tensors)} tensors, {st['network_bytes'] / 2**20:.1f} MiB between "
          f"devices, {st['messages']} messages, {torch.cuda.device_count()} GPU(s)")
    g = torch.Generator(device="cuda").manual_seed(0)
    full = {t.name: torch.randn(t.shape, generator=g, device="cuda").to(torch.bfloat16)
            for t in plan.tensors}

    def on(e):
        return torch.device("cuda", ordinal[e.device])
    # The trainer's shards (FSDP: row blocks) and the engine's fixed buffers.
    src = {t.name: [full[t.name][e.index].clone().to(on(e)) for e in t.src.entries]
           for t in plan.tensors}
    dst = {t.name: [torch.empty(e.shape, dtype=torch.bfloat16, device=on(e))
                    for e in t.dst.entries] for t in plan.tensors}
    ex = reshard.CudaLocalExecutor()
    with ex.prepare(plan, src, dst) as sync:
        for step in range(STEPS):
            for t in plan.tensors:  # a training step, in place on the shards
                full[t.name] += 0.5
                for x in src[t.name]:
                    x += 0.5
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            sync()
            end.record()
            end.synchronize()
            ok = all(torch.equal(x.to("cuda:0"), full[t.name][e.index].to(x.dtype))
                     for t in plan.tensors for e, x in zip(t.dst.entries, dst[t.name]))
            print(f"step {step}: synced in {start.elapsed_time(end):.2f} ms; "
                  f"equal to the trainer's weights: {ok}")
            if not ok:
                sys.exit(1)


def torchrun():
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import reshard.torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    train = DeviceMesh("cuda", list(range(world)), mesh_dim_names=("fsdp",))
    infer_ranks = list(range(world // 2, world))
    infer = DeviceMesh("cuda", infer_ranks, mesh_dim_names=("tp",))
    g = torch.Generator(device="cuda").manual_seed(0)  # the same weights on every rank
    full = {n: torch.randn(s, generator=g, device="cuda").to(torch.bfloat16)
            for n, (s, _) in shapes().items()}
    state = {n: distribute_tensor(full[n], train, [Shard(0)]) for n in full}
    # The engine's parameters: plain local tensors with placements on its mesh.
    params = {}
    for n, (s, d) in shapes().items():
        pl = [Replicate()] if d is None else [Shard(d)]
        shape = list(s)
        if rank in infer_ranks and d is not None:
            k = infer_ranks.index(rank)
            chunk = -(-s[d] // len(infer_ranks))
            shape[d] = max(0, min(s[d], (k + 1) * chunk) - k * chunk)
        local = torch.empty(shape if rank in infer_ranks else [0], dtype=torch.bfloat16,
                            device="cuda")
        params[n] = (local, infer, pl)
    sync = reshard.torch.WeightSync(params)
    for step in range(STEPS):
        with torch.no_grad():
            for n in full:
                full[n] += 0.5
                state[n].to_local().add_(0.5)
        sync(state)
        torch.cuda.synchronize()
        ok = True
        if rank in infer_ranks:
            for n, (local, mesh, pl) in params.items():
                # this rank's shard against the same slice of the full weight
                s, d = shapes()[n]
                if d is None:
                    ok &= torch.equal(local, full[n])
                else:
                    k = infer_ranks.index(rank)
                    chunk = -(-s[d] // len(infer_ranks))
                    ok &= torch.equal(local, full[n].narrow(d, k * chunk, local.shape[d]))
        print(f"rank {rank} step {step}: synced; equal to the trainer's weights: {bool(ok)}",
              flush=True)
        if not ok:
            sys.exit(1)
    dist.destroy_process_group()


def main():
    if not torch.cuda.is_available():
        print("torch_gpu_weight_sync.py needs a GPU: torch.cuda.is_available() is False here; "
              "see examples/python/torch_weight_sync.py for CPU tensors over MPI")
        return
    ok, why = reshard.transport_available("cuda_local")
    if not ok:
        print(f"torch_gpu_weight_sync.py needs reshard's CUDA backend: {why}")
        return
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        torchrun()
    else:
        one_process()


if __name__ == "__main__":
    main()
