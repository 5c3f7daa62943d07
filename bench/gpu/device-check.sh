#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, from a build packed by
# pack-device-build.sh (carried as .devbuild): kernel tests, the model test suite on the
# GPU (parity with transformers, DeepSeek-V4's too, batch invariance, sessions batched,
# speculative == plain, diagnostics, quantized formats), GPU vs CPU vs transformers per fixture, trace diff
# CPU vs GPU and a planted GPU bug found by `specula diff`, `specula check --device cuda`,
# compute-sanitizer, and a first decode benchmark. Logs go to $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
ROOT=$PWD
mkdir -p /work && [ -e /work/main ] || ln -sfn "$ROOT" /work/main   # the tests' compiled-in paths
ln -sfn .devbuild/build-cuda build-cuda
export LD_LIBRARY_PATH=$ROOT/.devbuild/lib
B=build-cuda; S=$B/specula; F=tests/fixtures/models
run() { local name=$1; shift; echo "== $name: $*"; local t0=$(date +%s); timeout "${T:-300}" "$@"; local rc=$?; echo "== $name rc=$rc ($(( $(date +%s) - t0 )) s)"; }
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run kernels $B/tests/cuda/test_cuda_kernels
run kernels_attention $B/tests/cuda/test_cuda_attention
run kernels_dsv4 $B/tests/cuda/test_cuda_dsv4
for t in parity parity_dsv4 batch_invariance batch_sessions quant diag; do
    SPECULA_TEST_DEVICE=cuda SPECULA_THREADS=8 run "suite_$t" $B/tests/test_$t
done
T=240 run compare python3 bench/gpu/compare_backends.py $S tests/fixtures $OUT/parity.md
for m in llama_mha_bf16 gptoss_mxfp4 deepseekv3_qlora_yarn qwen3moe_nvfp4_modelopt dsv4_sqrtsoftplus_bf16; do
    $S trace -m $F/$m --tokens 3,14,15,9,2,6 -n 4 -o /tmp/cpu.jsonl --device cpu 2>/dev/null
    $S trace -m $F/$m --tokens 3,14,15,9,2,6 -n 4 -o /tmp/gpu.jsonl --device cuda 2>/dev/null
    run "diff_$m" $S diff /tmp/cpu.jsonl /tmp/gpu.jsonl --tol 1e-4
done
$S trace -m $F/llama_mha_bf16 --tokens 3,14,15,9,2,6 -n 4 -o /tmp/gpu.jsonl --device cuda 2>/dev/null
SPECULA_CUDA_PLANT_BUG=attention $S trace -m $F/llama_mha_bf16 --tokens 3,14,15,9,2,6 -n 4 -o /tmp/bug.jsonl --device cuda 2>/dev/null
run planted_bug $S diff /tmp/gpu.jsonl /tmp/bug.jsonl
SPECULA_CUDA_FAIL_OP=moe_ffn run fail_op $S generate -m $F/gptoss_mxfp4 --tokens 1,2,3 -n 4 --device cuda
run no_such_device $S generate -m $F/llama_mha_bf16 --tokens 1,2 -n 2 --device cuda:7
SPECULA_MEM_LIMIT_BYTES=1000000 run mem_limit $S generate -m $F/llama_mha_bf16 --tokens 1,2 -n 2 --device cuda
for m in gptoss_mxfp4 qwen3moe_nvfp4_modelopt deepseekv3_fp8_block mixtral_nvfp4_hf_quant_config; do
    run "check_$m" $S check -m $F/$m --device cuda
done
SPECULA_TEST_DEVICE=cuda SPECULA_THREADS=8 T=180 run suite_spec $B/tests/test_spec
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for m in gptoss_mxfp4 deepseekv3_qlora_yarn qwen3moe_nvfp4_modelopt llama_yarn dsv4_sqrtsoftplus_bf16; do
    run "memcheck_$m" $CS --tool memcheck --error-exitcode 3 $S generate -m $F/$m --tokens 1,2,3,4 -n 6 --device cuda --draft self
done
SPC_TEST_NO_TIMING=1 T=120 run racecheck_kernels $CS --tool racecheck --error-exitcode 3 $B/tests/cuda/test_cuda_kernels
T=120 run racecheck_attention $CS --tool racecheck --error-exitcode 3 $B/tests/cuda/test_cuda_attention
T=120 run racecheck_dsv4 $CS --tool racecheck --error-exitcode 3 $B/tests/cuda/test_cuda_dsv4
$B/make_random_model /tmp/l100 --preset llama-100m >/dev/null
run bench_gpu $S bench -m /tmp/l100 --device cuda --prompt-len 128 --gen-len 128 --runs 3
} > "$OUT/device-check.log" 2>&1
grep -E '^== .* rc=' "$OUT/device-check.log"
