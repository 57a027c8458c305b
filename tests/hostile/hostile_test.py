#!/usr/bin/env python3
"""The hostile inputs of issue 15, one ctest test per row: each input must be
answered cleanly (success, or an error naming the cause) within 60 s under a
4 GiB address-space cap, never a crash, a hang or std::bad_alloc.

Usage: hostile_test.py RESHARD_BINARY CASE      (one row)
       hostile_test.py RESHARD_BINARY --table   (every row, a Markdown table)
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
CAP = 4 << 30      # bytes of address space
LIMIT = 60.0       # seconds
TMP = tempfile.mkdtemp(prefix="reshard-hostile-")
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cap():
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


def spec_file(name, doc):
    return write(name, json.dumps(doc, separators=(",", ":")))


class Outcome:
    def __init__(self, rc, out, err, seconds):
        self.rc, self.out, self.err, self.seconds = rc, out, err, seconds

    def summary(self):
        last = self.err.strip().splitlines()[-1] if self.err.strip() else "(no stderr)"
        return "exit %s in %.1f s: %s" % (self.rc, self.seconds, last[:200])


def run(*args, limit=LIMIT):
    t0 = time.monotonic()
    try:
        p = subprocess.run([BIN, *args], capture_output=True, timeout=limit, preexec_fn=cap)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or b"", e.stderr or b""
    return Outcome(rc, out.decode(errors="replace"), err.decode(errors="replace"),
                   time.monotonic() - t0)


def clean(o, *, ok_codes=(0, 1, 2), needles=()):
    """A clean answer: an expected exit code, the needles in stderr (on an
    error), no crash text, and within the time limit."""
    problems = []
    if o.rc not in ok_codes:
        problems.append("exit %s" % o.rc)
    for bad in ("bad_alloc", "terminate called", "Segmentation", "Aborted", "internal error"):
        if bad in o.err:
            problems.append("stderr mentions %r" % bad)
    if o.rc not in (0, "timeout"):
        for n in needles:
            if n not in o.err:
                problems.append("stderr lacks %r" % n)
    if len(o.err) > 64 << 10:
        problems.append("%d bytes of stderr" % len(o.err))
    return problems


# ------------------------------------------------------------------ the rows

def mesh(n, name="x"):
    return {"axis_names": [name], "shape": [n]}


def row_allgather_65536():
    # 195-byte spec: 65,536 devices all-gathering a 65,536-element tensor.
    # Refused up front from the layouts (at least 2^32 - 2^16 device pairs),
    # well within 5 s (0.6 s measured at load 10 on 2 cores); the running
    # guard used to take 20-34 s.
    doc = {"meshes": {"m": mesh(65536)},
           "tensors": [{"name": "t", "shape": [65536], "dtype": "f32",
                        "src": {"mesh": "m", "spec": ["x"]}, "dst": {"mesh": "m", "spec": []}}]}
    o = run("plan", "--spec", spec_file("allgather.json", doc), limit=5)
    return o, clean(o, ok_codes=(1,), needles=("resource_exhausted", "at least 4294901760 pairs",
                                               "coarser layout"))


def row_plan_405b_out():
    # Every part of the 405B fleet plan into one file: refused by the
    # estimate (plan bytes above 2 GiB, memory above the limit).
    big = os.path.join(SRC, "examples", "specs", "llama405b_fsdp1024_to_tp8.json")
    o = run("plan", "--spec", big, "--out", os.path.join(TMP, "big.rsplan"))
    return o, clean(o, ok_codes=(1,), needles=("resource_exhausted", "--process P"))


def row_mesh_4096x4096():
    doc = {"meshes": {"m": {"axis_names": ["a", "b"], "shape": [4096, 4096]}},
           "tensors": [{"name": "t", "shape": [4096, 4096], "dtype": "f32",
                        "src": {"mesh": "m", "spec": ["a", "b"]}, "dst": {"mesh": "m", "spec": []}}]}
    o = run("plan", "--spec", spec_file("mesh4096.json", doc))
    return o, clean(o, needles=("meshes.m.shape",))


def explicit_boxes(n):
    boxes = [{"device": i, "lo": [i], "hi": [i + 1]} for i in range(n)]
    return {"meshes": {"d": mesh(4)},
            "tensors": [{"name": "t", "shape": [n], "dtype": "f32",
                         "src": {"boxes": boxes}, "dst": {"mesh": "d", "spec": ["x"]}}]}


def row_explicit_boxes_100k():
    path = spec_file("boxes.json", explicit_boxes(100000))
    out = os.path.join(TMP, "boxes.rsplan")
    o = run("plan", "--spec", path, "--out", out)
    if o.rc == 0:
        o2 = run("verify", "--plan", out)
        o = Outcome(o2.rc, o2.out, o2.err, o.seconds + o2.seconds)
    return o, clean(o, ok_codes=(0,))


def row_small_tensors_100k():
    tensors = [{"name": "t%d" % i, "shape": [16, 4], "dtype": "f32",
                "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "b", "spec": [None, "y"]}}
               for i in range(100000)]
    doc = {"meshes": {"a": mesh(4), "b": {"axis_names": ["y"], "shape": [8],
                                          "devices": list(range(4, 12))}},
           "tensors": tensors}
    o = run("plan", "--spec", spec_file("small.json", doc))
    return o, clean(o, ok_codes=(0,))


def row_nested_arrays():
    depth = 40000
    o = run("plan", "--spec", write("nested.json", "[" * depth + "]" * depth))
    return o, clean(o, needles=("nesting depth",))


def row_gather_30000():
    n = 30000
    doc = {"meshes": {"a": mesh(n), "b": {"axis_names": ["y"], "shape": [1], "devices": [n]}},
           "tensors": [{"name": "t", "shape": [n], "dtype": "f32",
                        "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "b", "spec": []}}]}
    out = os.path.join(TMP, "gather.rsplan")
    o = run("plan", "--spec", spec_file("gather.json", doc), "--out", out)
    if o.rc == 0:
        o2 = run("verify", "--plan", out)
        o = Outcome(o2.rc, o2.out, o2.err, o.seconds + o2.seconds)
    return o, clean(o, ok_codes=(0,))


def row_dev_zero_spec():
    o = run("plan", "--spec", "/dev/zero")
    return o, clean(o, needles=("/dev/zero",))


def row_dev_zero_plan():
    o = run("verify", "--plan", "/dev/zero")
    return o, clean(o, needles=("/dev/zero",))


def small_spec():
    doc = {"meshes": {"a": {"axis_names": ["x"], "shape": [2], "processes": [0, 1]},
                      "b": {"axis_names": ["y"], "shape": [3], "devices": [2, 3, 4],
                            "processes": [1, 0, 1]}},
           "tensors": [{"name": "w", "shape": [6, 5], "dtype": "f32",
                        "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "b", "spec": [None, "y"]}}]}
    return spec_file("small2.json", doc)


def real_plan():
    out = os.path.join(TMP, "real.rsplan")
    p = subprocess.run([BIN, "plan", "--spec", small_spec(), "--out", out], capture_output=True)
    if p.returncode != 0:
        sys.exit("FAIL: planning the small spec: " + p.stderr.decode())
    return out


def row_edited_plan():
    # Single-bit edits of a real plan file (two processes, both parts): each
    # must fail to decode (an error naming --plan), or verify with every
    # element right. An edit that decodes and then moves wrong data is the
    # bug the issue found.
    path = real_plan()
    o = run("verify", "--plan", path)
    if o.rc != 0:
        return o, ["the unedited plan fails: " + o.summary()]
    with open(path, "rb") as f:
        data = f.read()
    # A third of the bytes, a different bit each time (tests/core/wire_test.cc
    # flips every bit in-process and checks the data of each accepted flip).
    accepted = 0
    edits = 0
    for i in range(0, len(data), 3):
        bit = 1 << ((i // 3) % 8)
        edits += 1
        mutated = bytearray(data)
        mutated[i] ^= bit
        m = run("verify", "--plan", write("mut.rsplan", bytes(mutated)))
        if m.rc == 0:
            accepted += 1
            continue
        problems = clean(m, ok_codes=(1, 2), needles=("--plan",))
        if "wrong elements" in m.err:
            problems.append("an edited plan decoded and moved wrong data")
        if problems:
            return m, ["byte %d bit %#x: %s" % (i, bit, m.summary())] + problems
    o.err = "%d of %d single-bit edits decoded and verified; every other edit refused\n" % (
        accepted, edits)
    return o, []


def row_nul_name():
    doc = {"meshes": {"a": mesh(2)},
           "tensors": [{"name": "w\u0000x", "shape": [4], "dtype": "f32",
                        "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "a", "spec": []}}]}
    o = run("plan", "--spec", spec_file("nul.json", doc))
    return o, clean(o, ok_codes=(1, 2), needles=("tensors[0].name",))


def row_inexact_integer():
    text = ('{"meshes":{"a":{"axis_names":["x"],"shape":[2]}},"tensors":[{"name":"t",'
            '"shape":[9007199254740993.0],"dtype":"f32","src":{"mesh":"a","spec":["x"]},'
            '"dst":{"mesh":"a","spec":[]}}]}')
    o = run("plan", "--spec", write("inexact.json", text))
    return o, clean(o, ok_codes=(1, 2), needles=("tensors[0].shape[0]",))


def row_huge_key():
    key = "k" * (16 << 20)
    o = run("plan", "--spec", write("key.json", '{"%s": 1}' % key))
    return o, clean(o, ok_codes=(1, 2))


ROWS = {
    "allgather_65536": ("195-byte spec: 65,536 devices all-gathering 65,536 elements", row_allgather_65536),
    "plan_405b_out": ("whole 405B plan, plan --out", row_plan_405b_out),
    "mesh_4096x4096": ("226-byte spec: a 4096x4096 mesh, default devices", row_mesh_4096x4096),
    "explicit_boxes_100k": ("100,000 explicit one-element boxes to 4 devices, plan --out + verify", row_explicit_boxes_100k),
    "small_tensors_100k": ("100,000 small tensors, 12 devices", row_small_tensors_100k),
    "nested_arrays": ("40 KB spec of nested JSON arrays (depth 40,000)", row_nested_arrays),
    "gather_30000": ("gather from 30,000 devices to one", row_gather_30000),
    "dev_zero_spec": ("--spec /dev/zero", row_dev_zero_spec),
    "dev_zero_plan": ("--plan /dev/zero", row_dev_zero_plan),
    "edited_plan": ("single-bit edits of a real plan file", row_edited_plan),
    "nul_name": ("a tensor name with NUL", row_nul_name),
    "inexact_integer": ("9007199254740993.0 as a shape", row_inexact_integer),
    "huge_key": ("a 16 MB key", row_huge_key),
}


def main():
    if sys.argv[2] == "--table":
        print("| input | outcome | clean |\n| --- | --- | --- |")
        failed = 0
        for name, (what, fn) in ROWS.items():
            o, problems = fn()
            failed += bool(problems)
            print("| %s | %s | %s |" % (what, o.summary().replace("|", "\\|"),
                                       "yes" if not problems else "; ".join(problems)), flush=True)
        sys.exit(1 if failed else 0)
    what, fn = ROWS[sys.argv[2]]
    o, problems = fn()
    print(what + ": " + o.summary())
    if problems:
        sys.exit("FAIL: " + what + ": " + "; ".join(problems))


main()
