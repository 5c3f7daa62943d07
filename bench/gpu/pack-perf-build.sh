#!/usr/bin/env bash
# Packs what bench/gpu/perf-run.sh needs into DEST (default .devbuild; BUILD_DIR=build-cuda),
# laid out as pack-device-build.sh does (DEST/build-cuda/..., shared libraries in DEST/lib):
# specula, make_random_model, verify_cost, tc_speed, rows_floor, the CUDA kernel tests and the
# model suites it runs; libraries a GPU machine may lack (cJSON, PCRE2, utf8proc, cmocka,
# libmicrohttpd; the GPU machines have GnuTLS) and libspecula_cuda.so. The kernels are built
# for sm_90a only, as a shared library without -lineinfo, so the pack stays small: the
# device transfer takes at most 64 MiB with the working tree, and the tracked tree (the
# bundled models) is about 60 MB. The unpacked tree is also written as DEST.tar.xz (about
# 2 MB): carry that file; perf-run.sh unpacks it when DEST is absent. For ncu source lines
# build with LINEINFO=ON (a larger pack: move models/ aside for the transfer). WITH_OLD=DIR
# puts an earlier pack (a copy of DEST made before the change) into DEST/old, for
# build-ab.sh to compare the two in one call (xz keeps the pair about 3 MB). ALSO="NAME=DIR
# ..." adds more packs (variants of a change, each packed by this script to its own DEST
# first) as DEST/NAME, for build-ab.sh --also "NAME ..." (identical files compress away: five
# builds took 2.6 MB of xz on 2026-11-29).
#   [WITH_OLD=DIR] [ALSO="NAME=DIR ..."] bench/gpu/pack-perf-build.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.devbuild}
B=${BUILD_DIR:-build-cuda}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DSPECULA_CUDA=ON -DSPECULA_CUDA_SHARED=ON \
      -DSPECULA_CUDA_LINEINFO="${LINEINFO:-OFF}" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a-real}" >/dev/null
cmake --build "$B" -j"$(nproc)" >/dev/null
rm -rf "$DEST" && mkdir -p "$DEST/lib" "$DEST/$B/tests/cuda"
bins="$B/specula $B/make_random_model $B/verify_cost $B/tc_speed $B/rows_floor $B/tests/cuda/test_cuda_kernels $B/tests/cuda/test_cuda_attention $B/tests/cuda/test_cuda_tc $B/tests/cuda/test_cuda_moe_tc $B/tests/cuda/test_cuda_sample $B/tests/cuda/test_cuda_spec"
for t in parity parity_dsv4 batch_invariance batch_sessions spec draws batch_verify; do bins="$bins $B/tests/test_$t"; done
for f in $bins; do
    cp "$f" "$DEST/$f" && strip "$DEST/$f"
done
for f in $bins; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
    grep -E 'libcjson|libpcre2|libutf8proc|libcmocka|libmicrohttpd|libspecula_cuda' |
    while read -r so; do cp -L "$so" "$DEST/lib/"; done || true
{ git rev-parse --short HEAD; git diff --quiet HEAD -- src include 2>/dev/null || echo "(+ uncommitted changes)"; } \
    > "$DEST/COMMIT" 2>/dev/null || true
if [ -n "${WITH_OLD:-}" ]; then
    [ -x "$WITH_OLD/$B/specula" ] || { echo "WITH_OLD=$WITH_OLD: no $B/specula there" >&2; exit 1; }
    cp -r "$WITH_OLD" "$DEST/old" && rm -rf "$DEST/old/old"
fi
for spec in ${ALSO:-}; do
    name=${spec%%=*} dir=${spec#*=}
    case $name in old|lib|"$B"|"$spec"|"") echo "ALSO=$spec: give NAME=DIR, NAME not old, lib or $B" >&2; exit 1 ;; esac
    [ -x "$dir/$B/specula" ] || { echo "ALSO=$spec: no $B/specula in $dir" >&2; exit 1; }
    rm -rf "${DEST:?}/$name" && cp -r "$dir" "$DEST/$name" && rm -rf "$DEST/$name/old"
done
du -sh "$DEST"
rm -f "$DEST.tar.xz" && XZ_OPT="-9 -T$(nproc)" tar -cJf "$DEST.tar.xz" -C "$DEST" .
du -sh "$DEST.tar.xz"
