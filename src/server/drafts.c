/* drafts.c: n-gram and draft-model proposals for the scheduler's batch (see drafts.h).
 *
 * sp_draft_pool_run, one step:
 *   1. catch-up pass: each slot's draft session gets the tokens of its sequence it does
 *      not hold yet (decoding sequences first: one or a few tokens each; then prompt
 *      chunks of prefilling sequences, chunk tokens in all); a session that already holds
 *      the whole sequence re-evaluates its last token, whose logits predict the next;
 *   2. draft position i = 0, 1, ...: every decoding sequence still drafting picks token i
 *      from its session's last logits (sp_draft_sampler_next), or a greedy one takes the
 *      pick its pass read back (sp_batch_item.pick, sp_draft_sampler_take), or one that
 *      keeps its rows (sp_draft_req.keep) takes the draw its pass made with its sampler's
 *      uniform (sp_draft_sampler_drawn; the row kept on the device for the target, its
 *      distribution written with the draw where the device left it to the host); those
 *      that go on evaluate it, all in one pass, until every draft has ended (k reached,
 *      p_min, end of sequence). */
#include "drafts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sp_draft_pool {
    sp_model *model;
    int n_slots;
    int64_t n_vocab, chunk;
    sp_session **sessions; /* [n_slots] */
    bool *off;             /* [n_slots]: the sequence holds a token the draft model lacks */
    bool *active;          /* [n_slots]: still drafting in this step */
    sp_batch_item *items;  /* [n_slots] */
    int32_t *picks;        /* [n_slots]: a greedy slot's pick of its last pass */
};

sp_status sp_draft_pool_new(sp_model *draft, int n_slots, int64_t n_ctx, int64_t chunk,
                            sp_draft_pool **out, sp_error *err)
{
    *out = NULL;
    sp_draft_pool *p = calloc(1, sizeof *p);
    if (!p)
        goto oom;
    p->model = draft;
    p->n_slots = n_slots;
    p->n_vocab = sp_model_n_vocab(draft);
    p->chunk = chunk;
    p->sessions = calloc((size_t)n_slots, sizeof *p->sessions);
    p->off = calloc((size_t)n_slots, sizeof *p->off);
    p->active = calloc((size_t)n_slots, sizeof *p->active);
    p->items = calloc((size_t)n_slots, sizeof *p->items);
    p->picks = calloc((size_t)n_slots, sizeof *p->picks);
    if (!p->sessions || !p->off || !p->active || !p->items || !p->picks)
        goto oom;
    sp_session_params sp = sp_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = chunk;
    for (int i = 0; i < n_slots; i++) {
        sp_status st = sp_session_new(draft, &sp, &p->sessions[i], err);
        if (st != SP_OK) {
            sp_draft_pool_free(p);
            return st;
        }
    }
    *out = p;
    return SP_OK;
oom:
    sp_draft_pool_free(p);
    if (err) {
        err->status = SP_ERR_NOMEM;
        snprintf(err->msg, sizeof err->msg, "out of memory creating the draft sessions");
    }
    return SP_ERR_NOMEM;
}

void sp_draft_pool_free(sp_draft_pool *p)
{
    if (!p)
        return;
    for (int i = 0; p->sessions && i < p->n_slots; i++)
        sp_session_free(p->sessions[i]);
    free(p->sessions);
    free(p->off);
    free(p->active);
    free(p->items);
    free(p->picks);
    free(p);
}

sp_status sp_draft_pool_reset(sp_draft_pool *p, int slot, sp_error *err)
{
    p->off[slot] = false;
    return sp_session_truncate(p->sessions[slot], 0, err);
}

sp_session *sp_draft_pool_session(sp_draft_pool *p, int slot) { return p->sessions[slot]; }

void sp_draft_pool_rollback(sp_draft_pool *p, int slot, int64_t n_valid)
{
    if (sp_session_n_past(p->sessions[slot]) > n_valid)
        sp_session_truncate(p->sessions[slot], n_valid, NULL);
}

/* Slot i's pass evaluating tokens[0 .. n): its greedy pick or (with `draws`, a slot keeping
 * its rows) its draw of draft `next` with the sampler's next uniform, its row kept for the
 * target; only the pick comes back on a backend that picks on the device. */
static sp_batch_item slot_item(sp_draft_pool *p, int i, const sp_draft_req *r, const int32_t *tokens,
                               size_t n, bool draws, int next)
{
    sp_batch_item it = {.session = p->sessions[i], .tokens = tokens, .n_tokens = n};
    if (sp_draft_sampler_greedy(r->sampler)) {
        it.pick = &p->picks[i];
    } else if (r->keep && draws) {
        it.pick = &p->picks[i];
        it.sampling = r->sampling;
        it.u = sp_draft_sampler_uniform(r->sampler);
        it.keep = next + 1;
        it.dist = sp_draft_sampler_dist(r->sampler, next); /* written where drawn on the host */
    }
    return it;
}

/* Adds slot i's catch-up tokens (at most *budget) to the pass; marks it active when it
 * then holds its whole sequence and wants drafts. */
static void catch_up(sp_draft_pool *p, int i, sp_draft_req *r, int64_t *budget, size_t *n_items)
{
    sp_session *s = p->sessions[i];
    int64_t have = sp_session_n_past(s), n = (int64_t)r->n_hist;
    if (n == 0)
        return;
    if (have >= n) { /* re-evaluate the last token for its logits */
        sp_session_truncate(s, n - 1, NULL);
        have = n - 1;
    }
    int64_t take = n - have < *budget ? n - have : *budget;
    if (take <= 0)
        return;
    for (int64_t t = have; t < have + take; t++)
        if (r->hist[t] < 0 || r->hist[t] >= p->n_vocab) {
            p->off[i] = true;
            return;
        }
    *budget -= take;
    p->active[i] = r->decoding && r->k > 0 && have + take == n;
    p->items[(*n_items)++] = slot_item(p, i, r, r->hist + have, (size_t)take, p->active[i], 0);
}

/* Draft position j for every active slot; returns the items of the pass evaluating the
 * tokens of the drafts that go on. */
static size_t pick(sp_draft_pool *p, sp_draft_req *const *reqs, int32_t j)
{
    size_t n_items = 0;
    for (int i = 0; i < p->n_slots; i++) {
        if (!p->active[i])
            continue;
        sp_draft_req *r = reqs[i];
        int32_t tok;
        const double *q;
        bool last;
        bool ok;
        if (sp_draft_sampler_greedy(r->sampler)) { /* the pick its last pass read back */
            tok = p->picks[i];
            ok = sp_draft_sampler_take(r->sampler, tok, j, &q, &last);
        } else if (r->keep) { /* the draw its last pass made; the row stays on the device
                                * (and came back where the device left the draw here) */
            tok = p->picks[i];
            ok = sp_draft_sampler_drawn(r->sampler, tok, j,
                                        sp_session_last_logits(p->sessions[i]) != NULL, &q, &last);
        } else {
            ok = sp_draft_sampler_next(r->sampler, sp_session_last_logits(p->sessions[i]), j, &tok,
                                       &q, &last);
        }
        if (!ok) {
            p->active[i] = false;
            continue;
        }
        r->drafts[r->n_drafts] = tok;
        r->q[r->n_drafts] = q;
        r->n_drafts++;
        if (last || r->n_drafts >= r->k) {
            p->active[i] = false;
            continue;
        }
        p->items[n_items++] = slot_item(p, i, r, &r->drafts[r->n_drafts - 1], 1, true, r->n_drafts);
    }
    return n_items;
}

sp_status sp_draft_pool_run(sp_draft_pool *p, sp_draft_req *const *reqs, sp_error *err)
{
    size_t n_items = 0;
    int64_t budget = p->chunk;
    for (int i = 0; i < p->n_slots; i++) {
        p->active[i] = false;
        if (reqs[i])
            reqs[i]->n_drafts = 0;
    }
    for (int pass = 0; pass < 2; pass++) /* decoding sequences first */
        for (int i = 0; i < p->n_slots; i++)
            if (reqs[i] && !p->off[i] && reqs[i]->decoding == (pass == 0))
                catch_up(p, i, reqs[i], &budget, &n_items);
    for (int32_t j = 0; n_items > 0; j++) {
        sp_status st = sp_batch_eval(p->model, p->items, n_items, err);
        if (st != SP_OK)
            return st;
        n_items = pick(p, reqs, j);
    }
    return SP_OK;
}

int sp_ngram_draft(const int32_t *hist, size_t n_hist, int n_min, int n_max, int32_t *out, int k)
{
    for (int n = n_max; n >= n_min; n--) {
        if ((size_t)n >= n_hist)
            continue;
        const int32_t *key = hist + n_hist - (size_t)n;
        for (size_t j = n_hist - (size_t)n; j-- > 0;) {
            if (memcmp(hist + j, key, (size_t)n * sizeof *key) != 0)
                continue;
            int m = 0;
            while (m < k && j + (size_t)n + (size_t)m < n_hist) {
                out[m] = hist[j + (size_t)n + (size_t)m];
                m++;
            }
            if (m > 0)
                return m;
        }
    }
    return 0;
}
