/* test_sampler.c: the sampler (src/runtime/sampler.h) against the draw that
 * kernels/sample_row.h defines, written again here the plain way (qsort for the candidate
 * order, each lane's sum by its own strided loop, the walk by prefix sums): the
 * distributions and the drawn tokens are equal bit for bit over random logits drawn from
 * few distinct values (many ties), with -0 and +0, infinities, NaN and large magnitudes,
 * vocabularies of 1 to 5000 and the warpers (temperature, top-k, top-p, min-p) alone and
 * together, at every instruction-set level the machine has. And against exact arithmetic: sp_sample_exp within 4 ulp of libm's exp, and the
 * temperature-only distribution within 1e-13 of softmax in long double. */
#include "test_util.h"
#include "kernels/cpu/cpu_isa.h"
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
    float lx = x->logit == 0.0f ? 0.0f : x->logit, ly = y->logit == 0.0f ? 0.0f : y->logit;
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* sample_row.h's fixed sum: lane c over ids c, c + 1024, ..; groups of 32 lanes; total. */
static double ref_lsum(const double *w, int64_t V, double lane[1024], double group[32])
{
    double total = 0.0;
    for (int c = 0; c < 1024; c++) {
        lane[c] = 0.0;
        for (int64_t i = c; i < V; i += 1024)
            lane[c] += w[i];
    }
    for (int g = 0; g < 32; g++) {
        group[g] = 0.0;
        for (int c = 0; c < 32; c++)
            group[g] += lane[32 * g + c];
        total += group[g];
    }
    return total;
}

/* The kept weights as sample_row.h defines them (w[V]); returns their sum. */
static double ref_weights(const sp_sampling_params *p, const float *logits, int64_t V, double *w,
                          double lane[1024], double group[32])
{
    ref_cand *o = malloc((size_t)V * sizeof *o);
    assert_non_null(o);
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
        if (!isnan(logits[i]))
            o[n++] = (ref_cand){logits[i], (int32_t)i};
    memset(w, 0, (size_t)V * sizeof *w);
    if (n == 0) {
        free(o);
        return 0.0;
    }
    qsort(o, (size_t)n, sizeof *o, ref_cmp);
    int64_t keep = n;
    if (p->top_k > 0 && p->top_k < n) {
        keep = p->top_k;
        while (keep < n && o[keep].logit >= o[p->top_k - 1].logit)
            keep++;
    }
    const double inv_t = 1.0 / (double)p->temperature;
    const float lmax = o[0].logit;
    for (int64_t j = 0; j < keep; j++) {
        float l = o[j].logit;
        double z = (double)l * inv_t - (double)lmax * inv_t;
        w[o[j].id] = l == lmax ? 1.0 : !(z > -700.0) ? 0.0 : sp_sample_exp(z);
    }
    if (p->top_p < 1.0f) {
        const double target = (double)p->top_p * ref_lsum(w, V, lane, group);
        double before = 0.0;
        int64_t j = 0;
        while (j < keep && before < target)
            before += w[o[j++].id];
        for (; j < keep; j++)
            w[o[j].id] = 0.0;
    }
    for (int64_t i = 0; i < V; i++)
        if (w[i] < (double)p->min_p)
            w[i] = 0.0;
    free(o);
    return ref_lsum(w, V, lane, group);
}

/* The level walk: the first positive a[j] whose running sum passes x, else the last. */
static int64_t ref_walk(const double *a, int64_t n, int64_t stride, double x, double *acc)
{
    int64_t last = -1;
    double last_acc = *acc, run = *acc;
    for (int64_t j = 0; j < n; j++) {
        if (a[j * stride] <= 0.0)
            continue;
        if (x < run + a[j * stride]) {
            *acc = run;
            return j;
        }
        last = j;
        last_acc = run;
        run += a[j * stride];
    }
    *acc = last_acc;
    return last;
}

static int32_t ref_draw(const sp_sampling_params *p, const float *logits, int64_t V, double u,
                        double *w)
{
    double lane[1024], group[32];
    double total = ref_weights(p, logits, V, w, lane, group);
    if (!(total > 0.0))
        return 0;
    double x = u * total, acc = 0.0;
    int64_t g = ref_walk(group, 32, 1, x, &acc);
    int64_t c = 32 * g + ref_walk(lane + 32 * g, 32, 1, x, &acc);
    return (int32_t)(c + 1024 * ref_walk(w + c, (V - c + 1023) / 1024, 1024, x, &acc));
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
        if (inf && r % 307 == 0)
            x[i] = NAN;
    }
    if (inf && V > 3)
        x[next_u32() % (uint32_t)V] = INFINITY;
}

/* At the level in use (the weights four at a time from AVX2 up). */
static void dist_equals_reference(void)
{
    const int64_t vocabs[] = {1, 2, 5, 97, 1025, 4096, 5000};
    const sp_sampling_params warps[] = {
        {.temperature = 0.7f, .top_p = 0.95f},
        {.temperature = 1.0f, .top_p = 1.0f},
        {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f},
        {.temperature = 1.5f, .top_k = 3, .top_p = 1.0f},
        {.temperature = 0.3f, .top_p = 0.5f, .min_p = 0.05f},
        {.temperature = 2.0f, .top_p = 1.0f, .min_p = 0.2f},
        {.temperature = 1e-3f, .top_k = 1000, .top_p = 0.99f, .min_p = 0.01f},
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
                fill_logits(x, V, rep % 3 == 0 ? 3 : 1 + rep * 40, rep % 4 == 1);
                if (rep == 11) /* a ramp across exp's range and its cut at -700 */
                    for (int64_t i = 0; i < V; i++)
                        x[i] = -(float)i * (750.0f * warps[w].temperature / (float)V);
                sp_sampler *s;
                assert_int_equal(sp_sampler_new(&warps[w], V, &s, NULL), SP_OK);
                sp_sampler_dist(s, x, a);
                double lane[1024], group[32];
                double total = ref_weights(&warps[w], x, V, b, lane, group);
                for (int64_t i = 0; i < V && total > 0.0; i++)
                    b[i] /= total;
                if (total > 0.0)
                    assert_memory_equal(a, b, (size_t)V * sizeof *a);
                for (int k = 0; k < 16; k++) { /* draws, u at both ends too */
                    double u = k == 0 ? 0.0 : k == 1 ? 1.0 - 0x1p-53 : (double)next_u32() / 4294967296.0;
                    sp_sample_req r = sp_sample_req_of(&warps[w], u);
                    sp_sample_work wk;
                    assert_int_equal(sp_sample_work_init(&wk, V), SP_OK);
                    int32_t got = sp_sample_row(&r, x, V, &wk);
                    sp_sample_work_free(&wk);
                    assert_int_equal(got, ref_draw(&warps[w], x, V, u, b));
                    if (total > 0.0) /* the draw lands on a kept token */
                        assert_true(b[got] > 0.0);
                }
                sp_sampler_free(s);
            }
    free(x);
    free(a);
    free(b);
}

/* At every level this machine has: the weights' vector code gives the scalar bits. */
static void test_dist_equals_reference(void **state)
{
    (void)state;
    const sp_isa best = sp_isa_detected();
    for (int isa = SP_ISA_GENERIC; isa <= (int)best; isa++) {
        assert_int_equal(sp_isa_set((sp_isa)isa), isa);
        dist_equals_reference();
    }
    sp_isa_set(best);
}

/* sp_sample_exp against libm over (-700, 0], and a temperature-only distribution against
 * softmax computed in long double. */
static void test_exp_and_softmax(void **state)
{
    (void)state;
    double worst = 0.0;
    for (int i = 0; i < 200000; i++) {
        double z = -700.0 * (double)next_u32() / 4294967296.0;
        if (i < 100)
            z = -(double)i * 0.125;
        double e = exp(z), got = sp_sample_exp(z);
        double ulps = fabs(got - e) / (nextafter(e, INFINITY) - e);
        worst = ulps > worst ? ulps : worst;
    }
    assert_true(worst <= 4.0);
    const int64_t V = 3000;
    float *x = malloc(V * sizeof *x);
    double *p = malloc(V * sizeof *p);
    assert_non_null(x);
    assert_non_null(p);
    for (int64_t i = 0; i < V; i++)
        x[i] = (float)((double)next_u32() / 4294967296.0 * 30.0 - 15.0);
    sp_sampling_params sp = {.temperature = 0.8f, .top_p = 1.0f};
    sp_sampler *s;
    assert_int_equal(sp_sampler_new(&sp, V, &s, NULL), SP_OK);
    sp_sampler_dist(s, x, p);
    long double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < V; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int64_t i = 0; i < V; i++)
        sum += expl(((long double)x[i] - mx) / (long double)0.8f);
    for (int64_t i = 0; i < V; i++) {
        long double e = expl(((long double)x[i] - mx) / (long double)0.8f) / sum;
        assert_true(fabsl((long double)p[i] - e) <= 1e-13L * e + 1e-300L);
    }
    sp_sampler_free(s);
    free(x);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dist_equals_reference),
        cmocka_unit_test(test_exp_and_softmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
