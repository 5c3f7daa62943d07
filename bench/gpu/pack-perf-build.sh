#!/usr/bin/env bash
# Packs what bench/gpu/perf-run.sh needs into DEST (default .devbuild; BUILD_DIR=build-cuda),
# laid out as pack-device-build.sh does (DEST/build-cuda/..., shared libraries in DEST/lib):
# specula, make_random_model, verify_cost, tc_speed, the CUDA kernel tests and the four
# model suites it runs; libraries a GPU machine may lack (cJSON, PCRE2, utf8proc, cmocka,
# libmicrohttpd and its GnuTLS chain). The unpacked tree (over 100 MB with the sm_90a
# kernels) is also written as DEST.tar.xz (about 11 MB): carry that file; perf-run.sh
# unpacks it when DEST is absent.
#   bench/gpu/pack-perf-build.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.devbuild}
B=${BUILD_DIR:-build-cuda}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSPECULA_CUDA=ON >/dev/null
cmake --build "$B" -j"$(nproc)" >/dev/null
rm -rf "$DEST" && mkdir -p "$DEST/lib" "$DEST/$B/tests/cuda"
bins="$B/specula $B/make_random_model $B/verify_cost $B/tc_speed $B/tests/cuda/test_cuda_kernels $B/tests/cuda/test_cuda_tc $B/tests/cuda/test_cuda_moe_tc"
for t in parity batch_invariance batch_sessions spec; do bins="$bins $B/tests/test_$t"; done
for f in $bins; do
    cp "$f" "$DEST/$f" && strip "$DEST/$f"
done
for f in $bins; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
    grep -E 'libcjson|libpcre2|libutf8proc|libcmocka|libmicrohttpd|libgnutls|libp11-kit|libidn2|libunistring|libtasn1|libnettle|libhogweed|libgmp|libffi' |
    while read -r so; do cp -L "$so" "$DEST/lib/"; done || true
git rev-parse --short HEAD > "$DEST/COMMIT" 2>/dev/null || true
du -sh "$DEST"
rm -f "$DEST.tar.xz" && XZ_OPT="-9 -T$(nproc)" tar -cJf "$DEST.tar.xz" -C "$DEST" .
du -sh "$DEST.tar.xz"
