/* test_cuda_spec.c: speculative sampling's verification on the device (cuda_spec_verify.cu)
 * against the host's rule (runtime/spec_verify.c, sp_spec_verify_rows): the same count of
 * accepted drafts and the same next token, bit for bit, for target rows with draft rows
 * near them (drafts drawn from the draft's rows: acceptances, rejections with their
 * residual draws, and bonus draws) and for one-hot drafts (the target's top token or any
 * token), 1 to SP_SPEC_DEV_K drafts, vocabularies from 3 to gpt-oss's 201,088, every warper,
 * acceptance uniforms at 0, random and just below 1. A result the device leaves to the host
 * (-1) is allowed only rarely; the same launch twice gives the same result, and the draws'
 * own launches (spc_sample_rows) run on the same scratch in between.
 * Without a GPU every test skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_TEST_SEED 0x7c01d3e55a9b2f41ull
#include "cuda_test_harness.h"
#include "runtime/sampler.h"
#include "runtime/spec_verify.h"

static void *g_scratch;
static size_t g_bytes;

/* The scratch both kinds of launch share (as the backend keeps one), zeroed once. */
static void scratch_once(void)
{
    if (g_scratch)
        return;
    const size_t a = spc_sample_scratch_bytes(SPC_SAMPLE_MAX_ROWS, 201088);
    const size_t b = spc_spec_scratch_bytes(201088);
    assert_true(a > 0 && b > 0);
    g_bytes = a > b ? a : b;
    g_scratch = dev_alloc(g_bytes);
    CK(spc_memset(g_stream, g_scratch, 0, g_bytes));
}

static double uniform(int k)
{
    return k == 0 ? 0.0 : k == 1 ? 1.0 - 0x1p-53 : (double)(rnd32() >> 1) / 2147483648.0;
}

/* A draw launch on the scratch between verifications (its counters must stay at 0). */
static void draw_between(const float *dx, int64_t V, const sp_sample_req *dr, int rows)
{
    int32_t *di = dev_alloc((size_t)rows * sizeof(int32_t));
    CK(spc_sample_rows(g_stream, dx, rows, V, V, dr, di, g_scratch, g_bytes));
    spc_free(di);
}

typedef struct counts {
    int cases, accepted_all, rejected, left;
} counts;

/* One verification of m drafts: the device's result against the host's. x holds the
 * target's m + 1 rows, then (unless onehot) the draft's m rows, which go to the device in
 * an allocation of their own (as a draft session's kept rows are). */
static void check_case(const float *x, int64_t m, int64_t V, bool onehot, const sp_sample_req *reqs,
                       const sp_spec_args *a, counts *c)
{
    const int64_t rows = onehot ? m + 1 : 2 * m + 1;
    const float *xd = onehot ? NULL : x + (m + 1) * V;
    float *dt = dev_from(x, (size_t)((m + 1) * V) * sizeof(float));
    float *dd = onehot ? NULL : dev_from(xd, (size_t)(m * V) * sizeof(float));
    sp_sample_req *dr = dev_from(reqs, (size_t)rows * sizeof *reqs);
    sp_spec_args *da = dev_from(a, sizeof *a);
    int32_t *dout = dev_alloc(2 * sizeof(int32_t));
    int32_t dev[2], again[2], want[2];
    CK(spc_spec_verify(g_stream, dt, dd, m, V, dr, da, dout, g_scratch, g_bytes));
    to_host(dev, dout, sizeof dev);
    draw_between(dt, V, dr, (int)(m + 1));
    CK(spc_spec_verify(g_stream, dt, dd, m, V, dr, da, dout, g_scratch, g_bytes));
    to_host(again, dout, sizeof again);
    assert_memory_equal(dev, again, sizeof dev);
    assert_int_equal(sp_spec_verify_rows(x, xd, m, V, reqs, a, want), SP_OK);
    c->cases++;
    if (dev[0] < 0) {
        c->left++;
    } else if (dev[0] != want[0] || dev[1] != want[1]) {
        fail_msg("V %lld, m %lld, %s, inv_t %g top_k %d top_p %g min_p %g, v %.17g: device (%d, %d), "
                 "host (%d, %d)", (long long)V, (long long)m, onehot ? "one-hot" : "draft rows",
                 reqs[0].inv_t, reqs[0].top_k, (double)reqs[0].top_p, (double)reqs[0].min_p, a->v,
                 dev[0], dev[1], want[0], want[1]);
    } else {
        c->accepted_all += want[0] == m;
        c->rejected += want[0] < m;
    }
    spc_free(dt);
    if (dd)
        spc_free(dd);
    spc_free(dr);
    spc_free(da);
    spc_free(dout);
}

static void test_verify_equals_host(void **state)
{
    (void)state;
    NEED_GPU();
    scratch_once();
    const int64_t vocabs[] = {3, 1000, 1025, 32000, 201088};
    const struct {
        float t, top_p, min_p;
        int32_t top_k;
    } warps[] = {
        {1.0f, 1.0f, 0.0f, 0}, {0.7f, 0.95f, 0.0f, 0}, {0.6f, 0.8f, 0.0f, 20},
        {1.5f, 1.0f, 0.0f, 3}, {0.3f, 0.5f, 0.05f, 0}, {2.0f, 1.0f, 0.2f, 0},
    };
    const int NW = (int)(sizeof warps / sizeof *warps);
    counts c = {0};
    sp_sample_work wk;
    assert_int_equal(sp_sample_work_init(&wk, 201088), SP_OK);
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++) {
        const int64_t V = vocabs[vi];
        for (int rep = 0; rep < (V > 50000 ? 6 : 14); rep++) {
            const int64_t m = 1 + rnd32() % SP_SPEC_DEV_K;
            const bool onehot = rep % 4 == 3;
            const int w = rep % NW;
            const sp_sampling_params p = {.temperature = warps[w].t, .top_k = warps[w].top_k,
                                          .top_p = warps[w].top_p, .min_p = warps[w].min_p};
            const int64_t rows = onehot ? m + 1 : 2 * m + 1;
            float *x = malloc((size_t)(rows * V) * sizeof *x);
            sp_sample_req *reqs = calloc((size_t)rows, sizeof *reqs);
            assert_non_null(x);
            assert_non_null(reqs);
            /* target rows peaked (spread 6) or flatter (2); draft rows the target's plus noise */
            const float spread = rep % 2 ? 6.0f : 2.0f;
            for (int64_t r = 0; r <= m; r++)
                for (int64_t i = 0; i < V; i++)
                    x[r * V + i] = frand() * spread;
            for (int64_t r = 0; !onehot && r < m; r++)
                for (int64_t i = 0; i < V; i++)
                    x[(m + 1 + r) * V + i] = x[r * V + i] + (frand() - 0.5f) * (rep % 3 ? 0.5f : 3.0f);
            for (int64_t r = 0; r < rows; r++)
                reqs[r] = sp_sample_req_of(&p, 0.0);
            sp_spec_args a;
            memset(&a, 0, sizeof a);
            a.m = (int32_t)m;
            a.v = uniform(2 + (int)(rnd32() % 4));
            a.v_bonus = rep % 2 ? a.v : uniform(2);
            for (int64_t i = 0; i < m; i++) {
                /* the draft's draw from its row, or (one-hot) the target's top or any token */
                sp_sample_req dq = reqs[0];
                dq.u = uniform(2);
                a.drafts[i] = onehot ? (rnd32() % 2 ? sp_argmax(x + i * V, V) : (int32_t)(rnd32() % V))
                                     : sp_sample_row(&dq, x + (m + 1 + i) * V, V, &wk);
                a.u[i] = uniform((int)(rnd32() % 6)); /* 0, just below 1, or random */
            }
            check_case(x, m, V, onehot, reqs, &a, &c);
            free(x);
            free(reqs);
        }
    }
    sp_sample_work_free(&wk);
    printf("spec: %d verifications, device == host: %d all accepted, %d with a rejection; %d left "
           "to the host\n", c.cases, c.accepted_all, c.rejected, c.left);
    assert_true(c.accepted_all > 0 && c.rejected > 0);
    assert_true(c.left < c.cases / 4);
    spc_free(g_scratch);
    g_scratch = NULL;
}

/* Bad arguments are refused, not launched. */
static void test_verify_refuses(void **state)
{
    (void)state;
    NEED_GPU();
    float *x = dev_alloc(64 * sizeof(float));
    assert_int_not_equal(spc_spec_verify(g_stream, x, NULL, 0, 10, NULL, NULL, NULL, NULL, 0), 0);
    assert_int_not_equal(spc_spec_verify(g_stream, x, NULL, SP_SPEC_DEV_K + 1, 10, NULL, NULL, NULL,
                                         NULL, 0), 0);
    assert_int_not_equal(spc_spec_verify(g_stream, NULL, NULL, 1, 10, NULL, NULL, NULL, NULL, 0), 0);
    assert_int_not_equal(spc_spec_verify(g_stream, x, NULL, 1, 10, NULL, NULL, NULL, NULL, 0), 0);
    spc_free(x);
    assert_int_equal(spc_spec_scratch_bytes(0), 0);
    assert_int_equal(spc_spec_scratch_bytes((int64_t)INT32_MAX + 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_equals_host),
        cmocka_unit_test(test_verify_refuses),
    };
    int rc = cmocka_run_group_tests(tests, cuda_group_setup, cuda_group_teardown);
    return g_have_gpu ? rc : 77;
}
