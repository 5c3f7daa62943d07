#!/usr/bin/env bash
# bench/gpu/compare-llama-cpp.sh: specula and llama.cpp on one GPU, on the same random
# checkpoints, alternating (issue 11's side-by-side table).
#
#   bench/gpu/compare-llama-cpp.sh LLAMA_BIN_DIR [--rounds N] [--presets "llama-1b gptoss-20b"]
#
# Runs from the repository root on the GPU machine with a build packed by
# bench/gpu/pack-perf-build.sh (carried as .devbuild.tar.xz, or .devbuild). LLAMA_BIN_DIR
# holds a CUDA build of llama.cpp's llama-bench and its shared libraries (build it
# yourself; it is not part of this repository). For each preset, make_random_model writes
# the checkpoint and its GGUF twin (same shapes, types and values: BF16, and MXFP4 experts
# for gpt-oss) to /dev/shm, kept for later calls. Each round, in turn: `llama-bench -ngl 99
# -fa 1 -p 512 -n 128` (pp512, tg128: decode from an empty context), specula's fast
# precision (decode of 128 tokens after a 128-token prompt; a 512-token prefill) and, for
# dense models, the exact precision's decode. Prints every measurement and the medians.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
LB_DIR=${1:?usage: compare-llama-cpp.sh LLAMA_BIN_DIR [--rounds N] [--presets LIST]}
shift
ROUNDS=3 PRESETS="llama-1b gptoss-20b"
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=$2 ;; --presets) PRESETS=$2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
. bench/gpu/devbuild.sh
devbuild_find || { echo "no packed build (.devbuild)"; exit 1; }
B=$DEVBUILD_BIN
LB=$LB_DIR/llama-bench
[ -x "$LB" ] || { echo "no $LB"; exit 1; }
SPL=$DEVBUILD_LIB
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1
R=$OUT/compare.tsv
: > "$R"
spec() { # spec DIR PREC PROMPT GEN -> "prefill decode"
    LD_LIBRARY_PATH=$SPL "$B/specula" bench -m "$1" --device cuda --precision "$2" \
        --prompt-len "$3" --gen-len "$4" --runs 2 --json 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["prefill_tok_s"], j["decode_tok_s"])'
}
for p in $PRESETS; do
    d=/dev/shm/cmp-$p
    [ -f "$d.gguf" ] || LD_LIBRARY_PATH=$SPL "$B/make_random_model" "$d" --preset "$p" --gguf "$d.gguf" \
        > "$OUT/make_$p.log" 2>&1 || { echo "make_random_model $p failed"; continue; }
    for r in $(seq "$ROUNDS"); do
        LD_LIBRARY_PATH=$LB_DIR "$LB" -m "$d.gguf" -ngl 99 -fa 1 -p 512 -n 128 -r 2 -o jsonl \
            2> "$OUT/llama_$p.err" | python3 -c '
import json,sys
for l in sys.stdin:
    j=json.loads(l); t="pp%d"%j["n_prompt"] if j["n_gen"]==0 else "tg%d"%j["n_gen"]
    print("'"$p"'\tllama.cpp\t%s\t%.1f\t%s" % (t, j["avg_ts"], j.get("build_commit","")))' >> "$R"
        read -r _ dec <<< "$(spec "$d" fast 128 128)"
        printf '%s\tspecula fast\ttg128 (after 128)\t%s\n' "$p" "$dec" >> "$R"
        read -r pre _ <<< "$(spec "$d" fast 512 16)"
        printf '%s\tspecula fast\tpp512\t%s\n' "$p" "$pre" >> "$R"
        case $p in llama*)
            read -r _ dec <<< "$(spec "$d" exact 128 128)"
            printf '%s\tspecula exact\ttg128 (after 128)\t%s\n' "$p" "$dec" >> "$R" ;;
        esac
    done
done
cat "$R"
python3 - "$R" <<'EOF'
import sys, statistics, collections
m = collections.OrderedDict()
for l in open(sys.argv[1]):
    f = l.rstrip("\n").split("\t")
    if len(f) >= 4 and f[3] not in ("", "None"):
        m.setdefault((f[0], f[1], f[2]), []).append(float(f[3]))
print("\nmedians (tok/s):")
for (p, eng, t), v in m.items():
    print("  %-12s %-14s %-18s %9.1f  (%s)" % (p, eng, t, statistics.median(v),
                                            ", ".join("%.1f" % x for x in v)))
EOF
