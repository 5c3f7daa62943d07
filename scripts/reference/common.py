"""Shared helpers for the reference-fixture scripts.

Every fixture is a tiny checkpoint in the exact Hugging Face hub layout, written by
transformers itself (save_pretrained), plus what transformers computes from it after
loading it back from disk in float32 with eager attention:

  <out>/<name>/config.json, generation_config.json, *.safetensors   (the checkpoint)
  <out>/<name>/reference.json   prompts, greedy continuations, RoPE tables, metadata
  <out>/<name>/logits.bin       float32 little-endian logits, every position of every
                                prompt, rows concatenated in prompt order

Run on a machine with torch + transformers (the device machine): see make_fixtures.py.
"""
import json
import math
import os
import shutil

import torch

PROMPT_LENGTHS = (1, 5, 17, 64)
GREEDY_PROMPTS = 2      # greedy continuations for the first N prompts
GREEDY_NEW_TOKENS = 12


def randomize_(model, seed, std_scale=1.5):
    """Replaces transformers' init (std 0.02, unit norms, zero biases) with weights that
    make logits decisive and catch layout bugs: matrices ~ N(0, std_scale/sqrt(fan_in)),
    norm weights 1 + N(0, 0.1), biases and sinks N(0, 0.1..0.5)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "layernorm" in name):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1 or name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (std_scale / math.sqrt(fan_in)))


def make_prompts(vocab, seed, lengths=PROMPT_LENGTHS):
    g = torch.Generator().manual_seed(seed + 7)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


def load_reference(cls, path):
    try:
        return cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    except TypeError:
        return cls.from_pretrained(path, torch_dtype=torch.float32,
                                   attn_implementation="eager").eval()


def save_checkpoint(model, path, dtype, max_shard_size=None):
    if os.path.exists(path):
        shutil.rmtree(path)
    model = model.to(dtype)
    kw = {}
    if max_shard_size:
        kw["max_shard_size"] = max_shard_size
    model.save_pretrained(path, **kw)


def rope_info(ref):
    out = {}
    rot = getattr(getattr(ref, "model", ref), "rotary_emb", None)
    if rot is not None:
        out["inv_freq"] = [float(x) for x in rot.inv_freq.float().tolist()]
        out["attention_scaling"] = float(getattr(rot, "attention_scaling", 1.0))
    return out


def record(ref, path, prompts, extra=None):
    """Writes logits.bin and reference.json for a model loaded from `path`."""
    rows = []
    greedy = []
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ids = torch.tensor([p])
            logits = ref(input_ids=ids).logits[0].float()
            rows.append(logits)
            if i < GREEDY_PROMPTS:
                out = ref.generate(ids, attention_mask=torch.ones_like(ids),
                                   max_new_tokens=GREEDY_NEW_TOKENS, do_sample=False,
                                   pad_token_id=0)
                greedy.append(out[0, len(p):].tolist())
    allrows = torch.cat(rows, 0).contiguous()
    allrows.numpy().astype("<f4").tofile(os.path.join(path, "logits.bin"))
    meta = {
        "prompts": prompts,
        "greedy": greedy,
        "greedy_new_tokens": GREEDY_NEW_TOKENS,
        "vocab_size": int(allrows.shape[1]),
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
    }
    meta.update(rope_info(ref))
    if extra:
        meta.update(extra)
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def rewrite_rope_legacy(path, kind_key="rope_type"):
    """Rewrites config.json from transformers-5 `rope_parameters` to the legacy form:
    top-level rope_theta + rope_scaling (None for default RoPE). kind_key picks the
    legacy spelling of the type field ("rope_type" or "type")."""
    cpath = os.path.join(path, "config.json")
    with open(cpath) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters", None)
    if rp is None:
        return cfg
    rp = dict(rp)
    cfg["rope_theta"] = rp.pop("rope_theta", 10000.0)
    kind = rp.pop("rope_type", rp.pop("type", "default"))
    if kind == "default" and not rp:
        cfg["rope_scaling"] = None
    else:
        rp[kind_key] = kind
        cfg["rope_scaling"] = rp
    with open(cpath, "w") as f:
        json.dump(cfg, f, indent=2)
    return cfg
