/* forward.c: the one forward pass every architecture runs.
 *
 *   x = embed(tokens)
 *   for each layer:  x += attention(rmsnorm(x))      (GQA or MLA)
 *                    x += ffn(rmsnorm(x))            (dense SwiGLU or mixture of experts)
 *   logits = lm_head(rmsnorm(x))
 *
 * Tokens are processed in chunks of at most n_batch; a chunk attends to the KV cache, so
 * chunking never changes a position's result. Every op output is offered to the
 * session's trace observer. */
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/forward_internal.h"
#include "util/error.h"

#include <string.h>

static void embed(sp_session *s, const int32_t *tokens, int64_t n)
{
    const sp_model *m = s->m;
    for (int64_t t = 0; t < n; t++)
        sp_weight_row_f32(&m->tok_embd, tokens[t], s->x + t * m->n_embd);
}

/* Per-head RMSNorm (Qwen3 q_norm/k_norm) and RoPE on the first rope.dim dims of each head. */
static void qk_post(sp_session *s, float *buf, int64_t n, int64_t n_heads, const float *norm)
{
    const sp_model *m = s->m;
    int64_t hd = m->head_dim;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = buf + (t * n_heads + h) * hd;
            if (norm)
                sp_rmsnorm(v, norm, 1, hd, (float)m->cfg->rms_norm_eps, v);
            sp_rope_neox(v, m->rope.dim, s->rope_cs + t * m->rope.dim);
        }
}

static void attention_gqa(sp_session *s, int64_t l, int64_t n)
{
    sp_model *m = s->m;
    const sp_layer *L = &m->layers[l];
    sp_pool *pool = m->pool;
    sp_matmul(pool, &L->wq, s->xn, n, s->q, L->bq);
    sp_matmul(pool, &L->wk, s->xn, n, s->k, L->bk);
    sp_matmul(pool, &L->wv, s->xn, n, s->v, L->bv);
    qk_post(s, s->q, n, m->n_heads, L->q_norm);
    qk_post(s, s->k, n, m->n_kv_heads, L->k_norm);
    sp_trace_emit(s, (int)l, SP_OP_ATTN_Q, n, m->q_dim, s->q);
    sp_trace_emit(s, (int)l, SP_OP_ATTN_K, n, m->kv_dim_k, s->k);
    sp_trace_emit(s, (int)l, SP_OP_ATTN_V, n, m->kv_dim_v, s->v);
    memcpy(s->k_cache[l] + s->n_past * m->kv_dim_k, s->k, (size_t)(n * m->kv_dim_k) * sizeof(float));
    memcpy(s->v_cache[l] + s->n_past * m->kv_dim_v, s->v, (size_t)(n * m->kv_dim_v) * sizeof(float));
    sp_attn_args a = {
        .q = s->q,
        .q_stride = m->q_dim,
        .k_cache = s->k_cache[l],
        .v_cache = s->v_cache[l],
        .n_heads = m->n_heads,
        .n_kv_heads = m->n_kv_heads,
        .qk_dim = m->head_dim,
        .v_dim = m->head_dim,
        .pos0 = s->n_past,
        .n_tok = n,
        .window = L->sliding ? m->cfg->sliding_window : 0,
        .scale = m->attn_scale,
        .sinks = L->sinks,
        .out = s->att,
        .scratch = s->attn_scratch,
        .n_ctx = s->n_ctx,
    };
    sp_attention(pool, &a);
    sp_trace_emit(s, (int)l, SP_OP_ATTN_OUT, n, m->n_heads * m->v_dim, s->att);
    sp_matmul(pool, &L->wo, s->att, n, s->o, L->bo);
}

static void mlp_dense(sp_session *s, const sp_layer *L, int64_t n)
{
    sp_pool *pool = s->m->pool;
    int64_t inter = L->w_gate.rows;
    sp_matmul(pool, &L->w_gate, s->xn, n, s->gate, NULL);
    sp_matmul(pool, &L->w_up, s->xn, n, s->up, NULL);
    sp_swiglu(s->gate, s->up, n * inter, s->gate);
    sp_matmul(pool, &L->w_down, s->gate, n, s->ffn, NULL);
}

static void layer_forward(sp_session *s, int64_t l, int64_t n)
{
    sp_model *m = s->m;
    const sp_layer *L = &m->layers[l];
    int64_t H = m->n_embd;
    float eps = (float)m->cfg->rms_norm_eps;
    sp_rmsnorm(s->x, L->attn_norm, n, H, eps, s->xn);
    sp_trace_emit(s, (int)l, SP_OP_ATTN_NORM, n, H, s->xn);
    if (m->arch->attn == SP_ATTN_MLA)
        sp_forward_mla(s, l, n);
    else
        attention_gqa(s, l, n);
    sp_trace_emit(s, (int)l, SP_OP_ATTN_O_PROJ, n, H, s->o);
    sp_add_inplace(s->x, s->o, n * H);
    sp_trace_emit(s, (int)l, SP_OP_ATTN_RESIDUAL, n, H, s->x);
    sp_rmsnorm(s->x, L->mlp_norm, n, H, eps, s->xn);
    sp_trace_emit(s, (int)l, SP_OP_MLP_NORM, n, H, s->xn);
    if (L->moe)
        sp_forward_moe(s, l, n);
    else
        mlp_dense(s, L, n);
    sp_trace_emit(s, (int)l, SP_OP_MLP_OUT, n, H, s->ffn);
    sp_add_inplace(s->x, s->ffn, n * H);
    sp_trace_emit(s, (int)l, SP_OP_MLP_RESIDUAL, n, H, s->x);
}

/* Final norm and LM head for rows [first, n) of the chunk. */
static void head(sp_session *s, int64_t n, int64_t first, float *out)
{
    sp_model *m = s->m;
    int64_t H = m->n_embd, rows = n - first;
    sp_rmsnorm(s->x + first * H, m->final_norm, rows, H, (float)m->cfg->rms_norm_eps, s->xn);
    if (SP_TRACE_ON(s)) {
        sp_trace_event ev = {-1, SP_OP_FINAL_NORM, s->n_past + first, rows, H, s->xn, s->chunk_tokens + first};
        s->trace(s->trace_ctx, &ev);
    }
    sp_matmul(m->pool, &m->lm_head, s->xn, rows, out, NULL);
    if (SP_TRACE_ON(s)) {
        sp_trace_event ev = {-1, SP_OP_LOGITS, s->n_past + first, rows, m->n_vocab, out, s->chunk_tokens + first};
        s->trace(s->trace_ctx, &ev);
    }
}

/* One chunk of n tokens. all: [n, n_vocab] logits for every row, or NULL; when NULL and
 * want_last is set, the last row's logits go to s->logits; else no LM head runs. */
static void forward_chunk(sp_session *s, const int32_t *tokens, int64_t n, float *all,
                          bool want_last)
{
    sp_model *m = s->m;
    s->chunk_tokens = tokens;
    embed(s, tokens, n);
    sp_trace_emit(s, -1, SP_OP_EMBED, n, m->n_embd, s->x);
    for (int64_t t = 0; t < n; t++)
        sp_rope_cos_sin(&m->rope, s->n_past + t, s->rope_cs + t * m->rope.dim);
    for (int64_t l = 0; l < m->n_layers; l++)
        layer_forward(s, l, n);
    if (all)
        head(s, n, 0, all);
    else if (want_last)
        head(s, n, n - 1, s->logits);
    s->n_past += n;
}

sp_status sp_forward(sp_session *s, const int32_t *tokens, int64_t n, float *logits,
                     sp_error *err)
{
    (void)err;
    for (int64_t done = 0; done < n;) {
        int64_t c = n - done < s->n_batch ? n - done : s->n_batch;
        forward_chunk(s, tokens + done, c, logits ? logits + done * s->m->n_vocab : NULL,
                      done + c == n);
        done += c;
    }
    if (logits && n > 0)
        memcpy(s->logits, logits + (n - 1) * s->m->n_vocab, (size_t)s->m->n_vocab * sizeof(float));
    s->has_logits = n > 0;
    return SP_OK;
}
