#!/usr/bin/env python3
"""make_seeds.py: writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from
the fixtures, kept small so libFuzzer mutates headers rather than weights.

  safetensors: each fixture's tensor table (names, dtypes, metadata) with every tensor
               shrunk to a few elements, so the file stays valid and tiny
  config:      each fixture's config.json, NUL, its generation_config.json
  trace:       traces written by `specula trace` (A alone, A NUL A, A NUL perturbed A)

usage: make_seeds.py SOURCE_DIR SPECULA
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

SRC, SPECULA = sys.argv[1], sys.argv[2]
FIX = os.path.join(SRC, "tests", "fixtures", "models")
OUT = os.path.join(SRC, "fuzz", "corpus")
BITS = {"F32": 32, "F16": 16, "BF16": 16, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I32": 32,
        "I64": 64, "I16": 16, "F64": 64, "BOOL": 8, "U16": 16}

for t in ("safetensors", "config", "trace"):
    os.makedirs(os.path.join(OUT, t), exist_ok=True)

for name in sorted(os.listdir(FIX)):
    d = os.path.join(FIX, name)
    files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    raw = open(os.path.join(d, sorted(files)[0]), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    out, pos = {}, 0
    for k in sorted(h):
        if k == "__metadata__":
            out[k] = h[k]
            continue
        dt = h[k]["dtype"]
        shape = [min(s, 2) for s in h[k]["shape"]]
        nb = BITS.get(dt, 8)
        cnt = 1
        for s in shape:
            cnt *= s
        size = cnt * nb // 8
        out[k] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + size]}
        pos += size
    hb = json.dumps(out, separators=(",", ":")).encode()
    open(os.path.join(OUT, "safetensors", name), "wb").write(struct.pack("<Q", len(hb)) + hb + bytes(range(256)) * (pos // 256) + bytes(pos % 256))
    cfg = open(os.path.join(d, "config.json"), "rb").read()
    gen_path = os.path.join(d, "generation_config.json")
    gen = open(gen_path, "rb").read() if os.path.exists(gen_path) else b""
    open(os.path.join(OUT, "config", name), "wb").write(cfg + (b"\0" + gen if gen else b""))

with tempfile.TemporaryDirectory() as tmp:
    m = os.path.join(FIX, "llama_mha_bf16")
    a, b = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
    subprocess.run([SPECULA, "trace", "-m", m, "--tokens", "1,2", "-n", "1", "-o", a], check=True)
    subprocess.run([SPECULA, "trace", "-m", m, "--tokens", "1,2", "-n", "1", "-o", b, "--perturb", "1:attn_out:1.01"],
                   check=True)
    ta = open(a, "rb").read().splitlines(keepends=True)[:48]
    tb = open(b, "rb").read().splitlines(keepends=True)[:48]
    A, B = b"".join(ta), b"".join(tb)
    open(os.path.join(OUT, "trace", "a"), "wb").write(A)
    open(os.path.join(OUT, "trace", "a_a"), "wb").write(A + b"\0" + A)
    open(os.path.join(OUT, "trace", "a_perturbed"), "wb").write(A + b"\0" + B)
    open(os.path.join(OUT, "trace", "a_reordered"), "wb").write(A + b"\0" + b"".join(reversed(ta)))
print("seeds:", {t: len(os.listdir(os.path.join(OUT, t))) for t in ("safetensors", "config", "trace")})
