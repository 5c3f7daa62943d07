/* sampler.c: warpers, distributions and seeded draws (see sampler.h). */
#include "runtime/sampler.h"
#include "kernels/cpu/cpu_isa.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef SP_HAVE_AVX2_KERNELS
/* kernels/cpu/sample_avx2.c: the weights of a row whose candidates are all its non-NaN
 * logits, four at a time with the scalar bits. */
void sp_sample_weights_avx2(const float *l, int64_t V, float lmax, double inv_t, double m,
                            double *w);
#endif

struct sp_sampler {
    sp_sampling_params p;
    int64_t n_vocab;
    sp_sample_work work; /* the draw's arrays (sample_row.h's arithmetic) */
    sp_rng rng;          /* the public sp_sampler_next's own stream, seeded from p.seed */
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

sp_sampling_params sp_sampling_default_params(void)
{
    sp_sampling_params p = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                            .seed = 0};
    return p;
}

sp_status sp_sampling_check(const sp_sampling_params *p, sp_error *err)
{
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return sp_err(err, SP_ERR_INVALID_ARG, "temperature %g must be >= 0", p->temperature);
    if (p->top_k < 0)
        return sp_err(err, SP_ERR_INVALID_ARG, "top-k %d must be >= 0", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return sp_err(err, SP_ERR_INVALID_ARG, "top-p %g must be in (0, 1]", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return sp_err(err, SP_ERR_INVALID_ARG, "min-p %g must be in [0, 1]", p->min_p);
    return SP_OK;
}

sp_status sp_sampler_new(const sp_sampling_params *p, int64_t n_vocab, sp_sampler **out,
                         sp_error *err)
{
    *out = NULL;
    sp_status st = sp_sampling_check(p, err);
    if (st != SP_OK)
        return st;
    sp_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return sp_err(err, SP_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    sp_rng_seed(&s->rng, p->seed);
    if (sp_sample_work_init(&s->work, n_vocab) != SP_OK) {
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
    sp_sample_work_free(&s->work);
    free(s);
}

const sp_sampling_params *sp_sampler_params(const sp_sampler *s) { return &s->p; }

sp_status sp_sample_work_init(sp_sample_work *w, int64_t n_vocab)
{
    memset(w, 0, sizeof *w);
    size_t n = n_vocab > 0 ? (size_t)n_vocab : 1;
    w->keys = malloc(n * sizeof *w->keys);
    w->spare = malloc(n * sizeof *w->spare);
    w->rank = malloc(n * sizeof *w->rank);
    w->w = malloc(n * sizeof *w->w);
    if (!w->keys || !w->spare || !w->rank || !w->w) {
        sp_sample_work_free(w);
        return SP_ERR_NOMEM;
    }
    return SP_OK;
}

void sp_sample_work_free(sp_sample_work *w)
{
    free(w->keys);
    free(w->spare);
    free(w->rank);
    free(w->w);
    memset(w, 0, sizeof *w);
}

sp_sample_req sp_sample_req_of(const sp_sampling_params *p, double u)
{
    sp_sample_req r = {.u = u, .top_p = p->top_p, .min_p = p->min_p, .top_k = p->top_k};
    r.inv_t = p->temperature > 0.0f ? 1.0 / (double)p->temperature : 0.0;
    return r;
}

/* Sorts keys[0, n) (rank << 32 | id, in ascending id order) by their upper 32 bits:
 * LSD radix in three stable passes of 11, 11 and 10 bits, so equal ranks keep ascending
 * ids. */
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

/* sample_row.h's fixed order of a sum over ids: lanes, then groups, then the total;
 * lane[] and group[] receive the partial sums. */
double sp_sample_groups(const double *lane, double *group)
{
    double total = 0.0;
    for (int g = 0; g < SP_SAMPLE_GROUPS; g++) {
        double t = 0.0;
        for (int c = 0; c < SP_SAMPLE_GROUP; c++)
            t = t + lane[g * SP_SAMPLE_GROUP + c];
        group[g] = t;
        total = total + t;
    }
    return total;
}

static double lsum(const double *w, int64_t V, double *lane, double *group)
{
    for (int64_t c = 0; c < SP_SAMPLE_LANES; c++)
        lane[c] = 0.0;
    for (int64_t i0 = 0; i0 < V; i0 += SP_SAMPLE_LANES) { /* each lane's ids ascending */
        const int64_t n = V - i0 < SP_SAMPLE_LANES ? V - i0 : SP_SAMPLE_LANES;
        for (int64_t c = 0; c < n; c++)
            lane[c] = lane[c] + w[i0 + c];
    }
    return sp_sample_groups(lane, group);
}

/* The first index of the maximum (sp_argmax's scan). */
int32_t sp_argmax(const float *logits, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return (int32_t)best;
}

/* The k-th smallest of the ranks rank[V] that are <= lim (1-based, k <= their count; NaN's
 * rank is above any lim): a radix select in three counting passes (11, 11 and 10 bits). */
static uint32_t select_rank(const uint32_t *rank, int64_t V, uint32_t lim, int64_t k)
{
    static const int shift[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
    uint32_t prefix = 0, hi = 0;
    for (int pass = 0; pass < 3; pass++) {
        uint32_t count[2048] = {0};
        const uint32_t mask = (1u << bits[pass]) - 1u;
        for (int64_t i = 0; i < V; i++) {
            const uint32_t r = rank[i];
            if (r <= lim && (r & hi) == prefix)
                count[(r >> shift[pass]) & mask]++;
        }
        uint32_t d = 0;
        while (k > (int64_t)count[d]) /* k <= the bucket's total: d stays in range */
            k -= count[d++];
        prefix |= d << shift[pass];
        hi |= mask << shift[pass];
    }
    return prefix;
}

/* top-p's cut: walking the candidates (rank <= kth) in rank order from the top, the last one
 * the sum of the weights before which is < target. Only a prefix of the order is sorted:
 * the candidates in the buckets of their rank's top 11 bits up to the one where the
 * buckets' masses (summed in any order: an estimate) pass the target, and one more; where
 * the exact walk runs past them (the estimate was short), every candidate. The same walk
 * either way. */
static uint64_t head_cut(int64_t V, const double *w, uint32_t kth, double target,
                         sp_sample_work *wk)
{
    const uint32_t *rank = wk->rank;
    double mass[2048] = {0};
    for (int64_t i = 0; i < V; i++)
        if (w[i] > 0.0)
            mass[rank[i] >> 21] += w[i];
    double cum = 0.0;
    int b = 0;
    while (b < 2047 && cum + mass[b] < target)
        cum += mass[b++];
    for (int round = 0; round < 2; round++) {
        /* gather ranks < below (all candidates in the second round) */
        const uint32_t below = round == 0 && b < 2046 ? (uint32_t)(b + 2) << 21 : 0xffffffffu;
        int64_t n = 0;
        for (int64_t i = 0; i < V; i++) {
            const uint32_t r = rank[i];
            if (r <= kth && r < below)
                wk->keys[n++] = (uint64_t)r << 32 | (uint32_t)i;
        }
        radix_sort_keys(wk->keys, wk->spare, n);
        double acc = 0.0;
        uint64_t cut = wk->keys[0];
        int64_t j = 0;
        for (; j < n; j++) {
            if (!(acc < target))
                break;
            cut = wk->keys[j];
            acc = acc + w[(uint32_t)wk->keys[j]];
        }
        if (n > 0 && (below == 0xffffffffu || !(j == n && acc < target)))
            return cut;
    }
    return 0; /* not reached: the second round gathers every candidate, the top among them */
}

/* The kept weights of a sampled row (r->inv_t > 0) in wk->w (0 outside the kept set) and
 * their sum in sample_row.h's order; 0 when no logit is a candidate (all NaN). Top-k's
 * threshold by a radix select, only top-p's head sorted (as the CUDA kernels,
 * cuda_sample.cu, though they bound the head by a count where this bounds it by mass). */
static double kept_weights(const sp_sample_req *r, const float *l, int64_t V, sp_sample_work *wk,
                           double *lane, double *group)
{
    double *w = wk->w;
    uint32_t *rank = wk->rank;
    int64_t n = 0; /* non-NaN logits */
    uint32_t kth = 0xfffffffeu, top = 0xffffffffu;
    for (int64_t i = 0; i < V; i++) {
        const uint32_t k = rank[i] = sp_sample_rank(l[i]);
        top = k < top ? k : top;
        n += k != 0xffffffffu;
    }
    if (n == 0)
        return 0.0;
    if (r->top_k > 0 && r->top_k < n)
        kth = select_rank(rank, V, kth, r->top_k);
    const float lmax = sp_sample_unrank(top);
    const double m = (double)lmax * r->inv_t;
#ifdef SP_HAVE_AVX2_KERNELS
    if (kth == 0xfffffffeu && sp_isa_active() >= SP_ISA_AVX2)
        sp_sample_weights_avx2(l, V, lmax, r->inv_t, m, w);
    else
#endif
        for (int64_t i = 0; i < V; i++)
            w[i] = rank[i] <= kth ? sp_sample_weight(l[i], lmax, r->inv_t, m) : 0.0;
    if (r->top_p < 1.0f) {
        const double target = (double)r->top_p * lsum(w, V, lane, group);
        const uint64_t cut = head_cut(V, w, kth, target, wk);
        for (int64_t i = 0; i < V; i++)
            if (w[i] > 0.0 && !sp_sample_before(rank[i], i, (uint32_t)(cut >> 32),
                                                (int64_t)(uint32_t)cut))
                w[i] = 0.0;
    }
    if (r->min_p > 0.0f)
        for (int64_t i = 0; i < V; i++)
            if (w[i] < (double)r->min_p)
                w[i] = 0.0;
    return lsum(w, V, lane, group);
}

/* The three-level walk of sample_row.h to x over w[V] with its lane and group sums
 * (lsum's). */
static int32_t walk(const double *lane, const double *group, const double *w, int64_t V, double x)
{
    double acc = 0.0;
    const int64_t g = sp_sample_walk(group, SP_SAMPLE_GROUPS, 1, x, 0.0, &acc);
    const int64_t c = g * SP_SAMPLE_GROUP +
                      sp_sample_walk(lane + g * SP_SAMPLE_GROUP, SP_SAMPLE_GROUP, 1, x, acc, &acc);
    const int64_t n = (V - c + SP_SAMPLE_LANES - 1) / SP_SAMPLE_LANES;
    return (int32_t)(c + SP_SAMPLE_LANES * sp_sample_walk(w + c, n, SP_SAMPLE_LANES, x, acc, &acc));
}

int32_t sp_sample_row(const sp_sample_req *r, const float *logits, int64_t V, sp_sample_work *wk)
{
    if (!(r->inv_t > 0.0))
        return sp_argmax(logits, V);
    double lane[SP_SAMPLE_LANES], group[SP_SAMPLE_GROUPS];
    const double total = kept_weights(r, logits, V, wk, lane, group);
    if (!(total > 0.0))
        return 0;
    return walk(lane, group, wk->w, V, r->u * total);
}

bool sp_sample_dist_row(const sp_sample_req *r, const float *logits, int64_t V, sp_sample_work *wk,
                        double *probs)
{
    double lane[SP_SAMPLE_LANES], group[SP_SAMPLE_GROUPS];
    const double total = r->inv_t > 0.0 ? kept_weights(r, logits, V, wk, lane, group) : 0.0;
    if (!(total > 0.0))
        return false;
    for (int64_t i = 0; i < V; i++)
        probs[i] = wk->w[i] / total;
    return true;
}

int32_t sp_sample_row_dist(const sp_sample_req *r, const float *logits, int64_t V,
                           sp_sample_work *wk, double *probs)
{
    double lane[SP_SAMPLE_LANES], group[SP_SAMPLE_GROUPS];
    const double total = r->inv_t > 0.0 ? kept_weights(r, logits, V, wk, lane, group) : 0.0;
    if (!(total > 0.0)) { /* greedy, or every logit NaN: the greedy scan's pick */
        const int32_t id = sp_argmax(logits, V);
        memset(probs, 0, (size_t)V * sizeof *probs);
        probs[id] = 1.0;
        return id;
    }
    for (int64_t i = 0; i < V; i++)
        probs[i] = wk->w[i] / total;
    return walk(lane, group, wk->w, V, r->u * total);
}

int32_t sp_sampler_dist_draw(sp_sampler *s, const float *logits, double *probs, double u)
{
    const sp_sample_req r = sp_sample_req_of(&s->p, u);
    return sp_sample_row_dist(&r, logits, s->n_vocab, &s->work, probs);
}

void sp_sampler_dist(sp_sampler *s, const float *logits, double *probs)
{
    (void)sp_sampler_dist_draw(s, logits, probs, 0.0);
}

int32_t sp_sample_values(const double *v, int64_t n, double u)
{
    double lane[SP_SAMPLE_LANES], group[SP_SAMPLE_GROUPS];
    const double total = lsum(v, n, lane, group);
    return total > 0.0 ? walk(lane, group, v, n, u * total) : -1;
}

int32_t sp_sampler_sample(sp_sampler *s, const float *logits, sp_rng *rng)
{
    if (s->p.temperature == 0.0f)
        return sp_argmax(logits, s->n_vocab);
    sp_sample_req r = sp_sample_req_of(&s->p, sp_rng_uniform(rng));
    return sp_sample_row(&r, logits, s->n_vocab, &s->work);
}

double sp_sampler_uniform(sp_sampler *s) { return sp_rng_uniform(&s->rng); }

double sp_sampler_peek_uniform(const sp_sampler *s)
{
    sp_rng r = s->rng;
    return sp_rng_uniform(&r);
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
