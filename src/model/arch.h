/* arch.h: model families as data.
 *
 * One forward pass (forward.c) serves every architecture. A family is a description:
 * which attention variant, which feed-forward variant, which optional pieces (q/k norms,
 * biases, sinks) and the checkpoint's tensor names. Adding a family means adding a row
 * to the table in arch.c and, only where the math really differs, an op. */
#ifndef SP_MODEL_ARCH_H
#define SP_MODEL_ARCH_H

#include "format/hf_config.h"

typedef enum sp_attn_kind {
    SP_ATTN_GQA, /* q/k/v/o projections, grouped-query heads */
    SP_ATTN_MLA, /* DeepSeek multi-head latent attention */
    SP_ATTN_DSV4, /* DeepSeek-V4: sliding window + compressed entries, hyper-connections */
} sp_attn_kind;

typedef enum sp_moe_kind {
    SP_MOE_NONE,
    SP_MOE_SOFTMAX_TOPK,  /* softmax over all experts, top-k, optional renorm (Qwen3-MoE, Mixtral) */
    SP_MOE_TOPK_SOFTMAX,  /* top-k on biased logits, softmax over the k (gpt-oss) */
    SP_MOE_SIGMOID_GROUP, /* sigmoid, bias for selection, group-limited top-k (DeepSeek-V3) */
    SP_MOE_DSV4,          /* sqrt(softplus) or sigmoid, biased top-k; hash layers (V4) */
    SP_MOE_HASH,          /* (route kind only) experts from the token's tid2eid row */
} sp_moe_kind;

typedef enum sp_expert_act {
    SP_ACT_SWIGLU,      /* down(silu(gate x) * up x) */
    SP_ACT_GPTOSS_GLU,  /* interleaved gate/up, clamp, gate*sigmoid(a*gate)*(up+1) */
} sp_expert_act;

/* Where a family keeps its expert weights. */
typedef enum sp_expert_layout {
    SP_EXPERTS_PER_EXPERT, /* <prefix>.experts.{e}.<gate|up|down>.weight */
    SP_EXPERTS_FUSED,      /* <prefix>.experts.gate_up_proj [E, 2I, H] / down_proj [E, H, I] */
    SP_EXPERTS_GPTOSS,     /* gate_up_proj(_blocks/_scales/_bias) with interleaved rows */
} sp_expert_layout;

typedef struct sp_arch {
    const char *hf_name; /* config.json architectures[0] */
    sp_attn_kind attn;
    bool qk_norm;        /* per-head RMSNorm of q and k before RoPE (Qwen3) */
    bool always_bias;    /* q/k/v/o biases regardless of attention_bias (gpt-oss) */
    bool sinks;          /* learned per-head sink logit (gpt-oss) */
    sp_moe_kind moe;
    sp_expert_act act;
    sp_expert_layout experts;
    bool norm_topk_default; /* renormalize top-k weights when config does not say */
    bool shared_experts;    /* DeepSeek */
    /* tensor names below "model.layers.{L}." */
    const char *mlp_prefix;    /* "mlp" or "block_sparse_moe" */
    const char *router_name;   /* under mlp_prefix: "gate" or "router" */
    const char *expert_gate, *expert_up, *expert_down; /* per-expert names */
} sp_arch;

/* NULL when the architecture is unknown. */
const sp_arch *sp_arch_find(const char *hf_name);
/* Comma-separated names of the supported architectures (static string). */
const char *sp_arch_supported_list(void);

/* Whether layer l uses the mixture-of-experts block under this family's rules. */
bool sp_arch_layer_is_moe(const sp_arch *a, const sp_hf_config *c, int64_t l);

#endif
