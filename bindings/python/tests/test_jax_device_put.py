"""reshard.jax.reshard as a drop-in for jax.device_put (issue 40, item 2):
NumPy and scalar inputs, PRNG key arrays, a bare PartitionSpec under
jax.set_mesh, a clear error inside jit, donate, the plan-cache switch, errors
that name the leaf by its key path, and a missing executor across processes.
8 CPU devices (conftest.py)."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding  # noqa: E402

import reshard  # noqa: E402
import reshard.jax as rj  # noqa: E402


@pytest.fixture(scope="module")
def meshes():
    d = jax.devices()
    assert len(d) == 8, "XLA_FLAGS=--xla_force_host_platform_device_count=8"
    return Mesh(np.array(d), ("x",)), Mesh(np.array(d[::-1]).reshape(2, 4), ("a", "b"))


def put(x, sharding):
    return jax.device_put(x, sharding)


def assert_same(a, b):
    """Same shape, dtype, weak type, sharding and per-device values (key
    arrays: same impl and key data)."""
    assert type(a) is type(b), (type(a), type(b))
    assert a.shape == b.shape and a.dtype == b.dtype
    assert getattr(a, "weak_type", None) == getattr(b, "weak_type", None)
    assert a.sharding.is_equivalent_to(b.sharding, a.ndim), (a.sharding, b.sharding)
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        assert str(jax.random.key_impl(a)) == str(jax.random.key_impl(b))
        a, b = jax.random.key_data(a), jax.random.key_data(b)
    for sa in a.addressable_shards:
        sb = next(s for s in b.addressable_shards if s.device == sa.device)
        assert sa.index == sb.index
        assert np.array_equal(np.asarray(sa.data), np.asarray(sb.data))


def test_numpy_and_python_scalars_are_placed_like_device_put(meshes):
    x8, ab = meshes
    tree = {"w": np.arange(32, dtype=np.float64).reshape(8, 4),  # float64 -> float32 (no x64)
            "i": np.arange(8, dtype=np.int16),
            "step": 3, "lr": 0.1, "flag": True, "np_scalar": np.float32(2.5),
            "a": put(jnp.arange(16.0).reshape(8, 2), NamedSharding(x8, P("x")))}
    targets = {k: NamedSharding(ab, P()) for k in tree}
    targets["w"] = NamedSharding(ab, P("a", "b"))
    targets["a"] = NamedSharding(ab, P(("b", "a")))
    got = rj.reshard(tree, targets)
    want = jax.device_put(tree, targets)
    for k in tree:
        assert_same(got[k], want[k])
    # one sharding for all, and a bare NumPy array as the whole tree
    assert_same(rj.reshard(tree["w"], NamedSharding(x8, P("x"))),
                jax.device_put(tree["w"], NamedSharding(x8, P("x"))))
    # None keeps a jax.Array where it is and puts a host value on the default device
    got = rj.reshard({"a": tree["a"], "n": np.ones(3)}, None)
    assert_same(got["n"], jax.device_put(np.ones(3)))
    assert_same(got["a"], tree["a"])
    # the plan holds only the jax.Array leaf, named by its key path
    r = rj.Resharder(targets)
    assert [t.name for t in r.plan(tree).tensors] == ["['a']"]


def test_key_arrays_move_through_their_key_data(meshes):
    x8, ab = meshes
    tree = {"keys": put(jax.random.split(jax.random.key(0), 8), NamedSharding(x8, P("x"))),
            "one": jax.random.key(7),
            "rbg": put(jax.random.split(jax.random.key(1, impl="rbg"), 4),
                       NamedSharding(ab, P("b"))),
            "w": put(jnp.ones((8, 4)), NamedSharding(x8, P("x")))}
    targets = {"keys": NamedSharding(ab, P(("b", "a"))), "one": NamedSharding(ab, P()),
               "rbg": NamedSharding(x8, P()), "w": SingleDeviceSharding(jax.devices()[3])}
    got = rj.reshard(tree, targets)
    want = jax.device_put(tree, targets)
    for k in tree:
        assert_same(got[k], want[k])
    # the keys still work as keys
    assert np.array_equal(np.asarray(jax.random.key_data(jax.random.split(got["one"]))),
                          np.asarray(jax.random.key_data(jax.random.split(tree["one"]))))
    # the plan moves the key data (a trailing dimension of 2 uint32 for threefry)
    names = {t.name: t for t in rj.Resharder(targets).plan(tree).tensors}
    assert names["['keys']"].shape == (8, 2) and names["['rbg']"].shape == (4, 4)
    # spec_for/plan of a key array itself say what to plan instead
    with pytest.raises(reshard.InvalidArgumentError, match=r"tree\['one'\]: a PRNG key array"):
        rj.spec_for({"one": tree["one"]}, NamedSharding(ab, P()))


def test_bare_partition_spec_uses_the_ambient_mesh(meshes):
    x8, ab = meshes
    x = put(jnp.arange(64.0).reshape(8, 8), NamedSharding(x8, P("x")))
    with jax.set_mesh(ab):
        got = rj.reshard({"w": x, "step": 4}, {"w": P("b", "a"), "step": P()})
        want = jax.device_put({"w": x, "step": 4}, {"w": P("b", "a"), "step": P()})
        per_leaf = rj.reshard({"w": x, "b": x}, {"w": P(None, "a"), "b": None})
    for k in want:
        assert_same(got[k], want[k])
    assert_same(per_leaf["w"], jax.device_put(x, NamedSharding(ab, P(None, "a"))))
    assert_same(per_leaf["b"], x)
    # the same spec on another mesh: the cached plan of the first is not reused
    with jax.set_mesh(x8):
        again = rj.reshard({"w": x, "step": 4}, {"w": P("x"), "step": P()})
    assert again["w"].sharding == NamedSharding(x8, P("x"))
    # no mesh: the error names the leaf and what to do
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"tree\['step'\]: the target is a bare PartitionSpec.*no mesh is set.*"
                             r"jax.set_mesh"):
        rj.reshard({"step": x}, P())
    with pytest.raises(reshard.InvalidArgumentError, match=r"tree\['b'\]: .*no mesh"):
        rj.reshard({"a": x, "b": x}, {"a": NamedSharding(x8, P()), "b": P("x")})
    with pytest.raises(reshard.InvalidArgumentError, match=r"shardings\['w'\]: .*no mesh"):
        rj.Resharder({"w": P("x")})


def test_inside_jit_is_a_clear_type_error(meshes):
    x8, _ = meshes
    s = NamedSharding(x8, P())
    x = put(jnp.ones(8), NamedSharding(x8, P("x")))
    with pytest.raises(TypeError, match=r"tree\['w'\]: a \w*Tracer .*inside jax.jit.*runs eagerly.*"
                                        r"outside jit.*jax.device_put"):
        jax.jit(lambda t: rj.reshard(t, s))({"w": x})
    with pytest.raises(TypeError, match=r"tree: a \w*Tracer"):
        jax.jit(lambda a: rj.reshard(a, s))(x)
    # concrete arrays closed over while tracing: also refused (the result
    # would be baked into the trace as a constant)
    with pytest.raises(TypeError, match="called while tracing.*outside jit"):
        jax.jit(lambda a: a + rj.reshard(x, s))(x)
    # and outside jit it runs
    assert_same(rj.reshard(x, s), jax.device_put(x, s))


def test_donate_deletes_the_sources(meshes):
    x8, ab = meshes
    mk = lambda: {"a": put(jnp.arange(16.0), NamedSharding(x8, P("x"))),  # noqa: E731
                  "b": put(jnp.arange(8), NamedSharding(ab, P("b"))),
                  "k": jax.random.key(3), "n": np.ones(4)}
    dst = NamedSharding(ab, P())
    want = jax.device_put(mk(), dst)  # from other arrays: device_put may alias its input
    tree = mk()
    got = rj.reshard(tree, dst, donate=True)
    for k in tree:
        assert_same(got[k], want[k])
    assert tree["a"].is_deleted() and tree["b"].is_deleted() and tree["k"].is_deleted()
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        tree["a"] + 1
    # a pytree prefix of bools, as for jax.device_put
    tree = mk()
    rj.reshard(tree, dst, donate={"a": True, "b": False, "k": False, "n": True})
    assert tree["a"].is_deleted() and not tree["b"].is_deleted() and not tree["k"].is_deleted()
    assert np.array_equal(np.asarray(tree["b"]), np.arange(8))
    # bad donate values name their path
    tree = mk()
    with pytest.raises(TypeError, match=r"donate\['a'\]: expected a bool, got str"):
        rj.reshard(tree, dst, donate={"a": "yes", "b": True, "k": False, "n": False})
    assert not tree["b"].is_deleted()  # refused before anything moved or was deleted
    with pytest.raises(reshard.InvalidArgumentError, match="donate: not a pytree prefix"):
        rj.reshard(mk(), dst, donate=[True, False])


def test_plan_cache_can_be_switched_off_and_cleared(meshes):
    x8, ab = meshes
    x = put(jnp.arange(32.0).reshape(8, 4), NamedSharding(x8, P("x")))
    dst = NamedSharding(ab, P(None, "b"))
    rj.clear_plan_cache()
    assert len(rj._RESHARDERS) == 0
    off = rj.reshard({"w": x}, dst, cache_resharding_plans=False)
    assert len(rj._RESHARDERS) == 0  # nothing kept
    on = rj.reshard({"w": x}, dst)
    assert len(rj._RESHARDERS) == 1
    (r,) = rj._RESHARDERS.values()
    assert len(r._cache) == 1
    assert_same(off["w"], on["w"])
    assert_same(on["w"], jax.device_put(x, dst))
    rj.clear_plan_cache()
    assert len(rj._RESHARDERS) == 0


def test_errors_name_the_leaf(meshes):
    x8, _ = meshes
    s = NamedSharding(x8, P())
    x = put(jnp.ones(8), NamedSharding(x8, P("x")))
    c = put(jnp.ones(8, jnp.complex64), NamedSharding(x8, P("x")))
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"tree\['opt'\]\['step'\]\.dtype: complex64 has no reshard equivalent"):
        rj.reshard({"w": x, "opt": {"step": c}}, s)
    with pytest.raises(TypeError, match=r"shardings\['step'\]: expected a jax.sharding.Sharding"):
        rj.reshard({"w": x, "step": x}, {"w": s, "step": "x"})
    sds = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=s)
    with pytest.raises(reshard.InvalidArgumentError, match=r"tree\['s'\]: a jax.ShapeDtypeStruct"):
        rj.reshard({"w": x, "s": sds}, s)
    with pytest.raises(TypeError, match=r"tree\['layers'\]\[1\]: object is neither a jax.Array"):
        rj.reshard({"layers": [x, object()]}, s)
    # the C library's errors: tensors[1] becomes the leaf's key path
    huge = jax.ShapeDtypeStruct((2 ** 40, 2 ** 40), jnp.float32, sharding=s)
    with pytest.raises(reshard.ReshardOverflowError,
                       match=r"^\[overflow\] tree\['step'\]\.shape: element count overflows"):
        rj.plan({"a": sds, "step": huge}, s)


def test_missing_executor_across_processes_is_a_clear_error(meshes, monkeypatch):
    """Arrays on devices of another process and no executor: an error that
    says to pass an MPIExecutor (was `KeyError: 0`). Two real processes are
    tests/mpi_jax_worker.py; here, this process pretends to be process 1 of 2,
    so that every device belongs to process 0."""
    x8, _ = meshes
    x = put(jnp.ones(8), NamedSharding(x8, P("x")))
    monkeypatch.setattr(jax, "process_index", lambda *a: 1)
    monkeypatch.setattr(jax, "process_count", lambda *a: 2)
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"executor: tree\['w'\] has devices in process 0 \(this is process 1 "
                             r"of 2\).*executor=reshard.MPIExecutor\(comm\)"):
        rj.reshard({"w": x}, NamedSharding(x8, P()), cache_resharding_plans=False)
