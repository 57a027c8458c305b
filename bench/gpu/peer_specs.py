#!/usr/bin/env python3
"""Specs for the PyTorch-peer comparison on one GPU (scripts/gpu-check.sh):
the cases of docs/gpu-results.md's peer table, every plan device on GPU 0.

    python3 bench/gpu/peer_specs.py OUT_DIR     # writes OUT_DIR/*.json

Cases (bf16 unless named): a 2-d axis swap on 8 devices; MoE experts EP8 ->
dp2 x tp4; FSDP 8 -> tp 6 (uneven); 400 tensors of 1 MiB FSDP 8 -> tp 8;
partial sums over 4 devices -> tp 4 (bf16 and f32); and two the kernels
were not tuned on: fused qkv columns tp 8 -> tp 2 x dp 4, and a 3-d
activation (batch, seq, hidden) from seq-parallel 8 to hidden-parallel 8.
"""
import json
import os
import sys


def mesh(name, shape, axes):
    n = 1
    for s in shape:
        n *= s
    return {name: {"axis_names": axes, "shape": shape, "devices": list(range(n)),
                   "processes": [0] * n, "hosts": [0] * n}}


def tensor(name, shape, dtype, src, dst):
    return {"name": name, "shape": shape, "dtype": dtype, "src": src, "dst": dst}


def specs():
    out = {}
    m8 = mesh("a", [2, 4], ["x", "y"])
    out["axis_swap_8"] = {"meshes": m8, "tensors": [
        tensor("w", [16384, 16384], "bf16", {"mesh": "a", "spec": ["x", "y"]},
               {"mesh": "a", "spec": ["y", "x"]})]}
    m = {**mesh("ep", [8], ["ep"]), **mesh("inf", [2, 4], ["dp", "tp"])}
    out["moe_ep8_to_dp2_tp4"] = {"meshes": m, "tensors": [
        tensor(f"experts{i}", [64, 2048, 1408], "bf16", {"mesh": "ep", "spec": ["ep", None, None]},
               {"mesh": "inf", "spec": [None, None, "tp"]}) for i in range(2)]}
    m = {**mesh("f", [8], ["fsdp"]), **mesh("t", [6], ["tp"])}
    out["fsdp8_to_tp6_uneven"] = {"meshes": m, "tensors": [
        tensor(f"l{i}", [8192, 8190], "bf16", {"mesh": "f", "spec": ["fsdp", None]},
               {"mesh": "t", "spec": [None, "tp"]}) for i in range(4)]}
    m = {**mesh("f", [8], ["fsdp"]), **mesh("t", [8], ["tp"])}
    out["400_tensors_fsdp8_to_tp8"] = {"meshes": m, "tensors": [
        tensor(f"p{i}", [512, 1024], "bf16", {"mesh": "f", "spec": ["fsdp", None]},
               {"mesh": "t", "spec": [None, "tp"]}) for i in range(400)]}
    for dtype in ("bf16", "f32"):
        m = {**mesh("p", [4], ["dp"]), **mesh("t", [4], ["tp"])}
        out[f"psum4_to_tp4_{dtype}"] = {"meshes": m, "tensors": [
            tensor(f"g{i}", [8192, 8192], dtype,
                   {"mesh": "p", "spec": [None, None], "partial": {"axes": ["dp"], "op": "sum"}},
                   {"mesh": "t", "spec": ["tp", None]}) for i in range(2)]}
    m = {**mesh("t8", [8], ["tp"]), **mesh("inf", [4, 2], ["dp", "tp"])}
    out["qkv_tp8_to_dp4_tp2"] = {"meshes": m, "tensors": [
        tensor(f"qkv{i}", [8192, 10240], "bf16", {"mesh": "t8", "spec": [None, "tp"]},
               {"mesh": "inf", "spec": [None, "tp"]}) for i in range(2)]}
    m = mesh("s", [8], ["sp"])
    out["act_seq8_to_hidden8"] = {"meshes": m, "tensors": [
        tensor("act", [8, 4096, 8192], "bf16", {"mesh": "s", "spec": [None, "sp", None]},
               {"mesh": "s", "spec": [None, None, "sp"]})]}
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: peer_specs.py OUT_DIR")
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, spec in specs().items():
        spec["description"] = f"PyTorch-peer case {name} (bench/gpu/peer_specs.py), one GPU"
        with open(os.path.join(sys.argv[1], name + ".json"), "w") as f:
            json.dump(spec, f)
        print(os.path.join(sys.argv[1], name + ".json"))


if __name__ == "__main__":
    main()
