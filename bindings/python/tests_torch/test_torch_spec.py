"""reshard.torch's layouts against DTensor's own shards, in one process.

A fake process group (torch's testing backend "fake") lets one process build
DeviceMeshes of up to 8 ranks without communicating; DTensor's shard
arithmetic (``_compute_local_shape_and_global_offset``, what ``DTensor``
uses to place local shards) is the oracle for every rank's box.
"""
import random

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
from torch.testing._internal.distributed.fake_pg import FakeStore

import reshard
import reshard.torch as rt


@pytest.fixture(scope="module", autouse=True)
def fake_world():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    yield
    dist.destroy_process_group()


def random_mesh(rng):
    ndim = rng.randint(1, 3)
    shape = []
    left = 8
    for _ in range(ndim):
        n = rng.choice([k for k in (1, 2, 3, 4) if k <= left])
        shape.append(n)
        left //= n
    size = 1
    for n in shape:
        size *= n
    ranks = rng.sample(range(8), size)
    names = None if rng.random() < 0.3 else tuple(f"ax{i}" for i in range(ndim))
    return DeviceMesh("cpu", torch.tensor(ranks).reshape(shape), mesh_dim_names=names,
                      _init_backend=False)


def random_placements(rng, mesh, rank, partial_ok=True):
    out = []
    op = rng.choice(["sum", "max", "min", "avg"])
    for _ in range(mesh.ndim):
        r = rng.random()
        if r < 0.55:
            out.append(Shard(rng.randrange(rank)))
        elif r < 0.85 or not partial_ok:
            out.append(Replicate())
        else:
            out.append(Partial(op))
    return out


def dtensor_boxes(mesh, placements, shape):
    """rank -> (lo, hi), from DTensor's own arithmetic."""
    grid = list(mesh.mesh.shape)
    out = {}
    for flat, rank in enumerate(mesh.mesh.flatten().tolist()):
        coord, rest = [], flat
        for n in reversed(grid):
            coord.append(rest % n)
            rest //= n
        coord.reverse()
        lshape, off = _compute_local_shape_and_global_offset(shape, grid, coord, placements)
        out[rank] = (tuple(off), tuple(o + n for o, n in zip(off, lshape)))
    return out


def test_shard_boxes_equal_dtensor_on_random_meshes():
    rng = random.Random(13)
    checked = 0
    for _ in range(300):
        mesh = random_mesh(rng)
        rank = rng.randint(1, 3)
        shape = tuple(rng.randint(0, 11) for _ in range(rank))
        pl = random_placements(rng, mesh, rank)
        want = dtensor_boxes(mesh, pl, shape)
        got = {r: (lo, hi) for r, _, lo, hi in rt.shard_boxes(mesh, pl, shape)}
        # DTensor gives an empty shard an offset at the dim's end; compare volumes there.
        for r in want:
            wlo, whi = want[r]
            glo, ghi = got[r]
            empty = any(a == b for a, b in zip(wlo, whi))
            if empty:
                assert any(a == b for a, b in zip(glo, ghi)), (mesh, pl, shape, r)
            else:
                assert (glo, ghi) == (wlo, whi), (mesh, pl, shape, r, got[r], want[r])
            checked += 1
    assert checked > 1000


def test_plan_boxes_equal_dtensor_named_and_explicit():
    """The plan's entries (named layouts where they match, explicit boxes
    where DTensor's nested uneven chunks differ) are DTensor's shards."""
    rng = random.Random(7)
    kinds = set()
    for i in range(120):
        src_mesh, dst_mesh = random_mesh(rng), random_mesh(rng)
        rank = rng.randint(1, 3)
        shape = tuple(rng.randint(1, 10) for _ in range(rank))
        src_pl = random_placements(rng, src_mesh, rank)
        dst_pl = random_placements(rng, dst_mesh, rank, partial_ok=False)
        src_lay = rt.layout_json(src_mesh, src_pl, shape, "a")
        dst_lay = rt.layout_json(dst_mesh, dst_pl, shape, "b")
        kinds.add("boxes" if "boxes" in src_lay else "named")
        spec = {"meshes": {"a": rt.mesh_json(src_mesh), "b": rt.mesh_json(dst_mesh)},
                "tensors": [{"name": "t", "shape": list(shape), "dtype": "f32",
                             "src": src_lay, "dst": dst_lay}]}
        p = reshard.plan(spec)
        t = p.tensors[0]
        for lay, mesh, pl in ((t.src, src_mesh, src_pl), (t.dst, dst_mesh, dst_pl)):
            want = dtensor_boxes(mesh, pl, shape)
            got = {e.device: (e.lo, e.hi) for e in lay.entries}
            assert set(got) == set(want)
            for r, (wlo, whi) in want.items():
                if all(a < b for a, b in zip(wlo, whi)):
                    assert got[r] == (wlo, whi), (i, pl, shape, r)
        # partial summands: one per coordinate along the Partial mesh dims
        nparts = 1
        for m, pp in enumerate(src_pl):
            if isinstance(pp, Partial):
                nparts *= src_mesh.mesh.shape[m]
        assert t.src.num_summands == nparts
        assert len({e.summand for e in t.src.entries}) == nparts
    assert kinds == {"named", "boxes"}


def test_mesh_json_and_named_spec():
    mesh = DeviceMesh("cpu", torch.tensor([[5, 4], [1, 0]]), mesh_dim_names=("dp", "tp"),
                      _init_backend=False)
    assert rt.mesh_json(mesh) == {"axis_names": ["dp", "tp"], "shape": [2, 2],
                                  "devices": [5, 4, 1, 0], "processes": [5, 4, 1, 0]}
    assert rt.layout_json(mesh, [Shard(0), Shard(0)], (8, 3), "m") == {
        "mesh": "m", "spec": [["dp", "tp"], None]}
    assert rt.layout_json(mesh, [Shard(1), Replicate()], (8, 3), "m") == {
        "mesh": "m", "spec": [None, "dp"]}
    assert rt.layout_json(mesh, [Partial("max"), Shard(-1)], (8, 3), "m") == {
        "mesh": "m", "spec": [None, "tp"], "partial": {"axes": ["dp"], "op": "max"}}
    # 10 rows over [Shard(0), Shard(0)]: DTensor's 3, 2, 3, 2 rows, as boxes
    lay = rt.layout_json(mesh, [Shard(0), Shard(0)], (10,), "m")
    assert [(b["device"], b["lo"], b["hi"]) for b in lay["boxes"]] == [
        (5, [0], [3]), (4, [3], [5]), (1, [5], [8]), (0, [8], [10])]
    assert rt.layout_json(mesh, [Partial("avg"), Replicate()], (8, 3), "m") == {
        "mesh": "m", "spec": [None, None], "partial": {"axes": ["dp"], "op": "mean"}}
    unnamed = DeviceMesh("cpu", torch.arange(4), _init_backend=False)
    assert rt.mesh_json(unnamed)["axis_names"] == ["dim0"]


def test_bad_placements_name_the_argument():
    mesh = DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("a", "b"),
                      _init_backend=False)
    with pytest.raises(reshard.InvalidArgumentError, match=r"placements: 1 placements for a mesh of 2"):
        rt.layout_json(mesh, [Shard(0)], (4,), "m")
    with pytest.raises(reshard.InvalidArgumentError, match=r"placements\[1\]: Shard\(2\) of a rank-2"):
        rt.layout_json(mesh, [Replicate(), Shard(2)], (4, 4), "m")
    with pytest.raises(reshard.UnsupportedError, match=r"placements\[0\]: Partial\('prod'\) has no"):
        rt.layout_json(mesh, [Partial("prod"), Replicate()], (4,), "m")
    with pytest.raises(reshard.UnsupportedError, match=r"placements\[1\]: Partial\('max'\) mixed"):
        rt.layout_json(mesh, [Partial("sum"), Partial("max")], (4,), "m")
    with pytest.raises(reshard.InvalidArgumentError, match=r"dtype: torch.complex64"):
        rt.dtype_name(torch.complex64)


def test_spec_for_dtensors_and_targets_errors():
    mesh = DeviceMesh("cpu", torch.arange(8), mesh_dim_names=("x",), _init_backend=False)
    with pytest.raises(TypeError, match=r"tensors: expected a DTensor"):
        rt.spec_for(torch.zeros(3), (mesh, [Shard(0)]))
    with pytest.raises(TypeError, match=r"tensors\[w\]: Tensor is not a DTensor"):
        rt.spec_for({"w": torch.zeros(3)}, (mesh, [Shard(0)]))
