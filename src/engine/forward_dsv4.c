/* forward_dsv4.c: the DeepSeek-V4 layer, as transformers 5.17's DeepseekV4 computes it
 * (docs/DEEPSEEK_V4.md has the math and the tensor names).
 *
 *   streams = N copies of embed(token)                          [n, N, H]
 *   per layer, for attention then the MoE block (hyper-connections):
 *       (pre, post, comb) = mix(rmsnorm(flatten(streams)))      Sinkhorn-Knopp on comb
 *       y = block(rmsnorm_w(sum_k pre_k streams_k))
 *       streams_k = post_k y + sum_j comb[j][k] streams_j
 *   logits = lm_head(rmsnorm_w(sum_k pre_k streams_k))         (hc_head mixing)
 *
 * Attention: q = wq_b(q_norm(wq_a x)) per-head unit RMSNorm, kv = norm(wkv x) one head
 * shared as key and value, RoPE on the trailing rot dims ("main" on sliding layers,
 * "compress" on CSA/HCA layers), keys: the sliding window plus compressed entries (HCA:
 * all closed windows; CSA: the indexer's top-k), per-head sink, inverse RoPE on the
 * output, grouped low-rank output projection.
 *
 * The KV cache (kv_cache.h) holds per position the kv row in k[l] and a side row in v[l]:
 *   [ compressor kv (cw) | compressor gate (cw) | entry (hd) | indexer kv (2 ihd) |
 *     indexer gate (2 ihd) | indexer entry (ihd) ]
 * cw = 2 hd, the CSA width (an HCA layer uses the first hd of each)
 * where entry slots of row w hold compressed entry w. An entry is a pure function of the
 * raw rows of its window (and the previous one), computed by the pass holding the window's
 * last position: so every position's result is the same whatever passes produced the
 * cache, and rolling back a sequence is lowering its length as for every architecture. */
#include "engine/forward_internal.h"
#include "engine/kv_cache.h"
#include "util/error.h"

typedef struct side_layout {
    int64_t S, c_kv, c_gate, c_ent, i_kv, i_gate, i_ent;
} side_layout;

static side_layout side_of(const sp_model *m)
{
    int64_t cw = m->v4_cw, hd = m->head_dim, ihd = m->cfg->dsv4.index_head_dim;
    side_layout s = {m->v4_side, 0, cw, 2 * cw, 2 * cw + hd, 0, 0};
    s.i_gate = s.i_kv + 2 * ihd;
    s.i_ent = s.i_gate + 2 * ihd;
    return s;
}

/* ---- hyper-connections ---------------------------------------------------------------- */

/* streams c->x -> pre/post/comb rows and the collapsed row c->v4.col. */
static void hc_pre(sp_pass *P, const sp_weight *fn, const float *base, const float *scale)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_dsv4_config *d = &m->cfg->dsv4;
    int64_t N = d->hc_mult, H = m->n_embd, NH = N * H;
    float eps = (float)m->cfg->rms_norm_eps;
    be->ops->rmsnorm(be, c->x, NH, NULL, P->n, NH, eps, c->v4.hc_t, NH);
    be->ops->matmul(be, fn, c->v4.hc_t, P->n, c->v4.hc_mix, NULL);
    be->ops->hc_weights(be, c->v4.hc_mix, (2 + N) * N, base, scale, P->n, N, d->hc_sinkhorn_iters,
                        (float)d->hc_eps, c->v4.hc_pre, c->v4.hc_post, c->v4.hc_comb);
    be->ops->hc_collapse(be, c->x, c->v4.hc_pre, P->n, N, H, c->v4.col);
}

/* streams = post * y + comb^T streams */
static void hc_post(sp_pass *P, const float *y)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t N = m->cfg->dsv4.hc_mult, H = m->n_embd;
    be->ops->hc_expand(be, c->x, y, c->v4.hc_post, c->v4.hc_comb, P->n, N, H, c->v4.x2);
    be->ops->copy2d(be, c->x, N * H, c->v4.x2, N * H, P->n, N * H);
}

/* ---- compressed entries --------------------------------------------------------------- */

/* Raw rows [n, width] of the pass into the side rows at column col. */
static void store_rows(sp_pass *P, int64_t l, const float *rows, int64_t width, int64_t col)
{
    int64_t S = P->m->v4_side;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        float *side = g->seq->kv->v[l];
        P->be->ops->copy2d(P->be, side + g->pos0 * S + col, S, rows + g->row0 * width, width, g->n, width);
    }
}

/* The entries whose window closes inside each segment: w in [pos0 / rate, (pos0 + n) / rate). */
static void emit_entries(sp_pass *P, int64_t l, const sp_compress_args *proto, int64_t kv_col,
                         int64_t gate_col, int64_t ent_col)
{
    sp_model *m = P->m;
    sp_compute *c = P->c;
    int64_t S = m->v4_side, rate = proto->rate, rot = m->rope_c.dim;
    for (int64_t i = 0; i < P->n_segs && P->st == SP_OK; i++) {
        const sp_seg *g = &P->segs[i];
        int64_t w0 = g->pos0 / rate, w1 = (g->pos0 + g->n) / rate;
        if (w1 <= w0)
            continue;
        for (int64_t w = w0; w < w1; w++)
            sp_rope_cos_sin(&m->rope_c, w * rate, c->v4.h_ecs + (w - w0) * rot);
        P->st = P->be->ops->upload(P->be, c->v4.ecs, c->v4.h_ecs, (size_t)((w1 - w0) * rot) * sizeof(float),
                                   P->err);
        float *side = g->seq->kv->v[l];
        sp_compress_args a = *proto;
        a.kv = side + kv_col;
        a.gate = side + gate_col;
        P->be->ops->compress(P->be, &a, w0, w1, c->v4.ecs, side + w0 * S + ent_col, S);
    }
}

static void compressor(sp_pass *P, int64_t l, const sp_dsv4_layer *v, const side_layout *s)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t hd = m->head_dim, cw = v->indexer ? 2 * hd : hd;
    be->ops->matmul(be, &v->c_wkv, c->xn, P->n, c->v4.a, NULL);
    be->ops->matmul(be, &v->c_wgate, c->xn, P->n, c->v4.b, NULL);
    store_rows(P, l, c->v4.a, cw, s->c_kv);
    store_rows(P, l, c->v4.b, cw, s->c_gate);
    sp_compress_args a = {.stride = m->v4_side, .ape = v->c_ape, .rate = v->rate, .hd = hd,
                          .overlap = v->indexer, .norm = v->c_norm,
                          .eps = (float)m->cfg->rms_norm_eps, .rot = m->rope_c.dim};
    emit_entries(P, l, &a, s->c_kv, s->c_gate, s->c_ent);
}

/* The lightning indexer: its own compressed keys, then each query's top-k into c->v4.sel. */
static void indexer(sp_pass *P, int64_t l, const sp_dsv4_layer *v, const side_layout *s)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_dsv4_config *d = &m->cfg->dsv4;
    int64_t ih = d->index_n_heads, ihd = d->index_head_dim, rot = m->rope_c.dim;
    be->ops->matmul(be, &v->i_wkv, c->xn, P->n, c->v4.a, NULL);
    be->ops->matmul(be, &v->i_wgate, c->xn, P->n, c->v4.b, NULL);
    store_rows(P, l, c->v4.a, 2 * ihd, s->i_kv);
    store_rows(P, l, c->v4.b, 2 * ihd, s->i_gate);
    sp_compress_args a = {.stride = m->v4_side, .ape = v->i_ape, .rate = v->rate, .hd = ihd,
                          .overlap = true, .norm = v->i_norm, .eps = (float)m->cfg->rms_norm_eps,
                          .rot = rot};
    emit_entries(P, l, &a, s->i_kv, s->i_gate, s->i_ent);
    be->ops->matmul(be, &v->i_wq_b, c->v4.qres, P->n, c->v4.a, NULL);
    be->ops->rope_tail(be, c->v4.a + ihd - rot, P->n, ih, ih * ihd, ihd, rot, c->v4.cs2, false);
    be->ops->matmul(be, &v->i_wproj, c->xn, P->n, c->v4.iw, NULL);
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        sp_index_batch b = {
            .q = c->v4.a + g->row0 * ih * ihd,
            .w = c->v4.iw + g->row0 * ih,
            .keys = g->seq->kv->v[l] + s->i_ent,
            .key_stride = m->v4_side,
            .n_heads = ih,
            .hd = ihd,
            .topk = d->index_topk,
            .rate = v->rate,
            .pos0 = g->pos0,
            .n_tok = g->n,
            .n_queue = m->v4_index_queue,
            .sel = c->v4.sel + g->row0 * d->index_topk,
        };
        be->ops->index_topk(be, &b);
    }
}

/* ---- attention -------------------------------------------------------------------------- */

static void grouped_output(sp_pass *P, const sp_dsv4_layer *v)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t G = m->cfg->dsv4.o_groups, R = m->cfg->dsv4.o_lora_rank, gw = m->q_dim / G;
    for (int64_t g = 0; g < G; g++) {
        sp_weight wg = sp_weight_rows(&v->wo_a, g * R, R);
        be->ops->copy2d(be, c->v4.g, gw, c->att + g * gw, m->q_dim, P->n, gw);
        be->ops->matmul(be, &wg, c->v4.g, P->n, c->v4.g2, NULL);
        be->ops->copy2d(be, c->v4.oa + g * R, G * R, c->v4.g2, R, P->n, R);
    }
    be->ops->matmul(be, &v->wo_b, c->v4.oa, P->n, c->o, NULL);
}

static void attend(sp_pass *P, int64_t l, const sp_dsv4_layer *v, const side_layout *s)
{
    sp_model *m = P->m;
    sp_compute *c = P->c;
    int64_t topk = m->cfg->dsv4.index_topk;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        sp_dsv4_attn_args a = {
            .q = c->q + g->row0 * m->q_dim,
            .q_stride = m->q_dim,
            .n_heads = m->n_heads,
            .hd = m->head_dim,
            .kv = g->seq->kv->k[l],
            .kv_stride = m->head_dim,
            .comp = v->rate ? g->seq->kv->v[l] + s->c_ent : NULL,
            .comp_stride = m->v4_side,
            .rate = v->rate ? v->rate : 1,
            .sel = v->indexer ? c->v4.sel + g->row0 * topk : NULL,
            .n_sel = topk,
            .pos0 = g->pos0,
            .n_tok = g->n,
            .window = m->cfg->sliding_window,
            .scale = m->attn_scale,
            .sinks = v->sinks,
            .out = c->att + g->row0 * m->q_dim,
        };
        P->be->ops->dsv4_attention(P->be, &a);
    }
}

static void attention(sp_pass *P, int64_t l)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_dsv4_layer *v = P->w->layers[l].v4;
    side_layout s = side_of(m);
    int64_t hd = m->head_dim, nh = m->n_heads, rot = m->rope.dim;
    float eps = (float)m->cfg->rms_norm_eps;
    const float *cs = v->rate ? c->v4.cs2 : c->rope_cs;
    int64_t qr = m->cfg->q_lora_rank;
    be->ops->matmul(be, &v->wq_a, c->xn, P->n, c->v4.qres, NULL);
    be->ops->rmsnorm(be, c->v4.qres, qr, v->q_norm, P->n, qr, eps, c->v4.qres, qr);
    be->ops->matmul(be, &v->wq_b, c->v4.qres, P->n, c->q, NULL);
    be->ops->rmsnorm(be, c->q, hd, NULL, P->n * nh, hd, eps, c->q, hd);
    be->ops->rope_tail(be, c->q + hd - rot, P->n, nh, nh * hd, hd, rot, cs, false);
    be->ops->matmul(be, &v->wkv, c->xn, P->n, c->k, NULL);
    be->ops->rmsnorm(be, c->k, hd, v->kv_norm, P->n, hd, eps, c->k, hd);
    be->ops->rope_tail(be, c->k + hd - rot, P->n, 1, hd, hd, rot, cs, false);
    sp_emit(P, (int)l, SP_OP_ATTN_Q, m->q_dim, c->q);
    sp_emit(P, (int)l, SP_OP_ATTN_K, hd, c->k);
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        be->ops->copy2d(be, g->seq->kv->k[l] + g->pos0 * hd, hd, c->k + g->row0 * hd, hd, g->n, hd);
    }
    if (v->rate)
        compressor(P, l, v, &s);
    if (v->indexer)
        indexer(P, l, v, &s);
    if (P->st != SP_OK)
        return;
    attend(P, l, v, &s);
    be->ops->rope_tail(be, c->att + hd - rot, P->n, nh, nh * hd, hd, rot, cs, true);
    sp_emit(P, (int)l, SP_OP_ATTN_OUT, m->q_dim, c->att);
    grouped_output(P, v);
}

/* ---- mixture of experts ----------------------------------------------------------------- */

static void moe(sp_pass *P, int64_t l)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_layer *L = &P->w->layers[l];
    const sp_dsv4_layer *v = L->v4;
    int64_t E = L->n_experts, k = L->top_k, H = m->n_embd, I = L->sh_gate.rows;
    be->ops->matmul(be, &L->router, c->xn, P->n, c->router, NULL);
    sp_emit(P, (int)l, SP_OP_MOE_ROUTER, E, c->router);
    if (v->hash) { /* the token's experts from its tid2eid row (host table) */
        for (int64_t t = 0; t < P->n; t++)
            for (int64_t j = 0; j < k; j++)
                c->v4.h_ids[t * k + j] = v->tid2eid[(int64_t)c->h_tokens[t] * k + j];
        P->st = be->ops->upload(be, c->moe_ids, c->v4.h_ids, (size_t)(P->n * k) * sizeof(int32_t), P->err);
        if (P->st != SP_OK)
            return;
    }
    sp_route_cfg rc = {
        .kind = v->hash ? SP_MOE_HASH : SP_MOE_DSV4,
        .n_experts = E,
        .top_k = k,
        .norm = true,
        .scaling = (float)m->cfg->routed_scaling_factor,
        .score_bias = L->score_bias,
        .sqrt_softplus = m->cfg->dsv4.scoring == SP_SCORE_SQRTSOFTPLUS,
    };
    be->ops->moe_route(be, &rc, c->router, P->n, c->moe_ids, c->moe_w);
    float limit = (float)m->cfg->swiglu_limit;
    sp_moe_args a = {.experts = L->experts, .n_experts = E, .top_k = k, .n_embd = H,
                     .inter = L->expert_inter, .glu = SP_GLU_SWIGLU_LIMIT, .limit = limit,
                     .x = c->xn, .n_tok = P->n, .ids = c->moe_ids, .w = c->moe_w, .out = c->ffn,
                     .scratch = c->moe_scratch, .steps = L->expert_steps};
    sp_expert_formats(&m->layers[l], &a.row_format, &a.row_major_only);
    be->ops->moe_ffn(be, &a);
    be->ops->matmul(be, &L->sh_gate, c->xn, P->n, c->gate, NULL);
    be->ops->matmul(be, &L->sh_up, c->xn, P->n, c->up, NULL);
    be->ops->swiglu_limit(be, c->gate, c->up, P->n * I, limit, c->gate);
    be->ops->matmul(be, &L->sh_down, c->gate, P->n, c->o, NULL);
    be->ops->add(be, c->ffn, c->o, P->n * H);
}

/* ---- the pass --------------------------------------------------------------------------- */

sp_status sp_dsv4_upload_rope(sp_pass *P)
{
    sp_model *m = P->m;
    sp_compute *c = P->c;
    int64_t rot = m->rope_c.dim;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        for (int64_t t = 0; t < g->n; t++)
            sp_rope_cos_sin(&m->rope_c, g->pos0 + t, c->v4.h_cs2 + (g->row0 + t) * rot);
    }
    return P->be->ops->upload(P->be, c->v4.cs2, c->v4.h_cs2, (size_t)(P->n * rot) * sizeof(float), P->err);
}

sp_status sp_dsv4_begin(sp_pass *P)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t N = m->cfg->dsv4.hc_mult, H = m->n_embd;
    sp_status st = sp_dsv4_upload_rope(P);
    if (st != SP_OK)
        return st;
    be->ops->embed(be, &P->w->tok_embd, c->tokens, P->n, c->v4.col);
    sp_emit(P, -1, SP_OP_EMBED, H, c->v4.col);
    for (int64_t k = 0; k < N; k++)
        be->ops->copy2d(be, c->x + k * H, N * H, c->v4.col, H, P->n, H);
    return SP_OK;
}

void sp_dsv4_layer_forward(sp_pass *P, int64_t l)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_layer *L = &P->w->layers[l];
    const sp_dsv4_layer *v = L->v4;
    int64_t H = m->n_embd, NH = m->cfg->dsv4.hc_mult * H;
    float eps = (float)m->cfg->rms_norm_eps;
    hc_pre(P, &v->hc_attn_fn, v->hc_attn_base, v->hc_attn_scale);
    be->ops->rmsnorm(be, c->v4.col, H, L->attn_norm, P->n, H, eps, c->xn, H);
    sp_emit(P, (int)l, SP_OP_ATTN_NORM, H, c->xn);
    attention(P, l);
    if (P->st != SP_OK)
        return;
    sp_emit(P, (int)l, SP_OP_ATTN_O_PROJ, H, c->o);
    hc_post(P, c->o);
    sp_emit(P, (int)l, SP_OP_ATTN_RESIDUAL, NH, c->x);
    hc_pre(P, &v->hc_ffn_fn, v->hc_ffn_base, v->hc_ffn_scale);
    be->ops->rmsnorm(be, c->v4.col, H, L->mlp_norm, P->n, H, eps, c->xn, H);
    sp_emit(P, (int)l, SP_OP_MLP_NORM, H, c->xn);
    moe(P, l);
    if (P->st != SP_OK)
        return;
    sp_emit(P, (int)l, SP_OP_MLP_OUT, H, c->ffn);
    hc_post(P, c->ffn);
    sp_emit(P, (int)l, SP_OP_MLP_RESIDUAL, NH, c->x);
}

float *sp_dsv4_head(sp_pass *P)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t N = m->cfg->dsv4.hc_mult, H = m->n_embd, NH = N * H;
    /* P->w: the model's weights as the backend sees them (exec), or an MTP pass's (exec_mtp,
     * with the module's own hc_head) */
    be->ops->rmsnorm(be, c->x, NH, NULL, P->n, NH, (float)m->cfg->rms_norm_eps, c->v4.hc_t, NH);
    be->ops->matmul(be, &P->w->hc_head_fn, c->v4.hc_t, P->n, c->v4.hc_mix, NULL);
    be->ops->hc_weights(be, c->v4.hc_mix, N, P->w->hc_head_base, P->w->hc_head_scale, P->n, N, 0,
                        (float)m->cfg->dsv4.hc_eps, c->v4.hc_pre, NULL, NULL);
    be->ops->hc_collapse(be, c->x, c->v4.hc_pre, P->n, N, H, c->v4.head);
    sp_emit(P, -1, SP_OP_HC_HEAD, H, c->v4.head);
    return c->v4.head;
}
