/* session.c: sessions — one sequence each — evaluating tokens alone or batched with other
 * sessions of the same model, and KV rollback (see session.h and specula.h); MTP sessions,
 * which run a model's multi-token prediction module for a target session of it. */
#include "runtime/session.h"
#include "engine/compute.h"
#include "runtime/sampler.h"
#include "runtime/spec_verify.h"
#include "util/ckd.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sp_session {
    sp_model *m;
    sp_kv *kv;
    int64_t n_ctx, n_batch, n_past;
    float *logits; /* [n_vocab]: last position */
    bool has_logits;
    sp_observer obs;
    bool observed;
    /* multi-token prediction (sp_session_new_mtp) */
    sp_session *mtp;    /* a target: its MTP session, or NULL */
    sp_session *target; /* an MTP session: the session it drafts for */
    int64_t n_real;     /* an MTP session: positions computed from the target's hidden states */
    float *hidden;      /* [n_ctx, sp_model_hidden_width] each position's hidden state, when recorded */
    int32_t *tok;       /* [n_ctx] each position's token, when recorded */
    sp_sample_work draw; /* the host's draws (made by the first that needs them) */
    float *kept;         /* backend memory [n_kept, n_vocab]: a draft's rows for the
                          * target's verification on the device (sp_session_keep_rows) */
    int32_t n_kept;
};

sp_session_params sp_session_default_params(void)
{
    sp_session_params p = {0};
    return p;
}

sp_status sp_session_new(sp_model *m, const sp_session_params *params, sp_session **out,
                         sp_error *err)
{
    *out = NULL;
    sp_session_params p = params ? *params : sp_session_default_params();
    int64_t n_ctx = p.n_ctx > 0 ? p.n_ctx : sp_model_default_ctx(m);
    int64_t n_batch = p.n_batch > 0 ? p.n_batch : sp_model_default_batch(m);
    if (n_ctx > m->cfg->max_pos)
        return sp_err(err, SP_ERR_LIMIT,
                      "context of %lld tokens exceeds the model's max_position_embeddings %lld",
                      (long long)n_ctx, (long long)m->cfg->max_pos);
    if (n_batch > n_ctx)
        n_batch = n_ctx;
    sp_session *s = calloc(1, sizeof *s);
    if (!s)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->logits = malloc((size_t)m->n_vocab * sizeof *s->logits);
    sp_status st = s->logits ? SP_OK : sp_err(err, SP_ERR_NOMEM, "out of memory");
    if (st == SP_OK)
        st = sp_kv_new(m, n_ctx, &s->kv, err);
    if (st == SP_OK)
        st = sp_model_reserve(m, n_batch, err);
    if (st != SP_OK) {
        sp_session_free(s);
        return st;
    }
    *out = s;
    return SP_OK;
}

void sp_session_free(sp_session *s)
{
    if (!s)
        return;
    if (s->mtp)
        s->mtp->target = NULL;
    if (s->target)
        s->target->mtp = NULL;
    if (s->kept)
        s->m->be->ops->free(s->m->be, s->kept);
    sp_kv_free(s->kv);
    free(s->logits);
    free(s->hidden);
    free(s->tok);
    sp_sample_work_free(&s->draw);
    free(s);
}

static sp_status check_tokens(const sp_session *s, const int32_t *tokens, size_t n, sp_error *err)
{
    if (n == 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "no tokens to evaluate");
    if (n > (size_t)(s->n_ctx - s->n_past))
        return sp_err(err, SP_ERR_LIMIT,
                      "%zu tokens do not fit: %lld of the %lld-token context are used", n,
                      (long long)s->n_past, (long long)s->n_ctx);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->n_vocab)
            return sp_err(err, SP_ERR_INVALID_ARG,
                          "token %zu: id %d is outside the vocabulary [0, %lld)", i, tokens[i],
                          (long long)s->m->n_vocab);
    return SP_OK;
}

static sp_seq_eval seq_of(sp_session *s, const int32_t *tokens, size_t n, float *logits)
{
    return (sp_seq_eval){.kv = s->kv, .pos0 = s->n_past, .tokens = tokens, .n = (int64_t)n,
                         .logits = logits, .last = s->logits, .obs = s->observed ? &s->obs : NULL,
                         .hidden_out = s->hidden ? s->hidden + s->n_past * sp_model_hidden_width(s->m) : NULL};
}

static void advance(sp_session *s, const int32_t *tokens, size_t n)
{
    if (s->tok)
        memcpy(s->tok + s->n_past, tokens, n * sizeof *tokens);
    s->n_past += (int64_t)n;
    s->has_logits = true;
}

/* One sequence's eval: logits, last_id, sample, ids, spec and keep as sp_seq_eval's
 * (forward.h). */
static sp_status eval_seq_on(sp_session *s, const int32_t *tokens, size_t n_tokens, float *logits,
                             int32_t *last_id, const sp_sample_req *sample, int32_t *ids,
                             const sp_spec_req *spec, float *keep, sp_error *err)
{
    if (s->target)
        return sp_err(err, SP_ERR_INVALID_ARG, "an MTP session is evaluated by speculative decoding "
                      "(--draft mtp), not token by token");
    sp_status st = check_tokens(s, tokens, n_tokens, err);
    if (st != SP_OK)
        return st;
    s->has_logits = false;
    sp_seq_eval q = seq_of(s, tokens, n_tokens, logits);
    q.last_id = last_id;
    q.sample = sample;
    q.ids = ids;
    q.spec = spec;
    q.keep = keep;
    st = sp_forward(s->m, &q, 1, s->n_batch, err);
    if (st == SP_OK)
        advance(s, tokens, n_tokens);
    return st;
}

/* eval_seq_on without a verification or a kept row. */
static sp_status eval_seq(sp_session *s, const int32_t *tokens, size_t n_tokens, float *logits,
                          int32_t *last_id, const sp_sample_req *sample, int32_t *ids,
                          sp_error *err)
{
    return eval_seq_on(s, tokens, n_tokens, logits, last_id, sample, ids, NULL, NULL, err);
}

sp_status sp_session_eval(sp_session *s, const int32_t *tokens, size_t n_tokens, float *logits,
                          sp_error *err)
{
    return eval_seq(s, tokens, n_tokens, logits, NULL, NULL, NULL, err);
}

/* The pick of the last logits a pass read back (the backend did not pick): greedy, or
 * req's draw; with dist (a draw), the row's distribution under req too, from the same pass
 * (sp_sample_row_dist). */
static sp_status host_pick(sp_session *s, const sp_sample_req *req, double *dist, int32_t *id,
                           sp_error *err)
{
    if (!req || !(req->inv_t > 0.0)) {
        *id = sp_argmax(s->logits, s->m->n_vocab);
        return SP_OK;
    }
    if (!s->draw.w && sp_sample_work_init(&s->draw, s->m->n_vocab) != SP_OK)
        return sp_err(err, SP_ERR_NOMEM, "out of memory drawing a token (%lld-token vocabulary)",
                      (long long)s->m->n_vocab);
    *id = dist ? sp_sample_row_dist(req, s->logits, s->m->n_vocab, &s->draw, dist)
               : sp_sample_row(req, s->logits, s->m->n_vocab, &s->draw);
    return SP_OK;
}

/* The checks of a draw's parameters (sp_sampler_new's) and its uniform: no allocation, as
 * every decode step makes them. */
static sp_status check_draw(const sp_sampling_params *p, double u, sp_error *err)
{
    if (!p)
        return sp_err(err, SP_ERR_INVALID_ARG, "no sampling parameters (params is NULL)");
    if (!(u >= 0.0 && u < 1.0))
        return sp_err(err, SP_ERR_INVALID_ARG, "the draw's uniform %g is not in [0, 1)", u);
    return sp_sampling_check(p, err);
}

sp_status sp_session_eval_greedy(sp_session *s, const int32_t *tokens, size_t n_tokens,
                                 int32_t *next, sp_error *err)
{
    if (!next)
        return sp_err(err, SP_ERR_INVALID_ARG, "no place for the greedy pick (next is NULL)");
    int32_t id = -1;
    sp_status st = eval_seq(s, tokens, n_tokens, NULL, &id, NULL, NULL, err);
    if (st != SP_OK)
        return st;
    if (id < 0) /* the logits came back: pick here */
        st = host_pick(s, NULL, NULL, &id, err);
    else
        s->has_logits = false; /* only the pick came back */
    *next = id;
    return st;
}

/* sp_session_eval_sample, the last row's logits also copied to keep (backend memory) or
 * not (NULL); a draw made on the host also writes the row's distribution to dist (or not:
 * NULL). */
static sp_status eval_draw(sp_session *s, const int32_t *tokens, size_t n_tokens,
                           const sp_sampling_params *params, double u, float *keep, double *dist,
                           int32_t *next, sp_error *err)
{
    if (!next)
        return sp_err(err, SP_ERR_INVALID_ARG, "no place for the drawn token (next is NULL)");
    sp_status st = check_draw(params, u, err);
    if (st != SP_OK)
        return st;
    const sp_sample_req req = sp_sample_req_of(params, u);
    int32_t id = -1;
    if ((st = eval_seq_on(s, tokens, n_tokens, NULL, &id, &req, NULL, NULL, keep, err)) != SP_OK)
        return st;
    if (id < 0) /* the logits came back: draw here */
        st = host_pick(s, &req, dist, &id, err);
    else
        s->has_logits = false; /* only the token came back */
    *next = id;
    return st;
}

sp_status sp_session_eval_sample(sp_session *s, const int32_t *tokens, size_t n_tokens,
                                 const sp_sampling_params *params, double u, int32_t *next,
                                 sp_error *err)
{
    return eval_draw(s, tokens, n_tokens, params, u, NULL, NULL, next, err);
}

/* ---- speculative sampling on the device --------------------------------------------- */

bool sp_session_can_verify(const sp_session *t, const sp_session *d)
{
    const sp_backend *bt = t->m->be;
    if (!bt->ops->spec_verify)
        return false;
    if (!d)
        return true;
    const sp_backend *bd = d->m->be;
    return !strcmp(bd->ops->name, bt->ops->name) && bd->device_index == bt->device_index &&
           d->m->n_vocab == t->m->n_vocab && !d->target && !d->hidden;
}

sp_status sp_session_keep_rows(sp_session *s, int32_t k, sp_error *err)
{
    if (k <= s->n_kept)
        return SP_OK;
    size_t bytes;
    if (sp_ckd_mul3_size(&bytes, (size_t)k, (size_t)s->m->n_vocab, sizeof(float)))
        return sp_err(err, SP_ERR_LIMIT, "%d kept rows of %lld logits overflow", k,
                      (long long)s->m->n_vocab);
    sp_backend *be = s->m->be;
    void *p = NULL;
    sp_status st = be->ops->alloc(be, bytes, &p, err);
    if (st != SP_OK)
        return st;
    if (s->kept)
        be->ops->free(be, s->kept);
    s->kept = p;
    s->n_kept = k;
    return SP_OK;
}

const float *sp_session_kept(const sp_session *s, int32_t slot)
{
    return s->kept && slot >= 0 && slot < s->n_kept ? s->kept + (size_t)slot * (size_t)s->m->n_vocab
                                                    : NULL;
}

sp_status sp_session_kept_download(sp_session *s, int32_t slot, float *row, sp_error *err)
{
    const float *src = sp_session_kept(s, slot);
    if (!src)
        return sp_err(err, SP_ERR_INTERNAL, "no kept row %d", slot);
    sp_backend *be = s->m->be;
    return be->ops->download(be, row, src, (size_t)s->m->n_vocab * sizeof(float), err);
}

sp_status sp_session_eval_sample_keep(sp_session *s, const int32_t *tokens, size_t n_tokens,
                                      const sp_sampling_params *params, double u, int32_t slot,
                                      double *dist, int32_t *next, sp_error *err)
{
    float *keep = (float *)sp_session_kept(s, slot);
    if (!keep)
        return sp_err(err, SP_ERR_INTERNAL, "no kept row %d", slot);
    return eval_draw(s, tokens, n_tokens, params, u, keep, dist, next, err);
}

sp_status sp_session_eval_verify(sp_session *s, const int32_t *tokens, size_t n,
                                 const sp_spec_req *spec, float *logits, int32_t *n_acc,
                                 int32_t *next, sp_error *err)
{
    if (n < 2 || !spec || !logits)
        return sp_err(err, SP_ERR_INTERNAL, "a verification needs drafts, a request and logits");
    int32_t ids[2] = {-1, -1};
    sp_status st = eval_seq_on(s, tokens, n, logits, NULL, NULL, ids, spec, NULL, err);
    if (st != SP_OK)
        return st;
    *n_acc = ids[0];
    *next = ids[1];
    if (ids[0] >= 0)
        s->has_logits = false; /* only the outcome came back */
    return SP_OK;
}

sp_status sp_session_decode_greedy(sp_session *s, int32_t first, size_t max_new, sp_pick_fn on_pick,
                                   void *ctx, size_t *n_new, sp_error *err)
{
    if (!n_new)
        return sp_err(err, SP_ERR_INVALID_ARG, "no place for the count of picks (n_new is NULL)");
    *n_new = 0;
    if (max_new == 0)
        return SP_OK;
    sp_status st = check_tokens(s, &first, 1, err);
    if (st != SP_OK)
        return st;
    if (max_new > (size_t)(s->n_ctx - s->n_past))
        return sp_err(err, SP_ERR_LIMIT,
                      "%zu greedy steps do not fit: %lld of the %lld-token context are used",
                      max_new, (long long)s->n_past, (long long)s->n_ctx);
    /* the chain on the device; not for sessions recording hidden states (MTP) */
    if (!s->target && !s->hidden && sp_forward_chain_ok(s->m, s->observed ? &s->obs : NULL)) {
        int64_t n = 0;
        s->has_logits = false;
        st = sp_forward_greedy_chain(s->m, s->kv, s->n_past, first, (int64_t)max_new, on_pick, ctx,
                                     &n, err);
        s->n_past += n; /* first and every pick but the last: no tokens recorded (no MTP) */
        *n_new = (size_t)n;
        return st;
    }
    int32_t tok = first;
    for (size_t i = 0; i < max_new; i++) {
        int32_t next = -1;
        if ((st = sp_session_eval_greedy(s, &tok, 1, &next, err)) != SP_OK)
            return st;
        (*n_new)++;
        if (on_pick && !on_pick(ctx, next))
            break;
        tok = next;
    }
    return SP_OK;
}

#define PICKS_ROWS 32 /* specula.h documents sp_session_eval_picks' 32 rows */
_Static_assert(PICKS_ROWS <= SP_LOGIT_ROWS, "sp_session_eval_picks' rows fit one pass of the head");

sp_status sp_session_eval_picks(sp_session *s, const int32_t *tokens, size_t n, float *logits,
                                int32_t *picks, sp_error *err)
{
    if (!logits || !picks)
        return sp_err(err, SP_ERR_INVALID_ARG, "sp_session_eval_picks needs a logits buffer and "
                      "a picks array (%s is NULL)", !logits ? "logits" : "picks");
    const int64_t V = s->m->n_vocab;
    /* the rows come back where they do not fit one pass of the head */
    const bool fits = n <= PICKS_ROWS && (int64_t)n <= s->n_batch;
    sp_status st = eval_seq(s, tokens, n, logits, NULL, NULL, fits ? picks : NULL, err);
    if (st != SP_OK)
        return st;
    if (fits && picks[0] >= 0) {
        s->has_logits = false; /* only the picks came back */
        return SP_OK;
    }
    for (size_t i = 0; i < n; i++) /* the logits came back: pick here */
        picks[i] = sp_argmax(logits + i * (size_t)V, V);
    return SP_OK;
}

/* A batch item's verification (sp_batch_verify), checked; *dev: run on the device, with
 * request *r and its acceptance uniforms u (else the item's rows come back). */
static sp_status batch_verify(const sp_batch_item *it, sp_spec_req *r, double *u, bool *dev,
                              sp_error *err)
{
    sp_batch_verify *v = it->verify;
    *dev = false;
    v->accepted = v->next = -1;
    if (!v->verifier || !v->sampler || !it->logits || it->n_tokens < 2 || it->pick)
        return sp_err(err, SP_ERR_INVALID_ARG, "a verification needs a verifier, a sampler, a logits "
                      "buffer and drafts, and no pick");
    const int32_t m = (int32_t)it->n_tokens - 1;
    if (m > SP_SPEC_DEV_K || !sp_draft_verifier_sampled(v->verifier) ||
        !sp_session_can_verify(it->session, v->draft) || (v->draft && !sp_session_kept(v->draft, m - 1)))
        return SP_OK;
    const sp_sample_req w = sp_draft_verifier_req(v->verifier);
    *r = (sp_spec_req){.draft_rows = v->draft ? sp_session_kept(v->draft, 0) : NULL, .p = w, .q = w,
                       .u = u, .v_bonus = sp_sampler_peek_uniform(v->sampler)};
    sp_draft_verifier_peek(v->verifier, m, u, &r->v);
    *dev = true;
    return SP_OK;
}

/* After the pass: a verification's outcome, and the uniforms its rule used taken. */
static void batch_verified(const sp_batch_item *it, const int32_t *out)
{
    sp_batch_verify *v = it->verify;
    const int32_t m = (int32_t)it->n_tokens - 1;
    v->accepted = out[0];
    v->next = out[0] >= 0 ? out[1] : -1;
    if (out[0] < 0)
        return; /* the rows came back */
    sp_draft_verifier_took(v->verifier, out[0], m);
    if (out[0] == m) /* the bonus token's */
        (void)sp_sampler_uniform(v->sampler);
    it->session->has_logits = false;
}

/* Per item: its draw's request, its verification's request and uniforms and outcome. */
typedef struct batch_extra {
    sp_sample_req req;
    sp_spec_req spec;
    double u[SP_SPEC_DEV_K];
    int32_t out[2];
    bool dev;
} batch_extra;

sp_status sp_batch_eval(sp_model *m, const sp_batch_item *items, size_t n_items, sp_error *err)
{
    sp_seq_eval *qs = calloc(n_items ? n_items : 1, sizeof *qs);
    batch_extra *ex = calloc(n_items ? n_items : 1, sizeof *ex);
    if (!qs || !ex) {
        free(qs);
        free(ex);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    sp_status st = SP_OK;
    for (size_t i = 0; i < n_items && st == SP_OK; i++) {
        sp_session *s = items[i].session;
        if (!s || s->m != m)
            st = sp_err(err, SP_ERR_INVALID_ARG, "batch item %zu: session is not of this model", i);
        else if (s->target)
            st = sp_err(err, SP_ERR_INVALID_ARG, "batch item %zu: an MTP session", i);
        for (size_t j = 0; j < i && st == SP_OK; j++)
            if (items[j].session == s)
                st = sp_err(err, SP_ERR_INVALID_ARG, "batch items %zu and %zu share a session", j, i);
        sp_error e;
        if (st == SP_OK && (st = check_tokens(s, items[i].tokens, items[i].n_tokens, &e)) != SP_OK)
            sp_err(err, st, "batch item %zu: %s", i, e.msg);
        if (st == SP_OK && items[i].sampling && (st = check_draw(items[i].sampling, items[i].u, &e)) != SP_OK)
            sp_err(err, st, "batch item %zu: %s", i, e.msg);
        if (st == SP_OK && items[i].keep > 0 && !sp_session_kept(s, items[i].keep - 1))
            st = sp_err(err, SP_ERR_INVALID_ARG, "batch item %zu: no kept row %d (sp_session_keep_rows)",
                        i, items[i].keep - 1);
        if (st == SP_OK && items[i].verify &&
            (st = batch_verify(&items[i], &ex[i].spec, ex[i].u, &ex[i].dev, &e)) != SP_OK)
            sp_err(err, st, "batch item %zu: %s", i, e.msg);
        if (st == SP_OK) {
            qs[i] = seq_of(s, items[i].tokens, items[i].n_tokens, items[i].logits);
            if (items[i].sampling)
                ex[i].req = sp_sample_req_of(items[i].sampling, items[i].u);
            if (items[i].pick && !items[i].logits) {
                qs[i].last_id = items[i].pick;
                qs[i].sample = &ex[i].req;
            }
            if (items[i].keep > 0)
                qs[i].keep = (float *)sp_session_kept(s, items[i].keep - 1);
            if (ex[i].dev) {
                ex[i].out[0] = ex[i].out[1] = -1;
                qs[i].spec = &ex[i].spec;
                qs[i].ids = ex[i].out;
            }
        }
    }
    if (st == SP_OK) {
        for (size_t i = 0; i < n_items; i++)
            items[i].session->has_logits = false;
        st = sp_forward(m, qs, (int64_t)n_items, 0, err);
    }
    sp_status pick_st = SP_OK;
    for (size_t i = 0; st == SP_OK && i < n_items; i++) {
        const sp_batch_item *it = &items[i];
        advance(it->session, it->tokens, it->n_tokens);
        if (it->verify)
            batch_verified(it, ex[i].out);
        if (!it->pick || pick_st != SP_OK)
            continue;
        if (it->logits || *it->pick < 0) /* the last logits came back: pick here */
            pick_st = host_pick(it->session, &ex[i].req, it->dist, it->pick, err);
        else
            it->session->has_logits = false; /* only the pick came back */
    }
    st = st != SP_OK ? st : pick_st;
    free(qs);
    free(ex);
    return st;
}

const float *sp_session_last_logits(const sp_session *s)
{
    return s->has_logits ? s->logits : NULL;
}

int64_t sp_session_n_past(const sp_session *s) { return s->n_past; }
int64_t sp_session_n_ctx(const sp_session *s) { return s->n_ctx; }
sp_model *sp_session_model(const sp_session *s) { return s->m; }

sp_status sp_session_truncate(sp_session *s, int64_t n_past, sp_error *err)
{
    if (n_past < 0 || n_past > s->n_past)
        return sp_err(err, SP_ERR_INVALID_ARG, "cannot truncate to %lld: session holds %lld",
                      (long long)n_past, (long long)s->n_past);
    s->n_past = n_past;
    s->has_logits = false;
    if (s->n_real > n_past)
        s->n_real = n_past;
    if (s->mtp) { /* MTP position i reads the target's token i + 1 */
        sp_session *d = s->mtp;
        int64_t keep = n_past > 0 ? n_past - 1 : 0;
        if (d->n_past > keep) {
            d->n_past = keep;
            d->has_logits = false;
        }
        if (d->n_real > keep)
            d->n_real = keep;
    }
    return SP_OK;
}

static void update_observed(sp_session *s)
{
    s->observed = s->obs.cb != NULL || s->obs.perturb;
}

void sp_session_set_trace(sp_session *s, sp_trace_cb cb, void *ctx)
{
    s->obs.cb = cb;
    s->obs.ctx = ctx;
    update_observed(s);
}

void sp_session_set_perturb(sp_session *s, int layer, sp_op op, float factor)
{
    s->obs.perturb = factor != 1.0f;
    s->obs.perturb_layer = layer;
    s->obs.perturb_op = op;
    s->obs.perturb_factor = factor;
    update_observed(s);
}

/* ---- multi-token prediction ------------------------------------------------------------ */

/* The target's recording: every position's hidden state and token from now on. */
static sp_status record_target(sp_session *t, sp_error *err)
{
    size_t n;
    if (sp_ckd_mul3_size(&n, (size_t)t->n_ctx, (size_t)sp_model_hidden_width(t->m), sizeof *t->hidden))
        return sp_err(err, SP_ERR_NOMEM, "hidden states of %lld positions: size overflows",
                      (long long)t->n_ctx);
    t->hidden = malloc(n);
    t->tok = malloc((size_t)t->n_ctx * sizeof *t->tok);
    if (!t->hidden || !t->tok) {
        free(t->hidden);
        free(t->tok);
        t->hidden = NULL;
        t->tok = NULL;
        return sp_err(err, SP_ERR_NOMEM, "out of memory for the target's hidden states");
    }
    return SP_OK;
}

static sp_status mtp_refuse(const sp_session *t, sp_error *err)
{
    const sp_model *m = t->m;
    if (t->target)
        return sp_err(err, SP_ERR_INVALID_ARG, "an MTP session cannot draft for itself");
    bool v4 = m->arch->attn == SP_ATTN_DSV4;
    char name[64];
    snprintf(name, sizeof name, v4 ? "mtp.0.e_proj.weight" : "model.layers.%lld.eh_proj.weight",
             (long long)m->n_layers);
    if (!m->n_mtp)
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: no multi-token prediction module to draft with "
                      "(config.json: num_nextn_predict_layers = %lld; the checkpoint has no '%s'%s)",
                      m->dir, (long long)(v4 ? m->cfg->dsv4.n_mtp : m->cfg->n_nextn), name,
                      v4 || m->arch->attn == SP_ATTN_MLA ? ""
                                                         : "; MTP drafting is implemented for DeepSeek-V3 and V4 only");
    if (!m->be->host_memory)
        return sp_err(err, SP_ERR_UNSUPPORTED, "%s: MTP drafting runs on the CPU backend only so far "
                      "(device %s; use --device cpu)", m->dir, m->be->device_name);
    if (t->mtp)
        return sp_err(err, SP_ERR_INVALID_ARG, "the target session already has an MTP session");
    if (t->n_past != 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "the target session holds %lld positions: create its "
                      "MTP session before it evaluates tokens (their hidden states are recorded from "
                      "then on)", (long long)t->n_past);
    return SP_OK;
}

sp_status sp_session_new_mtp(sp_session *t, sp_session **out, sp_error *err)
{
    *out = NULL;
    sp_status st = mtp_refuse(t, err);
    if (st != SP_OK)
        return st;
    sp_model *m = t->m;
    sp_session *s = calloc(1, sizeof *s);
    if (!s)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    s->m = m;
    s->n_ctx = t->n_ctx;
    s->n_batch = t->n_batch;
    s->logits = malloc((size_t)m->n_vocab * sizeof *s->logits);
    size_t hb;
    if (!s->logits || sp_ckd_mul3_size(&hb, (size_t)s->n_ctx, (size_t)sp_model_hidden_width(m), sizeof(float)) ||
        !(s->hidden = malloc(hb)))
        st = sp_err(err, SP_ERR_NOMEM, "out of memory for an MTP session");
    if (st == SP_OK)
        st = sp_kv_new_range(m, s->n_ctx, m->n_layers, 1, &s->kv, err);
    if (st == SP_OK)
        st = sp_model_reserve(m, s->n_batch, err);
    if (st == SP_OK && !t->hidden)
        st = record_target(t, err);
    if (st != SP_OK) {
        sp_session_free(s);
        return st;
    }
    s->target = t;
    t->mtp = s;
    *out = s;
    return SP_OK;
}

sp_status sp_session_eval_mtp(sp_session *s, const int32_t *tokens, const float *hidden, size_t n,
                              float *logits, sp_error *err)
{
    if (!s->target)
        return sp_err(err, SP_ERR_INVALID_ARG, "not an MTP session");
    sp_status st = check_tokens(s, tokens, n, err);
    if (st != SP_OK)
        return st;
    s->has_logits = false;
    sp_seq_eval q = seq_of(s, tokens, n, logits);
    q.hidden_in = hidden;
    st = sp_forward(s->m, &q, 1, s->n_batch, err);
    if (st == SP_OK)
        advance(s, tokens, n);
    return st;
}

sp_session *sp_session_mtp_target(const sp_session *s) { return s->target; }

const float *sp_session_hidden(const sp_session *s, int64_t pos)
{
    return s->hidden && pos >= 0 && pos < s->n_past ? s->hidden + pos * sp_model_hidden_width(s->m) : NULL;
}

const int32_t *sp_session_tokens(const sp_session *s) { return s->tok; }
int64_t sp_session_mtp_real(const sp_session *s) { return s->n_real; }
void sp_session_set_mtp_real(sp_session *s, int64_t n) { s->n_real = n; }
