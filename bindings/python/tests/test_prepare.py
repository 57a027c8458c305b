"""Executor.prepare / reshard.prepare: buffers checked and converted once,
executed many times; the buffers stay alive, their contents are read anew."""
import gc
import weakref

import numpy as np
import pytest

import reshard
from test_core import DLOPEN_SPEC


def _global(p, seed):
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(t.numpy_dtype) for t in p.tensors}


@pytest.mark.parametrize("name", [None, "small_transformer.json", "explicit_boxes.json"])
@pytest.mark.parametrize("threads", [1, 2])
def test_prepared_reads_the_buffers_contents_on_every_call(root, name, threads):
    p = reshard.plan(DLOPEN_SPEC if name is None else root / "examples" / "specs" / name)
    ex = reshard.Executor(threads=threads)
    src, dst = p.scatter(_global(p, 1)), p.allocate("dst", fill=-1)
    run = ex.prepare(p, src, dst)
    assert not run.released and run.plan is p and run.executor is ex
    for step in (1, 2, 3):
        g = _global(p, step)
        # New values written into the same buffers are what the next call moves.
        for t in p.tensors:
            for b, e in zip(src[t.index], t.src.entries):
                b[...] = g[t.name][e.index]
        for row in dst:
            for b in row:
                b.fill(-1)
        run.execute() if step % 2 else run()
        want = p.allocate("dst", fill=-2)  # an unprepared execution into other buffers
        reshard.execute(p, src, want, executor=ex)
        for t in p.tensors:
            for a, b in zip(dst[t.index], want[t.index]):
                assert np.array_equal(a, b), (step, t.name)
        out = p.gather(dst)
        for t in p.tensors:
            if t.src.num_summands == 1:  # partial sums: every summand holds g here
                assert np.array_equal(out[t.name], g[t.name]), (step, t.name)
    run.release()


def test_prepared_keeps_its_buffers_alive_until_released():
    p = reshard.plan(DLOPEN_SPEC)
    g = _global(p, 3)["w"]
    src, dst = p.scatter({"w": g}), p.allocate("dst", fill=-1)
    refs = [weakref.ref(b) for row in src + dst for b in row]
    keep_dst = [list(dst[0])]  # to read the result; a copy of the row list, same arrays
    run = reshard.prepare(p, src, dst)
    del src, dst
    keep_refs = [weakref.ref(b) for b in keep_dst[0]]
    del keep_dst[0][:]
    gc.collect()
    assert all(r() is not None for r in refs), "a bound buffer was freed"
    run.execute()
    out = np.concatenate([r() for r in keep_refs])
    assert np.array_equal(out, g)
    run.release()
    gc.collect()
    assert all(r() is None for r in refs), "release() kept buffers alive"
    with pytest.raises(reshard.InvalidArgumentError, match="released"):
        run.execute()
    run.release()  # idempotent
    assert run.released and "released" in repr(run)


def test_prepared_checks_buffers_like_execute():
    p = reshard.plan(DLOPEN_SPEC)
    src, dst = p.scatter({"w": np.zeros((6, 10))}), p.allocate("dst")
    src[0][3] = src[0][3].astype(np.float32)
    with pytest.raises(reshard.InvalidArgumentError, match=r"sources\['w'\]\[3\]: dtype float32 given"):
        reshard.prepare(p, src, dst)
    src, dst = p.scatter({"w": np.zeros((6, 10))}), p.allocate("dst")
    dst[0][1] = np.empty((2, 10))
    with pytest.raises(reshard.InvalidArgumentError, match=r"destinations\['w'\]\[1\]: shape \(2, 10\)"):
        reshard.prepare(p, src, dst)
    src, dst = p.scatter({"w": np.zeros((6, 10))}), p.allocate("dst")
    dst[0][0].flags.writeable = False
    with pytest.raises(reshard.InvalidArgumentError, match="read-only"):
        reshard.prepare(p, src, dst)
    src, dst = p.scatter({"w": np.zeros((6, 10))}), p.allocate("dst")
    dst[0][0] = np.zeros((6, 20))[:3, ::2]
    with pytest.raises(reshard.InvalidArgumentError, match="not C-contiguous"):
        reshard.prepare(p, src, dst)
    src, dst = p.scatter({"w": np.zeros((6, 10))}), p.allocate("dst")
    src[0][2] = None  # a missing source entry: the library names it when executing
    run = reshard.prepare(p, src, dst)
    with pytest.raises(reshard.InvalidArgumentError, match=r"buffers\[0\]\.src\[2\]"):
        run()


class Exporter:
    """A DLPack exporter of an array that nothing but the export keeps."""

    def __init__(self, values):
        self.values = values
        self.exported = None

    def __dlpack__(self, **kw):
        a = np.array(self.values)
        self.exported = weakref.ref(a)
        return a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)


def test_prepared_holds_dlpack_exports_until_released():
    p = reshard.plan(DLOPEN_SPEC)
    g = _global(p, 4)["w"]
    t = p.tensors[0]
    ex = [Exporter(g[e.index]) for e in t.src.entries]
    dst = p.allocate("dst", fill=-1)
    with reshard.prepare(p, [ex], dst) as run:
        gc.collect()
        assert all(x.exported() is not None for x in ex), "an export was released early"
        run()
        assert np.array_equal(p.gather(dst)["w"], g)
    gc.collect()
    assert all(x.exported() is None for x in ex), "DLPack exports not released"
    # Collected without release(): the exports go with it.
    run = reshard.prepare(p, [ex], dst)
    assert all(x.exported() is not None for x in ex)
    del run
    gc.collect()
    assert all(x.exported() is None for x in ex)


def test_unprepared_execute_fast_path_and_fallback_agree():
    """NumPy arrays take a fast path in the conversion; every other buffer
    (and any array failing a check) the general one. Mixed in one call."""
    import array
    p = reshard.plan(DLOPEN_SPEC)
    g = _global(p, 5)["w"]
    t = p.tensors[0]
    src = [[np.ascontiguousarray(g[e.index]) if i % 3 == 0 else
            memoryview(np.ascontiguousarray(g[e.index])) if i % 3 == 1 else
            array.array("d", np.ascontiguousarray(g[e.index]).ravel().tobytes()) and
            bytearray(np.ascontiguousarray(g[e.index]).tobytes())
            for i, e in enumerate(t.src.entries)]]
    dst = p.allocate("dst", fill=-1)
    reshard.execute(p, src, dst)
    assert np.array_equal(p.gather(dst)["w"], g)


# A child process: a thread executes a prepared execution in a loop whose
# buffers only the prepared execution holds, while the main thread releases
# it. Before the fix release() freed the address table (and the buffers)
# under the running execution: a segfault, 3 runs of 3.
_RELEASE_RACE = r"""
import sys, threading, time
import reshard
spec = {"meshes": {"a": {"axis_names": ["x"], "shape": [4]},
                   "b": {"axis_names": ["y"], "shape": [4], "devices": [4, 5, 6, 7]}},
        "tensors": [{"name": "w", "shape": [2048, 1024], "dtype": "f32",
                     "src": {"mesh": "a", "spec": ["x"]},
                     "dst": {"mesh": "b", "spec": [None, "y"]}}]}
p = reshard.plan(spec)
for attempt in range(int(sys.argv[1])):
    # Buffers referenced by the prepared execution only.
    run = reshard.Executor(threads=1).prepare(p, p.allocate("src", fill=1), p.allocate("dst"))
    state = {"runs": 0, "raised": None}
    started = threading.Event()
    def loop():
        try:
            while True:
                started.set()
                run.execute()
                state["runs"] += 1
        except reshard.InvalidArgumentError as e:
            state["raised"] = str(e)
    t = threading.Thread(target=loop)
    t.start()
    started.wait()
    time.sleep(0.002 * (attempt % 5))
    run.release()          # waits for the execution in flight
    assert run.released
    t.join()
    assert state["raised"] is not None and "released" in state["raised"], state
    try:
        run.execute()
        raise SystemExit("execute after release did not raise")
    except reshard.InvalidArgumentError as e:
        assert "released" in str(e)
    run.release()          # idempotent
print("ok")
"""


def test_release_during_execute_on_another_thread_waits_not_crashes(tmp_path):
    """Regression (issue 37): PreparedExecution.release() on one thread while
    another thread is inside execute() segfaulted; release now waits for the
    execution in flight and later executions raise InvalidArgumentError."""
    import os
    import subprocess
    import sys
    script = tmp_path / "race.py"
    script.write_text(_RELEASE_RACE)
    r = subprocess.run([sys.executable, str(script), "20"], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ))
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-4000:])
    assert r.stdout.strip().endswith("ok")
