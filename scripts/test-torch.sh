#!/usr/bin/env bash
# reshard.torch (bindings/python/src/reshard/torch.py, docs/python.md), run by
# scripts/test.sh only with RESHARD_TEST_TORCH=1, because PyTorch is heavy:
#   - a virtual environment build/torch-venv from Debian's python3 with the
#     pinned packages of bindings/python/requirements-torch.txt, and torch
#     2.15.0 from PyPI. PyPI's Linux torch wheel (514 MB) depends on about
#     2.5 GB of CUDA wheels; this machine kind has CUDA 13 under /usr/local,
#     so the script installs the wheel with --no-deps plus the four CUDA
#     libraries torch loads at import that /usr/local lacks (NCCL 2.30,
#     NVSHMEM, cuSPARSELt, cuFile: about 520 MB more), about 1.05 GB of
#     downloads in all, 1.9 GB installed. Where `import torch` still fails (no
#     CUDA 13 on the machine) it falls back to the full `pip install
#     torch==2.15.0`. Nothing is downloaded once installed.
#   - `pip install ./bindings/python` (the same CMake build as test-python.sh);
#   - pytest from outside the source tree on bindings/python/tests_torch:
#     layouts against DTensor's own shard arithmetic on random meshes and
#     placements (a fake process group, one process), and 4 MPI processes
#     with a gloo process group: values equal to DTensor.redistribute on one
#     mesh, and moves across meshes checked element by element.
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)
bash scripts/deps.sh
VENV=$ROOT/build/torch-venv
PY=/usr/bin/python3
[[ -x $PY ]] || PY=$(command -v python3)
if [[ ! -x $VENV/bin/python ]]; then
  echo "-- venv $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check)
echo "-- pinned test dependencies (bindings/python/requirements-torch.txt)"
"${PIP[@]}" -r bindings/python/requirements-torch.txt
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "-- torch 2.15.0 without its CUDA wheels, and the CUDA libraries /usr/local lacks"
  "${PIP[@]}" --no-deps torch==2.15.0 nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.7.2 \
    nvidia-cusparselt-cu13==0.8.1 nvidia-cufile==1.17.1.22
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    echo "-- import torch failed (no CUDA 13 here?): the full torch==2.15.0 with its CUDA wheels"
    "${PIP[@]}" torch==2.15.0
  fi
fi
"$VENV/bin/python" -c "import torch; print('torch', torch.__version__)"
echo "-- pip install ./bindings/python (builds libreshard with CMake)"
EXTRA=()
if command -v ccache >/dev/null; then
  EXTRA=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache --config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
fi
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "${PIP[@]}" --no-build-isolation --no-deps \
  --force-reinstall "${EXTRA[@]}" ./bindings/python

echo "-- pytest (installed package, no LD_LIBRARY_PATH)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(
  cd "$TMP"
  unset LD_LIBRARY_PATH RESHARD_LIBRARY RESHARD_INCLUDE_DIR RESHARD_BACKEND_DIR PYTHONPATH
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider -W error::pytest.PytestUnraisableExceptionWarning \
    --rootdir "$ROOT/bindings/python" "$ROOT/bindings/python/tests_torch"
)
echo "-- torch: $(du -sh "$VENV" | cut -f1) in $VENV; done in $(( $(date +%s) - start )) s"
