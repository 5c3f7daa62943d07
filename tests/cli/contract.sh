#!/usr/bin/env bash
# CLI contract: the commands and outputs later tools and tests rely on.
# usage: contract.sh SPECULA FIXTURES
set -u
SPECULA=$1
FIX=$2
M=$FIX/models/llama_mha_bf16
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
check() { # description, command...
    local d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
expect_exit() { # want_code, stderr_needle, command...
    local want=$1 needle=$2; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then echo "  exit $rc, wanted $want: $*"; cat "$TMP/err"; return 1; fi
    if [ -n "$needle" ] && ! grep -q -- "$needle" "$TMP/err"; then
        echo "  stderr lacks '$needle':"; cat "$TMP/err"; return 1; fi
    return 0
}

check "--help exits 0" "$SPECULA" --help
for c in logits generate bench; do
    check "$c --help exits 0" expect_exit 0 "" "$SPECULA" $c --help
done
check "unknown command exits 2" expect_exit 2 "unknown command" "$SPECULA" frobnicate
check "unknown option exits 2" expect_exit 2 "unknown option" "$SPECULA" logits --bogus 1

# logits: one float32 row of vocab_size per position, matching transformers
PROMPT=$(python3 -c "import json;print(','.join(map(str,json.load(open('$M/reference.json'))['prompts'][1])))")
check "logits writes [n, vocab] float32" "$SPECULA" logits -m "$M" --tokens "$PROMPT" --precision exact -o "$TMP/l.bin"
check "logits match transformers (relL2 <= 1e-4)" python3 - "$M" "$TMP/l.bin" <<'PY'
import json, struct, sys, math
m, path = sys.argv[1], sys.argv[2]
ref = json.load(open(m + "/reference.json"))
V = ref["vocab_size"]; p = ref["prompts"]; n = len(p[1])
raw = open(path, "rb").read()
assert len(raw) == n * V * 4, (len(raw), n * V * 4)
got = struct.unpack("<%df" % (n * V), raw)
allref = open(m + "/logits.bin", "rb").read()
off = len(p[0]) * V
want = struct.unpack_from("<%df" % (n * V), allref, off * 4)
num = sum((a - b) ** 2 for a, b in zip(got, want)); den = sum(b * b for b in want)
e = math.sqrt(num / den); print("  relL2 %.2e" % e); sys.exit(0 if e <= 1e-4 else 1)
PY

# the default (fast) precision: bf16 inputs to every product, ~1e-3 from transformers
check "logits --precision fast" "$SPECULA" logits -m "$M" --tokens "$PROMPT" -o "$TMP/lf.bin"
check "fast logits near transformers (relL2 <= 1e-2)" python3 - "$M" "$TMP/lf.bin" <<'PY'
import json, struct, sys, math
m, path = sys.argv[1], sys.argv[2]
ref = json.load(open(m + "/reference.json"))
V = ref["vocab_size"]; p = ref["prompts"]; n = len(p[1])
got = struct.unpack("<%df" % (n * V), open(path, "rb").read())
want = struct.unpack_from("<%df" % (n * V), open(m + "/logits.bin", "rb").read(), len(p[0]) * V * 4)
num = sum((a - b) ** 2 for a, b in zip(got, want)); den = sum(b * b for b in want)
e = math.sqrt(num / den); print("  relL2 %.2e" % e); sys.exit(0 if e <= 1e-2 else 1)
PY

# generate --json: greedy tokens equal transformers' continuation
check "generate --json greedy equals transformers" python3 - "$SPECULA" "$M" <<'PY'
import json, subprocess, sys
spec, m = sys.argv[1], sys.argv[2]
ref = json.load(open(m + "/reference.json"))
toks = ",".join(map(str, ref["prompts"][0]))
out = subprocess.run([spec, "generate", "-m", m, "--tokens", toks, "-n", "12", "--temp", "0",
                      "--json"], capture_output=True, text=True, check=True).stdout
j = json.loads(out)
assert j["tokens"] == ref["greedy"][0], (j["tokens"], ref["greedy"][0])
assert "prefill_ms" in j["timing"] and "decode_ms" in j["timing"]
PY
check "sampling is reproducible with a seed" bash -c "
  a=\$('$SPECULA' generate -m '$M' --tokens 1,2,3 -n 16 --temp 0.9 --top-k 40 --top-p 0.9 --seed 7 --json)
  b=\$('$SPECULA' generate -m '$M' --tokens 1,2,3 -n 16 --temp 0.9 --top-k 40 --top-p 0.9 --seed 7 --json)
  c=\$('$SPECULA' generate -m '$M' --tokens 1,2,3 -n 16 --temp 0.9 --seed 8 --json)
  [ \"\$(echo \$a | python3 -c 'import json,sys;print(json.load(sys.stdin)[\"tokens\"])')\" = \
    \"\$(echo \$b | python3 -c 'import json,sys;print(json.load(sys.stdin)[\"tokens\"])')\" ] &&
  [ \"\$(echo \$a | python3 -c 'import json,sys;print(json.load(sys.stdin)[\"tokens\"])')\" != \
    \"\$(echo \$c | python3 -c 'import json,sys;print(json.load(sys.stdin)[\"tokens\"])')\" ]"

# bad input: clear errors, non-zero exits
check "token id >= vocab" expect_exit 1 "id 256 is outside the vocabulary" "$SPECULA" logits -m "$M" --tokens 1,256 -o "$TMP/x"
check "negative token id" expect_exit 1 "outside the vocabulary" "$SPECULA" generate -m "$M" --tokens -1 -n 2
check "empty token list" expect_exit 1 "empty" "$SPECULA" logits -m "$M" --tokens "" -o "$TMP/x"
check "malformed token list" expect_exit 2 "cannot parse" "$SPECULA" logits -m "$M" --tokens "1,,2" -o "$TMP/x"
check "context longer than allowed" expect_exit 1 "exceed" "$SPECULA" generate -m "$M" --tokens 1 -n 10 --ctx 100000
check "missing model dir" expect_exit 1 "cannot open" "$SPECULA" logits -m "$TMP/none" --tokens 1 -o "$TMP/x"
mkdir -p "$TMP/trunc" && cp "$M/config.json" "$TMP/trunc/" && head -c 1000 "$M/model.safetensors" > "$TMP/trunc/model.safetensors"
check "truncated checkpoint" expect_exit 1 "model.safetensors" "$SPECULA" logits -m "$TMP/trunc" --tokens 1 -o "$TMP/x"
check "bench --json" bash -c "'$SPECULA' bench -m '$M' --prompt-len 8 --gen-len 4 --runs 2 --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j[\"decode_tok_s\"] > 0 and j[\"prefill_tok_s\"] > 0'"

# tokenizer CLI (the bundled byte-level tokenizer; real tokenizers are covered by the
# differential test)
B=$FIX/tokenizers/bytes256
check "tokenize --text prints one array" bash -c "[ \"\$('$SPECULA' tokenize -t '$B' --text 'Hi!')\" = '[72, 105, 33]' ]"
printf '["Hi", "", "\\u00e9\\u0000"]' > "$TMP/in.json"
check "tokenize --json-in prints an array of arrays" bash -c "[ \"\$('$SPECULA' tokenize -t '$B/tokenizer.json' --json-in '$TMP/in.json')\" = '[[72, 105], [], [195, 169, 0]]' ]"
printf '[[72, 105], [1, 72], [195, 169, 0]]' > "$TMP/ids.json"
check "detokenize keeps special tokens and NUL" bash -c "'$SPECULA' detokenize -t '$B' --json-in '$TMP/ids.json' | python3 -c 'import json,sys; assert json.load(sys.stdin) == [\"Hi\", \"\\x01H\", \"\\u00e9\\x00\"]'"
printf '[[72, 256]]' > "$TMP/bad.json"
check "detokenize: id out of range" expect_exit 1 "token id 256 at position 1 is outside the vocabulary" "$SPECULA" detokenize -t "$B" --json-in "$TMP/bad.json"
printf '["a", 1]' > "$TMP/bad2.json"
check "tokenize: malformed input" expect_exit 1 "expected a string" "$SPECULA" tokenize -t "$B" --json-in "$TMP/bad2.json"
check "tokenize: missing tokenizer" expect_exit 1 "cannot open" "$SPECULA" tokenize -t "$TMP/none" --text x
check "generate -p streams text" bash -c "'$SPECULA' generate -m '$M' --tokenizer '$B' -p 'Hello' -n 8 --temp 0 >/dev/null"
check "generate -p --json has text" bash -c "'$SPECULA' generate -m '$M' --tokenizer '$B' -p 'Hello' -n 8 --temp 0 --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert isinstance(j[\"text\"], str) and j[\"timing\"][\"prompt_tokens\"] == 6'"

# quantized and MoE checkpoints
Q=$FIX/models/qwen3moe_nvfp4_modelopt
check "inspect reports NVFP4 input scales (kept, not applied)" bash -c "'$SPECULA' inspect -m '$Q' | grep -q 'experts.3.down_proj.input_scale = '"
check "inspect --json" bash -c "'$SPECULA' inspect -m '$FIX/models/gptoss_mxfp4' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j[\"quant_method\"].startswith(\"MXFP4\") and j[\"formats\"][\"MXFP4\"] == 24 and j[\"moe_layers\"] == 3'"
check "bench on an MXFP4 MoE checkpoint reports memory" bash -c "'$SPECULA' bench -m '$FIX/models/gptoss_mxfp4' --prompt-len 8 --gen-len 4 --runs 1 --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j[\"decode_tok_s\"] > 0 and j[\"rss_mib\"] > 0 and j[\"checkpoint_mib\"] > 0 and 0 < j[\"token_gb\"] * 1e9 < j[\"weights_mib\"] * 1048576'"

# speculative decoding
check "generate --draft self: identical tokens, every draft accepted" python3 - "$SPECULA" "$M" <<'PY'
import json, subprocess, sys
spec, m = sys.argv[1], sys.argv[2]
def run(*extra):
    out = subprocess.run([spec, "generate", "-m", m, "--tokens", "1,2,3,4", "-n", "24", "--json", *extra],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)
plain = run()
for d in ("self", "ngram", m):
    j = run("--draft", d, "--draft-k", "3")
    assert j["tokens"] == plain["tokens"], d
    s = j["spec"]
    assert set(s) >= {"drafts", "drafted", "accepted", "acceptance_per_position", "mean_acceptance_length", "draft_ms", "verify_ms"}
    assert len(s["acceptance_per_position"]) == 3
if True:
    s = run("--draft", "self")["spec"]
    assert s["drafted"] > 0 and s["accepted"] == s["drafted"], s
    s = run("--draft", "self", "--temp", "0.8", "--seed", "5")["spec"]
    assert s["drafted"] > 0 and s["accepted"] == s["drafted"], s
PY
check "generate --draft prints a summary on stderr" bash -c "'$SPECULA' generate -m '$M' --tokens 1,2,3 -n 8 --draft self 2>&1 >/dev/null | grep -q 'speculation: .* draft tokens accepted'"
check "generate --draft: missing draft model" expect_exit 1 "cannot open" "$SPECULA" generate -m "$M" --tokens 1,2 -n 4 --draft "$TMP/none"
check "generate --draft-k out of range" expect_exit 1 "draft-k" "$SPECULA" generate -m "$M" --tokens 1,2 -n 4 --draft self --draft-k 65
MTP=$FIX/models/deepseekv3_mtp
check "generate --draft mtp: tokens identical to plain, drafts made" python3 - "$SPECULA" "$MTP" <<'PY'
import json, subprocess, sys
spec, m = sys.argv[1], sys.argv[2]
def run(*extra):
    out = subprocess.run([spec, "generate", "-m", m, "--tokens", "5,17,99,3", "-n", "32", "--json", "--ignore-eos",
                          "--precision", "exact", *extra], check=True, capture_output=True, text=True).stdout
    return json.loads(out)
plain = run()
for k in ("1", "3"):
    j = run("--draft", "mtp", "--draft-k", k)
    assert j["tokens"] == plain["tokens"], k
    assert j["spec"]["drafted"] > 0, j["spec"]
PY
check "generate --draft mtp: a model without MTP layers is refused" expect_exit 1 "no multi-token prediction module" "$SPECULA" generate -m "$FIX/models/deepseekv3_qlora_yarn" --tokens 1,2 -n 4 --draft mtp
check "bench --draft mtp" bash -c "'$SPECULA' bench -m '$MTP' --draft mtp --prompt-len 8 --gen-len 16 --runs 1 --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j[\"spec\"][\"drafted\"] > 0'"
check "check runs the MTP check" bash -c "'$SPECULA' check -m '$MTP' | grep -q 'pass  speculative (mtp)'"
check "serve --draft mtp: refused with the reason" expect_exit 2 "not served yet" "$SPECULA" serve -m "$MTP" --draft mtp
check "bench --draft reports the speedup" bash -c "'$SPECULA' bench -m '$M' --draft self --prompt-len 8 --gen-len 16 --runs 1 --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j[\"speedup\"] > 0 and j[\"spec\"][\"accepted\"] > 0'"

# diagnostics
check "trace writes one JSON line per (pass, layer, op, position)" bash -c "'$SPECULA' trace -m '$M' --tokens 1,2,3 -n 2 -o '$TMP/t1.jsonl' 2>/dev/null && python3 -c '
import json,sys
rows=[json.loads(l) for l in open(\"$TMP/t1.jsonl\")]
need={\"model\",\"pass\",\"layer\",\"op\",\"position\",\"mean\",\"std\",\"min\",\"max\",\"amax\",\"l2\",\"nan\",\"inf\",\"hash\"}
assert all(need <= set(r) for r in rows)
assert {r[\"op\"] for r in rows} >= {\"embed\",\"attn_norm\",\"attn_q\",\"attn_k\",\"attn_v\",\"attn_out\",\"attn_o_proj\",\"attn_residual\",\"mlp_norm\",\"mlp_out\",\"mlp_residual\",\"final_norm\",\"logits\"}
assert max(r[\"pass\"] for r in rows) == 1
'"
check "trace --draft records target and draft" bash -c "'$SPECULA' trace -m '$FIX/models/qwen3moe_mixed_bf16' --tokens 1,2,3 -n 6 --draft self -o '$TMP/t2.jsonl' 2>/dev/null && grep -q '\"model\": \"draft\"' '$TMP/t2.jsonl' && grep -q '\"op\": \"moe_experts\"' '$TMP/t2.jsonl'"
"$SPECULA" trace -m "$M" --tokens 1,2,3 -n 2 -o "$TMP/t3.jsonl" --perturb 1:attn_out:1.01 2>/dev/null
check "diff names the planted layer and op" bash -c "'$SPECULA' diff '$TMP/t1.jsonl' '$TMP/t3.jsonl' --json | python3 -c 'import json,sys; d=json.load(sys.stdin)[\"first_divergence\"]; assert d[\"layer\"] == 1 and d[\"op\"] == \"attn_out\" and d[\"position\"] == 0 and d[\"pass\"] == 0, d'"
check "diff of identical traces: null" bash -c "[ \"\$('$SPECULA' diff --json '$TMP/t1.jsonl' '$TMP/t1.jsonl' | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"first_divergence\"])')\" = None ]"
check "diff: unreadable trace" expect_exit 1 "cannot open trace" "$SPECULA" diff "$TMP/t1.jsonl" "$TMP/none.jsonl"
check "diff needs two files" expect_exit 2 "two trace files" "$SPECULA" diff "$TMP/t1.jsonl"
check "diff: a directory is an error naming it" expect_exit 1 "$TMP' is not a regular file" "$SPECULA" diff "$TMP/t1.jsonl" "$TMP"
: >"$TMP/empty.jsonl"
check "diff: an empty trace is an error" expect_exit 1 "holds no records" "$SPECULA" diff "$TMP/t1.jsonl" "$TMP/empty.jsonl"
# huge -n: clamped to the context before any allocation (2^62 used to corrupt the heap)
for n in 4611686018427387904 1099511627776 9223372036854775807; do
    for d in "" "--draft self" "--draft ngram"; do
        check "generate -n $n $d: clamped to the context" expect_exit 0 "" "$SPECULA" generate -m "$M" --tokens 1,2 -n $n --ignore-eos --ctx 24 $d
    done
    check "trace -n $n: clamped to the context" expect_exit 0 "" "$SPECULA" trace -m "$M" --tokens 1,2 -n $n -o "$TMP/huge.jsonl"
done
check "check passes on a healthy checkpoint" bash -c "'$SPECULA' check -m '$FIX/models/gptoss_mxfp4' | grep -q '0 failed'"
check "check --draft" bash -c "'$SPECULA' check -m '$M' --draft '$FIX/models/qwen3_gqa2_tied' | grep -q 'speculative (draft)'"
mkdir -p "$TMP/nanmodel" && cp "$M/config.json" "$TMP/nanmodel/" && python3 - "$M/model.safetensors" "$TMP/nanmodel/model.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
t = hdr["model.norm.weight"]
a, b = t["data_offsets"]
data = bytearray(raw[8 + n:])
data[a:a + 2] = b"\xc0\x7f"   # BF16 NaN
open(sys.argv[2], "wb").write(raw[:8 + n] + bytes(data))
PY
check "check fails (exit 1) on a NaN weight, naming it" bash -c "out=\$('$SPECULA' check -m '$TMP/nanmodel'); rc=\$?; [ \$rc = 1 ] && echo \"\$out\" | grep -q 'FAIL  weights finite .*model.norm.weight'"

# chat templates (real templates are covered by the template differential test)
printf '%s' '{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}' > "$TMP/t.jinja"
printf '{"messages": [{"role": "user", "content": " hi "}], "add_generation_prompt": true, "bos_token": "B"}' > "$TMP/ctx.json"
check "template renders a .jinja file" bash -c "[ \"\$('$SPECULA' template -t '$TMP/t.jinja' --context '$TMP/ctx.json')\" = 'B<user>hi<assistant>' ]"
printf '%s' "{{ raise_exception('System role not supported') }}" > "$TMP/raise.jinja"
check "template: raise_exception exits 3" expect_exit 3 "System role not supported" "$SPECULA" template -t "$TMP/raise.jinja" --context "$TMP/ctx.json"
printf '%s' "{% for m in messages %}" > "$TMP/syntax.jinja"
check "template: syntax error exits 3" expect_exit 3 "line 1" "$SPECULA" template -t "$TMP/syntax.jinja" --context "$TMP/ctx.json"
check "template: needs --context" expect_exit 2 "needs -t and --context" "$SPECULA" template -t "$TMP/t.jinja"
printf '[1]' > "$TMP/badctx.json"
check "template: context not an object" expect_exit 1 "JSON object" "$SPECULA" template -t "$TMP/t.jinja" --context "$TMP/badctx.json"
check "template: no template in config" expect_exit 1 "no chat template" "$SPECULA" template -t "$B/tokenizer_config.json" --context "$TMP/ctx.json"
mkdir -p "$TMP/chat" && cp "$B/tokenizer.json" "$B/tokenizer_config.json" "$TMP/chat/"
printf '%s' '{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}' > "$TMP/chat/chat_template.jinja"
printf '{"messages": [{"role": "user", "content": "Hi"}]}' > "$TMP/chat.json"
check "tokenize --chat: special tokens matched, no second BOS" bash -c "[ \"\$('$SPECULA' tokenize -t '$TMP/chat' --chat '$TMP/chat.json')\" = '[1, 72, 105, 2]' ]"

echo "$fails failure(s)"
[ "$fails" = 0 ]
