#!/usr/bin/env python3
"""Casts in flight over MPI: bf16 -> fp8 (e4m3) cast on the sending side
against transfer-then-cast, in the same run.

The case: a ZeRO-3 bf16 model (each weight sharded over dp=8 on dim 0,
devices 0-7 in processes 0-1) into an fp8 inference layout with tp=4
(devices 8-11 in process 2), --layers transformer blocks of hidden --hidden.
Variants, interleaved --repeat times, each executed by
`mpirun -np 3 reshard run --transport mpi` (every element verified):

  cast on send       the destination's "dtype" is f8e4m3: each piece is cast
                     by its sender and crosses as 1 byte per element;
  transfer           the same move in bf16 (2 bytes per element), no cast;
  then cast          the destination cast afterwards where it lies (bf16 tp
                     layout -> the same layout in f8e4m3: local copies only);
  with scales        cast on send with DeepSeek-V3's 128x128 f32 block
                     scales (docs/spec.md "Block scales"): each sender
                     computes its shards' scales and quantises as it packs,
                     values and scales cross;
  with MX scales     the same with MXFP8's e8m0 scales over 32 elements of
                     the last dim.

transfer-then-cast is transfer + then cast. The table gives the bytes on the
wire (the plan's network_bytes), the median seconds, the ratio of
cast-on-send to transfer-then-cast, and that of with-scales to cast on send
(what the scales cost). --hidden must be a multiple of 128 (whole blocks in
every dp shard). Every "host" here is a process on one
machine: messages are shared-memory copies, so fewer bytes buy less than on
a network.

    python3 bench/cast_bench.py [--reshard build/dev/tools/reshard] [--layers 2] [--hidden 2048]

With --baseline OTHER (another build's reshard, its backends in ../lib
beside it), only the two scale variants run, alternating between OTHER and
--reshard in each repeat, and the table gives both and their ratio.
"""
import argparse
import json
import os
import statistics
import tempfile

from spec_tools import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spec(layers, hidden, dst_dtype, local_cast=False, scales=False, mx=False):
    meshes = {
        "train": {"axis_names": ["dp"], "shape": [8], "devices": list(range(8)),
                  "processes": [0] * 4 + [1] * 4},
        "infer": {"axis_names": ["tp"], "shape": [4], "devices": [8, 9, 10, 11],
                  "processes": [2] * 4},
    }
    weights = []
    for i in range(layers):
        weights += [(f"l{i}.qkv", [3 * hidden, hidden], ["tp", None]),
                    (f"l{i}.o", [hidden, hidden], [None, "tp"]),
                    (f"l{i}.w13", [8 * hidden, hidden], ["tp", None]),
                    (f"l{i}.w2", [hidden, 4 * hidden], [None, "tp"])]
    tensors = []
    for name, shape, tp in weights:
        dst = {"mesh": "infer", "spec": tp}
        if dst_dtype:
            dst["dtype"] = dst_dtype
        if scales:
            dst["scales"] = {"name": name + ".scale", "block": [128, 128]}
        if mx:
            dst["scales"] = {"name": name + ".scale", "block": [1, 32], "dtype": "e8m0"}
        src = {"mesh": "infer", "spec": tp} if local_cast else {"mesh": "train", "spec": ["dp", None]}
        tensors.append({"name": name, "shape": shape, "dtype": "bf16", "src": src, "dst": dst})
    return {"meshes": meshes, "tensors": tensors}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reshard", default=os.path.join(ROOT, "build/dev/tools/reshard"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs per variant")
    ap.add_argument("--iters", type=int, default=3, help="timed iterations per run")
    ap.add_argument("--baseline", help="another build's reshard: the scale variants against it")
    args = ap.parse_args()
    if args.hidden % 128:
        ap.error("--hidden must be a multiple of 128 (the block scales' blocks)")
    base_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                    OMPI_MCA_btl_vader_single_copy_mechanism="none")

    def env_of(binary):
        env = dict(base_env)
        env.setdefault("RESHARD_BACKEND_DIR", os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(binary))), "lib"))
        return env

    def timed(binary, f):
        res = json.loads(run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
                              binary, "run", "--spec", f, "--transport", "mpi",
                              "--iters", str(args.iters), "--format", "json",
                              "--timeout", "120"], env=env_of(binary)))
        if not res["verified"]:
            raise SystemExit(f"{binary} {f}: not verified")
        return res

    scaled = [("with scales", spec(args.layers, args.hidden, "f8e4m3", scales=True)),
              ("with MX scales", spec(args.layers, args.hidden, "f8e4m3", mx=True))]
    if args.baseline:
        binaries = [("baseline", args.baseline), ("this", args.reshard)]
        times = {(name, b): [] for name, _ in scaled for b, _ in binaries}
        wire = {}
        with tempfile.TemporaryDirectory() as d:
            for _ in range(args.repeat):
                for name, doc in scaled:
                    f = os.path.join(d, name.replace(" ", "_") + ".json")
                    with open(f, "w") as out:
                        json.dump(doc, out)
                    for b, binary in binaries:
                        res = timed(binary, f)
                        times[(name, b)].append(res["median_seconds"])
                        wire[(name, b)] = res["network_bytes"]
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{args.layers} layers, hidden {args.hidden}, bf16 -> f8e4m3 with scales, 3 MPI "
              f"processes, medians of {args.repeat} alternating runs of {args.iters} iterations")
        print(f"baseline {args.baseline}; this {args.reshard}")
        print(f"{'variant':<16}{'bytes (base)':>14}{'bytes (this)':>14}{'s (base)':>10}"
              f"{'s (this)':>10}{'this/base':>11}")
        for name, _ in scaled:
            a, b = med[(name, "baseline")], med[(name, "this")]
            print(f"{name:<16}{wire[(name, 'baseline')]:>14}{wire[(name, 'this')]:>14}{a:>10.4f}"
                  f"{b:>10.4f}{b / a:>11.2f}")
        print("runs (s): " + "; ".join(f"{k[0]} {k[1]} " + " ".join(f"{t:.4f}" for t in v)
                                       for k, v in times.items()))
        return
    variants = [("cast on send", spec(args.layers, args.hidden, "f8e4m3")),
                ("transfer", spec(args.layers, args.hidden, None)),
                ("then cast", spec(args.layers, args.hidden, "f8e4m3", local_cast=True))] + scaled
    times = {name: [] for name, _ in variants}
    wire = {}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.repeat):
            for name, doc in variants:
                f = os.path.join(d, name.replace(" ", "_") + ".json")
                with open(f, "w") as out:
                    json.dump(doc, out)
                res = timed(args.reshard, f)
                times[name].append(res["median_seconds"])
                wire[name] = res["network_bytes"]
    med = {k: statistics.median(v) for k, v in times.items()}
    elements = sum(t["shape"][0] * t["shape"][1] for t in variants[0][1]["tensors"])
    print(f"{args.layers} layers, hidden {args.hidden}: {elements} elements, bf16 -> f8e4m3, "
          f"3 MPI processes, medians of {args.repeat} runs of {args.iters} iterations")
    print(f"{'variant':<22}{'bytes on the wire':>20}{'seconds':>12}")
    for name in ("cast on send", "transfer", "then cast"):
        print(f"{name:<22}{wire[name]:>20}{med[name]:>12.4f}")
    ttc = med["transfer"] + med["then cast"]
    print(f"{'transfer-then-cast':<22}{wire['transfer'] + wire['then cast']:>20}{ttc:>12.4f}")
    for name in ("with scales", "with MX scales"):
        print(f"{name:<22}{wire[name]:>20}{med[name]:>12.4f}")
    print(f"cast on send / transfer-then-cast: bytes {wire['cast on send'] / wire['transfer']:.2f}, "
          f"time {med['cast on send'] / ttc:.2f}")
    for name in ("with scales", "with MX scales"):
        print(f"{name} / cast on send: bytes {wire[name] / wire['cast on send']:.3f}, "
              f"time {med[name] / med['cast on send']:.2f}")
    print("caveat: the processes share one machine; messages are shared-memory copies")


if __name__ == "__main__":
    main()
