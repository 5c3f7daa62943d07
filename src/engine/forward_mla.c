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
#include "engine/forward_internal.h"

#define LATENT_EPS 1e-6f

/* Raw queries [n, heads, nope + rope] into c->mla_b. */
static void queries(sp_pass *P, const sp_layer *L)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    if (m->mla_q_lora > 0) {
        int64_t R = m->mla_q_lora;
        be->ops->matmul(be, &L->wq_a, c->xn, P->n, c->mla_a, L->bq);
        be->ops->rmsnorm(be, c->mla_a, R, L->q_a_norm, P->n, R, LATENT_EPS, c->mla_a, R);
        be->ops->matmul(be, &L->wq_b, c->mla_a, P->n, c->mla_b, NULL);
    } else {
        be->ops->matmul(be, &L->wq, c->xn, P->n, c->mla_b, NULL);
    }
}

/* Latent keys [c_kv, k_rot] of the pass's rows, then into each sequence's cache. */
static void latent_keys(sp_pass *P, const sp_layer *L, int64_t l)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t R = m->kv_dim_k, C = m->mla_kv_lora;
    be->ops->matmul(be, &L->wkv_a, c->xn, P->n, c->mla_a, L->bk);
    be->ops->rmsnorm(be, c->mla_a, R, L->kv_a_norm, P->n, C, LATENT_EPS, c->mla_a, R);
    be->ops->rope(be, c->mla_a + C, P->n, 1, R, 0, m->mla_rope, c->rope_cs,
                  m->cfg->rope_interleave);
    sp_emit(P, (int)l, SP_OP_ATTN_K, R, c->mla_a);
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        be->ops->kv_store(be, g->seq->kv->k[l], R, c->pos + g->row0, c->mla_a + g->row0 * R, R,
                          g->n, R);
    }
}

/* Absorbed queries [n, heads, kv_lora + rope] into c->q. */
static void absorb_queries(sp_pass *P, const sp_layer *L)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t nh = m->n_heads, nope = m->mla_nope, rope = m->mla_rope, C = m->mla_kv_lora;
    int64_t qin = nope + rope, qout = C + rope;
    for (int64_t h = 0; h < nh; h++) {
        be->ops->matmul_t(be, &L->wkv_b, h * (nope + m->mla_v), nope, c->mla_b + h * qin, nh * qin,
                          P->n, c->q + h * qout, nh * qout, NULL);
        be->ops->copy2d(be, c->q + h * qout + C, nh * qout, c->mla_b + h * qin + nope, nh * qin,
                        P->n, rope);
    }
    be->ops->rope(be, c->q + C, P->n, nh, nh * qout, qout, rope, c->rope_cs,
                  m->cfg->rope_interleave);
}

/* o_h = W_UV_h o_lat_h for every head: c->att [n, heads, kv_lora] -> c->mla_c [n, heads, v]. */
static void expand_values(sp_pass *P, const sp_layer *L)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t nh = m->n_heads, C = m->mla_kv_lora, V = m->mla_v;
    for (int64_t h = 0; h < nh; h++) {
        sp_weight uv = sp_weight_rows(&L->wkv_b, h * (m->mla_nope + V) + m->mla_nope, V);
        be->ops->copy2d(be, c->mla_t, C, c->att + h * C, nh * C, P->n, C);
        be->ops->matmul(be, &uv, c->mla_t, P->n, c->mla_u, NULL);
        be->ops->copy2d(be, c->mla_c + h * V, nh * V, c->mla_u, V, P->n, V);
    }
}

void sp_forward_mla(sp_pass *P, int64_t l)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_layer *L = &P->w->layers[l];
    queries(P, L);
    latent_keys(P, L, l);
    absorb_queries(P, L);
    sp_emit(P, (int)l, SP_OP_ATTN_Q, m->q_dim, c->q);
    int64_t att_w = m->n_heads * m->mla_kv_lora;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        sp_attn_args a = {
            .q = c->q + g->row0 * m->q_dim,
            .q_stride = m->q_dim,
            .k_cache = g->seq->kv->k[l],
            .v_cache = g->seq->kv->k[l],
            .k_stride = m->kv_dim_k,
            .v_stride = m->kv_dim_k,
            .n_heads = m->n_heads,
            .n_kv_heads = 1,
            .qk_dim = m->qk_dim,
            .v_dim = m->mla_kv_lora,
            .pos0 = g->pos0,
            .n_tok = g->n,
            .q_pos = c->pos + g->row0,
            .window = 0,
            .scale = m->attn_scale,
            .out = c->att + g->row0 * att_w,
            .n_ctx = g->seq->kv->n_ctx,
        };
        be->ops->attention(be, &a);
    }
    sp_emit(P, (int)l, SP_OP_ATTN_OUT, att_w, c->att);
    expand_values(P, L);
    be->ops->matmul(be, &L->wo, c->mla_c, P->n, c->o, L->bo);
}
