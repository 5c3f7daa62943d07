/* test_sampler.c: sp_sampler_dist (src/runtime/sampler.h) against a reference written
 * here with qsort (the sampler's former candidate sort): the distributions are equal bit
 * for bit over random logits drawn from few distinct values (many ties), with -0 and +0,
 * infinities and large magnitudes, vocabularies of 1 to 5000 and the warpers
 * (temperature, top-k, top-p, min-p) alone and together. The sampler ranks candidates
 * by descending logit, ties by ascending id: whatever sort it uses, this pins that order
 * and every sum taken in it. */
#include "test_util.h"
#include "runtime/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref_cand {
    float logit;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *a, const void *b)
{
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The warped distribution as the sampler computed it with qsort. */
static void ref_dist(const sp_sampling_params *p, const float *logits, int64_t V, double *probs)
{
    ref_cand *o = malloc((size_t)V * sizeof *o);
    double *w = malloc((size_t)V * sizeof *w);
    assert_non_null(o);
    assert_non_null(w);
    for (int64_t i = 0; i < V; i++)
        o[i] = (ref_cand){logits[i], (int32_t)i};
    qsort(o, (size_t)V, sizeof *o, ref_cmp);
    int64_t n = V;
    if (p->top_k > 0 && p->top_k < n) {
        int64_t keep = p->top_k;
        while (keep < n && o[keep].logit >= o[p->top_k - 1].logit)
            keep++;
        n = keep;
    }
    double inv_t = 1.0 / (double)p->temperature, mx = (double)o[0].logit * inv_t, sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += w[i] = exp((double)o[i].logit * inv_t - mx);
    for (int64_t i = 0; i < n; i++)
        w[i] /= sum;
    if (p->top_p < 1.0f) {
        double cut = 1.0 - (double)p->top_p, below = 0;
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
    if (p->min_p > 0.0f) {
        int64_t keep = 1;
        while (keep < n && w[keep] >= (double)p->min_p * w[0])
            keep++;
        n = keep;
    }
    sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += w[i];
    memset(probs, 0, (size_t)V * sizeof *probs);
    for (int64_t i = 0; i < n; i++)
        probs[o[i].id] = w[i] / sum;
    free(o);
    free(w);
}

static uint64_t rng_state = 12345;
static uint32_t next_u32(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Logits from `distinct` values (ties), with a few -0, +0 and, when allowed, +-inf. */
static void fill_logits(float *x, int64_t V, int distinct, bool inf)
{
    for (int64_t i = 0; i < V; i++) {
        uint32_t r = next_u32();
        x[i] = (float)((int)(r % (uint32_t)distinct) - distinct / 2) * 0.37f;
        if (r % 53 == 0)
            x[i] = (r & 1) ? -0.0f : 0.0f;
        if (r % 97 == 0)
            x[i] = (float)(r % 1000) * 1e4f;
        if (inf && r % 211 == 0)
            x[i] = -INFINITY;
    }
    if (inf && V > 3)
        x[next_u32() % (uint32_t)V] = INFINITY;
}

static void test_dist_equals_reference(void **state)
{
    (void)state;
    const int64_t vocabs[] = {1, 2, 5, 97, 4096, 5000};
    const sp_sampling_params warps[] = {
        {.temperature = 0.7f, .top_p = 0.95f},
        {.temperature = 1.0f, .top_p = 1.0f},
        {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f},
        {.temperature = 1.5f, .top_k = 3, .top_p = 1.0f},
        {.temperature = 0.3f, .top_p = 0.5f, .min_p = 0.05f},
        {.temperature = 2.0f, .top_p = 1.0f, .min_p = 0.2f},
    };
    float *x = malloc(5000 * sizeof *x);
    double *a = malloc(5000 * sizeof *a), *b = malloc(5000 * sizeof *b);
    assert_non_null(x);
    assert_non_null(a);
    assert_non_null(b);
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++)
        for (size_t w = 0; w < sizeof warps / sizeof *warps; w++)
            for (int rep = 0; rep < 12; rep++) {
                int64_t V = vocabs[v];
                /* infinities only where the reference is defined (one +inf, no +inf ties) */
                fill_logits(x, V, rep % 3 == 0 ? 3 : 1 + rep * 40, rep % 4 == 1);
                sp_sampler *s;
                assert_int_equal(sp_sampler_new(&warps[w], V, &s, NULL), SP_OK);
                sp_sampler_dist(s, x, a);
                sp_sampler_free(s);
                ref_dist(&warps[w], x, V, b);
                assert_memory_equal(a, b, (size_t)V * sizeof *a);
            }
    free(x);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dist_equals_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
