"""Creates the dense-model parity fixtures (Llama 3, Qwen3) with transformers.

usage: python3 scripts/reference/make_fixtures.py OUT_DIR

Each fixture is a tiny random checkpoint in hub layout plus the float32 eager logits
and greedy continuations transformers computes after loading it from disk (see
common.py). The set covers: default / llama3 / yarn RoPE, both config spellings of
RoPE (rope_parameters and legacy rope_theta + rope_scaling with "rope_type" or
"type"), tied and untied embeddings, head_dim != hidden/heads, GQA ratios 1, 2, 4
and MQA, attention biases, BF16 / F16 / F32 weights, a sharded checkpoint, and prompt
lengths 1..64. The C test suite (tests/unit/test_parity.c) compares against them.
"""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from common import load_reference, make_prompts, randomize_, record, rewrite_rope_legacy, \
    save_checkpoint

BASE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
            rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)


def rope_kw(theta, scaling=None):
    """transformers 5 takes rope_parameters; older versions rope_theta + rope_scaling."""
    rp = {"rope_type": "default", "rope_theta": theta}
    if scaling:
        rp.update(scaling)
    return {"rope_parameters": rp}


FIXTURES = [
    # name, class, config class, overrides, save dtype, legacy rope key (None: keep v5 form), shard
    ("llama_mha_bf16", LlamaForCausalLM, LlamaConfig,
     dict(**rope_kw(10000.0)), torch.bfloat16, None, None),
    ("llama_gqa4_tied_f16", LlamaForCausalLM, LlamaConfig,
     dict(num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True,
          **rope_kw(10000.0)), torch.float16, "rope_type", None),
    ("llama3_rope_mqa_legacy", LlamaForCausalLM, LlamaConfig,
     dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
          **rope_kw(500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192})),
     torch.bfloat16, "rope_type", None),
    ("llama3_rope_gqa2", LlamaForCausalLM, LlamaConfig,
     dict(num_attention_heads=4, num_key_value_heads=2,
          **rope_kw(500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192})),
     torch.bfloat16, None, None),
    ("llama_yarn", LlamaForCausalLM, LlamaConfig,
     dict(max_position_embeddings=512,
          **rope_kw(10000.0, {"rope_type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 128})),
     torch.bfloat16, None, None),
    ("llama_yarn_legacy_type", LlamaForCausalLM, LlamaConfig,
     dict(max_position_embeddings=512, num_key_value_heads=2,
          **rope_kw(10000.0, {"rope_type": "yarn", "factor": 4.0, "beta_fast": 16.0,
                              "beta_slow": 2.0, "original_max_position_embeddings": 128})),
     torch.float32, "type", None),
    ("llama_headdim32_bias_f32_sharded", LlamaForCausalLM, LlamaConfig,
     dict(head_dim=32, attention_bias=True, **rope_kw(10000.0)), torch.float32, None, "60KB"),
    ("qwen3_gqa2_tied", Qwen3ForCausalLM, Qwen3Config,
     dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
          rms_norm_eps=1e-6, **rope_kw(1000000.0)), torch.bfloat16, None, None),
    ("qwen3_yarn_legacy", Qwen3ForCausalLM, Qwen3Config,
     dict(num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=1, head_dim=16,
          max_position_embeddings=512, rms_norm_eps=1e-6,
          **rope_kw(1000000.0, {"rope_type": "yarn", "factor": 2.0,
                                "original_max_position_embeddings": 256})),
     torch.bfloat16, "rope_type", None),
]


def build_config(cfg_cls, overrides):
    kw = dict(BASE)
    kw.update(overrides)
    try:
        return cfg_cls(**kw)
    except TypeError:
        rp = kw.pop("rope_parameters")
        kw["rope_theta"] = rp.pop("rope_theta")
        kind = rp.pop("rope_type")
        kw["rope_scaling"] = None if kind == "default" else dict(rp, rope_type=kind)
        return cfg_cls(**kw)


def main(out):
    torch.manual_seed(0)
    for i, (name, cls, cfg_cls, over, dtype, legacy, shard) in enumerate(FIXTURES):
        cfg = build_config(cfg_cls, over)
        model = cls(cfg).eval()
        randomize_(model, seed=100 + i)
        path = f"{out}/{name}"
        save_checkpoint(model, path, dtype, max_shard_size=shard)
        if legacy:
            rewrite_rope_legacy(path, legacy)
        ref = load_reference(cls, path)
        meta = record(ref, path, make_prompts(cfg.vocab_size, seed=i),
                      extra={"family": cls.__name__, "save_dtype": str(dtype),
                             "rope_form": legacy or "rope_parameters"})
        print(f"{name}: greedy {meta['greedy'][0][:6]}... inv_freq[:3] "
              f"{[round(x, 6) for x in meta.get('inv_freq', [])[:3]]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
