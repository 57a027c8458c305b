#!/usr/bin/env bash
# Builds everything and runs the demo: the reshard CLI plans, draws and
# verifies moving a small transformer's weights from a training layout
# (FSDP x tensor parallel on 8 devices in 2 processes) to an inference layout
# (tensor parallel on 4 other devices). Idempotent; installs what it needs.
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset dev >/dev/null
cmake --build --preset dev -j "${JOBS:-$(nproc)}"
R=build/dev/tools/reshard
SPEC=examples/specs/small_transformer.json
echo
echo "\$ reshard show --spec $SPEC --tensor layers.0.attn.q"
$R show --spec $SPEC --tensor layers.0.attn.q
echo
echo "\$ reshard show --spec $SPEC --tensor layers.0.mlp.w2 --svg build/dev/w2.svg"
$R show --spec $SPEC --tensor layers.0.mlp.w2 --svg build/dev/w2.svg
echo
echo "\$ reshard plan --spec $SPEC"
$R plan --spec $SPEC
echo
echo "\$ reshard verify --spec $SPEC"
$R verify --spec $SPEC
