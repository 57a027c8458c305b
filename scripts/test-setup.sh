#!/usr/bin/env bash
# The install scripts' decisions, checked against fake roots in a temporary
# directory (no network, nothing outside it is touched, a few seconds); run
# by scripts/test.sh after ctest.
#  1. scripts/apt-sources.sh on apt layouts: only deb822 .sources (Debian
#     12), only sources.list (older systems), both, neither, commented-out
#     and "Enabled: no" entries, a security-only mirror, third-party
#     repositories, one-line options, another release: the mirror chosen,
#     the deb-src paragraph, the exit status and the message.
#  2. scripts/offline-deps.sh and scripts/deps.sh with stand-ins for apt-get,
#     dpkg-query, cargo and go on PATH (they record what they are asked and
#     "install" by creating files): which packages they install (Debian 12's
#     cargo-web/rustc-web/rustfmt-web when there is no Rust >= 1.77), the
#     deb-src file written into the fake /etc/apt, the refusals and their
#     messages, the second run touching nothing.
#  3. scripts/lib/strict.sh: a failing command is named with its script,
#     line and exit status (a grep of a missing /etc/apt/sources.list once
#     ended scripts/test.sh silently).
# Ends with "setup: N passed, M failed"; exit status 1 when any failed.
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
REPO=$PWD
T=$(mktemp -d)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$T"' EXIT
passed=0
failed=0
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

ok() {
  passed=$((passed + 1))
  echo "  ok    $1"
}
not_ok() {
  failed=$((failed + 1))
  echo "  FAIL  $1"
  shift
  printf '        %s\n' "$@"
}
# expect NAME EXPECTED ACTUAL
expect() {
  if [[ $2 == "$3" ]]; then ok "$1"; else not_ok "$1" "expected: $(printf %q "$2")" "got:      $(printf %q "$3")"; fi
}
# expect_has NAME NEEDLE HAYSTACK
expect_has() {
  if [[ $3 == *"$2"* ]]; then ok "$1"; else not_ok "$1" "expected to contain: $2" "got: $3"; fi
}
# expect_lacks NAME NEEDLE HAYSTACK
expect_lacks() {
  if [[ $3 != *"$2"* ]]; then ok "$1"; else not_ok "$1" "expected not to contain: $2" "got: $3"; fi
}
# content FILE: the file's text, or "(no FILE)".
content() { if [[ -f $1 ]]; then cat "$1"; else echo "(no $1)"; fi; }
# run CMD...: sets RC, OUT, ERR (never trips the ERR trap or set -e).
run() {
  "$@" >"$T/out" 2>"$T/err" && RC=0 || RC=$?
  OUT=$(<"$T/out")
  ERR=$(<"$T/err")
}

# ------------------------------------------------------------------ 1. apt layouts
# root NAME [CODENAME]: a fake root with etc/os-release and an empty etc/apt.
root() {
  R=$T/roots/$1
  mkdir -p "$R/etc/apt"
  [[ ${2-bookworm} == none ]] || printf 'PRETTY_NAME="Debian"\nVERSION_CODENAME=%s\n' "${2-bookworm}" >"$R/etc/os-release"
}
sources_d() { mkdir -p "$R/etc/apt/sources.list.d" && cat >"$R/etc/apt/sources.list.d/$1"; }
sources_list() { cat >"$R/etc/apt/sources.list"; }
apt_sources() { run env RESHARD_APT_ROOT="$R" bash "$REPO/scripts/apt-sources.sh" "$@"; }
debsrc() { printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' "$1" "$2" "${3:-$KEYRING}"; }

# What this machine's image and a Debian 12 install have: deb822 only.
DEBIAN12_SOURCES="Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: $KEYRING

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: $KEYRING"

echo "-- apt-sources.sh: only sources.list.d/debian.sources (Debian 12)"
root only-sources
sources_d debian.sources <<<"$DEBIAN12_SOURCES"
apt_sources mirror
expect "mirror: status" 0 "$RC"
expect "mirror: the main archive, not debian-security" http://deb.debian.org/debian "$OUT"
apt_sources deb-src
expect "deb-src: status" 0 "$RC"
expect "deb-src: the entry's URI, suites and key" "$(debsrc http://deb.debian.org/debian "bookworm bookworm-updates")" "$OUT"
expect "deb-src: nothing on stderr" "" "$ERR"
apt_sources entries
expect "entries: both paragraphs" 2 "$(grep -c . <<<"$OUT")"

echo "-- apt-sources.sh: only /etc/apt/sources.list (one-line format)"
root only-list
sources_list <<'EOF'
# deb cdrom:[Debian GNU/Linux 12.5.0 _Bookworm_ - Official amd64 DVD Binary-1]/ bookworm contrib main
#deb http://commented.example.org/debian bookworm main
deb http://ftp.de.debian.org/debian/ bookworm main non-free-firmware  # trailing comment
deb-src http://ftp.de.debian.org/debian/ bookworm main
deb http://security.debian.org/debian-security bookworm-security main
EOF
apt_sources mirror
expect "mirror: status" 0 "$RC"
expect "mirror: the uncommented entry" http://ftp.de.debian.org/debian/ "$OUT"
apt_sources deb-src
expect "deb-src: Debian's keyring when the entry names none" "$(debsrc http://ftp.de.debian.org/debian/ bookworm)" "$OUT"

echo "-- apt-sources.sh: both, in apt's order (sources.list first)"
root both
sources_d debian.sources <<<"$DEBIAN12_SOURCES"
sources_list <<<"deb http://mirror.example.net/debian bookworm main contrib"
apt_sources mirror
expect "mirror: sources.list's entry" http://mirror.example.net/debian "$OUT"
root both-list-commented
sources_d debian.sources <<<"$DEBIAN12_SOURCES"
sources_list <<'EOF'
# See sources.list(5) and /etc/apt/sources.list.d/debian.sources
#deb http://deb.debian.org/old/debian bookworm main
EOF
apt_sources mirror
expect "mirror: .sources when sources.list is all comments" http://deb.debian.org/debian "$OUT"

echo "-- apt-sources.sh: neither"
root neither
apt_sources mirror
expect "mirror: status 1" 1 "$RC"
expect "mirror: no output" "" "$OUT"
expect_has "mirror: says what it looked for" "no enabled Debian archive entry (type deb, suite bookworm, component main)" "$ERR"
expect_has "mirror: says nothing was there to read" "neither sources.list nor sources.list.d" "$ERR"
apt_sources deb-src
expect "deb-src: status 0" 0 "$RC"
expect "deb-src: deb.debian.org" "$(debsrc http://deb.debian.org/debian bookworm)" "$OUT"
expect_has "deb-src: says it falls back" "using http://deb.debian.org/debian" "$ERR"
root neither-empty-dir
mkdir -p "$R/etc/apt/sources.list.d"
apt_sources mirror
expect "mirror: status 1 with an empty sources.list.d" 1 "$RC"

echo "-- apt-sources.sh: disabled entries and other files"
root disabled
sources_d 00-off.sources <<'EOF'
Types: deb
URIs: http://disabled.example.org/debian
Suites: bookworm
Components: main
Enabled: no

# Types: deb
# URIs: http://commented.example.org/debian
# Suites: bookworm
# Components: main
EOF
sources_d 01-farm.list.disabled-by-farm <<<"deb http://renamed.example.org/debian bookworm main"
sources_d 02-docker.list <<<"deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.gpg] https://download.docker.com/linux/debian bookworm stable"
sources_d 03-node.sources <<'EOF'
Types: deb
URIs: https://deb.nodesource.com/node_20.x
Suites: nodistro
Components: main
EOF
sources_d 10-debian.sources <<'EOF'
Types: deb deb-src
URIs: http://mirror.one.example/debian
 http://mirror.two.example/debian
Suites: bookworm
 bookworm-updates
Components: main contrib
Signed-By: /etc/apt/keyrings/local-mirror.gpg
EOF
apt_sources mirror
expect "mirror: skips Enabled: no, comments, other file names, third-party suites/components" \
  http://mirror.one.example/debian "$OUT"
apt_sources deb-src
expect "deb-src: multi-line URIs and Suites, the entry's Signed-By" \
  "$(debsrc http://mirror.one.example/debian "bookworm bookworm-updates" /etc/apt/keyrings/local-mirror.gpg)" "$OUT"
apt_sources entries
expect_lacks "entries: no disabled or renamed entry" example.org "$OUT"
expect "entries: 2 types x 2 URIs + docker + node" 6 "$(grep -c . <<<"$OUT")"

echo "-- apt-sources.sh: a security-only mirror"
root security-only
sources_d debian.sources <<<"Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main"
apt_sources mirror
expect "mirror: status 1 (the security archive has no flatbuffers)" 1 "$RC"
expect_has "mirror: names the file read" "sources.list.d/debian.sources" "$ERR"
apt_sources deb-src
expect "deb-src: falls back to deb.debian.org" "$(debsrc http://deb.debian.org/debian bookworm)" "$OUT"

echo "-- apt-sources.sh: release and options"
root trixie trixie
sources_d debian.sources <<<"$DEBIAN12_SOURCES
Types: deb
URIs: http://trixie.example/debian
Suites: trixie
Components: main"
apt_sources mirror
expect "mirror: the release's own suite (trixie)" http://trixie.example/debian "$OUT"
root no-os-release none
sources_d debian.sources <<<"$DEBIAN12_SOURCES"
apt_sources mirror
expect "mirror: bookworm without os-release" http://deb.debian.org/debian "$OUT"
expect_has "mirror: says it assumed bookworm" "assuming bookworm" "$ERR"
root options
sources_list <<<"deb [ arch=amd64 signed-by=/usr/share/keyrings/x.gpg ] https://mirror.example.com/debian bookworm main"
apt_sources deb-src
expect "deb-src: signed-by option of a one-line entry" \
  "$(debsrc https://mirror.example.com/debian bookworm /usr/share/keyrings/x.gpg)" "$OUT"
run bash "$REPO/scripts/apt-sources.sh" --root "$R" bogus
expect "usage: status 2" 2 "$RC"
run bash "$REPO/scripts/apt-sources.sh" --root "$T/missing" mirror
expect "a missing root: status 2" 2 "$RC"
expect_has "a missing root: message" "is not a directory" "$ERR"

# ------------------------------------------------- 2. install scripts with stand-ins
# sandbox NAME: $S with a copy of scripts/, a fake root ($S/apt-root, Debian
# 12 layout), a fake dpkg database ($S/dpkg/<package> holds its version),
# stand-in commands in $S/stub and "installed" ones in $S/usr/bin, and only
# the real tools the scripts use.
TOOLS=$T/tools
mkdir -p "$TOOLS"
for t in bash env dirname mkdir grep sed readlink head tail find rm tee cat awk tr ls cp mktemp basename sort date chmod touch; do
  ln -s "$(command -v "$t")" "$TOOLS/$t"
done
# fake_cargo PATH VERSION FMT-MARKER: `cargo --version`; `cargo fmt` works while FMT-MARKER exists.
fake_cargo() {
  mkdir -p "$(dirname "$1")"
  cat >"$1" <<EOF
#!/bin/bash
case "\$1" in
  --version) echo "cargo $2 (stand-in)" ;;
  fmt) [[ -e $3 ]] && echo "rustfmt $2-stable" || { echo "error: no such command: \\\`fmt\\\`" >&2; exit 101; } ;;
  *) exit 0 ;;
esac
EOF
  chmod +x "$1"
}
sandbox() {
  S=$T/sandbox/$1
  mkdir -p "$S"/{stub,usr/bin,dpkg,owners,home,repo,apt-root/etc/apt/sources.list.d}
  cp -r "$REPO/scripts" "$S/repo/"
  printf 'VERSION_CODENAME=bookworm\n' >"$S/apt-root/etc/os-release"
  printf '%s\n' "$DEBIAN12_SOURCES" >"$S/apt-root/etc/apt/sources.list.d/debian.sources"
  : >"$S/apt.log"
  cat >"$S/stub/id" <<'EOF'
#!/bin/bash
echo "${FAKE_UID:-0}"
EOF
  cat >"$S/stub/dpkg-query" <<'EOF'
#!/bin/bash
if [[ $1 == -S ]]; then
  owner=$FAKE/owners/${2##*/}
  if [[ $2 == "$FAKE/usr/bin/"* && -f $owner ]]; then echo "$(<"$owner"): $2"; exit 0; fi
  echo "dpkg-query: no path found matching pattern $2" >&2
  exit 1
fi
p=$3
[[ -f $FAKE/dpkg/$p ]] || { echo "dpkg-query: no packages found matching $p" >&2; exit 1; }
case $2 in
  '-f=${Status}') printf 'install ok installed' ;;
  '-f=${Version}') printf %s "$(<"$FAKE/dpkg/$p")" ;;
esac
EOF
  cat >"$S/stub/apt-get" <<'EOF'
#!/bin/bash
echo "apt-get $*" >>"$FAKE/apt.log"
args=()
for a; do [[ $a == -* ]] || args+=("$a"); done
case ${args[0]} in
  update) [[ -z ${FAKE_UPDATE_RC:-} ]] || { echo "E: Failed to fetch (stand-in)" >&2; exit "$FAKE_UPDATE_RC"; } ;;
  install)
    [[ -z ${FAKE_INSTALL_RC:-} ]] || { echo "E: Unable to locate package (stand-in)" >&2; exit "$FAKE_INSTALL_RC"; }
    for p in "${args[@]:1}"; do
      echo 2.0.8+dfsg1-2 >"$FAKE/dpkg/$p"
      case $p in
        cargo-web) "$FAKE/make-cargo" "$FAKE/usr/bin/cargo" 1.85.0 "$FAKE/dpkg/rustfmt-web"; echo cargo-web >"$FAKE/owners/cargo" ;;
        golang-go) printf '#!/bin/bash\necho go1.19.8\n' >"$FAKE/usr/bin/go"; chmod +x "$FAKE/usr/bin/go" ;;
      esac
    done
    ;;
  source)
    if [[ " $* " == *" --print-uris "* ]]; then
      [[ -n ${FAKE_HAS_DEBSRC:-} || -f $RESHARD_APT_ROOT/etc/apt/sources.list.d/reshard-deb-src.sources ]] || exit 100
    else
      mkdir -p flatbuffers-2.0.8+dfsg1/rust/flatbuffers flatbuffers-2.0.8+dfsg1/go
      touch flatbuffers-2.0.8+dfsg1/rust/flatbuffers/Cargo.toml flatbuffers-2.0.8+dfsg1/go/lib.go
    fi
    ;;
esac
EOF
  declare -f fake_cargo >"$S/make-cargo"
  # shellcheck disable=SC2016
  echo 'fake_cargo "$@"' >>"$S/make-cargo"
  sed -i '1i #!/bin/bash' "$S/make-cargo"
  chmod +x "$S/stub/"* "$S/make-cargo"
}
# installed PACKAGE...: as if apt-get had installed them before.
installed() { FAKE=$S "$S/stub/apt-get" install "$@" && : >"$S/apt.log"; }
ALL_OFFLINE=(flatbuffers-compiler golang-go pkg-config gcc dpkg-dev
  librust-smallvec-dev librust-bitflags-dev librust-thiserror-dev)
in_sandbox() {
  run env -i PATH="$S/stub:$S/home/.cargo/bin:$S/usr/bin:$TOOLS" HOME="$S/home" FAKE="$S" \
    RESHARD_APT_ROOT="$S/apt-root" FAKE_UID="${FAKE_UID:-}" FAKE_UPDATE_RC="${FAKE_UPDATE_RC:-}" \
    FAKE_INSTALL_RC="${FAKE_INSTALL_RC:-}" FAKE_HAS_DEBSRC="${FAKE_HAS_DEBSRC:-}" "$@"
}
offline_deps() { in_sandbox bash "$S/repo/scripts/offline-deps.sh"; }
deps() { in_sandbox bash "$S/repo/scripts/deps.sh"; }
apt_installs() { sed -n 's/^apt-get .*install .*--no-install-recommends //p' "$S/apt.log"; }
apt_calls() { grep -c . "$S/apt.log" || true; }

echo "-- offline-deps.sh: a fresh Debian 12 (no Rust, nothing installed, only debian.sources)"
sandbox fresh
offline_deps
expect "status 0" 0 "$RC"
expect "installs the packages and Debian 12's Rust >= 1.77 (the *-web toolchain)" \
  "${ALL_OFFLINE[*]} cargo-web rustc-web rustfmt-web" "$(apt_installs)"
expect "writes the deb-src entry for the mirror in debian.sources" \
  "$(debsrc http://deb.debian.org/debian "bookworm bookworm-updates")" \
  "$(content "$S/apt-root/etc/apt/sources.list.d/reshard-deb-src.sources")"
expect "apt-get update before installing and after adding deb-src" 2 "$(grep -c '^apt-get update' "$S/apt.log")"
expect_has "fetches the flatbuffers source" "apt-get source -qq flatbuffers=2.0.8+dfsg1-2" "$(content "$S/apt.log")"
expect_has "says it is ready" "offline-deps: ready" "$OUT"
expect_has "env.sh written" GOWORK "$(content "$S/repo/.offline/env.sh")"
expect_has "go.work names Debian 12's Go" "go 1.19" "$(content "$S/repo/.offline/go.work")"
calls=$(apt_calls)
offline_deps
expect "second run: status 0" 0 "$RC"
expect "second run: no apt-get call (no network)" "$calls" "$(apt_calls)"

echo "-- offline-deps.sh: only /etc/apt/sources.list"
sandbox list
rm "$S/apt-root/etc/apt/sources.list.d/debian.sources"
echo "deb http://ftp.fr.debian.org/debian bookworm main" >"$S/apt-root/etc/apt/sources.list"
offline_deps
expect "status 0" 0 "$RC"
expect "deb-src entry for sources.list's mirror" "$(debsrc http://ftp.fr.debian.org/debian bookworm)" \
  "$(content "$S/apt-root/etc/apt/sources.list.d/reshard-deb-src.sources")"

echo "-- offline-deps.sh: no apt sources at all"
sandbox none
rm -r "$S/apt-root/etc/apt/sources.list.d"
offline_deps
expect "status 0" 0 "$RC"
expect "deb-src entry for deb.debian.org" "$(debsrc http://deb.debian.org/debian bookworm)" \
  "$(content "$S/apt-root/etc/apt/sources.list.d/reshard-deb-src.sources")"
expect_has "says it fell back" "using http://deb.debian.org/debian" "$ERR"

echo "-- offline-deps.sh: Debian's own cargo 1.65 (too old)"
sandbox debian-cargo
installed "${ALL_OFFLINE[@]}"
fake_cargo "$S/usr/bin/cargo" 1.65.0 /nonexistent
echo cargo >"$S/owners/cargo"
FAKE_HAS_DEBSRC=1 offline_deps
expect "status 0" 0 "$RC"
expect "replaces it with cargo-web, rustc-web, rustfmt-web" "cargo-web rustc-web rustfmt-web" "$(apt_installs)"
expect_has "says why" "is older than the Rust 1.77 the bindings need; replacing it" "$OUT"
expect "no deb-src entry when apt already has one" no \
  "$([[ -e $S/apt-root/etc/apt/sources.list.d/reshard-deb-src.sources ]] && echo yes || echo no)"

echo "-- offline-deps.sh: Debian's cargo-web without rustfmt"
sandbox debian-nofmt
installed "${ALL_OFFLINE[@]}" cargo-web rustc-web
fake_cargo "$S/usr/bin/cargo" 1.85.0 "$S/dpkg/rustfmt-web"
echo cargo-web >"$S/owners/cargo"
FAKE_HAS_DEBSRC=1 offline_deps
expect "status 0" 0 "$RC"
expect "installs rustfmt-web only" rustfmt-web "$(apt_installs)"

echo "-- offline-deps.sh: rustup toolchains"
sandbox rustup-old
installed "${ALL_OFFLINE[@]}"
fake_cargo "$S/home/.cargo/bin/cargo" 1.70.0 /
offline_deps
expect "too old: status 1" 1 "$RC"
expect_has "too old: says what to do" "is older than the Rust 1.77 the bindings need: update it (rustup update stable)" "$ERR"
expect "too old: installs nothing" 0 "$(apt_calls)"
sandbox rustup-nofmt
installed "${ALL_OFFLINE[@]}"
fake_cargo "$S/home/.cargo/bin/cargo" 1.95.0 /nonexistent
offline_deps
expect "no rustfmt: status 1" 1 "$RC"
expect_has "no rustfmt: says what to do" "rustup component add rustfmt" "$ERR"
sandbox rustup-ok
installed "${ALL_OFFLINE[@]}"
fake_cargo "$S/home/.cargo/bin/cargo" 1.95.0 /
FAKE_HAS_DEBSRC=1 offline_deps
expect "1.95 with rustfmt: status 0" 0 "$RC"
expect "1.95 with rustfmt: installs nothing" "" "$(apt_installs)"

echo "-- offline-deps.sh: a failing apt-get is named, not silent"
sandbox apt-fails
FAKE_INSTALL_RC=100 offline_deps
expect "status 100" 100 "$RC"
expect_has "names the script, the command and the status" "offline-deps.sh:" "$ERR"
expect_has "names the failing command" "exit status 100" "$ERR"
expect_has "apt-get's own message" "Unable to locate package" "$ERR"

echo "-- deps.sh"
sandbox deps-all
# Every package deps.sh lists (read from it, so adding one there needs no
# edit here).
mapfile -t DEPS_PACKAGES < <(sed -n '/^PACKAGES=(/,/^)/p' scripts/deps.sh | sed -e 's/#.*//' \
  -e 's/PACKAGES=(//' -e 's/)//' | tr -s ' \t' '\n' | sed '/^$/d')
((${#DEPS_PACKAGES[@]} > 10)) || { echo "test-setup: could not read PACKAGES from scripts/deps.sh" >&2; exit 1; }
installed "${DEPS_PACKAGES[@]}"
deps
expect "all installed: status 0" 0 "$RC"
expect "all installed: no apt-get call" 0 "$(apt_calls)"
rm "$S/dpkg/abigail-tools" "$S/dpkg/libcli11-dev"
: >"$S/apt.log"
deps
expect "two missing: status 0" 0 "$RC"
expect "two missing: update, then install exactly those" \
  "apt-get update -qq|apt-get install -y -qq --no-install-recommends libcli11-dev abigail-tools" \
  "$(tr '\n' '|' <"$S/apt.log" | sed 's/|$//')"
rm "$S/dpkg/abigail-tools"
: >"$S/apt.log"
FAKE_UPDATE_RC=100 deps
expect "apt-get update fails: status 100" 100 "$RC"
expect_has "apt-get update fails: named" "deps.sh:" "$ERR"
expect_has "apt-get update fails: with its status" "exit status 100" "$ERR"
FAKE_UID=1000 deps
expect "not root, no sudo: status 1" 1 "$RC"
expect_has "not root, no sudo: says so" "not root and no sudo" "$ERR"

# ------------------------------------------------------------------ 3. strict.sh
echo "-- lib/strict.sh"
cat >"$T/grep-missing.sh" <<EOF
source "$REPO/scripts/lib/strict.sh"
echo before
mirror=\$(grep -h debian "$T/no-such-etc/apt/sources.list" | head -1)
echo "after \$mirror"
EOF
run bash "$T/grep-missing.sh"
expect "grep of a missing file: status 2" 2 "$RC"
expect "grep of a missing file: stops there" before "$OUT"
expect_has "grep of a missing file: names script, line and status" "grep-missing.sh:3: exit status 2" "$ERR"
expect_has "grep of a missing file: names the command" 'mirror=$(grep -h debian' "$ERR"

echo "setup: $passed passed, $failed failed"
if ((failed)); then exit 1; fi
