#!/usr/bin/env bash
# Builds everything and runs every test: the README's test command and what
# .ci/run calls. Idempotent; installs its own dependencies. Prints each
# phase's duration and each ctest run's slowest tests at the end
# (scripts/lib/timing.sh); compiles through ccache (scripts/lib/ccache.sh).
#   RESHARD_SKIP_ASAN=1   skip the ASan+UBSan build (faster local runs)
#   RESHARD_SKIP_TSAN=1   skip the ThreadSanitizer build of the thread tests
#   RESHARD_FUZZ_SECONDS  seconds per fuzz target (default 20)
#   RESHARD_CCACHE=0      compile without ccache
# Test sizes: the dev build runs the full random case counts; the sanitizer
# builds run a fraction of them, set by one knob, the CMake cache variable
# RESHARD_TEST_SCALE (percent; CMakePresets.json: asan 10, tsan 10).
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
source scripts/lib/timing.sh
phase deps bash scripts/deps.sh
source scripts/lib/ccache.sh
JOBS=${JOBS:-$(nproc)}

build() {
  cmake --preset "$1" >/dev/null
  cmake --build --preset "$1" -j "$JOBS"
}

phase "dev build (RelWithDebInfo, -Werror)" build dev
ctest_timed "dev tests" --preset dev -j "$JOBS" --timeout 900

if [[ "${RESHARD_SKIP_ASAN:-0}" != 1 ]]; then
  phase "ASan + UBSan build" build asan
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest_timed "ASan + UBSan tests" --preset asan -j "$JOBS" --timeout 1800
  # The asan preset's build holds the fuzz targets too (scripts/lib/fuzz.sh).
  export RESHARD_FUZZ_BUILD=build/asan
fi

if [[ "${RESHARD_SKIP_TSAN:-0}" != 1 ]]; then
  # Only the tests of code that runs threads (tests/CMakeLists.txt, preset tsan).
  phase "ThreadSanitizer build (the thread tests)" build tsan
  ctest_timed "ThreadSanitizer tests" --preset tsan -j "$JOBS" --timeout 900
fi

for extra in scripts/test-*.sh; do
  [[ -e "$extra" ]] || continue
  # PyTorch (about 1 GB of wheels, 2 GB installed) only when asked for.
  if [[ $extra == scripts/test-torch.sh && "${RESHARD_TEST_TORCH:-0}" != 1 ]]; then
    echo "== $extra skipped (set RESHARD_TEST_TORCH=1 to run it)"
    continue
  fi
  # The Python package on a GPU: scripts/gpu-check.sh runs it where there is one.
  if [[ $extra == scripts/test-python-gpu.sh ]]; then
    echo "== $extra skipped (GPU machines: scripts/gpu-check.sh runs it)"
    continue
  fi
  phase "$extra" bash "$extra" || die "$extra failed (exit status $?)"
done
echo "== all tests passed"
