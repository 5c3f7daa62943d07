#!/usr/bin/env bash
# bench/gpu/build-ab.sh: a changed build against the build before it, in one device call:
# the same greedy ids, the kernel tests and model suites on the GPU, and the speed of each,
# alternating. Both builds come packed in one tarball: here, save the pack of the build
# before the change (`cp -r .devbuild /tmp/old-pack` after pack-perf-build.sh), change the
# code, then `WITH_OLD=/tmp/old-pack bench/gpu/pack-perf-build.sh`; carry .devbuild.tar.xz
# (and this tree) and run from the repository root on the GPU machine:
#
#   bench/gpu/build-ab.sh [--rounds N] [--presets "llama-1b gptoss-20b"]
#                         [--precision "exact fast"] [--tests "kernels tc moe_tc attention"]
#                         [--suites "parity batch_invariance spec batch_verify"]
#                         [--prompt-len N] [--ids-only] [--also "NAME ..."] [--ncu REGEX]
#
#   1. the CUDA kernel tests (--tests) and the model suites on the GPU (--suites), new build
#      (and the kernel tests of each --also build);
#   2. random checkpoints of each preset in /dev/shm (kept for later calls);
#   3. greedy `generate` of a 300-token prompt, 40 tokens, each precision: old and new ids
#      (a schedule change must keep them; a numerics change says so), and the new build
#      drafting for itself (must equal its plain ids);
#   4. `specula bench --prompt-len N (128) --gen-len 128 --runs 2`, the builds alternating,
#      N rounds (default 3): decode tok/s and the roofline fraction, prefill tok/s;
#   5. with --ncu, ncu's times of the kernels matching REGEX in one decode step (graphs off,
#      the first preset and precision), each build.
# --also names more builds packed beside the two (pack-perf-build.sh's ALSO="NAME=DIR ..."
# puts them in .devbuild/NAME): variants of one change, measured in the same call; each
# gets the new build's steps 3-5 (ids against old, benches in the same rotation).
# Logs in $OUT (default ./gpu-out); the summary is printed last. Nothing is fetched.
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
ROUNDS=3 PRESETS="llama-1b gptoss-20b" PRECS="exact fast" TESTS="kernels tc moe_tc attention"
SUITES="parity batch_invariance spec batch_verify" PLEN=128 IDS_ONLY=0 ALSO="" NCU=""
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --presets) PRESETS=$2; shift 2 ;;
    --precision) PRECS=$2; shift 2 ;;
    --tests) TESTS=$2; shift 2 ;;
    --suites) SUITES=$2; shift 2 ;;
    --prompt-len) PLEN=$2; shift 2 ;;
    --ids-only) IDS_ONLY=1; shift ;;
    --also) ALSO=$2; shift 2 ;;
    --ncu) NCU=$2; shift 2 ;;
    *) echo "unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
    esac
done
. bench/gpu/devbuild.sh
devbuild_find || { echo "no packed build (.devbuild)"; exit 1; }
declare -A BIN LIB
BIN[new]=$DEVBUILD_BIN LIB[new]=$DEVBUILD_LIB
BIN[old]=$PWD/.devbuild/old/$(basename "$DEVBUILD_BIN") LIB[old]=$PWD/.devbuild/old/lib
[ -x "${BIN[old]}/specula" ] || { echo "no old build in .devbuild/old (pack with WITH_OLD=DIR)"; exit 1; }
for a in $ALSO; do
    case $a in old|new|lib) echo "--also $a: a name other than old, new or lib" >&2; exit 2 ;; esac
    BIN[$a]=$PWD/.devbuild/$a/$(basename "$DEVBUILD_BIN") LIB[$a]=$PWD/.devbuild/$a/lib
    [ -x "${BIN[$a]}/specula" ] || { echo "no build in .devbuild/$a (pack with ALSO=\"$a=DIR\")"; exit 1; }
done
BUILDS="old new $ALSO"
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
SUM=$OUT/build-ab.txt; : > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }
# on BUILD CMD...: CMD run with BUILD's shared libraries
on() { local v=$1; shift; LD_LIBRARY_PATH=${LIB[$v]}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }
say "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
say "old: $(tr '\n' ' ' < .devbuild/old/COMMIT 2>/dev/null)  new: $(tr '\n' ' ' < .devbuild/COMMIT 2>/dev/null)"
for a in $ALSO; do say "$a: $(tr '\n' ' ' < ".devbuild/$a/COMMIT" 2>/dev/null)"; done

B=${BIN[new]}
for t in $TESTS; do
    on new timeout 300 "$B/tests/cuda/test_cuda_$t" > "$OUT/test_cuda_$t.log" 2>&1
    say "test_cuda_$t: rc=$? $(grep -E 'PASSED|FAILED' "$OUT/test_cuda_$t.log" | tail -1)"
done
for a in $ALSO; do
    for t in $TESTS; do
        on "$a" timeout 300 "${BIN[$a]}/tests/cuda/test_cuda_$t" > "$OUT/test_cuda_${t}_$a.log" 2>&1
        say "test_cuda_$t ($a): rc=$? $(grep -E 'PASSED|FAILED' "$OUT/test_cuda_${t}_$a.log" | tail -1)"
    done
done
for t in $SUITES; do
    SPECULA_TEST_DEVICE=cuda on new timeout 300 "$B/tests/test_$t" > "$OUT/test_$t.log" 2>&1
    say "test_$t (cuda): rc=$? $(grep -E 'PASSED|FAILED' "$OUT/test_$t.log" | tail -1)"
done

TOK=$(seq -s, 1 300)
ids() { # ids BUILD DIR PRECISION [ARGS...]: a hash of the greedy ids ("FAILED": no ids)
    local v=$1 d=$2 p=$3 t; shift 3
    t=$(on "$v" timeout 180 "${BIN[$v]}/specula" generate -m "$d" --device cuda --precision "$p" \
        --tokens "$TOK" -n 40 --ignore-eos --temp 0 --json "$@" 2>/dev/null |
        grep -oE '"tokens": \[[^]]*\]')
    [ -n "$t" ] && echo "$t" | md5sum | cut -c1-12 || echo FAILED
}
same() { [ "$1" != FAILED ] && [ "$1" = "$2" ] && echo same || echo DIFFER; } # same ID1 ID2
bench() { # bench BUILD DIR PRECISION: "decode roofline prefill"
    on "$1" timeout 180 "${BIN[$1]}/specula" bench -m "$2" --device cuda --precision "$3" \
        --prompt-len "$PLEN" --gen-len 128 --runs 2 --json 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print("decode %.1f tok/s (%.1f%% of the roofline), prefill %.0f tok/s" % (d["decode_tok_s"], 100 * d.get("roofline_fraction", 0), d["prefill_tok_s"]))' 2>/dev/null
}
for p in $PRESETS; do
    d=/dev/shm/ab-$p
    [ -f "$d/config.json" ] || on new "$B/make_random_model" "$d" --preset "$p" > "$OUT/make_$p.log" 2>&1 ||
        { say "make_random_model $p failed ($OUT/make_$p.log)"; continue; }
    for prec in $PRECS; do
        o=$(ids old "$d" "$prec") n=$(ids new "$d" "$prec") s=$(ids new "$d" "$prec" --draft self --draft-k 4)
        say "ids $p $prec: old $o new $n ($(same "$o" "$n")), new --draft self $s ($(same "$s" "$n"))"
        for a in $ALSO; do
            x=$(ids "$a" "$d" "$prec")
            say "ids $p $prec: $a $x ($([ "$(same "$x" "$o")" = same ] && echo "same as old" || echo "DIFFER from old"))"
        done
    done
    [ "$IDS_ONLY" = 1 ] && continue
    for r in $(seq "$ROUNDS"); do
        for prec in $PRECS; do
            for v in $BUILDS; do say "bench $p $prec round $r $v: $(bench $v "$d" "$prec")"; done
        done
    done
done
if [ -n "$NCU" ]; then
    p=${PRESETS%% *} prec=${PRECS%% *}
    for v in $BUILDS; do
        csv=$OUT/ncu_$v.csv
        on "$v" ncu_decode_step "${BIN[$v]}/specula" "/dev/shm/ab-$p" "$prec" "$csv" "$NCU"
        say "ncu $p $prec, one decode step, $v (kernel | grid | launches | us | us each | GB/s):"
        python3 bench/gpu/ncu_sum.py "$csv" 3 2>&1 | grep '^| k' | tee -a "$SUM"
    done
fi
echo; echo "== summary ($SUM)"; cat "$SUM"
