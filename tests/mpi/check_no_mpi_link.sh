#!/usr/bin/env bash
# Packaging check (docs/design.md §3.6): the reshard CLI and libreshard.so must run on
# machines without MPI, CUDA or NCCL, so none of those may be a DT_NEEDED
# dependency; MPI support comes from libreshard_mpi.so.1, loaded at run time.
set -euo pipefail
status=0
for f in "$@"; do
  [[ -n "$f" ]] || continue
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  if grep -E -q '^lib(mpi|open-|cuda|cudart|nccl|pmix)' <<<"$needed"; then
    echo "FAIL: $f links $(grep -E '^lib(mpi|open-|cuda|cudart|nccl|pmix)' <<<"$needed" | tr '\n' ' ')"
    status=1
  else
    echo "ok: $f needs only: $(tr '\n' ' ' <<<"$needed")"
  fi
done
exit $status
