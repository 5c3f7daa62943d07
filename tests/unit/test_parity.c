/* test_parity.c: logits and greedy continuations against transformers.
 *
 * Every fixture under tests/fixtures/models/ holds a checkpoint written by transformers
 * and what transformers computed from it (scripts/reference/make_fixtures.py). Bars:
 * relative L2 error of each prompt's logits <= 1e-4, the same argmax at every position
 * (a mismatch is tolerated only for genuine ties, where the reference's top two differ by
 * less than 1e-3), identical greedy continuations, and the same RoPE frequencies. */
#include "test_util.h"
#include "model/model.h"

#include <dirent.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t argmax_row(const float *r, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (r[i] > r[b])
            b = i;
    return (int32_t)b;
}

/* The checkpoint in dir against reference.json + logits.bin in ref_dir. */
static void check_model(const char *name, const char *dir, const char *ref_dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", ref_dir);
    cJSON *ref = read_json(path);
    snprintf(path, sizeof path, "%s/logits.bin", ref_dir);
    size_t n_ref;
    float *ref_logits = read_floats(path, &n_ref);

    sp_error err = {0};
    sp_model *m;
    sp_model_params mp = sp_model_default_params();
    mp.device = test_device();
    mp.n_threads = 2;
    if (sp_model_open(dir, &mp, &m, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    int64_t V = sp_model_n_vocab(m);
    assert_int_equal(V, cJSON_GetObjectItem(ref, "vocab_size")->valueint);

    /* RoPE tables */
    const cJSON *inv = cJSON_GetObjectItem(ref, "inv_freq");
    assert_int_equal(cJSON_GetArraySize(inv), m->rope.dim / 2);
    int i = 0;
    for (const cJSON *x = inv->child; x; x = x->next, i++) {
        double want = x->valuedouble, got = m->rope.inv_freq[i];
        if (fabs(got - want) > 1e-6 * fabs(want) + 1e-12)
            fail_msg("%s: inv_freq[%d] = %.9g, transformers has %.9g", name, i, got, want);
    }
    double af = cJSON_GetObjectItem(ref, "attention_scaling")->valuedouble;
    if (fabs(m->rope.attention_factor - af) > 1e-6)
        fail_msg("%s: attention factor %.9g, transformers has %.9g", name,
                 m->rope.attention_factor, af);

    sp_session *s;
    sp_session_params sp = {.n_ctx = 128};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    const cJSON *greedy = cJSON_GetObjectItem(ref, "greedy");
    size_t row = 0;
    int p_idx = 0;
    double worst = 0;
    for (const cJSON *p = prompts->child; p; p = p->next, p_idx++) {
        int n = cJSON_GetArraySize(p);
        int32_t toks[256];
        if (n < 1 || n > (int)(sizeof toks / sizeof toks[0]))
            fail_msg("%s: prompt %d has %d tokens (1..%zu supported)", name, p_idx, n,
                     sizeof toks / sizeof toks[0]);
        int k = 0;
        for (const cJSON *t = p->child; t; t = t->next) {
            if (!cJSON_IsNumber(t) || t->valueint < 0 || t->valueint >= V)
                fail_msg("%s: prompt %d token %d is not an id below %lld", name, p_idx, k, (long long)V);
            toks[k++] = t->valueint;
        }
        float *logits = malloc((size_t)n * (size_t)V * sizeof(float));
        assert_int_equal(sp_session_truncate(s, 0, &err), SP_OK);
        if (sp_session_eval(s, toks, (size_t)n, logits, &err) != SP_OK)
            fail_msg("%s: %s", name, err.msg);
        assert_true((row + (size_t)n) * (size_t)V <= n_ref);
        const float *want = ref_logits + row * (size_t)V;
        double e = rel_l2(logits, want, (size_t)n * (size_t)V);
        if (e > worst)
            worst = e;
        if (!(e <= 1e-4))
            fail_msg("%s: prompt %d (%d tokens): relative L2 error %.3g > 1e-4", name, p_idx, n, e);
        for (int t = 0; t < n; t++) {
            const float *a = logits + (size_t)t * V, *b = want + (size_t)t * V;
            int32_t ga = argmax_row(a, V), gb = argmax_row(b, V);
            if (ga != gb && fabsf(b[gb] - b[ga]) >= 1e-3f)
                fail_msg("%s: prompt %d position %d: argmax %d, transformers %d", name, p_idx, t,
                         ga, gb);
        }
        row += (size_t)n;
        free(logits);
        if (p_idx < cJSON_GetArraySize(greedy)) {
            const cJSON *g = cJSON_GetArrayItem(greedy, p_idx);
            int32_t out[64];
            sp_generate_stats st;
            sp_generate_params gp = {.n_predict = 12, .sampling = sp_sampling_default_params()};
            assert_int_equal(sp_session_truncate(s, 0, &err), SP_OK);
            assert_int_equal(sp_generate(s, toks, (size_t)n, &gp, NULL, NULL, out, &st, &err),
                             SP_OK);
            assert_true(cJSON_GetArraySize(g) <= (int)(sizeof out / sizeof out[0]));
            assert_int_equal(st.n_generated, cJSON_GetArraySize(g));
            int j = 0;
            for (const cJSON *t = g->child; t; t = t->next, j++)
                if (out[j] != t->valueint)
                    fail_msg("%s: prompt %d greedy token %d: %d, transformers %d", name, p_idx, j,
                             out[j], t->valueint);
        }
    }
    assert_int_equal(row * (size_t)V, n_ref);
    printf("  %-36s worst relL2 %.2e\n", name, worst);
    sp_session_free(s);
    sp_model_close(m);
    free(ref_logits);
    cJSON_Delete(ref);
}

/* Every fixture make_fixtures.py writes: each must be present with its reference (a
 * missing one is a failure, not a skip), and a directory not listed here fails too, so a
 * new fixture is added to the list. */
static const char *const FIXTURES[] = {
    "deepseekv3_fp8_block",
    "deepseekv3_noqlora",
    "deepseekv3_qlora_yarn",
    "gptoss_bf16",
    "gptoss_mxfp4",
    "llama3_rope_gqa2",
    "llama3_rope_mqa_legacy",
    "llama_gqa4_tied_f16",
    "llama_headdim32_bias_f32_sharded",
    "llama_mha_bf16",
    "llama_yarn",
    "llama_yarn_legacy_type",
    "mixtral_nvfp4_hf_quant_config",
    "mixtral_window",
    "qwen3_gqa2_tied",
    "qwen3_yarn_legacy",
    "qwen3moe_mixed_bf16",
    "qwen3moe_nvfp4_compressed_tensors",
    "qwen3moe_nvfp4_modelopt",
    "qwen3moe_sparse_step2_nonorm",
};
#define N_FIXTURES (sizeof FIXTURES / sizeof FIXTURES[0])

static void test_all_fixtures(void **state)
{
    (void)state;
    DIR *d = opendir(fixture_path("models"));
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, "dsv4_", 5) == 0 || /* test_parity_dsv4.c */
            strcmp(e->d_name, "deepseekv3_mtp") == 0)                       /* test_mtp.c */
            continue;
        bool listed = false;
        for (size_t i = 0; i < N_FIXTURES; i++)
            listed |= strcmp(e->d_name, FIXTURES[i]) == 0;
        if (!listed)
            fail_msg("tests/fixtures/models/%s is not in test_parity.c's FIXTURES list", e->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < N_FIXTURES; i++) {
        char dir[1024], p[1100];
        snprintf(dir, sizeof dir, "%s/%s", fixture_path("models"), FIXTURES[i]);
        snprintf(p, sizeof p, "%s/reference.json", dir);
        FILE *f = fopen(p, "r");
        if (!f)
            fail_msg("fixture %s: %s is missing", FIXTURES[i], p);
        fclose(f);
        check_model(FIXTURES[i], dir, dir);
    }
}

/* The bundled default model (models/default, trained by
 * scripts/reference/train_default_model.py) against transformers reading it back. */
static void test_default_model(void **state)
{
    (void)state;
    char ref[1024];
    snprintf(ref, sizeof ref, "%s", fixture_path("default_model_reference"));
    check_model("models/default", SPECULA_SOURCE_DIR "/models/default", ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_all_fixtures),
                                       cmocka_unit_test(test_default_model)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
