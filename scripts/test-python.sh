#!/usr/bin/env bash
# The Python package (bindings/python, docs/python.md), run by scripts/test.sh:
#   - a virtual environment build/python-venv from Debian's python3 (python3-venv,
#     installed by scripts/deps.sh), with the pinned packages of
#     bindings/python/requirements-test.txt from PyPI (about 150 MB of wheels on
#     a fresh machine; nothing is downloaded once they are installed);
#   - the wheel: `pip wheel ./bindings/python` (scikit-build-core runs the
#     repository's CMake; its build tree bindings/python/build is reused, and
#     compiles go through ccache), then `auditwheel repair` to the manylinux
#     tag the libraries' symbol versions allow (libcrypto is bundled; Open MPI
#     is not: the MPI backend must use the MPI of the machine it runs on).
#     Checked: the tag, each shared library once, the headers and py.typed;
#   - that wheel installed into build/python-venv, and pytest from outside the
#     source tree, so that the installed package is what runs, without
#     LD_LIBRARY_PATH or RESHARD_LIBRARY: the core API, error paths, DLPack,
#     reshard.jax against jax.device_put on 8 CPU devices, and 2-process MPI
#     runs (core API, and JAX across two jax.distributed processes);
#   - the same wheel in a fresh virtual environment (build/python-fresh, made
#     anew each run) with only its runtime dependencies, installed from a
#     local wheelhouse (build/python-wheelhouse, downloaded once) and no
#     compiler on PATH: bindings/python/tests/installed_smoke.py;
#   - mypy -p reshard, clean (its cache in build/python-mypy-cache);
#   - the sdist (`python -m build --sdist`): it must carry the C++ sources it
#     builds, and CMake must configure from it unpacked in an empty directory.
#     RESHARD_TEST_SDIST=1 also builds and installs it into a fresh venv and
#     runs the smoke test there (a full compile: minutes, not part of CI).
# PyTorch is not installed here: reshard.torch's tests are scripts/test-torch.sh.
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)
step_t=$start
step_name=
# step NAME: ends the previous step (prints its seconds), starts NAME.
step() {
  local now
  now=$(date +%s)
  [[ -z $step_name ]] || echo "   ($((now - step_t)) s: $step_name)"
  step_name=$1
  step_t=$now
  [[ -z $1 ]] || echo "-- $1"
}
bash scripts/deps.sh
VENV=$ROOT/build/python-venv
PY=/usr/bin/python3
[[ -x $PY ]] || PY=$(command -v python3)
if [[ ! -x $VENV/bin/python ]]; then
  echo "-- venv $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/pip" --disable-pip-version-check)
step "pinned test dependencies (bindings/python/requirements-test.txt)"
"${PIP[@]}" install -q -r bindings/python/requirements-test.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

step "mypy -p reshard (bindings/python/pyproject.toml: [tool.mypy])"
(cd bindings/python && "$VENV/bin/mypy" --cache-dir "$ROOT/build/python-mypy-cache" -p reshard)

step "wheel: pip wheel ./bindings/python (builds libreshard with CMake)"
EXTRA=()
if command -v ccache >/dev/null; then
  EXTRA=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache --config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
fi
WHEELS=$ROOT/build/python-wheel
rm -rf "$WHEELS"
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "${PIP[@]}" wheel -q --no-build-isolation --no-deps \
  "${EXTRA[@]}" -w "$WHEELS/raw" ./bindings/python
RAW=$(ls "$WHEELS"/raw/reshard-*.whl)

step "auditwheel repair $(basename "$RAW")"
# libmpi stays outside: an MPI library must match the mpirun and the network
# of the machine it runs on (mpi4py's wheels do the same).
PATH="$VENV/bin:$PATH" "$VENV/bin/auditwheel" repair -w "$WHEELS" --exclude 'libmpi.so.*' "$RAW" >"$TMP/auditwheel.log" 2>&1 ||
  { cat "$TMP/auditwheel.log"; echo "auditwheel repair failed" >&2; exit 1; }
WHEEL=$(ls "$WHEELS"/reshard-*manylinux*.whl)
"$VENV/bin/python" - "$WHEEL" <<'PY'
import collections, hashlib, sys, zipfile
path = sys.argv[1]
tag = path.rsplit("/", 1)[-1].removesuffix(".whl").split("-", 2)[2]
assert tag.startswith("py3-none-manylinux_"), f"{path}: tag {tag}, not manylinux"
z = zipfile.ZipFile(path)
names = z.namelist()
need = ["reshard/_lib/libreshard.so.1", "reshard/_lib/libreshard_mpi.so.1",
        "reshard/_include/reshard/reshard.h", "reshard/py.typed"]
missing = [n for n in need if n not in names]
assert not missing, f"{path} lacks {missing}"
libs = [n for n in names if ".so" in n.rsplit("/", 1)[-1]]
by_name = collections.Counter(n.rsplit("/", 1)[-1] for n in libs)
by_hash = collections.defaultdict(list)
for n in libs:
    by_hash[hashlib.sha256(z.read(n)).hexdigest()].append(n)
twice = [v for v in by_hash.values() if len(v) > 1] + [k for k, c in by_name.items() if c > 1]
assert not twice, f"shared libraries held more than once: {twice}"
meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
assert "License: Apache-2.0" in meta or "License-Expression: Apache-2.0" in meta, meta[:400]
assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith("/LICENSE") for n in names)
print(f"   {path.rsplit('/', 1)[-1]}: tag {tag}; {len(libs)} shared libraries, each once: "
      + ", ".join(sorted(n.split("/", 1)[1] for n in libs)))
PY

step "pip install $(basename "$WHEEL") into $VENV"
"${PIP[@]}" install -q --no-deps --force-reinstall "$WHEEL"

step "pytest (installed package, no LD_LIBRARY_PATH)"
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

# fresh_venv DIR: a new virtual environment with only reshard's runtime
# dependencies (pinned, from build/python-wheelhouse: no network once filled).
HOUSE=$ROOT/build/python-wheelhouse
fresh_venv() {
  rm -rf "$1"
  # No pip of its own (ensurepip takes seconds): the test venv's pip installs
  # into it (pip --python).
  "$PY" -m venv --without-pip "$1"
  if [[ ! -f $HOUSE/.complete ]]; then
    mapfile -t runtime < <(grep -E '^(cffi|numpy|pycparser)==' bindings/python/requirements-test.txt)
    "${PIP[@]}" download -q --only-binary :all: -d "$HOUSE" "${runtime[@]}"
    touch "$HOUSE/.complete"
  fi
  "${PIP[@]}" --python "$1/bin/python" install -q --no-compile --no-index --find-links "$HOUSE" "${@:2}"
}
# smoke VENV: installed_smoke.py with no compiler on PATH, from an empty directory.
smoke() {
  (cd "$TMP" && env -i HOME="$TMP" PATH="$1/bin" "$1/bin/python" "$ROOT/bindings/python/tests/installed_smoke.py")
}

FRESH=$ROOT/build/python-fresh
step "the wheel in a fresh venv (runtime dependencies only, no compiler on PATH)"
fresh_venv "$FRESH" "$WHEEL"
smoke "$FRESH"

step "sdist: python -m build --sdist bindings/python"
"$VENV/bin/python" -m build --sdist --no-isolation -o "$WHEELS" bindings/python >"$TMP/sdist.log" 2>&1 ||
  { cat "$TMP/sdist.log"; echo "python -m build --sdist failed" >&2; exit 1; }
SDIST=$(ls "$WHEELS"/reshard-*.tar.gz)
mkdir "$TMP/sdist"
tar xzf "$SDIST" -C "$TMP/sdist"
SRC=$(echo "$TMP"/sdist/reshard-*)
for f in pyproject.toml CMakeLists.txt LICENSE src/reshard/__init__.py reshard-src/CMakeLists.txt \
  reshard-src/capi/include/reshard/reshard.h reshard-src/schema/plan.fbs reshard-src/core/CMakeLists.txt \
  reshard-src/backends/mpi/CMakeLists.txt; do
  [[ -f $SRC/$f ]] || { echo "$(basename "$SDIST") lacks $f" >&2; exit 1; }
done
# Configure only (seconds): every CMakeLists and source the build names is there.
cmake -S "$SRC" -B "$TMP/sdist-build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$TMP/sdist-cmake.log" 2>&1 ||
  { cat "$TMP/sdist-cmake.log"; echo "CMake cannot configure the unpacked $(basename "$SDIST")" >&2; exit 1; }
grep -q "building libreshard from $SRC/reshard-src" "$TMP/sdist-cmake.log" ||
  { cat "$TMP/sdist-cmake.log"; echo "the sdist's build did not use its own reshard-src/" >&2; exit 1; }
echo "   $(basename "$SDIST"): $(tar tzf "$SDIST" | grep -c -v '/$') files, configures from an empty directory"
if [[ ${RESHARD_TEST_SDIST:-0} == 1 ]]; then
  step "RESHARD_TEST_SDIST=1: pip install $(basename "$SDIST") into a fresh venv (compiles libreshard)"
  fresh_venv "$FRESH" cffi numpy
  # An isolated build: pip fetches scikit-build-core (and CMake or Ninja if
  # the machine's are missing) from PyPI, as for any user.
  CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "${PIP[@]}" --python "$FRESH/bin/python" install -q "$SDIST"
  smoke "$FRESH"
fi

step "glibc and libstdc++ symbol versions the bundled libraries need"
"$VENV/bin/python" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("reshard/_lib/")])' "$WHEEL" "$TMP/w"
GLIBC=$(objdump -T "$TMP"/w/reshard/_lib/*.so.1 | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "   $(basename "$WHEEL"): needs $GLIBC, $(objdump -T "$TMP"/w/reshard/_lib/libreshard.so.1 | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1 || echo 'no GLIBCXX')"
step ""
echo "-- python: done in $(( $(date +%s) - start )) s"
