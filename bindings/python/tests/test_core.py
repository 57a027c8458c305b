"""The core API against the cases of tests/capi (dlopen_test.c, capi_test.c)."""
import json

import numpy as np
import pytest

import reshard

# tests/capi/dlopen_test.c: a [6, 10] f64 tensor from (dp, tp) = 2x4 on devices
# 0-7 to tp = 2 on devices 8, 9.
DLOPEN_SPEC = {
    "meshes": {"train": {"axis_names": ["dp", "tp"], "shape": [2, 4]},
               "infer": {"axis_names": ["tp"], "shape": [2], "devices": [8, 9]}},
    "tensors": [{"name": "w", "shape": [6, 10], "dtype": "f64",
                 "src": {"mesh": "train", "spec": ["dp", "tp"]},
                 "dst": {"mesh": "infer", "spec": ["tp", None]}}],
}


def test_abi_checked_at_import():
    assert reshard.ABI_VERSION[0] == reshard.HEADER_ABI_VERSION[0] == 1
    assert reshard.ABI_VERSION[1] >= 1
    assert reshard.__version__.count(".") == 2
    from reshard import _ffi
    assert _ffi.api.struct_size >= _ffi.ffi.sizeof("reshard_api_t")


def test_dlopen_case_values_and_bytes():
    p = reshard.plan(DLOPEN_SPEC)
    assert p.stats["network_bytes"] == 6 * 10 * 8  # every element moves once
    q = reshard.Plan.from_bytes(p.to_bytes())
    assert q.fingerprint == p.fingerprint
    t = q.tensors[0]
    assert (t.name, t.shape, t.dtype) == ("w", (6, 10), "f64")
    assert len(t.src.entries) == 8 and len(t.dst.entries) == 2
    assert [e.device for e in t.dst.entries] == [8, 9]
    g = np.arange(60, dtype=np.float64).reshape(6, 10)
    src = [[np.ascontiguousarray(g[e.index]) for e in t.src.entries]]
    dst = [[np.full(e.shape, -1.0) for e in t.dst.entries]]
    reshard.execute(q, src, dst)
    assert np.array_equal(dst[0][0], g[0:3]) and np.array_equal(dst[0][1], g[3:6])
    assert q.verify() == {"tensors": 1, "elements": 60, "bytes": 480, "mismatches": 0}


def test_spec_as_dict_text_and_path(tmp_path, root):
    text = json.dumps(DLOPEN_SPEC)
    path = tmp_path / "s.json"
    path.write_text(text)
    fps = {reshard.plan(DLOPEN_SPEC).fingerprint, reshard.plan(text).fingerprint,
           reshard.plan(path).fingerprint, reshard.plan(str(path)).fingerprint,
           reshard.spec_fingerprint(DLOPEN_SPEC)}
    assert len(fps) == 1


@pytest.mark.parametrize("name", ["small_transformer.json", "partial_sums.json",
                                  "explicit_boxes.json"])
def test_example_specs_verify(root, name):
    p = reshard.plan(root / "examples" / "specs" / name)
    rep = p.verify()
    assert rep["mismatches"] == 0 and rep["elements"] > 0
    s = p.stats
    assert s["network_bytes"] >= s["lower_bound_network_bytes"]
    assert s["lower_bound_binding"] in ("none", "device_recv", "device_send", "host_recv", "host_send")
    assert len(p.device_traffic()) == s["num_devices"]


def test_stats_fields_match_struct():
    from reshard import _ffi
    s = reshard.plan(DLOPEN_SPEC).stats
    fields = [f for f, _ in _ffi.ffi.typeof("reshard_plan_stats_t").fields
              if f != "struct_size" and not f.startswith("reserved")]
    assert list(s) == fields
    assert s["messages"] > 0 and s["pieces"] >= s["messages"] and s["rounds"] >= 1


def test_process_parts(root):
    spec = root / "examples" / "specs" / "small_transformer.json"
    whole = reshard.plan(spec)
    assert whole.processes == (0, 1, 2)
    for p in whole.processes:
        part = reshard.plan(spec, process=p)
        assert part.has_part(p) and not part.has_part((p + 1) % 3)
        assert part.fingerprint == whole.fingerprint
        assert part.part_info(p) == whole.part_info(p)
        worker = reshard.Plan.from_bytes(whole.to_bytes(process=p))
        assert worker.has_part(p) and not worker.has_part((p + 1) % 3)
        assert worker.part_info(p) == part.part_info(p)
        # The worker's bytes from the whole plan also list every part's
        # digest (what the ranks agree on): not the bytes of a part planned
        # alone, but the same bytes again when re-encoded.
        assert worker.to_bytes() == whole.to_bytes(process=p)
        assert worker.to_bytes() != part.to_bytes()
    with pytest.raises(reshard.OutOfRangeError):
        reshard.plan(spec, process=0).part_info(1)
    with pytest.raises(reshard.UnsupportedError):
        reshard.plan(spec, process=0, global_stats=False).stats


def test_scratch_buffers(root):
    # Partial sums over 3 holder hosts chained (alpha 0): holders pre-reduce
    # into scratch on their host; every part lists its scratch (C ABI 1.6).
    spec = root / "tests" / "mpi" / "specs" / "psum_chain_3_holder_hosts.json"
    p = reshard.plan(spec)
    most = 0
    for proc in p.processes:
        xs = p.scratch(proc)
        assert len(xs) == p.part_info(proc)["num_scratch"]
        per_device = {}
        for x in xs:
            size = {"f32": 4, "bf16": 2}[p.tensors[x["tensor"]].dtype]
            assert x["bytes"] == int(np.prod(np.subtract(x["hi"], x["lo"]))) * size
            assert p.device_location(x["device"])[0] == proc
            per_device[x["device"]] = per_device.get(x["device"], 0) + x["bytes"]
        most = max([most, *per_device.values()])
    assert most == p.stats["max_scratch_bytes"] > 0
    assert reshard.SCRATCH_ENTRY == 0xFFFFFFFE
    with pytest.raises(reshard.OutOfRangeError):
        p.scratch(99)


def test_threads_give_identical_plans(root):
    spec = root / "examples" / "specs" / "small_transformer.json"
    assert reshard.plan(spec, threads=1).to_bytes() == reshard.plan(spec, threads=4).to_bytes()


def _random_spec(rng, n_tensors=3):
    """Random meshes (1-8 devices), ranks 1-4, uneven sizes, tuple axes, short specs."""
    def mesh(first):
        n = int(rng.integers(1, 9))
        dims = [d for d in (2, 2, 2) if n % d == 0 and rng.random() < 0.6] or [n]
        shape = list(dims) if np.prod(dims) == n else [n]
        devs = (first + rng.permutation(n)).tolist()
        return {"axis_names": [f"a{i}" for i in range(len(shape))], "shape": shape, "devices": devs}

    def layout(mname, m, rank):
        axes = list(m["axis_names"])
        rng.shuffle(axes)
        spec = [None] * rank
        for a in axes:
            if rng.random() < 0.7:
                d = int(rng.integers(0, rank))
                spec[d] = a if spec[d] is None else ([spec[d], a] if isinstance(spec[d], str) else spec[d] + [a])
        cut = int(rng.integers(0, rank + 1))
        while len(spec) > cut and spec[-1] is None:  # short spec: trailing dims unsplit
            spec.pop()
        return {"mesh": mname, "spec": spec}

    meshes = {"s": mesh(0), "d": mesh(int(rng.integers(0, 9)))}
    tensors = []
    for i in range(n_tensors):
        rank = int(rng.integers(1, 5))
        shape = [int(rng.integers(0, 11)) for _ in range(rank)]
        tensors.append({"name": f"t{i}", "shape": shape,
                        "dtype": str(rng.choice(["f32", "f64", "i32", "u8", "f16", "bool"])),
                        "src": layout("s", meshes["s"], rank), "dst": layout("d", meshes["d"], rank)})
    # destination devices may overlap source devices with a different process
    # assignment only if consistent: keep everything on process 0.
    return {"meshes": meshes, "tensors": tensors}


@pytest.mark.parametrize("seed", range(30))
def test_random_uneven_against_numpy(seed):
    rng = np.random.default_rng(seed)
    spec = _random_spec(rng)
    p = reshard.plan(spec)
    g = {}
    for t in p.tensors:
        dt = t.numpy_dtype
        g[t.name] = (rng.integers(0, 2, t.shape).astype(dt) if dt == np.bool_
                     else rng.integers(0, 100, t.shape).astype(dt))
        # every source and destination box is the ceil-division chunk of the spec
        for e in t.src.entries + t.dst.entries:
            assert all(0 <= l <= h <= n for l, h, n in zip(e.lo, e.hi, t.shape))
    src = p.scatter(g)
    dst = p.allocate("dst")
    reshard.execute(p, {t.name: src[t.index] for t in p.tensors}, dst)
    for t in p.tensors:
        for e, b in zip(t.dst.entries, dst[t.index]):
            assert np.array_equal(b, g[t.name][e.index]), (t.name, e)
    assert p.verify()["mismatches"] == 0


def test_partial_sum_reduces():
    spec = {"meshes": {"g": {"axis_names": ["dp", "tp"], "shape": [2, 2]},
                       "o": {"axis_names": ["x"], "shape": [3], "devices": [4, 5, 6]}},
            "tensors": [{"name": "grad", "shape": [5, 4], "dtype": "f32",
                         "src": {"mesh": "g", "spec": [None, "tp"], "partial": {"axes": ["dp"]}},
                         "dst": {"mesh": "o", "spec": ["x"]}}]}
    p = reshard.plan(spec)
    t = p.tensors[0]
    assert t.src.num_summands == 2 and t.src.op == "sum" and t.dst.num_summands == 1
    rng = np.random.default_rng(1)
    parts = [rng.integers(0, 9, (5, 4)).astype(np.float32) for _ in range(2)]
    src = [[np.ascontiguousarray(parts[e.summand][e.index]) for e in t.src.entries]]
    dst = p.allocate("dst")
    reshard.execute(p, src, dst)
    assert np.array_equal(p.gather(dst)["grad"], parts[0] + parts[1])


def test_executor_threads_and_reuse():
    p = reshard.plan(DLOPEN_SPEC)
    ex = reshard.Executor(threads=1)
    assert ex.info() == {"transport": "host", "rank": 0, "size": 1}
    g = np.random.default_rng(0).standard_normal((6, 10))
    src, dst = p.scatter({"w": g}), p.allocate("dst")
    for _ in range(3):
        ex.execute(p, src, dst)
    assert np.array_equal(p.gather(dst)["w"], g)


def test_bf16_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    spec = json.loads(json.dumps(DLOPEN_SPEC))
    spec["tensors"][0]["dtype"] = "bfloat16"
    p = reshard.plan(spec)
    assert p.tensors[0].dtype == "bf16" and p.tensors[0].numpy_dtype == np.dtype(ml_dtypes.bfloat16)
    g = np.arange(60).reshape(6, 10).astype(ml_dtypes.bfloat16)
    dst = p.allocate("dst")
    reshard.execute(p, p.scatter({"w": g}), dst)
    assert np.array_equal(p.gather(dst)["w"], g)


def test_block_scales_named(root):
    """Block scales (C ABI 1.12): each scaled tensor names its scale tensor
    and block as the spec asks (tests/data/zero3_fp8_scales_small.json); a
    scale tensor is f32 of shape ceil(shape / block) with no scales of its
    own; other tensors have none."""
    spec = json.loads((root / "tests" / "data" / "zero3_fp8_scales_small.json").read_text())
    p = reshard.plan(spec)
    by_name = {t.name: t for t in p.tensors}
    scaled = 0
    for t in spec["tensors"]:
        got = by_name[t["name"]]
        scales = t["dst"].get("scales")
        if scales is None:
            assert (got.scale_tensor, got.scale_block) == (None, None), t["name"]
            continue
        scaled += 1
        s = p.tensors[got.scale_tensor]
        assert (s.name, got.scale_block) == (scales["name"], tuple(scales["block"])), t["name"]
        assert (s.dtype, s.scale_tensor) == ("f32", None)
        assert s.shape == tuple(-(-n // b) for n, b in zip(got.shape, got.scale_block))
    assert scaled == 4


def test_casts_in_flight(root):
    """A plan that casts (examples/specs/zero3_to_tp_fp8.json: bf16 to
    f8e4m3, f8e5m2 and f32, an f32 router to bf16): destination buffers hold
    each tensor's destination dtype, and what arrives is ml_dtypes' cast of
    the source (round to nearest even; e4m3 overflow to NaN)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    spec = json.loads((root / "examples" / "specs" / "zero3_to_tp_fp8.json").read_text())
    for t in spec["tensors"]:  # 1/32 of each large dimension: the same layouts, small
        t["shape"] = [d // 32 if d >= 1024 else d for d in t["shape"]]
    p = reshard.plan(spec)
    by_name = {t.name: t for t in p.tensors}
    assert (by_name["layers.0.attn.qkv"].dtype, by_name["layers.0.attn.qkv"].dst_dtype) == \
        ("bf16", "f8e4m3")
    assert by_name["layers.0.attn.qkv"].dst_numpy_dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert (by_name["embed"].dst_dtype, by_name["layers.0.router"].dst_dtype) == ("f32", "bf16")
    assert by_name["layers.0.attn_norm"].dst_dtype == "bf16"
    rng = np.random.default_rng(7)
    glob = {t.name: (rng.standard_normal(t.shape) * 64).astype(t.numpy_dtype) for t in p.tensors}
    dst = p.allocate("dst")
    for t, row in zip(p.tensors, dst):
        assert all(b.dtype == t.dst_numpy_dtype for b in row)
    reshard.execute(p, p.scatter(glob), dst)
    out = p.gather(dst)
    for t in p.tensors:
        want = glob[t.name].astype(t.dst_numpy_dtype)
        assert out[t.name].dtype == want.dtype
        assert np.array_equal(out[t.name].view(np.uint8), want.view(np.uint8)), t.name
    # A destination buffer in the source dtype is refused, naming it.
    qkv = by_name["layers.0.attn.qkv"]
    bad = [list(r) for r in dst]
    bad[qkv.index][0] = np.zeros(qkv.dst.entries[0].shape, qkv.numpy_dtype)
    with pytest.raises(reshard.InvalidArgumentError, match="layers.0.attn.qkv.*f8e4m3"):
        reshard.execute(p, p.scatter(glob), bad)


def test_transport_available():
    assert reshard.transport_available("host") == (True, "")
    ok, why = reshard.transport_available("nccl")
    assert ok or why
