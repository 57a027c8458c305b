"""Run under mpirun -np 2 by test_mpi.py: reshard.jax.reshard across two JAX
processes (jax.distributed on CPU, 4 devices each) over the MPI executor."""
import socket

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
port = None
if rank == 0:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
port = comm.bcast(port, root=0)

import jax  # noqa: E402

jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                           process_id=rank, initialization_timeout=60)
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import reshard  # noqa: E402
import reshard.jax as rj  # noqa: E402

devs = jax.devices()
assert len(devs) == 8 and jax.process_index() == rank, (devs, jax.process_index())
mine = [d for d in devs if d.process_index == rank]
# trainer: 2x4 over every device (both processes); inference: tp=4 on process 1
# only, and a cross-process reshard the other way
train = Mesh(np.array(devs).reshape(2, 4), ("dp", "tp"))
infer = Mesh(np.array([d for d in devs if d.process_index == 1]), ("tp",))
both = Mesh(np.array(devs[::-1]).reshape(4, 2), ("a", "b"))

rng = np.random.default_rng(3)
glob = {"w": rng.standard_normal((16, 12)).astype(np.float32),
        "b": rng.integers(0, 100, (8,)).astype(np.int32),
        "e": rng.standard_normal((8, 12, 4)).astype(jnp.bfloat16)}


def make(name, sharding):
    g = glob[name]
    return jax.make_array_from_callback(g.shape, sharding, lambda idx: g[idx])


tree = {"w": make("w", NamedSharding(train, P("dp", "tp"))),
        "b": make("b", NamedSharding(train, P(("tp", "dp")))),
        "e": make("e", NamedSharding(train, P(None, "tp")))}
targets = {"w": NamedSharding(infer, P(None, "tp")),
           "b": NamedSharding(both, P("a")),
           "e": NamedSharding(both, P(("b", "a"), None, None))}
# executor= left out across processes: an error that says what to pass (was
# `KeyError: 0` from the internals), raised on every process before any
# communication
try:
    rj.reshard(tree, targets)
    raise AssertionError("reshard across processes without an executor did not raise")
except reshard.InvalidArgumentError as e:
    assert "executor=reshard.MPIExecutor(comm)" in str(e) and "tree['" in str(e), e
ex = reshard.MPIExecutor(comm, timeout=60)
r = rj.Resharder(targets, executor=ex)
for step in range(3):
    out = r(tree)
    n = 0
    for k, x in out.items():
        assert x.sharding == targets[k] and x.shape == glob[k].shape and x.dtype == glob[k].dtype
        for s in x.addressable_shards:
            assert s.device.process_index == rank
            assert np.array_equal(np.asarray(s.data), glob[k][s.index]), (k, s.device, s.index)
            n += 1
    tree = {k: v for k, v in tree.items()}  # same arrays again: the plan is reused
assert len(r._cache) == 1
comm.Barrier()
print(f"rank {rank}: OK ({n} local shards per step checked, 3 steps)", flush=True)
jax.distributed.shutdown()
