#!/usr/bin/env bash
# bench/gpu/perf-run.sh: issue 11's GPU performance run, in one call of about 6 minutes.
#
# Runs from the repository root on the GPU machine with a build packed by
# bench/gpu/pack-perf-build.sh (carried as .devbuild.tar.xz, or .devbuild; see device-check.sh):
#   1. tests/cuda/test_cuda_kernels, test_cuda_attention, test_cuda_tc and test_cuda_moe_tc: every kernel against its reference, batch
#      invariance (n_tok 1..64), and the bandwidth table (device copy, decode shapes,
#      n_tok 1..16, L2 defeated by rotating weight copies);
#   2. random llama-100m and llama-1b checkpoints (written to /dev/shm while step 1 runs),
#      `specula bench` on each (prompt 128, gen 128, 3 runs; fast precision, exact, and a
#      512-token prompt) and the verify-cost curve in both precisions
#      (bench/gpu/verify_cost.c);
#   3. the model suites on the GPU, in parallel: test_parity, test_batch_invariance,
#      test_batch_sessions.
# Every step has a timeout cut to what is left of a 330 s budget (the suites get at least
# 60 s: at most about 400 s in all); a failing step is recorded and the run goes on.
# Logs: $OUT/*.log; summary: $OUT/perf.md (also printed).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
BUDGET=${PERF_BUDGET_S:-330}
T_START=$(date +%s)
# the tests' compiled-in source paths: the lead's checkout or this worktree
mkdir -p /work/wt 2>/dev/null
for p in /work/main /work/wt/gpuperf; do [ -e "$p" ] || ln -sfn "$ROOT" "$p" 2>/dev/null; done
B=build-cuda
. bench/gpu/devbuild.sh
if devbuild_find; then   # the packed build (never a stale build-cuda left there)
    B=$DEVBUILD_BIN
    export LD_LIBRARY_PATH=$DEVBUILD_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
S=$B/specula
MD=$OUT/perf.md
left() { echo $(( BUDGET - ($(date +%s) - T_START) )); }
# run NAME TIMEOUT CMD...: output to $OUT/NAME.log, status line to $OUT/status.txt
run() {
    local name=$1 lim=$2; shift 2
    local l; l=$(left); [ "$l" -lt "$lim" ] && lim=$l
    if [ "$lim" -lt 5 ]; then echo "$name: skipped (time budget spent)" >> "$OUT/status.txt"; return 0; fi
    local t0; t0=$(date +%s)
    timeout -k 5 "$lim" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc ($(( $(date +%s) - t0 )) s, limit $lim s)" >> "$OUT/status.txt"
    return 0
}
: > "$OUT/status.txt"
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "gpu: ${GPU:-unknown}" >> "$OUT/status.txt"

# models (CPU only) in the background while the kernel tests run
MODELS=/dev/shm/specula-perf
[ -d /dev/shm ] && [ -w /dev/shm ] || MODELS=/tmp/specula-perf
mkdir -p "$MODELS"
( timeout 120 $B/make_random_model "$MODELS/l100" --preset llama-100m > "$OUT/make_l100.log" 2>&1
  echo "rc=$?" >> "$OUT/make_l100.log" ) &
P100=$!
( timeout 150 $B/make_random_model "$MODELS/l1b" --preset llama-1b > "$OUT/make_l1b.log" 2>&1
  echo "rc=$?" >> "$OUT/make_l1b.log" ) &
P1B=$!

# 1. kernels (correctness, invariance, bandwidth; the tensor-core products of fast precision)
run kernels 100 $B/tests/cuda/test_cuda_kernels
[ -x $B/tests/cuda/test_cuda_attention ] && run attention 60 $B/tests/cuda/test_cuda_attention
[ -x $B/tests/cuda/test_cuda_tc ] && run tc 60 $B/tests/cuda/test_cuda_tc
[ -x $B/tests/cuda/test_cuda_moe_tc ] && run moe_tc 60 $B/tests/cuda/test_cuda_moe_tc
[ -x $B/tc_speed ] && run tc_speed 30 $B/tc_speed

wait $P100 $P1B 2>/dev/null
for m in l100 l1b; do echo "make_random_model $m: $(grep -E '^rc=' "$OUT/make_$m.log" 2>/dev/null | tail -1)"; done >> "$OUT/status.txt"

# 2. benchmarks, one at a time on an otherwise idle GPU, in the CLI's default precision
# (fast: BF16 weights on tensor cores) and in exact; decode also without recorded passes
# (SPECULA_CUDA_GRAPHS=0) to show what CUDA graphs buy
for m in l100 l1b; do
    [ -f "$MODELS/$m/model.safetensors" ] || { echo "bench_$m: no model" >> "$OUT/status.txt"; continue; }
    run "bench_$m" 45 $S bench -m "$MODELS/$m" --device cuda --prompt-len 128 --gen-len 128 --runs 3
    run "bench_exact_$m" 45 $S bench -m "$MODELS/$m" --device cuda --precision exact --prompt-len 128 --gen-len 128 --runs 3
    run "bench_pp512_$m" 45 $S bench -m "$MODELS/$m" --device cuda --prompt-len 512 --gen-len 16 --runs 3
    SPECULA_CUDA_GRAPHS=0 run "bench_nograph_$m" 45 $S bench -m "$MODELS/$m" --device cuda --prompt-len 128 --gen-len 128 --runs 3
    SPECULA_CUDA_PDL=0 run "bench_nopdl_$m" 45 $S bench -m "$MODELS/$m" --device cuda --prompt-len 128 --gen-len 128 --runs 3
    SPECULA_CUDA_PDL=all run "bench_pdlall_$m" 45 $S bench -m "$MODELS/$m" --device cuda --prompt-len 128 --gen-len 128 --runs 3
    run "verify_$m" 30 $B/verify_cost -m "$MODELS/$m" --device cuda --ctx 128 --reps 15 --kmax 8
    run "verify_fast_$m" 30 $B/verify_cost -m "$MODELS/$m" --device cuda --precision fast --ctx 128 --reps 15 --kmax 8
done
# the gpt-oss-20b shape (13 GB, written to memory) when asked: PERF_20B=1
if [ "${PERF_20B:-0}" = 1 ] && [ "$(left)" -gt 90 ]; then
    run make_g20b 120 $B/make_random_model "$MODELS/g20b" --preset gptoss-20b
    run bench_g20b 90 $S bench -m "$MODELS/g20b" --device cuda --prompt-len 128 --gen-len 64 --runs 2
    run bench_exact_g20b 90 $S bench -m "$MODELS/g20b" --device cuda --precision exact --prompt-len 128 --gen-len 64 --runs 2
    SPECULA_CUDA_PDL=0 run bench_nopdl_g20b 90 $S bench -m "$MODELS/g20b" --device cuda --prompt-len 128 --gen-len 64 --runs 2
    SPECULA_CUDA_PDL=all run bench_pdlall_g20b 90 $S bench -m "$MODELS/g20b" --device cuda --prompt-len 128 --gen-len 64 --runs 2
    run bench_pp512_g20b 90 $S bench -m "$MODELS/g20b" --device cuda --prompt-len 512 --gen-len 16 --runs 2
    run verify_g20b 60 $B/verify_cost -m "$MODELS/g20b" --device cuda --ctx 128 --reps 5 --kmax 8
    run verify_fast_g20b 60 $B/verify_cost -m "$MODELS/g20b" --device cuda --precision fast --ctx 128 --reps 5 --kmax 8
    rm -rf "$MODELS/g20b"
fi

# 3. model suites on the GPU, in parallel (correctness only; nothing is timed now); they
# get at least 60 s even when the budget is spent
[ "$(left)" -lt 60 ] && BUDGET=$(( BUDGET + 60 - $(left) ))
SUITES=""
for t in parity batch_invariance batch_sessions spec; do
    [ -x $B/tests/test_$t ] || continue
    SPECULA_TEST_DEVICE=cuda SPECULA_THREADS=4 run "suite_$t" 120 $B/tests/test_$t &
    SUITES="$SUITES $!"
done
for p in $SUITES; do wait "$p" 2>/dev/null; done

# summary
{
echo "# specula GPU perf run, $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "GPU: ${GPU:-unknown}; commit $(git rev-parse --short HEAD 2>/dev/null || cat .devbuild/COMMIT 2>/dev/null || echo '?'); total $(( $(date +%s) - T_START )) s"
echo
echo "## Steps"
echo '```'
cat "$OUT/status.txt"
echo '```'
echo
echo "## Kernel tests"
echo '```'
grep -E '^\[ *(PASSED|FAILED|OK|SKIPPED|ERROR) *\]|matmul .*max rel|bit-identical|device:' "$OUT/kernels.log" 2>/dev/null | head -60
echo '```'
echo
echo "## MXFP4 experts on tensor cores (tests/cuda/test_cuda_moe_tc.c)"
echo '```'
grep -E '^moe |PASSED|FAILED' "$OUT/moe_tc.log" 2>/dev/null
echo '```'
echo
echo "## Fast-precision tensor-core products (bench/gpu/tc_speed.c)"
echo '```'
grep -E '^tc ' "$OUT/tc_speed.log" 2>/dev/null
echo '```'
echo
echo "## Matmul bandwidth (weights bytes / time; last column: fraction of the device copy bandwidth)"
echo
grep -E '^timing: device copy' "$OUT/kernels.log" 2>/dev/null
echo
grep -E '^\| ' "$OUT/kernels.log" 2>/dev/null
echo
echo "## Model suites on the GPU"
echo '```'
for t in parity batch_invariance batch_sessions spec; do
    echo "-- $t"; grep -E '^\[ *(PASSED|FAILED) *\]|^\[  FAILED|ERROR' "$OUT/suite_$t.log" 2>/dev/null | head -12
done
echo '```'
echo
echo "## Decode benchmarks (specula bench --device cuda --prompt-len 128 --gen-len 128 --runs 3; fast precision unless named)"
echo '```'
for m in l100 l1b g20b; do
    [ -f "$OUT/bench_$m.log" ] || continue
    echo "-- $m"
    grep -v '^$' "$OUT/bench_$m.log" 2>/dev/null | tail -6
    [ -f "$OUT/bench_exact_$m.log" ] && { echo "-- $m, --precision exact"; grep -v '^$' "$OUT/bench_exact_$m.log" | tail -3; }
    [ -f "$OUT/bench_pp512_$m.log" ] && { echo "-- $m, prompt 512"; grep -v '^$' "$OUT/bench_pp512_$m.log" | tail -3; }
    [ -f "$OUT/bench_nograph_$m.log" ] && { echo "-- $m, SPECULA_CUDA_GRAPHS=0"; grep -v '^$' "$OUT/bench_nograph_$m.log" | tail -3; }
    [ -f "$OUT/bench_nopdl_$m.log" ] && { echo "-- $m, SPECULA_CUDA_PDL=0"; grep -v '^$' "$OUT/bench_nopdl_$m.log" | tail -3; }
    [ -f "$OUT/bench_pdlall_$m.log" ] && { echo "-- $m, SPECULA_CUDA_PDL=all"; grep -v '^$' "$OUT/bench_pdlall_$m.log" | tail -3; }
done
echo '```'
CBW=$(sed -n 's/^timing: device copy \([0-9.]*\) GB\/s.*/\1/p' "$OUT/kernels.log" 2>/dev/null | head -1)
if [ -n "$CBW" ]; then
    echo
    echo "Roofline (copy bandwidth $CBW GB/s / bytes read per token; llama-1b: all weights but the"
    echo "embedding table, llama-100m: all weights, the tied table being the LM head):"
    python3 - "$CBW" "$MODELS" <<'PY' 2>/dev/null || true
import os, sys
bw = float(sys.argv[1]) * 1e9
for m, emb in (("l100", 0), ("l1b", 32000 * 2048 * 2)):
    p = os.path.join(sys.argv[2], m, "model.safetensors")
    if os.path.exists(p):
        b = os.path.getsize(p) - emb
        print(f"- {m}: {b / 1e9:.3f} GB per token -> roofline {bw / b:.0f} tok/s")
PY
fi
echo
echo "## Verify cost (eval of k+1 tokens with all logits rows / one decode step), context 128"
for v in l100 l1b g20b fast_l100 fast_l1b fast_g20b; do
    [ -f "$OUT/verify_$v.log" ] || continue
    echo
    echo "-- $v (verify_cost's precision: exact unless named fast)"
    echo
    grep -E '^\||^decode step|^1 token' "$OUT/verify_$v.log" 2>/dev/null || tail -3 "$OUT/verify_$v.log" 2>/dev/null
done
} > "$MD"
cat "$MD"
rm -rf "$MODELS"
