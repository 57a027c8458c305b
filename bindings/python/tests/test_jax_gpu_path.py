"""reshard.jax's GPU path (``_GpuPrepared``: sources read in place through
``unsafe_buffer_pointer``, outputs made by a jitted ``zeros`` with the target
sharding and written in place) exercised on CPU devices behind an executor
that says it moves CUDA memory: the pointer bookkeeping is the same; the
GPU run is bindings/python/tests_gpu/test_jax_gpu.py."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import reshard  # noqa: E402
import reshard.jax as rj  # noqa: E402
from reshard import _cuda  # noqa: E402
from reshard._ffi import api, check, ffi  # noqa: E402


class EmulatedCuda(_cuda._CudaExecutor):
    transport = "cuda_local"

    def __init__(self):
        opts = ffi.new("reshard_executor_options_t*")
        opts.struct_size = ffi.sizeof("reshard_executor_options_t")
        opts.transport, opts.threads, opts.timeout_seconds = 1, 1, 60.0
        out = ffi.new("reshard_executor_t**")
        check(api.executor_create(opts, out))
        super().__init__(_ptr=out[0])


def test_gpu_path_on_cpu_devices_equals_device_put():
    devs = jax.devices()[:8]
    a = Mesh(np.array(devs).reshape(2, 4), ("dp", "tp"))
    b = Mesh(np.array(devs[::-1][:4]), ("tp",))
    rng = np.random.default_rng(0)
    tree = {"w": jax.device_put(rng.standard_normal((8, 12)).astype(np.float32),
                                NamedSharding(a, P("dp", "tp"))),
            "b": jax.device_put(np.arange(12, dtype=np.int32), NamedSharding(a, P("tp")))}
    targets = {"w": NamedSharding(b, P(None, "tp")), "b": NamedSharding(b, P())}
    leaves, treedef, per, names = rj._flatten(tree, targets)
    prep = rj._GpuPrepared(leaves, per, names, EmulatedCuda())
    for step in range(2):
        outs = prep.run(leaves)
        want = jax.device_put(leaves, per)
        for o, w, s in zip(outs, want, per):
            assert o.sharding == s
            for so, sw in zip(o.addressable_shards, w.addressable_shards):
                assert so.device == sw.device and np.array_equal(np.asarray(so.data),
                                                                 np.asarray(sw.data)), step


def test_gpu_path_refuses_a_host_executor():
    x = jax.device_put(np.zeros(4, np.float32), jax.devices()[0])
    leaves, _, per, names = rj._flatten({"x": x}, {"x": jax.devices()[1]})
    with pytest.raises(reshard.InvalidArgumentError, match="executor: a host executor for arrays "
                       "on GPUs"):
        rj._GpuPrepared(leaves, per, names, reshard.Executor())


def test_cuda_executor_refused_for_cpu_arrays():
    x = jax.device_put(np.zeros(4, np.float32), jax.devices()[0])
    with pytest.raises(reshard.InvalidArgumentError, match=r"executor: a cuda_local executor "
                       r"\(CUDA memory\) for arrays on CPU devices"):
        rj.reshard({"x": x}, jax.devices()[1], executor=EmulatedCuda())
