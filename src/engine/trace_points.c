/* trace_points.c: names of the trace points (see trace_points.h). */
#include "engine/trace_points.h"

#include <string.h>

static const char *const op_names[SP_OP_COUNT] = {
    [SP_OP_EMBED] = "embed",
    [SP_OP_ATTN_NORM] = "attn_norm",
    [SP_OP_ATTN_Q] = "attn_q",
    [SP_OP_ATTN_K] = "attn_k",
    [SP_OP_ATTN_V] = "attn_v",
    [SP_OP_ATTN_OUT] = "attn_out",
    [SP_OP_ATTN_O_PROJ] = "attn_o_proj",
    [SP_OP_ATTN_RESIDUAL] = "attn_residual",
    [SP_OP_MLP_NORM] = "mlp_norm",
    [SP_OP_MOE_ROUTER] = "moe_router_logits",
    [SP_OP_MOE_EXPERTS] = "moe_experts",
    [SP_OP_MLP_OUT] = "mlp_out",
    [SP_OP_MLP_RESIDUAL] = "mlp_residual",
    [SP_OP_HC_HEAD] = "hc_head",
    [SP_OP_FINAL_NORM] = "final_norm",
    [SP_OP_LOGITS] = "logits",
};

const char *sp_op_name(sp_op op)
{
    return op >= 0 && op < SP_OP_COUNT ? op_names[op] : "?";
}

sp_op sp_op_from_name(const char *name)
{
    for (int i = 0; i < SP_OP_COUNT; i++)
        if (strcmp(op_names[i], name) == 0)
            return (sp_op)i;
    return SP_OP_COUNT;
}
