#!/usr/bin/env bash
# Speculative decoding inside the server's batch, driven by curl: a plain server and a
# server drafting with the bundled draft model (models/default-draft) answer the same 6
# concurrent greedy requests (completions and chat, with logprobs) with identical text,
# log-probabilities and usage; so does an n-gram server. The plain and the draft-model
# servers reproduce seeded sampled requests under concurrency, and the plain server's
# sampled requests without logprobs (the token drawn in the pass: on a GPU, on the device)
# equal the same requests with logprobs (drawn after the logits come back); so do the
# draft-model and n-gram servers' sampled requests (without logprobs their drafts are
# verified on the device on a GPU, with logprobs on the host). The draft-model server counts
# what it drafted.
# Labelled 'threads': scripts/test.sh also runs it under ThreadSanitizer.
# usage: serve_draft.sh SPECULA FIXTURES
set -u
SPECULA=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M=$ROOT/models/default
D=$ROOT/models/default-draft
TMP=$(mktemp -d)
trap 'kill $SRV_PID 2>/dev/null; [ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT
. "$ROOT/tests/server/serve_lib.sh"
fails=0
check() { # description, command...
    local d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
N_TOK=${SERVE_DRAFT_TOKENS:-32}
# request I [EXTRA_JSON]: the body of request I (even: completion, odd: chat); LP=0 asks
# for no logprobs (then only the token comes back from a pass, drawn on a GPU if any)
LP=1
body() {
    local i=$1 extra=${2:-} lp_c=',"logprobs":2' lp_m=',"logprobs":true,"top_logprobs":2'
    [ "$LP" = 1 ] || lp_c= lp_m=
    local prompts=('def read_config(path):' 'class Queue:' 'import os\nimport sys\n' \
                   'In the beginning' 'for i in range(10):' 'And the LORD said')
    if [ $((i % 2)) = 0 ]; then
        echo "{\"prompt\":\"${prompts[$i]}\",\"max_tokens\":$N_TOK,\"temperature\":0$lp_c$extra}"
    else
        echo "{\"messages\":[{\"role\":\"user\",\"content\":\"${prompts[$i]}\"}],\"max_tokens\":$N_TOK,\"temperature\":0$lp_m$extra}"
    fi
}
path() { [ $(($1 % 2)) = 0 ] && echo /v1/completions || echo /v1/chat/completions; }
# send TAG [EXTRA_JSON] [serial]: the 6 requests, concurrently unless "serial"
send() {
    local tag=$1 extra=${2:-} mode=${3:-} pids=""
    for i in 0 1 2 3 4 5; do
        if [ "$mode" = serial ]; then
            curl -s "$URL$(path $i)" -d "$(body $i "$extra")" >"$TMP/$tag.$i"
        else
            curl -s "$URL$(path $i)" -d "$(body $i "$extra")" >"$TMP/$tag.$i" &
            pids="$pids $!"
        fi
    done
    [ -z "$pids" ] || wait $pids
}
# same A B [text]: the 6 answers agree in text, logprobs, finish reason and usage (with
# "text": all but the logprobs)
same() {
    python3 - "$TMP" "$1" "$2" "${3:-all}" <<'PY'
import json, sys
d, a, b, what = sys.argv[1:]
def key(path):
    r = json.load(open(path))
    c = r["choices"][0]
    text = c["text"] if "text" in c else c["message"]["content"]
    return [text, c["logprobs"] if what == "all" else None, c["finish_reason"], r["usage"]]
bad = [i for i in range(6) if key(f"{d}/{a}.{i}") != key(f"{d}/{b}.{i}")]
if bad:
    print(f"  requests {bad} differ, e.g. {key(f'{d}/{a}.{bad[0]}')[0]!r} vs {key(f'{d}/{b}.{bad[0]}')[0]!r}")
sys.exit(1 if bad else 0)
PY
}
metric() { curl -s "$URL/metrics" | awk -v n="$1" '$1 == n {print $2}'; }

SAMPLED=',"temperature":0.9,"top_p":0.95,"seed":7'
start_server plain -m "$M" --parallel 4 --ctx 512 || exit 1
send plain
send plain_sampled_lp "$SAMPLED" serial
LP=0
send plain_sampled_serial "$SAMPLED" serial
send plain_sampled_conc "$SAMPLED"
LP=1
stop_server
check "plain server, sampled without logprobs: concurrent == one at a time" \
    same plain_sampled_serial plain_sampled_conc
check "plain server, sampled: drawn in the pass (no logprobs) == after the logits (logprobs)" \
    same plain_sampled_serial plain_sampled_lp text

start_server draft -m "$M" --draft "$D" --draft-k 4 --parallel 4 --ctx 512 || exit 1
check "draft model: the server says it drafts" grep -q 'drafts from the draft model' "$SRV_ERR"
send draft
check "draft model: 6 concurrent greedy requests == plain server" same plain draft
DRAFTED=$(metric specula_spec_decode_num_draft_tokens)
ACCEPTED=$(metric specula_spec_decode_num_accepted_tokens)
echo "     drafted $DRAFTED, accepted $ACCEPTED"
check "draft model: drafts proposed, some accepted, some rejected" \
    bash -c "[ '${DRAFTED:-0}' -gt 0 ] && [ '${ACCEPTED:-0}' -gt 0 ] && [ '$ACCEPTED' -lt '$DRAFTED' ]"
check "draft model: acceptance per position" bash -c \
    "curl -s '$URL/metrics' | grep -q '^specula_spec_decode_acceptance_per_pos{position=\"0\"} '"
send sampled_serial "$SAMPLED" serial
send sampled_conc "$SAMPLED"
check "draft model, sampled: concurrent == one at a time" same sampled_serial sampled_conc
LP=0
send sampled_nolp "$SAMPLED"
LP=1
check "draft model, sampled: verified without logprobs (on a GPU: on the device) == with logprobs (the host)" \
    same sampled_serial sampled_nolp text
stop_server
check "draft-model server: exit 0" [ "$SRV_RC" = 0 ]

start_server ngram -m "$M" --draft ngram --draft-k 4 --parallel 4 --ctx 512 || exit 1
send ngram
check "n-gram drafts: 6 concurrent greedy requests == plain server" same plain ngram
send ngram_sampled_lp "$SAMPLED"
LP=0
send ngram_sampled_nolp "$SAMPLED"
LP=1
check "n-gram drafts, sampled: verified without logprobs (on a GPU: on the device) == with logprobs" \
    same ngram_sampled_lp ngram_sampled_nolp text
stop_server

echo "serve_draft: $fails failure(s)"
[ "$fails" = 0 ]
