#!/usr/bin/env python3
"""Writes a reshard spec for a Llama-style transformer moving from FSDP
training (dp over all training devices, dim 0) to tensor-parallel inference
(dp x tp, column-parallel q/k/v/w1/w3/embedding/lm_head on dim 0, row-parallel
o/w2 on dim 1, norms replicated), one process per device, `--per-host`
devices per host. The defaults are the 405B shapes of bench/model_cases.h.

  scripts/gen_transformer_spec.py --out examples/specs/llama405b_fsdp1024_to_tp8.json
  scripts/gen_transformer_spec.py --infer-first 1024 --infer-devices 256 --out ...
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=126)
    ap.add_argument("--hidden", type=int, default=16384)
    ap.add_argument("--kv", type=int, default=1024)
    ap.add_argument("--mlp", type=int, default=53248)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--train-devices", type=int, default=1024)
    ap.add_argument("--infer-first", type=int, default=0)
    ap.add_argument("--infer-devices", type=int, default=1024)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--per-host", type=int, default=8)
    ap.add_argument("--budget", type=int, default=None, help="options.staging_budget_bytes")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for name in ("layers", "hidden", "kv", "mlp", "vocab", "train_devices", "infer_devices", "tp", "per_host"):
        if getattr(a, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if a.infer_first < 0:
        ap.error(f"--infer-first must not be negative, got {a.infer_first}")
    if a.infer_devices % a.tp:
        ap.error(f"--infer-devices {a.infer_devices} is not a multiple of --tp {a.tp}")
    if a.budget is not None and a.budget <= 0:
        ap.error(f"--budget must be positive, got {a.budget}")

    def mesh(names, shape, first, n):
        devs = list(range(first, first + n))
        return {"axis_names": names, "shape": shape, "devices": devs, "processes": devs,
                "hosts": [d // a.per_host for d in devs]}

    spec = {
        "description": f"{a.layers}-layer transformer, FSDP over {a.train_devices} devices -> "
                       f"dp={a.infer_devices // a.tp} x tp={a.tp} on devices "
                       f"{a.infer_first}..{a.infer_first + a.infer_devices - 1}",
        "meshes": {
            "train": mesh(["dp"], [a.train_devices], 0, a.train_devices),
            "infer": mesh(["dp", "tp"], [a.infer_devices // a.tp, a.tp], a.infer_first, a.infer_devices),
        },
        "tensors": [],
    }
    if a.budget is not None:
        spec["options"] = {"staging_budget_bytes": a.budget}

    def add(name, shape, kind):
        dst = [None] * len(shape)
        if kind == "col":
            dst[0] = "tp"
        elif kind == "row":
            dst[1] = "tp"
        src = [None] * len(shape)
        src[0] = "dp"
        spec["tensors"].append({"name": name, "shape": shape, "dtype": "bf16",
                                "src": {"mesh": "train", "spec": src},
                                "dst": {"mesh": "infer", "spec": dst}})

    h = a.hidden
    add("embed", [a.vocab, h], "col")
    for l in range(a.layers):
        p = f"layers.{l}."
        add(p + "attn_norm", [h], "norm")
        add(p + "wq", [h, h], "col")
        add(p + "wk", [a.kv, h], "col")
        add(p + "wv", [a.kv, h], "col")
        add(p + "wo", [h, h], "row")
        add(p + "mlp_norm", [h], "norm")
        add(p + "w1", [a.mlp, h], "col")
        add(p + "w3", [a.mlp, h], "col")
        add(p + "w2", [h, a.mlp], "row")
    add("final_norm", [h], "norm")
    add("lm_head", [a.vocab, h], "col")
    with open(a.out, "w") as f:
        json.dump(spec, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
