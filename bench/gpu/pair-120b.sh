#!/usr/bin/env bash
# bench/gpu/pair-120b.sh: the seeds' system on one GPU — a gpt-oss-120b-shaped target
# drafting with a gpt-oss-20b-shaped model (make_random_model presets: exact hub
# dimensions, MXFP4 experts, shared vocabulary; random weights), both resident on one GPU.
#
# Runs from the repository root on the GPU machine with a build packed by
# pack-perf-build.sh (carried as .devbuild.tar.xz, unpacked into .devbuild). The CLI's
# default precision (fast) throughout; the 120b is also benched in exact. Needs about 80 GiB of GPU memory
# (an H200; on an 80 GB H100 it reports that they do not fit) and 75 GiB of /dev/shm (the
# checkpoints are written to memory: the one-GPU machines' disks are 64 GiB).
# Shows: plain tok/s of each model, speculative greedy output == plain greedy output token
# for token, `specula check --draft` (the draft's ops inside speculation equal its
# standalone run), verify cost, memory. Random models rarely agree, so acceptance is near
# zero: the run checks losslessness and cost, not speedup. Logs: $OUT/pair.log.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
. bench/gpu/devbuild.sh
devbuild_find || { echo "no packed build (.devbuild)"; exit 1; }
B=$DEVBUILD_BIN
export LD_LIBRARY_PATH=$DEVBUILD_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
S=$B/specula
M=/dev/shm/specula-pair
step() { local name=$1 lim=$2; shift 2; echo "== $name: $*"; local t0; t0=$(date +%s);
         timeout "$lim" "$@"; local rc=$?; echo "== $name rc=$rc ($(( $(date +%s) - t0 )) s)"; }
{
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
df -h /dev/shm; free -g | head -2
mkdir -p $M
step make_120b 200 $B/make_random_model $M/g120b --preset gptoss-120b
step make_20b 60 $B/make_random_model $M/g20b --preset gptoss-20b
du -sb $M/g120b/model.safetensors $M/g20b/model.safetensors
P=$(seq -s, 100 40 2620)   # 64 prompt ids
step plain 150 sh -c "$S generate -m $M/g120b --device cuda --tokens $P -n 32 > $OUT/plain.txt"
step spec 200 sh -c "$S generate -m $M/g120b --draft $M/g20b --device cuda --tokens $P -n 32 > $OUT/spec.txt"
if cmp -s $OUT/plain.txt $OUT/spec.txt && [ -s $OUT/plain.txt ]; then echo "spec == plain: yes"; else echo "spec == plain: NO"; fi
step check_pair 240 $S check -m $M/g120b --draft $M/g20b --device cuda --tokens $P
step bench_120b 150 $S bench -m $M/g120b --device cuda --prompt-len 128 --gen-len 32 --runs 1
step bench_120b_exact 150 $S bench -m $M/g120b --device cuda --precision exact --prompt-len 128 --gen-len 32 --runs 1
step bench_20b 60 $S bench -m $M/g20b --device cuda --prompt-len 128 --gen-len 32 --runs 1
step verify_120b 120 $B/verify_cost -m $M/g120b --device cuda --precision fast --ctx 128 --reps 3 --kmax 4
nvidia-smi --query-gpu=memory.used --format=csv
} > "$OUT/pair.log" 2>&1
rm -rf $M
grep -E '^== .* rc=|spec == plain|tok/s|MiB' "$OUT/pair.log" | head -40
