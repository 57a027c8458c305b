"""Run under mpirun -np 2 by test_mpi.py: the core API over the MPI executor,
each rank planning (or receiving) only its own part and holding only its shards."""
import sys

import numpy as np
from mpi4py import MPI

import reshard

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
assert comm.Get_size() == 2

SPEC = {
    "meshes": {
        "train": {"axis_names": ["dp", "tp"], "shape": [2, 2], "devices": [0, 1, 2, 3],
                  "processes": [0, 0, 1, 1]},
        "infer": {"axis_names": ["tp"], "shape": [3], "devices": [4, 5, 6],
                  "processes": [1, 0, 1]},
    },
    "tensors": [
        {"name": "w1", "shape": [10, 7], "dtype": "f32",
         "src": {"mesh": "train", "spec": ["dp", "tp"]}, "dst": {"mesh": "infer", "spec": [None, "tp"]}},
        {"name": "w2", "shape": [9], "dtype": "i64",
         "src": {"mesh": "infer", "spec": ["tp"]}, "dst": {"mesh": "train", "spec": [["tp", "dp"]]}},
        {"name": "g", "shape": [4, 6], "dtype": "f64",
         "src": {"mesh": "train", "spec": [None, "tp"], "partial": {"axes": ["dp"]}},
         "dst": {"mesh": "infer", "spec": ["tp"]}},
    ],
}

rng = np.random.default_rng(7)  # same data on every rank
glob = {"w1": rng.standard_normal((10, 7)).astype(np.float32),
        "w2": rng.integers(0, 1 << 40, 9),
        "g": rng.standard_normal((2, 4, 6))}  # two summands


def check_part(plan, ex, tag):
    t_g = plan.tensor("g")
    src = plan.scatter({"w1": glob["w1"], "w2": glob["w2"], "g": np.zeros((4, 6))}, process=rank)
    for i, e in enumerate(t_g.src.entries):  # summand s of g on its devices
        if src[t_g.index][i] is not None:
            src[t_g.index][i] = np.ascontiguousarray(glob["g"][e.summand][e.index])
    dst = plan.allocate("dst", process=rank, fill=-1)
    ex.execute(plan, src, dst)
    want = {"w1": glob["w1"], "w2": glob["w2"], "g": glob["g"][0] + glob["g"][1]}
    n = 0
    for t in plan.tensors:
        for e, b in zip(t.dst.entries, dst[t.index]):
            if b is None:
                assert plan.device_location(e.device)[0] != rank
                continue
            assert plan.device_location(e.device)[0] == rank
            assert np.allclose(b, want[t.name][e.index]), (tag, t.name, e)
            n += 1
    return n


ex = reshard.MPIExecutor(comm, timeout=60)
assert ex.info() == {"transport": "mpi", "rank": rank, "size": 2}

# 1. each rank plans its own part
mine = reshard.plan(SPEC, process=rank)
assert mine.has_part(rank) and not mine.has_part(1 - rank)
n1 = check_part(mine, ex, "own part")

# 2. rank 0 plans everything and ships each worker its bytes
if rank == 0:
    whole = reshard.plan(SPEC)
    parts = [whole.to_bytes(process=p) for p in (0, 1)]
else:
    parts = None
got = reshard.Plan.from_bytes(comm.scatter(parts, root=0))
assert got.fingerprint == mine.fingerprint
n2 = check_part(got, ex, "shipped bytes")

# 3. a rank that planned other inputs: MISMATCH on every rank, executor still
# usable. (With the default agreement, "first_use", rank 0 would not agree again
# on a plan it already ran: compare on every call.)
ex2 = reshard.MPIExecutor(comm, timeout=60, agreement="every_call")
other = dict(SPEC, tensors=SPEC["tensors"][:2]) if rank == 1 else SPEC
odd = reshard.plan(other, process=rank)
try:
    ex2.execute(odd, odd.allocate("src", process=rank), odd.allocate("dst", process=rank))
    raise SystemExit(f"rank {rank}: no MismatchError")
except reshard.MismatchError as e:
    assert e.code == 4
n3 = check_part(mine, ex2, "after mismatch")

# 4. a buffer for another process's entry is refused before any message
bad = mine.allocate("dst", process=rank)
t = mine.tensor("w1")
j = next(i for i, b in enumerate(bad[t.index]) if b is None)
bad[t.index][j] = np.empty(t.dst.entries[j].shape, np.float32)
try:
    ex.execute(mine, mine.allocate("src", process=rank), bad)
    raise SystemExit(f"rank {rank}: foreign buffer accepted")
except reshard.InvalidArgumentError as e:
    assert "not this rank" in e.message or "process" in e.message, e.message

# 5. a prepared execution over MPI: this rank's buffers bound once, new
# values written into the sources between calls.
src = mine.scatter({"w1": glob["w1"], "w2": glob["w2"], "g": np.zeros((4, 6))}, process=rank)
dst = mine.allocate("dst", process=rank, fill=-1)
n5 = 0
with ex.prepare(mine, src, dst) as run:
    for step in (1, 2):
        for t in mine.tensors:
            for e, b in zip(t.src.entries, src[t.index]):
                if b is not None:
                    v = glob["g"][e.summand] if t.name == "g" else glob[t.name]
                    b[...] = v[e.index] * step
        run()
        want = {"w1": glob["w1"] * step, "w2": glob["w2"] * step,
                "g": (glob["g"][0] + glob["g"][1]) * step}
        for t in mine.tensors:
            for e, b in zip(t.dst.entries, dst[t.index]):
                if b is not None:
                    assert np.allclose(b, want[t.name][e.index]), ("prepared", step, t.name, e)
                    n5 += 1
comm.Barrier()
print(f"rank {rank}: OK ({n1} + {n2} + {n3} + {n5} local destination shards checked)", flush=True)
sys.stdout.flush()
