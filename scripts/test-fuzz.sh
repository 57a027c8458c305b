#!/usr/bin/env bash
# Fuzzes the plan decoder, the spec parser, the C ABI's spec and plan
# entry points (random option structs) and edited plans with recomputed
# digests executed against the oracle (plan_attack) for a fixed short time each
# (libFuzzer, clang, ASan+UBSan), run by scripts/test.sh after ctest. Starts
# from the build's seeds and the corpus kept in tests/fuzz/corpus/ (left
# unchanged: new inputs go to work/ in the build). Longer runs that also grow
# the kept corpus: scripts/fuzz-long.sh.
#   RESHARD_FUZZ_SECONDS  seconds per target (default 20)
# Each target fuzzes on one core: up to JOBS (default: the core count)
# targets run at once, so on 2 cores the 4 targets take 2 x 20 s, not 4 x 20.
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
source scripts/lib/fuzz.sh
SECONDS_PER_TARGET=${RESHARD_FUZZ_SECONDS:-20}
PARALLEL=${JOBS:-$(nproc)}
fuzz_build "${FUZZ_TARGETS[@]}"

# Fuzzes one target for SECONDS_PER_TARGET, its output in its log.
fuzz_one() {
  local target=$1 seeds kept work dirs
  seeds=$(fuzz_seeds "$target")
  kept=$(fuzz_kept "$target")
  work=$FUZZ_BUILD/work/$target
  mkdir -p "$work" $FUZZ_BUILD/artifacts
  dirs=("$work" "$seeds")
  [[ -d $kept ]] && dirs+=("$kept")
  echo "-- fuzz_$target: ${SECONDS_PER_TARGET}s from $(find "${dirs[@]}" -type f | wc -l) inputs"
  "$FUZZ_BUILD/tests/fuzz/fuzz_$target" -max_total_time="$SECONDS_PER_TARGET" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix=$FUZZ_BUILD/artifacts/ "${dirs[@]}" >"$FUZZ_BUILD/fuzz_$target.log" 2>&1
}

for target in "${FUZZ_TARGETS[@]}"; do
  [[ -d $(fuzz_seeds "$target") ]] || die "no seed corpus $(fuzz_seeds "$target") (built with fuzz_$target)"
done
# In groups of PARALLEL; every target of a group is waited for and
# reported, the first failure ends the script after its group.
failed=()
for ((i = 0; i < ${#FUZZ_TARGETS[@]}; i += PARALLEL)); do
  group=("${FUZZ_TARGETS[@]:i:PARALLEL}")
  pids=()
  for target in "${group[@]}"; do
    fuzz_one "$target" &
    pids+=($!)
  done
  for k in "${!group[@]}"; do
    target=${group[k]}
    log=$FUZZ_BUILD/fuzz_$target.log
    if wait "${pids[k]}"; then
      echo "-- fuzz_$target:"
      grep -E "^stat::(number_of_executed_units|peak_rss_mb)" "$log" || true
    else
      tail -40 "$log"
      echo "fuzz_$target found a failure (log: $log, input in $FUZZ_BUILD/artifacts/)" >&2
      failed+=("$target")
    fi
  done
  ((${#failed[@]} == 0)) || exit 1
done
