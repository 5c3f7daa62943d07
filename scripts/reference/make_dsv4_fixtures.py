"""Creates the DeepSeek-V4 parity fixtures with transformers (DeepseekV4ForCausalLM).

usage: python3 scripts/reference/make_dsv4_fixtures.py OUT_DIR [NAME ...]   (no NAME: every fixture)

Tiny configs that exercise every layer type (sliding_attention, compressed_sparse_attention
with the lightning indexer and a top-k smaller than the number of compressed entries,
heavily_compressed_attention), both MoE types (hash_moe, moe), the router scoring
functions, the SwiGLU clamp, YaRN on the "compress" RoPE, hyper-connections with few and
many Sinkhorn iterations. Prompts run to 300 tokens so that they cross many compression
windows and the sliding window; greedy continuations of the two longest prompts cross
further window boundaries while decoding.

Quantized fixtures (QUANTIZED): the routed and shared experts as ModelOpt ships NVFP4
(U8 codes, F8_E4M3 scale per 16, F32 weight_scale_2, input_scale), and every linear layer
but the router in FP8 E4M3 with 128x128 weight_scale_inv blocks (DeepSeek-V3's convention;
hidden and expert widths past 128 so that the scale grids are 2x2). The quantizers are
make_moe_fixtures.py's; as there, the reference is transformers loading an F32 checkpoint
of the dequantized weights (everything else rounded to BF16 in both).

Each fixture directory holds what common.py describes (checkpoint, reference.json,
logits.bin) and reference.json adds:
  greedy            greedy continuations computed without a cache (full recompute per step)
  greedy_generate   the same continuations from model.generate() (transformers' cache path)
  cache_check       max |logits| difference between one prefill and (prefill half, then one
                    token at a time through transformers' cache): the reference's own
                    consistency, so a disagreement is known to be transformers' and not ours
  rope              inv_freq and attention scaling of the "main" and "compress" RoPE
  keys              the checkpoint's tensor names, dtypes and shapes as save_pretrained wrote them
"""
import json
import os
import shutil
import sys
import traceback

import torch
from safetensors import safe_open
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

from common import load_reference, make_prompts, randomize_
from make_moe_fixtures import (E2M1, fp8_block, is_linear, modelopt_nvfp4, quant_mxfp4,
                               write_quantized)

PROMPT_LENGTHS = (1, 6, 37, 300)
GREEDY_PROMPTS = (2, 3)
GREEDY_NEW_TOKENS = 20


def base(**kw):
    c = dict(vocab_size=128, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=1, head_dim=32, q_lora_rank=32, partial_rotary_factor=0.25,
             num_experts_per_tok=2, n_routed_experts=8, n_shared_experts=1, moe_intermediate_size=32,
             scoring_func="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5,
             max_position_embeddings=1024, rope_theta=10000.0, compress_rope_theta=160000.0,
             layer_types=["sliding_attention", "compressed_sparse_attention",
                          "heavily_compressed_attention", "compressed_sparse_attention"],
             compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
             mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"],
             hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=10.0, sliding_window=16,
             o_groups=2, o_lora_rank=16, index_n_heads=2, index_head_dim=16, index_topk=4,
             num_nextn_predict_layers=0, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
             tie_word_embeddings=False)
    c.update(kw)
    return c


FIXTURES = [
    # name, config overrides, save dtype, seed
    ("dsv4_sqrtsoftplus_bf16", {}, torch.bfloat16, 400),
    ("dsv4_sigmoid_yarn_clamp_f32",
     dict(num_hidden_layers=3, layer_types=["heavily_compressed_attention", "compressed_sparse_attention",
                                            "sliding_attention"],
          mlp_layer_types=["hash_moe", "moe", "moe"], scoring_func="sigmoid", swiglu_limit=0.5,
          hc_sinkhorn_iters=3, sliding_window=12, index_topk=6, o_groups=4, o_lora_rank=8,
          compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
          rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                           "beta_fast": 32.0, "beta_slow": 1.0}),
     torch.float32, 401),
    # transformers 5.17's ACT2FN has no "softmax" (nor "sqrt_softplus"): scoring_func is
    # sqrtsoftplus or sigmoid. norm_topk_prob=False is accepted and ignored by its routers,
    # which always renormalize the top-k weights.
    ("dsv4_csa_hca_nonorm_bf16",
     dict(num_hidden_layers=2, layer_types=["compressed_sparse_attention", "heavily_compressed_attention"],
          mlp_layer_types=["moe", "hash_moe"], norm_topk_prob=False,
          n_routed_experts=6, num_experts_per_tok=3, index_n_heads=4, index_topk=9),
     torch.bfloat16, 402),
]


# name, config overrides, quantizer (make_moe_fixtures: (key, F32 tensor) -> None to keep
# as BF16, or (hub tensors, dequantized F32)), quantization_config, seed
QUANTIZED = [
    # the seed's model: NVFP4 experts (routed and shared), everything else BF16
    ("dsv4_nvfp4_modelopt", dict(moe_intermediate_size=48),
     modelopt_nvfp4(excluded=("attn.", "ffn.gate.")),
     {"quant_method": "modelopt", "quant_algo": "NVFP4",
      "producer": {"name": "modelopt", "version": "0.37.0"},
      "ignore": ["head", "model.embed_tokens", "model.hc_head*", "model.layers.*.attn*",
                 "model.layers.*.hc_*", "model.layers.*.ffn.gate"],
      "config_groups": {"group_0": {"targets": ["Linear"],
                                    "weights": {"type": "float", "num_bits": 4, "group_size": 16,
                                                "dynamic": False},
                                    "input_activations": {"type": "float", "num_bits": 4,
                                                          "group_size": 16, "dynamic": False}}}},
     403),
    # DeepSeek's FP8: every linear layer but the router (gate), hc, norms, embedding, head;
    # H 144 and expert width 136 give the experts 2x2 scale grids with partial blocks
    ("dsv4_fp8_block",
     dict(hidden_size=144, moe_intermediate_size=136, num_hidden_layers=3, n_routed_experts=3,
          layer_types=["compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"],
          mlp_layer_types=["hash_moe", "moe", "moe"],
          compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
          index_topk=5, sliding_window=12),
     fp8_block(excluded=("ffn.gate.",)),
     {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
     404),
]


def mxfp4_matrix(excluded):
    """Per-matrix MXFP4 (quant_method mxfp4): '.weight' I8 [rows, cols/2], two E2M1 codes a
    byte (the even column in the low nibble, as gpt-oss's blocks), '.weight_scale' U8 UE8M0
    [rows, cols/32]; the dequantized F32 for the reference."""
    def q(k, t):
        if not is_linear(k, excluded):
            return None
        rows, cols = t.shape
        blocks, scales = quant_mxfp4(t.float())  # [rows, cols/32, 16], [rows, cols/32]
        lo = (blocks & 15).long()
        hi = (blocks >> 4).long()
        codes = torch.stack([lo, hi], -1).reshape(rows, cols // 32, 32)
        deq = E2M1[codes] * torch.exp2(scales.float() - 127).unsqueeze(-1)
        base = k[:-len(".weight")]
        return ({k: blocks.reshape(rows, cols // 2).view(torch.int8).contiguous(),
                 base + ".weight_scale": scales}, deq.reshape(rows, cols))
    return q


QUANTIZED.append(
    # MXFP4 experts as per-matrix tensors (I8 codes + UE8M0 scales), everything else BF16
    ("dsv4_mxfp4",
     dict(moe_intermediate_size=64),
     mxfp4_matrix(excluded=("attn.", "ffn.gate.")),
     {"quant_method": "mxfp4",
      "modules_to_not_convert": ["head", "model.embed_tokens", "model.hc_head*", "model.layers.*.attn*",
                                 "model.layers.*.hc_*", "model.layers.*.ffn.gate"]},
     405))


def randomize_v4_(model, seed):
    """On top of common.randomize_: hyper-connection scales near 1 (0.1 would mute the
    mixing), sinks larger, router correction bias, and a hash table of distinct experts."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("hc.scale") or name.endswith("hc_head.hc_scale"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("sinks"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))
            elif name.endswith("tid2eid"):
                rows = [torch.randperm(cfg.n_routed_experts, generator=g)[:cfg.num_experts_per_tok]
                        for _ in range(cfg.vocab_size)]
                b.copy_(torch.stack(rows).to(b.dtype))


def key_table(path):
    out = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(path, f), "pt") as st:
                for k in st.keys():
                    sl = st.get_slice(k)
                    out[k] = [str(sl.get_dtype()), list(sl.get_shape())]
    return out


def rope_tables(ref):
    rot = ref.model.rotary_emb
    out = {}
    for lt in ("main", "compress"):
        out[lt] = {"inv_freq": [float(x) for x in getattr(rot, lt + "_inv_freq").float().tolist()],
                   "attention_scaling": float(getattr(rot, lt + "_attention_scaling"))}
    return out


def greedy_nocache(ref, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = ref(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
            ids.append(int(logits.argmax()))
    return ids[len(prompt):]


def cache_check(ref, prompt):
    """Max |diff| between one prefill and half a prefill followed by single tokens."""
    from transformers import DynamicCache
    ids = torch.tensor([prompt])
    with torch.no_grad():
        full = ref(input_ids=ids, use_cache=False).logits[0]
        cache = DynamicCache(config=ref.config)
        half = len(prompt) // 2
        parts = [ref(input_ids=ids[:, :half], past_key_values=cache, use_cache=True).logits[0]]
        for t in range(half, len(prompt)):
            parts.append(ref(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits[0])
        step = torch.cat(parts, 0)
    return float((full - step).abs().max()), float(full.abs().max())


def new_model(overrides, seed):
    cfg = DeepseekV4Config(**base(**overrides))
    model = DeepseekV4ForCausalLM(cfg).eval()
    randomize_(model, seed=seed)
    randomize_v4_(model, seed + 1)
    return cfg, model


def make_fixture(out, name, overrides, dtype, seed):
    cfg, model = new_model(overrides, seed)
    path = os.path.join(out, name)
    if os.path.exists(path):
        shutil.rmtree(path)
    model.to(dtype).save_pretrained(path)
    ref = load_reference(DeepseekV4ForCausalLM, path)
    write_reference(ref, path, name, cfg, seed, {"save_dtype": str(dtype), "config_overrides": overrides})


def make_quantized_fixture(out, name, overrides, quantize, quant_config, seed):
    """make_moe_fixtures.quantized_fixture's pattern (write_quantized): the checkpoint gets
    the packed tensors and the quantization_config, the reference loads an F32 checkpoint of
    the dequantized weights; integer tensors (the hash layers' tid2eid) are kept."""
    cfg, model = new_model(overrides, seed)
    path, refdir = write_quantized(out, name, model, quantize, quant_config)
    ref = load_reference(DeepseekV4ForCausalLM, refdir)
    write_reference(ref, path, name, cfg, seed,
                    {"quantization": quant_config.get("quant_algo") or quant_config["quant_method"],
                     "reference": "transformers on an F32 checkpoint of the dequantized weights",
                     "config_overrides": overrides})
    shutil.rmtree(refdir)


def write_reference(ref, path, name, cfg, seed, extra):
    prompts = make_prompts(cfg.vocab_size, seed=seed, lengths=PROMPT_LENGTHS)
    rows = []
    with torch.no_grad():
        for p in prompts:
            rows.append(ref(input_ids=torch.tensor([p]), use_cache=False).logits[0].float())
    allrows = torch.cat(rows, 0).contiguous()
    allrows.numpy().astype("<f4").tofile(os.path.join(path, "logits.bin"))
    greedy, greedy_gen = [], []
    for i in GREEDY_PROMPTS:
        greedy.append(greedy_nocache(ref, prompts[i], GREEDY_NEW_TOKENS))
        ids = torch.tensor([prompts[i]])
        try:
            g = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=GREEDY_NEW_TOKENS,
                             do_sample=False, pad_token_id=0)
            greedy_gen.append(g[0, len(prompts[i]):].tolist())
        except Exception as e:  # recorded, not fatal: the no-cache continuation is the reference
            greedy_gen.append("generate failed: %r" % (e,))
    try:
        cc = cache_check(ref, prompts[-1])
    except Exception as e:
        cc = "cache check failed: %r" % (e,)
    meta = {
        "prompts": prompts, "greedy": greedy, "greedy_prompts": list(GREEDY_PROMPTS),
        "greedy_new_tokens": GREEDY_NEW_TOKENS, "greedy_generate": greedy_gen,
        "cache_check": cc, "vocab_size": int(allrows.shape[1]),
        "transformers": __import__("transformers").__version__, "torch": torch.__version__,
        "rope": rope_tables(ref), "family": "DeepseekV4ForCausalLM",
    }
    meta.update(extra)
    meta["keys"] = key_table(path)
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: greedy {greedy[0][:8]} generate {greedy_gen[0] if isinstance(greedy_gen[0], str) else greedy_gen[0][:8]} "
          f"cache_check {cc}", flush=True)


def main(out, names):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    jobs = [(f[0], make_fixture, f) for f in FIXTURES] + [(f[0], make_quantized_fixture, f) for f in QUANTIZED]
    unknown = set(names) - {j[0] for j in jobs}
    if unknown:
        sys.exit("unknown fixture(s): " + ", ".join(sorted(unknown)))
    failed = 0
    for name, fn, args in jobs:
        if names and name not in names:
            continue
        try:
            fn(out, *args)
        except Exception:
            failed += 1
            print(f"{name}: FAILED", flush=True)
            traceback.print_exc()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
