/* session.h: a session (behind the public sp_session handle) — one sequence's KV cache
 * and the scratch buffers of the forward pass, all allocated once at creation from a
 * size plan; evaluating tokens allocates nothing.
 *
 * KV layout per layer: k [n_ctx, kv_dim_k], v [n_ctx, kv_dim_v], fp32, position-major.
 * Rolling back (speculative decoding) only lowers n_past: later positions are
 * overwritten by the next eval. */
#ifndef SP_RUNTIME_SESSION_H
#define SP_RUNTIME_SESSION_H

#include "model/model.h"
#include "model/trace_points.h"

typedef struct sp_moe_scratch {
    int32_t *topk_ids;   /* [n_batch, k] */
    float *topk_w;       /* [n_batch, k] */
    float *router;       /* [n_batch, E] */
    int32_t *rows;       /* [n_batch] token rows routed to the current expert */
    float *xg;           /* [n_batch, H] gathered inputs */
    float *g, *u;        /* [n_batch, 2 * I_expert] */
    float *y;            /* [n_batch, H] expert output */
    float *acc;          /* [n_batch, H] weighted sum */
    int32_t *n_rows_expert; /* [E] */
} sp_moe_scratch;

struct sp_session {
    sp_model *m;
    int64_t n_ctx, n_batch, n_past;

    float *kv_mem;
    float **k_cache, **v_cache; /* [n_layers] */

    /* scratch for one pass of up to n_batch tokens */
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up, *ffn;
    float *mla_a, *mla_b; /* MLA latent buffers */
    float *rope_cs;       /* [n_batch, rope.dim] */
    float *attn_scratch;  /* [n_threads, n_ctx] */
    float *logits;        /* [n_vocab]: last position */
    sp_moe_scratch moe;

    bool has_logits;

    sp_trace_cb trace;
    void *trace_ctx;
};

/* Runs the forward pass over tokens (already validated) starting at position n_past.
 * logits: [n, n_vocab] for every position, or NULL to compute only the last row into
 * s->logits. */
sp_status sp_forward(sp_session *s, const int32_t *tokens, int64_t n, float *logits,
                     sp_error *err);

/* Installs an observer called after every op of every forward pass (NULL to remove). */
void sp_session_set_trace(sp_session *s, sp_trace_cb cb, void *ctx);

#endif
