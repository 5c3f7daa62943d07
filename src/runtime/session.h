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
    float *router;     /* [n_batch, E] router logits */
    int32_t *ids;      /* [n_batch, k] chosen experts, best first */
    float *w;          /* [n_batch, k] their weights */
    float *sel;        /* [n_batch, 2k] ids then weights as floats (traces) */
    float *route_tmp;  /* [2E] */
    int32_t *count;    /* [E + 1] selections per expert, then prefix offsets */
    int32_t *fill;     /* [E] */
    int32_t *list;     /* [n_batch * k] selections (t * k + j) grouped by expert */
    float *xg;         /* [n_batch, H] inputs gathered for one expert */
    float *g, *u;      /* [n_batch, max(2 I, shared I)] */
    float *y;          /* [n_batch, H] one expert's outputs */
    float *slots;      /* [n_batch * k, H] every selection's expert output */
} sp_moe_scratch;

struct sp_session {
    sp_model *m;
    int64_t n_ctx, n_batch, n_past;

    float *kv_mem;
    float **k_cache, **v_cache; /* [n_layers] */

    /* scratch for one pass of up to n_batch tokens */
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up, *ffn;
    float *mla_a, *mla_b; /* MLA: q_a / kv_a outputs; raw queries [n, heads, nope + rope] */
    float *mla_c;         /* MLA: per-head values [n, heads, v] */
    float *mla_t, *mla_u; /* MLA: one head's latent output [n, kv_lora] and value [n, v] */
    float *rope_cs;       /* [n_batch, rope.dim] */
    float *attn_scratch;  /* [n_threads, n_ctx] */
    float *logits;        /* [n_vocab]: last position */
    sp_moe_scratch moe;

    bool has_logits;

    sp_trace_cb trace;
    void *trace_ctx;
    const int32_t *chunk_tokens; /* tokens of the chunk being evaluated (for traces) */
};

/* Runs the forward pass over tokens (already validated) starting at position n_past.
 * logits: [n, n_vocab] for every position, or NULL to compute only the last row into
 * s->logits. */
sp_status sp_forward(sp_session *s, const int32_t *tokens, int64_t n, float *logits,
                     sp_error *err);

/* Installs an observer called after every op of every forward pass (NULL to remove). */
void sp_session_set_trace(sp_session *s, sp_trace_cb cb, void *ctx);

#endif
