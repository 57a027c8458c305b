"""DeepSeek-V3 (671B) and Kimi-K2 (1T): every tensor of the main model
(MLA attention, dense and MoE layers, routed experts grouped per layer into
[E, ...] tensors as NeMo-RL and the NCCL M2N benchmark do, the shared
expert, router, norms, embedding and LM head; the multi-token-prediction
module is left out, as in the 671B / 1T counts).

Configurations from the models' published config.json (Hugging Face
deepseek-ai/DeepSeek-V3, moonshotai/Kimi-K2-Instruct)."""
from common import SpecBuilder, stage_of

DEEPSEEK_V3 = dict(name="DeepSeek-V3", layers=61, dense_layers=3, hidden=7168, heads=128,
                   q_lora=1536, kv_lora=512, nope=128, rope=64, v_head=128, dense_inter=18432,
                   experts=256, moe_inter=2048, shared_inter=2048, vocab=129280)
KIMI_K2 = dict(name="Kimi-K2", layers=61, dense_layers=1, hidden=7168, heads=64, q_lora=1536,
               kv_lora=512, nope=128, rope=64, v_head=128, dense_inter=18432, experts=384,
               moe_inter=2048, shared_inter=2048, vocab=163840)


def layer_tensors(c, l):
    """(name, shape, kind) of layer l; kinds say how each is sharded."""
    H, p = c["hidden"], f"model.layers.{l}."
    out = [
        (p + "input_layernorm.weight", [H], "norm"),
        (p + "self_attn.q_a_proj.weight", [c["q_lora"], H], "replicated"),
        (p + "self_attn.q_a_layernorm.weight", [c["q_lora"]], "norm"),
        (p + "self_attn.q_b_proj.weight", [c["heads"] * (c["nope"] + c["rope"]), c["q_lora"]], "col"),
        (p + "self_attn.kv_a_proj_with_mqa.weight", [c["kv_lora"] + c["rope"], H], "replicated"),
        (p + "self_attn.kv_a_layernorm.weight", [c["kv_lora"]], "norm"),
        (p + "self_attn.kv_b_proj.weight", [c["heads"] * (c["nope"] + c["v_head"]), c["kv_lora"]], "col"),
        (p + "self_attn.o_proj.weight", [H, c["heads"] * c["v_head"]], "row"),
        (p + "post_attention_layernorm.weight", [H], "norm"),
    ]
    if l < c["dense_layers"]:
        I = c["dense_inter"]
        out += [(p + "mlp.gate_proj.weight", [I, H], "col"), (p + "mlp.up_proj.weight", [I, H], "col"),
                (p + "mlp.down_proj.weight", [H, I], "row")]
    else:
        E, I, S = c["experts"], c["moe_inter"], c["shared_inter"]
        out += [(p + "mlp.gate.weight", [E, H], "replicated"),
                (p + "mlp.experts.w1", [E, I, H], "expert_in"),
                (p + "mlp.experts.w3", [E, I, H], "expert_in"),
                (p + "mlp.experts.w2", [E, H, I], "expert_out"),
                (p + "mlp.shared_experts.gate_proj.weight", [S, H], "col"),
                (p + "mlp.shared_experts.up_proj.weight", [S, H], "col"),
                (p + "mlp.shared_experts.down_proj.weight", [H, S], "row")]
    return out


def infer_spec(kind, expert_mode):
    """vLLM-style tensor parallelism on mesh axes (dp, tp): column-parallel
    on dim 0, row-parallel on dim 1, the low-rank q_a/kv_a projections, the
    router and norms replicated, vocabulary-parallel embedding and head;
    experts either tensor-parallel on their intermediate dim ("tp") or
    expert-parallel over the tp group ("ep")."""
    if kind in ("norm", "replicated"):
        return []
    if kind in ("col", "vocab"):
        return ["tp"]
    if kind == "row":
        return [None, "tp"]
    if kind == "expert_in":
        return ["tp"] if expert_mode == "ep" else [None, "tp"]
    if kind == "expert_out":
        return ["tp"] if expert_mode == "ep" else [None, None, "tp"]
    raise ValueError(kind)


def build(c, train, infer, per_host, dtype="bf16"):
    """train: ("megatron", pp, edp, ep) — pipeline stages, each a mesh
    (edp, ep) with dense weights replicated and experts split over ep on
    their expert dim (TP 1, EP carved out of DP, as Megatron-Core) — or
    ("fsdp", nodes, local) — dense weights sharded on dim 0 over the GPUs of
    a node and replicated across nodes, experts sharded over nodes on their
    expert dim and over the node's GPUs on dim 1 (Perplexity's Kimi-K2
    trainer: non-MoE FSDP over NVLink, MoE across nodes).
    infer: (dp, tp, expert_mode) on the devices after the trainer's."""
    b = SpecBuilder("", per_host)
    if train[0] == "megatron":
        _, pp, edp, ep = train
        stages = [b.mesh(f"train_pp{s}", ["edp", "ep"], [edp, ep], s * edp * ep) for s in range(pp)]
        n_train = pp * edp * ep

        def src(kind, stage):
            if kind in ("expert_in", "expert_out"):
                return (stages[stage], ["ep"])
            return (stages[stage], [])
        tdesc = f"PP{pp} x EP{ep} x EDP{edp} (TP1)"
    else:
        _, nodes, local = train
        m = b.mesh("train", ["node", "local"], [nodes, local], 0)
        n_train, pp = nodes * local, 1

        def src(kind, stage):
            if kind in ("expert_in", "expert_out"):
                return (m, ["node", "local"])
            if kind == "norm":
                return (m, [])
            return (m, ["local"])
        tdesc = f"FSDP {nodes} nodes x {local} GPUs"
    dp, tp, expert_mode = infer
    gen = b.mesh("infer", ["dp", "tp"], [dp, tp], n_train)
    H, V = c["hidden"], c["vocab"]
    last = pp - 1
    b.tensor("model.embed_tokens.weight", [V, H], src("vocab", 0), (gen, infer_spec("vocab", expert_mode)), dtype)
    for l in range(c["layers"]):
        s = stage_of(l, c["layers"], pp)
        for name, shape, kind in layer_tensors(c, l):
            b.tensor(name, shape, src(kind, s), (gen, infer_spec(kind, expert_mode)), dtype)
    b.tensor("model.norm.weight", [H], src("norm", last), (gen, []), dtype)
    b.tensor("lm_head.weight", [V, H], src("vocab", last), (gen, infer_spec("vocab", expert_mode)), dtype)
    b.description = (f"{c['name']} ({b.params() / 1e9:.0f}B parameters, {dtype}): trainer {tdesc} on "
                     f"devices 0..{n_train - 1} -> inference DP{dp} x TP{tp} (experts "
                     f"{'EP' if expert_mode == 'ep' else 'TP'}{tp}) on devices {n_train}..{n_train + dp * tp - 1}; "
                     f"{per_host} devices per host")
    return b
