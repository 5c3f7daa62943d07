/* test_parity_dsv4.c: DeepSeek-V4 against transformers 5.17 (scripts/reference/
 * make_dsv4_fixtures.py), and its batch invariance.
 *
 * transformers' lightning indexer keeps torch.topk's choice among tied scores, and ties
 * are common (sums of ReLUs: several entries at exactly 0). In a prefill it ranks each
 * query against every entry of the pass, future ones at -inf, so which tied entry wins
 * depends on the pass length; when decoding, only the query's own entries are ranked.
 * The engine does the latter always (batch invariance). So:
 *   1. replay: with the model's v4_index_queue set to the reference pass's entry count,
 *      every prompt's logits are within relative L2 1e-4 of transformers', same argmax,
 *      and greedy continuations recomputed from scratch each step (as the fixture's were)
 *      are identical — every piece of the math checked, ties included;
 *   2. default: prompts short enough that the indexer keeps every entry (n / rate <=
 *      index_topk, so no tie can matter) match transformers within the same bar;
 *   3. batch invariance: token by token, chunked prefill and one prefill give
 *      bit-identical logits, and so does re-evaluating after a rollback (truncate).
 * On the backend SPECULA_TEST_DEVICE names (the CPU by default, the GPU with cuda). */
#include "test_util.h"
#include "format/hf_config.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the last three: NVFP4 experts as ModelOpt ships them (the seed's model), every linear
 * layer but the router in FP8 with 128x128 blocks, and MXFP4 experts as per-matrix I8
 * codes with UE8M0 scales; their references ran on the dequantized weights */
static const char *const FIXTURES[] = {"dsv4_sqrtsoftplus_bf16", "dsv4_sigmoid_yarn_clamp_f32",
                                       "dsv4_csa_hca_nonorm_bf16", "dsv4_nvfp4_modelopt",
                                       "dsv4_fp8_block", "dsv4_mxfp4"};
#define MAX_TOK 512

typedef struct fx {
    const char *name;
    cJSON *ref;
    float *logits;
    size_t n_logits;
    sp_model *m;
    sp_session *s;
    int64_t V, csa_rate;
} fx;

static int32_t argmax_row(const float *r, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (r[i] > r[b])
            b = i;
    return (int32_t)b;
}

static void open_fx(fx *f, const char *name)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", fixture_path("models"), name);
    f->name = name;
    snprintf(path, sizeof path, "%s/reference.json", dir);
    f->ref = read_json(path);
    snprintf(path, sizeof path, "%s/logits.bin", dir);
    f->logits = read_floats(path, &f->n_logits);
    sp_error err = {0};
    sp_model_params mp = sp_model_default_params();
    mp.device = test_device(); /* SPECULA_TEST_DEVICE=cuda: the same checks on the GPU */
    mp.n_threads = 2;
    if (sp_model_open(dir, &mp, &f->m, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    f->V = sp_model_n_vocab(f->m);
    f->csa_rate = 0;
    for (int64_t l = 0; l < f->m->n_layers; l++)
        if (f->m->cfg->dsv4.indexer[l])
            f->csa_rate = f->m->cfg->dsv4.compress_rate[l];
    sp_session_params sp = {.n_ctx = MAX_TOK, .n_batch = MAX_TOK};
    assert_int_equal(sp_session_new(f->m, &sp, &f->s, &err), SP_OK);
}

static void close_fx(fx *f)
{
    sp_session_free(f->s);
    sp_model_close(f->m);
    free(f->logits);
    cJSON_Delete(f->ref);
}

static int read_tokens(const fx *f, const cJSON *p, int32_t *toks)
{
    int n = 0;
    for (const cJSON *t = p->child; t; t = t->next) {
        if (n >= MAX_TOK || !cJSON_IsNumber(t) || t->valueint < 0 || t->valueint >= f->V)
            fail_msg("%s: a prompt token is not an id below %lld (or too many)", f->name, (long long)f->V);
        toks[n++] = t->valueint;
    }
    return n;
}

/* One prefill of toks; replay = the entry count transformers' pass ranked against. */
static void eval_all(fx *f, const int32_t *toks, int n, bool replay, float *out)
{
    sp_error err = {0};
    f->m->v4_index_queue = replay && f->csa_rate ? n / f->csa_rate : 0;
    assert_int_equal(sp_session_truncate(f->s, 0, &err), SP_OK);
    if (sp_session_eval(f->s, toks, (size_t)n, out, &err) != SP_OK)
        fail_msg("%s: %s", f->name, err.msg);
    f->m->v4_index_queue = 0;
}

static void check_rope(const fx *f)
{
    const char *which[] = {"main", "compress"};
    const sp_rope *r[] = {&f->m->rope, &f->m->rope_c};
    const cJSON *rope = cJSON_GetObjectItem(f->ref, "rope");
    for (int k = 0; k < 2; k++) {
        const cJSON *o = cJSON_GetObjectItem(rope, which[k]);
        const cJSON *inv = cJSON_GetObjectItem(o, "inv_freq");
        assert_int_equal(cJSON_GetArraySize(inv), r[k]->dim / 2);
        int i = 0;
        for (const cJSON *x = inv->child; x; x = x->next, i++)
            if (fabs(r[k]->inv_freq[i] - x->valuedouble) > 1e-6 * fabs(x->valuedouble) + 1e-12)
                fail_msg("%s: %s inv_freq[%d] = %.9g, transformers %.9g", f->name, which[k], i,
                         r[k]->inv_freq[i], x->valuedouble);
        double af = cJSON_GetObjectItem(o, "attention_scaling")->valuedouble;
        if (fabs(r[k]->attention_factor - af) > 1e-6)
            fail_msg("%s: %s attention factor %.9g, transformers %.9g", f->name, which[k],
                     r[k]->attention_factor, af);
    }
}

/* Logits of prompt p (n tokens, rows from `want`) against the bar; returns the error. */
static double compare(const fx *f, int p, const float *got, const float *want, int n)
{
    double e = rel_l2(got, want, (size_t)n * (size_t)f->V);
    if (!(e <= 1e-4))
        fail_msg("%s: prompt %d (%d tokens): relative L2 error %.3g > 1e-4", f->name, p, n, e);
    for (int t = 0; t < n; t++) {
        const float *a = got + (size_t)t * f->V, *b = want + (size_t)t * f->V;
        int32_t ga = argmax_row(a, f->V), gb = argmax_row(b, f->V);
        if (ga != gb && fabsf(b[gb] - b[ga]) >= 1e-3f)
            fail_msg("%s: prompt %d position %d: argmax %d, transformers %d", f->name, p, t, ga, gb);
    }
    return e;
}

/* Greedy continuation recomputed from scratch each step, in replay, as the fixture's. */
static void check_greedy(fx *f, const int32_t *prompt, int n, const cJSON *want, float *buf)
{
    int32_t toks[MAX_TOK];
    memcpy(toks, prompt, (size_t)n * sizeof *toks);
    int len = n, j = 0;
    for (const cJSON *t = want->child; t; t = t->next, j++) {
        assert_true(len < MAX_TOK);
        eval_all(f, toks, len, true, buf);
        int32_t next = argmax_row(buf + (size_t)(len - 1) * f->V, f->V);
        if (next != t->valueint)
            fail_msg("%s: %d-token prompt, greedy token %d: %d, transformers %d", f->name, n, j, next,
                     t->valueint);
        toks[len++] = next;
    }
}

static void test_parity(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        fx f;
        open_fx(&f, FIXTURES[i]);
        check_rope(&f);
        float *got = malloc((size_t)MAX_TOK * (size_t)f.V * sizeof(float));
        int32_t toks[MAX_TOK];
        size_t row = 0;
        int p = 0;
        double worst_replay = 0, worst_default = 0;
        const cJSON *prompts = cJSON_GetObjectItem(f.ref, "prompts");
        for (const cJSON *pr = prompts->child; pr; pr = pr->next, p++) {
            int n = read_tokens(&f, pr, toks);
            assert_true((row + (size_t)n) * (size_t)f.V <= f.n_logits);
            const float *want = f.logits + row * (size_t)f.V;
            eval_all(&f, toks, n, true, got);
            worst_replay = fmax(worst_replay, compare(&f, p, got, want, n));
            if (!f.csa_rate || n / f.csa_rate <= f.m->cfg->dsv4.index_topk) {
                eval_all(&f, toks, n, false, got);
                worst_default = fmax(worst_default, compare(&f, p, got, want, n));
            }
            row += (size_t)n;
        }
        assert_int_equal(row * (size_t)f.V, f.n_logits);
        const cJSON *gp = cJSON_GetObjectItem(f.ref, "greedy_prompts");
        const cJSON *greedy = cJSON_GetObjectItem(f.ref, "greedy");
        const cJSON *g = greedy->child;
        for (const cJSON *x = gp->child; x && g; x = x->next, g = g->next) {
            int n = read_tokens(&f, cJSON_GetArrayItem(prompts, x->valueint), toks);
            check_greedy(&f, toks, n, g, got);
        }
        printf("  %-32s worst relL2 %.2e (replay), %.2e (default, no top-k choice)\n", f.name,
               worst_replay, worst_default);
        free(got);
        close_fx(&f);
    }
}

/* Logits of toks evaluated in chunks of `chunk` tokens (0: one pass). */
static void eval_chunks(fx *f, const int32_t *toks, int n, int chunk, float *out)
{
    sp_error err = {0};
    assert_int_equal(sp_session_truncate(f->s, 0, &err), SP_OK);
    for (int i = 0; i < n;) {
        int k = chunk && n - i > chunk ? chunk : n - i;
        if (sp_session_eval(f->s, toks + i, (size_t)k, out + (size_t)i * f->V, &err) != SP_OK)
            fail_msg("%s: %s", f->name, err.msg);
        i += k;
    }
}

static void test_batch_invariance(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        fx f;
        open_fx(&f, FIXTURES[i]);
        int32_t toks[MAX_TOK];
        const cJSON *prompts = cJSON_GetObjectItem(f.ref, "prompts");
        int n = read_tokens(&f, cJSON_GetArrayItem(prompts, cJSON_GetArraySize(prompts) - 1), toks);
        n = n > 160 ? 160 : n; /* many windows of every rate; token by token stays quick */
        size_t bytes = (size_t)n * (size_t)f.V * sizeof(float);
        float *one = malloc(bytes), *other = malloc(bytes);
        eval_chunks(&f, toks, n, 0, one);
        const int chunks[] = {1, 7, 64};
        for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
            eval_chunks(&f, toks, n, chunks[c], other);
            if (memcmp(one, other, bytes))
                fail_msg("%s: chunks of %d tokens differ from one prefill", f.name, chunks[c]);
        }
        /* rollback: evaluate everything, go back to 45 (mid-window), evaluate the rest */
        sp_error err = {0};
        eval_chunks(&f, toks, n, 0, other);
        assert_int_equal(sp_session_truncate(f.s, 45, &err), SP_OK);
        memset(other, 0, bytes);
        assert_int_equal(sp_session_eval(f.s, toks + 45, (size_t)(n - 45), other, &err), SP_OK);
        if (memcmp(one + (size_t)45 * f.V, other, bytes - (size_t)45 * f.V * sizeof(float)))
            fail_msg("%s: re-evaluating after a rollback to 45 differs", f.name);
        free(one);
        free(other);
        close_fx(&f);
    }
}

/* The hub's original config spelling folds into the same fields as transformers' form. */
static void test_config_spellings(void **state)
{
    (void)state;
    const char *hub =
        "{\"architectures\": [\"DeepseekV4ForCausalLM\"], \"model_type\": \"deepseek_v4\","
        " \"vocab_size\": 1000, \"hidden_size\": 256, \"num_hidden_layers\": 5,"
        " \"num_attention_heads\": 8, \"num_key_value_heads\": 1, \"head_dim\": 512,"
        " \"q_lora_rank\": 64, \"qk_rope_head_dim\": 64, \"n_routed_experts\": 16,"
        " \"num_experts_per_tok\": 4, \"moe_intermediate_size\": 32, \"o_groups\": 4,"
        " \"compress_ratios\": [128, 128, 4, 0, 4], \"num_hash_layers\": 2,"
        " \"rope_theta\": 10000, \"compress_rope_theta\": 160000,"
        " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 16, \"original_max_position_embeddings\": 65536}}";
    sp_hf_config *c;
    sp_error err = {0};
    if (sp_hf_config_parse(hub, strlen(hub), NULL, 0, "hub/config.json", &c, &err) != SP_OK)
        fail_msg("%s", err.msg);
    const sp_dsv4_config *d = &c->dsv4;
    const int64_t rates[] = {128, 128, 4, 0, 4};
    for (int l = 0; l < 5; l++) {
        assert_int_equal(d->compress_rate[l], rates[l]);
        assert_int_equal(d->indexer[l], rates[l] == 4);
        assert_int_equal(d->hash_moe[l], l < 2);
        assert_true(c->layer_sliding[l]);
    }
    assert_int_equal(c->rope.type, SP_ROPE_DEFAULT);
    assert_true(fabs(c->rope.theta - 10000) < 1e-9 && fabs(c->rope.partial_rotary_factor - 0.125) < 1e-12);
    assert_int_equal(d->rope_compress.type, SP_ROPE_YARN);
    assert_true(fabs(d->rope_compress.theta - 160000) < 1e-9);
    assert_true(d->rope_compress.has_attention_factor && d->rope_compress.attention_factor == 1.0);
    assert_int_equal(d->scoring, SP_SCORE_SQRTSOFTPLUS);
    assert_true(fabs(c->swiglu_limit - 10.0) < 1e-12);
    sp_hf_config_free(c);

    /* softmax scoring is not a V4 router transformers has: refused, naming the field */
    char bad[2048];
    snprintf(bad, sizeof bad, "%.*s, \"scoring_func\": \"softmax\"}", (int)strlen(hub) - 1, hub);
    assert_int_equal(sp_hf_config_parse(bad, strlen(bad), NULL, 0, "hub/config.json", &c, &err),
                     SP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "scoring_func"));
    snprintf(bad, sizeof bad, "%.*s, \"o_groups\": 3}", (int)strlen(hub) - 1, hub);
    assert_int_not_equal(sp_hf_config_parse(bad, strlen(bad), NULL, 0, "hub/config.json", &c, &err), SP_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_config_spellings), cmocka_unit_test(test_parity),
                                       cmocka_unit_test(test_batch_invariance)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
