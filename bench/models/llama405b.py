"""The 405B dense case (docs/design.md §2.8): a Llama-3.1-405B-shaped
transformer (126 layers, hidden 16384, 128 query and 8 KV heads of 128,
MLP 53248, vocabulary 128256, bf16; every tensor) from FSDP over 1,024 GPUs
(dim 0 split 1,024 ways) to DP128 x TP8 on the same GPUs: column-parallel
q/k/v/w1/w3/embedding/head on dim 0, row-parallel o/w2 on dim 1, norms
replicated. The same layout as bench/model_cases.h and
examples/specs/llama405b_fsdp1024_to_tp8.json."""
from common import SpecBuilder

LLAMA_405B = dict(name="405B dense", layers=126, hidden=16384, kv=1024, mlp=53248, vocab=128256)


def build(c, train_devices=1024, tp=8, per_host=8, dtype="bf16"):
    b = SpecBuilder("", per_host)
    train = b.mesh("train", ["dp"], [train_devices], 0)
    infer = b.mesh("infer", ["dp", "tp"], [train_devices // tp, tp], 0)
    H, K, M, V = c["hidden"], c["kv"], c["mlp"], c["vocab"]

    def add(name, shape, kind):
        dst = {"col": ["tp"], "row": [None, "tp"], "norm": []}[kind]
        b.tensor(name, shape, (train, ["dp"]), (infer, dst), dtype)
    add("embed", [V, H], "col")
    for l in range(c["layers"]):
        p = f"layers.{l}."
        add(p + "attn_norm", [H], "norm")
        add(p + "wq", [H, H], "col")
        add(p + "wk", [K, H], "col")
        add(p + "wv", [K, H], "col")
        add(p + "wo", [H, H], "row")
        add(p + "mlp_norm", [H], "norm")
        add(p + "w1", [M, H], "col")
        add(p + "w3", [M, H], "col")
        add(p + "w2", [H, M], "row")
    add("final_norm", [H], "norm")
    add("lm_head", [V, H], "col")
    b.description = (f"{c['name']} ({b.params() / 1e9:.0f}B parameters, {dtype}): FSDP over "
                     f"{train_devices} GPUs -> DP{train_devices // tp} x TP{tp} on the same GPUs; "
                     f"{per_host} per host")
    return b
