/* forward_mtp.c: DeepSeek-V3 multi-token prediction (MTP) passes, and the last hidden
 * states any pass hands back.
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
    int64_t H = P->m->n_embd;
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

sp_status sp_hidden_download(sp_pass *P)
{
    int64_t H = P->m->n_embd;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        if (!g->seq->hidden_out)
            continue;
        sp_status st = P->be->ops->download(P->be, g->seq->hidden_out + g->first * H,
                                            P->hx + g->row0 * H, (size_t)(g->n * H) * sizeof(float),
                                            P->err);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}
