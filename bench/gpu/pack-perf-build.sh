#!/usr/bin/env bash
# Packs the build for bench/gpu/perf-run.sh: pack-device-build.sh's binaries plus the
# verify-cost bench (build-cuda/verify_cost) and the commit id, into .devbuild.
#   bench/gpu/pack-perf-build.sh [DEST]      (default .devbuild; BUILD_DIR=build-cuda)
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.devbuild}
B=${BUILD_DIR:-build-cuda}
bench/gpu/pack-device-build.sh "$DEST"
cmake --build "$B" --target verify_cost -j"$(nproc)" >/dev/null
cp "$B/verify_cost" "$DEST/$B/verify_cost" && strip "$DEST/$B/verify_cost"
# libraries pack-device-build.sh does not list yet: libmicrohttpd (specula serve, linked into
# the CLI) and its GnuTLS chain, when the binaries need them
for f in "$DEST/$B/specula" "$DEST/$B/verify_cost"; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
    grep -E 'libmicrohttpd|libgnutls|libp11-kit|libidn2|libunistring|libtasn1|libnettle|libhogweed|libgmp|libffi' |
    while read -r so; do cp -L "$so" "$DEST/lib/"; done || true
git rev-parse --short HEAD > "$DEST/COMMIT" 2>/dev/null || true
du -sh "$DEST"
