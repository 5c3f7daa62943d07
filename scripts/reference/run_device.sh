#!/usr/bin/env bash
# Runs on the device machine (torch + transformers there): regenerates every reference
# fixture into $OUT and packs them. Usage (from the repo root): scripts/reference/run_device.sh
set -euo pipefail
OUT=${OUT:-/tmp/specula-out}
WORK=/tmp/specula-fixtures
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"
python3 make_fixtures.py "$WORK/models"
tar -C "$WORK/models" -czf "$OUT/dense_fixtures.tgz" .
