#!/usr/bin/env bash
# Runs the whole test suite twice: an optimized build, then a build under
# AddressSanitizer + UndefinedBehaviorSanitizer (which also reports leaks; the
# malformed-input corpus and the fuzz replays run in both). Then the threaded tests
# under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
J=$(nproc)
if [ -x scripts/fetch-test-deps.sh ]; then scripts/fetch-test-deps.sh; fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$J"
ctest --test-dir build --output-on-failure -j "$J"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSPECULA_SANITIZE=ON -DSPECULA_CUDA=OFF
cmake --build build-asan -j "$J"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$J"
# ThreadSanitizer: the tests that run the thread pool or the server's threads (labelled
# 'threads'), built alone
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSPECULA_TSAN=ON -DSPECULA_CUDA=OFF
cmake --build build-tsan -j "$J" --target test_batch_invariance test_batch_sessions test_kernels test_quant test_threadpool test_weight_scan specula
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -L threads
echo "specula: all tests passed (release, ASan/UBSan and TSan builds)"
