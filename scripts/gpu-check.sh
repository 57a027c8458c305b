#!/usr/bin/env bash
# Builds reshard with CUDA on a machine with a GPU (one H100/H200 is what it
# was written for), runs every GPU test and the kernel-bandwidth benchmark,
# and appends a dated results block to docs/gpu-results.md.
#
#   bash scripts/gpu-check.sh            # from the repository root
#
# What it does, in order (each step prints a "== " header):
#   1. prints the date, the host and the GPU(s) (nvidia-smi);
#   2. installs the Debian build dependencies (scripts/deps.sh; best effort:
#      a machine without network may already have them);
#   3. finds nvcc (PATH, $CUDACXX, /usr/local/cuda/bin) and configures
#      build/gpu-check (RelWithDebInfo like the dev preset, -DRESHARD_CUDA=ON,
#      warnings as errors);
#   4. builds the CUDA backend (libreshard_cuda.so.1), the GPU tests and the
#      benchmark;
#   5. runs the GPU tests: ctest -L gpu (kernels against the host box-copy
#      core for every dtype and op, the cuda local transport against
#      execute_host on random plans and on staged ones (relays, trees,
#      scratch; the MPI specs in one process), the nccl transport on one GPU
#      (staged plans through the engine too), the
#      backend loader, the CPU emulation of the kernels, the block-scale
#      rounding of reshard/quantise_grid.h on the device against the host);
#   6. runs bench_gpu_kernel_bandwidth: pack/unpack/reduce GB/s of strided
#      boxes as a ratio to cudaMemcpy device-to-device of the same bytes;
#   7. runs bench_gpu_engine_bandwidth: whole plans through reshard::Engine on
#      one GPU (a small transformer verified element by element, then a
#      7.4 GiB Llama-style FSDP -> tp=8 reshard), first and repeated
#      executions against cudaMemcpy of the same bytes;
#   8. runs bench/gpu/torch_peer.py: the specs of bench/gpu/peer_specs.py
#      through the engine (--dump) and the same reshards done the way a
#      PyTorch user would, eager and in a CUDA graph (skipped without torch);
#   9. runs scripts/test-python-gpu.sh: the Python package's CUDA executors,
#      reshard.torch and reshard.jax on the GPU;
#  10. appends date, device, versions, commit, test summary and the
#      benchmark tables to docs/gpu-results.md.
#
# Exit status: 0 when every GPU test passed and none was skipped (except
# those that need two GPUs); 1 otherwise, also on a machine without a GPU
# (then only the build and the CPU emulation are checked). The results block is written
# either way, so a failed run is recorded too.
#
# Environment: JOBS (build parallelism, default nproc), BENCH_GIB (matrix
# size of the benchmark, default 1), BENCH_ITERS (default 10),
# RESHARD_GPU_ALLOW_SKIPS=1 (do not fail on skipped tests),
# RESHARD_GPU_CHECK_BUILD (build directory, default build/gpu-check),
# RESHARD_GPU_RESULTS (file to append to, default docs/gpu-results.md),
# RESHARD_SKIP_DEPS=1 (do not run scripts/deps.sh: a machine without network
# whose dependencies are already on CMAKE_PREFIX_PATH and PATH),
# RESHARD_WERROR (ON by default; OFF for a host compiler newer than CI's, whose
# new warnings would stop the build), RESHARD_COMMIT (the commit to record
# instead of asking git, e.g. for an exported tree).
#
# Not under `set -e` on purpose: every step's status is checked and recorded,
# and a failed step still gets its results block.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
BUILD=${RESHARD_GPU_CHECK_BUILD:-$ROOT/build/gpu-check}
RESULTS=${RESHARD_GPU_RESULTS:-$ROOT/docs/gpu-results.md}
JOBS=${JOBS:-$(nproc)}
LOG_DIR=$BUILD/logs

say() { printf '\n== %s\n' "$*"; }
die() {
  echo "gpu-check: $*" >&2
  exit 1
}
mkdir -p "$LOG_DIR" || die "cannot create $LOG_DIR"

say "date and device"
DATE=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
echo "date:   $DATE"
echo "host:   $(hostname)"
HAVE_GPU=""
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L >/dev/null 2>&1 && HAVE_GPU=1
  nvidia-smi || true
  GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
    sed 's/^/  /')
else
  GPU="  (nvidia-smi not found)"
  echo "warning: nvidia-smi not found: is there a GPU and a driver?"
fi
echo "GPU(s):"
echo "$GPU"

say "dependencies (scripts/deps.sh)"
if [[ "${RESHARD_SKIP_DEPS:-0}" == 1 ]]; then
  echo "skipped (RESHARD_SKIP_DEPS=1)"
elif ! bash scripts/deps.sh; then
  echo "warning: scripts/deps.sh failed (no network?); continuing with what is installed"
fi

say "CUDA toolkit"
NVCC=${CUDACXX:-}
if [[ -z "$NVCC" ]]; then NVCC=$(command -v nvcc || true); fi
if [[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]]; then NVCC=/usr/local/cuda/bin/nvcc; fi
[[ -n "$NVCC" ]] || die "nvcc not found: install the CUDA toolkit (e.g. /usr/local/cuda) or set CUDACXX"
"$NVCC" --version | tail -2
CUDA_LIB=$(dirname "$(dirname "$NVCC")")/lib64
if ! ls "$CUDA_LIB"/libnccl.so* >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q libnccl.so; then
  echo "warning: libnccl not found next to the toolkit or on the linker path:" \
    "the nccl transport will not be built (its tests then skip and this check fails)"
fi

say "configure ($BUILD)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRESHARD_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DRESHARD_WERROR="${RESHARD_WERROR:-ON}" >"$LOG_DIR/configure.log" 2>&1 ||
  { tail -40 "$LOG_DIR/configure.log"; die "configure failed (log: $LOG_DIR/configure.log)"; }
grep -E "reshard: (NCCL|CUDA)" "$LOG_DIR/configure.log" || true

say "build"
TARGETS=(reshard_cuda gpu_test gpu_emulation_test gpu_quantise_grid_check capi_nccl_test bench_gpu_kernel_bandwidth
  bench_gpu_engine_bandwidth)
BUILD_START=$(date +%s)
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" >"$LOG_DIR/build.log" 2>&1
BUILD_STATUS=$?
BUILD_SECONDS=$(($(date +%s) - BUILD_START))
tail -20 "$LOG_DIR/build.log"
WARNINGS=$(grep -c "warning:" "$LOG_DIR/build.log" || true)
[[ $BUILD_STATUS -eq 0 ]] || die "build failed (log: $LOG_DIR/build.log)"
echo "built in ${BUILD_SECONDS}s, ${WARNINGS} compiler warnings (log: $LOG_DIR/build.log)"

say "GPU tests (ctest -L gpu)"
ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout "${RESHARD_GPU_TEST_TIMEOUT:-900}" -V >"$LOG_DIR/ctest.log" 2>&1
TEST_STATUS=$?
# "100% tests passed out of 25" (CMake 4) or "96% tests passed, 1 tests failed out of 25".
SUMMARY=$(grep -E "tests passed(, [0-9]+ tests failed)? out of [0-9]+" "$LOG_DIR/ctest.log" | tail -1)
echo "${SUMMARY:-no ctest summary (see $LOG_DIR/ctest.log)}"
TOTAL=$(grep -oE "out of [0-9]+" <<<"$SUMMARY" | grep -oE "[0-9]+" || echo "?")
FAILED=$(grep -oE "[0-9]+ tests failed" <<<"$SUMMARY" | grep -oE "^[0-9]+" ||
  { [[ -n "$SUMMARY" ]] && echo 0; } || echo "?")
SKIPPED_LIST=$(grep -E "^\s+[0-9]+ - .*\(Skipped\)" "$LOG_DIR/ctest.log" | sed -E 's/^\s+[0-9]+ - ([^ ]+).*/\1/' | sort -u)
FAILED_LIST=$(sed -n '/The following tests FAILED/,$p' "$LOG_DIR/ctest.log" | grep -E "^\s+[0-9]+ - " | sed -E 's/^\s+[0-9]+ - //')
VERIFIED=$(grep -hoE "[0-9]+ plans verified, [0-9]+ of them with bf16 partial sums[^)]*\)" "$LOG_DIR/ctest.log" | head -1)
STAGED=$(grep -hoE "[0-9]+ spec plans and [0-9]+ random plans verified in stages.*" "$LOG_DIR/ctest.log" | head -1)
STAGED_NCCL=$(grep -hoE "[0-9]+ staged plans verified over nccl.*" "$LOG_DIR/ctest.log" | head -1)
BACKEND=$(grep -hoE "backend: CUDA runtime.*" "$LOG_DIR/ctest.log" | head -1 | sed 's/^backend: //')
[[ -n "$FAILED_LIST" ]] && printf 'failed:\n%s\n' "$FAILED_LIST"
UNEXPECTED_SKIPS=$(grep -vE "TwoGpus" <<<"$SKIPPED_LIST" | sed '/^$/d')
echo "skipped: ${SKIPPED_LIST:-none}"
[[ -n "$VERIFIED" ]] && echo "random plans: $VERIFIED"
[[ -n "$STAGED" ]] && echo "staged plans, cuda local: $STAGED"
[[ -n "$STAGED_NCCL" ]] && echo "staged plans, nccl: $STAGED_NCCL"

say "kernel bandwidth (bench_gpu_kernel_bandwidth)"
RESHARD_BACKEND_DIR="$BUILD/lib" "$BUILD/bench/gpu/bench_gpu_kernel_bandwidth" --gib "${BENCH_GIB:-1}" --iters "${BENCH_ITERS:-10}" \
  >"$LOG_DIR/bench.log" 2>&1
BENCH_STATUS=$?
cat "$LOG_DIR/bench.log"

say "end to end on one GPU (bench_gpu_engine_bandwidth)"
# A small transformer verified element by element, then a Llama-style model
# (4 layers, hidden 8192, MLP 28672, bf16; about 7.4 GiB) from FSDP over 8
# logical devices to tp=8 on the same devices, all on GPU 0.
ENGINE_SPEC=$BUILD/fsdp8_to_tp8.json
python3 scripts/gen_transformer_spec.py --layers 4 --hidden 8192 --kv 1024 --mlp 28672 \
  --vocab 32000 --train-devices 8 --infer-devices 8 --tp 8 --per-host 8 --out "$ENGINE_SPEC" ||
  echo "gpu-check: scripts/gen_transformer_spec.py failed: the 7.4 GiB engine run below has no spec and fails" >&2
{
  RESHARD_BACKEND_DIR="$BUILD/lib" "$BUILD/bench/gpu/bench_gpu_engine_bandwidth" \
    --spec examples/specs/small_transformer.json --iters 20 --verify &&
    echo &&
    RESHARD_BACKEND_DIR="$BUILD/lib" "$BUILD/bench/gpu/bench_gpu_engine_bandwidth" \
      --spec "$ENGINE_SPEC" --iters "${BENCH_ITERS:-10}"
} >"$LOG_DIR/engine.log" 2>&1
ENGINE_STATUS=$?
cat "$LOG_DIR/engine.log"

say "PyTorch peer (bench/gpu/torch_peer.py)"
# The same reshards done the way a PyTorch user would (one slice copy_/add_
# per overlap, eager and in a CUDA graph), against the engine's repeated
# execution measured just before in the same run. Skipped without torch.
PEER_DIR=$BUILD/peer
PEER_STATUS=0
if python3 -c "import torch" 2>/dev/null; then
  rm -rf "$PEER_DIR"
  DUMPS=()
  for spec in $(python3 bench/gpu/peer_specs.py "$PEER_DIR"); do
    dump=${spec%.json}.dump.json
    RESHARD_BACKEND_DIR="$BUILD/lib" "$BUILD/bench/gpu/bench_gpu_engine_bandwidth" --spec "$spec" \
      --iters "${BENCH_ITERS:-10}" --dump "$dump" >>"$LOG_DIR/peer-engine.log" 2>&1 || PEER_STATUS=1
    [[ -f $dump ]] && DUMPS+=("$dump")
  done
  ((${#DUMPS[@]})) && { python3 bench/gpu/torch_peer.py --iters "${BENCH_ITERS:-10}" "${DUMPS[@]}" \
    >"$LOG_DIR/peer.log" 2>&1 || PEER_STATUS=1; }
  cat "$LOG_DIR/peer.log"
else
  echo "torch not importable: skipped" | tee "$LOG_DIR/peer.log"
fi

say "Python package on the GPU (scripts/test-python-gpu.sh)"
bash scripts/test-python-gpu.sh >"$LOG_DIR/python-gpu.log" 2>&1
PYTHON_STATUS=$?
tail -25 "$LOG_DIR/python-gpu.log"

STATUS=0
VERDICT="passed"
if [[ -z "$HAVE_GPU" ]]; then
  STATUS=1
  VERDICT="NO GPU (built; GPU tests skipped, only the CPU emulation ran)"
elif [[ $TEST_STATUS -ne 0 || $BENCH_STATUS -ne 0 || $ENGINE_STATUS -ne 0 || $PEER_STATUS -ne 0 ||
  $PYTHON_STATUS -ne 0 ]]; then
  STATUS=1
  VERDICT="FAILED"
elif [[ -n "$UNEXPECTED_SKIPS" && "${RESHARD_GPU_ALLOW_SKIPS:-0}" != 1 ]]; then
  STATUS=1
  VERDICT="INCOMPLETE (tests skipped on a GPU machine)"
fi

say "recording results in $RESULTS"
COMMIT=${RESHARD_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
DIRTY=""
if [[ -z "${RESHARD_COMMIT:-}" ]]; then
  DIRTY=$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo " (with local changes)" || true)
fi
{
  echo
  echo "## $DATE — $VERDICT"
  echo
  echo "- host: $(hostname); commit: $COMMIT$DIRTY"
  echo "- GPU(s):"
  echo "$GPU" | sed 's/^  /  - /'
  echo "- toolkit: $("$NVCC" --version | tail -1); backend: ${BACKEND:-unknown}"
  echo "- host compiler: $(${CXX:-c++} --version 2>/dev/null | head -1)"
  echo "- build (RelWithDebInfo, sm_90 + compute_90 PTX, warnings as errors: ${RESHARD_WERROR:-ON}):" \
    "${BUILD_SECONDS}s with $JOBS jobs, $WARNINGS compiler warnings"
  echo "- GPU tests (ctest -L gpu): $TOTAL run, $FAILED failed; skipped: $(tr '\n' ' ' <<<"${SKIPPED_LIST:-none}")"
  [[ -n "$FAILED_LIST" ]] && echo "- failed: $(tr '\n' ';' <<<"$FAILED_LIST")"
  [[ -n "$VERIFIED" ]] && echo "- cuda local vs execute_host: $VERIFIED"
  [[ -n "$STAGED" ]] && echo "- staged plans, cuda local vs execute_host and the oracle: $STAGED"
  [[ -n "$STAGED_NCCL" ]] && echo "- staged plans through the engine over nccl (one rank), against the oracle: $STAGED_NCCL"
  echo
  echo "Kernel bandwidth (ratio = kernel GB/s / cudaMemcpy D2D GB/s of the same bytes, same run):"
  echo
  grep -E "^(device|backend|baseline)" "$LOG_DIR/bench.log" | sed 's/^/- /'
  echo
  grep -E "^\|" "$LOG_DIR/bench.log" || echo "(no benchmark table: see the log, exit status $BENCH_STATUS)"
  echo
  echo "End to end through reshard::Engine on one GPU (ratio = bytes copied per second /"
  echo "cudaMemcpy D2D of the same bytes, same run):"
  echo
  grep -E "^(verified|spec|plan):" "$LOG_DIR/engine.log" | sed 's/^/- /'
  echo
  grep -E "^\|" "$LOG_DIR/engine.log" | awk '!seen[$0]++' || echo "(no engine table: see the log, exit status $ENGINE_STATUS)"
  echo
  echo "PyTorch peer (bench/gpu/torch_peer.py on bench/gpu/peer_specs.py's cases; peer / reshard"
  echo "above 1: reshard faster; reshard: repeated engine execution, median, same run):"
  echo
  grep -E "^torch " "$LOG_DIR/peer.log" | sed 's/^/- /'
  echo
  grep -E "^\|" "$LOG_DIR/peer.log" || echo "(no peer table: $(tail -1 "$LOG_DIR/peer.log"))"
  echo
  echo "- Python package on the GPU (scripts/test-python-gpu.sh, exit status $PYTHON_STATUS):" \
    "$(grep -E "passed|failed|skipped" "$LOG_DIR/python-gpu.log" | tail -1)"
} >>"$RESULTS"
echo "appended to $RESULTS"
echo "logs: $LOG_DIR"
echo
echo "gpu-check: $VERDICT"
exit $STATUS
