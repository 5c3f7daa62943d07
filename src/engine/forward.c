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

static void pack(sp_pass *P, const sp_seq_eval *seqs, int64_t n_seqs, int64_t max, int64_t *idx,
                 int64_t *off);
static sp_status reserve_segs(sp_compute *c, int64_t n, sp_error *err);

/* Each row's token id, position and RoPE cos/sin, computed on the host (exactly the same
 * tables on every backend) and uploaded in one copy, queued where the backend can: the
 * pass's ops follow it on the backend's queue without the host waiting for it. */
static sp_status upload_inputs(sp_pass *P)
{
    sp_model *m = P->m;
    sp_compute *c = P->c;
    int64_t rd = m->rope.dim;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        for (int64_t t = 0; t < g->n; t++) {
            c->h_tokens[g->row0 + t] = g->seq->tokens[g->first + t];
            c->h_pos[g->row0 + t] = (int32_t)(g->pos0 + t);
            if (rd)
                sp_rope_cos_sin(&m->rope, g->pos0 + t, c->h_rope_cs + (g->row0 + t) * rd);
        }
    }
    sp_backend *be = P->be;
    return (be->ops->upload_queued ? be->ops->upload_queued : be->ops->upload)(
        be, c->tokens, c->h_inputs, sp_compute_inputs_bytes(c, P->n, rd), P->err);
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

/* rope_kv_store's arguments for segment g of layer l. */
static sp_rope_kv_args rope_kv_args(const sp_pass *P, int64_t l, const sp_seg *g)
{
    const sp_model *m = P->m;
    const sp_compute *c = P->c;
    const sp_kv *kv = g->seq->kv;
    return (sp_rope_kv_args){
        .q = c->q + g->row0 * m->q_dim,
        .k = c->k + g->row0 * m->kv_dim_k,
        .v = c->v + g->row0 * m->kv_dim_v,
        .n = g->n,
        .n_q_heads = m->n_heads,
        .n_kv_heads = m->n_kv_heads,
        .head_dim = m->head_dim,
        .rot_dim = m->rope.dim,
        .v_width = m->kv_dim_v,
        .cos_sin = c->rope_cs + g->row0 * m->rope.dim,
        .pos = c->pos + g->row0,
        .k_cache = kv->k[l],
        .v_cache = kv->v[l],
    };
}

static void attention_gqa(sp_pass *P, int64_t l)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_layer *L = &P->w->layers[l];
    const sp_weight *ws[3] = {&L->wq, &L->wk, &L->wv};
    float *ys[3] = {c->q, c->k, c->v};
    const float *bs[3] = {L->bq, L->bk, L->bv};
    /* RoPE and the cache writes as one op where the backend has it and nothing observes
     * q/k between them; for one sequence with every head dim rotated, also with the
     * product before them */
    const bool fused = be->ops->rope_kv_store && !SP_TRACE_ON(P) && !L->q_norm && !L->k_norm &&
                       m->rope.dim >= 2 && m->kv_dim_k == m->n_kv_heads * m->head_dim;
    const bool with_mm = fused && be->ops->matmul_rope_kv && P->n_segs == 1 &&
                         P->segs[0].row0 == 0 && P->segs[0].n == P->n &&
                         m->rope.dim == m->head_dim;
    if (with_mm) {
        sp_rope_kv_args ra = rope_kv_args(P, l, &P->segs[0]);
        be->ops->matmul_rope_kv(be, ws, bs, c->xn, c->v, &ra);
    } else {
        be->ops->matmul_multi(be, 3, ws, c->xn, P->n, ys, bs);
    }
    if (!fused) {
        qk_post(P, c->q, m->n_heads, L->q_norm);
        qk_post(P, c->k, m->n_kv_heads, L->k_norm);
    }
    sp_emit(P, (int)l, SP_OP_ATTN_Q, m->q_dim, c->q);
    sp_emit(P, (int)l, SP_OP_ATTN_K, m->kv_dim_k, c->k);
    sp_emit(P, (int)l, SP_OP_ATTN_V, m->kv_dim_v, c->v);
    int64_t att_w = m->n_heads * m->v_dim;
    /* every sequence's rows attend over its own cache: one call for all of them where the
     * backend has it (one parallel-for instead of one per sequence) */
    sp_attn_args *args = P->c->attn;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        sp_kv *kv = g->seq->kv;
        const int32_t *pos = c->pos + g->row0;
        if (fused && !with_mm) {
            sp_rope_kv_args ra = rope_kv_args(P, l, g);
            be->ops->rope_kv_store(be, &ra);
        } else if (!fused) {
            be->ops->kv_store(be, kv->k[l], m->kv_dim_k, pos, c->k + g->row0 * m->kv_dim_k,
                              m->kv_dim_k, g->n, m->kv_dim_k);
            be->ops->kv_store(be, kv->v[l], m->kv_dim_v, pos, c->v + g->row0 * m->kv_dim_v,
                              m->kv_dim_v, g->n, m->kv_dim_v);
        }
        args[i] = (sp_attn_args){
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
            .q_pos = pos,
            .window = L->sliding ? m->cfg->sliding_window : 0,
            .scale = m->attn_scale,
            .sinks = L->sinks,
            .out = c->att + g->row0 * att_w,
            .n_ctx = kv->n_ctx,
        };
    }
    if (be->ops->attention_many)
        be->ops->attention_many(be, args, P->n_segs);
    else
        for (int64_t i = 0; i < P->n_segs; i++)
            be->ops->attention(be, &args[i]);
    sp_emit(P, (int)l, SP_OP_ATTN_OUT, att_w, c->att);
    be->ops->matmul(be, &L->wo, c->att, P->n, c->o, L->bo);
}

static void mlp_dense(sp_pass *P, const sp_layer *L)
{
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    be->ops->matmul_swiglu(be, &L->w_gate, &L->w_up, c->xn, P->n, c->gate, c->up);
    be->ops->matmul(be, &L->w_down, c->gate, P->n, c->ffn, NULL);
}

/* x += res, then xn = rmsnorm(x) with norm w, in one op. Observed, the residual (layer
 * l_res, op res_op) is offered before the norm reads it, so a perturbation of the residual
 * reaches the norm: then the two unfused ops (the same bits). */
static void add_norm(sp_pass *P, const float *res, int l_res, sp_op res_op, const float *w,
                     int l_norm, sp_op norm_op)
{
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    int64_t H = P->m->n_embd;
    float eps = (float)P->m->cfg->rms_norm_eps;
    if (!SP_TRACE_ON(P)) {
        be->ops->add_rmsnorm(be, c->x, res, w, P->n, H, eps, c->xn);
        return;
    }
    be->ops->add(be, c->x, res, P->n * H);
    sp_emit(P, l_res, res_op, H, c->x);
    be->ops->rmsnorm(be, c->x, H, w, P->n, H, eps, c->xn, H);
    sp_emit(P, l_norm, norm_op, H, c->xn);
}

/* Layer l on x, with xn = its attention norm of x already computed; leaves xn = the next
 * layer's attention norm of x (not after the last layer: the head norms its own rows). */
static void layer_forward(sp_pass *P, int64_t l)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_layer *L = &P->w->layers[l];
    int64_t H = m->n_embd;
    if (m->arch->attn == SP_ATTN_MLA)
        sp_forward_mla(P, l);
    else
        attention_gqa(P, l);
    sp_emit(P, (int)l, SP_OP_ATTN_O_PROJ, H, c->o);
    add_norm(P, c->o, (int)l, SP_OP_ATTN_RESIDUAL, L->mlp_norm, (int)l, SP_OP_MLP_NORM);
    const bool last = l + 1 >= m->n_layers; /* also an MTP layer, past them */
    if (!L->moe)
        mlp_dense(P, L);
    else if (sp_forward_moe(P, l, last ? NULL : P->w->layers[l + 1].attn_norm))
        return; /* the residual step and the next norm ran in the expert op */
    sp_emit(P, (int)l, SP_OP_MLP_OUT, H, c->ffn);
    if (!last) {
        add_norm(P, c->ffn, (int)l, SP_OP_MLP_RESIDUAL, P->w->layers[l + 1].attn_norm, (int)l + 1,
                 SP_OP_ATTN_NORM);
    } else {
        be->ops->add(be, c->x, c->ffn, P->n * H);
        sp_emit(P, (int)l, SP_OP_MLP_RESIDUAL, H, c->x);
    }
}

/* A key naming everything the pass's ops and their arguments depend on besides the values
 * read from backend memory: the pass buffers, and per segment its cache, rows and logits
 * wanted, the rows it keeps on the device and the draft rows it verifies. Equal keys, equal
 * ops (what a backend needs to replay recorded work). */
static bool pass_key(sp_pass *P, sp_rec_key *key)
{
    sp_compute *c = P->c;
    size_t words = 3 + 6 * (size_t)P->n_segs;
    if (words * 8 > c->rec_key_cap) {
        unsigned char *k = realloc(c->rec_key, words * 8);
        if (!k)
            return false;
        c->rec_key = k;
        c->rec_key_cap = words * 8;
    }
    uint64_t *w = (uint64_t *)(void *)c->rec_key;
    w[0] = c->serial;
    w[1] = (uint64_t)P->n | (uint64_t)P->ids_only << 63 | (uint64_t)P->chained << 62 |
           (uint64_t)P->sampled << 61 | (uint64_t)P->spec << 60;
    w[2] = (uint64_t)P->n_segs;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        const sp_spec_req *r = P->spec ? g->seq->spec : NULL;
        int64_t r0;
        w[3 + 6 * i] = g->seq->kv->serial;
        w[4 + 6 * i] = (uint64_t)g->row0;
        w[5 + 6 * i] = (uint64_t)g->n;
        w[6 + 6 * i] = (uint64_t)sp_head_seg_rows(g, &r0);
        w[7 + 6 * i] = (uint64_t)(uintptr_t)g->seq->keep;
        /* a verification names the draft rows it reads (1: q one-hot) */
        w[8 + 6 * i] = !r ? 0 : r->draft_rows ? (uint64_t)(uintptr_t)r->draft_rows : 1;
    }
    *key = (sp_rec_key){c->rec_key, words * 8};
    return true;
}

/* Embedding, layers and, when the wanted logits fit one block, the LM head: ops only. */
static void issue_body(sp_pass *P, bool gathered)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    if (m->arch->attn == SP_ATTN_DSV4) { /* forward_dsv4.c; an MTP pass: its one block */
        if ((P->st = P->mtp ? sp_dsv4_mtp_begin(P) : sp_dsv4_begin(P)) != SP_OK)
            return;
        for (int64_t l = P->mtp ? m->n_layers : 0; l < m->n_layers + P->mtp && P->st == SP_OK; l++)
            sp_dsv4_layer_forward(P, l);
        if (P->st == SP_OK)
            sp_dsv4_head(P);
        if (gathered && P->st == SP_OK)
            sp_head_gathered(P);
        return;
    }
    if (P->mtp) { /* forward_mtp.c: the MTP module's input stage, its block, its head */
        sp_mtp_begin(P);
        layer_forward(P, m->n_layers);
        if (gathered && P->st == SP_OK)
            sp_head_gathered(P);
        return;
    }
    /* a chained step's token is the pick the pass before left on the device */
    be->ops->embed(be, &P->w->tok_embd, P->chained ? c->logit_ids : c->tokens, P->n, c->x);
    sp_emit(P, -1, SP_OP_EMBED, m->n_embd, c->x);
    if (m->n_layers > 0) {
        be->ops->rmsnorm(be, c->x, m->n_embd, P->w->layers[0].attn_norm, P->n, m->n_embd,
                         (float)m->cfg->rms_norm_eps, c->xn, m->n_embd);
        sp_emit(P, 0, SP_OP_ATTN_NORM, m->n_embd, c->xn);
    }
    for (int64_t l = 0; l < m->n_layers && P->st == SP_OK; l++)
        layer_forward(P, l);
    if (gathered && P->st == SP_OK)
        sp_head_gathered(P);
}

/* The body, replayed or recorded where the backend can and the pass allows it (not
 * observed: observers read outputs back mid-pass; not DeepSeek-V4, whose ops take
 * positions as arguments and upload mid-pass). */
static void run_body(sp_pass *P, bool gathered)
{
    sp_backend *be = P->be;
    sp_rec_key key;
    if (!gathered || SP_TRACE_ON(P) || !be->ops->replay || P->m->arch->attn == SP_ATTN_DSV4 || P->mtp ||
        !pass_key(P, &key)) {
        issue_body(P, gathered);
        return;
    }
    if (be->ops->replay(be, key))
        return;
    if (!be->ops->record_begin(be, key)) {
        issue_body(P, gathered);
        return;
    }
    issue_body(P, gathered);
    if (!be->ops->record_end(be))
        issue_body(P, gathered);
}

/* Whether a segment's wanted row is drawn rather than picked greedily. */
static bool seq_draws(const sp_seq_eval *q)
{
    return !q->logits && q->last_id && q->sample && q->sample->inv_t > 0.0;
}

/* Whether segment g's verification runs on the device: the backend verifies, the segment
 * holds all its sequence's rows, and they fit the draw kernels. */
static bool spec_on_device(const sp_pass *P, const sp_seg *g)
{
    const sp_seq_eval *q = g->seq;
    return P->be->ops->spec_verify && g->first == 0 && g->n == q->n && q->n >= 2 &&
           q->n - 1 <= SP_SPEC_DEV_K;
}

/* Whether the pass reads back only picks: the backend picks (and, for draws, draws) on the
 * device, nothing observes the logits, and every segment wanting rows wants their picks
 * (ids, or its last_id alone). *sampled: some row is a draw. */
static bool ids_only(const sp_pass *P, bool *sampled)
{
    *sampled = false;
    if (!P->be->ops->logits_argmax || SP_TRACE_ON(P))
        return false;
    int64_t wanted = 0, r0;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seq_eval *q = P->segs[i].seq;
        int64_t k = sp_head_seg_rows(&P->segs[i], &r0);
        if (k > 0 && !(q->logits ? q->ids : q->last_id))
            return false;
        if (k > 0 && q->spec && !spec_on_device(P, &P->segs[i]))
            return false;
        if (k > 0 && seq_draws(q))
            *sampled = true;
        wanted += k;
    }
    return wanted > 0 && (!*sampled || P->be->ops->logits_sample);
}

/* The draws of a sampled pass, a request a wanted row (greedy ones inv_t 0), uploaded
 * before the body that reads them. */
static sp_status upload_draws(sp_pass *P)
{
    sp_compute *c = P->c;
    int64_t at = 0, r0;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seq_eval *q = P->segs[i].seq;
        int64_t k = sp_head_seg_rows(&P->segs[i], &r0);
        for (int64_t j = 0; j < k; j++)
            c->h_sample_reqs[at + j] = seq_draws(q) ? *q->sample : (sp_sample_req){0};
        at += k;
    }
    sp_backend *be = P->be;
    return (be->ops->upload_queued ? be->ops->upload_queued : be->ops->upload)(
        be, c->sample_reqs, c->h_sample_reqs, (size_t)at * sizeof(sp_sample_req), P->err);
}

/* The verifications' inputs, segment by segment in order (as the head reads them): the
 * target's draw for its rows, the draft's for the draft rows after them, the drafts and
 * the uniforms. */
static sp_status upload_spec(sp_pass *P)
{
    sp_compute *c = P->c;
    int64_t nr = 0, na = 0;
    for (int64_t g = 0; g < P->n_segs; g++) {
        const sp_seq_eval *q = P->segs[g].seq;
        const sp_spec_req *r = q->spec;
        if (!r)
            continue;
        const int64_t m = q->n - 1, rows = r->draft_rows ? 2 * m + 1 : m + 1;
        for (int64_t j = 0; j < rows; j++)
            c->h_spec_reqs[nr + j] = j <= m ? r->p : r->q;
        c->h_spec_reqs[nr + m].u = r->v_bonus; /* the bonus row's draw */
        sp_spec_args *a = &c->h_spec_args[na++];
        memset(a, 0, sizeof *a);
        a->m = (int32_t)m;
        a->v = r->v;
        a->v_bonus = r->v_bonus;
        for (int64_t i = 0; i < m; i++) {
            a->u[i] = r->u[i];
            a->drafts[i] = q->tokens[1 + i];
        }
        nr += rows;
    }
    sp_backend *be = P->be;
    sp_status (*up)(sp_backend *, void *, const void *, size_t, sp_error *) =
        be->ops->upload_queued ? be->ops->upload_queued : be->ops->upload;
    sp_status st = up(be, c->spec_reqs, c->h_spec_reqs, (size_t)nr * sizeof(sp_sample_req), P->err);
    return st == SP_OK ? up(be, c->spec_args, c->h_spec_args, (size_t)na * sizeof(sp_spec_args), P->err)
                       : st;
}

/* The pass up to its results: its inputs uploaded and its body issued (replayed or
 * recorded where it can). gathered: the wanted logits rows fit one pass of the head. */
static sp_status issue_pass(sp_pass *P, bool gathered)
{
    sp_status st = upload_inputs(P);
    if (st == SP_OK && P->mtp)
        st = sp_mtp_upload(P);
    if (st != SP_OK)
        return st;
    bool sampled = false;
    P->ids_only = gathered && ids_only(P, &sampled);
    P->sampled = P->ids_only && sampled;
    P->spec = false;
    for (int64_t i = 0; P->ids_only && i < P->n_segs; i++)
        P->spec |= P->segs[i].seq->spec != NULL;
    if (P->sampled && (st = upload_draws(P)) != SP_OK)
        return st;
    if (P->spec && (st = upload_spec(P)) != SP_OK)
        return st;
    P->hx = P->m->arch->attn == SP_ATTN_DSV4 ? P->c->v4.head : P->c->x;
    run_body(P, gathered);
    return P->st;
}

static sp_status run_pass(sp_pass *P)
{
    sp_backend *be = P->be;
    bool gathered = sp_head_rows_wanted(P) <= SP_LOGIT_ROWS;
    sp_status st = issue_pass(P, gathered);
    if (st != SP_OK)
        return st;
    if ((st = sp_hidden_download(P)) != SP_OK)
        return st;
    st = gathered ? sp_head_gathered_download(P) : sp_head_sliced(P);
    if (st == SP_OK)
        st = P->st;
    sp_status fin = be->ops->finish(be, st == SP_OK ? P->err : NULL);
    return st != SP_OK ? st : fin;
}

sp_status sp_forward_queue_step(sp_model *m, const sp_seq_eval *q, bool chained, sp_error *err)
{
    if (q->n != 1 || !q->last_id || q->logits || q->obs || q->hidden_in || q->hidden_out ||
        m->arch->attn == SP_ATTN_DSV4) /* V4 embeds from its own pass inputs */
        return sp_err(err, SP_ERR_INTERNAL, "a queued step is one token wanting its pick");
    sp_status st = reserve_segs(m->compute, 1, err);
    if (st != SP_OK)
        return st;
    sp_pass P = {.m = m, .be = m->be, .c = m->compute, .w = &m->exec, .segs = m->compute->segs,
                 .chained = chained, .err = err};
    int64_t idx = 0, off = 0;
    pack(&P, q, 1, 1, &idx, &off);
    bool sampled;
    if (!ids_only(&P, &sampled) || sampled)
        return sp_err(err, SP_ERR_INTERNAL, "a queued step needs greedy picks on the device");
    return issue_pass(&P, true);
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
    if (p)
        c->segs = p;
    sp_attn_args *a = p ? realloc(c->attn, (size_t)n * sizeof *a) : NULL;
    if (!a)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    c->attn = a;
    c->segs_cap = n;
    return SP_OK;
}

sp_status sp_forward(sp_model *m, const sp_seq_eval *seqs, int64_t n_seqs, int64_t max_tokens,
                     sp_error *err)
{
    if (!m->compute)
        return sp_err(err, SP_ERR_INTERNAL, "forward pass before sp_model_reserve");
    bool mtp = n_seqs > 0 && seqs[0].hidden_in;
    for (int64_t i = 1; i < n_seqs; i++)
        if (!seqs[i].hidden_in != !mtp)
            return sp_err(err, SP_ERR_INTERNAL, "a pass mixes MTP and main-model sequences");
    if (mtp && !m->n_mtp)
        return sp_err(err, SP_ERR_INTERNAL, "an MTP pass on a model without an MTP module");
    for (int64_t i = 0; i < n_seqs; i++) { /* until a pass picks them on the device */
        if (seqs[i].last_id)
            *seqs[i].last_id = -1;
        if (seqs[i].ids && seqs[i].n > 0)
            seqs[i].ids[0] = -1;
    }
    pthread_mutex_lock(&m->lock);
    sp_status st = reserve_segs(m->compute, n_seqs > 0 ? n_seqs : 1, err);
    sp_pass P = {.m = m, .be = m->be, .c = m->compute, .w = mtp ? &m->exec_mtp : &m->exec,
                 .segs = m->compute->segs, .mtp = mtp, .err = err};
    int64_t max = max_tokens > 0 && max_tokens < P.c->cap ? max_tokens : P.c->cap;
    for (int64_t i = 0; i < n_seqs && st == SP_OK; i++)
        if (seqs[i].ids && !seqs[i].spec && (n_seqs > 1 || !seqs[i].logits ||
                                             seqs[i].n > SP_LOGIT_ROWS || seqs[i].n > max))
            st = sp_err(err, SP_ERR_INTERNAL, "greedy picks of every row: one sequence of at "
                        "most %d rows in one pass, with a logits buffer", SP_LOGIT_ROWS);
        else if (seqs[i].spec && (!seqs[i].ids || !seqs[i].logits || seqs[i].n < 2))
            st = sp_err(err, SP_ERR_INTERNAL, "a verification has drafts and wants its outcome "
                        "(ids) and every row (logits)");
    int64_t idx = 0, off = 0;
    while (st == SP_OK && idx < n_seqs) {
        pack(&P, seqs, n_seqs, max, &idx, &off);
        if (P.n > 0)
            st = run_pass(&P);
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}
