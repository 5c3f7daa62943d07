/* draft_verify.c: the public face of speculative verification for callers that run their
 * own verify pass (the server verifies many sequences' drafts in one sp_batch_eval).
 *
 * The rule is spec_verify.c's, with q one-hot (deterministic drafts: n-grams, prompt
 * lookup): accept d with probability p(d) under the sampler's distribution, else draw
 * from p without d. The acceptance and resampling streams are seeded from the sampling
 * seed as sp_generate_spec seeds them, separately from sp_sampler_next's stream. */
#include "runtime/sampler.h"
#include "runtime/spec_verify.h"

#include <stdio.h>
#include <stdlib.h>

#define STREAM_ACCEPT 0x616363657074ull /* as speculative.c */
#define STREAM_RESAMPLE 0x726573616d706cull

struct sp_draft_verifier {
    sp_sampler *sampler; /* for its distribution only */
    int64_t n_vocab;
    double *p; /* [n_vocab] */
    sp_rng accept_rng, resample_rng;
};

sp_status sp_draft_verifier_new(const sp_sampling_params *params, int64_t n_vocab,
                                sp_draft_verifier **out, sp_error *err)
{
    sp_draft_verifier *v = calloc(1, sizeof *v);
    if (!v || n_vocab <= 0 || !(v->p = malloc((size_t)n_vocab * sizeof *v->p))) {
        free(v);
        if (err) {
            err->status = n_vocab <= 0 ? SP_ERR_INVALID_ARG : SP_ERR_NOMEM;
            snprintf(err->msg, sizeof err->msg, "draft verifier: %s",
                     n_vocab <= 0 ? "n_vocab must be positive" : "out of memory");
        }
        return n_vocab <= 0 ? SP_ERR_INVALID_ARG : SP_ERR_NOMEM;
    }
    sp_status st = sp_sampler_new(params, n_vocab, &v->sampler, err);
    if (st != SP_OK) {
        free(v->p);
        free(v);
        return st;
    }
    v->n_vocab = n_vocab;
    sp_rng_seed(&v->accept_rng, params->seed ^ STREAM_ACCEPT);
    sp_rng_seed(&v->resample_rng, params->seed ^ STREAM_RESAMPLE);
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

int32_t sp_draft_verifier_check(sp_draft_verifier *v, const float *logits, int32_t draft)
{
    sp_sampler_dist(v->sampler, logits, v->p);
    int32_t out = draft;
    if (sp_spec_verify_token(v->p, v->n_vocab, NULL, 0, draft, &v->accept_rng, &v->resample_rng,
                             &out))
        return draft;
    return out;
}
