"""Flat layouts from Python (docs/spec.md, "Flat layouts"; docs/python.md):
the spec's flat buffers as Plan.flats, and views into each rank's flat
buffer to pass as a tensor's sources or destinations."""
import json
from pathlib import Path

import numpy as np
import pytest

import reshard

ROOT = Path(__file__).resolve().parents[3]


def fsdp1_spec(align=1):
    """Two f32 tensors (6x4 and 10) concatenated, aligned and split evenly
    over 2 ranks (an FSDP1 flat parameter), to a 2-way row split / replica."""
    return {
        "meshes": {"f": {"axis_names": ["dp"], "shape": [2], "devices": [0, 1]},
                   "t": {"axis_names": ["tp"], "shape": [2], "devices": [2, 3]}},
        "flat": {"p": {"mesh": "f", "partition": "concat", "align_elements": align}},
        "tensors": [
            {"name": "w", "shape": [6, 4], "dtype": "f32", "src": {"flat": "p"},
             "dst": {"mesh": "t", "spec": ["tp", None]}},
            {"name": "b", "shape": [10], "dtype": "f32", "src": {"flat": "p"},
             "dst": {"mesh": "t", "spec": [None]}},
        ],
    }


def rank_buffers(w, b, align, world):
    """The flat buffers FSDP1 would hold, built by hand: each tensor at the
    next multiple of `align` elements, the whole padded to `world` shards."""
    flat = []
    for t in (w, b):
        flat.extend([0.0] * (-len(flat) % align))
        flat.extend(t.ravel().tolist())
    flat.extend([0.0] * (-len(flat) % world))
    per = len(flat) // world
    return [np.array(flat[r * per:(r + 1) * per], dtype=np.float32) for r in range(world)]


@pytest.mark.parametrize("align", [1, 3, 8])
def test_flat_source_moves_the_hand_built_buffers(align):
    plan = reshard.plan(fsdp1_spec(align))
    (f,) = plan.flats
    assert f.name == "p" and f.is_source and f.devices == (0, 1)
    assert [ft.tensor for ft in f.tensors] == [0, 1]
    rng = np.random.default_rng(align)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    bufs = rank_buffers(w, b, align, 2)
    assert f.shard_bytes == bufs[0].nbytes
    views = f.views(plan, bufs)
    sources = [views[0], views[1]]
    dst = [[np.zeros(e.shape, np.float32) for e in t.dst.entries] for t in plan.tensors]
    reshard.execute(plan, sources, dst)
    for e, d in zip(plan.tensors[0].dst.entries, dst[0]):
        np.testing.assert_array_equal(d, w[e.index])
    for d in dst[1]:
        np.testing.assert_array_equal(d, b)


def test_flat_destination_views_are_written_in_place():
    spec = fsdp1_spec(4)
    for t in spec["tensors"]:
        t["src"], t["dst"] = t["dst"], t["src"]
    plan = reshard.plan(spec)
    (f,) = plan.flats
    assert not f.is_source
    w = np.arange(24, dtype=np.float32).reshape(6, 4)
    b = np.arange(100, 110, dtype=np.float32)
    src = [[w[e.index].copy() for e in plan.tensors[0].src.entries],
           [b.copy() for _ in plan.tensors[1].src.entries]]
    bufs = [np.full(f.shard_bytes // 4, -1, np.float32) for _ in range(2)]
    views = f.views(plan, bufs)
    reshard.execute(plan, src, [views[0], views[1]])
    want = rank_buffers(w, b, 4, 2)
    for got, exp in zip(bufs, want):
        data = exp != 0  # padding is not written
        np.testing.assert_array_equal(got[data], exp[data])


def test_example_spec_lists_its_flat_layouts():
    plan = reshard.plan(ROOT / "examples" / "specs" / "flat_layouts.json")
    assert [f.name for f in plan.flats] == ["block0", "bucket0", "zero3"]
    assert plan.flat("block0").is_source and not plan.flat("zero3").is_source
    spec = json.loads((ROOT / "examples" / "specs" / "flat_layouts.json").read_text())
    names = [t["name"] for t in spec["tensors"] if t["src"].get("flat") == "block0"]
    assert [plan.tensors[ft.tensor].name for ft in plan.flat("block0").tensors] == names


def test_bad_flat_arguments_name_the_field():
    plan = reshard.plan(fsdp1_spec())
    f = plan.flats[0]
    with pytest.raises(reshard.InvalidArgumentError, match="flat: no flat layout 'q'"):
        plan.flat("q")
    with pytest.raises(reshard.InvalidArgumentError, match="buffers: 1 given"):
        f.views(plan, [np.zeros(100, np.float32)])
    with pytest.raises(reshard.InvalidArgumentError, match=r"buffers\[1\]: 4 bytes"):
        f.views(plan, [np.zeros(100, np.float32), np.zeros(1, np.float32)])
    with pytest.raises(reshard.InvalidArgumentError, match=r"buffers\[0\]: not contiguous"):
        f.views(plan, [np.zeros((100, 2), np.float32)[:, 0], np.zeros(100, np.float32)])
    # A plan from bytes has no flat layouts (they are the spec's).
    assert reshard.Plan.from_bytes(plan.to_bytes()).flats == ()
