#!/usr/bin/env bash
# serve-spec.sh: the server's sampled speculation on a GPU, verified on the device against
# verified on the host (SPECULA_CUDA_SPEC=0: every draft and verify row read back), in one
# call, alternating. For each setting: a server with the draft model, STREAMS concurrent
# completions of MAX_TOKENS tokens at a temperature (fixed seeds, no logprobs), aggregate
# decode tok/s, the server's draft counters, and a hash of the answers (the same both
# ways: one rule, one arithmetic). Random checkpoints carry no tokenizer: one is written
# (a WordLevel vocabulary "t0".."tN" of the model's size) as bench/serve-load.sh does.
# usage: bench/gpu/serve-spec.sh SPECULA MODEL_DIR DRAFT_DIR [ROUNDS]
#   env: STREAMS (8), MAX_TOKENS (128), TEMP (1.0), TOP_P (1.0), DRAFT_K (4)
set -euo pipefail
SPECULA=$1 M=$2 D=$3 ROUNDS=${4:-2}
STREAMS=${STREAMS:-8} MAX_TOKENS=${MAX_TOKENS:-128} TEMP=${TEMP:-1.0} TOP_P=${TOP_P:-1.0}
DRAFT_K=${DRAFT_K:-4}
TMP=$(mktemp -d)
trap 'kill $SRV_PID 2>/dev/null || true; rm -rf "$TMP"' EXIT
for dir in "$M" "$D"; do
    [ -f "$dir/tokenizer.json" ] && continue
    python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
n = json.load(open(d + "/config.json"))["vocab_size"]
vocab = {f"t{i}": i for i in range(n)}
tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
       "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
       "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}}
json.dump(tok, open(d + "/tokenizer.json", "w"))
PY
done
PROMPT=$(python3 -c "print(' '.join(f't{(i * 37 + 11) % 997 + 3}' for i in range(64)))")
SRV_PID=
run() { # SPEC(0|1): one server, STREAMS requests at once; prints tok/s, counters, answers' hash
    local spec=$1 err=$TMP/srv.err
    SPECULA_CUDA_SPEC=$spec "$SPECULA" serve -m "$M" --draft "$D" --draft-k "$DRAFT_K" --device cuda \
        --parallel "$STREAMS" --port 0 --ctx 1024 2>"$err" &
    SRV_PID=$!
    for _ in $(seq 1 1200); do grep -q "^listening on" "$err" && break; sleep 0.1; done
    local url
    url=$(grep -o "^listening on http://[^ ]*" "$err" | sed 's/^listening on //')
    curl -s "$url/v1/completions" -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":8}" >/dev/null # warm-up
    local t0 t1 pids=""
    t0=$(date +%s.%N)
    for i in $(seq 1 "$STREAMS"); do
        curl -s "$url/v1/completions" -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":$MAX_TOKENS,\"temperature\":$TEMP,\"top_p\":$TOP_P,\"seed\":$i,\"ignore_eos\":true}" >"$TMP/a.$i" &
        pids="$pids $!"
    done
    wait $pids
    t1=$(date +%s.%N)
    local drafted accepted
    drafted=$(curl -s "$url/metrics" | awk '$1 == "specula_spec_decode_num_draft_tokens" {print $2}')
    accepted=$(curl -s "$url/metrics" | awk '$1 == "specula_spec_decode_num_accepted_tokens" {print $2}')
    kill -TERM $SRV_PID; wait $SRV_PID || true
    python3 - "$TMP" "$STREAMS" "$t0" "$t1" "$spec" "$drafted" "$accepted" <<'PY'
import hashlib, json, sys
d, n, t0, t1, spec, drafted, accepted = sys.argv[1:]
toks, texts = 0, []
for i in range(1, int(n) + 1):
    r = json.load(open(f"{d}/a.{i}"))
    toks += r["usage"]["completion_tokens"]
    texts.append(r["choices"][0]["text"])
dt = float(t1) - float(t0)
h = hashlib.sha1("\x00".join(texts).encode()).hexdigest()[:12]
where = "device" if spec == "1" else "host"
print(f"verified on the {where}: {toks} tokens in {dt:.2f} s = {toks / dt:.1f} tok/s; "
      f"drafted {drafted}, accepted {accepted}; answers {h}")
PY
}
echo "$STREAMS streams x $MAX_TOKENS tokens, T $TEMP top-p $TOP_P, draft k $DRAFT_K: $(basename "$M") / $(basename "$D")"
for _ in $(seq 1 "$ROUNDS"); do
    run 0
    run 1
done
