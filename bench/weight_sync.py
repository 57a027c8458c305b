#!/usr/bin/env python3
"""RL weight sync of large models on the published systems' own layouts:
our plan's simulated time, its lower bound, and the three modelled peers
(`reshard simulate`, docs/simulate.md), next to the published measurements.

Specs come from the generators in bench/models/ (every tensor of each
model); they are written to --out-dir (a temporary directory by default)
and simulated with one round (`--budget 0`: staging unbounded), so that the
fleet plans stay small enough to simulate here (with the 1 GiB default
budget the 405B plan has ~200 M messages).

    python3 bench/weight_sync.py [--reshard build/dev/tools/reshard] [--only dsv3_m2n,...]

Published figures are measurements on real clusters, quoted from the
sources in PUBLISHED; everything else is our simulation.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))

import deepseek  # noqa: E402
import llama405b  # noqa: E402
import qwen3  # noqa: E402

GB200 = os.path.join(ROOT, "bench", "topologies", "gb200_nvl72.json")
H100 = os.path.join(ROOT, "bench", "topologies", "h100_8gpu_ndr400.json")

# GPUs per host of each cluster: a spec's hosts are its NVLink domains (an
# H100 host's 8 GPUs, 64 of a GB200 NVL72 rack's 72, as the published runs).
PER_HOST = {H100: 8, GB200: 64}
# name -> (builder(GPUs per host), the cluster of the published run, published
# measurement text)
CASES = {
    "dsv3_m2n": (
        lambda h: deepseek.build(deepseek.DEEPSEEK_V3, ("megatron", 4, 2, 16), (16, 8, "tp"), h),
        GB200,
        "NCCL M2N, 128 + 128 GB200: 1.447 s hierarchical, 3.838 s direct "
        "(github.com/NVIDIA/nccl-extensions, nccl_m2n README)"),
    "dsv3_nemorl": (
        lambda h: deepseek.build(deepseek.DEEPSEEK_V3, ("megatron", 16, 1, 16), (8, 32, "ep"), h),
        H100,
        "NeMo-RL nccl_reshard refit, 256 + 256 H100: 2.39-2.83 s "
        "(github.com/NVIDIA-NeMo/RL, docs/design-docs/nccl-reshard-refit.md)"),
    "kimi_k2": (
        lambda h: deepseek.build(deepseek.KIMI_K2, ("fsdp", 32, 8), (8, 16, "ep"), h),
        H100,
        "Perplexity, 256 BF16 training GPUs -> 128 inference GPUs, FP8 on the destination: "
        "~1.3 s (research.perplexity.ai, 'Weight transfer for RL post-training in under 2 "
        "seconds'; arXiv 2510.27656)"),
    "kimi_k2_fp8": (
        lambda h: deepseek.build(deepseek.KIMI_K2, ("fsdp", 32, 8), (8, 16, "ep"), h, "f8e4m3"),
        H100,
        "same as kimi_k2; here every tensor moves as FP8 (quantised on the sender, its time "
        "not modelled)"),
    "qwen3_m2n": (
        lambda h: qwen3.build(qwen3.QWEN3_235B, (4, 4, 2, 2), (8, 8), h),
        GB200,
        "NCCL M2N, 64 + 64 GB200: 0.989 s hierarchical, 2.175 s direct "
        "(github.com/NVIDIA/nccl-extensions, nccl_m2n README)"),
    "llama405b": (
        lambda h: llama405b.build(llama405b.LLAMA_405B, per_host=h),
        H100,
        "none published"),
}
PEERS = ["rank0_broadcast", "direct_p2p", "layered"]



def bound_term(b):
    """The binding term of a simulated bound: a device or host by id, or
    every device ("devices") or host ("hosts") together (id -1)."""
    return b["kind"] if b["id"] < 0 else f"{b['kind']} {b['id']}"

def render(rows, peers):
    print("| case | GPUs (train + inference) | topology | ours (s) | estimate (s) | bound (s) | ratio | "
          + " | ".join(f"{p} (s)" for p in peers) + " | bound term | our binding link |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in peers)
          + " | --- | --- |")
    for d in rows:
        cells = " | ".join(f"{d['peers'][p]['predicted_seconds']:.3f}" for p in peers)
        bnd, link = d["lower_bound"], d["binding"]
        est = f"{d['estimate_seconds']:.3f}" if "estimate_seconds" in d else ""
        print(f"| {d['case']} | {d['gpus']} | {d['topology_file']} | {d['predicted_seconds']:.3f} | "
              f"{est} | {d['lower_bound_seconds']:.3f} | {d['ratio']:.2f} | {cells} | {bound_term(bnd)} | "
              f"{link.get('link', '')} host {link.get('host', '')} |")
    print("\nLayouts:")
    for d in rows:
        print(f"- {d['case']}: {d['description']}")
    print("\nPublished (measured on real clusters, not simulated):")
    for d in rows:
        print(f"- {d['case']}: {d['published']}")


def simulate(args, name, spec, topo):
    """`reshard simulate` of one spec on one topology: its JSON, with the
    run's settings added."""
    t0 = time.time()
    p = subprocess.run([args.reshard, "simulate", "--spec", spec, "--topology", topo,
                        "--format", "json", "--budget", args.budget, "--peers", args.peers,
                        "--threads", args.threads, "--chunks", args.chunks],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{name}: reshard simulate failed\n{p.stderr}")
    doc = json.loads(p.stdout)
    doc["case"] = name
    doc["wall_seconds"] = time.time() - t0
    doc["chunks"] = args.chunks
    doc["budget"] = args.budget
    doc["topology_file"] = os.path.basename(topo)
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reshard", default=os.path.join(ROOT, "build/dev/tools/reshard"))
    ap.add_argument("--only", default="", help="comma-separated case names: " + ", ".join(CASES))
    ap.add_argument("--out-dir", help="keep the specs and results here")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--threads", default="0", help="reshard simulate --threads")
    ap.add_argument("--jobs", type=int, default=1,
                    help="cases simulated at once (one `reshard simulate` process each)")
    ap.add_argument("--chunks", default="best",
                    help="reshard simulate --chunks: 'best' (each pipelined peer at its fastest "
                    "count) or a count (0: 4 per hop)")
    ap.add_argument("--topologies", choices=["own", "both"], default="own",
                    help="own: each model on the cluster of its published run; both: on the "
                    "H100 and the GB200 topology")
    ap.add_argument("--budget", default="0",
                    help="reshard simulate --budget (staging per device; 0: one round)")
    ap.add_argument("--render", metavar="DIR",
                    help="print the table of the *.result.json a previous run left in DIR")
    args = ap.parse_args()
    if args.render:
        rows = [json.load(open(os.path.join(args.render, n + ".result.json"))) for n in CASES
                if os.path.exists(os.path.join(args.render, n + ".result.json"))]
        render(rows, [p for p in args.peers.split(",") if p])
        return
    names = [n for n in args.only.split(",") if n] or list(CASES)
    out_dir = args.out_dir or tempfile.mkdtemp()
    os.makedirs(out_dir, exist_ok=True)
    jobs = []
    for name in names:
        build, own_topo, published = CASES[name]
        for topo in ([own_topo] if args.topologies == "own" else [H100, GB200]):
            key = name if topo == own_topo else f"{name}@{os.path.basename(topo)[:-5]}"
            b = build(PER_HOST[topo])
            spec = os.path.join(out_dir, key + ".json")
            b.write(spec)
            jobs.append((name, key, spec, topo, b, published))

    def one(job):
        name, key, spec, topo, b, published = job
        doc = simulate(args, name, spec, topo)
        doc["description"] = b.description
        doc["tensors"] = len(b.tensors)
        doc["published"] = published
        train = {d for n, m in b.meshes.items() if n != "infer" for d in m["devices"]}
        infer = set(b.meshes["infer"]["devices"])
        doc["gpus"] = (f"{len(train)} (the same)" if train == infer
                       else f"{len(train)} + {len(infer)}")
        json.dump(doc, open(os.path.join(out_dir, key + ".result.json"), "w"), indent=1)
        print(f"{name} on {doc['topology_file']}: {doc['predicted_seconds']:.3f} s (bound "
              f"{doc['lower_bound_seconds']:.3f} s) in {doc['wall_seconds']:.0f} s",
              file=sys.stderr)
        return doc

    # Each case is one `reshard simulate` process: --jobs of them at once.
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(one, jobs))
    render(rows, [p for p in args.peers.split(",") if p])
    print(f"\nspecs and results in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
