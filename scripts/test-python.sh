#!/usr/bin/env bash
# The Python package (bindings/python, docs/python.md), run by scripts/test.sh:
#   - a virtual environment build/python-venv from Debian's python3 (python3-venv,
#     installed by scripts/deps.sh), with the pinned packages of
#     bindings/python/requirements-test.txt from PyPI (about 150 MB of wheels on
#     a fresh machine; nothing is downloaded once they are installed);
#   - `pip install ./bindings/python`: scikit-build-core runs the repository's
#     CMake and bundles libreshard.so.1, the MPI backend and the headers into
#     the package (its own build tree, bindings/python/build, is reused);
#   - pytest from outside the source tree, so that the installed package is
#     what runs, without LD_LIBRARY_PATH or RESHARD_LIBRARY: the core API,
#     error paths, DLPack, reshard.jax against jax.device_put on 8 CPU devices,
#     and 2-process MPI runs (core API, and JAX across two jax.distributed
#     processes);
#   - a wheel built from the same tree, and the glibc symbol versions it needs.
# PyTorch is not installed here: reshard.torch's tests are scripts/test-torch.sh.
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)
bash scripts/deps.sh
VENV=$ROOT/build/python-venv
PY=/usr/bin/python3
[[ -x $PY ]] || PY=$(command -v python3)
if [[ ! -x $VENV/bin/python ]]; then
  echo "-- venv $VENV"
  "$PY" -m venv "$VENV"
fi
echo "-- pinned test dependencies (bindings/python/requirements-test.txt)"
"$VENV/bin/pip" install -q --disable-pip-version-check -r bindings/python/requirements-test.txt

echo "-- pip install ./bindings/python (builds libreshard with CMake)"
EXTRA=()
if command -v ccache >/dev/null; then
  EXTRA=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache --config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
fi
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "$VENV/bin/pip" install -q --disable-pip-version-check \
  --no-build-isolation --no-deps --force-reinstall "${EXTRA[@]}" ./bindings/python

echo "-- pytest (installed package, no LD_LIBRARY_PATH)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(
  cd "$TMP"
  unset LD_LIBRARY_PATH RESHARD_LIBRARY RESHARD_INCLUDE_DIR RESHARD_BACKEND_DIR PYTHONPATH
  "$VENV/bin/python" -c "
import reshard, sys
assert reshard.LIBRARY_PATH.startswith(sys.prefix), reshard.LIBRARY_PATH
print('reshard', reshard.__version__, 'C ABI %d.%d' % reshard.ABI_VERSION, 'from', reshard.LIBRARY_PATH)"
  XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider -W error::pytest.PytestUnraisableExceptionWarning \
    --rootdir "$ROOT/bindings/python" "$ROOT/bindings/python/tests"
)

echo "-- wheel"
rm -rf build/python-wheel
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "$VENV/bin/pip" wheel -q --disable-pip-version-check \
  --no-build-isolation --no-deps "${EXTRA[@]}" -w build/python-wheel ./bindings/python
WHEEL=$(ls build/python-wheel/reshard-*.whl)
"$VENV/bin/python" - "$WHEEL" "$TMP/w" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = set(z.namelist())
need = ["reshard/_lib/libreshard.so.1", "reshard/_lib/libreshard_mpi.so.1",
        "reshard/_include/reshard/reshard.h", "reshard/py.typed"]
missing = [n for n in need if n not in names]
assert not missing, f"{sys.argv[1]} lacks {missing}"
z.extractall(sys.argv[2], [n for n in names if n.startswith("reshard/_lib/")])
PY
GLIBC=$(objdump -T "$TMP"/w/reshard/_lib/*.so.1 | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "$(basename "$WHEEL"): needs $GLIBC (and the libstdc++ of the build machine: $(objdump -T "$TMP"/w/reshard/_lib/libreshard.so.1 | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1))"
echo "-- python: done in $(( $(date +%s) - start )) s"
