"""Prints how the installed transformers lays out the mixture-of-experts families in
memory and on disk (parameter names and shapes, saved tensor names, dtypes, config.json),
so the fixture scripts and the loader agree with the real thing.

usage: python3 scripts/reference/introspect.py OUT_DIR
"""
import json
import os
import sys
import traceback

import torch
import transformers
from safetensors import safe_open

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)

CASES = {
    "Qwen3Moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                 dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      head_dim=16, norm_topk_prob=True, mlp_only_layers=[0])),
    "Mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(num_local_experts=4, num_experts_per_tok=2)),
    "GptOss": ("GptOssConfig", "GptOssForCausalLM",
               dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8,
                    intermediate_size=64)),
    "DeepseekV3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                   dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                        n_shared_experts=1, n_group=2, topk_group=1, first_k_dense_replace=1,
                        q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                        qk_rope_head_dim=8, v_head_dim=16, num_key_value_heads=4)),
}


def main(out):
    print("transformers", transformers.__version__, "torch", torch.__version__)
    for name, (cfg_name, model_name, extra) in CASES.items():
        print(f"\n===== {name}")
        try:
            cfg = getattr(transformers, cfg_name)(**dict(TINY, **extra))
            model = getattr(transformers, model_name)(cfg)
            for n, p in model.named_parameters():
                if ".layers.1." in n or ".layers." not in n:
                    print("  param", n, tuple(p.shape), p.dtype)
            path = os.path.join(out, name)
            model.save_pretrained(path)
            for fn in sorted(os.listdir(path)):
                if fn.endswith(".safetensors"):
                    with safe_open(os.path.join(path, fn), "pt") as f:
                        for k in f.keys():
                            if ".layers.1." in k or ".layers." not in k:
                                t = f.get_slice(k)
                                print("  saved", k, t.get_shape(), t.get_dtype())
            with open(os.path.join(path, "config.json")) as f:
                print("  config", json.dumps(json.load(f), sort_keys=True))
        except Exception:
            traceback.print_exc()


if __name__ == "__main__":
    main(sys.argv[1])
