#!/usr/bin/env bash
# Fuzzes every fuzz target (or those named) for SECONDS each, then merges
# what was found into the corpus kept in the repository,
# tests/fuzz/corpus/<target>/, minimised (libFuzzer -merge=1: the smallest
# inputs that keep the coverage) and capped in size. Commit the corpus
# afterwards; scripts/test-fuzz.sh starts from it.
#   scripts/fuzz-long.sh [SECONDS] [TARGET ...]    (default 600 s; targets:
#   plan_decode spec_parse capi_plan plan_attack)
# plan_attack (the attacker's model of issue 37: edited parts, recomputed
# digests, executed against the oracle) is worth a long run of its own:
#   nice scripts/fuzz-long.sh 1800 plan_attack
#   RESHARD_FUZZ_MAX_LEN  largest input kept (default 4096 bytes)
# Exit status 1 when a target crashed (the input is in build/fuzz/artifacts/).
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
source scripts/lib/fuzz.sh
SECONDS_PER_TARGET=${1:-600}
shift || true
targets=("$@")
((${#targets[@]})) || targets=("${FUZZ_TARGETS[@]}")
MAX_LEN=${RESHARD_FUZZ_MAX_LEN:-4096}
fuzz_build "${targets[@]}"
failed=0
for target in "${targets[@]}"; do
  bin=$FUZZ_BUILD/tests/fuzz/fuzz_$target
  seeds=$(fuzz_seeds "$target")
  kept=$(fuzz_kept "$target")
  work=$FUZZ_BUILD/long/$target
  log=$FUZZ_BUILD/long_$target.log
  rm -rf "$work" && mkdir -p "$work" "$kept" $FUZZ_BUILD/artifacts
  echo "-- fuzz_$target: ${SECONDS_PER_TARGET}s from $(ls "$kept" | wc -l) kept inputs and $(ls "$seeds" | wc -l) seeds"
  if ! "$bin" -max_total_time="$SECONDS_PER_TARGET" -max_len="$MAX_LEN" -rss_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 -artifact_prefix=$FUZZ_BUILD/artifacts/ \
      "$work" "$kept" "$seeds" >"$log" 2>&1; then
    tail -30 "$log"
    echo "fuzz_$target found a failure (log: $log, input in $FUZZ_BUILD/artifacts/)" >&2
    failed=1
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)" "$log" || true
  # Minimise: the kept corpus, the seeds and the new inputs merged into a
  # fresh directory (inputs up to MAX_LEN bytes only).
  merged=$FUZZ_BUILD/long/$target.merged
  rm -rf "$merged" && mkdir -p "$merged"
  "$bin" -merge=1 -max_len="$MAX_LEN" -rss_limit_mb=2048 -timeout=10 "$merged" "$kept" "$work" \
    "$seeds" >"$log.merge" 2>&1 || { tail -20 "$log.merge"; failed=1; continue; }
  rm -rf "$kept" && mv "$merged" "$kept"
  echo "   kept: $(ls "$kept" | wc -l) inputs, $(du -sk "$kept" | cut -f1) KiB in $kept"
done
exit $failed
