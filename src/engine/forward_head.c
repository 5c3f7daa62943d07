/* forward_head.c: the end of a pass — final norm, LM head, and the logits' way back to the
 * host.
 *
 * A segment wants every row's logits (seq->logits), its last row's (seq->last, on the
 * segment that ends the sequence's tokens), or none. When the rows wanted by all segments
 * fit the logits block (SP_LOGIT_ROWS), they are normed into consecutive rows of xn and go
 * through the LM head in one matmul, all as ops (recordable), then come back in one
 * download. Otherwise (a prefill asking for every row) the head runs in slices of the block,
 * each read back before the next. Both give a row the same bits: every op is row-local.
 * Where every row wanted is a greedy pick alone (seq->ids, seq->last_id) and the backend
 * picks on the device, only the picks come back (an int a row instead of n_vocab floats);
 * a verification of drafts (seq->spec) reads back two ints (the drafts accepted, the next
 * token). A sequence may keep its last row on the device (seq->keep: a draft's row, for the
 * target's verification). */
#include "engine/forward_internal.h"
#include "util/error.h"

#include <string.h>

int64_t sp_head_seg_rows(const sp_seg *g, int64_t *r0)
{
    const sp_seq_eval *q = g->seq;
    *r0 = 0;
    if (q->logits)
        return g->n;
    if ((q->last || q->last_id) && g->first + g->n == q->n) {
        *r0 = g->n - 1;
        return 1;
    }
    return 0;
}

int64_t sp_head_rows_wanted(const sp_pass *P)
{
    int64_t n = 0, r0;
    for (int64_t i = 0; i < P->n_segs; i++)
        n += sp_head_seg_rows(&P->segs[i], &r0);
    return n;
}

/* Final norm of rows [r0, r0 + k) of segment g into xn rows [at, at + k). */
static void final_norm(sp_pass *P, const sp_seg *g, int64_t r0, int64_t k, int64_t at)
{
    sp_model *m = P->m;
    int64_t H = m->n_embd;
    float *out = P->c->xn + at * H;
    P->be->ops->rmsnorm(P->be, P->hx + (g->row0 + r0) * H, H, P->w->final_norm, k, H,
                        (float)m->cfg->rms_norm_eps, out, H);
    if (SP_TRACE_ON(P) && g->seq->obs)
        sp_emit_rows(P, g, -1, SP_OP_FINAL_NORM, H, out, r0, k);
}

/* The verifications, segment by segment in upload_spec's order: each segment's rows (at
 * `at`) with its draft's rows where they are; the count and the token go to its first two
 * logit_ids. */
static void spec_verify(sp_pass *P)
{
    const int64_t V = P->m->n_vocab;
    int64_t at = 0, nr = 0, na = 0, r0;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        const sp_spec_req *r = g->seq->spec;
        const int64_t k = sp_head_seg_rows(g, &r0);
        if (r) {
            const int64_t m = k - 1;
            P->be->ops->spec_verify(P->be, P->c->logits + at * V, r->draft_rows, m, V,
                                    P->c->spec_reqs + nr, P->c->spec_args + na++, P->c->logit_ids + at);
            nr += r->draft_rows ? 2 * m + 1 : m + 1;
        }
        at += k;
    }
}

/* Whether some segment's rows want picks or draws besides the verifications. */
static bool picks_besides_spec(const sp_pass *P)
{
    int64_t r0;
    for (int64_t i = 0; i < P->n_segs; i++)
        if (!P->segs[i].seq->spec && sp_head_seg_rows(&P->segs[i], &r0) > 0)
            return true;
    return false;
}

/* Each segment's last row copied on the device where its sequence keeps it (seq->keep). */
static void keep_rows(sp_pass *P)
{
    const int64_t V = P->m->n_vocab;
    int64_t at = 0, r0;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        const int64_t k = sp_head_seg_rows(g, &r0);
        if (k > 0 && g->seq->keep && g->first + g->n == g->seq->n)
            P->be->ops->copy2d(P->be, g->seq->keep, V, P->c->logits + (at + k - 1) * V, V, 1, V);
        at += k;
    }
}

void sp_head_gathered(sp_pass *P)
{
    int64_t at = 0, r0, V = P->m->n_vocab;
    for (int64_t i = 0; i < P->n_segs; i++) {
        int64_t k = sp_head_seg_rows(&P->segs[i], &r0);
        if (k > 0)
            final_norm(P, &P->segs[i], r0, k, at);
        at += k;
    }
    if (at == 0)
        return;
    P->be->ops->matmul(P->be, &P->w->lm_head, P->c->xn, at, P->c->logits, NULL);
    const bool picks = !P->spec || picks_besides_spec(P);
    if (P->sampled)
        P->be->ops->logits_sample(P->be, P->c->logits, at, V, P->c->sample_reqs, P->c->logit_ids);
    else if (P->ids_only && picks)
        P->be->ops->logits_argmax(P->be, P->c->logits, at, V, P->c->logit_ids);
    if (P->spec) /* after the picks: a verification's outcome replaces its rows' picks */
        spec_verify(P);
    keep_rows(P);
    if (!SP_TRACE_ON(P))
        return;
    at = 0;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        int64_t k = sp_head_seg_rows(g, &r0);
        if (k > 0 && g->seq->obs)
            sp_emit_rows(P, g, -1, SP_OP_LOGITS, V, P->c->logits + at * V, r0, k);
        at += k;
    }
}

/* Where segment g's logits rows go on the host, and the sequence's last row afterwards. */
static float *seg_dst(const sp_seg *g, int64_t V)
{
    return g->seq->logits ? g->seq->logits + g->first * V : g->seq->last;
}

static void copy_last(const sp_seg *g, int64_t V)
{
    const sp_seq_eval *q = g->seq;
    if (q->logits && q->last && g->first + g->n == q->n)
        memcpy(q->last, q->logits + (q->n - 1) * V, (size_t)V * sizeof(float));
}

/* Only the picks of an ids_only pass: one read back of an int a row. */
static sp_status download_ids(sp_pass *P, int64_t total)
{
    sp_compute *c = P->c;
    sp_status st = P->be->ops->download(P->be, c->h_logit_ids, c->logit_ids,
                                        (size_t)total * sizeof(int32_t), P->err);
    int64_t at = 0, r0;
    for (int64_t i = 0; i < P->n_segs && st == SP_OK; i++) {
        const sp_seg *g = &P->segs[i];
        int64_t k = sp_head_seg_rows(g, &r0);
        if (g->seq->spec) { /* the count and the token; every row where the host must verify */
            g->seq->ids[0] = c->h_logit_ids[at];
            g->seq->ids[1] = c->h_logit_ids[at + 1];
            if (c->h_logit_ids[at] < 0)
                st = P->be->ops->download(P->be, g->seq->logits, c->logits + at * P->m->n_vocab,
                                          (size_t)(k * P->m->n_vocab) * sizeof(float), P->err);
        } else if (k > 0 && g->seq->logits) /* every row (ids_only: the ids are given) */
            memcpy(g->seq->ids + g->first, c->h_logit_ids + at, (size_t)k * sizeof(int32_t));
        else if (k > 0)
            *g->seq->last_id = c->h_logit_ids[at];
        if (k > 0 && !g->seq->logits && c->h_logit_ids[at] < 0) /* left to the host's draw */
            st = P->be->ops->download(P->be, g->seq->last, c->logits + at * P->m->n_vocab,
                                      (size_t)P->m->n_vocab * sizeof(float), P->err);
        at += k;
    }
    return st;
}

sp_status sp_head_gathered_download(sp_pass *P)
{
    sp_backend *be = P->be;
    int64_t V = P->m->n_vocab, total = sp_head_rows_wanted(P), at = 0, r0;
    if (P->ids_only)
        return download_ids(P, total);
    /* one read back for several segments where each read is a round trip */
    const float *src = P->c->logits;
    bool staged = !be->host_memory && P->n_segs > 1 && total > 0;
    if (staged) {
        float *h = sp_compute_view_staging(P->c, (size_t)(total * V));
        if (!h)
            return sp_err(P->err, SP_ERR_NOMEM, "out of memory reading logits back");
        sp_status st = be->ops->download(be, h, P->c->logits, (size_t)(total * V) * sizeof(float),
                                         P->err);
        if (st != SP_OK)
            return st;
        src = h;
    }
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        int64_t k = sp_head_seg_rows(g, &r0);
        if (k == 0)
            continue;
        size_t bytes = (size_t)(k * V) * sizeof(float);
        if (staged) {
            memcpy(seg_dst(g, V), src + at * V, bytes);
        } else {
            sp_status st = be->ops->download(be, seg_dst(g, V), src + at * V, bytes, P->err);
            if (st != SP_OK)
                return st;
        }
        copy_last(g, V);
        at += k;
    }
    return SP_OK;
}

/* Rows [r0, r0 + n) of segment g in slices of SP_LOGIT_ROWS, each read back into dst. */
static sp_status sliced_rows(sp_pass *P, const sp_seg *g, int64_t r0, int64_t n, float *dst)
{
    sp_backend *be = P->be;
    int64_t V = P->m->n_vocab;
    for (int64_t s = 0; s < n; s += SP_LOGIT_ROWS) {
        int64_t k = n - s < SP_LOGIT_ROWS ? n - s : SP_LOGIT_ROWS;
        final_norm(P, g, r0 + s, k, 0);
        be->ops->matmul(be, &P->w->lm_head, P->c->xn, k, P->c->logits, NULL);
        if (SP_TRACE_ON(P) && g->seq->obs)
            sp_emit_rows(P, g, -1, SP_OP_LOGITS, V, P->c->logits, r0 + s, k);
        sp_status st = be->ops->download(be, dst + s * V, P->c->logits,
                                         (size_t)(k * V) * sizeof(float), P->err);
        if (st != SP_OK)
            return st;
    }
    return SP_OK;
}

sp_status sp_head_sliced(sp_pass *P)
{
    int64_t V = P->m->n_vocab, r0;
    for (int64_t i = 0; i < P->n_segs; i++) {
        const sp_seg *g = &P->segs[i];
        int64_t k = sp_head_seg_rows(g, &r0);
        if (k == 0)
            continue;
        sp_status st = sliced_rows(P, g, r0, k, seg_dst(g, V));
        if (st != SP_OK)
            return st;
        if (g->seq->keep && g->first + g->n == g->seq->n) /* the last slice's last row */
            P->be->ops->copy2d(P->be, g->seq->keep, V, P->c->logits + (k - 1) % SP_LOGIT_ROWS * V,
                               V, 1, V);
        copy_last(g, V);
    }
    return SP_OK;
}
