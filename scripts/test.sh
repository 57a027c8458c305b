#!/usr/bin/env bash
# Builds everything and runs every test: the README's test command and what
# .ci/run calls. Idempotent; installs its own dependencies.
#   RESHARD_SKIP_ASAN=1   skip the ASan+UBSan build (faster local runs)
#   RESHARD_SKIP_TSAN=1   skip the ThreadSanitizer build of the thread tests
#   RESHARD_FUZZ_SECONDS  seconds per fuzz target (default 20)
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
bash scripts/deps.sh
JOBS=${JOBS:-$(nproc)}

echo "== build (RelWithDebInfo, -Werror)"
cmake --preset dev >/dev/null
cmake --build --preset dev -j "$JOBS"
echo "== tests"
ctest --preset dev -j "$JOBS" --timeout 900

if [[ "${RESHARD_SKIP_ASAN:-0}" != 1 ]]; then
  echo "== ASan + UBSan build and tests"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$JOBS"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --preset asan -j "$JOBS" --timeout 1800
fi

if [[ "${RESHARD_SKIP_TSAN:-0}" != 1 ]]; then
  # Only the tests of code that runs threads (tests/CMakeLists.txt, preset tsan).
  echo "== ThreadSanitizer build and the thread tests"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j "$JOBS"
  ctest --preset tsan -j "$JOBS" --timeout 900
fi

for extra in scripts/test-*.sh; do
  [[ -e "$extra" ]] || continue
  # PyTorch (about 1 GB of wheels, 2 GB installed) only when asked for.
  if [[ $extra == scripts/test-torch.sh && "${RESHARD_TEST_TORCH:-0}" != 1 ]]; then
    echo "== $extra skipped (set RESHARD_TEST_TORCH=1 to run it)"
    continue
  fi
  echo "== $extra"
  bash "$extra" || die "$extra failed (exit status $?)"
done
echo "== all tests passed"
