/* forward_mla.c: DeepSeek multi-head latent attention, absorbed form (see
 * model_load_moe.c for the layout).
 *
 *   q        = q_b(rmsnorm(q_a(x))) or q_proj(x)          [heads, nope + rope]
 *   c        = kv_a(x); c_kv = rmsnorm(c[:kv_lora]);      cached per token: [c_kv, k_rot]
 *   k_rot    = rope(c[kv_lora:])                          (one key head shared by all heads)
 *   q_lat_h  = W_UK_h^T q_nope_h                          [kv_lora]  (W_UK_h: rows of kv_b)
 *   o_lat_h  = softmax(scale * (q_lat_h . c_kv + rope(q_rot_h) . k_rot)) @ c_kv
 *   o_h      = W_UV_h o_lat_h                             [v]
 *   out      = o_proj(concat_h o_h)
 * The latent norms use eps 1e-6 as transformers builds them (DeepseekV3RMSNorm default). */
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/forward_internal.h"

#include <string.h>

#define LATENT_EPS 1e-6f

static void rope_vec(const sp_model *m, float *v, const float *cs)
{
    if (m->cfg->rope_interleave)
        sp_rope_interleaved(v, m->mla_rope, cs);
    else
        sp_rope_neox(v, m->mla_rope, cs);
}

/* Raw queries [n, heads, nope + rope] into s->mla_b. */
static void queries(sp_session *s, const sp_layer *L, int64_t n)
{
    sp_model *m = s->m;
    if (m->mla_q_lora > 0) {
        sp_matmul(m->pool, &L->wq_a, s->xn, n, s->mla_a, L->bq);
        sp_rmsnorm(s->mla_a, L->q_a_norm, n, m->mla_q_lora, LATENT_EPS, s->mla_a);
        sp_matmul(m->pool, &L->wq_b, s->mla_a, n, s->mla_b, NULL);
    } else {
        sp_matmul(m->pool, &L->wq, s->xn, n, s->mla_b, NULL);
    }
}

/* Latent keys of this chunk straight into the cache rows [c_kv, k_rot]. */
static void latent_keys(sp_session *s, const sp_layer *L, int64_t l, int64_t n)
{
    sp_model *m = s->m;
    int64_t R = m->kv_dim_k, C = m->mla_kv_lora;
    float *rows = s->k_cache[l] + s->n_past * R;
    sp_matmul(m->pool, &L->wkv_a, s->xn, n, rows, L->bk);
    for (int64_t t = 0; t < n; t++) {
        sp_rmsnorm(rows + t * R, L->kv_a_norm, 1, C, LATENT_EPS, rows + t * R);
        rope_vec(m, rows + t * R + C, s->rope_cs + t * m->mla_rope);
    }
    sp_trace_emit(s, (int)l, SP_OP_ATTN_K, n, R, rows);
}

/* Absorbed queries [n, heads, kv_lora + rope] into s->q. */
static void absorb_queries(sp_session *s, const sp_layer *L, int64_t n)
{
    sp_model *m = s->m;
    int64_t nh = m->n_heads, nope = m->mla_nope, rope = m->mla_rope, C = m->mla_kv_lora;
    int64_t qin = nope + rope, qout = C + rope;
    for (int64_t h = 0; h < nh; h++) {
        sp_matmul_t(m->pool, &L->wkv_b, h * (nope + m->mla_v), nope, s->mla_b + h * qin, nh * qin, n,
                    s->q + h * qout, nh * qout, NULL);
        for (int64_t t = 0; t < n; t++) {
            float *qr = s->q + (t * nh + h) * qout + C;
            memcpy(qr, s->mla_b + (t * nh + h) * qin + nope, (size_t)rope * sizeof(float));
            rope_vec(m, qr, s->rope_cs + t * rope);
        }
    }
}

/* o_h = W_UV_h o_lat_h for every head: s->att [n, heads, kv_lora] -> s->mla_c [n, heads, v]. */
static void expand_values(sp_session *s, const sp_layer *L, int64_t n)
{
    sp_model *m = s->m;
    int64_t nh = m->n_heads, C = m->mla_kv_lora, V = m->mla_v;
    for (int64_t h = 0; h < nh; h++) {
        sp_weight uv = sp_weight_rows(&L->wkv_b, h * (m->mla_nope + V) + m->mla_nope, V);
        for (int64_t t = 0; t < n; t++)
            memcpy(s->mla_t + t * C, s->att + (t * nh + h) * C, (size_t)C * sizeof(float));
        sp_matmul(m->pool, &uv, s->mla_t, n, s->mla_u, NULL);
        for (int64_t t = 0; t < n; t++)
            memcpy(s->mla_c + (t * nh + h) * V, s->mla_u + t * V, (size_t)V * sizeof(float));
    }
}

void sp_forward_mla(sp_session *s, int64_t l, int64_t n)
{
    sp_model *m = s->m;
    const sp_layer *L = &m->layers[l];
    queries(s, L, n);
    latent_keys(s, L, l, n);
    absorb_queries(s, L, n);
    sp_trace_emit(s, (int)l, SP_OP_ATTN_Q, n, m->q_dim, s->q);
    sp_attn_args a = {
        .q = s->q,
        .q_stride = m->q_dim,
        .k_cache = s->k_cache[l],
        .v_cache = s->k_cache[l],
        .k_stride = m->kv_dim_k,
        .v_stride = m->kv_dim_k,
        .n_heads = m->n_heads,
        .n_kv_heads = 1,
        .qk_dim = m->qk_dim,
        .v_dim = m->mla_kv_lora,
        .pos0 = s->n_past,
        .n_tok = n,
        .window = 0,
        .scale = m->attn_scale,
        .out = s->att,
        .scratch = s->attn_scratch,
        .n_ctx = s->n_ctx,
    };
    sp_attention(m->pool, &a);
    sp_trace_emit(s, (int)l, SP_OP_ATTN_OUT, n, m->n_heads * m->mla_kv_lora, s->att);
    expand_values(s, L, n);
    sp_matmul(m->pool, &L->wo, s->mla_c, n, s->o, L->bo);
}
