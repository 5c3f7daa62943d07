/* forward_mtp.c: DeepSeek multi-token prediction (MTP) passes (V3 below, V4 at
 * sp_dsv4_mtp_begin), and the hidden states any pass hands back.
 *
 * An MTP position i takes the main model's last hidden state h_i (before its final norm)
 * and the token t_{i+1}, and predicts t_{i+2} (DeepSeek-V3 paper, section 2.2; the input
 * order is the hub checkpoints'):
 *
 *   x_i      = eh_proj([enorm(embed(t_{i+1})); hnorm(h_i)])       [2H] -> [H]
 *   y        = block(x)           layer n_layers: MLA + MoE, its own KV cache, RoPE at i
 *   logits_i = shared_head.head(shared_head.norm(y_i))
 *
 * The block is an ordinary layer run by forward.c; the head is forward_head.c's with the
 * MTP's norm and head (the model's exec_mtp). Every op is row-local but the block's
 * attention, which reads the MTP cache, so an MTP row is batch-invariant like any other.
 * y_i (before shared_head.norm) comes back through hidden_out: chained drafting feeds it
 * in place of h for the next position (runtime/spec_draft.c). */
#include "engine/forward_internal.h"

sp_status sp_mtp_upload(sp_pass *P)
{
    int64_t H = sp_model_hidden_width(P->m);
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        sp_status st = P->be->ops->upload(P->be, P->c->mtp_h + g->row0 * H,
                                          g->seq->hidden_in + g->first * H,
                                          (size_t)(g->n * H) * sizeof(float), P->err);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

void sp_mtp_begin(sp_pass *P)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_mtp *t = &m->mtp;
    int64_t H = m->n_embd, l = m->n_layers;
    float eps = (float)m->cfg->rms_norm_eps;
    be->ops->embed(be, &P->w->tok_embd, c->tokens, P->n, c->x);
    sp_emit(P, (int)l, SP_OP_EMBED, H, c->x);
    be->ops->rmsnorm(be, c->x, H, t->enorm, P->n, H, eps, c->mtp_in, 2 * H);
    be->ops->rmsnorm(be, c->mtp_h, H, t->hnorm, P->n, H, eps, c->mtp_in + H, 2 * H);
    be->ops->matmul(be, &t->eh_proj, c->mtp_in, P->n, c->x, NULL);
    be->ops->rmsnorm(be, c->x, H, P->w->layers[l].attn_norm, P->n, H, eps, c->xn, H);
    sp_emit(P, (int)l, SP_OP_ATTN_NORM, H, c->xn);
}

/* DeepSeek-V4 (MTPBlock in DeepSeek's inference/model.py): the main model's hc_mult streams
 * S_k at position i (before hc_head) and the token t_{i+1}:
 *     e = e_proj(enorm(embed(t_{i+1})));   streams_k = h_proj(hnorm(S_k)) + e
 * then one V4 layer (layer n_layers, forward_dsv4.c) and the head through the module's own
 * hc_head and norm. The streams the layer leaves are the module's hidden state. */
sp_status sp_dsv4_mtp_begin(sp_pass *P)
{
    sp_model *m = P->m;
    sp_backend *be = P->be;
    sp_compute *c = P->c;
    const sp_mtp *t = &m->mtp;
    int64_t H = m->n_embd, N = m->cfg->dsv4.hc_mult, l = m->n_layers;
    float eps = (float)m->cfg->rms_norm_eps;
    sp_status st = sp_dsv4_upload_rope(P);
    if (st != SP_OK)
        return st;
    be->ops->embed(be, &P->w->tok_embd, c->tokens, P->n, c->v4.col);
    sp_emit(P, (int)l, SP_OP_EMBED, H, c->v4.col);
    be->ops->rmsnorm(be, c->v4.col, H, t->enorm, P->n, H, eps, c->v4.col, H);
    be->ops->matmul(be, &t->e_proj, c->v4.col, P->n, c->v4.head, NULL);
    for (int64_t k = 0; k < N; k++) /* e, once per stream */
        be->ops->copy2d(be, c->v4.hc_t + k * H, N * H, c->v4.head, H, P->n, H);
    be->ops->rmsnorm(be, c->mtp_h, H, t->hnorm, P->n * N, H, eps, c->v4.x2, H);
    be->ops->matmul(be, &t->h_proj, c->v4.x2, P->n * N, c->x, NULL);
    be->ops->add(be, c->x, c->v4.hc_t, P->n * N * H);
    return SP_OK;
}

sp_status sp_hidden_download(sp_pass *P)
{
    int64_t H = sp_model_hidden_width(P->m);
    const float *src = P->m->arch->attn == SP_ATTN_DSV4 ? P->c->x : P->hx; /* V4: the streams */
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        if (!g->seq->hidden_out)
            continue;
        sp_status st = P->be->ops->download(P->be, g->seq->hidden_out + g->first * H,
                                            src + g->row0 * H, (size_t)(g->n * H) * sizeof(float),
                                            P->err);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}
