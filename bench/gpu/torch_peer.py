#!/usr/bin/env python3
"""The PyTorch peer of reshard's one-GPU engine benchmark: the same reshard
done the way a PyTorch user would, one slice ``copy_`` (or ``add_`` for the
later summands of a partial source) per source-destination overlap, eager
and captured in a CUDA graph, the best of the two, against reshard's time
for the same spec measured in the same run.

    bench_gpu_engine_bandwidth --spec S.json --dump S.dump.json
    python3 bench/gpu/torch_peer.py S.dump.json [more.dump.json ...]

Prints one markdown row per dump: reshard's repeated execution (median),
the peer's eager and graph times (median of --iters), and peer / reshard
(above 1: reshard is faster). Exits 77 without torch or a GPU.

The peer picks one source replica per distinct (summand, box), as a user
would, and accumulates partial sums in the tensor's dtype (the usual
eager PyTorch loop; reshard accumulates bf16 in f32, which reads and writes
no more memory).
"""
import argparse
import json
import statistics
import sys

try:
    import torch
except ImportError:  # pragma: no cover
    print("torch_peer: torch is not installed: skipped")
    sys.exit(77)

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
          "f64": torch.float64, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8,
          "i8": torch.int8, "i16": torch.int16}


def overlap(a, b):
    lo = [max(x, y) for x, y in zip(a[0], b[0])]
    hi = [min(x, y) for x, y in zip(a[1], b[1])]
    return None if any(l >= h for l, h in zip(lo, hi)) else (lo, hi)


def local(box, region):
    return tuple(slice(l - o, h - o) for l, h, o in zip(region[0], region[1], box[0]))


def build(dump, device):
    """Buffers and the list of slice operations, in a user's loop order."""
    ops = []
    keep = []
    for t in dump["tensors"]:
        dtype = DTYPES.get(t["dtype"])
        if dtype is None:
            raise SystemExit(f"torch_peer: dtype {t['dtype']} not mapped")
        seen = set()
        srcs = []
        for e in t["src"]:
            key = (e["summand"], tuple(map(tuple, e["box"])))
            if key in seen:
                continue  # another replica of the same shard
            seen.add(key)
            shape = [h - l for l, h in zip(*e["box"])]
            buf = (torch.randn(shape, device=device) if dtype.is_floating_point
                   else torch.randint(0, 100, shape, device=device)).to(dtype)
            srcs.append((e["summand"], e["box"], buf))
        first = min(s for s, _, _ in srcs)
        for box in t["dst"]:
            shape = [h - l for l, h in zip(*box)]
            dst = torch.empty(shape, dtype=dtype, device=device)
            keep.append(dst)
            for summand, sbox, buf in sorted(srcs, key=lambda x: x[0]):
                r = overlap(box, sbox)
                if r is None:
                    continue
                d = dst[local(box, r)]
                s = buf[local(sbox, r)]
                add = t["partial"] and summand != first
                ops.append((d, s, add))
        keep.extend(b for _, _, b in srcs)
    return ops, keep


def run(ops):
    for d, s, add in ops:
        if add:
            d.add_(s)
        else:
            d.copy_(s)


def timed(fn, iters):
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dumps", nargs="+")
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("torch_peer: no CUDA device: skipped")
        return 77
    device = torch.device("cuda", 0)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}; peer: one slice copy_/add_ "
          "per overlap, eager and CUDA graph, median of", args.iters)
    print()
    print("| case | slices | reshard ms | peer eager ms | peer graph ms | peer / reshard |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for path in args.dumps:
        with open(path) as f:
            dump = json.load(f)
        ops, keep = build(dump, device)
        run(ops)  # warm up
        torch.cuda.synchronize()
        eager = timed(lambda: run(ops), args.iters)
        graph_ms = float("nan")
        try:
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                run(ops)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                run(ops)
            g.replay()
            torch.cuda.synchronize()
            graph_ms = timed(g.replay, args.iters)
            del g
        except RuntimeError as e:  # capture can fail (memory); the eager time stands
            print(f"torch_peer: {dump['name']}: graph capture failed: {e}", file=sys.stderr)
        best = min(x for x in (eager, graph_ms) if x == x)
        print(f"| {dump['name']} | {len(ops)} | {dump['ms']:.3f} | {eager:.3f} | {graph_ms:.3f} | "
              f"{best / dump['ms']:.2f} |")
        del ops, keep
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
