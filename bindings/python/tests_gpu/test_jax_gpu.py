"""reshard.jax on GPU arrays in one process (CudaLocalExecutor): equal to
jax.device_put shard by shard. With one GPU every mesh has one device (JAX
has one device per GPU), so the cases are copies between layouts of one
device; with several GPUs the meshes span them. Runs in its own process
(scripts/test-python-gpu.sh): no torch here."""
import numpy as np
import pytest

import reshard

jax = pytest.importorskip("jax")
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import reshard.jax as rj  # noqa: E402

# JAX's GPU backend first: reshard's CUDA backend then links to the NCCL
# JAX loaded (by soname) instead of loading another one first.
try:
    GPUS = jax.devices("gpu")
except RuntimeError:
    GPUS = []
CUDA_OK, CUDA_WHY = reshard.transport_available("cuda_local")
pytestmark = pytest.mark.skipif(not (CUDA_OK and GPUS),
                                reason=f"needs JAX GPU devices and the cuda_local transport "
                                       f"({CUDA_WHY or 'JAX has no GPU backend'})")


def _equal_to_device_put(tree, targets, out):
    want = jax.device_put(tree, targets)
    for k in tree:
        assert out[k].sharding == want[k].sharding, k
        for so, sw in zip(out[k].addressable_shards, want[k].addressable_shards):
            assert so.device == sw.device
            a, b = np.asarray(so.data), np.asarray(sw.data)
            assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), k


def test_gpu_arrays_equal_device_put():
    n = len(GPUS)
    mesh = Mesh(np.array(GPUS), ("x",))
    rev = Mesh(np.array(GPUS[::-1]), ("y",))
    rng = np.random.default_rng(0)
    tree = {"w": jax.device_put(rng.standard_normal((8 * n, 12)).astype(np.float32),
                                NamedSharding(mesh, P("x"))),
            "h": jax.device_put(rng.standard_normal((4, 6 * n)).astype(jax.numpy.bfloat16),
                                NamedSharding(mesh, P(None, "x"))),
            "i": jax.device_put(np.arange(5 * n, dtype=np.int32), NamedSharding(mesh, P()))}
    targets = {"w": NamedSharding(rev, P(None, "y")), "h": NamedSharding(rev, P("y")),
               "i": NamedSharding(rev, P("y"))}
    sync = rj.Resharder(targets)
    for step in range(3):
        tree = jax.tree.map(lambda x: x + 1, tree)
        out = sync(tree)
        _equal_to_device_put(tree, targets, out)
    assert isinstance(sync._cache[next(iter(sync._cache))], rj._GpuPrepared)
    assert rj._default_cuda_executor().transport == "cuda_local"


def test_single_device_and_donate():
    x = jax.device_put(np.arange(24, dtype=np.float32).reshape(4, 6), GPUS[0])
    out = rj.reshard({"x": x}, {"x": GPUS[-1]}, donate=True)
    assert x.is_deleted()
    assert np.array_equal(np.asarray(out["x"]), np.arange(24, dtype=np.float32).reshape(4, 6))


def test_errors():
    x = jax.device_put(np.zeros(4, np.float32), GPUS[0])
    with pytest.raises(reshard.InvalidArgumentError, match=r"tree\['x'\]: device .* among CPU"):
        rj.reshard({"x": x}, {"x": jax.devices("cpu")[0]})
    with pytest.raises(reshard.InvalidArgumentError, match="executor: a host executor for arrays "
                       "on GPUs"):
        rj.reshard({"x": x}, {"x": GPUS[0]}, executor=reshard.Executor())
