"""DeepSeek-V4 multi-token prediction: an independent reference forward of the MTP module
and a fixture with one (dsv4_mtp), for tests/unit/test_mtp_dsv4.c.

usage: python3 scripts/reference/mtp_reference_dsv4.py OUT_DIR

transformers' DeepseekV4ForCausalLM ignores `mtp.*` weights. The module is written here from
DeepSeek's V4 inference code (inference/model.py, class MTPBlock):

    S_i      the main model's hc_mult residual streams at position i, before hc_head
    e        = enorm(embed(t_{i+1}))
    x_k      = e_proj(e) + h_proj(hnorm(S_i,k))           per stream k; e_proj, h_proj [H, H]
    y        = Block(x)        a full V4 layer (hyper-connections, sliding attention here,
                               routed MoE), layer id num_hidden_layers, RoPE at i
    logits_i = head(norm(hc_head(y; the module's own hc_head_fn/base/scale)))

with transformers' DeepseekV4DecoderLayer as Block, its DeepseekV4HyperHead loaded with the
module's parameters as hc_head, and the main model's embedding and head. The module's
weights are random (this fixture is for parity, not acceptance).

Hub names (as DeepSeek's V4 releases carry them): mtp.0.{enorm,hnorm,norm}.weight,
mtp.0.{e_proj,h_proj}.weight, mtp.0.hc_head_{fn,base,scale}, and the block under mtp.0.
with the layer names of model.layers.N (attn_norm, ffn_norm, hc_attn_*, hc_ffn_*, attn.*,
ffn.*). Written: config.json (num_nextn_predict_layers 1), model.safetensors (BF16),
reference.json, logits.bin (main model, every position of every prompt), mtp_logits.bin
(rows i = 0 .. n-2 of each prompt of n tokens, float32).
"""
import json
import math
import os
import shutil
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

from common import load_reference, randomize_
from make_dsv4_fixtures import base, randomize_v4_
from make_moe_fixtures import read_tensors
from mtp_reference import rmsnorm

NAME = "dsv4_mtp"
SEED = 1500
PROMPT_LENGTHS = (2, 9, 40)
MAIN = dict(num_hidden_layers=2, layer_types=["sliding_attention", "heavily_compressed_attention"],
            mlp_layer_types=["hash_moe", "moe"], n_routed_experts=4, moe_intermediate_size=16,
            num_nextn_predict_layers=1)
L = 2


def with_block(over):
    """The same config with the MTP block as one more layer (sliding attention, routed MoE)."""
    o = dict(over)
    o["num_hidden_layers"] = L + 1
    o["layer_types"] = over["layer_types"] + ["sliding_attention"]
    o["mlp_layer_types"] = over["mlp_layer_types"] + ["moe"]
    return o


def module_tensors(cfg, g):
    """The MTP module's own tensors (BF16), random."""
    H, N = cfg.hidden_size, cfg.hc_mult
    t = {
        "mtp.0.enorm.weight": 1.0 + 0.1 * torch.randn(H, generator=g),
        "mtp.0.hnorm.weight": 1.0 + 0.1 * torch.randn(H, generator=g),
        "mtp.0.norm.weight": 1.0 + 0.1 * torch.randn(H, generator=g),
        "mtp.0.e_proj.weight": torch.randn(H, H, generator=g) * (1.0 / math.sqrt(H)),
        "mtp.0.h_proj.weight": torch.randn(H, H, generator=g) * (1.0 / math.sqrt(H)),
        "mtp.0.hc_head_fn": torch.randn(N, N * H, generator=g) * (1.5 / math.sqrt(N * H)),
        "mtp.0.hc_head_base": 0.1 * torch.randn(N, generator=g),
        "mtp.0.hc_head_scale": 1.0 + 0.2 * torch.randn(1, generator=g),
    }
    return {k: v.to(torch.bfloat16) for k, v in t.items()}


def write_fixture(path, g):
    """An (L+1)-layer model through save_pretrained (the block gets the V4 layer names),
    its layer L renamed to mtp.0.*, the module's own tensors added, config back to L."""
    cfg = DeepseekV4Config(**base(**with_block(MAIN)))
    model = DeepseekV4ForCausalLM(cfg).eval()
    randomize_(model, seed=SEED)
    randomize_v4_(model, SEED + 1)
    tmp = path + ".block"
    for d in (path, tmp):
        if os.path.exists(d):
            shutil.rmtree(d)
    model.to(torch.bfloat16).save_pretrained(tmp)
    tensors, lp = {}, f"model.layers.{L}."
    for k, v in read_tensors(tmp).items():
        tensors["mtp.0." + k[len(lp):] if k.startswith(lp) else k] = v.contiguous()
    tensors.update(module_tensors(cfg, g))
    os.makedirs(path)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(tmp, "config.json")) as f:
        c = json.load(f)
    c.update(num_hidden_layers=L, layer_types=c["layer_types"][:L], mlp_layer_types=c["mlp_layer_types"][:L],
             num_nextn_predict_layers=1)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    if os.path.exists(os.path.join(tmp, "generation_config.json")):
        shutil.copy(os.path.join(tmp, "generation_config.json"), path)
    return tmp, sorted(k for k in tensors if k.startswith("mtp."))


def main_streams(model, ids):
    """The main model's logits and its streams before hc_head [B, T, N, H]."""
    seen = {}
    hook = model.model.hc_head.register_forward_hook(lambda m, a, o: seen.__setitem__("s", a[0]))
    try:
        logits = model(input_ids=ids, use_cache=False).logits.float()
    finally:
        hook.remove()
    return logits, seen["s"].float()


class MTP:
    def __init__(self, block_model, path):
        self.big = block_model
        self.block = block_model.model.layers[L]
        self.cfg = block_model.config
        with safe_open(os.path.join(path, "model.safetensors"), "pt") as st:
            self.t = {k: st.get_tensor(k).float() for k in st.keys() if k.startswith("mtp.0.")}
        self.head = type(block_model.model.hc_head)(self.cfg).eval()
        with torch.no_grad():
            self.head.hc_fn.copy_(self.t["mtp.0.hc_head_fn"])
            self.head.hc_base.copy_(self.t["mtp.0.hc_head_base"])
            self.head.hc_scale.copy_(self.t["mtp.0.hc_head_scale"].reshape(self.head.hc_scale.shape))

    def __call__(self, streams, next_ids, embed, lm_head):
        eps = self.cfg.rms_norm_eps
        e = rmsnorm(embed(next_ids), self.t["mtp.0.enorm.weight"], eps)
        x = (e @ self.t["mtp.0.e_proj.weight"].t()).unsqueeze(2) + \
            rmsnorm(streams, self.t["mtp.0.hnorm.weight"], eps) @ self.t["mtp.0.h_proj.weight"].t()
        T = next_ids.shape[1]
        pos = torch.arange(T).unsqueeze(0)
        rot = self.big.model.rotary_emb
        pe = {"main": rot(e, position_ids=pos, layer_type="main"),
              "compress": rot(e, position_ids=pos, layer_type="compress")}
        i = torch.arange(T)
        d = i.view(T, 1) - i.view(1, T)  # query - key
        keep = (d >= 0) & (d < self.cfg.sliding_window)  # keys (i - W, i]
        mask = torch.zeros(T, T).masked_fill(~keep, float("-inf")).view(1, 1, T, T)
        y = self.block(x, position_embeddings=pe, position_ids=pos, attention_mask=mask,
                       input_ids=next_ids, past_key_values=None)
        return lm_head(rmsnorm(self.head(y), self.t["mtp.0.norm.weight"], eps)).float()


def main(out):
    torch.manual_seed(SEED)
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    g = torch.Generator().manual_seed(SEED + 2)
    path = os.path.join(out, NAME)
    tmp, keys = write_fixture(path, g)
    print("mtp tensors:", len(keys), keys[:6], flush=True)
    ref = load_reference(DeepseekV4ForCausalLM, path)
    mtp = MTP(load_reference(DeepseekV4ForCausalLM, tmp), path)
    gp = torch.Generator().manual_seed(SEED + 7)
    prompts = [torch.randint(0, 128, (n,), generator=gp).tolist() for n in PROMPT_LENGTHS]
    rows, mrows = [], []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            logits, s = main_streams(ref, ids)
            rows.append(logits[0])
            mrows.append(mtp(s[:, :-1], ids[:, 1:], ref.model.embed_tokens, ref.lm_head)[0])
    torch.cat(rows).contiguous().numpy().astype("<f4").tofile(os.path.join(path, "logits.bin"))
    torch.cat(mrows).contiguous().numpy().astype("<f4").tofile(os.path.join(path, "mtp_logits.bin"))
    shutil.rmtree(tmp)
    meta = {"prompts": prompts, "vocab_size": 128, "mtp_tensors": keys, "seed": SEED,
            "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{NAME}: {sum(r.shape[0] for r in mrows)} MTP rows, max |logit| "
          f"{max(float(r.abs().max()) for r in mrows):.3f}; files {sorted(os.listdir(path))}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
