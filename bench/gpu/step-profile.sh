#!/usr/bin/env bash
# bench/gpu/step-profile.sh: what each kernel of one decode step costs, for several models
# side by side, on a GPU machine with a build packed by pack-perf-build.sh (carried as
# .devbuild.tar.xz, or .devbuild):
#
#   bench/gpu/step-profile.sh [--presets "gptoss-20b gptoss-120b"] [--precision fast|exact]
#
# For each make_random_model preset (checkpoints written to /dev/shm/prof-PRESET and kept
# for later calls on the same machine; the 120b needs about 65 GB there): ncu times every
# kernel of a three-step greedy run from a one-token prompt (graphs off, so each kernel is
# its own launch; clocks as found; caches left as the run leaves them, as in the real step),
# and bench/gpu/ncu_sum.py sums the last step per kernel and grid: launches, microseconds,
# DRAM GB/s. Comparing two presets' per-layer sums is how the gpt-oss-120b shape's routing
# (12 us more a layer than the 20b's in its gate_up launch) was found (2026-11-29,
# docs/BENCHMARKS_GPU.md, "The routing of many experts"). Logs and the CSVs (xz) in $OUT
# (default ./gpu-out); nothing is fetched.
set -u
cd "$(dirname "$0")/../.." || exit 1
PRESETS="gptoss-20b gptoss-120b" PREC=fast
while [ $# -gt 0 ]; do
    case $1 in
    --presets) PRESETS=$2; shift 2 ;;
    --precision) PREC=$2; shift 2 ;;
    *) echo "unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
    esac
done
. bench/gpu/devbuild.sh
devbuild_find || { echo "no packed build (.devbuild)"; exit 1; }
B=$DEVBUILD_BIN
export LD_LIBRARY_PATH=$DEVBUILD_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
for p in $PRESETS; do
    M=/dev/shm/prof-$p
    [ -f "$M/config.json" ] || "$B/make_random_model" "$M" --preset "$p" > "$OUT/make_$p.log" 2>&1 ||
        { echo "make_random_model $p failed ($OUT/make_$p.log)"; continue; }
    csv=/tmp/step-profile-$p.csv
    ncu_decode_step "$B/specula" "$M" "$PREC" "$csv" ||
        { cp "$csv.log" "$OUT/ncu_$p.log"; echo "ncu failed on $p ($OUT/ncu_$p.log)"; continue; }
    layers=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_hidden_layers"])' "$M/config.json")
    echo "== $p ($PREC, $layers layers): one decode step, ncu"
    python3 bench/gpu/ncu_sum.py "$csv" 3 | tee "$OUT/step_$p.txt"
    xz -c "$csv" > "$OUT/step_$p.csv.xz" && rm -f "$csv"
done
