#!/usr/bin/env bash
# serve-load.sh: load test of `specula serve` with the random llama-100m BF16 checkpoint.
#   1. builds the checkpoint (build/make_random_model) plus a WordLevel tokenizer.json of
#      its 32000 ids (prompts are token ids; the text is "t123 t456 ...");
#   2. for 1, 2, 4, 8, 16 concurrent streams: aggregate decode tok/s, p50/p99 time to
#      first token and inter-token latency (bench/serve_load.mjs);
#   3. a soak: 8 streams for SOAK seconds, the server's RSS sampled every 10 s.
# usage: bench/serve-load.sh [BUILD_DIR] [SOAK_SECONDS]   (env: REQUESTS, MAX_TOKENS, PROMPT_LEN)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SOAK=${2:-180}
REQUESTS=${REQUESTS:-2}
MAX_TOKENS=${MAX_TOKENS:-64}
PROMPT_LEN=${PROMPT_LEN:-32}
DIR=${MODEL_DIR:-/tmp/specula-llama-100m}
if [ ! -f "$DIR/model.safetensors" ]; then
    "$BUILD/make_random_model" "$DIR" --preset llama-100m >/dev/null
fi
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
vocab = {f"t{i}": i for i in range(32000)}
tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
       "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
       "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}}
json.dump(tok, open(d + "/tokenizer.json", "w"))
PY
ERR=$(mktemp)
"$BUILD/specula" serve -m "$DIR" --port 0 --parallel 16 --queue 16 --ctx 512 2>"$ERR" &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -f "$ERR"' EXIT
for _ in $(seq 1 600); do grep -q "^listening on" "$ERR" && break; sleep 0.1; done
URL=$(grep -o "^listening on http://[^ ]*" "$ERR" | sed 's/^listening on //')
echo "server $URL (pid $PID), llama-100m BF16, $(nproc) CPUs"
node bench/serve_load.mjs "$URL" --concurrency 1 --requests 1 --max-tokens 8 >/dev/null # warm-up
echo "| streams | decode tok/s | TTFT p50 (ms) | TTFT p99 (ms) | ITL p50 (ms) | ITL p99 (ms) | requests | failed |"
echo "|---|---|---|---|---|---|---|---|"
for c in 1 2 4 8 16; do
    node bench/serve_load.mjs "$URL" --concurrency $c --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" \
        --prompt-len "$PROMPT_LEN" --json |
        python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"| {d['concurrency']} | {d['tok_s']} | {d['ttft_ms_p50']} | {d['ttft_ms_p99']} | {d['itl_ms_p50']} | {d['itl_ms_p99']} | {d['requests']} | {d['failures']} |\")"
done
if [ "$SOAK" -gt 0 ]; then
    rss() { awk '/^VmRSS/{print $2}' /proc/$PID/status; }
    echo "soak: 8 streams for ${SOAK}s; server RSS (KiB) every 10 s:"
    node bench/serve_load.mjs "$URL" --concurrency 8 --seconds "$SOAK" --max-tokens "$MAX_TOKENS" \
        --prompt-len "$PROMPT_LEN" >"$ERR.soak" &
    LP=$!
    samples=""
    while kill -0 $LP 2>/dev/null; do samples="$samples $(rss)"; sleep 10; done
    wait $LP
    cat "$ERR.soak"; rm -f "$ERR.soak"
    echo "rss:$samples"
fi
kill -TERM $PID
wait $PID && echo "server exited 0"
