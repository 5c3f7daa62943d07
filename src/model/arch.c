/* arch.c: the table of supported model families (see arch.h). */
#include "model/arch.h"

#include <string.h>

static const sp_arch archs[] = {
    {.hf_name = "LlamaForCausalLM", .attn = SP_ATTN_GQA, .mlp_prefix = "mlp"},
    {.hf_name = "MistralForCausalLM", .attn = SP_ATTN_GQA, .mlp_prefix = "mlp"},
    {.hf_name = "Qwen3ForCausalLM", .attn = SP_ATTN_GQA, .qk_norm = true, .mlp_prefix = "mlp"},
    {.hf_name = "Qwen3MoeForCausalLM",
     .attn = SP_ATTN_GQA,
     .qk_norm = true,
     .moe = SP_MOE_SOFTMAX_TOPK,
     .act = SP_ACT_SWIGLU,
     .experts = SP_EXPERTS_PER_EXPERT,
     .mlp_prefix = "mlp",
     .router_name = "gate",
     .expert_gate = "gate_proj",
     .expert_up = "up_proj",
     .expert_down = "down_proj"},
    {.hf_name = "MixtralForCausalLM",
     .attn = SP_ATTN_GQA,
     .moe = SP_MOE_SOFTMAX_TOPK,
     .act = SP_ACT_SWIGLU,
     .experts = SP_EXPERTS_PER_EXPERT,
     .norm_topk_default = true,
     .mlp_prefix = "block_sparse_moe",
     .router_name = "gate",
     .expert_gate = "w1",
     .expert_up = "w3",
     .expert_down = "w2"},
    {.hf_name = "GptOssForCausalLM",
     .attn = SP_ATTN_GQA,
     .always_bias = true,
     .sinks = true,
     .moe = SP_MOE_TOPK_SOFTMAX,
     .act = SP_ACT_GPTOSS_GLU,
     .experts = SP_EXPERTS_GPTOSS,
     .mlp_prefix = "mlp",
     .router_name = "router"},
    {.hf_name = "DeepseekV3ForCausalLM",
     .attn = SP_ATTN_MLA,
     .moe = SP_MOE_SIGMOID_GROUP,
     .act = SP_ACT_SWIGLU,
     .experts = SP_EXPERTS_PER_EXPERT,
     .shared_experts = true,
     .mlp_prefix = "mlp",
     .router_name = "gate",
     .expert_gate = "gate_proj",
     .expert_up = "up_proj",
     .expert_down = "down_proj"},
    {.hf_name = "DeepseekV4ForCausalLM", /* bound by model_load_dsv4.c */
     .attn = SP_ATTN_DSV4,
     .moe = SP_MOE_DSV4,
     .act = SP_ACT_SWIGLU,
     .experts = SP_EXPERTS_PER_EXPERT,
     .shared_experts = true,
     .mlp_prefix = "ffn",
     .router_name = "gate",
     .expert_gate = "w1",
     .expert_up = "w3",
     .expert_down = "w2"},
};

const sp_arch *sp_arch_find(const char *hf_name)
{
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(archs[i].hf_name, hf_name) == 0)
            return &archs[i];
    return NULL;
}

const char *sp_arch_supported_list(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
           "MixtralForCausalLM, GptOssForCausalLM, DeepseekV3ForCausalLM, DeepseekV4ForCausalLM";
}

bool sp_arch_layer_is_moe(const sp_arch *a, const sp_hf_config *c, int64_t l)
{
    switch (a->moe) {
    case SP_MOE_NONE: return false;
    case SP_MOE_SOFTMAX_TOPK:
        return !c->mlp_only_layer[l] && c->n_experts > 0 &&
               (l + 1) % c->decoder_sparse_step == 0;
    case SP_MOE_TOPK_SOFTMAX: return true;
    case SP_MOE_SIGMOID_GROUP: return c->n_experts > 0 && l >= c->first_k_dense_replace;
    case SP_MOE_DSV4:
    case SP_MOE_HASH: return true;
    }
    return false;
}
