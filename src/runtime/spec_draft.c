/* spec_draft.c: model, self and n-gram drafters, and what every drafter shares (see
 * spec_draft.h; MTP drafting: spec_draft_mtp.c). */
#include "runtime/spec_draft.h"
#include "util/assert.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sp_drafter {
    sp_drafter_config c;
    sp_sampler *smp;
    sp_rng rng;
    double *q;     /* [k_max, n_vocab] distributions of the sampled drafts */
    int64_t n_vocab;
    bool kept;     /* the last proposal's rows are on the device (c.keep_rows) */
    float *row;    /* [n_vocab] a kept row read back (sp_drafter_q_kept) */
};

sp_status sp_drafter_new(const sp_drafter_config *c, sp_drafter **out, sp_error *err)
{
    *out = NULL;
    sp_drafter *d = calloc(1, sizeof *d);
    if (!d)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    d->c = *c;
    sp_rng_seed(&d->rng, c->seed);
    if (c->kind == SP_DRAFT_MODEL || c->kind == SP_DRAFT_SELF || c->kind == SP_DRAFT_MTP) {
        const sp_model *dm = c->session ? sp_session_model(c->session) : c->draft_model;
        if (!dm) {
            sp_drafter_free(d);
            return sp_err(err, SP_ERR_INVALID_ARG, "a model drafter needs a session or a draft model");
        }
        d->n_vocab = sp_model_n_vocab(dm);
        sp_status st = sp_sampler_new(c->sampling, d->n_vocab, &d->smp, err);
        if (st == SP_OK && c->sampling->temperature > 0 &&
            !(d->q = malloc((size_t)c->k_max * (size_t)d->n_vocab * sizeof *d->q)))
            st = sp_err(err, SP_ERR_NOMEM, "out of memory for draft distributions");
        if (st != SP_OK) {
            sp_drafter_free(d);
            return st;
        }
    }
    *out = d;
    return SP_OK;
}

void sp_drafter_free(sp_drafter *d)
{
    if (!d)
        return;
    sp_sampler_free(d->smp);
    free(d->q);
    free(d->row);
    free(d);
}

/* Largest softmax probability of the logits (temperature 1). */
static double top_prob(const float *logits, int64_t n)
{
    float mx = logits[0];
    for (int64_t i = 1; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    return 1.0 / sum;
}

/* Brings the draft session to seq[0 .. n_seq) (positions base ..): its logits then
 * predict the next token, or with pick (greedy picks on the device) *pick is that token
 * and the logits may stay unread; with keep, *pick is the first draft's draw (the drafting
 * stream's next uniform) and its row kept in slot 0. Returns false when a token of seq is
 * outside the draft's vocabulary. */
static bool catch_up(sp_drafter *d, const int32_t *seq, int64_t n_seq, int64_t base, int32_t *pick,
                     bool keep, sp_status *st, sp_error *err)
{
    sp_session *s = d->c.session;
    int64_t have = sp_session_n_past(s) - base;
    if (have < 0) {
        *st = sp_err(err, SP_ERR_INVALID_ARG, "the draft session holds %lld positions, fewer than "
                     "the target's prefix of %lld", (long long)sp_session_n_past(s), (long long)base);
        return false;
    }
    if (have >= n_seq) { /* re-evaluate the last token to get its logits */
        sp_session_truncate(s, base + n_seq - 1, NULL);
        have = n_seq - 1;
    }
    for (int64_t i = have; i < n_seq; i++)
        if (seq[i] < 0 || seq[i] >= d->n_vocab)
            return false;
    const size_t n = (size_t)(n_seq - have);
    if (keep) /* the first draft drawn and its row kept on the device */
        *st = sp_session_eval_sample_keep(s, seq + have, n, d->c.sampling, sp_rng_uniform(&d->rng),
                                          0, sp_drafter_q_slot(d, 0), pick, err);
    else
        *st = pick ? sp_session_eval_greedy(s, seq + have, n, pick, err)
                   : sp_session_eval(s, seq + have, n, NULL, err);
    return *st == SP_OK;
}

bool sp_drafter_greedy(const sp_drafter *d)
{
    return d->c.sampling->temperature == 0.0f && !(d->c.p_min > 0);
}

sp_pick sp_drafter_take(const sp_drafter *d, int32_t tok)
{
    if (tok < 0 || tok >= d->c.target_vocab) /* a caller's bad token ends the draft too */
        return SP_PICK_END;
    if (d->c.stop_at_eos && sp_model_is_eos(d->c.eos_model, tok))
        return SP_PICK_LAST;
    return SP_PICK_MORE;
}

/* The draft's greedy picks on their way into the proposal (sp_drafter_take's rule). */
typedef struct draft_picks {
    const sp_drafter *d;
    int32_t *out, *n_out;
    const double **q;
} draft_picks;

static bool take_pick(void *p, int32_t tok)
{
    draft_picks *c = p;
    sp_pick r = sp_drafter_take(c->d, tok);
    if (r == SP_PICK_END)
        return false;
    c->q[*c->n_out] = NULL;
    c->out[(*c->n_out)++] = tok;
    return r != SP_PICK_LAST;
}

/* propose_model with the draws made on the device and each draft's row kept there (slot i)
 * for the target's verification: the same tokens from the same uniforms as the host's
 * picks (sp_drafter_pick: sp_sample_row's draw). A draw the device left to the host (its
 * row came back) has its distribution in q[i]; the others NULL. */
static sp_status propose_kept(sp_drafter *d, const int32_t *seq, int64_t n_seq, int64_t base,
                              int32_t k, int32_t *out, const double **q, int32_t *n_out,
                              sp_error *err)
{
    sp_session *s = d->c.session;
    sp_status st = sp_session_keep_rows(s, d->c.k_max, err);
    int32_t tok = -1;
    if (st != SP_OK || !catch_up(d, seq, n_seq, base, &tok, true, &st, err))
        return st;
    for (int32_t i = 0; i < k; i++) {
        sp_pick r = sp_drafter_take(d, tok);
        if (r == SP_PICK_END)
            break;
        /* a draw the device left to the host wrote its distribution with it */
        q[*n_out] = sp_session_last_logits(s) ? sp_drafter_q_slot(d, i) : NULL;
        out[(*n_out)++] = tok;
        if (r == SP_PICK_LAST || i + 1 == k)
            break;
        if ((st = sp_session_eval_sample_keep(s, &tok, 1, d->c.sampling, sp_rng_uniform(&d->rng),
                                              i + 1, sp_drafter_q_slot(d, i + 1), &tok, err)) !=
            SP_OK)
            return st;
    }
    return SP_OK;
}

static sp_status propose_model(sp_drafter *d, const int32_t *seq, int64_t n_seq, int64_t base,
                               int32_t k, int32_t *out, const double **q, int64_t *n_q,
                               int32_t *n_out, sp_error *err)
{
    sp_session *s = d->c.session;
    sp_status st = SP_OK;
    *n_q = d->n_vocab;
    if (k > sp_session_n_ctx(s) - base - n_seq) /* the draft evaluates up to base + n_seq + k - 1 positions */
        k = (int32_t)(sp_session_n_ctx(s) - base - n_seq);
    /* greedy without a probability floor reads only the picks (on the device where the
     * backend can), not the logits */
    const bool picks = sp_drafter_greedy(d);
    int32_t next = -1;
    if (k > 0 && d->kept)
        return propose_kept(d, seq, n_seq, base, k, out, q, n_out, err);
    if (k <= 0 || !catch_up(d, seq, n_seq, base, picks ? &next : NULL, false, &st, err))
        return st;
    if (picks) { /* the picks only: the draft's steps fed on the device where it can */
        draft_picks c = {d, out, n_out, q};
        size_t n = 0;
        if (!take_pick(&c, next) || k == 1)
            return SP_OK;
        return sp_session_decode_greedy(s, next, (size_t)(k - 1), take_pick, &c, &n, err);
    }
    for (int32_t i = 0; i < k; i++) {
        int32_t tok = -1;
        sp_pick r = sp_drafter_pick(d, sp_session_last_logits(s), i, &tok, &q[i]);
        if (r == SP_PICK_END)
            break;
        out[(*n_out)++] = tok;
        if (r == SP_PICK_LAST)
            break;
        if (i + 1 < k && (st = sp_session_eval(s, &tok, 1, NULL, err)) != SP_OK)
            return st;
    }
    return SP_OK;
}

sp_pick sp_drafter_pick(sp_drafter *d, const float *logits, int32_t i, int32_t *tok,
                        const double **q)
{
    SP_ASSERT(d->smp && i >= 0 && i < d->c.k_max);
    *q = NULL;
    if (d->c.p_min > 0 && top_prob(logits, d->n_vocab) < d->c.p_min)
        return SP_PICK_END;
    if (d->c.sampling->temperature == 0.0f) {
        *tok = sp_argmax(logits, d->n_vocab);
    } else {
        double *qi = sp_drafter_q_slot(d, i);
        *tok = sp_sampler_dist_draw(d->smp, logits, qi, sp_rng_uniform(&d->rng));
        *q = qi;
    }
    return sp_drafter_take(d, *tok);
}

int64_t sp_drafter_n_vocab(const sp_drafter *d) { return d->n_vocab; }

/* Prompt lookup: the most recent earlier occurrence of the sequence's last n tokens (n
 * from ngram_max down to ngram_min) and the tokens that followed it. */
static void propose_ngram(sp_drafter *d, const int32_t *seq, int64_t n_seq, int32_t k,
                          int32_t *out, const double **q, int32_t *n_out)
{
    for (int32_t n = d->c.ngram_max; n >= d->c.ngram_min; n--) {
        if (n_seq < n + 1)
            continue;
        const int32_t *suffix = seq + n_seq - n;
        for (int64_t j = n_seq - n - 1; j >= 0; j--) {
            if (memcmp(seq + j, suffix, (size_t)n * sizeof *seq) != 0)
                continue;
            for (int64_t t = j + n; t < n_seq && *n_out < k; t++) {
                if (seq[t] >= d->c.target_vocab)
                    break;
                q[*n_out] = NULL;
                out[(*n_out)++] = seq[t];
                if (d->c.stop_at_eos && sp_model_is_eos(d->c.eos_model, seq[t]))
                    break;
            }
            return;
        }
    }
}

sp_status sp_drafter_propose(sp_drafter *d, const int32_t *seq, int64_t n_seq, int64_t base,
                             int32_t k, int32_t *out, const double **q, int64_t *n_q,
                             int32_t *n_out, sp_error *err)
{
    *n_out = 0;
    *n_q = 0;
    d->kept = d->c.keep_rows && d->c.session && d->c.sampling->temperature > 0 && !(d->c.p_min > 0) &&
              (d->c.kind == SP_DRAFT_MODEL || d->c.kind == SP_DRAFT_SELF);
    if (k > d->c.k_max)
        k = d->c.k_max;
    if (k <= 0)
        return SP_OK;
    if (d->c.kind == SP_DRAFT_NGRAM) {
        propose_ngram(d, seq, n_seq, k, out, q, n_out);
        return SP_OK;
    }
    if (d->c.kind == SP_DRAFT_MTP)
        return sp_drafter_propose_mtp(d, seq[n_seq - 1], k, out, q, n_q, n_out, err);
    return propose_model(d, seq, n_seq, base, k, out, q, n_q, n_out, err);
}

const sp_drafter_config *sp_drafter_config_of(const sp_drafter *d) { return &d->c; }

bool sp_drafter_kept(const sp_drafter *d) { return d->kept; }

double sp_drafter_uniform(sp_drafter *d) { return sp_rng_uniform(&d->rng); }

sp_status sp_drafter_q_kept(sp_drafter *d, sp_session *s, int32_t i, const double **q,
                            sp_error *err)
{
    *q = NULL;
    if (!s || sp_model_n_vocab(sp_session_model(s)) != d->n_vocab)
        return sp_err(err, SP_ERR_INVALID_ARG, "draft: the session's vocabulary is not the draft "
                      "model's");
    double *qi = sp_drafter_q_slot(d, i);
    if (!qi)
        return sp_err(err, SP_ERR_INVALID_ARG, "draft: no distribution for draft %d", i);
    if (!d->row && !(d->row = malloc((size_t)d->n_vocab * sizeof *d->row)))
        return sp_err(err, SP_ERR_NOMEM, "out of memory reading a draft row back");
    sp_status st = sp_session_kept_download(s, i, d->row, err);
    if (st != SP_OK)
        return st;
    sp_sampler_dist(d->smp, d->row, qi);
    *q = qi;
    return SP_OK;
}

double *sp_drafter_q_slot(sp_drafter *d, int32_t i)
{
    return d->q && i >= 0 && i < d->c.k_max ? d->q + (size_t)i * (size_t)d->n_vocab : NULL;
}

void sp_drafter_rollback(sp_drafter *d, int64_t n_valid)
{
    if (d->c.kind == SP_DRAFT_MTP) {
        sp_drafter_rollback_mtp(d, n_valid);
        return;
    }
    if (d->c.session && sp_session_n_past(d->c.session) > n_valid)
        sp_session_truncate(d->c.session, n_valid, NULL);
}
