#!/usr/bin/env bash
# bench/gpu/gemm-ab.sh: old against new for a change of the fast-precision products, in one
# device call: two packed builds (pack-perf-build.sh), carried as .devbuild.tar.xz (new) and
# .devbuild-base.tar.xz (old), or the files NEW_PACK and OLD_PACK, alternate on one GPU.
# Runs in the repository root (GEMM_AB_ROOT, else the script's ../..).
#   1. new: test_cuda_tc, tc_speed (every GEMM tile at 512 tokens);
#   2. a random llama-1b; `specula bench --prompt-len 512` old, new, old, new;
#   3. greedy `generate` of a 300-token prompt (24 tokens, fast): old == new, and new with
#      --draft self == new plain (token ids);
#   4. ncu kernel times of one new 512-token prefill (GEMM_AB_NCU=0: skipped);
#   5. new, in parallel: test_cuda_kernels, compute-sanitizer memcheck / racecheck of
#      test_cuda_tc and the model suites on the GPU (GEMM_AB_FULL=0: skipped).
# Every step has a timeout; logs in $OUT, summary printed last.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
NEW_PACK=$(realpath "${NEW_PACK:-$HERE/../../.devbuild.tar.xz}")
OLD_PACK=$(realpath "${OLD_PACK:-$HERE/../../.devbuild-base.tar.xz}")
cd "${GEMM_AB_ROOT:-$HERE/../..}"
ROOT=$PWD
DEST=${OUT:-$ROOT/gpu-out}; mkdir -p "$DEST"
OUT=$(mktemp -d)   # the logs; $DEST gets summary.txt and logs.tgz
for p in /work/main /work/wt-gemm /work/wt/gpuperf; do
    mkdir -p "$(dirname "$p")" 2>/dev/null; [ -e "$p" ] || ln -sfn "$ROOT" "$p" 2>/dev/null
done
rm -rf .devbuild .devbuild-base && mkdir -p .devbuild .devbuild-base
tar -xJf "$NEW_PACK" -C .devbuild && tar -xJf "$OLD_PACK" -C .devbuild-base
N=.devbuild/build-cuda; O=.devbuild-base/build-cuda
new="env LD_LIBRARY_PATH=$ROOT/.devbuild/lib"
old="env LD_LIBRARY_PATH=$ROOT/.devbuild-base/lib"
step() { local name=$1 lim=$2; shift 2; local t0; t0=$(date +%s)
    timeout -k 5 "$lim" "$@" > "$OUT/$name.log" 2>&1
    echo "$name: rc=$? ($(( $(date +%s) - t0 )) s)" >> "$OUT/status.txt"; }
: > "$OUT/status.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$OUT/status.txt"
M=/dev/shm/gemm-ab; mkdir -p $M
( $new $N/make_random_model $M/l1b --preset llama-1b > "$OUT/make.log" 2>&1 ) &
MK=$!
step tc 120 $new $N/tests/cuda/test_cuda_tc
step tc_speed 90 $new $N/tc_speed --reps 20
wait $MK
for i in 1 2; do
    step "bench_old_$i" 60 $old $O/specula bench -m $M/l1b --device cuda --prompt-len 512 --gen-len 16 --runs 3
    step "bench_new_$i" 60 $new $N/specula bench -m $M/l1b --device cuda --prompt-len 512 --gen-len 16 --runs 3
done
TOK=$(python3 -c "import random; random.seed(11); print(','.join(str(random.randrange(3, 32000)) for _ in range(300)))")
G="generate -m $M/l1b --device cuda --precision fast --tokens $TOK -n 24 --temp 0 --ignore-eos --json"
step gen_old 60 $old $O/specula $G
step gen_new 60 $new $N/specula $G
step gen_self 60 $new $N/specula $G --draft self
python3 - "$OUT" > "$OUT/gen.txt" 2>&1 <<'PY'
import json, re, sys
def toks(name):
    t = open(f"{sys.argv[1]}/{name}.log").read()
    m = re.search(r'"tokens"\s*:\s*\[([^\]]*)\]', t)
    return m.group(1).replace(' ', '') if m else None
o, n, s = toks("gen_old"), toks("gen_new"), toks("gen_self")
print("generate old:", o); print("generate new:", n); print("generate new --draft self:", s)
print("old == new:", o is not None and o == n, "; self == plain:", n is not None and n == s)
PY
if [ "${GEMM_AB_NCU:-1}" = 1 ]; then
    step ncu 120 $new ncu --clock-control none --metrics gpu__time_duration.sum \
        $N/specula bench -m $M/l1b --device cuda --prompt-len 512 --gen-len 1 --runs 1
    python3 - "$OUT/ncu.log" > "$OUT/ncu.txt" 2>&1 <<'PY'
import re, sys, collections
t = collections.defaultdict(float); n = collections.Counter(); k = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s+(\S[^(]*?)(?:<[^>]*>)?\(", line)
    if m and ("Context" in line or "Stream" in line):
        k = m.group(1).strip()
    m = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)", line)
    if m and k:
        v = float(m.group(2).replace(",", "")); u = m.group(1)
        t[k] += v * {"nsecond": 1e-3, "usecond": 1, "msecond": 1e3}.get(u, 1); n[k] += 1
for k, v in sorted(t.items(), key=lambda a: -a[1]):
    print(f"{v / 1e3:9.3f} ms  {n[k]:5d}  {k}")
print(f"{sum(t.values()) / 1e3:9.3f} ms  total (all launches of the run, prefill and decode)")
PY
    MET=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
    MET=$MET,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
    MET=$MET,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
    for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected; do
        MET=$MET,smsp__warp_issue_stalled_${r}_per_warp_active.pct
    done
    step ncu_tc 150 $new ncu --clock-control none -k regex:k_tc_gemm -c 60 --csv --metrics $MET $N/tc_speed --reps 1
    python3 - "$OUT/ncu_tc.log" > "$OUT/ncu_tc.txt" 2>&1 <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1], errors="replace") if l.startswith('"'))]
h = rows[0]; ix = {k: h.index(k) for k in ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Value")}
by = collections.OrderedDict()
for r in rows[1:]:
    by.setdefault((r[ix["ID"]], r[ix["Kernel Name"]].split("(")[0], r[ix["Grid Size"]]), {})[r[ix["Metric Name"]]] = r[ix["Metric Value"]]
short = lambda m: m.replace("smsp__warp_issue_stalled_", "st_").replace("_per_warp_active.pct", "").replace("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "hmma%").replace("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "bankconf").replace("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "ldwaves").replace("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue%").replace("sm__warps_active.avg.pct_of_peak_sustained_active", "warps%").replace("gpu__time_duration.sum", "ns")
for (i, k, g), m in by.items():
    print(i, k, g, " ".join(f"{short(a)}={b}" for a, b in m.items()))
PY
fi
# the GEMM's SASS and its instruction mix (GEMM_AB_SASS: the kernel's mangled name)
SASS_FN=${GEMM_AB_SASS:-_Z9k_tc_gemmILi2ELi2ELi2EEv6tc_setPKhl}
cuobjdump -sass -fun "$SASS_FN" .devbuild/lib/libspecula_cuda.so > "$OUT/sass.txt" 2>&1
python3 - "$OUT/sass.txt" > "$OUT/sass_mix.txt" 2>&1 <<'PY'
import re, sys, collections
c = collections.Counter()
for l in open(sys.argv[1]):
    m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", l)
    if m:
        c[m.group(1)] += 1
print(sum(c.values()), "instructions;", " ".join(f"{k}:{v}" for k, v in c.most_common(40)))
PY
if [ "${GEMM_AB_FULL:-1}" = 1 ]; then   # correctness only, in parallel (nothing timed now)
    step kernels 200 $new $N/tests/cuda/test_cuda_kernels &
    step attention 200 $new $N/tests/cuda/test_cuda_attention &
    step memcheck 200 $new compute-sanitizer --tool memcheck --error-exitcode 9 $N/tests/cuda/test_cuda_tc &
    step racecheck 200 $new compute-sanitizer --tool racecheck --error-exitcode 9 $N/tests/cuda/test_cuda_tc &
    for t in parity batch_invariance batch_sessions spec; do
        SPECULA_TEST_DEVICE=cuda SPECULA_THREADS=4 step "suite_$t" 200 $new $N/tests/test_$t &
    done
    wait
fi
{
echo "== status"; cat "$OUT/status.txt"
echo "== test_cuda_tc"; grep -E "^tc:|PASSED|FAILED|ERROR" "$OUT/tc.log"
echo "== tc_speed"; grep -E "^tc " "$OUT/tc_speed.log"
echo "== bench pp512"; for f in "$OUT"/bench_*.log; do echo "-- $(basename "$f" .log)"; grep -v '^$' "$f" | tail -4; done
echo "== generate"; cat "$OUT/gen.txt"
[ -f "$OUT/ncu.txt" ] && { echo "== ncu (kernel times)"; head -25 "$OUT/ncu.txt"; }
echo "== SASS mix of $SASS_FN"; cat "$OUT/sass_mix.txt"
[ -f "$OUT/ncu_tc.txt" ] && { echo "== ncu of tc_speed's GEMMs"; grep -v "^$" "$OUT/ncu_tc.txt" | awk 'NR % 3 == 0' | head -40; }
for f in kernels memcheck racecheck suite_parity suite_batch_invariance suite_batch_sessions suite_spec; do
    [ -f "$OUT/$f.log" ] && { echo "== $f"; grep -E "PASSED|FAILED|ERROR SUMMARY|errors|hazard" "$OUT/$f.log" | tail -4; }
done
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
cp "$OUT/summary.txt" "$DEST/" && tar -czf "$DEST/logs.tgz" -C "$OUT" .
rm -rf $M "$OUT"
