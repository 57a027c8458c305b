#!/usr/bin/env python3
"""Checks the weight-sync spec generators (bench/models/): each model has its
published parameter count (within 0.5%), every tensor's layouts plan
(`reshard plan`: the spec parses, the layouts cover the tensors), and the
plan moves at least the bytes its lower bound says.

    python3 bench/models/check_models.py RESHARD_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek  # noqa: E402
import llama405b  # noqa: E402
import qwen3  # noqa: E402

# (name, builder, published parameters)
MODELS = [
    ("DeepSeek-V3 M2N layout", lambda: deepseek.build(deepseek.DEEPSEEK_V3, ("megatron", 4, 2, 16), (16, 8, "tp"), 64), 671e9),
    ("DeepSeek-V3 NeMo-RL layout", lambda: deepseek.build(deepseek.DEEPSEEK_V3, ("megatron", 16, 1, 16), (8, 32, "ep"), 8), 671e9),
    ("Kimi-K2", lambda: deepseek.build(deepseek.KIMI_K2, ("fsdp", 32, 8), (8, 16, "ep"), 8), 1.03e12),
    ("Qwen3-235B-A22B", lambda: qwen3.build(qwen3.QWEN3_235B, (4, 4, 2, 2), (8, 8), 64), 235e9),
    ("405B dense", lambda: llama405b.build(llama405b.LLAMA_405B), 405e9),
]


def main():
    reshard = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        for name, build, params in MODELS:
            b = build()
            got = b.params()
            if abs(got - params) > 0.005 * params:
                sys.exit(f"FAIL: {name}: {got / 1e9:.1f}B parameters, published {params / 1e9:.0f}B")
            path = os.path.join(d, "spec.json")
            b.write(path)
            p = subprocess.run([reshard, "plan", "--spec", path, "--format", "json"],
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                sys.exit(f"FAIL: {name}: reshard plan exited {p.returncode}\n{p.stderr}")
            s = json.loads(p.stdout)["stats"]
            if not s["network_bytes"] >= s["lower_bound_network_bytes"] > 0:
                sys.exit(f"FAIL: {name}: network bytes {s['network_bytes']}, bound "
                         f"{s['lower_bound_network_bytes']}")
            print(f"ok: {name}: {len(b.tensors)} tensors, {got / 1e9:.1f}B parameters, "
                  f"{s['network_bytes'] / 2**40:.2f} TiB over the network")


if __name__ == "__main__":
    main()
