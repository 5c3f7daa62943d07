#!/usr/bin/env python3
"""GPU vs CPU vs transformers, per fixture: runs `specula logits` on every prompt of every
fixture in tests/fixtures/models on --device cpu and --device cuda (exact precision: the
CLI's default fast mode rounds the CPU's matmul inputs to bf16) and prints, per fixture,
the worst relative L2 of the GPU logits against transformers' fp32 logits (logits.bin) and
against the CPU's, and whether the argmax agrees everywhere. DeepSeek-V4 fixtures: against
transformers only the prompts whose indexer keeps every entry (n / rate <= index_topk: no
tie among scores can change the choice; test_parity_dsv4 replays transformers' tie rule for
the others), against the CPU every prompt (both run the engine's own rule). Usage:
    compare_backends.py SPECULA FIXTURES_DIR [OUT.md]
(COMPARE_ONLY=PREFIX: only the fixtures whose names start with PREFIX.)
Needs numpy. Exit 1 when a fixture exceeds the 1e-4 bar."""
import json, os, subprocess, sys, tempfile
import numpy as np

def logits(specula, model, toks, device, out):
    subprocess.run([specula, "logits", "-m", model, "--tokens", ",".join(map(str, toks)),
                    "-o", out, "--device", device, "--precision", "exact"], check=True,
                   capture_output=True)
    return np.fromfile(out, dtype="<f4")

def rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))

def v4_no_choice(d):
    """For a DeepSeek-V4 fixture: whether an n-token prompt leaves the indexer no choice."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg.get("model_type") != "deepseek_v4" or "compressed_sparse_attention" not in cfg["layer_types"]:
        return lambda n: True
    rate = cfg.get("compress_rates", {}).get("compressed_sparse_attention", 4)
    return lambda n: n // rate <= cfg["index_topk"]

def main():
    specula, fixtures = sys.argv[1], sys.argv[2]
    rows, bad = [], False
    tmp = tempfile.mkdtemp()
    for name in sorted(os.listdir(os.path.join(fixtures, "models"))):
        if not name.startswith(os.environ.get("COMPARE_ONLY", "")):
            continue
        d = os.path.join(fixtures, "models", name)
        ref = json.load(open(os.path.join(d, "reference.json")))
        no_choice = v4_no_choice(d)
        V = ref["vocab_size"]
        hf = np.fromfile(os.path.join(d, "logits.bin"), dtype="<f4")
        off, w_hf, w_cpu, argmax_ok = 0, 0.0, 0.0, True
        for toks in ref["prompts"]:
            n = len(toks) * V
            h = hf[off:off + n].reshape(len(toks), -1)[:, :V]
            off += n
            g = logits(specula, d, toks, "cuda", os.path.join(tmp, "g.bin")).reshape(len(toks), -1)
            c = logits(specula, d, toks, "cpu", os.path.join(tmp, "c.bin")).reshape(len(toks), -1)
            w_cpu = max(w_cpu, rel(g, c))
            argmax_ok &= bool((g.argmax(1) == c.argmax(1)).all())
            if no_choice(len(toks)):
                w_hf = max(w_hf, rel(g[:, :V], h))
                argmax_ok &= bool((g[:, :V].argmax(1) == h.argmax(1)).all())
        bad |= w_hf > 1e-4 or w_cpu > 1e-4 or not argmax_ok
        rows.append(f"| {name} | {w_hf:.2e} | {w_cpu:.2e} | {'yes' if argmax_ok else 'NO'} |")
    table = "| fixture | GPU vs transformers (relL2) | GPU vs CPU (relL2) | argmax equal |\n|---|---|---|---|\n" + "\n".join(rows)
    print(table)
    if len(sys.argv) > 3:
        open(sys.argv[3], "w").write(table + "\n")
    sys.exit(1 if bad else 0)

main()
