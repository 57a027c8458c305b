#!/usr/bin/env bash
# Prints the SHA-256 of every plan the kept spec x budget cases produce, one
# line per case, so that a refactoring of the planner can show its plans
# byte-identical: run it before and after a move and diff the two outputs.
#
#   scripts/plan-digests.sh [RESHARD_BINARY] > before.txt
#   ... move code ...
#   scripts/plan-digests.sh [RESHARD_BINARY] | diff before.txt -
#
# Cases: every spec under examples/specs, bench/specs and tests/mpi/specs,
# each with unbounded staging, the spec's own budget, 64 MiB and 1 MiB, and
# the default options plus --no-single-hop-guard and --no-relays. A plan
# too large for one file is digested as the parts of processes 0 and 5.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/dev/tools/reshard}
[[ -x $bin ]] || { echo "plan-digests: no reshard binary at $bin (build first)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for spec in "$root"/examples/specs/*.json "$root"/bench/specs/*.json "$root"/tests/mpi/specs/*.json; do
  for budget in 0 spec 64MiB 1MiB; do
    for flags in "" --no-single-hop-guard --no-relays; do
      args=(plan --spec "$spec" --out "$tmp/p.rsplan")
      [[ $budget == spec ]] || args+=(--budget "$budget")
      [[ -z $flags ]] || args+=("$flags")
      name="${spec#"$root"/} budget=$budget ${flags:-default}"
      if "$bin" "${args[@]}" > "$tmp/out" 2>&1; then
        echo "$(sha256sum < "$tmp/p.rsplan" | cut -c1-16) $name"
      elif grep -q 'one process.s part per file' "$tmp/out"; then
        # Too large for one file: two processes' parts, as workers plan them.
        for p in 0 5; do
          "$bin" "${args[@]}" --process "$p" > "$tmp/out" 2>&1 || { echo "error $name process=$p"; continue; }
          echo "$(sha256sum < "$tmp/p.rsplan" | cut -c1-16) $name process=$p"
        done
      else
        echo "error($(grep -m1 error "$tmp/out" | head -c 100)) $name"
      fi
      rm -f "$tmp/p.rsplan"
    done
  done
done
