#!/usr/bin/env bash
# bench/gpu/stalls.sh: where one kernel's warps wait, instruction by instruction, in a
# decode step of a random checkpoint, on a GPU machine, from a build packed by
# pack-perf-build.sh (carried as .devbuild.tar.xz, or .devbuild).
#   bench/gpu/stalls.sh KERNEL_REGEX [PRESET] [PRECISION] [SKIP] [N]
# PRESET: make_random_model's (default gptoss-20b; the checkpoint goes to /dev/shm and
# is kept for later calls on the same machine), PRECISION fast (default) or exact; SKIP
# launches of the kernel are passed over (default 48: past the prompt's pass and the
# first decode steps of a 24-layer model), then two are profiled (ncu --section
# SourceCounters, caches as the run leaves them, clocks as found, graphs off so that
# each kernel is its own launch). Writes $OUT/stalls.csv.xz (ncu's source page, SASS) and
# prints ncu_stalls.py's summary: the samples by stall reason and the N (default 20)
# instructions with the most. How it found the MXFP4 expert kernel's waiting prefetch:
# docs/BENCHMARKS_GPU.md, "The expert rows' stalls".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
K=${1:?usage: stalls.sh KERNEL_REGEX [PRESET] [PRECISION] [SKIP] [N]}
PRESET=${2:-gptoss-20b}; PREC=${3:-fast}; SKIP=${4:-48}; N=${5:-20}
. bench/gpu/devbuild.sh
devbuild_find || { echo "no packed build (.devbuild)"; exit 1; }
B=$DEVBUILD_BIN
export LD_LIBRARY_PATH=$DEVBUILD_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
M=/dev/shm/stalls-$PRESET
[ -d "$M" ] || "$B/make_random_model" "$M" --preset "$PRESET" > "$OUT/make_model.log" 2>&1 ||
    { echo "make_random_model failed: $OUT/make_model.log"; exit 1; }
REP=/tmp/stalls-$$
timeout 300 ncu --clock-control none --section SourceCounters -k "regex:$K" --launch-skip "$SKIP" \
    --launch-count 2 -o "$REP" env SPECULA_CUDA_GRAPHS=0 "$B/specula" generate -m "$M" --device cuda \
    --precision "$PREC" --tokens 1,5,7 -n 4 --temp 0 > "$OUT/stalls_ncu.log" 2>&1 ||
    { echo "ncu failed: $OUT/stalls_ncu.log"; tail -5 "$OUT/stalls_ncu.log"; exit 1; }
ncu --import "$REP.ncu-rep" --page source --csv --print-source sass > "$REP.csv" 2>> "$OUT/stalls_ncu.log" ||
    { echo "ncu --import failed: $OUT/stalls_ncu.log"; exit 1; }
xz -9 -c "$REP.csv" > "$OUT/stalls.csv.xz"
python3 bench/gpu/ncu_stalls.py "$REP.csv" "$N"
rc=$?
rm -f "$REP.ncu-rep" "$REP.csv"
exit $rc
