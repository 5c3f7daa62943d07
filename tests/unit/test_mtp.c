/* test_mtp.c: DeepSeek-V3 multi-token prediction as a draft (--draft mtp), on the
 * deepseekv3_mtp fixture (scripts/reference/mtp_reference.py: a tiny DeepSeek-V3 whose MTP
 * layer was trained to predict its main model's next-next token).
 *
 *  - the MTP forward against the independent PyTorch reference (written from the paper):
 *    every MTP row of three prompts within relative L2 1e-5 (exact precision); one pass and
 *    one position at a time give bit-identical rows;
 *  - recording the hidden states for MTP leaves the target's logits bit-identical;
 *  - greedy speculation with MTP drafts equals plain greedy decoding token for token
 *    (k 1..8, several prompts, token limits, the context limit), never vacuously;
 *  - sampled speculation is lossless: the 1st and 2nd generated tokens of many runs
 *    follow the target's exact distributions (chi-square at p = 1e-6);
 *  - the MTP cache rolls back by length, alone and with its target;
 *  - acceptance on the fixture, greedy and at temperature 0.7 (reported; greedy > 0 is
 *    asserted, the runs being deterministic);
 *  - models without an MTP module, misuse of an MTP session, `specula check`. */
#include "test_util.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "deepseekv3_mtp"

static bool on_cpu(void)
{
    if (strcmp(test_device(), "cpu")) {
        print_message("  MTP drafting runs on the CPU backend only: skipped on %s\n", test_device());
        return false;
    }
    return true;
}

/* A target session of n_ctx positions with its MTP session. */
static void open_pair(sp_model *m, int64_t n_ctx, sp_session **t, sp_session **d)
{
    sp_error err = {0};
    sp_session_params sp = {.n_ctx = n_ctx};
    assert_int_equal(sp_session_new(m, &sp, t, &err), SP_OK);
    if (sp_session_new_mtp(*t, d, &err) != SP_OK)
        fail_msg("%s", err.msg);
}

/* Every MTP row of a prompt of n tokens (rows 0 .. n-2) in one pass, into rows; the main
 * model's logits of every position into main. */
static void mtp_rows(sp_model *m, const int32_t *p, size_t n, float *rows, float *main)
{
    sp_error err = {0};
    sp_session *t, *d;
    open_pair(m, 64, &t, &d);
    assert_int_equal(sp_session_eval(t, p, n, main, &err), SP_OK);
    if (sp_session_eval_mtp(d, p + 1, sp_session_hidden(t, 0), n - 1, rows, &err) != SP_OK)
        fail_msg("%s", err.msg);
    sp_session_free(d);
    sp_session_free(t);
}

/* ---- parity with the PyTorch reference ------------------------------------------------ */

static void test_mtp_parity(void **state)
{
    (void)state;
    if (!on_cpu())
        return;
    char path[512];
    snprintf(path, sizeof path, "%s", fixture_path("models/" FIXTURE "/reference.json"));
    cJSON *ref = read_json(path);
    size_t n_ref, n_main;
    float *want = read_floats(fixture_path("models/" FIXTURE "/mtp_logits.bin"), &n_ref);
    float *want_main = read_floats(fixture_path("models/" FIXTURE "/logits.bin"), &n_main);
    sp_model *m = open_fixture_model(FIXTURE, 1);
    int64_t V = sp_model_n_vocab(m);
    const cJSON *prompts = cJSON_GetObjectItemCaseSensitive(ref, "prompts");
    size_t at = 0, at_main = 0;
    double worst = 0, worst_main = 0;
    for (const cJSON *pj = prompts->child; pj; pj = pj->next) {
        size_t n = (size_t)cJSON_GetArraySize(pj), k = 0;
        int32_t p[64];
        for (const cJSON *x = pj->child; x; x = x->next)
            p[k++] = (int32_t)x->valueint;
        float *main_rows = malloc(n * (size_t)V * sizeof *main_rows);
        assert_true(at_main + n * (size_t)V <= n_main && n >= 2);
        float *rows = malloc((n - 1) * (size_t)V * sizeof *rows), *one = malloc((size_t)V * sizeof *one);
        mtp_rows(m, p, n, rows, main_rows);
        double em = rel_l2(main_rows, want_main + at_main, n * (size_t)V);
        worst_main = em > worst_main ? em : worst_main;
        at_main += n * (size_t)V;
        assert_true(at + (n - 1) * (size_t)V <= n_ref);
        for (size_t i = 0; i + 1 < n; i++) {
            double r = rel_l2(rows + i * (size_t)V, want + at + i * (size_t)V, (size_t)V);
            worst = r > worst ? r : worst;
            if (r > 1e-5)
                fail_msg("prompt of %zu tokens, MTP row %zu: relative L2 %.3g > 1e-5", n, i, r);
        }
        /* one position at a time: the same bits */
        sp_error err = {0};
        sp_session *t, *d;
        open_pair(m, 64, &t, &d);
        assert_int_equal(sp_session_eval(t, p, n, NULL, &err), SP_OK);
        for (size_t i = 0; i + 1 < n; i++) {
            assert_int_equal(sp_session_eval_mtp(d, p + i + 1, sp_session_hidden(t, (int64_t)i), 1, one, &err), SP_OK);
            if (memcmp(one, rows + i * (size_t)V, (size_t)V * sizeof *one))
                fail_msg("prompt of %zu tokens, MTP row %zu: one position at a time differs from one pass", n, i);
        }
        sp_session_free(d);
        sp_session_free(t);
        at += (n - 1) * (size_t)V;
        free(rows);
        free(one);
        free(main_rows);
    }
    assert_int_equal(at, n_ref);
    assert_int_equal(at_main, n_main);
    print_message("  MTP logits vs the PyTorch reference: worst relative L2 %.3g (main model's logits %.3g)\n",
                  worst, worst_main);
    assert_true(worst_main < 1e-4);
    /* the main model's greedy continuations of the prompts listed in greedy_prompts */
    const cJSON *gi = cJSON_GetObjectItemCaseSensitive(ref, "greedy_prompts");
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(ref, "greedy");
    for (int j = 0; j < cJSON_GetArraySize(gi); j++) {
        const cJSON *pj = cJSON_GetArrayItem(prompts, cJSON_GetArrayItem(gi, j)->valueint);
        const cJSON *g = cJSON_GetArrayItem(gs, j);
        int32_t p[64], out[64];
        size_t n = 0;
        for (const cJSON *x = pj->child; x; x = x->next)
            p[n++] = (int32_t)x->valueint;
        sp_error err = {0};
        sp_session *s;
        sp_session_params sp = {.n_ctx = 128};
        assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
        sp_generate_params gp = {.n_predict = cJSON_GetArraySize(g), .ignore_eos = true,
                                 .sampling = sp_sampling_default_params()};
        sp_generate_stats st;
        assert_int_equal(sp_generate(s, p, n, &gp, NULL, NULL, out, &st, &err), SP_OK);
        int t = 0;
        for (const cJSON *x = g->child; x; x = x->next, t++)
            if (out[t] != x->valueint)
                fail_msg("greedy continuation %d, token %d: %d, transformers %d", j, t, out[t], x->valueint);
        sp_session_free(s);
    }
    sp_model_close(m);
    free(want);
    free(want_main);
    cJSON_Delete(ref);
}

/* Recording hidden states for MTP does not change a bit of the target's logits. */
static void test_recording_keeps_logits(void **state)
{
    (void)state;
    if (!on_cpu())
        return;
    sp_model *m = open_fixture_model(FIXTURE, 2);
    int64_t V = sp_model_n_vocab(m);
    int32_t p[20];
    for (int i = 0; i < 20; i++)
        p[i] = (int32_t)((i * 29 + 3) % V);
    float *a = malloc(20 * (size_t)V * sizeof *a), *b = malloc(20 * (size_t)V * sizeof *b);
    sp_error err = {0};
    sp_session *plain, *t, *d;
    sp_session_params sp = {.n_ctx = 64};
    assert_int_equal(sp_session_new(m, &sp, &plain, &err), SP_OK);
    assert_int_equal(sp_session_eval(plain, p, 20, a, &err), SP_OK);
    open_pair(m, 64, &t, &d);
    for (int i = 0; i < 20; i++) /* token by token, recording */
        assert_int_equal(sp_session_eval(t, p + i, 1, b + (size_t)i * (size_t)V, &err), SP_OK);
    assert_memory_equal(a, b, 20 * (size_t)V * sizeof *a);
    sp_session_truncate(t, 0, NULL);
    assert_int_equal(sp_session_eval(t, p, 20, b, &err), SP_OK); /* one prefill, recording */
    assert_memory_equal(a, b, 20 * (size_t)V * sizeof *a);
    sp_session_free(d);
    sp_session_free(t);
    sp_session_free(plain);
    free(a);
    free(b);
    sp_model_close(m);
}

/* ---- greedy equality ------------------------------------------------------------------ */

static void run(sp_model *m, bool mtp, int k, const int32_t *prompt, size_t n,
                const sp_generate_params *gp, int64_t n_ctx, run_out *o)
{
    sp_error err = {0};
    sp_session *s, *d = NULL;
    memset(o, 0, sizeof *o);
    sp_status st;
    if (!mtp) {
        sp_session_params sp = {.n_ctx = n_ctx};
        assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
        st = sp_generate(s, prompt, n, gp, NULL, NULL, o->tokens, &o->st, &err);
    } else {
        open_pair(m, n_ctx, &s, &d);
        sp_spec_params spp = {.kind = SP_DRAFT_MTP, .draft = d, .k = k};
        st = sp_generate_spec(s, prompt, n, gp, &spp, NULL, NULL, o->tokens, &o->st, &o->ss, &err);
    }
    if (st != SP_OK)
        fail_msg("%s", err.msg);
    sp_session_free(d);
    sp_session_free(s);
}

static void prompt_of(int which, int64_t V, int32_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (int32_t)(which == 0 ? (i * 37 + 5) % (size_t)V
                         : which == 1 ? (i % 3) * 11 + 7
                                      : (i * i * 13 + 2 + (size_t)which) % (size_t)V);
}

static void test_greedy_equal(void **state)
{
    (void)state;
    if (!on_cpu())
        return;
    sp_model *m = open_fixture_model(FIXTURE, 2);
    int64_t V = sp_model_n_vocab(m);
    sp_generate_params gp = {.n_predict = 40, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    int64_t drafted = 0, accepted = 0;
    for (int pi = 0; pi < 4; pi++) {
        int32_t p[12];
        prompt_of(pi, V, p, 12);
        size_t n = pi == 3 ? 1 : 12; /* a one-token prompt too */
        run_out plain, spec;
        run(m, false, 0, p, n, &gp, 128, &plain);
        int ks[] = {1, 2, 3, 4, 8};
        for (int ki = 0; ki < 5; ki++) {
            char what[128];
            snprintf(what, sizeof what, "MTP draft, k %d, prompt %d", ks[ki], pi);
            run(m, true, ks[ki], p, n, &gp, 128, &spec);
            expect_same(what, &plain, &spec);
            if (spec.ss.drafted == 0)
                fail_msg("%s: nothing was drafted", what);
            drafted += spec.ss.drafted;
            accepted += spec.ss.accepted;
        }
    }
    print_message("  greedy: %lld of %lld MTP draft tokens accepted\n", (long long)accepted, (long long)drafted);
    assert_true(accepted > 0);
    /* token limits and the context limit falling inside drafts */
    int32_t p[6];
    prompt_of(0, V, p, 6);
    run_out plain, spec;
    for (int64_t limit = 1; limit <= 9; limit++) {
        gp.n_predict = limit;
        run(m, false, 0, p, 6, &gp, 128, &plain);
        run(m, true, 4, p, 6, &gp, 128, &spec);
        expect_same("token limit", &plain, &spec);
    }
    gp.n_predict = 40;
    for (int64_t ctx = 7; ctx <= 15; ctx++) {
        run(m, false, 0, p, 6, &gp, ctx, &plain);
        run(m, true, 4, p, 6, &gp, ctx, &spec);
        expect_same("context limit", &plain, &spec);
    }
    sp_model_close(m);
}

/* ---- the MTP cache rolls back by length ------------------------------------------------- */

static void test_rollback(void **state)
{
    (void)state;
    if (!on_cpu())
        return;
    sp_model *m = open_fixture_model(FIXTURE, 1);
    int64_t V = sp_model_n_vocab(m), H;
    sp_model_info info;
    sp_model_get_info(m, &info);
    H = info.n_embd;
    int32_t p[10];
    prompt_of(2, V, p, 10);
    float *ref = malloc((size_t)V * sizeof *ref), *got = malloc((size_t)V * sizeof *got);
    float *junk = malloc(3 * (size_t)H * sizeof *junk);
    for (int64_t i = 0; i < 3 * H; i++)
        junk[i] = test_frand();
    sp_error err = {0};
    sp_session *t, *d;
    open_pair(m, 64, &t, &d);
    assert_int_equal(sp_session_eval(t, p, 10, NULL, &err), SP_OK);
    assert_int_equal(sp_session_eval_mtp(d, p + 1, sp_session_hidden(t, 0), 9, NULL, &err), SP_OK);
    memcpy(ref, sp_session_last_logits(d), (size_t)V * sizeof *ref);
    /* three chained positions on made-up states, then back to 5 and forward again */
    int32_t extra[3] = {1, 2, 3};
    assert_int_equal(sp_session_eval_mtp(d, extra, junk, 3, NULL, &err), SP_OK);
    assert_int_equal(sp_session_truncate(d, 5, &err), SP_OK);
    assert_int_equal(sp_session_eval_mtp(d, p + 6, sp_session_hidden(t, 5), 4, NULL, &err), SP_OK);
    memcpy(got, sp_session_last_logits(d), (size_t)V * sizeof *got);
    assert_memory_equal(ref, got, (size_t)V * sizeof *ref);
    /* the target's truncation to n keeps n - 1 MTP positions (position i reads token i + 1) */
    assert_int_equal(sp_session_truncate(t, 7, &err), SP_OK);
    assert_int_equal(sp_session_n_past(d), 6);
    assert_int_equal(sp_session_truncate(t, 0, &err), SP_OK);
    assert_int_equal(sp_session_n_past(d), 0);
    sp_session_free(d);
    sp_session_free(t);
    free(ref);
    free(got);
    free(junk);
    sp_model_close(m);
}

/* ---- sampled speculation is lossless ---------------------------------------------------- */

/* Exact distributions of the 1st and 2nd tokens generated after prefix + last. */
static void exact_dists(sp_model *m, const sp_sampling_params *smp, const int32_t *ctx, double *p1,
                        double *p2)
{
    int64_t V = sp_model_n_vocab(m);
    sp_error err = {0};
    sp_sampler *sm;
    assert_int_equal(sp_sampler_new(smp, V, &sm, &err), SP_OK);
    double *tmp = calloc((size_t)V, sizeof *tmp);
    sp_session *s;
    sp_session_params sp = {.n_ctx = 32};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    assert_int_equal(sp_session_eval(s, ctx, 4, NULL, &err), SP_OK);
    sp_sampler_dist(sm, sp_session_last_logits(s), p1);
    for (int64_t t = 0; t < V; t++) {
        if (p1[t] == 0)
            continue;
        sp_session_truncate(s, 4, NULL);
        int32_t tok = (int32_t)t;
        assert_int_equal(sp_session_eval(s, &tok, 1, NULL, &err), SP_OK);
        sp_sampler_dist(sm, sp_session_last_logits(s), tmp);
        for (int64_t i = 0; i < V; i++)
            p2[i] += p1[t] * tmp[i];
    }
    sp_session_free(s);
    sp_sampler_free(sm);
    free(tmp);
}

static void test_sampled_lossless(void **state)
{
    (void)state;
    if (!on_cpu())
        return;
    enum { RUNS = 20000 };
    sp_model *m = open_fixture_model(FIXTURE, 1);
    int64_t V = sp_model_n_vocab(m);
    sp_sampling_params smp = {.temperature = 1.0f, .top_k = 12, .top_p = 1.0f};
    const int32_t ctx[4] = {17, 42, 99, 7};
    double *p1 = calloc((size_t)V, sizeof *p1), *p2 = calloc((size_t)V, sizeof *p2);
    exact_dists(m, &smp, ctx, p1, p2);
    sp_error err = {0};
    sp_session *s, *d;
    open_pair(m, 32, &s, &d);
    assert_int_equal(sp_session_eval(s, ctx, 3, NULL, &err), SP_OK);
    int64_t *c1 = calloc((size_t)V, sizeof *c1), *c2 = calloc((size_t)V, sizeof *c2);
    int64_t drafted = 0, accepted = 0;
    for (int r = 0; r < RUNS; r++) {
        sp_session_truncate(s, 3, NULL); /* the MTP session follows */
        sp_generate_params gp = {.n_predict = 4, .ignore_eos = true, .sampling = smp};
        gp.sampling.seed = 5000 + (uint64_t)r;
        sp_spec_params spp = {.kind = SP_DRAFT_MTP, .draft = d, .k = 3};
        int32_t out[4];
        sp_generate_stats st;
        sp_spec_stats ss;
        if (sp_generate_spec(s, ctx + 3, 1, &gp, &spp, NULL, NULL, out, &st, &ss, &err) != SP_OK)
            fail_msg("%s", err.msg);
        c1[out[0]]++;
        c2[out[1]]++;
        drafted += ss.drafted;
        accepted += ss.accepted;
    }
    print_message("  %d sampled runs: %lld MTP draft tokens, %lld accepted\n", RUNS, (long long)drafted,
                  (long long)accepted);
    assert_true(drafted > 0 && accepted > 0 && accepted < drafted); /* both paths exercised */
    chi2_check("1st token vs the target's distribution", c1, p1, V, RUNS);
    chi2_check("2nd token (accepted or resampled)", c2, p2, V, RUNS);
    free(c1);
    free(c2);
    free(p1);
    free(p2);
    sp_session_free(d);
    sp_session_free(s);
    sp_model_close(m);
}

/* ---- acceptance on the trained fixture --------------------------------------------------- */

static void test_acceptance(void **state)
{
    (void)state;
    if (!on_cpu())
        return;
    sp_model *m = open_fixture_model(FIXTURE, 2);
    int64_t V = sp_model_n_vocab(m);
    float temps[2] = {0.0f, 0.7f};
    for (int ti = 0; ti < 2; ti++)
        for (int k = 1; k <= 4; k *= 2) {
            int64_t drafted = 0, accepted = 0, drafts = 0, first = 0;
            for (int pi = 0; pi < 8; pi++) {
                int32_t p[12];
                prompt_of(pi, V, p, 12);
                sp_generate_params gp = {.n_predict = 64, .ignore_eos = true,
                                         .sampling = {.temperature = temps[ti], .top_p = 1.0f, .seed = 11 + (uint64_t)pi}};
                run_out o;
                run(m, true, k, p, 12, &gp, 128, &o);
                drafted += o.ss.drafted;
                accepted += o.ss.accepted;
                drafts += o.ss.drafts;
                first += o.ss.accepted_per_pos[0];
            }
            print_message("  T %.1f, k %d: %lld/%lld draft tokens accepted (%.1f%%), first draft token %.1f%%, "
                          "mean acceptance length %.2f\n", (double)temps[ti], k, (long long)accepted,
                          (long long)drafted, 100.0 * (double)accepted / (double)drafted,
                          100.0 * (double)first / (double)drafts, 1.0 + (double)accepted / (double)drafts);
            if (temps[ti] == 0.0f)
                assert_true(accepted > 0);
        }
    sp_model_close(m);
}

/* ---- refusals and misuse ------------------------------------------------------------------ */

static void test_refused(void **state)
{
    (void)state;
    if (!on_cpu())
        return;
    sp_error err = {0};
    sp_session_params sp = {.n_ctx = 32};
    sp_session *s, *d = NULL;
    /* config.json says num_nextn_predict_layers 1, but transformers saved no MTP weights */
    const char *no_mtp[2] = {"deepseekv3_qlora_yarn", "llama_mha_bf16"};
    for (int i = 0; i < 2; i++) {
        sp_model *m = open_fixture_model(no_mtp[i], 1);
        assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
        assert_int_equal(sp_session_new_mtp(s, &d, &err), SP_ERR_UNSUPPORTED);
        assert_null(d);
        assert_non_null(strstr(err.msg, "no multi-token prediction module"));
        print_message("  %s: %s\n", no_mtp[i], err.msg);
        sp_session_free(s);
        sp_model_close(m);
    }
    sp_model *m = open_fixture_model(FIXTURE, 1);
    int32_t p[3] = {4, 5, 6};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    assert_int_equal(sp_session_eval(s, p, 3, NULL, &err), SP_OK);
    assert_int_equal(sp_session_new_mtp(s, &d, &err), SP_ERR_INVALID_ARG); /* too late */
    assert_int_equal(sp_session_truncate(s, 0, &err), SP_OK);
    assert_int_equal(sp_session_new_mtp(s, &d, &err), SP_OK);
    sp_session *d2 = NULL;
    assert_int_equal(sp_session_new_mtp(s, &d2, &err), SP_ERR_INVALID_ARG); /* one per target */
    assert_int_equal(sp_session_eval(d, p, 1, NULL, &err), SP_ERR_INVALID_ARG);
    sp_session *other;
    assert_int_equal(sp_session_new(m, &sp, &other, &err), SP_OK);
    sp_generate_params gp = {.n_predict = 4, .sampling = sp_sampling_default_params()};
    sp_spec_params spp = {.kind = SP_DRAFT_MTP, .draft = other, .k = 2};
    assert_int_equal(sp_generate_spec(s, p, 3, &gp, &spp, NULL, NULL, NULL, NULL, NULL, &err),
                     SP_ERR_INVALID_ARG);
    sp_session_free(other);
    /* freeing the target first leaves the MTP session inert, not dangling */
    sp_session_free(s);
    assert_int_equal(sp_session_eval_mtp(d, p, NULL, 1, NULL, &err), SP_ERR_INVALID_ARG);
    sp_session_free(d);
    sp_model_close(m);
}

/* specula check runs the MTP check on a model that has the module. */
static void test_check(void **state)
{
    (void)state;
    if (!on_cpu())
        return;
    sp_model *m = open_fixture_model(FIXTURE, 2);
    int32_t prompt[6] = {3, 14, 15, 92, 65, 35};
    sp_check_inputs in = {m, fixture_path("models/" FIXTURE), NULL, NULL, prompt, 6, false};
    sp_check_results *r;
    sp_error err = {0};
    assert_int_equal(sp_check_model(&in, &r, &err), SP_OK);
    bool seen = false;
    for (size_t i = 0; i < sp_check_results_count(r); i++) {
        const char *name, *detail;
        sp_check_status cs = sp_check_results_get(r, i, &name, &detail);
        if (strcmp(name, "speculative (mtp)"))
            continue;
        seen = true;
        print_message("  check: %s %s\n", sp_check_status_name(cs), detail);
        assert_int_equal(cs, SP_CHECK_PASS);
    }
    assert_true(seen);
    sp_check_results_free(r);
    sp_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_parity),      cmocka_unit_test(test_recording_keeps_logits),
        cmocka_unit_test(test_greedy_equal),    cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_sampled_lossless), cmocka_unit_test(test_acceptance),
        cmocka_unit_test(test_refused),         cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
