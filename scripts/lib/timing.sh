# Sourced by scripts/test.sh: each phase's duration, and the slowest tests
# of each ctest run, printed as a table when the script ends (also when a
# phase fails, so a red run still says where its time went).
#   phase NAME COMMAND...   runs COMMAND under the heading "== NAME" and
#                           records how long it took
#   ctest_timed NAME ARGS...  `ctest ARGS` as a phase, its log kept so that
#                           the table can list the slowest tests
RESHARD_TIMING_T0=$(date +%s)
RESHARD_TIMING_ROWS=()
RESHARD_TIMING_LOGS=()
RESHARD_TIMING_DIR=$(mktemp -d)

phase() {
  local name=$1 t0 rc=0
  shift
  echo "== $name"
  t0=$(date +%s)
  "$@" || rc=$?
  RESHARD_TIMING_ROWS+=("$(($(date +%s) - t0))|$name|$([[ $rc == 0 ]] && echo ok || echo "FAILED ($rc)")")
  return "$rc"
}

ctest_timed() {
  local name=$1 log
  shift
  log=$RESHARD_TIMING_DIR/ctest.${#RESHARD_TIMING_LOGS[@]}.log
  RESHARD_TIMING_LOGS+=("$name|$log")
  # ctest's own lines "N/M Test #K: NAME ....   Passed   12.34 sec" are kept.
  phase "$name" bash -o pipefail -c 'ctest "$@" 2>&1 | tee "$0"' "$log" "$@"
}

timing_report() {
  local total=$(($(date +%s) - RESHARD_TIMING_T0)) row entry name log
  echo
  echo "== timing (seconds; nproc $(nproc))"
  printf '%8s  %s\n' seconds phase
  for row in "${RESHARD_TIMING_ROWS[@]}"; do
    IFS='|' read -r secs name status <<<"$row"
    printf '%8s  %s%s\n' "$secs" "$name" "$([[ $status == ok ]] || echo "  [$status]")"
  done
  printf '%8s  %s\n' "$total" "total"
  for entry in "${RESHARD_TIMING_LOGS[@]}"; do
    IFS='|' read -r name log <<<"$entry"
    [[ -s $log ]] || continue
    echo "-- slowest tests of $name"
    sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9]+\.[0-9]+) sec$/\2 \1/p' "$log" |
      sort -rn | awk 'NR <= 12 {printf "%8.1f  %s\n", $1, $2}'
  done
  if command -v ccache >/dev/null && [[ -n ${CCACHE_BASEDIR:-} ]]; then
    echo "-- compiler cache ($(ccache -k cache_dir 2>/dev/null || echo ccache))"
    ccache --print-stats 2>/dev/null | awk -F'\t' '/^(direct_cache_hit|preprocessed_cache_hit|cache_miss)\t/{printf "%8s  %s\n", $2, $1}' || true
  fi
  rm -rf "$RESHARD_TIMING_DIR"
}
trap timing_report EXIT
