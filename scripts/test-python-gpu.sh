#!/usr/bin/env bash
# The Python package on a GPU (bindings/python/tests_gpu; docs/python.md,
# "CUDA executors"): run on a machine with a GPU after scripts/gpu-check.sh
# has built build/gpu-check (libreshard.so.1 and the CUDA backend
# libreshard_cuda.so.1). Nothing is installed or downloaded: the source
# tree's package (bindings/python/src on PYTHONPATH) over that library, with
# the machine's python3, which needs cffi, NumPy and pytest, and PyTorch with
# CUDA for most tests (JAX with CUDA for the JAX ones; each group skips with
# its reason where its framework or GPU is missing).
#   - pytest bindings/python/tests_gpu except JAX: CudaLocalExecutor on one
#     GPU holding several plan devices against the host executor (random
#     layouts, bf16 partial sums, prepared executions, a side-stream
#     producer, DLPack exporters, error messages), one-rank NCCL (reshard's
#     own communicator; torch's current stream without a host wait),
#     reshard.torch on a 1-GPU mesh with a world-1 ProcessGroupNCCL (the
#     default executor, reshard's and torch's communicators, WeightSync);
#   - pytest bindings/python/tests_gpu/test_jax_gpu.py in its own process
#     (JAX and PyTorch each load their own CUDA libraries);
#   - examples/python/torch_gpu_weight_sync.py.
# Environment (defaults in brackets): PYTHON [python3], RESHARD_GPU_CHECK_BUILD
# [build/gpu-check], RESHARD_LIBRARY [$RESHARD_GPU_CHECK_BUILD/capi/libreshard.so.1],
# RESHARD_BACKEND_DIR [$RESHARD_GPU_CHECK_BUILD/lib], RESHARD_INCLUDE_DIR
# [capi/include], GPU_TEST_TIMEOUT [150 s per pytest run], PYTEST_ARGS.
# Prints one summary line; exits non-zero when a test fails or the CUDA
# transport is unavailable (this script is for GPU machines;
# RESHARD_GPU_TESTS_ALLOW_NO_GPU=1 runs it anyway, every GPU test skipping:
# a check of the script and the skips on a machine without a GPU).
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)
PYTHON=${PYTHON:-python3}
BUILD=${RESHARD_GPU_CHECK_BUILD:-$ROOT/build/gpu-check}
export RESHARD_LIBRARY=${RESHARD_LIBRARY:-$BUILD/capi/libreshard.so.1}
export RESHARD_BACKEND_DIR=${RESHARD_BACKEND_DIR:-$BUILD/lib}
export RESHARD_INCLUDE_DIR=${RESHARD_INCLUDE_DIR:-$ROOT/capi/include}
export PYTHONPATH=$ROOT/bindings/python/src${PYTHONPATH:+:$PYTHONPATH}
export XLA_PYTHON_CLIENT_PREALLOCATE=false # JAX would take 75% of the GPU at start
unset JAX_PLATFORMS

if [[ ! -f $RESHARD_LIBRARY && -f $BUILD/build.ninja ]]; then
  echo "-- $RESHARD_LIBRARY missing: cmake --build $BUILD --target reshard_capi"
  cmake --build "$BUILD" --target reshard_capi >/dev/null
fi
[[ -f $RESHARD_LIBRARY ]] || die "$RESHARD_LIBRARY not found: run scripts/gpu-check.sh first (or set RESHARD_LIBRARY)"
NO_GPU_OK=${RESHARD_GPU_TESTS_ALLOW_NO_GPU:-0}
[[ -f $RESHARD_BACKEND_DIR/libreshard_cuda.so.1 || $NO_GPU_OK == 1 ]] ||
  die "$RESHARD_BACKEND_DIR/libreshard_cuda.so.1 not found: run scripts/gpu-check.sh first (or set RESHARD_BACKEND_DIR)"
RESHARD_LIBRARY=$(realpath "$RESHARD_LIBRARY")
RESHARD_BACKEND_DIR=$(realpath -m "$RESHARD_BACKEND_DIR")
"$PYTHON" -c "import cffi, numpy, pytest" ||
  die "$PYTHON lacks cffi, numpy or pytest (offline: put their wheels' contents on PYTHONPATH)"

echo "-- environment"
if ! "$PYTHON" - <<'EOF'; then
import sys
# torch before reshard's CUDA backend loads (it links libnccl.so.2 by soname:
# the first NCCL loaded is the process's; see docs/python.md)
try:
    import torch
    extra = ""
    if torch.cuda.is_available():
        extra = (f", NCCL {torch.cuda.nccl.version()}, {torch.cuda.device_count()} GPU(s): "
                 f"{torch.cuda.get_device_name(0)}")
    print(f"torch {torch.__version__}{extra}")
except Exception as e:  # noqa: BLE001
    print("torch not importable:", e)
try:  # JAX is imported by its own test run only (a few seconds to start)
    from importlib.metadata import version
    print("jax", version("jax"), "jaxlib", version("jaxlib"))
except Exception as e:  # noqa: BLE001
    print("jax not installed:", e)
import reshard
print(f"python {sys.version.split()[0]}; reshard {reshard.__version__} ABI {reshard.ABI_VERSION}"
      f" from {reshard.LIBRARY_PATH}")
for t in ("cuda_local", "nccl"):
    ok, why = reshard.transport_available(t)
    print(f"transport {t}: {'available' if ok else 'UNAVAILABLE: ' + why}")
ok, why = reshard.transport_available("cuda_local")
sys.exit(0 if ok else 3)
EOF
  [[ $NO_GPU_OK == 1 ]] ||
    die "the cuda_local transport is unavailable here (above); this script is for GPU machines"
fi
rc=0
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
run_pytest() { # label, pytest arguments...
  local label=$1
  shift
  echo "-- pytest: $label"
  local s=0
  # shellcheck disable=SC2086
  timeout "${GPU_TEST_TIMEOUT:-150}" "$PYTHON" -m pytest -q -p no:cacheprovider -rs \
    --rootdir "$ROOT/bindings/python" "$@" ${PYTEST_ARGS:-} 2>&1 | tee "$LOG" || s=$?
  SUMMARY+=("$label: $(grep -E '(passed|failed|skipped|error)' "$LOG" | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//' || true)")
  # 5: nothing ran (every test of the run skipped at collection, e.g. JAX
  # without a GPU backend): the summary says so, and it is not a failure.
  ((s == 0 || s == 5)) || rc=$s
}
SUMMARY=()
run_pytest "torch + core" bindings/python/tests_gpu --ignore=bindings/python/tests_gpu/test_jax_gpu.py
run_pytest "jax" bindings/python/tests_gpu/test_jax_gpu.py
if [[ -f examples/python/torch_gpu_weight_sync.py ]]; then
  echo "-- examples/python/torch_gpu_weight_sync.py"
  if timeout 60 "$PYTHON" examples/python/torch_gpu_weight_sync.py; then
    SUMMARY+=("example: ok")
  else
    rc=1
    SUMMARY+=("example: FAILED")
  fi
fi
joined=$(printf '%s; ' "${SUMMARY[@]}")
echo "python GPU tests: ${joined}$(($(date +%s) - start)) s; exit $rc"
exit "$rc"
