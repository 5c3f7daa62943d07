#!/usr/bin/env bash
# bench/gpu/knob-ab.sh: one packed build, several settings of its environment knobs
# (SPECULA_CUDA_WGMMA=0, SPECULA_CUDA_ATTN_ROWS=22, ...), compared in one device call: the
# same bits under every setting, and the speed of each, alternating.
#
#   bench/gpu/knob-ab.sh [--rounds N] [--presets "llama-1b gptoss-20b"] [--tests "tc attention"]
#                        [--precision "fast exact"] [--ncu REGEX] SETTING [SETTING ...]
#
# A SETTING is one word of VAR=VALUE pairs joined by commas ("SPECULA_CUDA_WGMMA=0",
# "SPECULA_CUDA_ATTN_ROWS=22,SPECULA_CUDA_WGMMA=0"), or "-" for no knob at all. Runs from
# the repository root on the GPU machine with a build packed by pack-perf-build.sh
# (carried as .devbuild.tar.xz, or .devbuild):
#   1. the CUDA kernel tests named by --tests (default "tc attention": test_cuda_tc and
#      test_cuda_attention) under every setting;
#   2. random checkpoints of each preset in /dev/shm (kept for later calls);
#   3. greedy `generate` of a 300-token prompt, 30 tokens, fast and exact, under every
#      setting: the token ids must be the same for all (the settings are schedules), and
#      the same again drafting for itself (--draft self, default settings);
#   4. `specula bench` of a 512-token prefill and of a 128-token decode after a 128-token
#      prompt in each precision of --precision (default fast), the settings alternating,
#      N rounds (default 2);
#   5. with --ncu, ncu's per-kernel times of one 512-token prefill (first preset) under
#      every setting, for the kernels whose names match REGEX.
# Logs in $OUT (default ./gpu-out); the summary is printed last. Nothing is fetched.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
ROUNDS=2 PRESETS="llama-1b" TESTS="tc attention" NCU="" PRECS="fast" SETTINGS=()
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --presets) PRESETS=$2; shift 2 ;;
    --tests) TESTS=$2; shift 2 ;;
    --ncu) NCU=$2; shift 2 ;;
    --precision) PRECS=$2; shift 2 ;;
    -*) [ "$1" = - ] && { SETTINGS+=("-"); shift; continue; }
        echo "unknown option $1" >&2; exit 2 ;;
    *) SETTINGS+=("$1"); shift ;;
    esac
done
[ ${#SETTINGS[@]} -ge 1 ] || { echo "usage: knob-ab.sh [options] SETTING [SETTING ...]" >&2; exit 2; }
. bench/gpu/devbuild.sh
devbuild_find || { echo "no packed build (.devbuild)"; exit 1; }
B=$DEVBUILD_BIN S=$DEVBUILD_BIN/specula
export LD_LIBRARY_PATH=$DEVBUILD_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
SUM=$OUT/knob-ab.txt; : > "$SUM"
mkdir -p /work 2>/dev/null; [ -e /work/main ] || ln -sfn "$ROOT" /work/main 2>/dev/null
say() { echo "$*" | tee -a "$SUM"; }
# envof SETTING: the setting as env(1) arguments ("X=1" for none: env needs one)
envof() { [ "$1" = - ] && echo "SPECULA_KNOB_AB=1" || echo "${1//,/ }"; }
say "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); build $(cat .devbuild/COMMIT 2>/dev/null)"

for t in $TESTS; do
    for s in "${SETTINGS[@]}"; do
        log=$OUT/test_${t}_$(echo "$s" | tr -c 'A-Za-z0-9\n' _).log
        env $(envof "$s") timeout 300 "$B/tests/cuda/test_cuda_$t" > "$log" 2>&1
        say "test_cuda_$t [$s]: rc=$?"
    done
done

for p in $PRESETS; do
    d=/dev/shm/knob-$p
    [ -f "$d/config.json" ] || "$B/make_random_model" "$d" --preset "$p" > "$OUT/make_$p.log" 2>&1 ||
        { say "make_random_model $p failed"; continue; }
    TOK=$(seq -s, 1 300)
    for prec in fast exact; do
        first=""
        for s in "${SETTINGS[@]}"; do
            ids=$(env $(envof "$s") timeout 120 "$S" generate -m "$d" --device cuda --precision $prec \
                  --tokens "$TOK" -n 30 --temp 0 --json 2>/dev/null | grep -oE '"tokens": \[[^]]*\]')
            h=$(echo "$ids" | md5sum | cut -c1-12)
            [ -z "$first" ] && first=$h
            say "ids $p $prec [$s]: $h $([ -n "$ids" ] && [ "$h" = "$first" ] && echo same || echo DIFFER)"
        done
        # the model drafting for itself: every draft accepted, verify passes of k + 1 rows
        # between one-row steps (what caught the split argmax's scratch overlap)
        ids=$(timeout 120 "$S" generate -m "$d" --device cuda --precision $prec --tokens "$TOK" -n 30 \
              --temp 0 --draft self --json 2>/dev/null | grep -oE '"tokens": \[[^]]*\]')
        h=$(echo "$ids" | md5sum | cut -c1-12)
        say "ids $p $prec --draft self: $h $([ -n "$ids" ] && [ "$h" = "$first" ] && echo same || echo DIFFER)"
    done
    for r in $(seq "$ROUNDS"); do
        for prec in $PRECS; do
            for s in "${SETTINGS[@]}"; do
                pre=$(env $(envof "$s") "$S" bench -m "$d" --device cuda --precision $prec --prompt-len 512 \
                      --gen-len 16 --runs 2 --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["prefill_tok_s"])' 2>/dev/null)
                dec=$(env $(envof "$s") "$S" bench -m "$d" --device cuda --precision $prec --prompt-len 128 \
                      --gen-len 128 --runs 2 --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tok_s"])' 2>/dev/null)
                say "bench $p $prec round $r [$s]: pp512 ${pre:-?} tok/s, decode ${dec:-?} tok/s"
            done
        done
    done
done

if [ -n "$NCU" ]; then
    p=${PRESETS%% *}
    TOK=$(seq -s, 1 512)
    for s in "${SETTINGS[@]}"; do
        csv=$OUT/ncu_$(echo "$s" | tr -c 'A-Za-z0-9\n' _).csv
        env $(envof "$s") SPECULA_CUDA_GRAPHS=0 timeout 300 ncu --clock-control none \
            --kernel-name regex:"$NCU" --metrics gpu__time_duration.sum --csv \
            "$S" generate -m "/dev/shm/knob-$p" --device cuda --tokens "$TOK" -n 1 --temp 0 > "$csv" 2>&1
        say "ncu $p prefill 512 [$s]:"
        python3 bench/gpu/ncu_sum.py "$csv" 1 2>&1 | grep '^| k' | tee -a "$SUM"
    done
fi
echo; echo "== summary ($SUM)"; cat "$SUM"
