#!/usr/bin/env bash
# Regenerates bindings/rust/reshard/src/plan_generated.rs, the plan reader
# `flatc --rust` (2.0.x, Debian 12's flatbuffers-compiler) writes from
# schema/plan.fbs. The file is committed so that the crate is self-contained:
# `cargo build` needs no flatc and `cargo package` carries every source (a
# crate cannot read ../../../schema once published). Run it after changing
# the schema and commit the result; scripts/test-bindings.sh fails while the
# committed file differs from what this writes.
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
version=$(flatc --version)
[[ $version == *"version 2.0."* ]] ||
  die "flatc reports '$version'; the committed reader is flatc 2.0.x's (the flatbuffers 2.x runtime)"
flatc --rust -o "${1:-bindings/rust/reshard/src}" schema/plan.fbs
echo "wrote ${1:-bindings/rust/reshard/src}/plan_generated.rs ($version)"
