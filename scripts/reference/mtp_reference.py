"""DeepSeek-V3 multi-token prediction (MTP): an independent reference forward and the
fixture whose MTP layer was trained to draft for its own model.

usage: python3 scripts/reference/mtp_reference.py OUT_DIR

transformers runs the main model and ignores the MTP weights, so the MTP module is written
here from the DeepSeek-V3 paper (arXiv 2412.19437, section 2.2), with the input order and
hidden-state convention of the hub checkpoints' inference engines:

    h_i      the main model's last hidden state at position i, before its final norm
    x_i      = eh_proj([enorm(Emb(t_{i+1})); hnorm(h_i)])      eh_proj [H, 2H]
               (the paper writes [RMSNorm(h); RMSNorm(Emb)]; the released weights are
               used with the embedding half first)
    y_{0..}  = TRM(x_{0..})   one ordinary decoder block (MLA + MoE), causal, RoPE at i
    logits_i = shared_head.head(shared_head.norm(y_i))          predicts t_{i+2}

The embedding is the main model's. The block is transformers' DeepseekV3DecoderLayer (an
ordinary layer of the same architecture); the rest is written out below.

Hub layout of the MTP layer, index L = num_hidden_layers (DeepSeek-V3: model.layers.61):
    model.layers.L.enorm.weight, hnorm.weight [H]; eh_proj.weight [H, 2H]
    model.layers.L.shared_head.norm.weight [H]; shared_head.head.weight [V, H]
    model.layers.L.embed_tokens.weight [V, H] (a copy of the main embedding)
    model.layers.L.{input_layernorm, post_attention_layernorm, self_attn.*, mlp.*}

The fixture (deepseekv3_mtp): a tiny DeepSeek-V3 (2 layers, the MTP block MoE) with random
weights and an LM head scaled by HEAD_SCALE (sharper, more predictable continuations), whose
MTP layer starts as a copy of the last main layer and is trained (seeded, TRAIN_STEPS Adam
steps on the CPU, under a minute) to predict the main model's next-next token: soft
cross-entropy against the main model's own distribution of t_{i+2} on 1024 sequences it
continued (half greedy, half sampled) from random 8-token prompts. A random model's
continuations are hard to foresee: held-out top-1 agreement ends near 12%, which is what
the fixture is for (acceptance measurably above zero, not a speed claim). Written:
    config.json, generation_config.json, model.safetensors   main + MTP weights, BF16
    reference.json   prompts, greedy continuations, the MTP predictions' agreement with the
                     main model on them, training log
    logits.bin       the main model's logits (every position of every prompt, float32)
    mtp_logits.bin   the MTP logits: for each prompt of n tokens, rows i = 0 .. n-2 (float32)
"""
import json
import math
import os
import shutil
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

from common import load_reference, randomize_
from make_moe_fixtures import read_tensors

NAME = "deepseekv3_mtp"
SEED = 1400
TRAIN_STEPS = 2000
HEAD_SCALE = 3.0  # sharpens the main model's logits: its continuations become predictable
PROMPT_LENGTHS = (2, 9, 33)


def config(n_layers):
    return DeepseekV3Config(
        vocab_size=128, hidden_size=64, num_hidden_layers=n_layers, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, intermediate_size=96,
        moe_intermediate_size=24, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        n_group=2, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, rope_interleave=True, num_nextn_predict_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def rmsnorm(x, w, eps):
    x32 = x.float()
    return w.float() * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps))


class MTP(torch.nn.Module):
    """One MTP module: the combine stage, the block, the shared head's norm (head and
    embedding are the main model's, passed in)."""

    def __init__(self, cfg, block):
        super().__init__()
        H = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        self.enorm = torch.nn.Parameter(torch.ones(H))
        self.hnorm = torch.nn.Parameter(torch.ones(H))
        self.eh_proj = torch.nn.Parameter(torch.zeros(H, 2 * H))
        self.head_norm = torch.nn.Parameter(torch.ones(H))
        self.block = block

    def forward(self, h, next_tokens, embed, head, rotary):
        """h [B, T, H] main hidden states at positions 0..T-1, next_tokens [B, T] the
        tokens at 1..T; returns (logits [B, T, V] for t_{2..T+1}, block output y)."""
        B, T, _ = h.shape
        e = embed(next_tokens)
        x = torch.cat([rmsnorm(e, self.enorm, self.eps), rmsnorm(h, self.hnorm, self.eps)], -1)
        x = x @ self.eh_proj.t()
        pos = torch.arange(T).unsqueeze(0).expand(B, T)
        cos_sin = rotary(x, pos)
        mask = torch.full((T, T), float("-inf")).triu(1).view(1, 1, T, T).expand(B, 1, T, T)
        y = self.block(x, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
        if isinstance(y, tuple):
            y = y[0]
        return head(rmsnorm(y, self.head_norm, self.eps)), y


def main_hidden(model, ids):
    """The main model's logits and its last hidden state before the final norm."""
    seen = {}
    hook = model.model.norm.register_forward_hook(lambda m, a, o: seen.__setitem__("h", a[0]))
    try:
        logits = model(input_ids=ids).logits.float()
    finally:
        hook.remove()
    return logits, seen["h"].float()


def sample_data(model, n_seq, n_prompt, n_new, g):
    """Sequences the main model continues from random prompts: half greedy, half sampled."""
    V = model.config.vocab_size
    ids = torch.randint(0, V, (n_seq, n_prompt), generator=g)
    with torch.no_grad():
        for _ in range(n_new):
            logits = model(input_ids=ids).logits[:, -1].float()
            nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=g)
            greedy = logits.argmax(-1, keepdim=True)
            half = torch.arange(n_seq).unsqueeze(1) < n_seq // 2
            ids = torch.cat([ids, torch.where(half, greedy, nxt)], 1)
    return ids


def train(mtp, model, data, steps, g, log):
    with torch.no_grad():
        logits, h = main_hidden(model, data)
        target = F.softmax(logits[:, 1:], -1)        # the main model's p(t_{i+2}) at row i
    emb, head, rot = model.model.embed_tokens, model.lm_head, model.model.rotary_emb
    params = [p for p in mtp.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    n = data.shape[0]
    for step in range(steps):
        idx = torch.randint(0, n - 32, (32,), generator=g)  # the last 32 are held out
        out, _ = mtp(h[idx, :-1], data[idx, 1:], emb, head, rot)
        loss = -(target[idx] * F.log_softmax(out, -1)).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 250 == 0 or step == steps - 1:
            with torch.no_grad():
                ho, _ = mtp(h[-32:, :-1], data[-32:, 1:], emb, head, rot)
                agree = (ho.argmax(-1) == target[-32:].argmax(-1)).float().mean().item()
            log.append({"step": step, "loss": round(loss.item(), 4), "heldout_top1": round(agree, 4)})
            print(f"step {step}: loss {loss.item():.4f} held-out top-1 agreement {agree:.3f}", flush=True)


def hub_tensors(mtp, L):
    p = f"model.layers.{L}."
    return {p + "enorm.weight": mtp.enorm, p + "hnorm.weight": mtp.hnorm,
            p + "eh_proj.weight": mtp.eh_proj, p + "shared_head.norm.weight": mtp.head_norm}


def save_fixture(path, model, mtp, L):
    """Main model + MTP block through save_pretrained of an (L+1)-layer model (hub names for
    the block's experts), then the MTP-only tensors, then config.json back to L layers."""
    big = DeepseekV3ForCausalLM(config(L + 1)).eval()
    missing, _ = big.load_state_dict(model.state_dict(), strict=False)
    big.model.layers[L].load_state_dict(mtp.block.state_dict())
    assert all(k.startswith(f"model.layers.{L}.") for k in missing), missing
    if os.path.exists(path):
        shutil.rmtree(path)
    big.to(torch.bfloat16).save_pretrained(path)
    tensors = read_tensors(path)
    for f in os.listdir(path):
        if f.endswith(".safetensors"):
            os.remove(os.path.join(path, f))
    if os.path.exists(os.path.join(path, "model.safetensors.index.json")):
        os.remove(os.path.join(path, "model.safetensors.index.json"))
    extra = hub_tensors(mtp, L)
    extra[f"model.layers.{L}.shared_head.head.weight"] = model.lm_head.weight
    extra[f"model.layers.{L}.embed_tokens.weight"] = model.model.embed_tokens.weight
    for k, v in extra.items():
        tensors[k] = v.detach().to(torch.bfloat16).contiguous()
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    cpath = os.path.join(path, "config.json")
    with open(cpath) as f:
        cfg = json.load(f)
    cfg["num_hidden_layers"] = L
    cfg["num_nextn_predict_layers"] = 1
    with open(cpath, "w") as f:
        json.dump(cfg, f, indent=2)


def load_mtp(path, L):
    """The MTP module as saved (BF16 weights in fp32): the block through transformers with
    an (L+1)-layer config, the rest read by name."""
    tmp = path + ".big"
    os.makedirs(tmp, exist_ok=True)
    for f in os.listdir(path):
        if f.endswith(".safetensors") or f == "generation_config.json":
            shutil.copy(os.path.join(path, f), tmp)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg["num_hidden_layers"] = L + 1
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f)
    big = load_reference(DeepseekV3ForCausalLM, tmp)
    mtp = MTP(config(L + 1), big.model.layers[L]).eval()
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as st:
        for k, p in hub_tensors(mtp, L).items():
            p.data.copy_(st.get_tensor(k).float())
        head = st.get_tensor(f"model.layers.{L}.shared_head.head.weight").float()
    shutil.rmtree(tmp)
    return mtp, head


def agreement(model, mtp, head, prompts, n_new):
    """Greedy continuation of each prompt and how often the MTP's argmax at row i equals the
    main model's argmax at row i + 1 along it (the k = 1 greedy acceptance to expect)."""
    out, hits, total = [], 0, 0
    emb, rot = model.model.embed_tokens, model.model.rotary_emb
    lin = lambda x: x @ head.t()
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            for _ in range(n_new):
                nxt = model(input_ids=ids).logits[0, -1].argmax()
                ids = torch.cat([ids, nxt.view(1, 1)], 1)
            logits, h = main_hidden(model, ids)
            ml, _ = mtp(h[:, :-1], ids[:, 1:], emb, lin, rot)
            a = ml[0, len(p) - 1:].argmax(-1) == logits[0, len(p):].argmax(-1)
            hits += int(a.sum())
            total += a.numel()
            out.append(ids[0, len(p):].tolist())
    return out, hits / max(total, 1)


def main(out):
    torch.manual_seed(SEED)
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    g = torch.Generator().manual_seed(SEED)
    L = 2
    model = DeepseekV3ForCausalLM(config(L)).eval()
    randomize_(model, seed=SEED)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))
        model.lm_head.weight.mul_(HEAD_SCALE)
        for prm in model.parameters():  # train against the weights as saved (BF16)
            prm.copy_(prm.to(torch.bfloat16).float())
    for prm in model.parameters():
        prm.requires_grad_(False)
    big = DeepseekV3ForCausalLM(config(L + 1))
    mtp = MTP(config(L + 1), big.model.layers[L]).train()
    mtp.block.load_state_dict(model.model.layers[L - 1].state_dict())  # start from the last layer
    with torch.no_grad():
        mtp.eh_proj.copy_(torch.randn(mtp.eh_proj.shape, generator=g) / math.sqrt(128))
    data = sample_data(model, 1024, 8, 56, g)
    log = []
    train(mtp, model, data, TRAIN_STEPS, g, log)
    path = os.path.join(out, NAME)
    save_fixture(path, model, mtp.eval(), L)

    ref = load_reference(DeepseekV3ForCausalLM, path)
    mtp2, head = load_mtp(path, L)
    lin = lambda x: x @ head.t()
    gp = torch.Generator().manual_seed(SEED + 7)
    prompts = [torch.randint(0, 128, (n,), generator=gp).tolist() for n in PROMPT_LENGTHS]
    rows, mrows = [], []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            logits, h = main_hidden(ref, ids)
            rows.append(logits[0])
            if len(p) > 1:
                ml, _ = mtp2(h[:, :-1], ids[:, 1:], ref.model.embed_tokens, lin, ref.model.rotary_emb)
                mrows.append(ml[0].float())
    torch.cat(rows).contiguous().numpy().astype("<f4").tofile(os.path.join(path, "logits.bin"))
    torch.cat(mrows).contiguous().numpy().astype("<f4").tofile(os.path.join(path, "mtp_logits.bin"))
    greedy, agree = agreement(ref, mtp2, head, prompts[1:], 24)
    meta = {"prompts": prompts, "greedy_prompts": [1, 2], "greedy": greedy, "greedy_new_tokens": 24,
            "mtp_greedy_agreement": agree, "train_log": log, "train_steps": TRAIN_STEPS,
            "vocab_size": 128, "mtp_layer": L, "seed": SEED,
            "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{NAME}: greedy agreement of the MTP's argmax with the main model's: {agree:.3f}", flush=True)
    print("files:", sorted(os.listdir(path)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
