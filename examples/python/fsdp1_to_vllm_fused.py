#!/usr/bin/env python3
"""RL weight sync into an inference engine's own parameter memory: a
transformer block kept as PyTorch FSDP1 FlatParameters (bf16, 16-byte
alignment, 4 training ranks) written straight into vLLM-style fused
tensor-parallel parameters on 2 ranks, with no per-tensor staging:

- ``qkv_proj``: vLLM's QKVParallelLinear, each tp rank holding [q_r; k_r; v_r]
  (grouped-query attention: 8 query heads, 2 key/value heads of 8);
- ``gate_up_proj``: MergedColumnParallelLinear, [gate_r; up_r];
- ``embed_tokens``: VocabParallelEmbedding, 1000 rows padded to 1024;
- o_proj and down_proj row-parallel, the norms replicated (plain shardings).

The layouts are `examples/specs/fused_views.json` (docs/spec.md, "Fused
buffers"). Runs in one process on the host executor; the same plan runs over
MPI or on GPUs with the executors of docs/python.md:

    pip install ./bindings/python ml_dtypes
    python examples/python/fsdp1_to_vllm_fused.py

What to copy into a framework: describe the trainer's flat buffers and the
engine's fused parameters once in a spec, plan once, and on every sync cut
each side's buffers into views with ``Flat.views`` and execute. The script
checks every destination element against the global weights it started from.
"""
from pathlib import Path

import ml_dtypes
import numpy as np

import reshard

SPEC = Path(__file__).resolve().parents[1] / "specs" / "fused_views.json"
bf16 = np.dtype(ml_dtypes.bfloat16)

plan = reshard.plan(SPEC)
names = [t.name for t in plan.tensors]
rng = np.random.default_rng(0)
# The model's weights as a checkpoint holds them (the oracle).
weights = {t.name: rng.standard_normal(t.shape).astype(bf16) for t in plan.tensors}


def fsdp1_flat_shards(flat):
    """What FSDP1 holds for one FlatParameter: its tensors concatenated in
    order, each start aligned, cut into one equal shard per rank. Built here
    from the weights, as a trainer would have them after a step."""
    whole = np.zeros(flat.shard_bytes * len(flat.devices) // bf16.itemsize, bf16)
    for ft in flat.tensors:
        w = weights[plan.tensors[ft.tensor].name].ravel()
        # The tensor's head: its first byte in the ranks' shards laid end to
        # end (Plan.flat gives each entry's rank and byte offset).
        head = min(r * flat.shard_bytes + off for r, off in zip(ft.ranks, ft.byte_offsets))
        whole[head // bf16.itemsize:head // bf16.itemsize + w.size] = w
    per = whole.size // len(flat.devices)
    return [whole[r * per:(r + 1) * per].copy() for r in range(len(flat.devices))]


sources, dests = {}, {}
engine_params = {}  # the inference engine's parameters, per rank
for flat in plan.flats:
    if flat.is_source:
        sources.update(flat.views(plan, fsdp1_flat_shards(flat)))
    else:
        # vLLM allocates these; here they start as NaN so that a missed
        # element shows.
        bufs = [np.full(flat.shard_bytes // bf16.itemsize, np.nan, bf16) for _ in flat.devices]
        engine_params[flat.name] = bufs
        dests.update(flat.views(plan, bufs))
# Tensors outside the fused parameters (o_proj, down_proj, the norms): plain
# per-rank arrays.
for i, t in enumerate(plan.tensors):
    dests.setdefault(i, [np.zeros(e.shape, bf16) for e in t.dst.entries])

reshard.execute(plan, [sources[i] for i in range(len(names))],
                [dests[i] for i in range(len(names))])

# vLLM's view of its parameters: one [rows, hidden] weight per rank.
for r in range(2):
    qkv = engine_params["qkv_proj"][r].reshape(-1, 64)
    q, k, v = (weights[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv")
    want = np.concatenate([q[32 * r:32 * r + 32], k[8 * r:8 * r + 8], v[8 * r:8 * r + 8]])
    assert qkv.shape == (48, 64) and np.array_equal(qkv, want), f"qkv_proj rank {r}"
    gate_up = engine_params["gate_up_proj"][r].reshape(-1, 64)
    g, u = (weights[f"model.layers.0.mlp.{p}_proj.weight"] for p in ("gate", "up"))
    assert np.array_equal(gate_up, np.concatenate([g[64 * r:64 * r + 64], u[64 * r:64 * r + 64]]))
    embed = engine_params["embed_tokens"][r].reshape(-1, 64)
    rows = weights["model.embed_tokens.weight"][512 * r:512 * r + 512]
    assert embed.shape == (512, 64) and np.array_equal(embed[:len(rows)], rows)
    assert np.isnan(embed[len(rows):].astype(np.float32)).all()  # vocabulary padding untouched
for i, t in enumerate(plan.tensors):
    if t.name in ("model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.down_proj.weight",
                  "model.layers.0.input_layernorm.weight",
                  "model.layers.0.post_attention_layernorm.weight"):
        for e, d in zip(t.dst.entries, dests[i]):
            assert np.array_equal(d, weights[t.name][e.index]), t.name
print(f"synced {len(names)} tensors from {sum(f.is_source for f in plan.flats)} FSDP1 flat "
      f"parameters into vLLM's fused qkv_proj, gate_up_proj and embed_tokens: every element "
      f"checked")
