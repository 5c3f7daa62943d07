/* scheduler.c: the continuous-batching loop (see scheduler.h).
 *
 * One step:
 *   1. under the lock: finish cancelled sequences, admit waiting ones into free slots;
 *   2. plan one sp_batch_eval over every running sequence: a prompt chunk while
 *      prefilling (prefill_chunk tokens per step shared by the prefilling sequences, in
 *      slot order), else its pending token, plus up to k drafts (verify rows): n-grams,
 *      or a draft model's, drafted for all sequences together (drafts.h) before the
 *      target's pass;
 *   3. after the pass: sample each sequence from its own logits rows with its own
 *      sampler; with drafts, keep the longest accepted prefix (greedy: the argmax equals
 *      the draft; sampled: sp_draft_verifier's lossless rule, on the device where the
 *      backend verifies and no logprobs are asked: sp_batch_verify) plus one token, and
 *      roll the KV caches back to it (sp_session_truncate; the draft session likewise);
 *   4. detokenize, cut stop strings, publish text and log-probabilities under the lock,
 *      wake the HTTP threads. */
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sp_sched {
    sp_sched_config cfg;
    int64_t n_vocab;
    int32_t eos[16];
    size_t n_eos;
    sp_session **sessions; /* [n_parallel] */
    sp_seq **slots;        /* [n_parallel]: the running sequence, or NULL */
    float **verify_logits; /* [n_parallel][(k + 1) * n_vocab] when speculating */
    int32_t *draft_buf;    /* [n_parallel][SP_SPEC_MAX_K + 1]: pending token + drafts */
    sp_draft_pool *drafts; /* with a draft model */
    int64_t draft_vocab;   /* the draft model's: the length of its distributions */
    sp_draft_req *reqs;    /* [n_parallel] this step's draft requests */
    sp_draft_req **req_ptrs; /* [n_parallel] the slots that draft with the model, else NULL */
    sp_batch_item *items;
    sp_seq **item_seq;
    int *item_drafts;
    bool *item_wake;       /* [n_parallel]: the item's sequence published and still runs */
    int32_t *item_pick;    /* [n_parallel]: a greedy item's pick (read back instead of its
                            * logits where the backend picks on the device) */
    sp_batch_verify *item_verify; /* [n_parallel]: a sampled item's verification on the device */
    sp_seq *queue_head, *queue_tail;
    int n_running, n_waiting;
    bool accepting, stop;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* scheduler: something to do */
    pthread_cond_t progress; /* drain: some sequence finished */
};

double sp_server_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

sp_seq *sp_seq_new(int32_t *prompt, size_t n_prompt)
{
    sp_seq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->prompt = prompt;
    q->n_prompt = n_prompt;
    q->refs = 1;
    q->slot = -1;
    pthread_cond_init(&q->changed, NULL);
    q->t_arrival = sp_server_now();
    return q;
}

static void seq_free(sp_seq *q)
{
    free(q->prompt);
    for (size_t i = 0; i < q->n_stop; i++)
        free(q->stop[i]);
    free(q->text);
    free(q->toks);
    sp_sampler_free(q->sampler);
    sp_draft_verifier_free(q->verifier);
    sp_draft_sampler_free(q->drafter);
    sp_detokenizer_free(q->detok);
    free(q->gen);
    free(q->hist);
    pthread_cond_destroy(&q->changed);
    free(q);
}

static void release_locked(sp_seq *q)
{
    if (--q->refs == 0)
        seq_free(q);
}

void sp_seq_release(sp_sched *s, sp_seq *q)
{
    if (!q)
        return;
    if (!s) {
        seq_free(q);
        return;
    }
    pthread_mutex_lock(&s->mu);
    release_locked(q);
    pthread_mutex_unlock(&s->mu);
}

void sp_sched_lock(sp_sched *s) { pthread_mutex_lock(&s->mu); }
void sp_sched_unlock(sp_sched *s) { pthread_mutex_unlock(&s->mu); }

int sp_sched_submit(sp_sched *s, sp_seq *q)
{
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (!s->accepting)
        rc = 503;
    else if (s->n_running + s->n_waiting >= s->cfg.n_parallel + s->cfg.n_queue)
        rc = 429;
    if (rc == 0) {
        q->refs++;
        q->next = NULL;
        if (s->queue_tail)
            s->queue_tail->next = q;
        else
            s->queue_head = q;
        s->queue_tail = q;
        s->n_waiting++;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void sp_sched_cancel(sp_sched *s, sp_seq *q)
{
    pthread_mutex_lock(&s->mu);
    if (!q->done) {
        q->cancel = true;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
}

void sp_sched_wait_locked(sp_sched *s, sp_seq *q, size_t text_seen, size_t toks_seen,
                          int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    ts.tv_sec += timeout_ms / 1000 + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    while (!q->done && q->text_len <= text_seen && q->n_toks <= toks_seen)
        if (pthread_cond_timedwait(&q->changed, &s->mu, &ts) != 0)
            break;
}

void sp_sched_counts(sp_sched *s, int64_t *running, int64_t *waiting)
{
    pthread_mutex_lock(&s->mu);
    *running = s->n_running;
    *waiting = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
}

/* ---- the scheduler thread ------------------------------------------------------------ */

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *n = realloc(*p, c * elem);
    if (!n)
        return false;
    *p = n;
    *cap = c;
    return true;
}

/* With the lock held: the sequence leaves the batch. */
static void finish_locked(sp_sched *s, sp_seq *q, const char *reason)
{
    if (q->done)
        return;
    q->done = true;
    q->finish_reason = reason;
    if (q->slot >= 0) {
        s->slots[q->slot] = NULL;
        s->n_running--;
        q->slot = -1;
    }
    sp_metrics_tokens(s->cfg.metrics, (int64_t)q->n_prefilled, q->n_generated);
    if (q->n_generated > 0)
        sp_metrics_e2e(s->cfg.metrics, sp_server_now() - q->t_arrival);
    pthread_cond_broadcast(&q->changed);
    pthread_cond_broadcast(&s->progress);
    release_locked(q); /* the scheduler's reference */
}

static void fail_seq(sp_sched *s, sp_seq *q, const char *msg)
{
    pthread_mutex_lock(&s->mu);
    snprintf(q->error, sizeof q->error, "%s", msg);
    finish_locked(s, q, "error");
    pthread_mutex_unlock(&s->mu);
}

static bool is_eos(const sp_sched *s, int32_t t)
{
    for (size_t i = 0; i < s->n_eos; i++)
        if (s->eos[i] == t)
            return true;
    return false;
}

/* Longest k < max_stop_len such that gen ends with the first k bytes of a stop string:
 * text that must wait, as it may be the start of a stop. */
static size_t stop_holdback(const sp_seq *q)
{
    size_t best = 0;
    for (size_t i = 0; i < q->n_stop; i++) {
        size_t l = strlen(q->stop[i]);
        for (size_t k = l - 1; k > best; k--)
            if (k <= q->gen_len && memcmp(q->gen + q->gen_len - k, q->stop[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

/* Searches stop strings in the text not yet published (and the bytes before it a stop
 * could start in). Returns true and cuts gen at the earliest match. */
static bool cut_stop(sp_seq *q)
{
    size_t max_l = 0;
    for (size_t i = 0; i < q->n_stop; i++)
        max_l = strlen(q->stop[i]) > max_l ? strlen(q->stop[i]) : max_l;
    size_t from = q->emitted > max_l ? q->emitted - max_l : 0;
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < q->n_stop; i++) {
        size_t l = strlen(q->stop[i]);
        for (size_t p = from; p + l <= q->gen_len && p < best; p++)
            if (memcmp(q->gen + p, q->stop[i], l) == 0) {
                best = p;
                break;
            }
    }
    if (best == SIZE_MAX)
        return false;
    q->gen_len = best;
    if (q->emitted > best)
        q->emitted = best; /* cannot happen: a stop prefix was held back */
    return true;
}

/* Under the lock: publishes gen[emitted..upto]. */
static bool publish_text_locked(sp_seq *q, size_t upto)
{
    if (upto <= q->emitted)
        return true;
    size_t n = upto - q->emitted;
    if (!grow((void **)&q->text, &q->text_cap, q->text_len + n + 1, 1))
        return false;
    memcpy(q->text + q->text_len, q->gen + q->emitted, n);
    q->text_len += n;
    q->text[q->text_len] = 0;
    q->emitted = upto;
    return true;
}

/* One generated token: count it, detokenize, apply EOS / stop / length, publish (the HTTP
 * thread is woken at the end of the step). Returns true when the sequence finished. */
static bool accept_token(sp_sched *s, sp_seq *q, int32_t t, const float *logits)
{
    double now = sp_server_now();
    if (q->n_sampled == 0)
        sp_metrics_ttft(s->cfg.metrics, now - q->t_arrival);
    else
        sp_metrics_itl(s->cfg.metrics, now - q->t_last);
    q->t_last = now;
    q->n_sampled++;
    const char *reason = NULL;
    sp_seq_token rec = {.id = t};
    bool eos = is_eos(s, t) && !q->ignore_eos;
    if (eos) {
        reason = "stop";
    } else {
        if (q->logprobs)
            sp_logprobs(logits, s->n_vocab, t, &rec.logprob, q->n_top, rec.top_ids, rec.top_lps);
        rec.n_top = q->n_top;
        const char *piece = NULL;
        size_t len = 0;
        sp_error err = {0};
        pthread_mutex_lock(s->cfg.text_mu);
        sp_status st = sp_detokenizer_push(q->detok, t, &piece, &len, &err);
        if (st == SP_OK && !grow((void **)&q->gen, &q->gen_cap, q->gen_len + len + 1, 1))
            st = SP_ERR_NOMEM;
        if (st == SP_OK) {
            memcpy(q->gen + q->gen_len, piece, len);
            q->gen_len += len;
        }
        pthread_mutex_unlock(s->cfg.text_mu);
        if (st != SP_OK) {
            fail_seq(s, q, st == SP_ERR_NOMEM ? "out of memory" : err.msg);
            return true;
        }
        if (q->n_stop && cut_stop(q))
            reason = "stop";
        if (!grow((void **)&q->hist, &q->hist_cap, q->n_hist + 1, sizeof *q->hist)) {
            fail_seq(s, q, "out of memory");
            return true;
        }
        q->hist[q->n_hist++] = t;
    }
    int64_t n_past = (int64_t)q->n_prompt + q->n_sampled - 1; /* t not yet evaluated */
    if (!reason && (q->n_sampled >= q->max_tokens || n_past + 1 > s->cfg.n_ctx))
        reason = "length";
    if (reason && (eos || strcmp(reason, "length") == 0)) {
        /* the last character may still be held back by the detokenizer */
        const char *rest = NULL;
        size_t rl = 0;
        pthread_mutex_lock(s->cfg.text_mu);
        if (sp_detokenizer_flush(q->detok, &rest, &rl, NULL) == SP_OK && rl &&
            grow((void **)&q->gen, &q->gen_cap, q->gen_len + rl + 1, 1)) {
            memcpy(q->gen + q->gen_len, rest, rl);
            q->gen_len += rl;
        }
        pthread_mutex_unlock(s->cfg.text_mu);
        if (q->n_stop && cut_stop(q))
            reason = "stop";
    }
    q->pending = t;
    /* after finish_locked the HTTP thread may free q: nothing below touches it then */
    pthread_mutex_lock(&s->mu);
    q->n_generated = q->n_sampled;
    bool ok = true;
    if (!eos && q->logprobs) {
        ok = grow((void **)&q->toks, &q->toks_cap, q->n_toks + 1, sizeof *q->toks);
        if (ok)
            q->toks[q->n_toks++] = rec;
    }
    size_t upto = reason ? q->gen_len : q->gen_len - stop_holdback(q);
    ok = ok && publish_text_locked(q, upto);
    if (!ok) {
        snprintf(q->error, sizeof q->error, "out of memory");
        reason = "error";
    }
    if (reason)
        finish_locked(s, q, reason);
    pthread_mutex_unlock(&s->mu);
    return reason != NULL;
}

static bool start_seq(sp_sched *s, sp_seq *q)
{
    sp_error err = {0};
    sp_session *sess = s->sessions[q->slot];
    bool drafting = s->cfg.ngram || s->drafts;
    if (sp_session_truncate(sess, 0, &err) != SP_OK ||
        sp_sampler_new(&q->sampling, s->n_vocab, &q->sampler, &err) != SP_OK ||
        (drafting && q->sampling.temperature > 0 &&
         sp_draft_verifier_new(&q->sampling, s->n_vocab, &q->verifier, &err) != SP_OK) ||
        (s->drafts && (sp_draft_pool_reset(s->drafts, q->slot, &err) != SP_OK ||
                       sp_draft_sampler_new(s->cfg.model, s->cfg.draft_model, &q->sampling,
                                            s->cfg.draft_k, s->cfg.draft_p_min, !q->ignore_eos,
                                            &q->drafter, &err) != SP_OK))) {
        fail_seq(s, q, err.msg);
        return false;
    }
    pthread_mutex_lock(s->cfg.text_mu);
    sp_status st = sp_detokenizer_new(s->cfg.tok, !q->keep_special, &q->detok, &err);
    pthread_mutex_unlock(s->cfg.text_mu);
    if (st != SP_OK) {
        fail_seq(s, q, err.msg);
        return false;
    }
    if (!grow((void **)&q->hist, &q->hist_cap, q->n_prompt + 1, sizeof *q->hist)) {
        fail_seq(s, q, "out of memory");
        return false;
    }
    memcpy(q->hist, q->prompt, q->n_prompt * sizeof *q->prompt);
    q->n_hist = q->n_prompt;
    return true;
}

/* How many drafts a decoding sequence may have this step: k, within the context (the
 * verify pass holds the pending token and the drafts) and its token budget. */
static int draft_room(const sp_sched *s, const sp_seq *q, int64_t n_past)
{
    int64_t k = s->cfg.draft_k;
    if (n_past + 1 + k > s->cfg.n_ctx)
        k = s->cfg.n_ctx - n_past - 1;
    if (q->max_tokens - q->n_sampled - 1 < k)
        k = q->max_tokens - q->n_sampled - 1;
    return k > 0 ? (int)k : 0;
}

/* Whether slot i's sampled drafts are drawn in the draft's passes with their rows kept for
 * the target's verification on the device: no logprobs asked (they need the rows on the
 * host), and the draft's session can hand its rows to the target's. */
static bool keeps_rows(sp_sched *s, const sp_seq *q, int i)
{
    if (!s->drafts || !q->drafter || !(q->sampling.temperature > 0.0f) || q->logprobs)
        return false;
    sp_session *d = sp_draft_pool_session(s->drafts, i);
    return sp_session_can_verify(s->sessions[i], d) &&
           sp_session_keep_rows(d, s->cfg.draft_k, NULL) == SP_OK;
}

/* Step, part 1: each running sequence's item (a prompt chunk, or its pending token) and
 * its draft request. Returns the number of items. */
static size_t plan(sp_sched *s)
{
    size_t n_items = 0;
    int64_t budget = s->cfg.prefill_chunk;
    bool drafting = s->cfg.ngram || s->drafts;
    for (int i = 0; i < s->cfg.n_parallel; i++) {
        s->req_ptrs[i] = NULL;
        sp_seq *q = s->slots[i];
        if (!q || (!q->sampler && !start_seq(s, q)))
            continue;
        sp_draft_req *r = &s->reqs[i];
        *r = (sp_draft_req){.hist = q->hist, .n_hist = q->n_hist, .sampler = q->drafter,
                            .sampling = &q->sampling, .keep = keeps_rows(s, q, i),
                            .drafts = s->draft_buf + (size_t)i * (SP_SPEC_MAX_K + 1) + 1};
        if (q->drafter)
            s->req_ptrs[i] = r; /* a prefilling sequence's draft session follows its prompt */
        sp_batch_item *it = &s->items[n_items];
        *it = (sp_batch_item){.session = s->sessions[i], .tokens = &q->pending, .n_tokens = 1};
        if (q->n_prefilled < q->n_prompt) {
            /* chunked prefill: prefill_chunk prompt tokens per step in all, in slot order, so
             * that a long prompt does not stall the decoding sequences for long */
            if (budget <= 0)
                continue;
            size_t n = q->n_prompt - q->n_prefilled;
            if ((int64_t)n > budget)
                n = (size_t)budget;
            budget -= (int64_t)n;
            it->tokens = q->prompt + q->n_prefilled;
            it->n_tokens = n;
        } else {
            r->decoding = true;
            r->k = drafting ? draft_room(s, q, sp_session_n_past(s->sessions[i])) : 0;
            if (s->cfg.ngram && r->k > 0)
                r->n_drafts = sp_ngram_draft(q->hist, q->n_hist, s->cfg.ngram_min,
                                             s->cfg.ngram_max, r->drafts, r->k);
        }
        s->item_seq[n_items++] = q;
    }
    return n_items;
}

/* Whether any of r's drafts has its distribution on the host. */
static bool drafts_on_host(const sp_draft_req *r)
{
    for (int i = 0; i < r->n_drafts; i++)
        if (r->q[i])
            return true;
    return false;
}

/* Step, part 2: the draft model's passes, then each decoding sequence with drafts gets
 * its verify rows: [pending, d1 .. dm]. Returns false when the draft model failed. */
static bool add_drafts(sp_sched *s, size_t n_items)
{
    sp_error err = {0};
    if (s->drafts && sp_draft_pool_run(s->drafts, s->req_ptrs, &err) != SP_OK) {
        for (size_t j = 0; j < n_items; j++)
            fail_seq(s, s->item_seq[j], err.msg);
        return false;
    }
    for (size_t j = 0; j < n_items; j++) {
        sp_seq *q = s->item_seq[j];
        sp_draft_req *r = &s->reqs[q->slot];
        s->item_drafts[j] = r->decoding ? r->n_drafts : 0;
        if (s->item_drafts[j] == 0) { /* without logprobs only the pick (or draw) comes back */
            sp_batch_item *it = &s->items[j];
            const bool greedy = q->sampling.temperature == 0.0f;
            /* a draw takes its sequence's next uniform only where its token is taken: the
             * prompt's last chunk or a decode step, as sp_sampler_next would */
            const bool ends = q->n_prefilled + (int64_t)it->n_tokens >= q->n_prompt;
            it->pick = !q->logprobs && (greedy || ends) ? &s->item_pick[j] : NULL;
            it->sampling = it->pick && !greedy ? &q->sampling : NULL;
            it->u = it->sampling ? sp_sampler_uniform(q->sampler) : 0.0;
            continue;
        }
        r->drafts[-1] = q->pending;
        s->items[j].tokens = r->drafts - 1;
        s->items[j].n_tokens = (size_t)r->n_drafts + 1;
        s->items[j].logits = s->verify_logits[q->slot];
        /* sampled without logprobs: verified on the device where it can be (two ints back),
         * not where a draft's draw was left to the host (its distribution is here, and the
         * device would leave the verification to the host too) */
        sp_session *draft = r->keep ? sp_draft_pool_session(s->drafts, q->slot) : NULL;
        if (q->verifier && !q->logprobs && (r->keep || !s->drafts) && !drafts_on_host(r) &&
            sp_session_can_verify(s->items[j].session, draft)) {
            s->item_verify[j] = (sp_batch_verify){q->verifier, q->sampler, draft, -1, -1};
            s->items[j].verify = &s->item_verify[j];
        }
    }
    return true;
}

/* verify's end: the counts, and both caches cut back to the kept prefix plus one token
 * (q, in `slot`, is not read once it finished: it may be freed). */
static bool after_verify(sp_sched *s, sp_seq *q, int slot, const sp_batch_item *it, int nd,
                         int64_t base, int accepted, bool finished)
{
    sp_metrics_spec(s->cfg.metrics, nd, accepted);
    if (finished)
        return false;
    sp_error err = {0};
    if (sp_session_truncate(it->session, base + 1 + accepted, &err) != SP_OK) {
        fail_seq(s, q, err.msg);
        return false;
    }
    if (s->drafts)
        sp_draft_pool_rollback(s->drafts, slot, base + 1 + accepted);
    return true;
}

/* Step, part 3, for a sequence with drafts: keeps the longest accepted prefix plus one
 * token and rolls both KV caches back to it. Returns false when the sequence finished. */
static bool verify(sp_sched *s, sp_seq *q, const sp_batch_item *it, int nd)
{
    const sp_draft_req *r = &s->reqs[q->slot];
    int slot = q->slot; /* q may be freed once it finishes */
    int64_t n_q = s->drafts ? s->draft_vocab : 0;
    /* row i predicts the token after it->tokens[i] */
    int64_t base = sp_session_n_past(it->session) - (int64_t)it->n_tokens;
    int accepted = 0;
    bool finished = false;
    if (it->verify && it->verify->accepted >= 0) { /* verified on the device: no rows here */
        for (int i = 0; i <= it->verify->accepted && !finished; i++) {
            int32_t t = i < it->verify->accepted ? it->tokens[i + 1] : it->verify->next;
            finished = accept_token(s, q, t, NULL);
            accepted += !finished && i < it->verify->accepted;
        }
        return after_verify(s, q, slot, it, nd, base, accepted, finished);
    }
    for (int i = 0; i <= nd && !finished; i++) {
        const float *row = it->logits + (size_t)i * (size_t)s->n_vocab;
        int32_t d = i < nd ? it->tokens[i + 1] : -1;
        const double *qi = i < nd ? r->q[i] : NULL;
        sp_error err = {0};
        if (d >= 0 && q->verifier && r->keep && !qi && /* the draft's row kept on the device */
            sp_draft_sampler_kept_q(q->drafter, sp_draft_pool_session(s->drafts, slot), i, &qi,
                                    &err) != SP_OK) {
            fail_seq(s, q, err.msg);
            return false;
        }
        int32_t t = d >= 0 && q->verifier ? sp_draft_verifier_check(q->verifier, row, d, qi, n_q)
                                          : sp_sampler_next(q->sampler, row);
        bool hit = d >= 0 && t == d;
        if ((finished = accept_token(s, q, t, row)))
            break;
        if (!hit)
            break;
        accepted++;
    }
    return after_verify(s, q, slot, it, nd, base, accepted, finished);
}

/* Step, part 4: one wake-up for each sequence that published and still runs (the finished
 * ones were woken by finish_locked and may be gone). */
static void wake(sp_sched *s, size_t n_items)
{
    pthread_mutex_lock(&s->mu);
    for (size_t j = 0; j < n_items; j++)
        if (s->item_wake[j])
            pthread_cond_broadcast(&s->item_seq[j]->changed);
    pthread_mutex_unlock(&s->mu);
}

static void step(sp_sched *s)
{
    size_t n_items = plan(s);
    if (n_items == 0 || !add_drafts(s, n_items))
        return;
    sp_error err = {0};
    if (sp_batch_eval(s->cfg.model, s->items, n_items, &err) != SP_OK) {
        for (size_t j = 0; j < n_items; j++)
            fail_seq(s, s->item_seq[j], err.msg);
        return;
    }
    for (size_t j = 0; j < n_items; j++) {
        sp_seq *q = s->item_seq[j];
        sp_batch_item *it = &s->items[j];
        s->item_wake[j] = false;
        if (q->n_prefilled < q->n_prompt) {
            q->n_prefilled += it->n_tokens;
            if (q->n_prefilled < q->n_prompt)
                continue;
        } else if (s->item_drafts[j] > 0) {
            s->item_wake[j] = verify(s, q, it, s->item_drafts[j]);
            continue;
        }
        const float *lg = it->pick ? NULL : sp_session_last_logits(it->session);
        const int32_t tok = it->pick ? *it->pick : sp_sampler_next(q->sampler, lg);
        s->item_wake[j] = !accept_token(s, q, tok, lg); /* lg: read for logprobs only */
    }
    wake(s, n_items);
}

static void *sched_main(void *arg)
{
    sp_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* cancelled sequences leave now */
        for (int i = 0; i < s->cfg.n_parallel; i++)
            if (s->slots[i] && s->slots[i]->cancel)
                finish_locked(s, s->slots[i], "cancelled");
        for (sp_seq **pp = &s->queue_head; *pp;) {
            sp_seq *q = *pp;
            if (!q->cancel) {
                pp = &q->next;
                continue;
            }
            *pp = q->next;
            s->n_waiting--;
            finish_locked(s, q, "cancelled");
        }
        s->queue_tail = NULL;
        for (sp_seq *q = s->queue_head; q; q = q->next)
            s->queue_tail = q;
        /* admit */
        for (int i = 0; i < s->cfg.n_parallel && s->queue_head; i++) {
            if (s->slots[i])
                continue;
            sp_seq *q = s->queue_head;
            s->queue_head = q->next;
            if (!s->queue_head)
                s->queue_tail = NULL;
            s->n_waiting--;
            q->slot = i;
            s->slots[i] = q;
            s->n_running++;
        }
        sp_metrics_gauges(s->cfg.metrics, s->n_running, s->n_waiting);
        if (s->n_running == 0) {
            if (s->stop)
                break;
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        step(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

sp_status sp_sched_new(const sp_sched_config *cfg, sp_sched **out, sp_error *err)
{
    sp_sched *s = calloc(1, sizeof *s);
    if (!s)
        goto oom;
    s->cfg = *cfg;
    if (s->cfg.draft_k > SP_SPEC_MAX_K)
        s->cfg.draft_k = SP_SPEC_MAX_K;
    s->n_vocab = sp_model_n_vocab(cfg->model);
    size_t n_ids = 0;
    const int32_t *ids = sp_model_eos_ids(cfg->model, &n_ids);
    for (size_t i = 0; i < n_ids && s->n_eos < 15; i++)
        s->eos[s->n_eos++] = ids[i];
    int32_t te = sp_tokenizer_eos_id(cfg->tok);
    if (te >= 0 && !is_eos(s, te))
        s->eos[s->n_eos++] = te;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->progress, NULL);
    s->accepting = true;
    size_t np = (size_t)cfg->n_parallel;
    s->sessions = calloc(np, sizeof *s->sessions);
    s->slots = calloc(np, sizeof *s->slots);
    s->verify_logits = calloc(np, sizeof *s->verify_logits);
    s->items = calloc(np, sizeof *s->items);
    s->item_seq = calloc(np, sizeof *s->item_seq);
    s->item_drafts = calloc(np, sizeof *s->item_drafts);
    s->item_wake = calloc(np, sizeof *s->item_wake);
    s->item_pick = calloc(np, sizeof *s->item_pick);
    s->item_verify = calloc(np, sizeof *s->item_verify);
    s->draft_buf = calloc(np * (SP_SPEC_MAX_K + 1), sizeof *s->draft_buf);
    s->reqs = calloc(np, sizeof *s->reqs);
    s->req_ptrs = calloc(np, sizeof *s->req_ptrs);
    if (!s->draft_buf || !s->sessions || !s->slots || !s->verify_logits || !s->items || !s->item_seq ||
        !s->item_drafts || !s->item_wake || !s->item_pick || !s->item_verify || !s->reqs ||
        !s->req_ptrs)
        goto oom;
    bool drafting = cfg->ngram || cfg->draft_model;
    sp_session_params sp = sp_session_default_params();
    sp.n_ctx = cfg->n_ctx;
    if (sp.n_batch < cfg->prefill_chunk)
        sp.n_batch = cfg->prefill_chunk;
    for (size_t i = 0; i < np; i++) {
        if (sp_session_new(cfg->model, &sp, &s->sessions[i], err) != SP_OK)
            goto fail;
        if (drafting) {
            s->verify_logits[i] = malloc((size_t)(s->cfg.draft_k + 1) * (size_t)s->n_vocab * sizeof(float));
            if (!s->verify_logits[i])
                goto oom;
        }
    }
    if (cfg->draft_model) {
        s->draft_vocab = sp_model_n_vocab(cfg->draft_model);
        if (sp_draft_pool_new(cfg->draft_model, cfg->n_parallel, cfg->n_ctx, sp.n_batch, &s->drafts,
                              err) != SP_OK)
            goto fail;
    }
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        if (err)
            snprintf(err->msg, sizeof err->msg, "cannot start the scheduler thread");
        goto fail;
    }
    s->thread_started = true;
    *out = s;
    return SP_OK;
oom:
    if (err)
        snprintf(err->msg, sizeof err->msg, "out of memory creating the scheduler");
fail:
    sp_sched_free(s);
    if (err && err->status == SP_OK)
        err->status = SP_ERR_NOMEM;
    return err ? err->status : SP_ERR_NOMEM;
}

void sp_sched_drain(sp_sched *s, int grace_ms)
{
    pthread_mutex_lock(&s->mu);
    s->accepting = false;
    double deadline = sp_server_now() + grace_ms / 1e3;
    while (s->n_running + s->n_waiting > 0 && sp_server_now() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&s->progress, &s->mu, &ts);
    }
    for (int i = 0; i < s->cfg.n_parallel; i++)
        if (s->slots[i])
            s->slots[i]->cancel = true;
    for (sp_seq *q = s->queue_head; q; q = q->next)
        q->cancel = true;
    pthread_cond_signal(&s->work);
    while (s->n_running + s->n_waiting > 0)
        pthread_cond_wait(&s->progress, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void sp_sched_free(sp_sched *s)
{
    if (!s)
        return;
    if (s->thread_started) {
        sp_sched_drain(s, 0);
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->progress);
    }
    for (int i = 0; s->sessions && i < s->cfg.n_parallel; i++)
        sp_session_free(s->sessions[i]);
    for (int i = 0; s->verify_logits && i < s->cfg.n_parallel; i++)
        free(s->verify_logits[i]);
    free(s->sessions);
    free(s->slots);
    free(s->verify_logits);
    free(s->items);
    free(s->item_seq);
    free(s->item_drafts);
    free(s->item_wake);
    free(s->item_pick);
    free(s->item_verify);
    free(s->draft_buf);
    free(s->reqs);
    free(s->req_ptrs);
    sp_draft_pool_free(s->drafts);
    free(s);
}
