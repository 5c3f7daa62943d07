#!/usr/bin/env bash
# compare-llama-cpp.sh: specula vs llama.cpp on the same random checkpoint, alternating.
#
#   bench/compare-llama-cpp.sh LLAMA_BUILD_DIR SPECULA_BUILD_DIR MODEL_DIR MODEL.gguf \
#       [--rounds N] [--prompt P] [--gen G] [--threads T] [--precision fast|exact]
#
# MODEL_DIR and MODEL.gguf come from `make_random_model DIR --preset ... --gguf FILE`
# (same shapes, types and values). Each round measures, in alternating order (ABAB...):
# the DRAM read bandwidth (bench_cpu membw), `specula bench` (prefill P tokens, then G
# greedy decode steps) and `llama-bench -p P -n G`. Prints min / median / max of each,
# the ratio of the medians, and decode as a fraction of the DRAM roofline: median
# bandwidth / bytes of weights one decode step reads (every matrix but the embedding
# table; for MoE the shared part plus top-k of the experts).
# llama.cpp is not part of this repository: build it yourself and pass its build dir.
set -euo pipefail
if [ $# -lt 4 ]; then
    sed -n 2,15p "$0"; exit 2
fi
LLAMA=$1 SPB=$2 MODEL=$3 GGUF=$4; shift 4
ROUNDS=5 P=128 G=32 T=2 PREC=fast
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=$2 ;; --prompt) P=$2 ;; --gen) G=$2 ;; --threads) T=$2 ;;
    --precision) PREC=$2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
LB=$LLAMA/bin/llama-bench
[ -x "$LB" ] || { echo "no $LB" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run_specula() {
    SPECULA_THREADS=$T "$SPB/specula" bench -m "$MODEL" --prompt-len "$P" --gen-len "$G" --runs 1 \
        --precision "$PREC" --json >> "$OUT/specula.jsonl"
}
run_llama() {
    "$LB" -m "$GGUF" -p "$P" -n "$G" -t "$T" -r 1 -o jsonl 2>/dev/null >> "$OUT/llama.jsonl"
}
for r in $(seq 1 "$ROUNDS"); do
    "$SPB/bench_cpu" membw --threads "$T" --mib 512 >> "$OUT/membw.txt"
    if [ $((r % 2)) -eq 1 ]; then run_specula; run_llama; else run_llama; run_specula; fi
    echo "round $r/$ROUNDS done" >&2
done
python3 - "$OUT" "$MODEL" "$P" "$G" "$T" "$PREC" <<'PY'
import json, os, re, statistics, struct, sys
out, model, P, G, T, prec = sys.argv[1:]
bw = [float(re.search(r"([\d.]+) GB/s", l).group(1)) for l in open(out + "/membw.txt")]
sp = [json.loads(l) for l in open(out + "/specula.jsonl")]
ll = [json.loads(l) for l in open(out + "/llama.jsonl")]
lp = [x["avg_ts"] for x in ll if x["n_prompt"] > 0]
lg = [x["avg_ts"] for x in ll if x["n_gen"] > 0]
sp_p = [x["prefill_tok_s"] for x in sp]
sp_g = [x["decode_tok_s"] for x in sp]
# bytes one decode step reads
cfg = json.load(open(model + "/config.json"))
def st_tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items()}
sizes = {}
for fn in os.listdir(model):
    if fn.endswith(".safetensors"):
        sizes.update(st_tensors(os.path.join(model, fn)))
total = 0.0
tied = cfg.get("tie_word_embeddings", False)
k_act = cfg.get("num_experts_per_tok", 0); n_exp = cfg.get("num_local_experts", 0)
for name, b in sizes.items():
    if name == "model.embed_tokens.weight" and not tied:
        continue  # one row per token
    if ".experts." in name and n_exp:
        b = b * k_act / n_exp
    total += b
def s3(v): return "%.1f / %.1f / %.1f" % (min(v), statistics.median(v), max(v))
bwm = statistics.median(bw)
roof = bwm * 1e9 / total
print("model %s, %s threads, precision %s, %d rounds; bytes/decode step %.1f MB" % (model, T, prec, len(sp), total / 1e6))
print("DRAM read bandwidth (GB/s, min/median/max): %s" % s3(bw))
print("| metric | specula (min / median / max) | llama.cpp (min / median / max) | ratio of medians | specula roofline | llama.cpp roofline |")
print("|---|---|---|---|---|---|")
print("| prefill %s | %s | %s | %.2f | | |" % (P, s3(sp_p), s3(lp), statistics.median(sp_p) / statistics.median(lp)))
print("| decode %s | %s | %s | %.2f | %.0f%% | %.0f%% |" % (G, s3(sp_g), s3(lg), statistics.median(sp_g) / statistics.median(lg),
      100 * statistics.median(sp_g) / roof, 100 * statistics.median(lg) / roof))
print("decode roofline at the median bandwidth: %.1f tok/s" % roof)
PY
