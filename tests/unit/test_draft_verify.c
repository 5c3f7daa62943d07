/* test_draft_verify.c: sp_draft_sampler and sp_draft_verifier (include/specula.h),
 * drafting and lossless verification for callers that run their own passes:
 *  - verification: greedy accepts exactly the argmax; sampled verification emits tokens
 *    with the sampling distribution p whatever the draft, deterministic (q one-hot) or
 *    drawn from a given q, even one longer than p (frequencies over 2e5 draws within
 *    0.005 of p);
 *  - drafting: greedy drafts are the argmax; sampled drafts follow the warped
 *    distribution they report as q (within 0.005 over 2e5 draws); p_min ends a draft, an
 *    end-of-sequence id ends it after itself (unless told not to); same seed, same
 *    drafts. */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_greedy_accepts_the_argmax(void **state)
{
    (void)state;
    sp_sampling_params p = sp_sampling_default_params();
    p.temperature = 0;
    sp_draft_verifier *v;
    assert_int_equal(sp_draft_verifier_new(&p, 5, &v, NULL), SP_OK);
    const float logits[5] = {0.1f, 2.0f, 2.0f, -1.0f, 0.5f};
    assert_int_equal(sp_draft_verifier_check(v, logits, 1, NULL, 0), 1);
    for (int d = 0; d < 5; d++)
        assert_int_equal(sp_draft_verifier_check(v, logits, d, NULL, 0), 1); /* the first maximum */
    sp_draft_verifier_free(v);
}

static void test_sampled_keeps_the_distribution(void **state)
{
    (void)state;
    const float logits[4] = {1.0f, 0.0f, 2.0f, -0.5f};
    double p[4], z = 0;
    for (int i = 0; i < 4; i++)
        z += exp(logits[i] / 0.8);
    for (int i = 0; i < 4; i++)
        p[i] = exp(logits[i] / 0.8) / z;
    for (int32_t draft = 0; draft < 4; draft++) {
        sp_sampling_params sp = sp_sampling_default_params();
        sp.temperature = 0.8f;
        sp.seed = 42 + (uint64_t)draft;
        sp_draft_verifier *v;
        assert_int_equal(sp_draft_verifier_new(&sp, 4, &v, NULL), SP_OK);
        int64_t counts[4] = {0};
        const int n = 200000;
        for (int i = 0; i < n; i++) {
            int32_t t = sp_draft_verifier_check(v, logits, draft, NULL, 0);
            assert_true(t >= 0 && t < 4);
            counts[t]++;
        }
        for (int i = 0; i < 4; i++)
            if (fabs((double)counts[i] / n - p[i]) > 0.005)
                fail_msg("draft %d: token %d drawn %.4f, p = %.4f", draft, i, (double)counts[i] / n, p[i]);
        sp_draft_verifier_free(v);
    }
}

static void test_same_seed_same_stream(void **state)
{
    (void)state;
    sp_sampling_params sp = sp_sampling_default_params();
    sp.temperature = 1.0f;
    sp.seed = 7;
    sp_draft_verifier *a, *b;
    assert_int_equal(sp_draft_verifier_new(&sp, 3, &a, NULL), SP_OK);
    assert_int_equal(sp_draft_verifier_new(&sp, 3, &b, NULL), SP_OK);
    const float logits[3] = {0.3f, 0.2f, 0.1f};
    for (int i = 0; i < 1000; i++)
        assert_int_equal(sp_draft_verifier_check(a, logits, i % 3, NULL, 0), sp_draft_verifier_check(b, logits, i % 3, NULL, 0));
    sp_draft_verifier_free(a);
    sp_draft_verifier_free(b);
    assert_int_equal(sp_draft_verifier_new(&sp, 0, &a, NULL), SP_ERR_INVALID_ARG);
}

/* p = softmax(logits / t) over n. */
static void softmax_t(const float *logits, int n, double t, double *p)
{
    double z = 0;
    for (int i = 0; i < n; i++)
        z += exp(logits[i] / t);
    for (int i = 0; i < n; i++)
        p[i] = exp(logits[i] / t) / z;
}

static void test_sampled_with_q_keeps_the_distribution(void **state)
{
    (void)state;
    const float logits[4] = {1.0f, 0.0f, 2.0f, -0.5f};
    double p[4];
    softmax_t(logits, 4, 0.8, p);
    /* the draft's q: another distribution, over 5 ids (a draft vocabulary padded further) */
    const double q[5] = {0.4, 0.3, 0.1, 0.1, 0.1};
    sp_sampling_params sp = sp_sampling_default_params();
    sp.temperature = 0.8f;
    sp.seed = 99;
    sp_draft_verifier *v;
    assert_int_equal(sp_draft_verifier_new(&sp, 4, &v, NULL), SP_OK);
    uint64_t x = 12345;
    int64_t counts[5] = {0}, accepted = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(x >> 11) / 9007199254740992.0, c = 0;
        int32_t d = 4;
        for (int j = 0; j < 5; j++)
            if (u < (c += q[j])) {
                d = j;
                break;
            }
        int32_t t = sp_draft_verifier_check(v, logits, d, q, 5);
        assert_true(t >= 0 && t < 4); /* never the id p does not have */
        accepted += t == d;
        counts[t]++;
    }
    for (int i = 0; i < 4; i++)
        if (fabs((double)counts[i] / n - p[i]) > 0.005)
            fail_msg("token %d drawn %.4f, p = %.4f", i, (double)counts[i] / n, p[i]);
    /* the acceptance rate is sum_x min(p(x), q(x)): q was used (with q taken as one-hot at
     * the draft it would be sum_x q(x) p(x), 0.17 here, also lossless but weaker) */
    double want = 0;
    for (int i = 0; i < 4; i++)
        want += p[i] < q[i] ? p[i] : q[i];
    if (fabs((double)accepted / n - want) > 0.005)
        fail_msg("acceptance rate %.4f, sum min(p, q) = %.4f", (double)accepted / n, want);
    sp_draft_verifier_free(v);
}

static sp_model *open_fixture(const char *name)
{
    sp_model *m = NULL;
    sp_error err = {0};
    if (sp_model_open(fixture_path(name), NULL, &m, &err) != SP_OK)
        fail_msg("%s", err.msg);
    return m;
}

static void test_draft_sampler(void **state)
{
    (void)state;
    sp_model *m = open_fixture("models/llama_mha_bf16");
    int64_t V = sp_model_n_vocab(m);
    float *logits = calloc((size_t)V, sizeof *logits);
    double *p = calloc((size_t)V, sizeof *p);
    int64_t *counts = calloc((size_t)V, sizeof *counts);
    assert_non_null(logits);
    for (int64_t i = 0; i < 6; i++)
        logits[i] = 2.0f - 0.5f * (float)i; /* six likely ids, the rest at 0 */
    sp_sampling_params gp = sp_sampling_default_params();
    gp.temperature = 0;
    sp_draft_sampler *ds;
    int32_t tok;
    const double *q;
    bool last;
    assert_int_equal(sp_draft_sampler_new(m, m, &gp, 3, 0, true, &ds, NULL), SP_OK);
    assert_true(sp_draft_sampler_next(ds, logits, 0, &tok, &q, &last));
    assert_true(tok == 0 && q == NULL && !last);
    assert_false(sp_draft_sampler_next(ds, logits, 3, &tok, &q, &last)); /* past k_max */
    /* greedy without p_min: a pick made elsewhere (on the device) gets next()'s decisions */
    assert_true(sp_draft_sampler_greedy(ds));
    q = (const double *)logits;
    assert_true(sp_draft_sampler_take(ds, 0, 0, &q, &last) && q == NULL && !last);
    assert_false(sp_draft_sampler_take(ds, 0, 3, &q, &last)); /* past k_max */
    sp_draft_sampler_free(ds);

    /* p_min: the top probability of these logits is far below 0.9 */
    assert_int_equal(sp_draft_sampler_new(m, m, &gp, 3, 0.9f, true, &ds, NULL), SP_OK);
    assert_false(sp_draft_sampler_next(ds, logits, 0, &tok, &q, &last));
    assert_false(sp_draft_sampler_greedy(ds)); /* it reads the logits' top probability */
    assert_false(sp_draft_sampler_take(ds, 0, 0, &q, &last));
    sp_draft_sampler_free(ds);

    /* an end-of-sequence id ends the draft with it, unless stop_at_eos is off */
    size_t n_eos = 0;
    const int32_t *eos = sp_model_eos_ids(m, &n_eos);
    if (n_eos > 0 && eos[0] < V) {
        float *e = calloc((size_t)V, sizeof *e);
        e[eos[0]] = 5.0f;
        assert_int_equal(sp_draft_sampler_new(m, m, &gp, 3, 0, true, &ds, NULL), SP_OK);
        assert_true(sp_draft_sampler_next(ds, e, 0, &tok, &q, &last) && tok == eos[0] && last);
        last = false;
        assert_true(sp_draft_sampler_take(ds, eos[0], 1, &q, &last) && last);
        sp_draft_sampler_free(ds);
        assert_int_equal(sp_draft_sampler_new(m, m, &gp, 3, 0, false, &ds, NULL), SP_OK);
        assert_true(sp_draft_sampler_next(ds, e, 0, &tok, &q, &last) && tok == eos[0] && !last);
        sp_draft_sampler_free(ds);
        free(e);
    }

    /* sampled: the drafts follow the q they report, softmax(logits / t) cut to top-k 4 */
    gp.temperature = 0.7f;
    gp.top_k = 4;
    gp.seed = 5;
    double ref[4];
    softmax_t(logits, 4, 0.7, ref);
    assert_int_equal(sp_draft_sampler_new(m, m, &gp, 2, 0, true, &ds, NULL), SP_OK);
    sp_draft_sampler *twin;
    assert_int_equal(sp_draft_sampler_new(m, m, &gp, 2, 0, true, &twin, NULL), SP_OK);
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        int32_t t2;
        const double *q2;
        assert_true(sp_draft_sampler_next(ds, logits, i % 2, &tok, &q, &last));
        assert_true(sp_draft_sampler_next(twin, logits, i % 2, &t2, &q2, &last));
        assert_int_equal(tok, t2); /* same seed, same stream */
        assert_non_null(q);
        assert_true(tok >= 0 && tok < 4);
        counts[tok]++;
        if (i == 0)
            for (int64_t j = 0; j < V; j++)
                p[j] = q[j];
    }
    for (int i = 0; i < 4; i++) {
        if (fabs(p[i] - ref[i]) > 1e-6)
            fail_msg("q[%d] = %.6f, softmax over the top 4 = %.6f", i, p[i], ref[i]);
        if (fabs((double)counts[i] / n - ref[i]) > 0.005)
            fail_msg("token %d drafted %.4f, q = %.4f", i, (double)counts[i] / n, ref[i]);
    }
    sp_draft_sampler_free(ds);
    sp_draft_sampler_free(twin);
    assert_int_equal(sp_draft_sampler_new(m, m, &gp, 0, 0, true, &ds, NULL), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_draft_sampler_new(m, m, &gp, 2, 1.5f, true, &ds, NULL), SP_ERR_INVALID_ARG);
    free(logits);
    free(p);
    free(counts);
    sp_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_accepts_the_argmax),
        cmocka_unit_test(test_sampled_keeps_the_distribution),
        cmocka_unit_test(test_same_seed_same_stream),
        cmocka_unit_test(test_sampled_with_q_keeps_the_distribution),
        cmocka_unit_test(test_draft_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
