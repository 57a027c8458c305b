#!/usr/bin/env bash
# Fuzzes the plan decoder and the spec parser for a fixed short time each
# (libFuzzer, clang, ASan+UBSan), run by scripts/test.sh after ctest.
#   RESHARD_FUZZ_SECONDS  seconds per target (default 20); longer runs on
#   demand, e.g. RESHARD_FUZZ_SECONDS=600 bash scripts/test-fuzz.sh
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${RESHARD_FUZZ_SECONDS:-20}
B=build/fuzz
# Warnings are enforced by the gcc builds; the CUDA backend is not fuzzed.
CC=clang CXX=clang++ cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRESHARD_FUZZ=ON \
  -DRESHARD_WERROR=OFF -DRESHARD_CUDA=OFF -DRESHARD_BENCH=OFF >/dev/null
cmake --build $B -j "${JOBS:-$(nproc)}" --target fuzz_plan_decode fuzz_spec_parse
for target in plan_decode spec_parse; do
  corpus=$B/tests/fuzz/${target%%_*}_corpus
  log=$B/fuzz_$target.log
  [[ -d $corpus ]] || die "no seed corpus $corpus (built by the fuzz_$target target)"
  echo "-- fuzz_$target: ${SECONDS_PER_TARGET}s from $(ls "$corpus" | wc -l) seeds"
  if ! "$B/tests/fuzz/fuzz_$target" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 "$corpus" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz_$target found a failure (log: $log)" >&2
    exit 1
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)" "$log" || true
done
