/* test_spec.c: speculative decoding is lossless, isolated and observable.
 *
 *  - the acceptance rule on hand-made p and q (p = q, disjoint supports, p(x) = 0, one-hot
 *    q): over 1e6 draws the emitted tokens follow p (total variation <= 0.004, chi-square
 *    below the 1e-6 critical value);
 *  - greedy speculation equals plain greedy decoding token for token, for dense, MoE, MXFP4
 *    and MLA targets, model / n-gram / self drafts, k in {1, 2, 4, 8}, several prompts, with
 *    EOS, the token limit and the context limit falling inside drafts; never vacuous
 *    (drafted > 0, and accepted > 0 where drafts can be right);
 *  - self drafting accepts every draft, greedy and sampled;
 *  - the draft model's logits inside speculation equal its standalone run on the same
 *    tokens (its state is its own), and the prompt buffer is never written;
 *  - with sampling, the distribution of generated tokens equals the target's (1e5 runs
 *    against the exact distribution: chi-square below the 1e-6 critical value);
 *  - sampled speculation verified on the device (or through a CPU shim of the op) gives the
 *    host's tokens and counts exactly;
 *  - incompatible drafts are refused with the reason. */
#include "test_util.h"
#include "device_shim.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/spec_verify.h"
#include "format/safetensors.h"
#include "util/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the acceptance rule on hand-made distributions ------------------------------------ */

static void rule_case(const char *name, const double *p, int n_p, const double *q, int n_q, int fixed_d)
{
    enum { N = 1000000 };
    sp_rng draw, acc, res;
    sp_rng_seed(&draw, 1);
    sp_rng_seed(&acc, 2);
    sp_rng_seed(&res, 3);
    int64_t count[16] = {0};
    int n = n_p > n_q ? n_p : n_q;
    for (int t = 0; t < N; t++) {
        int32_t d = q ? sp_sample_values(q, n_q, sp_rng_uniform(&draw)) : fixed_d, out;
        int32_t tok = sp_spec_verify_token(p, n_p, q, n_q, d, &acc, &res, &out) ? d : out;
        assert_true(tok >= 0 && tok < n_p);
        count[tok]++;
    }
    double pp[16] = {0};
    memcpy(pp, p, (size_t)n_p * sizeof *p);
    double tv = 0;
    for (int i = 0; i < n; i++)
        tv += fabs((double)count[i] / N - pp[i]);
    if (tv / 2 > 0.004)
        fail_msg("%s: total variation %.4f > 0.004", name, tv / 2);
    chi2_check(name, count, pp, n, N);
}

static void test_acceptance_rule(void **state)
{
    (void)state;
    const double p[6] = {0.05, 0.3, 0.1, 0.25, 0.0, 0.3};
    rule_case("p = q", p, 6, p, 6, 0);
    const double qd[6] = {0.5, 0, 0.5, 0, 0, 0}, pd[6] = {0, 0.4, 0, 0.6, 0, 0};
    rule_case("disjoint supports", pd, 6, qd, 6, 0);
    const double q0[6] = {0.2, 0.1, 0.1, 0.1, 0.4, 0.1}; /* mass on p(4) = 0 */
    rule_case("q on tokens with p(x) = 0", p, 6, q0, 6, 0);
    const double qs[8] = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2, 0.2}; /* draft vocabulary padded */
    rule_case("longer draft vocabulary", p, 6, qs, 8, 0);
    rule_case("one-hot q, p(d) > 0", p, 6, NULL, 0, 3);
    rule_case("one-hot q, p(d) = 0", p, 6, NULL, 0, 4);
    /* exact cases: p(d) = 1 always accepted, p(d) = 0 never */
    const double one[3] = {0, 1, 0};
    sp_rng a, r;
    sp_rng_seed(&a, 9);
    sp_rng_seed(&r, 10);
    int32_t out;
    for (int i = 0; i < 1000; i++) {
        assert_true(sp_spec_verify_token(one, 3, NULL, 0, 1, &a, &r, &out));
        assert_false(sp_spec_verify_token(one, 3, NULL, 0, 2, &a, &r, &out));
        assert_int_equal(out, 1);
    }
}

/* ---- greedy equality ------------------------------------------------------------------------ */

static sp_model *open_model(const char *name) { return open_fixture_model(name, 1); }

static sp_model *open_dir(const char *dir) { return open_model_dir(dir, 1); }

static void run(sp_model *m, sp_model *draft_m, sp_draft_kind kind, int k, const int32_t *prompt,
                size_t n, const sp_generate_params *gp, int64_t n_ctx, run_out *o)
{
    sp_error err = {0};
    sp_session *s, *d = NULL;
    sp_session_params sp = {.n_ctx = n_ctx};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    memset(o, 0, sizeof *o);
    sp_status st;
    if (!kind) {
        st = sp_generate(s, prompt, n, gp, NULL, NULL, o->tokens, &o->st, &err);
    } else {
        if (kind != SP_DRAFT_NGRAM)
            assert_int_equal(sp_session_new(kind == SP_DRAFT_SELF ? m : draft_m, &sp, &d, &err), SP_OK);
        sp_spec_params spp = {.kind = kind, .draft = d, .k = k, .adaptive = true};
        st = sp_generate_spec(s, prompt, n, gp, &spp, NULL, NULL, o->tokens, &o->st, &o->ss, &err);
    }
    if (st != SP_OK)
        fail_msg("%s", err.msg);
    sp_session_free(d);
    sp_session_free(s);
}

/* Every draft source and k against plain greedy on one target; the model draft is the
 * target with perturbed weights (mostly right) or, with `draft`, another model. */
static void greedy_suite(const char *target, const char *draft)
{
    char *pdir = draft ? NULL : perturbed_fixture(target, 0.05f);
    sp_model *m = open_model(target), *dm = draft ? open_model(draft) : open_dir(pdir);
    int64_t V = sp_model_n_vocab(m);
    int32_t prompts[3][12];
    for (int i = 0; i < 12; i++) {
        prompts[0][i] = (int32_t)((i * 37 + 5) % V);
        prompts[1][i] = (int32_t)((i % 3) * 11 + 7); /* repetitive: n-gram drafts can hit */
        prompts[2][i] = (int32_t)((i * i * 13 + 2) % V);
    }
    sp_generate_params gp = {.n_predict = 40, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    int64_t accepted_model = 0, accepted_ngram = 0;
    for (int pi = 0; pi < 3; pi++) {
        run_out plain, spec;
        run(m, NULL, 0, 0, prompts[pi], 12, &gp, 128, &plain);
        int ks[] = {1, 2, 4, 8};
        sp_draft_kind kinds[] = {SP_DRAFT_MODEL, SP_DRAFT_NGRAM, SP_DRAFT_SELF};
        for (int ki = 0; ki < 4; ki++)
            for (int di = 0; di < 3; di++) {
                char what[256];
                snprintf(what, sizeof what, "%s, draft %s, k %d, prompt %d", target,
                         di == 0 ? (draft ? draft : "perturbed copy") : di == 1 ? "ngram" : "self",
                         ks[ki], pi);
                run(m, dm, kinds[di], ks[ki], prompts[pi], 12, &gp, 128, &spec);
                expect_same(what, &plain, &spec);
                if (spec.ss.drafted == 0 && kinds[di] != SP_DRAFT_NGRAM)
                    fail_msg("%s: nothing was drafted", what);
                if (kinds[di] == SP_DRAFT_SELF && spec.ss.accepted != spec.ss.drafted)
                    fail_msg("%s: self drafting accepted %lld of %lld", what,
                             (long long)spec.ss.accepted, (long long)spec.ss.drafted);
                accepted_model += kinds[di] == SP_DRAFT_MODEL ? spec.ss.accepted : 0;
                accepted_ngram += kinds[di] == SP_DRAFT_NGRAM ? spec.ss.accepted : 0;
            }
    }
    print_message("  %-28s model draft accepted %lld, n-gram accepted %lld\n", target,
                  (long long)accepted_model, (long long)accepted_ngram);
    if (accepted_ngram == 0)
        fail_msg("%s: n-gram drafts were never accepted (greedy loops should repeat)", target);
    if (!draft && accepted_model == 0)
        fail_msg("%s: a perturbed copy of the target never had a draft accepted", target);
    sp_model_close(dm);
    sp_model_close(m);
    if (pdir) {
        remove_tree(pdir);
        free(pdir);
    }
}

static void test_greedy_dense(void **state)
{
    (void)state;
    greedy_suite("llama_mha_bf16", NULL);
    greedy_suite("llama_gqa4_tied_f16", "llama_mha_bf16"); /* an unrelated draft */
}

static void test_greedy_moe(void **state)
{
    (void)state;
    greedy_suite("qwen3moe_mixed_bf16", NULL);
    greedy_suite("gptoss_mxfp4", NULL); /* MXFP4 experts unperturbed, the rest perturbed */
    greedy_suite("deepseekv3_qlora_yarn", NULL);
    greedy_suite("mixtral_window", "qwen3moe_nvfp4_modelopt");
}

/* DeepSeek-V4: rejected drafts roll the compressed-entry cache back by length. */
static void test_greedy_dsv4(void **state)
{
    (void)state;
    greedy_suite("dsv4_sqrtsoftplus_bf16", NULL);
}

/* EOS, the token limit and the context limit inside a draft end generation where plain
 * decoding ends it. */
static void test_stops_inside_drafts(void **state)
{
    (void)state;
    sp_model *m = open_model("llama_mha_bf16");
    int32_t prompt[6] = {5, 9, 5, 9, 5, 9};
    sp_generate_params gp = {.n_predict = 30, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    run_out plain, spec;
    run(m, NULL, 0, 0, prompt, 6, &gp, 128, &plain);
    /* make the 7th generated token an end-of-sequence id */
    sp_hf_config *cfg = m->cfg;
    size_t saved_n = cfg->n_eos_ids;
    int32_t saved = cfg->eos_ids[0];
    cfg->eos_ids[0] = plain.tokens[6];
    cfg->n_eos_ids = 1;
    gp.ignore_eos = false;
    run(m, NULL, 0, 0, prompt, 6, &gp, 128, &plain);
    assert_string_equal(plain.st.stop_reason, "eos");
    for (int k = 1; k <= 8; k *= 2) {
        run(m, NULL, SP_DRAFT_SELF, k, prompt, 6, &gp, 128, &spec);
        expect_same("EOS inside a self draft", &plain, &spec);
        run(m, NULL, SP_DRAFT_NGRAM, k, prompt, 6, &gp, 128, &spec);
        expect_same("EOS inside an n-gram draft", &plain, &spec);
    }
    cfg->eos_ids[0] = saved;
    cfg->n_eos_ids = saved_n;
    gp.ignore_eos = true;
    for (int64_t limit = 1; limit <= 9; limit++) { /* token limit */
        gp.n_predict = limit;
        run(m, NULL, 0, 0, prompt, 6, &gp, 128, &plain);
        run(m, NULL, SP_DRAFT_SELF, 8, prompt, 6, &gp, 128, &spec);
        expect_same("token limit", &plain, &spec);
    }
    gp.n_predict = 40;
    for (int64_t ctx = 7; ctx <= 15; ctx++) { /* context limit */
        run(m, NULL, 0, 0, prompt, 6, &gp, ctx, &plain);
        assert_string_equal(plain.st.stop_reason, "context");
        run(m, NULL, SP_DRAFT_SELF, 4, prompt, 6, &gp, ctx, &spec);
        expect_same("context limit", &plain, &spec);
    }
    sp_model_close(m);
}

/* ---- self drafting with sampling ------------------------------------------------------------ */

static void test_self_sampled(void **state)
{
    (void)state;
    sp_model *m = open_model("qwen3moe_mixed_bf16");
    int32_t prompt[5] = {3, 1, 4, 1, 5};
    sp_generate_params gp = {.n_predict = 48, .ignore_eos = true,
                             .sampling = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 7}};
    assert_true(gp.sampling.min_p == 0.0f);
    run_out spec;
    for (int k = 1; k <= 8; k *= 2) {
        run(m, NULL, SP_DRAFT_SELF, k, prompt, 5, &gp, 128, &spec);
        assert_true(spec.ss.drafted > 0);
        if (spec.ss.accepted != spec.ss.drafted)
            fail_msg("sampled self drafting, k %d: accepted %lld of %lld", k,
                     (long long)spec.ss.accepted, (long long)spec.ss.drafted);
    }
    sp_model_close(m);
}

/* ---- isolation ------------------------------------------------------------------------------- */

typedef struct capture {
    int32_t hist[256];      /* the draft's input token at each position, as last written */
    int64_t n_rec;
    int32_t *prefix[512];   /* tokens [0, pos] behind each recorded logits row */
    int64_t plen[512];
    float *row[512];
    int64_t V;
} capture;

static void on_draft_event(void *ctx, const sp_trace_event *ev)
{
    capture *c = ctx;
    if (ev->op == SP_OP_EMBED)
        for (int64_t i = 0; i < ev->n_tok; i++)
            c->hist[ev->pos0 + i] = ev->tokens[i];
    if (ev->op != SP_OP_LOGITS || c->n_rec == 512)
        return;
    for (int64_t i = 0; i < ev->n_tok; i++) {
        int64_t pos = ev->pos0 + i, r = c->n_rec++;
        c->plen[r] = pos + 1;
        c->prefix[r] = malloc((size_t)(pos + 1) * sizeof(int32_t));
        memcpy(c->prefix[r], c->hist, (size_t)(pos + 1) * sizeof(int32_t));
        c->row[r] = malloc((size_t)c->V * sizeof(float));
        memcpy(c->row[r], ev->data + i * c->V, (size_t)c->V * sizeof(float));
    }
}

static void test_draft_isolation(void **state)
{
    (void)state;
    sp_model *m = open_model("llama_mha_bf16"), *dm = open_model("qwen3_gqa2_tied");
    capture *c = calloc(1, sizeof *c);
    c->V = sp_model_n_vocab(dm);
    sp_error err = {0};
    sp_session *s, *d;
    sp_session_params sp = {.n_ctx = 128};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    assert_int_equal(sp_session_new(dm, &sp, &d, &err), SP_OK);
    sp_session_set_trace(d, on_draft_event, c);
    const int32_t prompt[8] = {10, 20, 30, 40, 10, 20, 30, 40};
    int32_t copy[8];
    memcpy(copy, prompt, sizeof copy);
    sp_generate_params gp = {.n_predict = 40, .ignore_eos = true,
                             .sampling = {.temperature = 0.8f, .top_p = 1.0f, .seed = 11}};
    sp_spec_params spp = {.kind = SP_DRAFT_MODEL, .draft = d, .k = 4};
    sp_spec_stats ss;
    assert_int_equal(sp_generate_spec(s, prompt, 8, &gp, &spp, NULL, NULL, NULL, NULL, &ss, &err), SP_OK);
    assert_memory_equal(prompt, copy, sizeof copy);
    assert_true(ss.drafted > 0 && c->n_rec > 0);
    sp_session *alone;
    float *logits = malloc((size_t)128 * (size_t)c->V * sizeof(float));
    for (int64_t r = 0; r < c->n_rec; r++) {
        assert_int_equal(sp_session_new(dm, &sp, &alone, &err), SP_OK);
        assert_int_equal(sp_session_eval(alone, c->prefix[r], (size_t)c->plen[r], logits, &err), SP_OK);
        if (memcmp(logits + (c->plen[r] - 1) * c->V, c->row[r], (size_t)c->V * sizeof(float)))
            fail_msg("draft logits at position %lld inside speculation differ from its standalone run",
                     (long long)c->plen[r] - 1);
        sp_session_free(alone);
        free(c->prefix[r]);
        free(c->row[r]);
    }
    print_message("  %lld draft logits rows equal their standalone runs\n", (long long)c->n_rec);
    free(logits);
    free(c);
    sp_session_free(d);
    sp_session_free(s);
    sp_model_close(dm);
    sp_model_close(m);
}

/* ---- the sampled distribution ------------------------------------------------------------- */

/* 1e5 speculative runs of 4 tokens with a different model as the draft: the 1st and 2nd
 * generated tokens (the 2nd one goes through acceptance or resampling) against their
 * exact distributions from the target's logits. */
static void test_sampled_distribution(void **state)
{
    (void)state;
    enum { RUNS = 100000 };
    char *pdir = perturbed_fixture("llama_mha_bf16", 0.3f);
    sp_model *m = open_model("llama_mha_bf16"), *dm = open_dir(pdir);
    int64_t V = sp_model_n_vocab(m);
    sp_sampling_params smp = {.temperature = 1.5f, .top_k = 12, .top_p = 1.0f};
    sp_error err = {0};
    const int32_t prefix[3] = {17, 42, 99};
    int32_t last = 7;
    /* exact: p1 = dist(prefix + last); p2 = sum over t of p1(t) dist(prefix + last + t) */
    sp_sampler *sm;
    assert_int_equal(sp_sampler_new(&smp, V, &sm, &err), SP_OK);
    double *p1 = calloc((size_t)V, sizeof *p1), *p2 = calloc((size_t)V, sizeof *p2);
    double *tmp = calloc((size_t)V, sizeof *tmp);
    sp_session *s, *d;
    sp_session_params sp = {.n_ctx = 32};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    assert_int_equal(sp_session_new(dm, &sp, &d, &err), SP_OK);
    int32_t ctx[5] = {17, 42, 99, 7, 0};
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
    /* both sessions hold the prefix; each run generates from `last` */
    sp_session_truncate(s, 0, NULL);
    assert_int_equal(sp_session_eval(s, prefix, 3, NULL, &err), SP_OK);
    assert_int_equal(sp_session_eval(d, prefix, 3, NULL, &err), SP_OK);
    int64_t *c1 = calloc((size_t)V, sizeof *c1), *c2 = calloc((size_t)V, sizeof *c2);
    int64_t drafted = 0, accepted = 0;
    for (int r = 0; r < RUNS; r++) {
        sp_session_truncate(s, 3, NULL);
        sp_session_truncate(d, 3, NULL);
        sp_generate_params gp = {.n_predict = 4, .ignore_eos = true, .sampling = smp};
        gp.sampling.seed = 1000 + (uint64_t)r;
        sp_spec_params spp = {.kind = SP_DRAFT_MODEL, .draft = d, .k = 3};
        int32_t out[4];
        sp_generate_stats st;
        sp_spec_stats ss;
        if (sp_generate_spec(s, &last, 1, &gp, &spp, NULL, NULL, out, &st, &ss, &err) != SP_OK)
            fail_msg("%s", err.msg);
        c1[out[0]]++;
        c2[out[1]]++;
        drafted += ss.drafted;
        accepted += ss.accepted;
    }
    print_message("  %d runs: %lld drafted, %lld accepted\n", RUNS, (long long)drafted, (long long)accepted);
    assert_true(drafted > 0 && accepted > 0 && accepted < drafted); /* both paths exercised */
    chi2_check("1st token vs the target's distribution", c1, p1, V, RUNS);
    chi2_check("2nd token (accepted or resampled)", c2, p2, V, RUNS);
    free(c1);
    free(c2);
    free(p1);
    free(p2);
    free(tmp);
    sp_sampler_free(sm);
    sp_session_free(d);
    sp_session_free(s);
    sp_model_close(dm);
    sp_model_close(m);
    remove_tree(pdir);
    free(pdir);
}

/* ---- verification on the device -------------------------------------------------------- */

/* Sampled speculation with the verification on the device (the CUDA kernels with
 * SPECULA_TEST_DEVICE=cuda, else device_shim.h's ops) gives the host's tokens and counts
 * exactly: the same rule and arithmetic, the same uniforms from the same streams. Model
 * drafts (rows kept on the device, k 2 and 4) and n-gram drafts (q one-hot), two warper
 * sets, two seeds; the host's run is the same models with the device ops taken away. */
static void test_device_verify(void **state)
{
    (void)state;
    char *pdir = perturbed_fixture("llama_mha_bf16", 0.3f);
    sp_model *m = open_model("llama_mha_bf16"), *dm = open_dir(pdir);
    const sp_backend_ops *own_t = m->be->ops, *own_d = dm->be->ops;
    const bool cpu = !strcmp(own_t->name, "cpu");
    static sp_backend_ops host_ops, dev_ops;
    test_host_ops(own_t, &host_ops);
    dev_ops = *own_t;
    if (cpu) /* every third draw and verification left to the host */
        test_shim_ops(own_t, &dev_ops, 3);
    const sp_sampling_params sets[2] = {{.temperature = 1.5f, .top_k = 12, .top_p = 1.0f},
                                        {.temperature = 0.8f, .top_p = 0.9f, .min_p = 0.01f}};
    int32_t prompt[8];
    for (int i = 0; i < 8; i++)
        prompt[i] = (int32_t)((i % 3) * 11 + 7); /* repetitive: n-gram drafts find matches */
    int64_t accepted = 0, drafted = 0;
    { /* the draft model's rows can reach the target's verification (one device, one vocabulary) */
        m->be->ops = dm->be->ops = &dev_ops;
        sp_session *s, *d;
        sp_session_params sp = {.n_ctx = 32};
        assert_int_equal(sp_session_new(m, &sp, &s, NULL), SP_OK);
        assert_int_equal(sp_session_new(dm, &sp, &d, NULL), SP_OK);
        assert_true(sp_session_can_verify(s, d) && sp_session_can_verify(s, NULL));
        sp_session_free(d);
        sp_session_free(s);
        m->be->ops = own_t;
        dm->be->ops = own_d;
    }
    for (int si = 0; si < 2; si++)
        for (uint64_t seed = 1; seed <= 2; seed++)
            for (int c = 0; c < 3; c++) {
                const sp_draft_kind kind = c < 2 ? SP_DRAFT_MODEL : SP_DRAFT_NGRAM;
                const int k = c == 0 ? 4 : c == 1 ? 2 : 3;
                sp_generate_params gp = {.n_predict = 40, .ignore_eos = true, .sampling = sets[si]};
                gp.sampling.seed = seed;
                run_out host, dev;
                m->be->ops = dm->be->ops = &host_ops;
                run(m, dm, kind, k, prompt, 8, &gp, 128, &host);
                m->be->ops = dm->be->ops = &dev_ops;
                run(m, dm, kind, k, prompt, 8, &gp, 128, &dev);
                m->be->ops = own_t;
                dm->be->ops = own_d;
                char what[128];
                snprintf(what, sizeof what, "warpers %d, seed %llu, %s draft, k %d", si,
                         (unsigned long long)seed, kind == SP_DRAFT_MODEL ? "model" : "n-gram", k);
                expect_same(what, &host, &dev);
                if (host.ss.accepted != dev.ss.accepted || host.ss.drafted != dev.ss.drafted)
                    fail_msg("%s: drafted / accepted %lld / %lld on the host, %lld / %lld on the device",
                             what, (long long)host.ss.drafted, (long long)host.ss.accepted,
                             (long long)dev.ss.drafted, (long long)dev.ss.accepted);
                accepted += dev.ss.accepted;
                drafted += dev.ss.drafted;
            }
    print_message("  %lld of %lld drafts accepted; %d verifications on the shim, %d left to the host\n",
                  (long long)accepted, (long long)drafted, g_shim.verify_calls, g_shim.verify_left);
    assert_true(accepted > 0 && accepted < drafted); /* acceptance and resampling both ran */
    if (cpu)
        assert_true(g_shim.verify_calls > 0 && g_shim.verify_left > 0 && g_shim.draw_left > 0);
    sp_model_close(dm);
    sp_model_close(m);
    remove_tree(pdir);
    free(pdir);
}

/* ---- compatibility ---------------------------------------------------------------------- */

static void test_compat(void **state)
{
    (void)state;
    sp_model *a = open_model("llama_mha_bf16"), *b = open_model("qwen3_gqa2_tied");
    sp_model *moe = open_model("qwen3moe_mixed_bf16");
    sp_error err = {0};
    assert_int_equal(sp_spec_check_compat(a, b, NULL, NULL, &err), SP_OK);
    assert_int_equal(sp_spec_check_compat(a, moe, NULL, NULL, &err), SP_OK); /* 256 vs 128: padding */
    int64_t saved_v = moe->n_vocab;
    moe->n_vocab = 100;
    assert_int_equal(sp_spec_check_compat(a, moe, NULL, NULL, &err), SP_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "vocabulary"));
    moe->n_vocab = saved_v;
    int32_t saved = b->cfg->eos_ids[0];
    b->cfg->eos_ids[0] = 77;
    assert_int_equal(sp_spec_check_compat(a, b, NULL, NULL, &err), SP_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "end-of-sequence"));
    b->cfg->eos_ids[0] = saved;
    /* tokenizers: the same vocabulary passes; one changed token string is named */
    sp_tokenizer *t1, *t2;
    assert_int_equal(sp_tokenizer_open(fixture_path("tokenizers/bytes256"), &t1, &err), SP_OK);
    char *dir = make_temp_dir();
    size_t n;
    char *json = read_all(fixture_path("tokenizers/bytes256/tokenizer.json"), &n);
    char *at = strstr(json, "\"A\": 65");
    assert_non_null(at);
    at[1] = 'Z';
    char *zz = strstr(json, "\"Z\": 90");
    assert_non_null(zz);
    zz[1] = 'A';
    write_text(dir, "tokenizer.json", json);
    free(json);
    char cfg_to[1024];
    snprintf(cfg_to, sizeof cfg_to, "%s/tokenizer_config.json", dir);
    copy_file(fixture_path("tokenizers/bytes256/tokenizer_config.json"), cfg_to);
    assert_int_equal(sp_tokenizer_open(dir, &t2, &err), SP_OK);
    assert_int_equal(sp_spec_check_compat(a, b, t1, t1, &err), SP_OK);
    assert_int_equal(sp_spec_check_compat(a, b, t1, t2, &err), SP_ERR_INVALID_ARG);
    if (!strstr(err.msg, "token 65 differs"))
        fail_msg("%s", err.msg);
    sp_tokenizer_close(t1);
    sp_tokenizer_close(t2);
    remove_tree(dir);
    free(dir);
    sp_model_close(moe);
    sp_model_close(b);
    sp_model_close(a);
}

/* --draft-p-min ends drafts the draft model is unsure of; the gate pauses drafting that
 * never pays, the cost gate drafting slower than plain steps. None changes the output. */
static void test_p_min_and_gate(void **state)
{
    (void)state;
    sp_model *m = open_model("llama_mha_bf16"), *unrelated = open_model("qwen3_gqa2_tied");
    int32_t prompt[6] = {4, 8, 15, 16, 23, 42};
    sp_generate_params gp = {.n_predict = 48, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    sp_error err = {0};
    run_out plain;
    run(m, NULL, 0, 0, prompt, 6, &gp, 128, &plain);
    int64_t drafted[3];
    float pmins[3] = {0.0f, 0.5f, 1.0f};
    for (int i = 0; i < 3; i++) {
        sp_session *s, *d;
        sp_session_params sp = {.n_ctx = 128};
        assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
        assert_int_equal(sp_session_new(m, &sp, &d, &err), SP_OK);
        sp_spec_params spp = {.kind = SP_DRAFT_SELF, .draft = d, .k = 4, .p_min = pmins[i]};
        run_out o = {0};
        assert_int_equal(sp_generate_spec(s, prompt, 6, &gp, &spp, NULL, NULL, o.tokens, &o.st, &o.ss, &err), SP_OK);
        expect_same("p_min", &plain, &o);
        drafted[i] = o.ss.drafted;
        sp_session_free(d);
        sp_session_free(s);
    }
    assert_true(drafted[0] > 0);
    assert_true(drafted[1] <= drafted[0]);
    assert_int_equal(drafted[2], 0); /* no draft model is ever 100% sure */
    /* an unrelated draft: the gate shortens k and pauses; without it every round drafts k */
    run_out gated, fixed;
    for (int g = 0; g < 2; g++) {
        sp_session *s, *d;
        sp_session_params sp = {.n_ctx = 128};
        assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
        assert_int_equal(sp_session_new(unrelated, &sp, &d, &err), SP_OK);
        sp_spec_params spp = {.kind = SP_DRAFT_MODEL, .draft = d, .k = 4, .adaptive = g == 0};
        run_out *o = g == 0 ? &gated : &fixed;
        memset(o, 0, sizeof *o);
        assert_int_equal(sp_generate_spec(s, prompt, 6, &gp, &spp, NULL, NULL, o->tokens, &o->st, &o->ss, &err), SP_OK);
        expect_same("gate", &plain, o);
        sp_session_free(d);
        sp_session_free(s);
    }
    print_message("  unrelated draft: gated %lld drafted / %lld plain steps, fixed %lld drafted\n",
                  (long long)gated.ss.drafted, (long long)gated.ss.plain_steps, (long long)fixed.ss.drafted);
    assert_true(gated.ss.plain_steps > 0 && gated.ss.drafted < fixed.ss.drafted);
    assert_true(fixed.ss.plain_steps <= 1); /* only where the token budget leaves no room */
    /* the cost gate, with a draft that is always right (self): the output is plain
     * decoding's whatever it decides; its first plain steps (timing plain decoding after
     * the first rounds) come whatever the timing, later pauses where rounds were slower */
    {
        sp_session *s, *d;
        sp_session_params sp = {.n_ctx = 128};
        assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
        assert_int_equal(sp_session_new(m, &sp, &d, &err), SP_OK);
        sp_spec_params spp = {.kind = SP_DRAFT_SELF, .draft = d, .k = 4, .adaptive = true, .cost_gate = true};
        run_out cg;
        memset(&cg, 0, sizeof cg);
        assert_int_equal(sp_generate_spec(s, prompt, 6, &gp, &spp, NULL, NULL, cg.tokens, &cg.st, &cg.ss, &err), SP_OK);
        expect_same("cost gate", &plain, &cg);
        print_message("  cost gate, self draft: %lld drafted / %lld plain steps\n", (long long)cg.ss.drafted,
                      (long long)cg.ss.plain_steps);
        assert_true(cg.ss.plain_steps >= 1 && cg.ss.drafted > 0);
        sp_session_free(d);
        sp_session_free(s);
    }
    sp_model_close(unrelated);
    sp_model_close(m);
}

/* The draft is budgeted on top of the target: refused when both do not fit. */
static void test_memory_budget(void **state)
{
    (void)state;
    sp_model *t = open_model("llama_mha_bf16");
    uint64_t reserved = sp_model_budget_bytes(t, 256);
    char dir[1024], lim[64];
    snprintf(dir, sizeof dir, "%s/qwen3_gqa2_tied", fixture_path("models"));
    sp_model_params mp = sp_model_default_params();
    mp.device = test_device();
    mp.n_threads = 1;
    mp.n_ctx = 256;
    mp.reserved_bytes = reserved;
    sp_model *d;
    sp_error err = {0};
    snprintf(lim, sizeof lim, "%llu", (unsigned long long)(reserved + 4096));
    setenv("SPECULA_MEM_LIMIT_BYTES", lim, 1);
    sp_status st = sp_model_open(dir, &mp, &d, &err);
    if (st == SP_OK)
        sp_model_close(d);
    assert_int_equal(st, SP_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "already budgeted"));
    snprintf(lim, sizeof lim, "%llu", (unsigned long long)(reserved * 4));
    setenv("SPECULA_MEM_LIMIT_BYTES", lim, 1);
    assert_int_equal(sp_model_open(dir, &mp, &d, &err), SP_OK);
    unsetenv("SPECULA_MEM_LIMIT_BYTES");
    sp_model_close(d);
    sp_model_close(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acceptance_rule),     cmocka_unit_test(test_greedy_dense),
        cmocka_unit_test(test_greedy_moe),          cmocka_unit_test(test_greedy_dsv4),
        cmocka_unit_test(test_stops_inside_drafts),
        cmocka_unit_test(test_self_sampled),        cmocka_unit_test(test_draft_isolation),
        cmocka_unit_test(test_sampled_distribution), cmocka_unit_test(test_compat),
        cmocka_unit_test(test_memory_budget),       cmocka_unit_test(test_p_min_and_gate),
        cmocka_unit_test(test_device_verify),
    };
    const char *only = getenv("SPECULA_TEST_FILTER"); /* e.g. "*dsv4*": one architecture */
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
