#!/usr/bin/env bash
# bench/gpu/build-llama-cpp.sh: builds a llama.cpp source tree you bring, for sm_90a, on
# the GPU machine (16 cores there: about 4 minutes; 55 on the 2-core dev VM), so that
# bench/gpu/compare-llama-cpp.sh can run its llama-bench beside specula.
#
#   bench/gpu/build-llama-cpp.sh SRC.tar.xz [BUILD_TIMEOUT_S]
#
# SRC.tar.xz: llama.cpp's CMakeLists.txt, cmake, ggml, src, common, include, vendor,
# tools (tools/ui may be left out) and licenses, packed on the dev VM (untracked: llama.cpp
# is not part of this repository and nothing here fetches it). Unpacks into
# build-llama/src (ignored by git, so the GPU machine keeps it between calls while it
# stays warm), configures once and builds llama-bench into build-llama/b/bin, resuming
# where a build cut short by BUILD_TIMEOUT_S (default 540) left off. Prints that
# directory's files; pass it to compare-llama-cpp.sh.
set -u
cd "$(dirname "$0")/../.."
SRC=${1:?usage: build-llama-cpp.sh SRC.tar.xz [BUILD_TIMEOUT_S]}
SRC=$(realpath "$SRC")
mkdir -p build-llama && cd build-llama
[ -f src/CMakeLists.txt ] || { mkdir -p src && tar -xJf "$SRC" -C src; }
[ -f b/CMakeCache.txt ] || cmake -S src -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real \
    -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release > cmake.log 2>&1 ||
    { tail -30 cmake.log; exit 1; }
start=$(date +%s)
timeout "${2:-540}" cmake --build b --target llama-bench -j"$(nproc)" > build.log 2>&1
rc=$?
echo "build rc $rc in $(($(date +%s) - start)) s"
tail -3 build.log
ls b/bin 2>/dev/null
exit $rc
