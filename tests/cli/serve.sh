#!/usr/bin/env bash
# specula serve driven by curl: endpoints, errors (400 404 405 413 401 429), health,
# metrics, client disconnects, SIGTERM. The OpenAI client tests are tests/server/*.mjs.
# usage: serve.sh SPECULA FIXTURES
set -u
SPECULA=$1
FIX=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M=$ROOT/models/default
TMP=$(mktemp -d)
trap 'kill $SRV_PID 2>/dev/null; [ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT
. "$ROOT/tests/server/serve_lib.sh"
fails=0
check() { # description, command...
    local d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
# status BODY_NEEDLE WANT_CODE curl-args...: the status code and a needle in the body
status() {
    local needle=$1 want=$2; shift 2
    local code
    code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$@")
    if [ "$code" != "$want" ]; then echo "  status $code, wanted $want: $(head -c 300 "$TMP/body")"; return 1; fi
    if [ -n "$needle" ] && ! grep -q -- "$needle" "$TMP/body"; then
        echo "  body lacks '$needle': $(head -c 300 "$TMP/body")"; return 1; fi
    return 0
}
json() { python3 -c "import json,sys; d=json.load(open('$TMP/body')); $1"; }

start_server main -m "$M" --parallel 2 --queue 2 --ctx 1024 || exit 1
check "GET /health 200" status '"ok"' 200 "$URL/health"
check "GET /v1/models lists the model" status '"id":"default"' 200 "$URL/v1/models"
check "chat completion" status '"chat.completion"' 200 "$URL/v1/chat/completions" \
    -d '{"model":"default","messages":[{"role":"user","content":"def hello():"}],"max_tokens":8}'
check "chat: message, usage, finish_reason" json \
    "c=d['choices'][0]; assert c['message']['role']=='assistant' and isinstance(c['message']['content'],str); u=d['usage']; assert u['total_tokens']==u['prompt_tokens']+u['completion_tokens'] and u['completion_tokens']<=8; assert c['finish_reason'] in ('stop','length')"
check "completion with max_tokens: length" status '"finish_reason":"length"' 200 "$URL/v1/completions" \
    -d '{"prompt":"def read_config(path):","max_tokens":6,"ignore_eos":true}'
check "completion: 6 tokens" json "assert d['usage']['completion_tokens']==6"
# stop strings: the text ends before the stop text
curl -s "$URL/v1/completions" -d '{"prompt":"def read_config(path):","max_tokens":30,"ignore_eos":true}' >"$TMP/full"
STOPW=$(python3 -c "import json; t=json.load(open('$TMP/full'))['choices'][0]['text']; w=t.split()[2]; print(w)")
check "stop string cuts the text" status '"finish_reason":"stop"' 200 "$URL/v1/completions" \
    -d "{\"prompt\":\"def read_config(path):\",\"max_tokens\":30,\"ignore_eos\":true,\"stop\":[\"zzz\",\"$STOPW\"]}"
check "stop text not returned, prefix kept" python3 -c "
import json; full=json.load(open('$TMP/full'))['choices'][0]['text']; cut=json.load(open('$TMP/body'))['choices'][0]['text']
assert '$STOPW' not in cut and full.startswith(cut) and full[len(cut):].startswith('$STOPW'), (full, cut)"
check "stream ends with [DONE], usage chunk" bash -c "curl -sN '$URL/v1/chat/completions' -d '{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":4,\"stream\":true,\"stream_options\":{\"include_usage\":true}}' > '$TMP/sse' && tail -n 2 '$TMP/sse' | grep -q '^data: \[DONE\]' && grep -q '\"usage\":{\"prompt_tokens\"' '$TMP/sse'"
# as many tokens as `specula tokenize` gives for the same text
NTOK=$(python3 -c "import json,subprocess; print(len(json.loads(subprocess.run(['$SPECULA','tokenize','-t','$M','--text','hello world'],capture_output=True,text=True).stdout)))")
check "POST /tokenize" status "\"count\":$NTOK" 200 "$URL/tokenize" -d '{"prompt":"hello world"}'
check "POST /detokenize" status '"prompt":"hello world"' 200 "$URL/detokenize" -d "{\"tokens\":$(python3 -c "import json;print(json.load(open('$TMP/body'))['tokens'])")}"

# bad input
check "malformed JSON: 400" status '"invalid_request_error"' 400 "$URL/v1/chat/completions" -d '{"messages":'
check "not an object: 400" status '' 400 "$URL/v1/chat/completions" -d '[1,2]'
check "missing messages: 400" status "'messages' is a required property" 400 "$URL/v1/chat/completions" -d '{"model":"default"}'
check "empty messages: 400" status '' 400 "$URL/v1/chat/completions" -d '{"messages":[]}'
check "missing prompt: 400" status "'prompt' is a required property" 400 "$URL/v1/completions" -d '{}'
check "negative max_tokens: 400" status '"param":"max_tokens"' 400 "$URL/v1/completions" -d '{"prompt":"x","max_tokens":-5}'
check "absurd max_tokens: 400" status '"param":"max_tokens"' 400 "$URL/v1/completions" -d '{"prompt":"x","max_tokens":1e12}'
check "fractional max_tokens: 400" status '' 400 "$URL/v1/completions" -d '{"prompt":"x","max_tokens":2.5}'
check "wrong type temperature: 400" status '"param":"temperature"' 400 "$URL/v1/completions" -d '{"prompt":"x","temperature":"hot"}'
check "wrong type stop: 400" status '"param":"stop"' 400 "$URL/v1/completions" -d '{"prompt":"x","stop":7}'
check "wrong type stream: 400" status '"param":"stream"' 400 "$URL/v1/completions" -d '{"prompt":"x","stream":"yes"}'
check "wrong type message content: 400" status '' 400 "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":5}]}'
check "top_p out of range: 400" status '"param":"top_p"' 400 "$URL/v1/completions" -d '{"prompt":"x","top_p":1.5}'
check "n > 1: 400" status '"param":"n"' 400 "$URL/v1/completions" -d '{"prompt":"x","n":2}'
check "token id outside the vocabulary: 400" status '' 400 "$URL/v1/completions" -d '{"prompt":[1,99999999]}'
check "invalid UTF-8 prompt: 400" status '' 400 "$URL/v1/completions" --data-binary $'{"prompt":"\xff\xfe"}'
python3 -c "print('[' * 200000)" >"$TMP/deep.json"
check "200000-deep nesting: 400, no crash" status '' 400 "$URL/v1/chat/completions" --data-binary @"$TMP/deep.json"
check "U+0000 in a message: handled" status '"chat.completion"' 200 "$URL/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"a\u0000b"}],"max_tokens":2}'
check "empty body: 400" status '' 400 -X POST "$URL/v1/completions"
check "unknown fields ignored" status '"text_completion"' 200 "$URL/v1/completions" -d '{"prompt":"x","max_tokens":1,"frobnicate":{"a":[1]},"user":"u"}'
python3 -c "print('{\"prompt\":\"' + 'def f(): pass ' * 400 + '\"}')" >"$TMP/long.json"
check "prompt longer than the context: 400 with the numbers" status 'maximum context length is 1024 tokens' 400 "$URL/v1/completions" --data-binary @"$TMP/long.json"
check "prompt + max_tokens beyond the context: 400" status 'maximum context length' 400 "$URL/v1/completions" -d '{"prompt":"x","max_tokens":5000}'
head -c 9000000 /dev/zero | tr '\0' 'a' >"$TMP/big"
check "body over 8 MiB: 413" status '"request_too_large"' 413 "$URL/v1/completions" --data-binary @"$TMP/big"
check "chunked body over the limit: 413" status '' 413 "$URL/v1/completions" -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/big"
check "unknown path: 404" status '"not_found_error"' 404 "$URL/v2/everything"
check "wrong method: 405" status '"method_not_allowed"' 405 -X GET "$URL/v1/chat/completions"
check "wrong method on /health: 405" status '' 405 -X POST "$URL/health"

# admission: 2 running + 2 waiting (long streams), then 3 more get 429 with Retry-After at once
running() { curl -s "$URL/metrics" | awk '/^specula_num_requests_running /{print $2}'; }
waiting() { curl -s "$URL/metrics" | awk '/^specula_num_requests_waiting /{print $2}'; }
LONG=""
for i in 1 2 3 4; do
    curl -sN "$URL/v1/completions" -d '{"prompt":"def f():","max_tokens":1000,"ignore_eos":true,"stream":true}' >/dev/null &
    LONG="$LONG $!"
done
for _ in $(seq 1 200); do [ "$(running):$(waiting)" = "2:2" ] && break; sleep 0.1; done
for i in 5 6 7; do
    curl -s -m 30 -o /dev/null -D "$TMP/h$i" -w '%{http_code}\n' "$URL/v1/completions" \
        -d '{"prompt":"def f():","max_tokens":5}' >"$TMP/code$i"
done
check "admission: 2 running + 2 waiting, then 429 for 3 more" bash -c "[ \$(cat $TMP/code5 $TMP/code6 $TMP/code7 | grep -c 429) = 3 ]"
check "429 carries Retry-After" grep -qi '^Retry-After: 1' "$TMP/h5"
kill $LONG; wait $LONG 2>/dev/null
for _ in $(seq 1 100); do [ "$(running):$(waiting)" = "0:0" ] && break; sleep 0.1; done
check "aborted streams free running and queued sequences" [ "$(running):$(waiting)" = "0:0" ]

# a client that goes away frees its sequence at once
curl -sN "$URL/v1/completions" -d '{"prompt":"def f():","max_tokens":1000,"ignore_eos":true,"stream":true}' >/dev/null &
CP=$!
# seen running (polled: on a GPU the 1000 tokens take well under a second)
for _ in $(seq 1 200); do R1=$(running); [ "$R1" = 1 ] && break; sleep 0.01; done
kill $CP; wait $CP 2>/dev/null
sleep 0.3
check "aborted stream frees its sequence ($R1 -> $(running))" bash -c "[ '$R1' = 1 ] && [ \$(curl -s $URL/metrics | awk '/^specula_num_requests_running /{print \$2}') = 0 ]"
curl -s -m 0.4 "$URL/v1/completions" -d '{"prompt":"def f():","max_tokens":1000,"ignore_eos":true}' >/dev/null
sleep 0.3
check "disconnected non-streaming request frees its sequence" bash -c "[ \$(curl -s $URL/metrics | awk '/^specula_num_requests_running /{print \$2}') = 0 ]"

curl -s "$URL/metrics" >"$TMP/metrics"
for name in 'specula_requests_total{status="200"}' 'specula_requests_total{status="429"}' \
    specula_num_requests_running specula_num_requests_waiting specula_prompt_tokens_total \
    specula_generation_tokens_total specula_time_to_first_token_seconds_bucket \
    specula_inter_token_latency_seconds_count specula_spec_decode_num_draft_tokens; do
    check "metrics: $name" grep -qF "$name" "$TMP/metrics"
done

# SIGTERM: an in-flight request finishes, the process exits 0
curl -s -o "$TMP/inflight" -w '%{http_code}' "$URL/v1/completions" \
    -d '{"prompt":"def f():","max_tokens":40,"ignore_eos":true}' >"$TMP/inflight_code" &
CP=$!
for _ in $(seq 1 100); do [ "$(running)" = 1 ] && break; sleep 0.05; done
stop_server
wait $CP
check "SIGTERM: exit 0" [ "$SRV_RC" = 0 ]
check "SIGTERM: the in-flight request completed" bash -c "[ \$(cat $TMP/inflight_code) = 200 ] && grep -q '\"completion_tokens\":40' $TMP/inflight"

# --api-key: everything but /health needs it
start_server auth -m "$M" --api-key sekrit --parallel 1 || exit 1
check "api key: /health without key 200" status '' 200 "$URL/health"
check "api key: no key 401" status '"invalid_api_key"' 401 "$URL/v1/models"
check "api key: wrong key 401" status '' 401 -H 'Authorization: Bearer wrong' "$URL/v1/completions" -d '{"prompt":"x"}'
check "api key: metrics need it too" status '' 401 "$URL/metrics"
check "api key: right key 200" status '' 200 -H 'Authorization: Bearer sekrit' "$URL/v1/models"
check "binds 127.0.0.1 by default" bash -c "echo '$URL' | grep -q '^http://127.0.0.1:'"
stop_server
check "second server: exit 0" [ "$SRV_RC" = 0 ]

# a chat template that raises: 400 with the template's message
mkdir -p "$TMP/raising"
for f in config.json generation_config.json model.safetensors tokenizer.json; do ln -s "$M/$f" "$TMP/raising/$f"; done
python3 - "$M/tokenizer_config.json" "$TMP/raising/tokenizer_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["chat_template"] = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
                      + c["chat_template"])
json.dump(c, open(sys.argv[2], "w"))
PY
start_server raising -m "$TMP/raising" --parallel 1 || exit 1
check "template error: 400 with the template's message" status 'System role not supported' 400 "$URL/v1/chat/completions" \
    -d '{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}'
check "template fine without a system message" status '"chat.completion"' 200 "$URL/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"u"}],"max_tokens":2}'
stop_server

check "no model: exits 1 with a message" bash -c "! '$SPECULA' serve -m /nonexistent --port 0 2>$TMP/nm.err && grep -q 'specula serve' $TMP/nm.err"
check "--draft self: usage error (exit 2)" bash -c "'$SPECULA' serve -m '$M' --draft self --port 0 2>/dev/null; [ \$? = 2 ]"
check "--draft-p-min out of range: exit 2" bash -c "'$SPECULA' serve -m '$M' --draft ngram --draft-p-min 2 --port 0 2>/dev/null; [ \$? = 2 ]"
check "--draft with another vocabulary: exit 1 with the reason" bash -c "! '$SPECULA' serve -m '$M' --ctx 128 --draft '$FIX/models/llama_mha_bf16' --port 0 2>$TMP/dv.err && grep -qi 'vocab' $TMP/dv.err"

echo "serve: $fails failure(s)"
[ "$fails" = 0 ]
