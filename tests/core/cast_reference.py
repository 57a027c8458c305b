#!/usr/bin/env python3
"""Reference hashes for tests/core/cast_test.cc: every cast pair of
reshard/cast.h over a fixed input set, cast by ml_dtypes (numpy's float16
for f16). Run with a Python that has numpy and ml_dtypes; paste the printed
table into cast_test.cc (kReference).

Inputs: every bit pattern of the 16- and 8-bit formats; for f32, every
k << 12 (k < 2^20: the ties and near-ties of f16 and both f8 formats), every
bf16 pattern << 16 with 0x7fff, 0x8000 and 0x8001 below it (bf16 ties), and
(i * 2654435761) mod 2^32 for i < 2^18. NaN inputs are dropped (their
payloads are the libraries' business; NaN-ness is checked in the test).
Hash: sum over i of (out[i] + 1) * ((i + 1) * 0x9E3779B97F4A7C15), mod 2^64.
"""
import numpy as np
import ml_dtypes

TYPES = {
    "f32": (np.float32, np.uint32),
    "f16": (np.float16, np.uint16),
    "bf16": (ml_dtypes.bfloat16, np.uint16),
    "f8e4m3": (ml_dtypes.float8_e4m3fn, np.uint8),
    "f8e5m2": (ml_dtypes.float8_e5m2, np.uint8),
}


def inputs(name):
    if name == "f32":
        k = np.arange(1 << 20, dtype=np.uint64) << np.uint64(12)
        b = np.arange(1 << 16, dtype=np.uint64) << np.uint64(16)
        r = (np.arange(1 << 18, dtype=np.uint64) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
        bits = np.concatenate([k, b | 0x7FFF, b | 0x8000, b | 0x8001, r]).astype(np.uint32)
    elif name in ("f16", "bf16"):
        bits = np.arange(1 << 16, dtype=np.uint16)
    else:
        bits = np.arange(1 << 8, dtype=np.uint8)
    vals = bits.view(TYPES[name][0])
    keep = ~np.isnan(vals.astype(np.float32))
    return bits[keep]


def digest(out_bits):
    v = out_bits.astype(np.uint64) + np.uint64(1)
    w = (np.arange(1, len(v) + 1, dtype=np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        return int(np.sum(v * w, dtype=np.uint64))


def main():
    for src in TYPES:
        bits = inputs(src)
        vals = bits.view(TYPES[src][0])
        for dst in TYPES:
            if src == dst:
                continue
            with np.errstate(over="ignore", invalid="ignore"):
                out = vals.astype(TYPES[dst][0]).view(TYPES[dst][1])
            print(f'    {{"{src}", "{dst}", {len(bits)}u, 0x{digest(out):016x}u}},')


if __name__ == "__main__":
    main()
