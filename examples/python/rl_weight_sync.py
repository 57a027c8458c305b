#!/usr/bin/env python3
"""RL weight sync: trainer weights (FSDP over 8 devices) -> inference layout
(tensor parallel over 4 other devices), as a pytree, planned once and executed
after every training step.

Runs on one machine with 8 CPU devices standing in for accelerators:

    pip install ./bindings/python "jax[cpu]"
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/python/rl_weight_sync.py

What to copy into a framework: build the target shardings once, make one
`reshard.jax.Resharder`, call it on the trainer's params every step. The plan
is made on the first call (or ahead of time with `.plan(params)`, which also
accepts jax.ShapeDtypeStructs) and reused while shapes and shardings stay the
same; the outputs are ordinary jax.Arrays on the inference devices.
"""
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import reshard.jax  # noqa: E402

devices = jax.devices()
# Trainer: FSDP over devices 0-7 (parameters' first dim split 8 ways).
train_mesh = Mesh(np.array(devices[:8]), ("fsdp",))
# Inference engine: tensor parallel over devices 4-7, in its own device order.
infer_mesh = Mesh(np.array(devices[4:8][::-1]), ("tp",))

D, FF, LAYERS, VOCAB = 256, 704, 4, 4096


def init_params(key):
    shapes = {"embed": (VOCAB, D)}
    for i in range(LAYERS):
        shapes |= {f"layer{i}/attn/qkv": (D, 3 * D), f"layer{i}/attn/out": (D, D),
                   f"layer{i}/mlp/up": (D, FF), f"layer{i}/mlp/down": (FF, D),
                   f"layer{i}/norm": (D,)}
    keys = jax.random.split(key, len(shapes))
    fsdp = NamedSharding(train_mesh, P("fsdp"))
    return {k: jax.device_put(jax.random.normal(kk, s, jnp.float32) * 0.02, fsdp)
            for (k, s), kk in zip(shapes.items(), keys)}


def inference_sharding(name, shape):
    """Megatron-style TP: column-parallel in, row-parallel out, norms replicated."""
    if name.endswith(("qkv", "up")):
        return NamedSharding(infer_mesh, P(None, "tp"))
    if name.endswith(("out", "down")) or name == "embed":
        return NamedSharding(infer_mesh, P("tp", None))
    return NamedSharding(infer_mesh, P())


@jax.jit
def train_step(params, lr=1e-3):
    # stands in for a real optimizer update: keeps the FSDP sharding
    return jax.tree.map(lambda p: p - lr * jnp.sign(p), params)


def main():
    params = init_params(jax.random.PRNGKey(0))
    targets = {k: inference_sharding(k, v.shape) for k, v in params.items()}
    sync = reshard.jax.Resharder(targets)

    t0 = time.perf_counter()
    plan = sync.plan(params)  # planned once
    s = plan.stats
    print(f"planned {len(plan.tensors)} tensors in {(time.perf_counter() - t0) * 1e3:.1f} ms: "
          f"{s['network_bytes'] / 2**20:.1f} MiB between devices "
          f"(lower bound {s['lower_bound_network_bytes'] / 2**20:.1f} MiB), "
          f"{s['messages']} messages, {s['local_bytes'] / 2**20:.1f} MiB local copies")

    infer_params = None
    for step in range(5):
        params = jax.block_until_ready(train_step(params))  # (time the sync alone)
        t0 = time.perf_counter()
        del infer_params  # the engine drops the old weights; their memory is reused
        infer_params = sync(params)  # executed every step, same plan
        jax.block_until_ready(infer_params)
        dt = time.perf_counter() - t0
        ok = all(np.array_equal(np.asarray(infer_params[k]), np.asarray(params[k])) for k in params)
        print(f"step {step}: synced in {dt * 1e3:.2f} ms, equal to the trainer's weights: {ok}")
        assert ok
    assert len(sync._cache) == 1  # one plan for all steps
    w = infer_params["layer0/mlp/up"]
    print("layer0/mlp/up on inference devices:",
          sorted((sh.device.id, sh.data.shape) for sh in w.addressable_shards))


if __name__ == "__main__":
    main()
