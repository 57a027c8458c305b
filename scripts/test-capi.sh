#!/usr/bin/env bash
# C ABI checks beyond ctest (run by scripts/test.sh after ctest):
#  1. ABI baseline: the ABI of libreshard.so (abidw) against the committed
#     capi/abi/libreshard.abi (abidiff). Any difference fails: an incompatible
#     one always, a compatible one (an appended function or struct field)
#     until the baseline is updated on purpose (docs/c-api.md):
#       RESHARD_ABI_UPDATE=1 bash scripts/test-capi.sh
#  2. Install into a temporary prefix (component reshard; the library file
#     named after the C ABI version, its SONAME the ABI major), then build and
#     run examples/c against it with pkg-config, and examples/c + examples/cpp
#     with find_package; and a plain `cmake --install` of every component,
#     which skips what was not built (e.g. the CUDA backend).
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

# The file is named after the C ABI: libreshard.so.<major>.<minor>.0, SONAME
# libreshard.so.<major> (docs/c-api.md).
abi_major=$(sed -nE 's/^#define RESHARD_ABI_MAJOR +([0-9]+).*/\1/p' capi/include/reshard/reshard.h)
abi_minor=$(sed -nE 's/^#define RESHARD_ABI_MINOR +([0-9]+).*/\1/p' capi/include/reshard/reshard.h)
libfile=$(find "$prefix" -name "libreshard.so.$abi_major.$abi_minor.0" -print -quit)
[[ -n $libfile && -f $libfile ]] || { echo "no libreshard.so.$abi_major.$abi_minor.0 installed:" $(find "$prefix" -name 'libreshard.so*') >&2; exit 1; }
soname=$(objdump -p "$libfile" | awk '$1 == "SONAME" {print $2}')
[[ $soname == "libreshard.so.$abi_major" ]] || { echo "$libfile: SONAME $soname, expected libreshard.so.$abi_major" >&2; exit 1; }
echo "   $(basename "$libfile"), SONAME $soname (C ABI $abi_major.$abi_minor)"

echo "-- cmake --install of every component (those whose targets were not built are skipped)"
cmake --install "$BUILD" --prefix "$tmp/all" >"$tmp/install-all.log" 2>&1 ||
  { cat "$tmp/install-all.log"; echo "cmake --install $BUILD failed" >&2; exit 1; }
echo "   $(cd "$tmp/all" && find . -name 'libreshard*.so*' -o -name reshard -type f | sort | tr '\n' ' ')"

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
