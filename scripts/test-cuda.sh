#!/usr/bin/env bash
# Builds specula with the CUDA kernels (Release, SPECULA_CUDA=ON) and runs the GPU test
# suite (ctest label "cuda"). Without a GPU the tests report themselves skipped.
#   scripts/test-cuda.sh              build, ctest -L cuda, then the model suite on the GPU
#   scripts/test-cuda.sh --sanitize   also run the kernel tests under compute-sanitizer
#                                     (memcheck and racecheck), when it is installed
# BUILD_DIR (default build-cuda) names the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-cuda}
SANITIZE=0
[ "${1:-}" = "--sanitize" ] && SANITIZE=1

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DSPECULA_CUDA=ON
cmake --build "$BUILD_DIR" -j"$(nproc)"
(cd "$BUILD_DIR" && ctest -L cuda --output-on-failure)
# the model suite on the GPU: parity with transformers (DeepSeek-V4 too), batch invariance,
# batched sessions, speculative == plain, diagnostics (a planted kernel bug), quantized
# formats, CLI devices
if "$BUILD_DIR/specula" inspect -m tests/fixtures/models/llama_mha_bf16 --device cuda >/dev/null 2>&1; then
    (cd "$BUILD_DIR" && SPECULA_TEST_DEVICE=cuda ctest --output-on-failure \
        -R '^(test_parity|test_parity_dsv4|test_batch_invariance|test_batch_sessions|test_spec|test_diag|test_quant|cli_devices)$')
else
    echo "no CUDA device: the model suite on the GPU is skipped"
fi

if [ "$SANITIZE" = 1 ]; then
    CS=$(command -v compute-sanitizer || true)
    [ -z "$CS" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && CS=/usr/local/cuda/bin/compute-sanitizer
    if [ -z "$CS" ]; then
        echo "compute-sanitizer not found: sanitizer runs skipped"
        exit 0
    fi
    for T in "$BUILD_DIR/tests/cuda/test_cuda_kernels" "$BUILD_DIR/tests/cuda/test_cuda_attention" "$BUILD_DIR/tests/cuda/test_cuda_dsv4"; do
        for tool in memcheck racecheck; do
            echo "== compute-sanitizer --tool $tool $T"
            set +e
            SPC_TEST_SANITIZER=1 "$CS" --tool "$tool" --error-exitcode 3 "$T"
            rc=$?
            set -e
            # 77: no GPU (skipped); anything else but 0 is a failure
            if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
                echo "compute-sanitizer $tool $T: FAILED (exit $rc)"
                exit 1
            fi
            echo "compute-sanitizer $tool: clean"
        done
    done
fi
