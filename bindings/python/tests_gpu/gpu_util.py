"""What the GPU tests share: availability marks, random specs whose plan
devices all sit on GPU 0, and the host executor as the oracle."""
from typing import Any, Dict, List

import numpy as np
import pytest

# torch first: its NCCL is then the one reshard's CUDA backend links to (by
# soname) when transport_available loads the backend, so a communicator of
# ProcessGroupNCCL is used with the library that made it.
try:
    import torch
    TORCH_GPU = torch.cuda.is_available()
except ImportError:  # pragma: no cover - depends on the machine
    torch = None
    TORCH_GPU = False

import reshard  # noqa: E402

CUDA_OK, CUDA_WHY = reshard.transport_available("cuda_local")
NCCL_OK, NCCL_WHY = reshard.transport_available("nccl")

needs_cuda = pytest.mark.skipif(not (CUDA_OK and TORCH_GPU),
                                reason=f"cuda_local transport or torch.cuda missing: "
                                       f"{CUDA_WHY[:160]}")
needs_nccl = pytest.mark.skipif(not (NCCL_OK and TORCH_GPU),
                                reason=f"nccl transport or torch.cuda missing: {NCCL_WHY[:160]}")

TORCH_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "i32": "int32",
                "f64": "float64", "u8": "uint8"}


def random_spec(rng: np.random.Generator, n_devices: int = 6, n_tensors: int = 3,
                dtypes=("f32", "bf16", "i32", "f16"), gpus: int = 1) -> Dict[str, Any]:
    """Meshes over plan devices 0..n_devices-1, plan device d on GPU
    d % gpus (``ordinals``; all on GPU 0 by default), with random (uneven)
    shardings, replication, cross-mesh moves and partial sums of
    floating-point tensors."""
    def mesh(devs: List[int]) -> Dict[str, Any]:
        n = len(devs)
        shape = [2, n // 2] if n % 2 == 0 and n > 2 and rng.random() < 0.5 else [n]
        names = ["a", "b"][:len(shape)]
        return {"axis_names": names, "shape": shape, "devices": devs,
                "ordinals": [d % gpus for d in devs]}

    all_devs = list(range(n_devices))
    meshes = {}
    for name in ("src", "dst"):
        k = int(rng.integers(1, n_devices + 1))
        meshes[name] = mesh([int(d) for d in rng.permutation(all_devs)[:k]])

    def layout(mname: str, rank: int, partial_ok: bool) -> Dict[str, Any]:
        m = meshes[mname]
        axes = list(m["axis_names"])
        rng.shuffle(axes)
        spec: List[Any] = [None] * rank
        used = []
        for a in axes:
            if rng.random() < 0.7 and rank:
                d = int(rng.integers(0, rank))
                if spec[d] is None:
                    spec[d] = a
                    used.append(a)
        out: Dict[str, Any] = {"mesh": mname, "spec": spec}
        free = [a for a in m["axis_names"] if a not in used]
        if partial_ok and free and rng.random() < 0.5:
            out["partial"] = {"axes": [free[0]], "op": "sum"}
        return out

    tensors = []
    for i in range(n_tensors):
        rank = int(rng.integers(1, 4))
        shape = [int(rng.integers(1, 13)) for _ in range(rank)]
        dtype = str(rng.choice(dtypes))
        tensors.append({"name": f"t{i}", "shape": shape, "dtype": dtype,
                        "src": layout("src", rank, dtype in ("f32", "bf16", "f16")),
                        "dst": layout("dst", rank, False)})
    return {"meshes": meshes, "tensors": tensors}


def random_sources(plan: "reshard.Plan", rng: np.random.Generator) -> List[List[Any]]:
    """CPU torch tensors for every source entry (small integers, so that
    partial sums are exact in every dtype): each entry is its box of one
    global array per summand, so replicas of a shard agree (executors may
    read any replica: different values would be a wrong input, not a
    wrong result)."""
    out = []
    for t in plan.tensors:
        dt = getattr(torch, TORCH_DTYPES[t.dtype])
        summands = [np.asarray(rng.integers(-8, 9, size=t.shape)) for _ in range(t.src.num_summands)]
        row = []
        for e in t.src.entries:
            vals = summands[e.summand][e.index] if t.shape else summands[e.summand]
            row.append(torch.tensor(np.asarray(vals), dtype=dt).reshape(e.shape).contiguous())
        out.append(row)
    return out


def host_oracle(plan: "reshard.Plan", sources: List[List[Any]]) -> List[List[Any]]:
    """The destinations the host executor writes (CPU torch tensors)."""
    dst = [[torch.empty(e.shape, dtype=getattr(torch, TORCH_DTYPES[t.dtype]))
            for e in t.dst.entries] for t in plan.tensors]
    reshard.Executor().execute(plan, sources, dst)
    return dst


def same_bits(a: Any, b: Any) -> bool:
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a.view(torch.uint8) if a.numel() else a,
                            b.view(torch.uint8) if b.numel() else b))


def on_gpus(plan: "reshard.Plan", rows: List[List[Any]], side: str) -> List[List[Any]]:
    """``rows`` (CPU tensors, one per entry of ``side``) copied to the GPU of
    each entry's plan device (its topology ordinal)."""
    out = []
    for t, row in zip(plan.tensors, rows):
        entries = t.src.entries if side == "src" else t.dst.entries
        out.append([x.to(torch.device("cuda", plan.device_location(e.device)[2]))
                    for e, x in zip(entries, row)])
    return out
