"""reshard: plan and execute the resharding of tensors between device meshes.

Python binding over the stable C ABI of ``libreshard.so.1`` (loaded through
``reshard_get_api``; see docs/python.md in the repository)::

    import reshard
    p = reshard.plan({"meshes": {...}, "tensors": [...]})   # dict, JSON text or path
    p.stats["network_bytes"], p.fingerprint, p.tensors
    src = p.scatter({"w": w})            # or your own buffers, one per entry
    dst = p.allocate("dst")
    reshard.execute(p, src, dst)
    run = reshard.prepare(p, src, dst)   # the same buffers again and again:
    run()                                # checked and converted once

Executors: ``Executor`` (host), ``MPIExecutor``, and for CUDA memory
``CudaLocalExecutor`` (one process, its GPUs) and ``NcclExecutor`` (one GPU
per process). Adapters: :mod:`reshard.jax` (``jax.Array`` pytrees and
``NamedSharding``) and :mod:`reshard.torch` (DTensor placements, DeviceMesh).
"""
from ._ffi import (ABI_VERSION, HEADER_ABI_VERSION, LIBRARY_PATH, CorruptError, InternalError,
                   InvalidArgumentError, MismatchError, OutOfRangeError, ParseError, ReshardError,
                   ReshardMemoryError, ReshardOverflowError, ReshardTimeoutError,
                   ResourceExhaustedError, TransportError, UnsupportedError)
from ._ffi import api as _api, ffi as _ffi_mod
from ._core import (SCRATCH_ENTRY, Entry, Executor, Flat, FlatTensor, Layout, MPIExecutor, Plan,
                    PreparedExecution, Tensor, dtype_name, execute, numpy_dtype, plan, prepare,
                    spec_fingerprint, transport_available, verify_bytes)
from ._cuda import CudaLocalExecutor, NcclExecutor, nccl_unique_id

__version__: str = _ffi_mod.string(_api.version()).decode()
"""The library's release version (``reshard_version()``)."""

__all__ = [
    "ABI_VERSION", "HEADER_ABI_VERSION", "LIBRARY_PATH", "SCRATCH_ENTRY", "__version__",
    "plan", "execute", "prepare", "PreparedExecution", "Plan", "Tensor", "Layout", "Entry", "Flat", "FlatTensor",
    "Executor", "MPIExecutor",
    "CudaLocalExecutor", "NcclExecutor", "nccl_unique_id",
    "spec_fingerprint", "verify_bytes", "transport_available", "dtype_name", "numpy_dtype",
    "ReshardError", "InvalidArgumentError", "OutOfRangeError", "ReshardOverflowError",
    "MismatchError", "ParseError", "CorruptError", "UnsupportedError", "ReshardTimeoutError",
    "TransportError", "ReshardMemoryError", "InternalError", "ResourceExhaustedError",
]
