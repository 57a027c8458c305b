#!/usr/bin/env bash
# Fuzzes the plan decoder, the spec parser, the C ABI's spec and plan
# entry points (random option structs) and edited plans with recomputed
# digests executed against the oracle (plan_attack) for a fixed short time each
# (libFuzzer, clang, ASan+UBSan), run by scripts/test.sh after ctest. Starts
# from the build's seeds and the corpus kept in tests/fuzz/corpus/ (left
# unchanged: new inputs go to build/fuzz/work/). Longer runs that also grow
# the kept corpus: scripts/fuzz-long.sh.
#   RESHARD_FUZZ_SECONDS  seconds per target (default 20)
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
source scripts/lib/fuzz.sh
SECONDS_PER_TARGET=${RESHARD_FUZZ_SECONDS:-20}
fuzz_build "${FUZZ_TARGETS[@]}"
for target in "${FUZZ_TARGETS[@]}"; do
  seeds=$(fuzz_seeds "$target")
  kept=$(fuzz_kept "$target")
  work=$FUZZ_BUILD/work/$target
  log=$FUZZ_BUILD/fuzz_$target.log
  [[ -d $seeds ]] || die "no seed corpus $seeds (built with fuzz_$target)"
  mkdir -p "$work" $FUZZ_BUILD/artifacts
  dirs=("$work" "$seeds")
  [[ -d $kept ]] && dirs+=("$kept")
  echo "-- fuzz_$target: ${SECONDS_PER_TARGET}s from $(find "${dirs[@]}" -type f | wc -l) inputs"
  if ! "$FUZZ_BUILD/tests/fuzz/fuzz_$target" -max_total_time="$SECONDS_PER_TARGET" \
      -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix=$FUZZ_BUILD/artifacts/ "${dirs[@]}" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz_$target found a failure (log: $log, input in $FUZZ_BUILD/artifacts/)" >&2
    exit 1
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)" "$log" || true
done
