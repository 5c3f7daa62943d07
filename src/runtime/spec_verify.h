/* spec_verify.h: the acceptance rule of speculative sampling (Leviathan et al. 2023,
 * Chen et al. 2023), one draft position at a time.
 *
 * A draft token d drawn from q is accepted with probability min(1, p(d) / q(d)); on
 * rejection the replacement is drawn from norm(max(0, p - q)). The emitted token then has
 * distribution p exactly. A deterministic draft (greedy drafting, n-grams) has q one-hot
 * at d: accept with p(d), else draw from p with d removed. p and q may have different
 * lengths (vocabularies padded differently): missing entries are 0. The residual's sum and
 * walk follow kernels/sample_row.h's order (lanes, groups, total; a three-level walk), so
 * the GPU's verification (backend op spec_verify) draws the same token. */
#ifndef SP_RUNTIME_SPEC_VERIFY_H
#define SP_RUNTIME_SPEC_VERIFY_H

#include "runtime/sampler.h"

/* Random streams of speculative decoding, each seeded from the sampling seed xor its
 * constant: drafting, acceptance and resampling never share random numbers. The CLI's
 * loop (speculative.c) and the public drafting/verification objects (draft_verify.c) seed
 * them the same way. */
#define SP_SPEC_STREAM_DRAFT 0x6472616674ull
#define SP_SPEC_STREAM_ACCEPT 0x616363657074ull
#define SP_SPEC_STREAM_RESAMPLE 0x726573616d706cull

/* Returns true when d is accepted (one uniform from accept_rng); otherwise *out gets the
 * replacement (one uniform from resample_rng). q == NULL: q is one-hot at d. */
bool sp_spec_verify_token(const double *p, int64_t n_p, const double *q, int64_t n_q, int32_t d,
                          sp_rng *accept_rng, sp_rng *resample_rng, int32_t *out);

/* The backend op spec_verify's rule on the host, its reference: target holds the target's
 * m + 1 rows (reqs[0 .. m] their draws), draft the draft's m rows (reqs[m + 1 ..]) or NULL
 * (q one-hot); a->drafts, a->u (acceptance), a->v (the residual's draw) and a->v_bonus
 * (the bonus row's). out[0] = drafts accepted, out[1] = the next token: what sp_spec_verify_token and
 * the bonus draw (sp_sample_row with v_bonus) give with these uniforms; out[0] = -1 where a row
 * has no candidate. SP_ERR_NOMEM. */
sp_status sp_spec_verify_rows(const float *target, const float *draft, int64_t m, int64_t n_vocab,
                              const sp_sample_req *reqs, const sp_spec_args *a, int32_t out[2]);

/* A check of m drafts on the device takes its uniforms ahead: sp_spec_peek gives the ones
 * the host's rule would take next (acceptance u[0 .. m) from `accept`, the replacement's *v
 * from `resample`) without taking them; sp_spec_took then takes what the rule used for
 * `accepted` of m drafts (one a draft tested; the replacement's when one was rejected). */
void sp_spec_peek(const sp_rng *accept, const sp_rng *resample, int32_t m, double *u, double *v);
void sp_spec_took(sp_rng *accept, sp_rng *resample, int32_t accepted, int32_t m);

/* A public sp_draft_verifier's rule on the device (sp_batch_eval, sp_batch_verify): whether
 * it samples, its draws' request, the uniforms its next check of m drafts would take
 * (acceptance u[0 .. m), the replacement's *v) without taking them, then taking what the
 * rule used for `accepted` of m drafts. */
bool sp_draft_verifier_sampled(const sp_draft_verifier *v);
sp_sample_req sp_draft_verifier_req(const sp_draft_verifier *v);
void sp_draft_verifier_peek(const sp_draft_verifier *v, int32_t m, double *u, double *vres);
void sp_draft_verifier_took(sp_draft_verifier *v, int32_t accepted, int32_t m);

#endif
