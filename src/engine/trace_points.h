/* trace_points.h: the named points of the forward pass where activations can be
 * observed (divergence diagnostics) — one per op output. Names say which block an op
 * belongs to, so an MLP op is never mistaken for an attention op. */
#ifndef SP_ENGINE_TRACE_POINTS_H
#define SP_ENGINE_TRACE_POINTS_H

#include <stdint.h>

typedef enum sp_op {
    SP_OP_EMBED,         /* token embeddings, layer -1 */
    SP_OP_ATTN_NORM,     /* input_layernorm output */
    SP_OP_ATTN_Q,        /* q after projection (+ q_norm, RoPE) */
    SP_OP_ATTN_K,        /* k after projection (+ k_norm, RoPE) */
    SP_OP_ATTN_V,        /* v after projection */
    SP_OP_ATTN_OUT,      /* softmax(qk)v, before o_proj */
    SP_OP_ATTN_O_PROJ,   /* o_proj output */
    SP_OP_ATTN_RESIDUAL, /* residual stream after attention */
    SP_OP_MLP_NORM,      /* post_attention_layernorm output */
    SP_OP_MOE_ROUTER,    /* router logits */
    SP_OP_MOE_EXPERTS,   /* chosen experts: k ids then k weights, as floats */
    SP_OP_MLP_OUT,       /* dense MLP or MoE block output */
    SP_OP_MLP_RESIDUAL,  /* residual stream after the MLP: the layer's output */
    SP_OP_HC_HEAD,       /* DeepSeek-V4: the hyper-connection streams collapsed (hc_head),
                          * what model.norm reads, layer -1; residual ops there are the
                          * hc_mult streams, width hc_mult * hidden */
    SP_OP_FINAL_NORM,    /* model.norm output, layer -1 */
    SP_OP_LOGITS,        /* lm_head output, layer -1 */
    SP_OP_COUNT
} sp_op;

const char *sp_op_name(sp_op op);
/* SP_OP_COUNT when unknown. */
sp_op sp_op_from_name(const char *name);

/* One observed op output: rows are consecutive positions pos0 .. pos0 + n_tok - 1.
 * Observers only read (fault injection is a separate hook: engine/forward.h). */
typedef struct sp_trace_event {
    int layer; /* -1 for model-level ops */
    sp_op op;
    int64_t pos0, n_tok, width;
    const float *data;     /* [n_tok, width], host memory */
    const int32_t *tokens; /* [n_tok]: the input token at each of these positions */
} sp_trace_event;

typedef void (*sp_trace_cb)(void *ctx, const sp_trace_event *ev);

#endif
