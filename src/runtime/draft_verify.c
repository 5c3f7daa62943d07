/* draft_verify.c: the public face of speculative drafting and verification for callers
 * that run their own passes (the server drafts for many sequences in one sp_batch_eval of
 * the draft model and verifies them in one sp_batch_eval of the target).
 *
 * Nothing is re-implemented here: a sp_draft_sampler is spec_draft.c's model drafter
 * without a session (sp_drafter_pick, the rule sp_generate_spec drafts with), and a
 * sp_draft_verifier applies spec_verify.c's acceptance rule (accept d with
 * min(1, p(d)/q(d)), else draw from norm(max(0, p - q)); q one-hot for deterministic
 * drafts). Every stream is seeded from the sampling seed as sp_generate_spec seeds it
 * (spec_verify.h), apart from sp_sampler_next's. */
#include "model/model.h"
#include "runtime/spec_draft.h"
#include "runtime/spec_verify.h"
#include "util/error.h"

#include <stdlib.h>

struct sp_draft_verifier {
    sp_sampler *sampler; /* for its distribution only */
    int64_t n_vocab;
    double *p; /* [n_vocab] */
    sp_rng accept_rng, resample_rng;
};

struct sp_draft_sampler {
    sp_drafter *drafter;
    sp_sampling_params sampling; /* the drafter points at it */
    int32_t k_max;
};

sp_status sp_draft_verifier_new(const sp_sampling_params *params, int64_t n_vocab,
                                sp_draft_verifier **out, sp_error *err)
{
    *out = NULL;
    if (n_vocab <= 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "draft verifier: n_vocab %lld must be positive",
                      (long long)n_vocab);
    sp_draft_verifier *v = calloc(1, sizeof *v);
    if (!v || !(v->p = malloc((size_t)n_vocab * sizeof *v->p))) {
        free(v);
        return sp_err(err, SP_ERR_NOMEM, "draft verifier: out of memory");
    }
    sp_status st = sp_sampler_new(params, n_vocab, &v->sampler, err);
    if (st != SP_OK) {
        free(v->p);
        free(v);
        return st;
    }
    v->n_vocab = n_vocab;
    sp_rng_seed(&v->accept_rng, params->seed ^ SP_SPEC_STREAM_ACCEPT);
    sp_rng_seed(&v->resample_rng, params->seed ^ SP_SPEC_STREAM_RESAMPLE);
    *out = v;
    return SP_OK;
}

void sp_draft_verifier_free(sp_draft_verifier *v)
{
    if (!v)
        return;
    sp_sampler_free(v->sampler);
    free(v->p);
    free(v);
}

int32_t sp_draft_verifier_check(sp_draft_verifier *v, const float *logits, int32_t draft,
                                const double *q, int64_t n_q)
{
    sp_sampler_dist(v->sampler, logits, v->p);
    int32_t out = draft;
    if (sp_spec_verify_token(v->p, v->n_vocab, q, q ? n_q : 0, draft, &v->accept_rng,
                             &v->resample_rng, &out))
        return draft;
    return out;
}

sp_status sp_draft_sampler_new(const sp_model *target, const sp_model *draft,
                               const sp_sampling_params *params, int32_t k_max, float p_min,
                               bool stop_at_eos, sp_draft_sampler **out, sp_error *err)
{
    *out = NULL;
    if (k_max < 1 || k_max > SP_SPEC_MAX_K)
        return sp_err(err, SP_ERR_INVALID_ARG, "draft sampler: k_max %d must be in [1, %d]", k_max,
                      SP_SPEC_MAX_K);
    if (!(p_min >= 0 && p_min <= 1))
        return sp_err(err, SP_ERR_INVALID_ARG, "draft sampler: p_min %g must be in [0, 1]",
                      (double)p_min);
    sp_draft_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return sp_err(err, SP_ERR_NOMEM, "draft sampler: out of memory");
    s->sampling = *params;
    sp_drafter_config dc = {
        .kind = SP_DRAFT_MODEL,
        .draft_model = draft,
        .sampling = &s->sampling,
        .k_max = k_max,
        .p_min = p_min,
        .target_vocab = sp_model_n_vocab(target),
        .stop_at_eos = stop_at_eos,
        .eos_model = target,
        .seed = params->seed ^ SP_SPEC_STREAM_DRAFT,
    };
    sp_status st = sp_drafter_new(&dc, &s->drafter, err);
    if (st != SP_OK) {
        free(s);
        return st;
    }
    s->k_max = k_max;
    *out = s;
    return SP_OK;
}

void sp_draft_sampler_free(sp_draft_sampler *s)
{
    if (!s)
        return;
    sp_drafter_free(s->drafter);
    free(s);
}

/* Draft token i: picked from draft_logits, or (take, a greedy drafter only) the given
 * *token taken as its pick; false when the draft ends before it or there is nothing to
 * pick from. */
static bool sampler_step(sp_draft_sampler *s, const float *draft_logits, bool take, int32_t i,
                         int32_t *token, const double **q, bool *last)
{
    *q = NULL;
    *last = false;
    if (i < 0 || i >= s->k_max || (take ? !sp_drafter_greedy(s->drafter) : !draft_logits))
        return false;
    sp_pick r = take ? sp_drafter_take(s->drafter, *token)
                     : sp_drafter_pick(s->drafter, draft_logits, i, token, q);
    *last = r == SP_PICK_LAST;
    return r != SP_PICK_END;
}

bool sp_draft_sampler_next(sp_draft_sampler *s, const float *draft_logits, int32_t i,
                           int32_t *token, const double **q, bool *last)
{
    return sampler_step(s, draft_logits, false, i, token, q, last);
}

bool sp_draft_sampler_greedy(const sp_draft_sampler *s) { return sp_drafter_greedy(s->drafter); }

bool sp_draft_sampler_take(sp_draft_sampler *s, int32_t token, int32_t i, const double **q,
                           bool *last)
{
    return sampler_step(s, NULL, true, i, &token, q, last);
}

/* ---- draws made in the draft's passes, verification on the device ------------------- */

double sp_draft_sampler_uniform(sp_draft_sampler *s) { return sp_drafter_uniform(s->drafter); }

double *sp_draft_sampler_dist(sp_draft_sampler *s, int32_t i)
{
    return sp_drafter_q_slot(s->drafter, i);
}

bool sp_draft_sampler_drawn(sp_draft_sampler *s, int32_t token, int32_t i, bool on_host,
                            const double **q, bool *last)
{
    *last = false;
    *q = NULL;
    if (i < 0 || i >= s->k_max || sp_drafter_greedy(s->drafter))
        return false;
    sp_pick r = sp_drafter_take(s->drafter, token);
    *last = r == SP_PICK_LAST;
    if (r != SP_PICK_END && on_host)
        *q = sp_drafter_q_slot(s->drafter, i);
    return r != SP_PICK_END;
}

sp_status sp_draft_sampler_kept_q(sp_draft_sampler *s, sp_session *draft, int32_t i,
                                  const double **q, sp_error *err)
{
    return sp_drafter_q_kept(s->drafter, draft, i, q, err);
}

bool sp_draft_verifier_sampled(const sp_draft_verifier *v)
{
    return sp_sampler_params(v->sampler)->temperature > 0.0f;
}

sp_sample_req sp_draft_verifier_req(const sp_draft_verifier *v)
{
    return sp_sample_req_of(sp_sampler_params(v->sampler), 0.0);
}

void sp_draft_verifier_peek(const sp_draft_verifier *v, int32_t m, double *u, double *vres)
{
    sp_spec_peek(&v->accept_rng, &v->resample_rng, m, u, vres);
}

void sp_draft_verifier_took(sp_draft_verifier *v, int32_t accepted, int32_t m)
{
    sp_spec_took(&v->accept_rng, &v->resample_rng, accepted, m);
}
