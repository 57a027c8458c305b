"""Qwen3-235B-A22B: every tensor (94 layers, GQA attention with 64 query and
4 KV heads and q/k norms, 128 routed experts per layer grouped into
[E, ...] tensors, router, norms, embedding and LM head). Configuration from
the published config.json (Hugging Face Qwen/Qwen3-235B-A22B)."""
from common import SpecBuilder, stage_of

QWEN3_235B = dict(name="Qwen3-235B-A22B", layers=94, hidden=4096, heads=64, kv_heads=4,
                  head_dim=128, experts=128, moe_inter=1536, vocab=151936)


def build(c, train, infer, per_host, dtype="bf16"):
    """train: (pp, dp, cp, tp): pipeline stages, each a mesh (dp, cp, tp)
    with attention tensor-parallel over tp (heads) and replicated over dp
    and cp, experts split over all of the stage's GPUs on their expert dim
    (EP = dp·cp·tp, expert TP 1), norms and router replicated; embedding and
    head vocabulary-parallel over tp (Megatron-Core). infer: (dp, tp):
    vLLM tensor parallelism, experts tensor-parallel on their intermediate
    dim, KV heads replicated tp / kv_heads times (tp split as kv x rep)."""
    pp, tdp, cp, ttp = train
    dp, tp = infer
    rep = max(1, tp // c["kv_heads"])
    kv = tp // rep
    b = SpecBuilder("", per_host)
    per_stage = tdp * cp * ttp
    stages = [b.mesh(f"train_pp{s}", ["dp", "cp", "tp"], [tdp, cp, ttp], s * per_stage)
              for s in range(pp)]
    n_train = pp * per_stage
    gen = b.mesh("infer", ["dp", "kv", "rep"], [dp, kv, rep], n_train)
    H, D, V, E, I = c["hidden"], c["head_dim"], c["vocab"], c["experts"], c["moe_inter"]
    TP = ["kv", "rep"]
    ep = ["dp", "cp", "tp"]
    b.tensor("model.embed_tokens.weight", [V, H], (stages[0], ["tp"]), (gen, [TP]), dtype)
    for l in range(c["layers"]):
        st = stages[stage_of(l, c["layers"], pp)]
        p = f"model.layers.{l}."
        b.tensor(p + "input_layernorm.weight", [H], (st, []), (gen, []), dtype)
        b.tensor(p + "self_attn.q_proj.weight", [c["heads"] * D, H], (st, ["tp"]), (gen, [TP]), dtype)
        b.tensor(p + "self_attn.k_proj.weight", [c["kv_heads"] * D, H], (st, ["tp"]), (gen, ["kv"]), dtype)
        b.tensor(p + "self_attn.v_proj.weight", [c["kv_heads"] * D, H], (st, ["tp"]), (gen, ["kv"]), dtype)
        b.tensor(p + "self_attn.o_proj.weight", [H, c["heads"] * D], (st, [None, "tp"]), (gen, [None, TP]), dtype)
        b.tensor(p + "self_attn.q_norm.weight", [D], (st, []), (gen, []), dtype)
        b.tensor(p + "self_attn.k_norm.weight", [D], (st, []), (gen, []), dtype)
        b.tensor(p + "post_attention_layernorm.weight", [H], (st, []), (gen, []), dtype)
        b.tensor(p + "mlp.gate.weight", [E, H], (st, []), (gen, []), dtype)
        b.tensor(p + "mlp.experts.w1", [E, I, H], (st, [ep]), (gen, [None, TP]), dtype)
        b.tensor(p + "mlp.experts.w3", [E, I, H], (st, [ep]), (gen, [None, TP]), dtype)
        b.tensor(p + "mlp.experts.w2", [E, H, I], (st, [ep]), (gen, [None, None, TP]), dtype)
    b.tensor("model.norm.weight", [H], (stages[-1], []), (gen, []), dtype)
    b.tensor("lm_head.weight", [V, H], (stages[-1], ["tp"]), (gen, [TP]), dtype)
    b.description = (f"{c['name']} ({b.params() / 1e9:.0f}B parameters, {dtype}): trainer PP{pp} x "
                     f"DP{tdp} x CP{cp} x TP{ttp} (EP{per_stage}) on devices 0..{n_train - 1} -> "
                     f"inference DP{dp} x TP{tp} on devices {n_train}..{n_train + dp * tp - 1}; "
                     f"{per_host} devices per host")
    return b
