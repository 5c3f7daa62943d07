#!/usr/bin/env python3
"""Builds the seed corpora under fuzz/corpus/<target>/ from real files in the repository
(tests/fixtures, models/default) and, when scripts/fetch-test-deps.sh has run, shrunken
copies of the differential test's tokenizer variants. Idempotent; seeds are small (a few
KB) so libFuzzer can mutate them. Run from the repository root: python3 fuzz/make_corpus.py
"""
import glob
import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
MAX = 64 * 1024


def put(target, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    if len(data) > MAX:
        return
    d = os.path.join(ROOT, "fuzz", "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def shrink(tok, keep=400):
    """Keeps the first `keep` vocabulary ids and the merges that stay inside them."""
    m = tok.get("model", {})
    vocab = m.get("vocab")
    if isinstance(vocab, dict):
        m["vocab"] = {k: v for k, v in vocab.items() if v < keep}
        merges = m.get("merges")
        if isinstance(merges, list):
            out = []
            for mg in merges:
                a, b = (mg.split(" ", 1) + [""])[:2] if isinstance(mg, str) else mg
                if a in m["vocab"] and b in m["vocab"] and a + b in m["vocab"]:
                    out.append(mg)
            m["merges"] = out
    elif isinstance(vocab, list):
        m["vocab"] = vocab[:keep]
    tok["added_tokens"] = [a for a in tok.get("added_tokens") or [] if a.get("id", 0) < keep + 64]
    return tok


TEXTS = ["Hello, world! 123 4567", "  leading spaces\tand\ttabs\n\nnewlines",
         "héllo wörld 中文 日本語 🙂 emoji", "<s>[INST] special <|im_start|> tokens</s>",
         "don't can't it's I'm", "\x00\x01 control \x7f", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]


def json_seeds():
    for p in glob.glob(os.path.join(FIX, "models", "*", "*.json")):
        put("json", read(p))
    for p in glob.glob(os.path.join(FIX, "templates", "contexts", "*.json")):
        put("json", read(p))
    for p in ["models/default/tokenizer_config.json", "models/default/config.json",
              "tests/fixtures/tokenizers/bytes256/tokenizer.json"]:
        put("json", read(os.path.join(ROOT, p)))
    put("json", '["a\\u0000b", "\\ud83d\\ude00", "x"]')
    put("json", '{"a": 1, "a": 2, "b": [1e999, -0, 9223372036854775807, 9223372036854775808]}')


def tokenizer_seeds():
    base = [read(os.path.join(FIX, "tokenizers", "bytes256", "tokenizer.json"))]
    sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizer"))
    try:
        import variants as V
        base.append(json.dumps(V.wordpiece_tokenizer()).encode())
        base.append(json.dumps(V.wordlevel_tokenizer()).encode())
        deps = os.path.join(ROOT, "tests", ".deps")
        if os.path.isdir(os.path.join(deps, "tokenizers")):
            for name, tok in V.variants(deps).items():
                base.append(json.dumps(shrink(tok), ensure_ascii=False).encode())
    except Exception as e:  # the variants need the fetched vocabularies
        print("make_corpus: tokenizer variants skipped:", e, file=sys.stderr)
    default = json.loads(read(os.path.join(ROOT, "models", "default", "tokenizer.json")))
    base.append(json.dumps(shrink(default), ensure_ascii=False).encode())
    for i, b in enumerate(base):
        put("tokenizer", b + b"\x00" + TEXTS[i % len(TEXTS)].encode())


def template_seeds():
    ctxs = [read(p) for p in sorted(glob.glob(os.path.join(FIX, "templates", "contexts", "*.json")))]
    tpls = sorted(glob.glob(os.path.join(FIX, "shared", "templates", "*.jinja")))
    for i, p in enumerate(tpls):
        t = read(p)
        put("chat", t)
        put("jinja", t + b"\x00" + ctxs[i % len(ctxs)])
    sys.path.insert(0, os.path.join(FIX, "templates"))
    from feature_cases import CASES
    for name, tpl, ctx in CASES:
        put("jinja", tpl.encode() + b"\x00" + json.dumps(ctx).encode())


if __name__ == "__main__":
    json_seeds()
    tokenizer_seeds()
    template_seeds()
    for t in ("json", "tokenizer", "jinja", "chat"):
        d = os.path.join(ROOT, "fuzz", "corpus", t)
        n = len(os.listdir(d))
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{t}: {n} seeds, {size // 1024} KB")
