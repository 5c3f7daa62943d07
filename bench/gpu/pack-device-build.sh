#!/usr/bin/env bash
# Packs a CUDA build made on this (Debian) machine for a GPU machine that lacks the
# build's libraries (cJSON, PCRE2, utf8proc, cmocka, libmicrohttpd): stripped executables under
# DEST/build-cuda/ (the same relative paths as the build tree, so the tests' compiled-in
# paths work once the repository root is linked at the build's path) and the shared
# libraries they need under DEST/lib/ (set LD_LIBRARY_PATH there).
#   bench/gpu/pack-device-build.sh [DEST]      (default .devbuild; BUILD_DIR=build-cuda)
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.devbuild}
B=${BUILD_DIR:-build-cuda}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSPECULA_CUDA=ON >/dev/null
cmake --build "$B" -j"$(nproc)" >/dev/null
rm -rf "$DEST" && mkdir -p "$DEST/lib" "$DEST/$B/tests/cuda"
# the tests that load models (the text tests do not need a GPU)
bins="$B/specula $B/make_random_model $B/verify_cost $B/tests/cuda/test_cuda_kernels $B/tests/cuda/test_cuda_attention $B/tests/cuda/test_cuda_dsv4"
for t in parity parity_dsv4 batch_invariance batch_sessions spec diag quant; do bins="$bins $B/tests/test_$t"; done
for f in $bins; do
    cp "$f" "$DEST/$f" && strip "$DEST/$f"
done
# every shared library but the C/C++ runtime (cJSON, PCRE2, utf8proc, cmocka, libmicrohttpd
# and its GnuTLS chain)
for f in $bins; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r so; do cp -L "$so" "$DEST/lib/"; done
du -sh "$DEST"
