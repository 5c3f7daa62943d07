# bench/gpu/devbuild.sh: sourced by the GPU scripts (perf-run.sh, stalls.sh, pair-120b.sh,
# compare-llama-cpp.sh), from the repository root, to find the build packed by
# pack-perf-build.sh: carried as .devbuild.tar.xz (unpacked here into .devbuild, once) or
# as .devbuild (devbuild_find), and to time one decode step's kernels with ncu
# (ncu_decode_step, below). devbuild_find: on success sets DEVBUILD_BIN (the build directory
# inside the pack) and DEVBUILD_LIB (its shared libraries) and returns 0; returns 1 when there
# is no pack.
devbuild_find() {
    if [ ! -d .devbuild ] && [ -f .devbuild.tar.xz ]; then
        mkdir -p .devbuild && tar -xJf .devbuild.tar.xz -C .devbuild
    fi
    DEVBUILD_BIN=$(ls -d .devbuild/build-cuda .devbuild/build 2>/dev/null | head -1)
    DEVBUILD_LIB=$PWD/.devbuild/lib
    [ -n "$DEVBUILD_BIN" ]
}

# ncu_decode_step SPECULA MODEL PRECISION CSV [REGEX]: ncu's time and DRAM bytes of every
# kernel (or those whose names match REGEX) of a three-step greedy run from a one-token
# prompt, graphs off so each kernel is its own launch, clocks and caches as the run leaves
# them; the CSV is what bench/gpu/ncu_sum.py CSV 3 sums (the last step). Returns ncu's
# status; its messages go to CSV.log.
ncu_decode_step() {
    local s=$1 m=$2 prec=$3 csv=$4 re=${5:-}
    SPECULA_CUDA_GRAPHS=0 timeout 300 ncu --clock-control none --cache-control none \
        ${re:+--kernel-name regex:"$re"} --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
        "$s" generate -m "$m" --device cuda --precision "$prec" --tokens 1 -n 3 --temp 0 \
        > "$csv" 2> "$csv.log"
}
