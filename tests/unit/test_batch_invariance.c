/* test_batch_invariance.c: a position's logits are bit-identical however the input is
 * split: one prefill, chunks of any size, one token at a time, a small n_batch that
 * chunks inside one eval, and any thread count. This is what makes greedy speculative
 * decoding equal plain greedy decoding. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_TOK 48

static float *run_chunked(sp_model *m, const int32_t *toks, int n, const int *chunks,
                          int n_chunks, int64_t n_batch)
{
    int64_t V = sp_model_n_vocab(m);
    float *out = malloc((size_t)n * (size_t)V * sizeof(float));
    sp_error err = {0};
    sp_session *s;
    sp_session_params sp = {.n_ctx = 64, .n_batch = n_batch};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    int done = 0, ci = 0;
    while (done < n) {
        int c = chunks[ci % n_chunks];
        ci++;
        if (c > n - done)
            c = n - done;
        if (sp_session_eval(s, toks + done, (size_t)c, out + (size_t)done * V, &err) != SP_OK)
            fail_msg("%s", err.msg);
        done += c;
    }
    sp_session_free(s);
    return out;
}

static void check_model_prec(const char *name, int threads_a, int threads_b, sp_precision prec)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", fixture_path("models"), name);
    sp_error err = {0};
    sp_model *ma, *mb;
    sp_model_params pa = sp_model_default_params(), pb = sp_model_default_params();
    pa.device = test_device();
    pb.device = test_device();
    pa.n_threads = threads_a;
    pb.n_threads = threads_b;
    pa.precision = pb.precision = prec;
    if (sp_model_open(dir, &pa, &ma, &err) != SP_OK || sp_model_open(dir, &pb, &mb, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    int64_t V = sp_model_n_vocab(ma);
    int32_t toks[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (int32_t)((i * 37 + 11) % V);
    size_t bytes = (size_t)N_TOK * (size_t)V * sizeof(float);
    int whole[] = {N_TOK};
    float *ref = run_chunked(ma, toks, N_TOK, whole, 1, 0);
    struct {
        int chunks[4];
        int n;
        int64_t batch;
        int other_model;
    } cases[] = {
        {{1}, 1, 0, 0},           {{2}, 1, 0, 0},         {{3, 5}, 2, 0, 0},
        {{7, 1, 16}, 3, 0, 0},    {{N_TOK}, 1, 5, 0},     {{N_TOK}, 1, 1, 0},
        {{N_TOK}, 1, 0, 1},       {{1}, 1, 0, 1},         {{4, 9}, 2, 3, 1},
        /* a fresh model (2) whose passes never exceed 40 tokens, one of 30: a CPU MoE
         * pass of 30 x top-2 runs its experts side by side, in scratch sized for 40 */
        {{30, 18}, 2, 40, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sp_model *mc = NULL;
        if (cases[c].other_model == 2 && sp_model_open(dir, &pa, &mc, &err) != SP_OK)
            fail_msg("%s: %s", name, err.msg);
        float *got = run_chunked(mc ? mc : cases[c].other_model ? mb : ma, toks, N_TOK, cases[c].chunks,
                                 cases[c].n, cases[c].batch);
        sp_model_close(mc);
        if (memcmp(got, ref, bytes) != 0) {
            size_t i = 0;
            while (((const float *)got)[i] == ref[i])
                i++;
            fail_msg("%s (%s) case %zu: logits differ from one-pass prefill at position %zu, vocab %zu",
                     name, prec == SP_PRECISION_FAST ? "fast" : "exact", c, i / (size_t)V, i % (size_t)V);
        }
        free(got);
    }
    free(ref);
    sp_model_close(ma);
    sp_model_close(mb);
}

/* Both precisions: each must be batch-invariant on its own. */
static void check_model(const char *name, int threads_a, int threads_b)
{
    check_model_prec(name, threads_a, threads_b, SP_PRECISION_EXACT);
    check_model_prec(name, threads_a, threads_b, SP_PRECISION_FAST);
}

static void test_dense_llama(void **state)
{
    (void)state;
    check_model("llama_gqa4_tied_f16", 2, 1);
    check_model("llama_headdim32_bias_f32_sharded", 1, 3);
}

static void test_dense_qwen3(void **state)
{
    (void)state;
    check_model("qwen3_yarn_legacy", 2, 3);
}

/* Routing and expert sums depend only on the token; sliding windows, sinks and MLA's
 * latent cache see the same keys in every split. */
static void test_moe(void **state)
{
    (void)state;
    check_model("qwen3moe_mixed_bf16", 2, 3);
    check_model("mixtral_window", 1, 2);
    check_model("gptoss_bf16", 2, 1);
    check_model("gptoss_mxfp4", 3, 1);
    check_model("deepseekv3_qlora_yarn", 2, 3);
}

static void test_quantized(void **state)
{
    (void)state;
    check_model("qwen3moe_nvfp4_modelopt", 2, 1);
    check_model("qwen3moe_nvfp4_compressed_tensors", 1, 3);
    check_model("deepseekv3_fp8_block", 2, 1);
}

/* DeepSeek-V4: compressed entries closed by whichever pass holds a window's end, the
 * indexer's top-k over each query's own entries (48 tokens: more CSA entries than top-k),
 * hash and biased routing, hyper-connection streams. */
static void test_dsv4(void **state)
{
    (void)state;
    check_model("dsv4_sqrtsoftplus_bf16", 2, 1);
    check_model("dsv4_csa_hca_nonorm_bf16", 1, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_llama),
        cmocka_unit_test(test_dense_qwen3),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_quantized),
        cmocka_unit_test(test_dsv4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
