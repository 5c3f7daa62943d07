/* sampler.h: turning logits into a token the way transformers' generate does, and the
 * exact distribution that sampling draws from (speculative verification needs it).
 *
 * Order of the warpers (as transformers applies them): temperature, top-k, top-p,
 * min-p. Temperature 0 means greedy: the distribution is one-hot at the argmax (the
 * first index among equal maxima, as torch.argmax). Random numbers come from
 * xoshiro256** streams seeded with splitmix64, so a seed reproduces a run exactly. The
 * arithmetic of a draw is kernels/sample_row.h's, shared with the CUDA kernel. */
#ifndef SP_RUNTIME_SAMPLER_H
#define SP_RUNTIME_SAMPLER_H

#include "kernels/sample_row.h"
#include "specula.h"

typedef struct sp_rng {
    uint64_t s[4];
} sp_rng;

void sp_rng_seed(sp_rng *r, uint64_t seed);
uint64_t sp_rng_next(sp_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double sp_rng_uniform(sp_rng *r);

int32_t sp_argmax(const float *logits, int64_t n);

/* The arrays of one row's draw (sample_row.h) on the host, for n_vocab logits. */
typedef struct sp_sample_work {
    uint64_t *keys, *spare; /* candidates as rank << 32 | id, and the radix sort's buffer */
    uint32_t *rank;         /* each logit's rank (sp_sample_rank) */
    double *w;              /* the kept weights */
} sp_sample_work;

sp_status sp_sample_work_init(sp_sample_work *w, int64_t n_vocab); /* SP_ERR_NOMEM */
void sp_sample_work_free(sp_sample_work *w);
/* The draw of params with uniform u (temperature 0: inv_t 0, greedy). */
sp_sample_req sp_sample_req_of(const sp_sampling_params *p, double u);
/* The token sample_row.h's draw takes from logits[n_vocab] (work for n_vocab). */
int32_t sp_sample_row(const sp_sample_req *r, const float *logits, int64_t n_vocab,
                      sp_sample_work *work);

/* sp_sampler_new's checks of the parameters (SP_ERR_INVALID_ARG naming the bad one). */
sp_status sp_sampling_check(const sp_sampling_params *p, sp_error *err);

typedef struct sp_sampler sp_sampler;

sp_status sp_sampler_new(const sp_sampling_params *p, int64_t n_vocab, sp_sampler **out,
                         sp_error *err);
void sp_sampler_free(sp_sampler *s);
const sp_sampling_params *sp_sampler_params(const sp_sampler *s);

/* The distribution sampling draws from: probs[n_vocab], zero outside the kept set (the
 * kept weights of sample_row.h over their sum). */
void sp_sampler_dist(sp_sampler *s, const float *logits, double *probs);
/* The distribution of r's draw from logits[n_vocab] into probs (sp_sampler_dist's values);
 * false, probs unwritten, where it has no candidate or r is greedy. */
bool sp_sample_dist_row(const sp_sample_req *r, const float *logits, int64_t n_vocab,
                        sp_sample_work *work, double *probs);
/* sp_sampler_dist, and the token sp_sample_row draws from the same logits with uniform u
 * (one pass over the row). */
int32_t sp_sampler_dist_draw(sp_sampler *s, const float *logits, double *probs, double u);
/* sp_sample_row's token and r's distribution over logits[n_vocab] into probs, from one pass
 * over the row (where r is greedy or has no candidate: the argmax, probs one-hot there). */
int32_t sp_sample_row_dist(const sp_sample_req *r, const float *logits, int64_t n_vocab,
                           sp_sample_work *work, double *probs);
/* The groups' sums of lane sums (sample_row.h's order) into group[SP_SAMPLE_GROUPS]; returns
 * their total. */
double sp_sample_groups(const double *lane, double *group);
/* sample_row.h's draw over nonnegative values v[n] (the lane sums, x = u * total, the
 * three-level walk) with uniform u in [0, 1); -1 when they do not sum above 0. */
int32_t sp_sample_values(const double *v, int64_t n, double u);
/* Greedy when temperature is 0 (no random number used), else sp_sample_row with one
 * uniform from rng. */
int32_t sp_sampler_sample(sp_sampler *s, const float *logits, sp_rng *rng);

/* The uniform sp_sampler_uniform would give next, without taking it. */
double sp_sampler_peek_uniform(const sp_sampler *s);

#endif
