#!/usr/bin/env bash
# Runs on the device machine (torch + transformers there): regenerates every reference
# fixture into $OUT and packs them. Usage (from the repo root): scripts/reference/run_device.sh [dense|moe|dsv4|all]
set -euo pipefail
OUT=${OUT:-/tmp/specula-out}
WORK=/tmp/specula-fixtures
WHAT=${1:-all}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"
if [ "$WHAT" = dense ] || [ "$WHAT" = all ]; then
    python3 make_fixtures.py "$WORK/models"
    tar -C "$WORK/models" -czf "$OUT/dense_fixtures.tgz" .
fi
if [ "$WHAT" = moe ] || [ "$WHAT" = all ]; then
    python3 make_moe_fixtures.py "$WORK/moe"
    tar -C "$WORK/moe" -czf "$OUT/moe_fixtures.tgz" .
fi
if [ "$WHAT" = dsv4 ] || [ "$WHAT" = all ]; then
    python3 make_dsv4_fixtures.py "$WORK/dsv4" 2>&1 | tee "$WORK/dsv4.log" || true
    cp "$WORK/dsv4.log" "$WORK/dsv4/" 2>/dev/null || true
    tar -C "$WORK/dsv4" -czf "$OUT/dsv4_fixtures.tgz" .
fi
