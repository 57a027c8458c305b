#!/usr/bin/env bash
# The Rust and Go bindings (docs/design.md §6), run by scripts/test.sh after ctest:
#   - offline toolchain (scripts/offline-deps.sh: Debian packages, the
#     FlatBuffers runtimes from Debian's source package, generated cargo
#     config and go.work — no public registry is contacted);
#   - libreshard.so and the CLI from the build directory;
#   - Go plan reader (bindings/go/reshard/fb) and Rust plan reader
#     (bindings/rust/reshard/src/plan_generated.rs) up to date with
#     schema/plan.fbs; both crates package (cargo package);
#   - cargo fmt --check, cargo test (workspace: reshard-sys, reshard, doctests),
#     cargo doc with warnings denied, the Rust example;
#   - gofmt, go vet, go test (bindings and examples/go/planserver) under
#     GODEBUG=cgocheck=2;
#   - plan bytes across languages: C, C++, Rust, Go and the HTTP planserver
#     each write plan files into one directory, every other language reads and
#     executes them, and `reshard verify --plan` checks the planserver's bytes
#     when the CLI has that option.
# RESHARD_BINDINGS_BUILD: the CMake build directory (default build/dev,
# configured with the dev preset when missing).
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)
JOBS=${JOBS:-$(nproc)}
BUILD=${RESHARD_BINDINGS_BUILD:-build/dev}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD

bash scripts/offline-deps.sh
# shellcheck source=/dev/null
source .offline/env.sh

echo "-- libreshard and the CLI ($BUILD)"
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  if [[ $BUILD == "$ROOT/build/dev" ]]; then cmake --preset dev >/dev/null; else cmake -S . -B "$BUILD" -G Ninja >/dev/null; fi
fi
targets=(reshard_capi reshard_cli)
for t in example_c_plan_and_execute example_cpp_plan_and_execute; do
  cmake --build "$BUILD" --target help 2>/dev/null | grep -q "^$t:" && targets+=("$t")
done
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >/dev/null

export RESHARD_LIB_DIR=$BUILD/capi RESHARD_INCLUDE_DIR=$ROOT/capi/include
export LD_LIBRARY_PATH=$BUILD/capi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CGO_CFLAGS="-I$ROOT/capi/include" CGO_LDFLAGS="-L$BUILD/capi -lreshard"
export GOFLAGS=-tags=reshard_no_pkgconfig
export RESHARD_CLI=$BUILD/tools/reshard
export CARGO_TARGET_DIR=$ROOT/bindings/rust/target
CARGO=(cargo --config "$RESHARD_CARGO_CONFIG")
XLANG=$(mktemp -d)
trap 'rm -rf "$XLANG"' EXIT
export RESHARD_XLANG_DIR=$XLANG

echo "-- bindings/go/reshard/fb is what flatc generates from schema/plan.fbs"
flatc --go --go-namespace fb -o "$XLANG/gen" schema/plan.fbs
if ! diff -r -x doc.go "$XLANG/gen/fb" bindings/go/reshard/fb >/dev/null; then
  diff -r -x doc.go "$XLANG/gen/fb" bindings/go/reshard/fb | head -20 || true
  echo "bindings/go/reshard/fb is stale: run 'go generate' in bindings/go/reshard and commit the result" >&2
  exit 1
fi
rm -rf "$XLANG/gen"

echo "-- bindings/rust/reshard/src/plan_generated.rs is what flatc generates from schema/plan.fbs"
bash scripts/gen-rust-plan-reader.sh "$XLANG/gen" >/dev/null
if ! diff -q "$XLANG/gen/plan_generated.rs" bindings/rust/reshard/src/plan_generated.rs >/dev/null; then
  diff "$XLANG/gen/plan_generated.rs" bindings/rust/reshard/src/plan_generated.rs | head -20 || true
  echo "bindings/rust/reshard/src/plan_generated.rs is stale: run scripts/gen-rust-plan-reader.sh and commit the result" >&2
  exit 1
fi
rm -rf "$XLANG/gen"

echo "-- cargo package: both crates, self-contained (no path outside the crate, no build-time flatc)"
# reshard depends on reshard-sys by version; offline, cargo finds the
# unpublished reshard-sys through a [patch] to its path. Each .crate is
# unpacked and built on its own (cargo's verification; the dependencies are
# already compiled in CARGO_TARGET_DIR, so a few seconds).
# One crate at a time: cargo refuses several at once when crates-io is
# replaced by a directory source.
for crate in reshard-sys reshard; do
  (cd bindings/rust && "${CARGO[@]}" --config "patch.crates-io.reshard-sys.path=\"$ROOT/bindings/rust/reshard-sys\"" \
    package -p $crate --allow-dirty -q) >"$XLANG/package.log" 2>&1 ||
    { cat "$XLANG/package.log"; echo "cargo package -p $crate failed" >&2; exit 1; }
done
for crate in reshard-sys reshard; do
  list=$(tar tzf "$CARGO_TARGET_DIR/package/$crate-0.1.0.crate")
  grep -qx "$crate-0.1.0/Cargo.toml" <<<"$list" || { echo "$crate: no Cargo.toml in the .crate" >&2; exit 1; }
  grep -qx "$crate-0.1.0/LICENSE" <<<"$list" || { echo "$crate: no LICENSE in the .crate" >&2; exit 1; }
done
grep -qx "reshard-0.1.0/src/plan_generated.rs" <<<"$list" || { echo "reshard: the .crate lacks src/plan_generated.rs" >&2; exit 1; }
if tar xzf "$CARGO_TARGET_DIR/package/reshard-0.1.0.crate" -O --wildcards 'reshard-0.1.0/src/*.rs' | grep -n 'include!(concat!(env!("OUT_DIR")\|\.\./\.\./\.\./'; then
  echo "reshard: the packaged sources read files outside the crate" >&2
  exit 1
fi
echo "   $(ls "$CARGO_TARGET_DIR"/package/*.crate | xargs -n1 basename | tr '\n' ' ')"

echo "-- plans written by C, C++ and the CLI"
[[ -x $BUILD/examples/plan_and_execute_c ]] && "$BUILD/examples/plan_and_execute_c" "$XLANG/c.rsplan" >/dev/null
[[ -x $BUILD/examples/plan_and_execute_cpp ]] && "$BUILD/examples/plan_and_execute_cpp" "$XLANG/cpp.rsplan" >/dev/null
# A plan whose messages are cut into sub-messages (required_features 128).
"$BUILD/tools/reshard" plan --spec tests/mpi/specs/psum_reduce_scatter.json --out "$XLANG/cli-subs.rsplan" >/dev/null
ls "$XLANG"

summary=()
# Sum of the N in every "test result: ok. N passed" line of a cargo log.
passed() { sed -nE 's/^test result: ok\. ([0-9]+) passed.*/\1/p' "$1" | awk '{s += $1} END {print s + 0}'; }

echo "-- Rust: fmt, test, doc, example"
(cd bindings/rust && cargo fmt --all -- --check)
(cd examples/rust && cargo fmt -- --check)
log=$XLANG/cargo-test.log
(cd bindings/rust && "${CARGO[@]}" test --workspace -j "$JOBS" 2>&1) | tee "$log" | grep -E "^(test result|error|failures:|---- )" || true
if ! grep -q "^test result" "$log" || grep -Eq "^test result: FAILED|^error(\[|:)" "$log"; then
  grep -v "^\s*Compiling" "$log" | tail -60
  echo "cargo test failed" >&2
  exit 1
fi
summary+=("rust: $(passed "$log") tests passed (incl. doctests)")
# Missing docs are compile errors (#![deny(missing_docs)]); this catches
# broken intra-doc links.
(cd bindings/rust && RUSTDOCFLAGS="-D warnings" "${CARGO[@]}" doc --workspace --no-deps -q >"$XLANG/doc.log" 2>&1) ||
  { cat "$XLANG/doc.log"; echo "cargo doc reported warnings" >&2; exit 1; }
"${CARGO[@]}" build -q --manifest-path examples/rust/Cargo.toml >"$XLANG/example.log" 2>&1 ||
  { cat "$XLANG/example.log"; echo "building examples/rust failed" >&2; exit 1; }
"$CARGO_TARGET_DIR/debug/reshard-example" "$XLANG/rust-example.rsplan"

echo "-- Go: gofmt, vet, test"
unformatted=$(gofmt -l bindings/go examples/go)
[[ -z $unformatted ]] || { echo "gofmt needed: $unformatted" >&2; exit 1; }
(cd bindings/go/reshard && go vet ./...)
(cd examples/go && go vet ./...)
log=$XLANG/go-test.log
(cd bindings/go/reshard && GODEBUG=cgocheck=2 go test -count=1 -v ./... 2>&1) >"$log" ||
  { grep -Ev "^=== RUN" "$log" | tail -60; echo "go test in bindings/go/reshard failed" >&2; exit 1; }
grep -E "^(ok|FAIL|---)" "$log" | grep -v -- "--- PASS" || true
grep -E "xlang_test|read \[" "$log" || true
gobind=$(grep -c -- "--- PASS" "$log" || true)
log=$XLANG/planserver-test.log
(cd examples/go && GODEBUG=cgocheck=2 go test -count=1 -v ./... 2>&1) >"$log" ||
  { grep -Ev "^=== RUN" "$log" | tail -60; echo "go test in examples/go failed" >&2; exit 1; }
grep -E "^(ok|FAIL)|SKIP|server_test.go" "$log" || true
summary+=("go: $gobind binding tests and $(grep -c -- "--- PASS" "$log" || true) planserver tests passed, $(grep -c -- "--- SKIP" "$log" || true) skipped")

echo "-- Go: a module outside the repository imports github.com/reshard/reshard/bindings/go/reshard"
# What a user's module does: require the package by its module path. Its own
# go.work points that path at this checkout (the release is not tagged
# anywhere this machine reaches) and the FlatBuffers runtime at Debian's.
OOT=$XLANG/consumer
mkdir -p "$OOT"
cat >"$OOT/go.mod" <<'GOMOD'
module example.com/consumer

go 1.19

require github.com/reshard/reshard/bindings/go/reshard v0.1.0
GOMOD
cat >"$OOT/main.go" <<'GOMAIN'
package main

import (
	"fmt"

	"github.com/reshard/reshard/bindings/go/reshard"
)

func main() {
	fmt.Println("reshard", reshard.Version())
}
GOMAIN
cat >"$OOT/go.work" <<GOWORK
go $(go env GOVERSION | sed -nE 's/^go([0-9]+\.[0-9]+).*/\1/p')

use (
	.
	$ROOT/bindings/go/reshard
)

replace github.com/google/flatbuffers => $RESHARD_GOFB

replace github.com/reshard/reshard/bindings/go/reshard v0.1.0 => $ROOT/bindings/go/reshard
GOWORK
(cd "$OOT" && GOWORK=$OOT/go.work go run .) || { echo "an out-of-tree module could not use the package" >&2; exit 1; }

echo "-- Rust reads what Go and the planserver wrote"
(cd bindings/rust && "${CARGO[@]}" test -q -p reshard --test cross_language -- --nocapture 2>&1) |
  grep -E "rsplan|^read|test result" || { echo "cross-language test failed" >&2; exit 1; }

echo "-- discovery through pkg-config (an installed copy, no RESHARD_LIB_DIR / CGO flags)"
# A fixed prefix: Go's build cache may keep link flags of an earlier run,
# which must still point at an existing directory.
PREFIX=$BUILD/bindings-prefix
rm -rf "$PREFIX"
cmake --install "$BUILD/capi" --prefix "$PREFIX" >/dev/null
pc=$(find "$PREFIX" -name reshard.pc -print -quit)
(
  unset RESHARD_LIB_DIR RESHARD_INCLUDE_DIR CGO_CFLAGS CGO_LDFLAGS GOFLAGS
  # Go 1.19 does not key its build cache on pkg-config's output: a package
  # built against another prefix would be linked with stale -L flags. A
  # define naming this prefix (no paths or libraries) gives a fresh key.
  CGO_CFLAGS="-g -O2 -DRESHARD_PKGCONFIG_SMOKE_$(printf %s "$PREFIX" | md5sum | cut -c1-12)"
  export CGO_CFLAGS
  PKG_CONFIG_PATH=$(dirname "$pc")
  export PKG_CONFIG_PATH
  LD_LIBRARY_PATH=$(pkg-config --variable=libdir reshard)
  export LD_LIBRARY_PATH
  (cd bindings/go/reshard && go build ./... && go run ./internal/smoke) ||
    { echo "go build with #cgo pkg-config failed" >&2; exit 1; }
  (cd bindings/rust && "${CARGO[@]}" run -q -p reshard --example smoke 2>"$XLANG/pc.log") ||
    { cat "$XLANG/pc.log"; echo "reshard-sys could not find libreshard through pkg-config" >&2; exit 1; }
)

echo "-- bindings: ${summary[*]}; $(($(date +%s) - start)) s"
