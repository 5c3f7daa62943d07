"""Creates the mixture-of-experts and quantized parity fixtures with transformers.

usage: python3 scripts/reference/make_moe_fixtures.py OUT_DIR

Families: Qwen3-MoE (dense layers among MoE layers, decoder_sparse_step, norm_topk_prob
both ways), Mixtral (sliding window shorter than the prompt), gpt-oss (sinks, alternating
sliding/full layers with a window shorter than the prompt, YaRN, router bias, interleaved
gate/up, clamps; BF16 in transformers' [E, H, 2I] layout and MXFP4 as the hub ships it),
DeepSeek-V3 (MLA with q_lora_rank set and null, group-limited sigmoid routing with a
correction bias, shared experts, first_k_dense_replace, YaRN mscale).

Quantized checkpoints:
  - MXFP4 (gpt-oss): the expert blocks/scales are written here and transformers loads them
    itself (Mxfp4Config(dequantize=True)): the reference is transformers' own decoding.
  - NVFP4 as ModelOpt ships it (quantization_config in config.json, or the legacy
    hf_quant_config.json) and as compressed-tensors ships it (weight_packed, divisor global
    scale); FP8 with 128x128 block scales (DeepSeek-V3's weight_scale_inv). The reference
    is transformers loading an F32 checkpoint that holds the dequantized weights.
Each fixture directory holds the checkpoint, reference.json and logits.bin (common.py).
"""
import json
import math
import os
import shutil
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, GptOssConfig,
                          GptOssForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

from common import load_reference, make_prompts, randomize_, record

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def rope(theta, **scaling):
    rp = {"rope_type": "default", "rope_theta": theta}
    rp.update(scaling)
    return rp


def small(**kw):
    base = dict(vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    base.update(kw)
    return base


def randomize_buffers_(model, seed):
    """Buffers that are weights in the checkpoint (DeepSeek's e_score_correction_bias)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))


def make_model(cls, cfg, seed):
    model = cls(cfg).eval()
    randomize_(model, seed=seed)
    randomize_buffers_(model, seed + 1)
    return model


def read_tensors(path):
    out = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(path, f), "pt") as st:
                for k in st.keys():
                    out[k] = st.get_tensor(k)
    return out


def write_checkpoint(path, config_dir, tensors):
    """One model.safetensors plus the configs from config_dir."""
    os.makedirs(path, exist_ok=True)
    for f in ("config.json", "generation_config.json"):
        if os.path.exists(os.path.join(config_dir, f)):
            shutil.copy(os.path.join(config_dir, f), os.path.join(path, f))
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(path, "model.safetensors"),
              metadata={"format": "pt"})


def edit_config(path, fn):
    p = os.path.join(path, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    fn(cfg)
    with open(p, "w") as f:
        json.dump(cfg, f, indent=2)


# ---- FP4 / FP8 quantizers (hub conventions; see ../shared/docs/FORMATS.md §3-4) -------------

def e2m1_codes(x):
    """Nearest E2M1 code of each value (x already scaled into [-6, 6])."""
    mags = E2M1[:8]
    idx = (x.abs().unsqueeze(-1) - mags).abs().argmin(-1)
    return idx | ((x < 0).to(idx.dtype) << 3)


def pack_nibbles(codes):
    """Low nibble = even element, high nibble = odd element."""
    codes = codes.to(torch.uint8)
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def quant_mxfp4(w):
    """w [..., rows, cols] -> blocks [..., rows, cols/32, 16] U8, scales [..., rows, cols/32] U8."""
    *lead, rows, cols = w.shape
    b = w.reshape(*lead, rows, cols // 32, 32)
    amax = b.abs().amax(-1, keepdim=True).clamp(min=1e-30)
    e = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    codes = e2m1_codes(b / torch.exp2(e))
    blocks = pack_nibbles(codes)
    return blocks.contiguous(), (e.squeeze(-1) + 127).to(torch.uint8).contiguous()


def quant_nvfp4(w):
    """w [rows, cols] -> (packed U8 [rows, cols/2], scale F8_E4M3 [rows, cols/16],
    global multiplier g = amax/(6*448), dequantized F32)."""
    rows, cols = w.shape
    g = float(w.abs().max()) / (6.0 * 448.0)
    b = w.reshape(rows, cols // 16, 16)
    amax = b.abs().amax(-1)
    s = (amax / (6.0 * g)).to(torch.float8_e4m3fn)
    s = torch.where(amax == 0, torch.ones_like(amax).to(torch.float8_e4m3fn), s)
    sf = s.float()
    codes = e2m1_codes((b / (sf * g).unsqueeze(-1)).clamp(-6, 6))
    deq = E2M1[codes] * (sf * g).unsqueeze(-1)
    return pack_nibbles(codes.reshape(rows, cols)), s, g, deq.reshape(rows, cols)


def quant_fp8_block(w, block=128):
    """w [rows, cols] -> (F8_E4M3 [rows, cols], scale_inv F32 [ceil(r/128), ceil(c/128)], deq)."""
    rows, cols = w.shape
    br, bc = math.ceil(rows / block), math.ceil(cols / block)
    scale = torch.zeros(br, bc)
    q = torch.zeros(rows, cols, dtype=torch.float8_e4m3fn)
    deq = torch.zeros(rows, cols)
    for i in range(br):
        for j in range(bc):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            s = max(float(blk.abs().max()), 1e-12) / 448.0
            qb = (blk / s).to(torch.float8_e4m3fn)
            scale[i, j] = s
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = qb
            deq[i * block:(i + 1) * block, j * block:(j + 1) * block] = qb.float() * s
    return q, scale, deq


# ---- fixtures ---------------------------------------------------------------------------------

def plain_fixture(out, name, cls, cfg, seed, dtype=torch.bfloat16):
    model = make_model(cls, cfg, seed)
    path = os.path.join(out, name)
    if os.path.exists(path):
        shutil.rmtree(path)
    model.to(dtype).save_pretrained(path)
    ref = load_reference(cls, path)
    return finish(ref, path, cfg, seed, {"family": cls.__name__, "save_dtype": str(dtype)})


def finish(ref, path, cfg, seed, extra):
    meta = record(ref, path, make_prompts(cfg.vocab_size, seed=seed), extra=extra)
    print(f"{os.path.basename(path)}: greedy {meta['greedy'][0][:6]}...", flush=True)
    return meta


def write_quantized(out, name, model, quantize, quant_config, extra_files=None):
    """Saves model (F32, hub names) through quantize(name, tensor) -> None (keep, cast to
    bf16) or (dict of hub tensors, dequantized F32): out/name gets the packed checkpoint and
    quant_config (None: no quantization_config), out/.ref-name an F32 checkpoint of the
    dequantized weights for the reference. Integer tensors are kept as they are. Returns
    (path, refdir); the caller removes refdir."""
    tmp = os.path.join(out, ".tmp-" + name)
    model.save_pretrained(tmp)  # F32, hub names
    packed, deq = {}, {}
    for k, t in read_tensors(tmp).items():
        q = quantize(k, t) if t.is_floating_point() else None
        if not t.is_floating_point():
            packed[k] = deq[k] = t
        elif q is None:
            packed[k] = t.to(torch.bfloat16)
            deq[k] = packed[k].float()
        else:
            packed.update(q[0])
            deq[k] = q[1]
    path = os.path.join(out, name)
    if os.path.exists(path):
        shutil.rmtree(path)
    write_checkpoint(path, tmp, packed)
    if quant_config is not None:
        edit_config(path, lambda c: c.__setitem__("quantization_config", quant_config))
    for fname, content in (extra_files or {}).items():
        with open(os.path.join(path, fname), "w") as f:
            json.dump(content, f, indent=2)
    refdir = os.path.join(out, ".ref-" + name)
    write_checkpoint(refdir, tmp, deq)
    shutil.rmtree(tmp)
    return path, refdir


def quantized_fixture(out, name, cls, cfg, seed, quantize, quant_config, extra_files=None):
    """quantize(name, tensor) -> None (keep, cast to bf16) or (dict of hub tensors, deq F32)."""
    path, refdir = write_quantized(out, name, make_model(cls, cfg, seed), quantize, quant_config,
                                   extra_files)
    ref = load_reference(cls, refdir)
    meta = finish(ref, path, cfg, seed, {"family": cls.__name__, "quantization": name})
    shutil.rmtree(refdir)
    return meta


def is_linear(k, excluded):
    return k.endswith(".weight") and k.startswith("model.layers.") and "norm" not in k and \
        not any(x in k for x in excluded)


def modelopt_nvfp4(excluded):
    g = torch.Generator().manual_seed(5)

    def q(k, t):
        if not is_linear(k, excluded):
            return None
        p, s, gs, deq = quant_nvfp4(t.float())
        base = k[:-len(".weight")]
        return ({k: p, base + ".weight_scale": s, base + ".weight_scale_2": torch.tensor(gs),
                 base + ".input_scale": torch.tensor(0.01 + 0.02 * float(torch.rand(1, generator=g)))},
                deq)
    return q


def ct_nvfp4(excluded):
    def q(k, t):
        if not is_linear(k, excluded):
            return None
        p, s, gs, deq = quant_nvfp4(t.float())
        base = k[:-len(".weight")]
        # compressed-tensors stores the reciprocal of ModelOpt's weight_scale_2
        return ({base + ".weight_packed": p, base + ".weight_scale": s,
                 base + ".weight_global_scale": torch.tensor([1.0 / gs])}, deq)
    return q


def fp8_block(excluded):
    def q(k, t):
        if not is_linear(k, excluded):
            return None
        w, s, deq = quant_fp8_block(t.float())
        return ({k: w, k[:-len(".weight")] + ".weight_scale_inv": s}, deq)
    return q


def gptoss_mxfp4_fixture(out, name, cfg, seed):
    """Experts written as the hub ships them; transformers dequantizes them at load."""
    from transformers import Mxfp4Config
    model = make_model(GptOssForCausalLM, cfg, seed)
    tmp = os.path.join(out, ".tmp-" + name)
    model.save_pretrained(tmp)
    tensors = read_tensors(tmp)
    packed = {}
    for k, t in tensors.items():
        if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"):
            blocks, scales = quant_mxfp4(t.float().transpose(1, 2).contiguous())  # [E, out, in]
            packed[k + "_blocks"] = blocks
            packed[k + "_scales"] = scales
        else:
            packed[k] = t.to(torch.bfloat16)
    path = os.path.join(out, name)
    if os.path.exists(path):
        shutil.rmtree(path)
    write_checkpoint(path, tmp, packed)
    edit_config(path, lambda c: c.__setitem__("quantization_config", {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"]}))
    shutil.rmtree(tmp)
    ref = GptOssForCausalLM.from_pretrained(path, quantization_config=Mxfp4Config(dequantize=True),
                                            dtype=torch.float32, attn_implementation="eager").eval()
    ref = ref.float()
    return finish(ref, path, cfg, seed, {"family": "GptOssForCausalLM", "quantization": "mxfp4",
                                          "reference": "transformers Mxfp4Config(dequantize=True)"})


def qwen3moe_cfg(**kw):
    c = small(intermediate_size=96, head_dim=16, moe_intermediate_size=32, num_experts_per_tok=2,
              rope_parameters=rope(1000000.0))
    c.update(kw)
    try:
        return Qwen3MoeConfig(**c)
    except TypeError:
        c["num_local_experts"] = c.pop("num_experts")
        return Qwen3MoeConfig(**c)


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    plain_fixture(out, "qwen3moe_mixed_bf16", Qwen3MoeForCausalLM,
                  qwen3moe_cfg(num_experts=8, mlp_only_layers=[0], norm_topk_prob=True), 200)
    plain_fixture(out, "qwen3moe_sparse_step2_nonorm", Qwen3MoeForCausalLM,
                  qwen3moe_cfg(num_hidden_layers=4, num_experts=6, num_experts_per_tok=3,
                               decoder_sparse_step=2, norm_topk_prob=False), 201)
    plain_fixture(out, "mixtral_window", MixtralForCausalLM,
                  MixtralConfig(**small(intermediate_size=96, num_local_experts=4,
                                        num_experts_per_tok=2, sliding_window=16,
                                        rms_norm_eps=1e-5, rope_parameters=rope(1000000.0))), 202)
    gpt = dict(intermediate_size=96, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
               sliding_window=8, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
               rms_norm_eps=1e-5,
               rope_parameters=rope(150000.0, rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0,
                                    truncate=False, original_max_position_embeddings=4096))
    plain_fixture(out, "gptoss_bf16", GptOssForCausalLM, GptOssConfig(**small(**gpt)), 203)
    gptoss_mxfp4_fixture(out, "gptoss_mxfp4", GptOssConfig(**small(**gpt)), 204)
    ds = dict(intermediate_size=96, moe_intermediate_size=32, n_routed_experts=8, n_shared_experts=1,
              num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1,
              routed_scaling_factor=2.5, norm_topk_prob=True, q_lora_rank=32, kv_lora_rank=16,
              qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, num_key_value_heads=4,
              rope_interleave=True,
              rope_parameters=rope(10000.0, rope_type="yarn", factor=4.0, mscale=1.0, mscale_all_dim=1.0,
                                   beta_fast=32.0, beta_slow=1.0, original_max_position_embeddings=64))
    plain_fixture(out, "deepseekv3_qlora_yarn", DeepseekV3ForCausalLM, DeepseekV3Config(**small(**ds)), 205)
    ds2 = dict(ds, q_lora_rank=None, n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
               n_shared_experts=2, norm_topk_prob=False, routed_scaling_factor=1.5, rope_interleave=False,
               first_k_dense_replace=2, num_hidden_layers=4, rope_parameters=rope(10000.0))
    plain_fixture(out, "deepseekv3_noqlora", DeepseekV3ForCausalLM, DeepseekV3Config(**small(**ds2)), 206,
                  dtype=torch.float32)

    # quantized checkpoints (dequantized-weight references)
    q3 = qwen3moe_cfg(num_experts=4, mlp_only_layers=[0], norm_topk_prob=True)
    quantized_fixture(out, "qwen3moe_nvfp4_modelopt", Qwen3MoeForCausalLM, q3, 207,
                      modelopt_nvfp4(excluded=("mlp.gate.",)),
                      {"quant_method": "modelopt", "quant_algo": "NVFP4",
                       "producer": {"name": "modelopt", "version": "0.33.0"},
                       "ignore": ["lm_head", "model.layers.*.mlp.gate"],
                       "config_groups": {"group_0": {"targets": ["Linear"],
                                                     "weights": {"type": "float", "num_bits": 4,
                                                                 "group_size": 16, "dynamic": False},
                                                     "input_activations": {"type": "float", "num_bits": 4,
                                                                           "group_size": 16,
                                                                           "dynamic": False}}}})
    mx = MixtralConfig(**small(intermediate_size=96, num_local_experts=4, num_experts_per_tok=2,
                               rms_norm_eps=1e-5, rope_parameters=rope(1000000.0)))
    quantized_fixture(out, "mixtral_nvfp4_hf_quant_config", MixtralForCausalLM, mx, 208,
                      modelopt_nvfp4(excluded=("block_sparse_moe.gate.", "self_attn.")), None,
                      extra_files={"hf_quant_config.json": {
                          "producer": {"name": "modelopt", "version": "0.29.0"},
                          "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None,
                                           "group_size": 16,
                                           "exclude_modules": ["lm_head", "model.layers.*.self_attn*",
                                                               "model.layers.*.block_sparse_moe.gate"]}}})
    quantized_fixture(out, "qwen3moe_nvfp4_compressed_tensors", Qwen3MoeForCausalLM,
                      qwen3moe_cfg(num_experts=4, mlp_only_layers=[1], norm_topk_prob=False), 209,
                      ct_nvfp4(excluded=("mlp.gate.",)),
                      {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                       "quantization_status": "compressed", "ignore": ["lm_head", "re:.*mlp.gate$"],
                       "config_groups": {"group_0": {"targets": ["Linear"], "format": "nvfp4-pack-quantized",
                                                     "weights": {"num_bits": 4, "type": "float",
                                                                 "strategy": "tensor_group", "group_size": 16,
                                                                 "symmetric": True, "dynamic": False},
                                                     "input_activations": None}}})
    ds3 = dict(ds, hidden_size=160, intermediate_size=144, num_hidden_layers=2)
    quantized_fixture(out, "deepseekv3_fp8_block", DeepseekV3ForCausalLM, DeepseekV3Config(**small(**ds3)),
                      210, fp8_block(excluded=("mlp.gate.",)),
                      {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": [128, 128]})


if __name__ == "__main__":
    main(sys.argv[1])
