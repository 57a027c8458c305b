#!/usr/bin/env bash
# Installs what reshard needs to build and test on Debian 12 (idempotent:
# packages already present are skipped without touching the network).
source "$(dirname "$0")/lib/strict.sh"
PACKAGES=(
  cmake ninja-build g++ clang libclang-rt-14-dev pkg-config python3
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
  flatbuffers-compiler libflatbuffers-dev
  openmpi-bin libopenmpi-dev libscalapack-openmpi-dev
  abigail-tools
  python3-jsonschema  # tests/spec/schema_test.py: schema/spec.schema.json
  python3-venv binutils  # scripts/test-python.sh: the venv of bindings/python, wheel checks (objdump)
  ccache  # scripts/lib/ccache.sh: compiler cache kept across test runs on one machine
  libssl-dev  # libcrypto: HMAC-SHA-256 of authenticated plans (core/src/wire/mac.cc)
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "not root and no sudo: run as root to install ${missing[*]}"
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
