"""reshard.jax.reshard equals jax.device_put on random shardings over 8 CPU devices."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding  # noqa: E402

import reshard  # noqa: E402
import reshard.jax as rj  # noqa: E402

DTYPES = [jnp.float32, jnp.bfloat16, jnp.int32, jnp.float16, jnp.int8, jnp.bool_, jnp.uint8]


def random_mesh(rng):
    """A mesh of 1-8 of the 8 CPU devices, in random order, 1-3 axes."""
    devs = jax.devices()
    assert len(devs) == 8, "XLA_FLAGS=--xla_force_host_platform_device_count=8"
    n = int(rng.choice([1, 2, 3, 4, 6, 8]))
    chosen = [devs[i] for i in rng.permutation(8)[:n]]
    shapes = {1: [[1]], 2: [[2], [1, 2]], 3: [[3]], 4: [[4], [2, 2], [1, 4]],
              6: [[6], [2, 3], [3, 2]], 8: [[8], [2, 4], [4, 2], [2, 2, 2]]}[n]
    shape = shapes[int(rng.integers(len(shapes)))]
    names = tuple(f"{c}{int(rng.integers(10))}" for c in "xyz"[:len(shape)])
    return Mesh(np.array(chosen).reshape(shape), names)


def random_spec(rng, mesh, rank):
    """A PartitionSpec with tuple axes, None and short forms; returns the spec and
    how many ways each dim is split."""
    entries = [[] for _ in range(rank)]
    for a in mesh.axis_names:
        if rank and rng.random() < 0.75:
            entries[int(rng.integers(rank))].append(a)
    ways = [int(np.prod([mesh.shape[a] for a in e])) for e in entries]
    spec = [None if not e else (e[0] if len(e) == 1 and rng.random() < 0.5 else tuple(e))
            for e in entries]
    while spec and spec[-1] is None and rng.random() < 0.5:
        spec.pop()  # short spec
    return P(*spec), ways


def random_case(rng):
    rank = int(rng.integers(1, 5))
    m1, m2 = random_mesh(rng), (random_mesh(rng) if rng.random() < 0.6 else None)
    s1, w1 = random_spec(rng, m1, rank)
    m2 = m2 or m1
    s2, w2 = random_spec(rng, m2, rank)
    # JAX (0.10) refuses shardings that do not divide a dim (IndivisibleError):
    # sizes are multiples of both splits, times odd factors (3, 5, 6, 10, ...).
    shape = tuple(int(np.lcm(a, b)) * int(rng.choice([1, 1, 2, 3, 5])) for a, b in zip(w1, w2))
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    return shape, dtype, NamedSharding(m1, s1), NamedSharding(m2, s2)


def make(shape, dtype, sharding, seed):
    x = np.random.default_rng(seed).integers(0, 100, shape)
    return jax.device_put(jnp.asarray(x).astype(dtype), sharding)


def assert_same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert a.sharding.is_equivalent_to(b.sharding, a.ndim)
    assert {s.device for s in a.addressable_shards} == {s.device for s in b.addressable_shards}
    for sa in a.addressable_shards:
        sb = next(s for s in b.addressable_shards if s.device == sa.device)
        assert sa.index == sb.index
        assert np.array_equal(np.asarray(sa.data), np.asarray(sb.data))


@pytest.mark.parametrize("seed", range(60))
def test_random_shardings_equal_device_put(seed):
    rng = np.random.default_rng(1000 + seed)
    tree, targets = {}, {}
    for i in range(int(rng.integers(1, 4))):
        shape, dtype, src, dst = random_case(rng)
        tree[f"t{i}"] = make(shape, dtype, src, seed * 10 + i)
        targets[f"t{i}"] = dst
    got = rj.reshard(tree, targets)
    want = jax.device_put(tree, targets)
    for k in tree:
        assert_same(got[k], want[k])


def test_spec_for_mapping():
    d = jax.devices()
    m = Mesh(np.array(d)[::-1].reshape(2, 4), ("dp", "tp"))
    x = make((8, 12, 2), jnp.float32, NamedSharding(m, P(("tp", "dp"))), 0)
    spec = rj.spec_for({"w": x}, NamedSharding(m, P(None, "tp")))
    assert spec["meshes"]["m0"] == {"axis_names": ["dp", "tp"], "shape": [2, 4],
                                   "devices": [7, 6, 5, 4, 3, 2, 1, 0],
                                   "processes": [0] * 8}
    t = spec["tensors"][0]
    assert t["name"] == "['w']" and t["dtype"] == "f32" and t["shape"] == [8, 12, 2]
    assert t["src"] == {"mesh": "m0", "spec": [["tp", "dp"]]}
    assert t["dst"] == {"mesh": "m0", "spec": [None, "tp"]}
    # ShapeDtypeStruct with a sharding plans without data
    sds = jax.ShapeDtypeStruct((8, 12, 2), jnp.float32, sharding=x.sharding)
    assert rj.spec_for({"w": sds}, NamedSharding(m, P(None, "tp"))) == spec


def test_pytree_prefix_none_and_single_device():
    d = jax.devices()
    m = Mesh(np.array(d[:4]), ("x",))
    tree = {"a": [make((8, 4), jnp.float32, NamedSharding(m, P("x")), 1),
                  make((4,), jnp.int32, NamedSharding(m, P()), 2)],
            "b": make((6, 3), jnp.bfloat16, SingleDeviceSharding(d[5]), 3)}
    targets = {"a": NamedSharding(Mesh(np.array(d[4:]), ("y",)), P("y")), "b": None}
    got = rj.reshard(tree, targets)
    want = jax.device_put(tree, {"a": targets["a"], "b": tree["b"].sharding})
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert_same(g, w)
    # a single device as target: explicit boxes
    one = rj.reshard(tree, d[2])
    for g, w in zip(jax.tree.leaves(one), jax.tree.leaves(jax.device_put(tree, d[2]))):
        assert_same(g, w)


def test_plan_is_cached_and_outputs_independent():
    d = jax.devices()
    m = Mesh(np.array(d).reshape(4, 2), ("a", "b"))
    dst = NamedSharding(m, P("b", "a"))
    r = rj.Resharder(dst)
    x = make((8, 8), jnp.float32, NamedSharding(m, P("a", "b")), 4)
    p1 = r.plan(x)
    y1 = r(x)
    y2 = r(x + 1)
    assert r.plan(x + 2) is p1
    assert np.array_equal(np.asarray(y2), np.asarray(y1) + 1)  # slab reuse never aliases live outputs
    del y1
    y3 = r(x * 3)
    assert np.array_equal(np.asarray(y3), np.asarray(x) * 3)
    assert np.array_equal(np.asarray(y2), np.asarray(x) + 1)
    assert p1.stats["network_bytes"] > 0


def _slab_of(prep, tree):
    """The index in prep's pool of the allocation every output shard of
    ``tree`` lies in (None: not all in one)."""
    ptrs = [s.data.unsafe_buffer_pointer() for v in jax.tree.leaves(tree) for s in v.addressable_shards]
    for i, slab in enumerate(prep._pool):
        lo = slab.mem.__array_interface__["data"][0]
        if all(lo <= p < lo + slab.mem.nbytes for p in ptrs):
            return i
    return None


@pytest.mark.parametrize("fast", [True, False])
def test_output_memory_reused_only_once_free(fast, monkeypatch):
    """A warm call writes into the allocation of an earlier call once every
    array of that call is gone, and never while one of them (or a NumPy view
    of one) is alive: outputs of earlier calls keep their values."""
    if not fast:
        monkeypatch.setattr(rj, "_FAST_PUT", None)
    d = jax.devices()
    m = Mesh(np.array(d), ("x",))
    tree = {f"w{i}": make((16, 8 * (i + 1)), jnp.float32, NamedSharding(m, P("x")), i) for i in range(3)}
    tree["n"] = make((8,), jnp.bfloat16, NamedSharding(m, P()), 7)
    ab = Mesh(np.array(d[::-1]).reshape(2, 4), ("a", "b"))
    targets = {k: NamedSharding(ab, P(None, ("b", "a"))) for k in tree}
    targets["n"] = NamedSharding(ab, P("b"))
    r = rj.Resharder(targets)
    y0 = r(tree)
    prep = next(iter(r._cache.values()))
    assert prep._fast is fast
    assert len(prep._pool) == 1 and _slab_of(prep, y0) == 0
    del y0
    y1 = r(tree)  # every array of the first call gone: same memory, no new allocation
    assert len(prep._pool) == 1 and _slab_of(prep, y1) == 0
    keep = y1["w1"]  # one array of the call alive: the next call allocates anew
    del y1
    y2 = r(jax.tree.map(lambda a: a + 1, tree))
    assert len(prep._pool) == 2 and _slab_of(prep, y2) == 1
    assert_same(keep, jax.device_put(tree["w1"], targets["w1"]))
    host = np.asarray(y2["w0"].addressable_shards[0].data)  # a host view of an output shard
    del keep, y2
    y3 = r(jax.tree.map(lambda a: a * 3, tree))
    assert _slab_of(prep, y3) == 0  # the first allocation is free again, the second is not
    want = jax.device_put(tree["w0"] + 1, targets["w0"])
    assert np.array_equal(host, np.asarray(want.addressable_shards[0].data))
    for k in tree:
        assert_same(y3[k], jax.device_put(tree[k] * 3, targets[k]))
    y4 = r(jax.tree.map(lambda a: a * 5, tree))  # y3 alive; `host` may alias the second allocation
    assert np.array_equal(host, np.asarray(want.addressable_shards[0].data))
    for k in tree:
        assert_same(y3[k], jax.device_put(tree[k] * 3, targets[k]))
        assert_same(y4[k], jax.device_put(tree[k] * 5, targets[k]))


def test_concurrent_calls_of_one_plan():
    """Threads calling one Resharder on trees of one structure at once (one
    cached plan): each call has its own addresses and its own output memory."""
    import threading
    d = jax.devices()
    m = Mesh(np.array(d), ("x",))
    base = {f"w{i}": make((64, 32), jnp.float32, NamedSharding(m, P("x")), i) for i in range(4)}
    targets = NamedSharding(Mesh(np.array(d[::-1]), ("y",)), P(None, "y"))
    r = rj.Resharder(targets)
    r(base)
    inputs = [jax.tree.map(lambda a, k=k: a + k, base) for k in range(8)]
    wants = [{n: np.asarray(a) for n, a in t.items()} for t in inputs]
    errors = []

    def work(k):
        try:
            for _ in range(25):
                got = r(inputs[k])
                for n, a in got.items():
                    if not np.array_equal(np.asarray(a), wants[k][n]):
                        errors.append((k, n))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert len(r._cache) == 1


@pytest.mark.parametrize("fast", [True, False])
def test_batched_outputs_and_public_fallback(fast, monkeypatch):
    """Outputs made by one batched_device_put per array (the fast path JAX
    0.10 offers) and by the public jax.device_put fallback are equal to
    jax.device_put, and alias the output allocation (no copy) either way."""
    if not fast:
        monkeypatch.setattr(rj, "_FAST_PUT", None)
    elif rj._FAST_PUT is None:
        pytest.fail("this JAX lacks batched_device_put: the fast path is untested")
    d = jax.devices()
    x8 = Mesh(np.array(d), ("x",))
    hi = Mesh(np.array(d[4:][::-1]), ("tp",))
    lo = Mesh(np.array(d[:2]), ("dp",))
    tree = {f"w{i}": make((8, 4 * (i + 1)), jnp.float32, NamedSharding(x8, P("x")), i)
            for i in range(5)}
    tree["b"] = make((6,), jnp.int8, NamedSharding(x8, P()), 9)
    targets = {k: NamedSharding(hi, P(None, "tp")) for k in tree}
    targets["b"] = NamedSharding(lo, P("dp"))
    r = rj.Resharder(targets)
    got = r(tree)
    prep = next(iter(r._cache.values()))
    assert prep._fast is fast
    want = jax.device_put(tree, targets)
    for k in tree:
        assert_same(got[k], want[k])
    slab = prep._pool[0].mem
    lo_, hi_ = slab.__array_interface__["data"][0], slab.__array_interface__["data"][0] + slab.nbytes
    ptrs = [s.data.unsafe_buffer_pointer() for v in got.values() for s in v.addressable_shards]
    assert all(lo_ <= p < hi_ for p in ptrs), "an output shard was copied out of the allocation"


def test_plan_wrapper():
    d = jax.devices()
    m = Mesh(np.array(d), ("x",))
    x = make((16, 8), jnp.float32, NamedSharding(m, P("x")), 5)
    p = rj.plan({"w": x}, NamedSharding(m, P(None, "x")))
    assert isinstance(p, reshard.Plan) and p.tensors[0].name == "['w']"
    assert p.verify()["mismatches"] == 0


def test_errors():
    d = jax.devices()
    m = Mesh(np.array(d), ("x",))
    x = make((16, 8), jnp.float32, NamedSharding(m, P("x")), 5)
    with pytest.raises(TypeError, match=r"tree\['w'\]: str is neither a jax.Array"):
        rj.reshard({"w": "weights"}, NamedSharding(m, P()))
    with pytest.raises(TypeError, match="shardings: expected a jax.sharding.Sharding"):
        rj.reshard(x, "x")
    with pytest.raises(reshard.InvalidArgumentError, match="not a pytree prefix"):
        rj.reshard([x], [NamedSharding(m, P()), NamedSharding(m, P())])


def test_spec_errors_reach_python():
    spec = {"meshes": {"m0": {"axis_names": ["x"], "shape": [8]}},
            "tensors": [{"name": "w", "shape": [8], "dtype": "f32",
                         "src": {"mesh": "m0", "spec": ["y"]}, "dst": {"mesh": "m0"}}]}
    with pytest.raises(reshard.InvalidArgumentError, match=r"tensors\[0\]\.src\.spec\[0\]"):
        reshard.plan(spec)
