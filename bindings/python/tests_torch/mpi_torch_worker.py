"""Run under mpirun -np 4 by test_torch_mpi.py: reshard.torch.redistribute over
the MPI executor, with a gloo process group on the same ranks.

1. Same mesh: equal, local shard by local shard and bit for bit, to DTensor's
   own ``redistribute`` for random source and destination placements
   (Shard, Replicate, Partial("sum"/"max"/"avg") sources; integer-valued
   floats so that sums are exact in any order), on meshes (4,) and (2, 2).
2. Across meshes (which ``redistribute`` cannot do): a dict of tensors from a
   mesh on ranks {0, 1} (or on all four) to a mesh on ranks {2, 3} (or all
   four in another order), every destination element checked against the
   global tensor at DTensor's own offsets; ranks off the destination mesh
   get empty local tensors.
3. A Redistributor reused over steps with new values (one plan).
Prints "rank R: OK <counts>" at the end.
"""
import random
import socket
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()
port = None
if rank == 0:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
port = comm.bcast(port, root=0)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402
from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,  # noqa: E402
                                      distribute_tensor)
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset  # noqa: E402

import reshard  # noqa: E402
import reshard.torch as rt  # noqa: E402

assert size == 4, "run with mpirun -np 4"
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=size)
ex = reshard.MPIExecutor(comm, timeout=120)
assert ex.rank == dist.get_rank()

meshes = {
    "x4": DeviceMesh("cpu", torch.arange(4), mesh_dim_names=("x",)),
    "g22": DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", "tp")),
    "lo2": DeviceMesh("cpu", torch.tensor([0, 1]), mesh_dim_names=("dp",)),
    "hi2": DeviceMesh("cpu", torch.tensor([3, 2]), mesh_dim_names=("tp",)),
    "rev22": DeviceMesh("cpu", torch.tensor([[3, 1], [2, 0]])),  # no names
}


def placements(rng, mesh, ndim, partial_ok):
    out = []
    # avg: summands over 2 or 4 ranks, so dividing integer sums is exact
    op = rng.choice(["sum", "max", "avg"])
    for _ in range(mesh.ndim):
        r = rng.random()
        if r < 0.55:
            out.append(Shard(rng.randrange(ndim)))
        elif r < 0.8 or not partial_ok:
            out.append(Replicate())
        else:
            out.append(Partial(op))
    return out


def make_source(shape, dtype, mesh, pl, seed):
    """A DTensor on mesh/pl and its global value. Partial sources: summand k
    (by coordinate along the Partial mesh dims) is its own random tensor."""
    g = torch.Generator().manual_seed(seed)
    partial_dims = [m for m, p in enumerate(pl) if isinstance(p, Partial)]
    if not partial_dims:
        full = torch.randint(-50, 50, shape, generator=g).to(dtype)
        return distribute_tensor(full, mesh, pl, src_data_rank=None), full
    nsum = 1
    for m in partial_dims:
        nsum *= mesh.mesh.shape[m]
    summands = [torch.randint(-50, 50, shape, generator=g).to(dtype) for _ in range(nsum)]
    op = pl[partial_dims[0]].reduce_op
    full = summands[0].clone()
    for s in summands[1:]:
        full = torch.maximum(full, s) if op == "max" else full + s
    if op == "avg":
        full = full / nsum
    coord = mesh.get_coordinate()
    if coord is None:
        local = torch.empty(0, dtype=dtype)
    else:
        k = 0
        for m in partial_dims:
            k = k * mesh.mesh.shape[m] + coord[m]
        lshape, off = compute_local_shape_and_global_offset(shape, mesh, pl)
        idx = tuple(slice(o, o + n) for o, n in zip(off, lshape))
        local = summands[k][idx].contiguous()
    return DTensor.from_local(local, mesh, pl, run_check=False, shape=torch.Size(shape),
                              stride=torch.empty(shape).stride()), full


def check_against_global(out, full, mesh, pl, what):
    assert out.device_mesh == mesh and tuple(out.placements) == tuple(pl), what
    assert tuple(out.shape) == tuple(full.shape), what
    local = out.to_local()
    if mesh.get_coordinate() is None:
        assert local.numel() == 0, what
        return 0
    lshape, off = compute_local_shape_and_global_offset(tuple(full.shape), mesh, pl)
    want = full[tuple(slice(o, o + n) for o, n in zip(off, lshape))]
    assert tuple(local.shape) == tuple(lshape), (what, local.shape, lshape)
    assert torch.equal(local, want), what
    return local.numel()


rng = random.Random(1234)  # the same draws on every rank
same_mesh = cross = elements = 0
kinds = {"partial": 0, "boxes": 0, "avg": 0}

# 1. same mesh, against DTensor.redistribute
for i in range(40):
    mesh = meshes[rng.choice(["x4", "g22"])]
    ndim = rng.randint(1, 3)
    shape = tuple(rng.randint(1, 9) for _ in range(ndim))
    dtype = rng.choice([torch.float32, torch.float64, torch.bfloat16])
    src_pl = placements(rng, mesh, ndim, partial_ok=True)
    dst_pl = placements(rng, mesh, ndim, partial_ok=False)
    dt, full = make_source(shape, dtype, mesh, src_pl, seed=i)
    want = dt.redistribute(mesh, dst_pl)
    got = rt.redistribute(dt, (mesh, dst_pl), executor=ex)
    what = f"case {i}: {shape} {dtype} {src_pl} -> {dst_pl}"
    kinds["partial"] += any(isinstance(p, Partial) for p in src_pl)
    kinds["avg"] += any(isinstance(p, Partial) and p.reduce_op == "avg" for p in src_pl)
    kinds["boxes"] += any("boxes" in rt.layout_json(mesh, pl, shape, "m") for pl in (src_pl, dst_pl))
    assert isinstance(got, DTensor), what
    assert tuple(got.placements) == tuple(want.placements), what
    assert torch.equal(got.to_local(), want.to_local()), (what, got.to_local(), want.to_local())
    elements += check_against_global(got, full, mesh, dst_pl, what)
    same_mesh += 1

# 2. across meshes, many tensors in one plan
pairs = [("lo2", "hi2"), ("x4", "hi2"), ("lo2", "rev22"), ("g22", "rev22"), ("hi2", "x4")]
for i in range(20):
    src_name, dst_name = pairs[i % len(pairs)]
    src_mesh, dst_mesh = meshes[src_name], meshes[dst_name]
    tensors, fulls, targets = {}, {}, {}
    for j in range(rng.randint(1, 4)):
        ndim = rng.randint(1, 3)
        shape = tuple(rng.randint(1, 11) for _ in range(ndim))
        dtype = rng.choice([torch.float32, torch.int32, torch.bfloat16])
        src_pl = placements(rng, src_mesh, ndim, partial_ok=dtype != torch.int32)
        dst_pl = placements(rng, dst_mesh, ndim, partial_ok=False)
        tensors[f"t{j}"], fulls[f"t{j}"] = make_source(shape, dtype, src_mesh, src_pl, seed=100 * i + j)
        targets[f"t{j}"] = (dst_mesh, dst_pl)
    out = rt.redistribute(tensors, targets, executor=ex)
    assert set(out) == set(tensors)
    for k in tensors:
        elements += check_against_global(out[k], fulls[k], dst_mesh, targets[k][1],
                                         f"cross {i} {src_name}->{dst_name} {k}")
    cross += 1

# 3. a Redistributor over steps: one plan, new values each step
train, infer = meshes["g22"], meshes["hi2"]
red = rt.Redistributor({"w1": (infer, [Shard(1)]), "w2": (infer, [Shard(0)]),
                        "ln": (infer, [Replicate()])}, executor=ex)
plans = set()
for step in range(3):
    tree, fulls = {}, {}
    for name, shape in (("w1", (8, 12)), ("w2", (12, 8)), ("ln", (8,))):
        tree[name], fulls[name] = make_source(shape, torch.float32, train, [Shard(0), Replicate()],
                                              seed=1000 * step + len(name))
    out = red(tree)
    plans.add(id(red.plan(tree)))
    for name in tree:
        elements += check_against_global(out[name], fulls[name], infer,
                                         red.targets[name][1], f"step {step} {name}")
assert len(plans) == 1, "the Redistributor planned more than once"

# 4. WeightSync: the trainer's DTensors (FSDP x TP on g22) written in place
# into an engine's plain local tensors on ranks 3 and 2 (None off its mesh)
specs = {"w1": ((8, 12), 1), "w2": ((12, 8), 0), "ln": ((8,), None)}
params, ptrs = {}, {}
coord = infer.get_coordinate()
for name, (shape, d) in specs.items():
    pl = [Replicate()] if d is None else [Shard(d)]
    local = None
    if coord is not None:
        lshape, _ = compute_local_shape_and_global_offset(shape, infer, pl)
        local = torch.full(lshape, -1.0)
        ptrs[name] = local.data_ptr()
    params[name] = (local, infer, pl)
ws = rt.WeightSync(params, executor=ex)
for step in range(2):
    state, fulls = {}, {}
    for name, (shape, _) in specs.items():
        state[name], fulls[name] = make_source(shape, torch.float32, train, [Shard(0), Shard(1)]
                                               if len(shape) == 2 else [Shard(0), Replicate()],
                                               seed=5000 * step + len(name))
    out = ws(state)
    for (name, (shape, d)), got in zip(specs.items(), out):
        if coord is None:
            continue
        pl = params[name][2]
        lshape, off = compute_local_shape_and_global_offset(shape, infer, pl)
        want = fulls[name][tuple(slice(o, o + n) for o, n in zip(off, lshape))]
        assert got is params[name][0] and got.data_ptr() == ptrs[name], name
        assert torch.equal(got, want), (step, name)
        elements += got.numel()
assert len(ws._cache) == 1

# errors: a host executor with several processes names the argument
try:
    rt.redistribute(tensors, targets, executor=reshard.Executor())
    raise AssertionError("a host executor over 4 processes was accepted")
except reshard.InvalidArgumentError as e:
    assert "executor: a host executor with 4 processes" in str(e), e
try:
    rt.redistribute(tensors, targets)
    raise AssertionError("no executor over 4 processes was accepted")
except reshard.InvalidArgumentError as e:
    assert "executor: None with 4 processes" in str(e), e

# the random cases covered partial sources and DTensor's nested uneven chunks (boxes)
assert kinds["partial"] > 0 and kinds["boxes"] > 0 and kinds["avg"] > 0, kinds
total = comm.allreduce(elements)
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: OK {same_mesh} same-mesh cases equal to DTensor.redistribute, {cross} "
      f"cross-mesh moves ({kinds['partial']} partial sources, {kinds['boxes']} with explicit boxes), {elements} local elements checked ({total} over all ranks)")
sys.stdout.flush()
