/* forward.c: the one forward pass every architecture runs, on any backend.
 *
 *   x = embed(tokens)
 *   for each layer:  x += attention(rmsnorm(x))      (GQA or MLA)
 *                    x += ffn(rmsnorm(x))            (dense SwiGLU or mixture of experts)
 *   logits = lm_head(rmsnorm(x))
 *
 * A pass stacks segments of several sequences as rows; every op but attention is
 * row-local, and attention runs per segment over that sequence's KV cache, so a row's
 * result never depends on the other rows. Ops go through the backend (backend.h); this
 * file never touches activation memory itself. Every op output is offered to the
 * observers of the segments it belongs to. */
#include "engine/forward_internal.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

void sp_emit_rows(sp_pass *P, const sp_seg *g, int layer, sp_op op, int64_t width, float *data,
                  int64_t r0, int64_t n)
{
    const sp_observer *o = g->seq->obs;
    if (o->perturb && o->perturb_layer == layer && o->perturb_op == op)
        P->be->ops->scale(P->be, data, n * width, o->perturb_factor);
    if (!o->cb || P->st != SP_OK)
        return;
    size_t count = (size_t)(n * width);
    float *stage = NULL;
    if (!P->be->host_memory && !(stage = sp_compute_view_staging(P->c, count))) {
        P->st = sp_err(P->err, SP_ERR_NOMEM, "out of memory reading %s back for a trace",
                       sp_op_name(op));
        return;
    }
    const float *h = P->be->ops->view(P->be, data, count * sizeof(float), stage);
    if (!h) {
        P->st = P->be->ops->finish(P->be, P->err);
        if (P->st == SP_OK)
            P->st = sp_err(P->err, SP_ERR_INTERNAL, "reading %s back failed", sp_op_name(op));
        return;
    }
    sp_trace_event ev = {layer, op, g->pos0 + r0, n, width, h, g->seq->tokens + g->first + r0};
    o->cb(o->ctx, &ev);
}

/* Token ids and each row's RoPE cos/sin, computed on the host (exactly the same tables
 * on every backend) and uploaded. */
static sp_status upload_inputs(sp_pass *P)
{
    sp_model *m = P->m;
    sp_compute *c = P->c;
    int64_t rd = m->rope.dim;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        for (int64_t t = 0; t < g->n; t++) {
            c->h_tokens[g->row0 + t] = g->seq->tokens[g->first + t];
            if (rd)
                sp_rope_cos_sin(&m->rope, g->pos0 + t, c->h_rope_cs + (g->row0 + t) * rd);
        }
    }
    sp_status st = P->be->ops->upload(P->be, c->tokens, c->h_tokens,
                                      (size_t)P->n * sizeof(int32_t), P->err);
    if (st == SP_OK && rd)
        st = P->be->ops->upload(P->be, c->rope_cs, c->h_rope_cs,
                                (size_t)(P->n * rd) * sizeof(float), P->err);
    return st;
}

/* Per-head RMSNorm (Qwen3 q_norm/k_norm) and RoPE on the first rope.dim dims of each head. */
static void qk_post(sp_pass *P, float *buf, int64_t n_heads, const float *norm)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    int64_t hd = m->head_dim;
    if (norm)
        be->ops->rmsnorm(be, buf, hd, norm, P->n * n_heads, hd, (float)m->cfg->rms_norm_eps, buf, hd);
    if (m->rope.dim)
        be->ops->rope(be, buf, P->n, n_heads, n_heads * hd, hd, m->rope.dim, P->c->rope_cs, false);
}

static void attention_gqa(sp_pass *P, int64_t l)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_layer *L = &P->w->layers[l];
    be->ops->matmul(be, &L->wq, c->xn, P->n, c->q, L->bq);
    be->ops->matmul(be, &L->wk, c->xn, P->n, c->k, L->bk);
    be->ops->matmul(be, &L->wv, c->xn, P->n, c->v, L->bv);
    qk_post(P, c->q, m->n_heads, L->q_norm);
    qk_post(P, c->k, m->n_kv_heads, L->k_norm);
    sp_emit(P, (int)l, SP_OP_ATTN_Q, m->q_dim, c->q);
    sp_emit(P, (int)l, SP_OP_ATTN_K, m->kv_dim_k, c->k);
    sp_emit(P, (int)l, SP_OP_ATTN_V, m->kv_dim_v, c->v);
    int64_t att_w = m->n_heads * m->v_dim;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        sp_kv *kv = g->seq->kv;
        be->ops->copy2d(be, kv->k[l] + g->pos0 * m->kv_dim_k, m->kv_dim_k, c->k + g->row0 * m->kv_dim_k, m->kv_dim_k,
                        g->n, m->kv_dim_k);
        be->ops->copy2d(be, kv->v[l] + g->pos0 * m->kv_dim_v, m->kv_dim_v, c->v + g->row0 * m->kv_dim_v, m->kv_dim_v,
                        g->n, m->kv_dim_v);
        sp_attn_args a = {
            .q = c->q + g->row0 * m->q_dim,
            .q_stride = m->q_dim,
            .k_cache = kv->k[l],
            .v_cache = kv->v[l],
            .n_heads = m->n_heads,
            .n_kv_heads = m->n_kv_heads,
            .qk_dim = m->head_dim,
            .v_dim = m->head_dim,
            .pos0 = g->pos0,
            .n_tok = g->n,
            .window = L->sliding ? m->cfg->sliding_window : 0,
            .scale = m->attn_scale,
            .sinks = L->sinks,
            .out = c->att + g->row0 * att_w,
            .n_ctx = kv->n_ctx,
        };
        be->ops->attention(be, &a);
    }
    sp_emit(P, (int)l, SP_OP_ATTN_OUT, att_w, c->att);
    be->ops->matmul(be, &L->wo, c->att, P->n, c->o, L->bo);
}

static void mlp_dense(sp_pass *P, const sp_layer *L)
{
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t inter = L->w_gate.rows;
    be->ops->matmul(be, &L->w_gate, c->xn, P->n, c->gate, NULL);
    be->ops->matmul(be, &L->w_up, c->xn, P->n, c->up, NULL);
    be->ops->swiglu(be, c->gate, c->up, P->n * inter, c->gate);
    be->ops->matmul(be, &L->w_down, c->gate, P->n, c->ffn, NULL);
}

static void layer_forward(sp_pass *P, int64_t l)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_layer *L = &P->w->layers[l];
    int64_t H = m->n_embd;
    float eps = (float)m->cfg->rms_norm_eps;
    be->ops->rmsnorm(be, c->x, H, L->attn_norm, P->n, H, eps, c->xn, H);
    sp_emit(P, (int)l, SP_OP_ATTN_NORM, H, c->xn);
    if (m->arch->attn == SP_ATTN_MLA)
        sp_forward_mla(P, l);
    else
        attention_gqa(P, l);
    sp_emit(P, (int)l, SP_OP_ATTN_O_PROJ, H, c->o);
    be->ops->add(be, c->x, c->o, P->n * H);
    sp_emit(P, (int)l, SP_OP_ATTN_RESIDUAL, H, c->x);
    be->ops->rmsnorm(be, c->x, H, L->mlp_norm, P->n, H, eps, c->xn, H);
    sp_emit(P, (int)l, SP_OP_MLP_NORM, H, c->xn);
    if (L->moe)
        sp_forward_moe(P, l);
    else
        mlp_dense(P, L);
    sp_emit(P, (int)l, SP_OP_MLP_OUT, H, c->ffn);
    be->ops->add(be, c->x, c->ffn, P->n * H);
    sp_emit(P, (int)l, SP_OP_MLP_RESIDUAL, H, c->x);
}

/* Final norm and LM head for rows [r0, r0 + n) of segment g, in slices of SP_LOGIT_ROWS,
 * read back into dst [n, n_vocab]. */
static sp_status head_rows(sp_pass *P, const sp_seg *g, int64_t r0, int64_t n, float *dst)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t H = m->n_embd, V = m->n_vocab;
    for (int64_t s = 0; s < n; s += SP_LOGIT_ROWS) {
        int64_t k = n - s < SP_LOGIT_ROWS ? n - s : SP_LOGIT_ROWS;
        int64_t row = g->row0 + r0 + s;
        be->ops->rmsnorm(be, c->x + row * H, H, P->w->final_norm, k, H,
                         (float)m->cfg->rms_norm_eps, c->xn, H);
        if (SP_TRACE_ON(P) && g->seq->obs)
            sp_emit_rows(P, g, -1, SP_OP_FINAL_NORM, H, c->xn, r0 + s, k);
        be->ops->matmul(be, &P->w->lm_head, c->xn, k, c->logits, NULL);
        if (SP_TRACE_ON(P) && g->seq->obs)
            sp_emit_rows(P, g, -1, SP_OP_LOGITS, V, c->logits, r0 + s, k);
        sp_status st = be->ops->download(be, dst + s * V, c->logits, (size_t)(k * V) * sizeof(float),
                                         P->err);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

/* Logits each segment's sequence asked for: every row, or its last row. */
static sp_status head(sp_pass *P)
{
    int64_t V = P->m->n_vocab;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        const sp_seq_eval *q = g->seq;
        bool final = g->first + g->n == q->n;
        sp_status st = SP_OK;
        if (q->logits) {
            st = head_rows(P, g, 0, g->n, q->logits + g->first * V);
            if (st == SP_OK && final && q->last)
                memcpy(q->last, q->logits + (q->n - 1) * V, (size_t)V * sizeof(float));
        } else if (q->last && final) {
            st = head_rows(P, g, g->n - 1, 1, q->last);
        }
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

static sp_status run_pass(sp_pass *P)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_status st = upload_inputs(P);
    if (st != SP_OK)
        return st;
    be->ops->embed(be, &P->w->tok_embd, P->c->tokens, P->n, P->c->x);
    sp_emit(P, -1, SP_OP_EMBED, m->n_embd, P->c->x);
    for (int64_t l = 0; l < m->n_layers && P->st == SP_OK; l++)
        layer_forward(P, l);
    if (P->st != SP_OK)
        return P->st;
    st = head(P);
    if (st == SP_OK)
        st = P->st;
    sp_status fin = be->ops->finish(be, st == SP_OK ? P->err : NULL);
    return st != SP_OK ? st : fin;
}

sp_status sp_model_reserve(sp_model *m, int64_t cap, sp_error *err)
{
    pthread_mutex_lock(&m->lock);
    sp_status st = SP_OK;
    if (!m->compute || m->compute->cap < cap) {
        sp_compute *c;
        st = sp_compute_new(m, cap, &c, err);
        if (st == SP_OK) {
            sp_compute_free(m->compute);
            m->compute = c;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}

/* Fills P with the next pass: segments from seqs[*idx] at token *off on, at most max rows. */
static void pack(sp_pass *P, const sp_seq_eval *seqs, int64_t n_seqs, int64_t max, int64_t *idx,
                 int64_t *off)
{
    P->n_segs = P->n = 0;
    P->observed = false;
    while (*idx < n_seqs && P->n < max) {
        const sp_seq_eval *q = &seqs[*idx];
        int64_t take = q->n - *off < max - P->n ? q->n - *off : max - P->n;
        if (take > 0) {
            P->segs[P->n_segs++] = (sp_seg){q, P->n, take, q->pos0 + *off, *off};
            P->observed |= q->obs != NULL;
            P->n += take;
            *off += take;
        }
        if (*off >= q->n) {
            (*idx)++;
            *off = 0;
        }
    }
}

/* Room for n segments in the pass buffers (no allocation once a pass of n was seen). */
static sp_status reserve_segs(sp_compute *c, int64_t n, sp_error *err)
{
    if (n <= c->segs_cap)
        return SP_OK;
    sp_seg *p = realloc(c->segs, (size_t)n * sizeof *p);
    if (!p)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    c->segs = p;
    c->segs_cap = n;
    return SP_OK;
}

sp_status sp_forward(sp_model *m, const sp_seq_eval *seqs, int64_t n_seqs, int64_t max_tokens,
                     sp_error *err)
{
    if (!m->compute)
        return sp_err(err, SP_ERR_INTERNAL, "forward pass before sp_model_reserve");
    pthread_mutex_lock(&m->lock);
    sp_status st = reserve_segs(m->compute, n_seqs > 0 ? n_seqs : 1, err);
    sp_pass P = {.m = m, .be = m->be, .c = m->compute, .w = &m->exec, .segs = m->compute->segs,
                 .err = err};
    int64_t max = max_tokens > 0 && max_tokens < P.c->cap ? max_tokens : P.c->cap;
    int64_t idx = 0, off = 0;
    while (st == SP_OK && idx < n_seqs) {
        pack(&P, seqs, n_seqs, max, &idx, &off);
        if (P.n > 0)
            st = run_pass(&P);
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}
