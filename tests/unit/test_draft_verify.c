/* test_draft_verify.c: sp_draft_verifier (include/specula.h), the lossless verification of
 * deterministic drafts for callers with their own verify pass: greedy accepts exactly the
 * argmax, and sampled verification emits tokens with the sampling distribution p whatever
 * the draft (frequencies over 2e5 draws within 0.005 of p). */
#include "test_util.h"

#include <math.h>
#include <string.h>

static void test_greedy_accepts_the_argmax(void **state)
{
    (void)state;
    sp_sampling_params p = sp_sampling_default_params();
    p.temperature = 0;
    sp_draft_verifier *v;
    assert_int_equal(sp_draft_verifier_new(&p, 5, &v, NULL), SP_OK);
    const float logits[5] = {0.1f, 2.0f, 2.0f, -1.0f, 0.5f};
    assert_int_equal(sp_draft_verifier_check(v, logits, 1), 1);
    for (int d = 0; d < 5; d++)
        assert_int_equal(sp_draft_verifier_check(v, logits, d), 1); /* the first maximum */
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
            int32_t t = sp_draft_verifier_check(v, logits, draft);
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
        assert_int_equal(sp_draft_verifier_check(a, logits, i % 3), sp_draft_verifier_check(b, logits, i % 3));
    sp_draft_verifier_free(a);
    sp_draft_verifier_free(b);
    assert_int_equal(sp_draft_verifier_new(&sp, 0, &a, NULL), SP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_accepts_the_argmax),
        cmocka_unit_test(test_sampled_keeps_the_distribution),
        cmocka_unit_test(test_same_seed_same_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
