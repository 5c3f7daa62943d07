/* test_mtp_dsv4.c: --draft mtp on DeepSeek-V4 (the MTPBlock of DeepSeek's inference code:
 * e_proj/h_proj over the main model's hyper-connection streams, a V4 layer, its own
 * hc_head; docs/DEEPSEEK_V4.md), on the dsv4_mtp fixture (scripts/reference/
 * mtp_reference_dsv4.py: a 2-layer V4 with a random MTP module under mtp.0.*):
 *  - the module binds under its hub names and inspect reports it;
 *  - every MTP row of three prompts within relative L2 1e-5 of the PyTorch reference
 *    (transformers' DeepseekV4DecoderLayer and HyperHead around the module's own math),
 *    the main model's logits within 1e-4 of transformers;
 *  - MTP rows one position at a time equal one pass, bit for bit;
 *  - greedy speculation with MTP drafts equals plain greedy decoding (k 1, 2, 4);
 *  - the target's truncation cuts the MTP session.
 * MTP drafting runs on the CPU backend only (sp_session_new_mtp), so the fixtures open on
 * the CPU whatever SPECULA_TEST_DEVICE says.
 * (Sampled losslessness is the loop's, tested on V3 in test_mtp.c; the module is random,
 * so acceptance here means nothing.) */
#include "test_util.h"
#include "runtime/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "dsv4_mtp"

static void pair(sp_model *m, int64_t n_ctx, sp_session **t, sp_session **d)
{
    sp_error err = {0};
    sp_session_params sp = {.n_ctx = n_ctx};
    assert_int_equal(sp_session_new(m, &sp, t, &err), SP_OK);
    if (sp_session_new_mtp(*t, d, &err) != SP_OK)
        fail_msg("%s", err.msg);
}

/* One prompt: main logits and MTP rows against the reference, and one position at a time
 * against one pass. */
static void check_prompt(sp_model *m, const int32_t *p, size_t n, const float *want_main,
                         const float *want_mtp, double *worst_main, double *worst_mtp)
{
    int64_t V = sp_model_n_vocab(m);
    sp_error err = {0};
    float *main = malloc(n * (size_t)V * sizeof *main), *rows = malloc((n - 1) * (size_t)V * sizeof *rows);
    float *one = malloc((size_t)V * sizeof *one);
    sp_session *t, *d;
    pair(m, 64, &t, &d);
    assert_int_equal(sp_session_eval(t, p, n, main, &err), SP_OK);
    double e = rel_l2(main, want_main, n * (size_t)V);
    *worst_main = e > *worst_main ? e : *worst_main;
    if (sp_session_eval_mtp(d, p + 1, sp_session_hidden(t, 0), n - 1, rows, &err) != SP_OK)
        fail_msg("%s", err.msg);
    for (size_t i = 0; i + 1 < n; i++) {
        double r = rel_l2(rows + i * (size_t)V, want_mtp + i * (size_t)V, (size_t)V);
        *worst_mtp = r > *worst_mtp ? r : *worst_mtp;
        if (r > 1e-5)
            fail_msg("prompt of %zu tokens, MTP row %zu: relative L2 %.3g > 1e-5", n, i, r);
    }
    assert_int_equal(sp_session_truncate(d, 0, &err), SP_OK);
    for (size_t i = 0; i + 1 < n; i++) {
        assert_int_equal(sp_session_eval_mtp(d, p + i + 1, sp_session_hidden(t, (int64_t)i), 1, one, &err), SP_OK);
        if (memcmp(one, rows + i * (size_t)V, (size_t)V * sizeof *one))
            fail_msg("prompt of %zu tokens, MTP row %zu: one position at a time differs from one pass", n, i);
    }
    assert_int_equal(sp_session_truncate(t, 1, &err), SP_OK); /* the MTP session follows */
    assert_int_equal(sp_session_n_past(d), 0);
    sp_session_free(d);
    sp_session_free(t);
    free(main);
    free(rows);
    free(one);
}

static void test_parity(void **state)
{
    (void)state;
    cJSON *ref = read_json(fixture_path("models/" FIXTURE "/reference.json"));
    size_t n_main, n_mtp;
    float *want_main = read_floats(fixture_path("models/" FIXTURE "/logits.bin"), &n_main);
    float *want_mtp = read_floats(fixture_path("models/" FIXTURE "/mtp_logits.bin"), &n_mtp);
    sp_model *m = open_fixture_model_on(FIXTURE, 2, "cpu");
    sp_model_info info;
    sp_model_get_info(m, &info);
    assert_int_equal(info.n_mtp_layers, 1);
    int64_t V = sp_model_n_vocab(m);
    size_t at_main = 0, at_mtp = 0;
    double worst_main = 0, worst_mtp = 0;
    for (const cJSON *pj = cJSON_GetObjectItemCaseSensitive(ref, "prompts")->child; pj; pj = pj->next) {
        int32_t p[64];
        size_t n = 0;
        for (const cJSON *x = pj->child; x; x = x->next)
            p[n++] = (int32_t)x->valueint;
        assert_true(n >= 2 && (at_main + n) * (size_t)V <= n_main && (at_mtp + n - 1) * (size_t)V <= n_mtp);
        check_prompt(m, p, n, want_main + at_main * (size_t)V, want_mtp + at_mtp * (size_t)V, &worst_main,
                     &worst_mtp);
        at_main += n;
        at_mtp += n - 1;
    }
    assert_int_equal(at_main * (size_t)V, n_main);
    assert_int_equal(at_mtp * (size_t)V, n_mtp);
    print_message("  V4 MTP logits vs the PyTorch reference: worst relative L2 %.3g (main model's logits %.3g)\n",
                  worst_mtp, worst_main);
    assert_true(worst_main < 1e-4);
    sp_model_close(m);
    free(want_main);
    free(want_mtp);
    cJSON_Delete(ref);
}

static void run(sp_model *m, bool mtp, int k, const int32_t *p, size_t n, const sp_generate_params *gp,
                int32_t *out, sp_generate_stats *st, sp_spec_stats *ss)
{
    sp_error err = {0};
    sp_session *s, *d = NULL;
    sp_status rc;
    if (mtp) {
        pair(m, 128, &s, &d);
        sp_spec_params spp = {.kind = SP_DRAFT_MTP, .draft = d, .k = k};
        rc = sp_generate_spec(s, p, n, gp, &spp, NULL, NULL, out, st, ss, &err);
    } else {
        sp_session_params sp = {.n_ctx = 128};
        assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
        rc = sp_generate(s, p, n, gp, NULL, NULL, out, st, &err);
    }
    if (rc != SP_OK)
        fail_msg("%s", err.msg);
    sp_session_free(d);
    sp_session_free(s);
}

static void test_greedy_equal(void **state)
{
    (void)state;
    sp_model *m = open_fixture_model_on(FIXTURE, 2, "cpu");
    int64_t V = sp_model_n_vocab(m);
    int32_t p[24];
    for (int i = 0; i < 24; i++)
        p[i] = (int32_t)((i * 37 + 11) % V);
    sp_generate_params gp = {.n_predict = 40, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    int32_t plain[64], spec[64];
    sp_generate_stats st, st2;
    sp_spec_stats ss;
    for (int pi = 0; pi < 2; pi++) {
        size_t n = pi ? 1 : 24;
        run(m, false, 0, p, n, &gp, plain, &st, NULL);
        for (int k = 1; k <= 4; k *= 2) {
            run(m, true, k, p, n, &gp, spec, &st2, &ss);
            assert_int_equal(st.n_generated, st2.n_generated);
            for (int64_t i = 0; i < st.n_generated; i++)
                if (plain[i] != spec[i])
                    fail_msg("prompt %d, k %d: token %lld differs: plain %d, MTP-drafted %d", pi, k,
                             (long long)i, plain[i], spec[i]);
            assert_true(ss.drafted > 0);
        }
    }
    sp_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parity), cmocka_unit_test(test_greedy_equal)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
