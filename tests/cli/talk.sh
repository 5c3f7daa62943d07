#!/usr/bin/env bash
# `specula run`, `specula chat` and `specula bench` without -m, on the bundled pair: the
# chat template is applied, speculation is lossless, chat reuses the KV cache and its
# replies equal a from-scratch run of the same conversation, thinking is shown apart.
# usage: talk.sh SPECULA FIXTURES
set -u
SPECULA=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export SPECULA_MODELS=$ROOT/models
D=$ROOT/models/default
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
check() { # description, command...
    local d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
same() { # file_a file_b
    if cmp -s "$1" "$2"; then return 0; fi
    echo "  $1 and $2 differ:"; diff "$1" "$2" | head -10; return 1
}

check "run --help" bash -c "'$SPECULA' run --help >/dev/null"
check "chat --help" bash -c "'$SPECULA' chat --help >/dev/null"

# run == generate on the prompt `specula template` renders (add_generation_prompt true)
python3 -c 'import json; print(json.dumps({"messages": [{"role": "user", "content": "Quote John 3:16."}], "add_generation_prompt": True}))' > "$TMP/ctx.json"
"$SPECULA" template -t "$D" --context "$TMP/ctx.json" > "$TMP/prompt.txt"
P=$(cat "$TMP/prompt.txt"; echo x); P=${P%x} # keep the prompt's final newline
"$SPECULA" generate -m "$D" -p "$P" -n 40 --temp 0 > "$TMP/gen.txt" 2>/dev/null
"$SPECULA" run -p "Quote John 3:16." -n 40 --temp 0 > "$TMP/run.txt" 2> "$TMP/run.err"
check "run: the chat template's prompt, the same reply as generate" same "$TMP/gen.txt" "$TMP/run.txt"
check "run: the reply is not empty" test "$(wc -c < "$TMP/run.txt")" -gt 5
check "run: a summary line with tokens/s and acceptance" grep -q "tok/s.*draft .*mean acceptance length" "$TMP/run.err"
"$SPECULA" run -p "Quote John 3:16." -n 40 --temp 0 --draft none > "$TMP/plain.txt" 2>/dev/null
check "run: speculative greedy == plain greedy" same "$TMP/plain.txt" "$TMP/run.txt"
"$SPECULA" run -p "Quote John 3:16." -n 40 --temp 0 --draft ngram > "$TMP/ngram.txt" 2>/dev/null
check "run --draft ngram: the same reply" same "$TMP/plain.txt" "$TMP/ngram.txt"
echo "Quote John 3:16." | "$SPECULA" run -n 40 --temp 0 > "$TMP/stdin.txt" 2>/dev/null
check "run: the prompt from stdin" same "$TMP/run.txt" "$TMP/stdin.txt"
"$SPECULA" run -m "$D" --raw -p "def read_config(path):" -n 24 --temp 0 > "$TMP/raw.txt" 2>/dev/null
"$SPECULA" generate -m "$D" -p "def read_config(path):" -n 24 --temp 0 > "$TMP/raw_gen.txt" 2>/dev/null
check "run --raw: no template" same "$TMP/raw_gen.txt" "$TMP/raw.txt"
"$SPECULA" run --system "Answer briefly." -p "Quote John 3:16." -n 24 --temp 0.7 --seed 3 > "$TMP/s1.txt" 2>/dev/null
"$SPECULA" run --system "Answer briefly." -p "Quote John 3:16." -n 24 --temp 0.7 --seed 3 > "$TMP/s2.txt" 2>/dev/null
check "run --system --temp 0.7: reproducible with a seed" same "$TMP/s1.txt" "$TMP/s2.txt"

# chat: scripted turns; turn 2 reuses the cache, /reset empties it
printf 'Quote John 3:16.\nWhat comes after that?\n/reset\nQuote John 3:16.\n/exit\n' |
    "$SPECULA" chat --temp 0 -n 40 -v > "$TMP/chat.txt" 2> "$TMP/chat.err"
check "chat: turns echoed, /reset acknowledged" bash -c "grep -q '^>>> What comes after that?' '$TMP/chat.txt' && grep -q '(conversation reset)' '$TMP/chat.txt'"
sed -n '2p' "$TMP/chat.txt" > "$TMP/reply1.txt"
check "chat: the first reply equals run's" bash -c "head -1 '$TMP/run.txt' | cmp -s - '$TMP/reply1.txt'"
check "chat: the second turn reuses the KV cache" bash -c "sed -n 2p '$TMP/chat.err' | grep -Eq 'prompt [0-9]+ tokens: [1-9][0-9]* reused from the KV cache'"
check "chat: after /reset nothing is reused" bash -c "sed -n 3p '$TMP/chat.err' | grep -q ': 0 reused from the KV cache'"
awk '/^>>> Quote John 3:16./{n++} n==2 && !/^>>>/' "$TMP/chat.txt" | head -1 > "$TMP/reply3.txt"
check "chat: after /reset the same question gets the same reply" same "$TMP/reply1.txt" "$TMP/reply3.txt"
# the second reply equals generating from scratch on the re-rendered conversation
awk '/^>>> What comes after that?/{f=1; next} /^>>> \/reset/{f=0} f' "$TMP/chat.txt" > "$TMP/reply2.txt"
python3 - "$TMP/reply1.txt" > "$TMP/ctx2.json" <<'EOF'
import json, sys
r1 = open(sys.argv[1]).read().strip()
print(json.dumps({"messages": [{"role": "user", "content": "Quote John 3:16."},
                               {"role": "assistant", "content": r1},
                               {"role": "user", "content": "What comes after that?"}],
                  "add_generation_prompt": True}))
EOF
"$SPECULA" template -t "$D" --context "$TMP/ctx2.json" > "$TMP/prompt2.txt"
P=$(cat "$TMP/prompt2.txt"; echo x); P=${P%x}
"$SPECULA" generate -m "$D" -p "$P" -n 40 --temp 0 > "$TMP/gen2.txt" 2>/dev/null
check "chat: the reply after cache reuse equals a from-scratch generation" same "$TMP/gen2.txt" "$TMP/reply2.txt"

# thinking: a template that opens <think> in the generation prompt shows the reply as thinking
mkdir -p "$TMP/think"
for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json; do
    ln -s "$D/$f" "$TMP/think/$f"
done
printf '%s' "{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}" > "$TMP/think/chat_template.jinja"
"$SPECULA" run -m "$TMP/think" -p "Quote John 3:16." -n 8 --temp 0 > "$TMP/think.txt" 2>/dev/null
check "run: thinking is prefixed when stdout is not a terminal" grep -q "^thinking: " "$TMP/think.txt"

# bench without -m: the bundled pair, plain vs speculative
"$SPECULA" bench --json --runs 1 --gen-len 16 > "$TMP/bench.json"
check "bench without -m: JSON keys" python3 -c "
import json, sys
j = json.load(open('$TMP/bench.json'))
for k in ('plain_tok_s', 'spec_tok_s', 'speedup', 'mean_acceptance_length'):
    assert k in j and j[k] > 0, k
assert j['model'].endswith('models/default') and j['draft'].endswith('models/default-draft')
k = json.load(open('$ROOT/models/default-draft/generation_config.json'))['num_assistant_tokens']
assert len(j['spec']['drafted_per_position']) == k, (j['spec'], k)  # the draft's num_assistant_tokens
"
# a draft's generation_config.json num_assistant_tokens sets k; --draft-k overrides it
mkdir -p "$TMP/d2"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    ln -s "$ROOT/models/default-draft/$f" "$TMP/d2/$f"
done
echo '{"eos_token_id": 2, "num_assistant_tokens": 2}' > "$TMP/d2/generation_config.json"
"$SPECULA" bench --json --runs 1 --gen-len 16 --draft "$TMP/d2" > "$TMP/bench_d2.json"
"$SPECULA" bench --json --runs 1 --gen-len 16 --draft "$TMP/d2" --draft-k 5 > "$TMP/bench_d2k.json"
check "bench: num_assistant_tokens of the draft, --draft-k over it" python3 -c "
import json
assert len(json.load(open('$TMP/bench_d2.json'))['spec']['drafted_per_position']) == 2
assert len(json.load(open('$TMP/bench_d2k.json'))['spec']['drafted_per_position']) == 5
"
"$SPECULA" bench --json --runs 1 --gen-len 16 --temp 0.7 > "$TMP/bench7.json"
check "bench without -m --temp 0.7" python3 -c "import json; j = json.load(open('$TMP/bench7.json')); assert j['temperature'] == 0.7 and j['spec_tok_s'] > 0"

echo "$fails failure(s)"
[ "$fails" = 0 ]
