#!/usr/bin/env bash
# Sets up the offline Rust and Go toolchain for the bindings (docs/design.md §6):
# no public Rust or Go registry is reachable here, so
#  - Debian packages provide flatc, Go, a Rust toolchain (below) and the
#    crates smallvec, bitflags and thiserror (as librust-*-dev under
#    /usr/share/cargo/registry);
#  - the FlatBuffers Rust and Go runtimes come from Debian's `flatbuffers`
#    source package (apt-get source, after adding a deb-src entry for the
#    Debian mirror apt already uses: scripts/apt-sources.sh);
#  - cargo reaches them through a generated config (source replacement of
#    crates.io by the Debian directory registry + [patch.crates-io] for
#    flatbuffers), Go through a generated go.work with a `replace`.
# Nothing committed changes: Cargo.toml and go.mod stay standard and build
# against the public registries elsewhere.
#
# Rust: the crates declare rust-version 1.77. A rustup toolchain (on PATH or
# in ~/.cargo/bin) is used when there is one. Otherwise Debian's: Debian
# 12's `cargo` and `rustc` packages are 1.63, too old, but Debian 12 also
# ships the toolchain its Firefox and Chromium builds use, cargo-web,
# rustc-web and rustfmt-web (1.85 in bookworm, newer through
# bookworm-security), which install /usr/bin/cargo, rustc, rustdoc and
# rustfmt; they replace Debian's old `cargo`/`rustc` when those are installed.
#
# Idempotent: a second run touches no network. Writes only under .offline/
# (and, once, /etc/apt/sources.list.d/reshard-deb-src.sources):
#   .offline/cargo-config.toml   pass as `cargo --config .offline/cargo-config.toml`
#   .offline/go.work             use with GOWORK=$PWD/.offline/go.work
#   .offline/env.sh              `source` it: exports the above + GOFLAGS etc.
# RESHARD_APT_ROOT: the root whose etc/apt is read and written (default /;
# scripts/test-setup.sh runs this script against fake roots).
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
ROOT=$PWD
OFF=$ROOT/.offline
mkdir -p "$OFF"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || die "not root and no sudo: run as root to install packages"
  SUDO="sudo"
fi
RUST_MIN_MINOR=77

# ---------------------------------------------------------------- packages
PACKAGES=(flatbuffers-compiler golang-go pkg-config gcc dpkg-dev
  librust-smallvec-dev librust-bitflags-dev librust-thiserror-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The Rust toolchain (see the top): rustup's when present, else Debian's *-web.
if ! command -v cargo >/dev/null && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
DEBIAN_RUST=(cargo-web rustc-web rustfmt-web)
rust_minor() { cargo --version 2>/dev/null | sed -nE 's/^cargo 1\.([0-9]+).*/\1/p'; }
if ! command -v cargo >/dev/null; then
  missing+=("${DEBIAN_RUST[@]}")
else
  cargo_bin=$(command -v cargo)
  minor=$(rust_minor)
  if dpkg-query -S "$(readlink -f "$cargo_bin")" >/dev/null 2>&1; then
    # Debian's: too old (Debian 12's `cargo`) or without rustfmt.
    if [[ -z $minor ]] || ((minor < RUST_MIN_MINOR)); then
      echo "offline-deps: $cargo_bin ($(cargo --version)) is older than the Rust 1.$RUST_MIN_MINOR" \
        "the bindings need; replacing it with Debian's ${DEBIAN_RUST[*]}"
      missing+=("${DEBIAN_RUST[@]}")
    elif ! cargo fmt --version >/dev/null 2>&1; then
      missing+=(rustfmt-web)
    fi
  else
    # rustup's (or a hand-installed) toolchain: not ours to replace.
    if [[ -z $minor ]] || ((minor < RUST_MIN_MINOR)); then
      die "$cargo_bin ($(cargo --version 2>&1 | head -1)) is older than the Rust 1.$RUST_MIN_MINOR the" \
        "bindings need: update it (rustup update stable), or take it off PATH to use Debian's cargo-web"
    fi
    cargo fmt --version >/dev/null 2>&1 ||
      die "$cargo_bin has no rustfmt (cargo fmt): rustup component add rustfmt"
  fi
fi

updated=0
apt_update() {
  if ((updated == 0)); then
    $SUDO apt-get update -qq
    updated=1
  fi
}
if ((${#missing[@]})); then
  echo "offline-deps: installing ${missing[*]}"
  apt_update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
minor=$(rust_minor)
[[ -n $minor ]] && ((minor >= RUST_MIN_MINOR)) ||
  die "$(command -v cargo || echo cargo) ($(cargo --version 2>&1 | head -1)) is not the Rust" \
    ">= 1.$RUST_MIN_MINOR the bindings need"

# ------------------------------------------- FlatBuffers Rust and Go runtimes
FB_VERSION=$(dpkg-query -W -f='${Version}' flatbuffers-compiler) # e.g. 2.0.8+dfsg1-2
FB_UPSTREAM=${FB_VERSION%-*}                                      # 2.0.8+dfsg1
SRC=$OFF/src/flatbuffers-$FB_UPSTREAM
if [[ ! -f "$SRC/rust/flatbuffers/Cargo.toml" || ! -d "$SRC/go" ]]; then
  if ! apt-get source --print-uris -qq "flatbuffers=$FB_VERSION" >/dev/null 2>&1; then
    # No deb-src entry yet: add one for the Debian mirror and suites in use.
    list=${RESHARD_APT_ROOT:-}
    list=${list%/}/etc/apt/sources.list.d/reshard-deb-src.sources
    entry=$(bash scripts/apt-sources.sh deb-src)
    echo "offline-deps: adding a deb-src entry ($list):"
    sed 's/^/  /' <<<"$entry"
    $SUDO mkdir -p "${list%/*}"
    $SUDO tee "$list" <<<"$entry" >/dev/null
    updated=0
    apt_update
  fi
  echo "offline-deps: apt-get source flatbuffers=$FB_VERSION"
  rm -rf "$OFF/src" && mkdir -p "$OFF/src"
  if ! (cd "$OFF/src" && apt-get source -qq "flatbuffers=$FB_VERSION" >/dev/null 2>&1); then
    echo "offline-deps: flatbuffers=$FB_VERSION has no source package; trying the newest"
    (cd "$OFF/src" && apt-get source -qq flatbuffers >/dev/null)
  fi
  SRC=$(find "$OFF/src" -maxdepth 1 -type d -name 'flatbuffers-*' | head -1)
fi
[[ -f "$SRC/rust/flatbuffers/Cargo.toml" ]] || die "no rust/flatbuffers in ${SRC:-$OFF/src} (apt-get source flatbuffers)"
[[ -d "$SRC/go" ]] || die "no go/ in $SRC (apt-get source flatbuffers)"

# Go: a module root for github.com/google/flatbuffers (upstream has no go.mod
# at 2.0.8, so the public module is v2.0.8+incompatible with a synthesized
# one). The runtime package is its go/ directory.
GOFB=$OFF/go-flatbuffers
if [[ ! -f "$GOFB/go/lib.go" ]]; then
  rm -rf "$GOFB" && mkdir -p "$GOFB"
  cp -r "$SRC/go" "$GOFB/go"
fi
printf 'module github.com/google/flatbuffers\n' >"$GOFB/go.mod"

# ------------------------------------------------------------- cargo config
cat >"$OFF/cargo-config.toml" <<TOML
# Generated by scripts/offline-deps.sh: offline sources for cargo.
[source.crates-io]
replace-with = "debian"

[source.debian]
directory = "/usr/share/cargo/registry"

[patch.crates-io]
flatbuffers = { path = "$SRC/rust/flatbuffers" }

[net]
offline = true
TOML

# ------------------------------------------------------------------ go.work
GOVER=$(go env GOVERSION | sed -nE 's/^go([0-9]+\.[0-9]+).*/\1/p')
[[ -n $GOVER ]] || die "cannot read the Go version from 'go env GOVERSION' ($(go env GOVERSION 2>&1))"
cat >"$OFF/go.work" <<GOWORK
// Generated by scripts/offline-deps.sh: the bindings and examples with the
// FlatBuffers runtime from Debian's source package.
go $GOVER

use (
	$ROOT/bindings/go/reshard
	$ROOT/examples/go
)

replace github.com/google/flatbuffers => $GOFB

// Go 1.19 looks up a required version even of a workspace module (go.work).
replace github.com/reshard/reshard/bindings/go/reshard v0.1.0 => $ROOT/bindings/go/reshard
GOWORK

cat >"$OFF/env.sh" <<ENV
# Generated by scripts/offline-deps.sh; source it.
export PATH="\$HOME/.cargo/bin:\$PATH"
export RESHARD_CARGO_CONFIG="$OFF/cargo-config.toml"
export GOWORK="$OFF/go.work" RESHARD_GOFB="$GOFB"
export GOPROXY=off GOSUMDB=off GONOSUMDB='*' GOFLAGS= GOTOOLCHAIN=local
export GOPATH="$OFF/gopath" GOMODCACHE="$OFF/gopath/pkg/mod"
ENV
echo "offline-deps: ready (.offline/cargo-config.toml, .offline/go.work, .offline/env.sh)"
