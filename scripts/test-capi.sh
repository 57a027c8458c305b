#!/usr/bin/env bash
# C ABI checks beyond ctest (run by scripts/test.sh after ctest):
#  1. ABI baseline: the ABI of libreshard.so (abidw) against the committed
#     capi/abi/libreshard.abi (abidiff). Any difference fails: an incompatible
#     one always, a compatible one (an appended function or struct field)
#     until the baseline is updated on purpose (docs/c-api.md):
#       RESHARD_ABI_UPDATE=1 bash scripts/test-capi.sh
#  2. Install into a temporary prefix, then build and run examples/c against
#     it with pkg-config, and examples/c + examples/cpp with find_package.
# RESHARD_CAPI_BUILD: the build directory to use (default build/dev, built
# with the dev preset when missing).
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
BUILD=${RESHARD_CAPI_BUILD:-build/dev}
JOBS=${JOBS:-$(nproc)}
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake --preset dev >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Only what this script uses (scripts/test.sh has built everything already).
if ! cmake --build "$BUILD" -j "$JOBS" --target reshard_capi reshard_core >"$tmp/build.log" 2>&1; then
  cat "$tmp/build.log"
  echo "building reshard_capi failed" >&2
  exit 1
fi
LIB="$BUILD/capi/libreshard.so"

echo "-- ABI: abidiff capi/abi/libreshard.abi against $LIB"
BASELINE=capi/abi/libreshard.abi
# The same options on both sides: only what capi/include/reshard declares,
# nothing that depends on paths or the build machine's layout.
ABIDW_FLAGS=(--headers-dir capi/include/reshard --drop-private-types --drop-undefined-syms
  --exported-interfaces-only --no-corpus-path --no-comp-dir-path --no-show-locs
  --type-id-style hash)
abidw "${ABIDW_FLAGS[@]}" --out-file "$tmp/current.abi" "$LIB"
if [[ "${RESHARD_ABI_UPDATE:-0}" == 1 ]]; then
  cp "$tmp/current.abi" "$BASELINE"
  echo "   baseline updated: review and commit $BASELINE"
fi
set +e
abidiff "$BASELINE" "$tmp/current.abi" >"$tmp/abidiff.txt" 2>&1
rc=$?
set -e
# abidiff exit status bits: 1 error, 2 usage error, 4 ABI change,
# 8 incompatible ABI change.
if ((rc & 3)); then
  cat "$tmp/abidiff.txt"
  echo "abidiff failed to run (exit $rc)" >&2
  exit 1
elif ((rc & 8)); then
  cat "$tmp/abidiff.txt"
  echo "INCOMPATIBLE change of the C ABI against $BASELINE (abidiff exit $rc)." >&2
  echo "Restore the old ABI; incompatible changes need a new ABI major (docs/c-api.md)." >&2
  exit 1
elif ((rc & 4)); then
  cat "$tmp/abidiff.txt"
  echo "The C ABI differs from $BASELINE (abidiff exit $rc). If the change is a" >&2
  echo "compatible addition, bump RESHARD_ABI_MINOR and update the baseline:" >&2
  echo "  RESHARD_ABI_UPDATE=1 bash scripts/test-capi.sh   (see docs/c-api.md)" >&2
  exit 1
fi
echo "   no ABI change"

echo "-- install into a temporary prefix"
prefix="$tmp/prefix"
cmake --install "$BUILD" --prefix "$prefix" --component reshard >/dev/null
for f in include/reshard/reshard.h include/reshard/plan.h; do
  [[ -f "$prefix/$f" ]] || { echo "missing $prefix/$f" >&2; exit 1; }
done

echo "-- examples/c with pkg-config"
pc=$(find "$prefix" -name reshard.pc -print -quit)
[[ -n "$pc" ]] || { echo "reshard.pc not installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
libdir=$(pkg-config --variable=libdir reshard)
[[ -f "$libdir/libreshard.so.1" ]] || { echo "pkg-config libdir $libdir has no libreshard.so.1" >&2; exit 1; }
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -pedantic examples/c/plan_and_execute.c \
  $(pkg-config --cflags --libs reshard) -o "$tmp/example_pkgconfig"
LD_LIBRARY_PATH="$libdir" "$tmp/example_pkgconfig" "$tmp/plan_pkgconfig.bin" >/dev/null
echo "   built and ran examples/c/plan_and_execute.c"

echo "-- examples/c and examples/cpp with find_package(reshard)"
if ! { cmake -S tests/capi/consumer -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix" -DRESHARD_EXAMPLES="$PWD/examples" &&
  cmake --build "$tmp/consumer" -j "$JOBS"; } >"$tmp/consumer.log" 2>&1; then
  cat "$tmp/consumer.log"
  echo "building the find_package consumer failed" >&2
  exit 1
fi
"$tmp/consumer/c_example" "$tmp/plan_c.bin" >/dev/null
"$tmp/consumer/cpp_example" "$tmp/plan_cpp.bin" >/dev/null
echo "   built and ran reshard::reshard and reshard::core consumers"
echo "-- C ABI checks passed"
