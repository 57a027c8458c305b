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


def qkv_spec(align=1):
    """vLLM's QKVParallelLinear on tp = 2 (grouped-query attention: q [8, 4],
    k and v [2, 4]) as a fused destination fed by an FSDP1 flat source over
    3 ranks: each tp rank's buffer is [q_r; k_r; v_r]."""
    names = [("q", [8, 4]), ("k", [2, 4]), ("v", [2, 4])]
    return {
        "meshes": {"f": {"axis_names": ["dp"], "shape": [3], "devices": [0, 1, 2]},
                   "t": {"axis_names": ["tp"], "shape": [2], "devices": [3, 4]}},
        "flat": {"p": {"mesh": "f", "align_elements": 8},
                 "qkv": {"mesh": "t", "partition": "fused", "align_elements": align}},
        "tensors": [{"name": n, "shape": s, "dtype": "f32", "src": {"flat": "p"},
                     "dst": {"flat": "qkv", "spec": ["tp", None]}} for n, s in names],
    }


def fused_rank_buffer(parts, align, size):
    """A fused rank buffer built by hand: each part at the next multiple of
    `align` elements, then zeros up to `size` elements."""
    flat = []
    for p in parts:
        flat.extend([0.0] * (-len(flat) % align))
        flat.extend(p.ravel().tolist())
    flat.extend([0.0] * (size - len(flat)))
    return np.array(flat, dtype=np.float32)


@pytest.mark.parametrize("align", [1, 5])
def test_fused_qkv_destination_is_written_in_place(align):
    plan = reshard.plan(qkv_spec(align))
    fsdp, qkv = plan.flat("p"), plan.flat("qkv")
    assert fsdp.is_source and not qkv.is_source and qkv.devices == (3, 4)
    rng = np.random.default_rng(align)
    q = rng.standard_normal((8, 4)).astype(np.float32)
    k = rng.standard_normal((2, 4)).astype(np.float32)
    v = rng.standard_normal((2, 4)).astype(np.float32)
    # FSDP1's flat parameter: q, k, v aligned to 8 elements, padded to 3 shards.
    whole = fused_rank_buffer([q, k, v], 8, 0)
    whole = np.concatenate([whole, np.zeros(-whole.size % 3, np.float32)])
    per = whole.size // 3
    src_bufs = [whole[r * per:(r + 1) * per].copy() for r in range(3)]
    assert fsdp.shard_bytes == per * 4
    dst_bufs = [np.full(qkv.shard_bytes // 4, -7, np.float32) for _ in range(2)]
    sources, dests = fsdp.views(plan, src_bufs), qkv.views(plan, dst_bufs)
    reshard.execute(plan, [sources[t] for t in range(3)], [dests[t] for t in range(3)])
    for r in range(2):
        want = fused_rank_buffer([q[4 * r:4 * r + 4], k[r:r + 1], v[r:r + 1]], align,
                                 qkv.shard_bytes // 4)
        data = [i for i in range(want.size) if want[i] != 0 or dst_bufs[r][i] != -7]
        np.testing.assert_array_equal(dst_bufs[r][data], want[data])
        # The buffer as vLLM allocates it: [q_r; k_r; v_r] as one [6, 4] weight.
        if align == 1:
            np.testing.assert_array_equal(
                dst_bufs[r].reshape(6, 4), np.concatenate([q[4 * r:4 * r + 4], k[r:r + 1],
                                                           v[r:r + 1]]))
        else:  # the alignment gaps are never written
            assert (dst_bufs[r][16:20] == -7).all()


def test_fused_source_and_padded_vocabulary():
    """vLLM's fused parameters as the source: [q_r; k_r; v_r] per rank back
    to the global tensors, and a vocabulary of 10 rows padded to 16 (8 rows
    per rank; rank 1 holds rows 8-9 and padding) as boxes."""
    spec = qkv_spec()
    for t in spec["tensors"]:
        t["src"], t["dst"] = t["dst"], {"mesh": "f"}
    spec["flat"]["vocab"] = {"mesh": "t", "partition": "fused"}
    spec["tensors"].append({
        "name": "embed", "shape": [10, 3], "dtype": "f32", "dst": {"mesh": "f"},
        "src": {"flat": "vocab", "boxes": [{"device": 3, "hi": [8, 3]},
                                           {"device": 4, "lo": [8, 0]}]}})
    plan = reshard.plan(spec)
    qkv, vocab = plan.flat("qkv"), plan.flat("vocab")
    assert qkv.is_source and vocab.shard_bytes == 8 * 3 * 4
    assert [ft.byte_offsets for ft in vocab.tensors] == [(0, 0)]
    q = np.arange(32, dtype=np.float32).reshape(8, 4)
    k = np.arange(100, 108, dtype=np.float32).reshape(2, 4)
    v = np.arange(200, 208, dtype=np.float32).reshape(2, 4)
    e = np.arange(300, 330, dtype=np.float32).reshape(10, 3)
    qkv_bufs = [np.concatenate([q[4 * r:4 * r + 4], k[r:r + 1], v[r:r + 1]]).ravel()
                for r in range(2)]
    vocab_bufs = [e[:8].ravel().copy(), np.concatenate([e[8:].ravel(), np.zeros(18, np.float32)])]
    views = {**qkv.views(plan, qkv_bufs), **vocab.views(plan, vocab_bufs)}
    dst = [[np.zeros(en.shape, np.float32) for en in t.dst.entries] for t in plan.tensors]
    reshard.execute(plan, [views[t] for t in range(4)], dst)
    for t, want in enumerate((q, k, v, e)):
        for d in dst[t]:
            np.testing.assert_array_equal(d, want)


def test_fused_example_spec_has_vllm_parameter_sizes():
    """examples/specs/fused_views.json: each vLLM tp rank's fused buffer is
    the size of its parameter (bf16): qkv_proj [48, 64], gate_up_proj
    [128, 64], embed_tokens [512, 64] (1000 rows padded to 1024)."""
    plan = reshard.plan(ROOT / "examples" / "specs" / "fused_views.json")
    sizes = {f.name: f.shard_bytes for f in plan.flats if not f.is_source}
    assert sizes == {"qkv_proj": 48 * 64 * 2, "gate_up_proj": 128 * 64 * 2,
                     "embed_tokens": 512 * 64 * 2}
    qkv = plan.flat("qkv_proj")
    assert [plan.tensors[ft.tensor].name.split(".")[-2] for ft in qkv.tensors] == \
        ["q_proj", "k_proj", "v_proj"]
    assert [ft.byte_offsets for ft in qkv.tensors] == [(0, 0), (4096, 4096), (5120, 5120)]


def test_fsdp1_to_vllm_fused_example_runs():
    """examples/python/fsdp1_to_vllm_fused.py as a user runs it (it checks
    every destination element itself)."""
    pytest.importorskip("ml_dtypes")
    import subprocess
    import sys
    example = ROOT / "examples" / "python" / "fsdp1_to_vllm_fused.py"
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "every element checked" in out.stdout
