/* sampler.h: turning logits into a token the way transformers' generate does, and the
 * exact distribution that sampling draws from (speculative verification needs it).
 *
 * Order of the warpers (as transformers applies them): temperature, top-k, top-p,
 * min-p. Temperature 0 means greedy: the distribution is one-hot at the argmax (the
 * first index among equal maxima, as torch.argmax). Random numbers come from
 * xoshiro256** streams seeded with splitmix64, so a seed reproduces a run exactly. */
#ifndef SP_RUNTIME_SAMPLER_H
#define SP_RUNTIME_SAMPLER_H

#include "specula.h"

typedef struct sp_rng {
    uint64_t s[4];
} sp_rng;

void sp_rng_seed(sp_rng *r, uint64_t seed);
uint64_t sp_rng_next(sp_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double sp_rng_uniform(sp_rng *r);

int32_t sp_argmax(const float *logits, int64_t n);

typedef struct sp_sampler sp_sampler;

sp_status sp_sampler_new(const sp_sampling_params *p, int64_t n_vocab, sp_sampler **out,
                         sp_error *err);
void sp_sampler_free(sp_sampler *s);
const sp_sampling_params *sp_sampler_params(const sp_sampler *s);

/* The distribution sampling draws from: probs[n_vocab], zero outside the kept set. */
void sp_sampler_dist(sp_sampler *s, const float *logits, double *probs);
/* Draws from probs by inverse CDF in id order with one uniform u in [0, 1). */
int32_t sp_sample_probs(const double *probs, int64_t n, double u);
/* Greedy when temperature is 0 (no random number used), else dist + one draw. */
int32_t sp_sampler_sample(sp_sampler *s, const float *logits, sp_rng *rng);

#endif
