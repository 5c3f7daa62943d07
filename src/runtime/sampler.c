/* sampler.c: warpers, distributions and seeded draws (see sampler.h). */
#include "runtime/sampler.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct sp_sampler {
    sp_sampling_params p;
    int64_t n_vocab;
    cand *order;   /* candidates sorted by descending logit */
    uint64_t *keys, *spare; /* [n_vocab] sort keys (rank_key << 32 | id) and the radix buffer */
    double *probs; /* candidate weights, parallel to order */
    double *dist;  /* [n_vocab] distribution for sp_sampler_sample */
    sp_rng rng;    /* the public sp_sampler_next's own stream, seeded from p.seed */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void sp_rng_seed(sp_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sp_rng_next(sp_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double sp_rng_uniform(sp_rng *r)
{
    return (double)(sp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

int32_t sp_argmax(const float *logits, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return (int32_t)best;
}

sp_sampling_params sp_sampling_default_params(void)
{
    sp_sampling_params p = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                            .seed = 0};
    return p;
}

sp_status sp_sampler_new(const sp_sampling_params *p, int64_t n_vocab, sp_sampler **out,
                         sp_error *err)
{
    *out = NULL;
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return sp_err(err, SP_ERR_INVALID_ARG, "temperature %g must be >= 0", p->temperature);
    if (p->top_k < 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "top-k %d must be >= 0", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return sp_err(err, SP_ERR_INVALID_ARG, "top-p %g must be in (0, 1]", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return sp_err(err, SP_ERR_INVALID_ARG, "min-p %g must be in [0, 1]", p->min_p);
    sp_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    sp_rng_seed(&s->rng, p->seed);
    s->order = malloc((size_t)n_vocab * sizeof *s->order);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    s->dist = malloc((size_t)n_vocab * sizeof *s->dist);
    s->keys = malloc((size_t)n_vocab * sizeof *s->keys);
    s->spare = malloc((size_t)n_vocab * sizeof *s->spare);
    if (!s->order || !s->probs || !s->dist || !s->keys || !s->spare) {
        sp_sampler_free(s);
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    }
    *out = s;
    return SP_OK;
}

void sp_sampler_free(sp_sampler *s)
{
    if (!s)
        return;
    free(s->order);
    free(s->probs);
    free(s->dist);
    free(s->keys);
    free(s->spare);
    free(s);
}

const sp_sampling_params *sp_sampler_params(const sp_sampler *s) { return &s->p; }

/* The order of the candidates: descending logit, ties (and -0 vs +0) by ascending id;
 * NaN last. rank_key maps a logit to 32 bits whose ascending order is that logit order. */
static uint32_t rank_key(float f)
{
    if (f != f)
        return UINT32_MAX;
    if (f == 0.0f)
        f = 0.0f; /* -0 ranks as +0 */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~ascending;
}

/* Sorts keys[0, n) (rank_key << 32 | id, in ascending id order) by their upper 32 bits:
 * LSD radix in three stable passes of 11, 11 and 10 bits, so equal keys keep ascending
 * ids. About 30 operations per candidate where qsort took ~12 comparator calls, which at
 * temperature > 0 made sorting 4096 logits a quarter of a decode step's time. */
static void radix_sort_keys(uint64_t *keys, uint64_t *spare, int64_t n)
{
    static const int shift[3] = {32, 43, 54};
    uint64_t *src = keys, *dst = spare;
    for (int pass = 0; pass < 3; pass++) {
        uint32_t count[2048] = {0};
        for (int64_t i = 0; i < n; i++)
            count[(src[i] >> shift[pass]) & 2047]++;
        uint32_t at = 0;
        for (int b = 0; b < 2048; b++) {
            uint32_t c = count[b];
            count[b] = at;
            at += c;
        }
        for (int64_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift[pass]) & 2047]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != keys) /* three passes end in spare */
        memcpy(keys, src, (size_t)n * sizeof *keys);
}

/* Sorts candidate ids by descending logit; with top_k, only the k best (and ties). */
static int64_t sorted_candidates(sp_sampler *s, const float *logits)
{
    int64_t n = s->n_vocab;
    for (int64_t i = 0; i < n; i++)
        s->keys[i] = (uint64_t)rank_key(logits[i]) << 32 | (uint32_t)i;
    radix_sort_keys(s->keys, s->spare, n);
    for (int64_t i = 0; i < n; i++) {
        int32_t id = (int32_t)(uint32_t)s->keys[i];
        s->order[i].logit = logits[id];
        s->order[i].id = id;
    }
    if (s->p.top_k > 0 && s->p.top_k < n) {
        /* transformers removes logits strictly below the k-th largest: ties stay */
        float kth = s->order[s->p.top_k - 1].logit;
        int64_t keep = s->p.top_k;
        while (keep < n && s->order[keep].logit >= kth)
            keep++;
        n = keep;
    }
    return n;
}

void sp_sampler_dist(sp_sampler *s, const float *logits, double *probs)
{
    int64_t V = s->n_vocab;
    memset(probs, 0, (size_t)V * sizeof *probs);
    if (s->p.temperature == 0.0f) {
        probs[sp_argmax(logits, V)] = 1.0;
        return;
    }
    int64_t n = sorted_candidates(s, logits);
    double inv_t = 1.0 / (double)s->p.temperature;
    double mx = (double)s->order[0].logit * inv_t, sum = 0;
    double *w = s->probs;
    for (int64_t i = 0; i < n; i++) {
        w[i] = exp((double)s->order[i].logit * inv_t - mx);
        sum += w[i];
    }
    for (int64_t i = 0; i < n; i++)
        w[i] /= sum;
    if (s->p.top_p < 1.0f) {
        /* keep the smallest prefix (by descending probability) whose mass reaches top_p:
         * transformers drops tokens whose ascending cumulative mass is <= 1 - top_p */
        double cut = 1.0 - (double)s->p.top_p, below = 0;
        int64_t keep = n;
        for (int64_t i = n - 1; i > 0; i--) {
            below += w[i];
            if (below <= cut)
                keep = i;
            else
                break;
        }
        n = keep;
    }
    if (s->p.min_p > 0.0f) {
        double thr = (double)s->p.min_p * w[0];
        int64_t keep = 1;
        while (keep < n && w[keep] >= thr)
            keep++;
        n = keep;
    }
    sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += w[i];
    for (int64_t i = 0; i < n; i++)
        probs[s->order[i].id] = w[i] / sum;
}

int32_t sp_sample_probs(const double *probs, int64_t n, double u)
{
    double c = 0;
    int64_t last = -1;
    for (int64_t i = 0; i < n; i++) {
        if (probs[i] <= 0)
            continue;
        c += probs[i];
        last = i;
        if (u < c)
            return (int32_t)i;
    }
    return (int32_t)(last >= 0 ? last : 0); /* rounding left u just above the total */
}

int32_t sp_sampler_sample(sp_sampler *s, const float *logits, sp_rng *rng)
{
    if (s->p.temperature == 0.0f)
        return sp_argmax(logits, s->n_vocab);
    sp_sampler_dist(s, logits, s->dist);
    return sp_sample_probs(s->dist, s->n_vocab, sp_rng_uniform(rng));
}

int32_t sp_sampler_next(sp_sampler *s, const float *logits)
{
    return sp_sampler_sample(s, logits, &s->rng);
}

/* Whether (lp_a, a) ranks before (lp_b, b): higher log-probability, then lower id. */
static bool ranks_before(float lp_a, int32_t a, float lp_b, int32_t b)
{
    return lp_a > lp_b || (lp_a == lp_b && a < b);
}

void sp_logprobs(const float *logits, int64_t n, int32_t token, float *token_lp, int32_t n_top,
                 int32_t *top_ids, float *top_lps)
{
    double mx = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    for (int64_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    if (token_lp)
        *token_lp = token >= 0 && token < n ? (float)((double)logits[token] - lse) : -INFINITY;
    if (n_top > n)
        n_top = (int32_t)n;
    int32_t filled = 0; /* insertion into a sorted top list: O(n * n_top), n_top <= 20 */
    for (int64_t i = 0; i < n && n_top > 0; i++) {
        float lp = (float)((double)logits[i] - lse);
        if (filled == n_top && !ranks_before(lp, (int32_t)i, top_lps[n_top - 1], top_ids[n_top - 1]))
            continue;
        int32_t j = filled < n_top ? filled++ : n_top - 1;
        while (j > 0 && ranks_before(lp, (int32_t)i, top_lps[j - 1], top_ids[j - 1])) {
            top_lps[j] = top_lps[j - 1];
            top_ids[j] = top_ids[j - 1];
            j--;
        }
        top_lps[j] = lp;
        top_ids[j] = (int32_t)i;
    }
}
