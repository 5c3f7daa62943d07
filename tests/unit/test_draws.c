/* test_draws.c: tokens drawn through the engine (sp_session_eval_sample,
 * sp_batch_item.sampling) are the host sampler's draws from the same logits with the same
 * uniforms: on the CPU backend (the draw made after the logits come back), through a shim
 * giving the CPU backend a device-style draw op (only ids come back; every third row left
 * to the host, id -1, as the CUDA kernel leaves long top-p heads), and on a GPU backend
 * with its own kernel (SPECULA_TEST_DEVICE=cuda). Greedy and sampled sequences share a
 * batch; bad parameters and uniforms are refused before anything runs. */
#include "device_shim.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static sp_backend_ops g_draw_ops;

static const sp_sampling_params g_params[] = {
    {.temperature = 1.0f, .top_p = 1.0f, .seed = 3},
    {.temperature = 0.7f, .top_k = 5, .top_p = 0.9f, .seed = 4},
    {.temperature = 1.3f, .top_p = 0.8f, .min_p = 0.02f, .seed = 5},
};

/* n tokens drawn after a prompt, the reference way: every logits row back, then the host
 * sampler with the stream's uniforms. */
static void reference(sp_model *m, const sp_sampling_params *p, const int32_t *prompt, int np,
                      int32_t *out, int n)
{
    sp_session *s;
    sp_session_params sp = {.n_ctx = 64, .n_batch = 16};
    assert_int_equal(sp_session_new(m, &sp, &s, NULL), SP_OK);
    sp_sampler *smp;
    assert_int_equal(sp_sampler_new(p, sp_model_n_vocab(m), &smp, NULL), SP_OK);
    sp_rng rng;
    sp_rng_seed(&rng, p->seed);
    assert_int_equal(sp_session_eval(s, prompt, (size_t)np, NULL, NULL), SP_OK);
    for (int i = 0; i < n; i++) {
        out[i] = sp_sampler_sample(smp, sp_session_last_logits(s), &rng);
        assert_int_equal(sp_session_eval(s, &out[i], 1, NULL, NULL), SP_OK);
    }
    sp_sampler_free(smp);
    sp_session_free(s);
}

/* The same through sp_session_eval_sample, and two sessions drawing in one batch beside a
 * greedy one (sp_batch_eval). */
static void check_model(const char *name, bool shim)
{
    sp_model *m = open_fixture_model(name, 2);
    const sp_backend_ops *own = m->be->ops;
    if (shim) {
        test_shim_ops(own, &g_draw_ops, 3);
        m->be->ops = &g_draw_ops;
    }
    const int64_t V = sp_model_n_vocab(m);
    int32_t prompt[6];
    for (int i = 0; i < 6; i++)
        prompt[i] = (int32_t)((i * 31 + 7) % V);
    enum { N = 12, P = 3 };
    int32_t want[P][N], got[P][N];
    sp_session_params sp = {.n_ctx = 64, .n_batch = 16};
    for (int k = 0; k < P; k++) {
        reference(m, &g_params[k], prompt, 6, want[k], N);
        sp_session *s;
        assert_int_equal(sp_session_new(m, &sp, &s, NULL), SP_OK);
        sp_rng rng;
        sp_rng_seed(&rng, g_params[k].seed);
        sp_error err = {0};
        if (sp_session_eval_sample(s, prompt, 6, &g_params[k], sp_rng_uniform(&rng), &got[k][0], &err))
            fail_msg("%s: %s", name, err.msg);
        for (int i = 1; i < N; i++)
            if (sp_session_eval_sample(s, &got[k][i - 1], 1, &g_params[k], sp_rng_uniform(&rng),
                                       &got[k][i], &err))
                fail_msg("%s: %s", name, err.msg);
        assert_memory_equal(got[k], want[k], sizeof want[k]);
        sp_session_free(s);
    }
    /* params 0 and 1 drawn in one batch with a greedy sequence; the greedy one's picks are
     * sp_session_eval_greedy's */
    sp_session *b[3];
    sp_rng rng[2];
    int32_t tok[3], next[3], greedy[N];
    sp_session *g;
    assert_int_equal(sp_session_new(m, &sp, &g, NULL), SP_OK);
    assert_int_equal(sp_session_eval_greedy(g, prompt, 6, &greedy[0], NULL), SP_OK);
    for (int i = 1; i < N; i++)
        assert_int_equal(sp_session_eval_greedy(g, &greedy[i - 1], 1, &greedy[i], NULL), SP_OK);
    sp_session_free(g);
    for (int k = 0; k < 3; k++)
        assert_int_equal(sp_session_new(m, &sp, &b[k], NULL), SP_OK);
    for (int k = 0; k < 2; k++)
        sp_rng_seed(&rng[k], g_params[k].seed);
    for (int i = 0; i < N; i++) {
        sp_batch_item items[3];
        for (int k = 0; k < 3; k++) {
            items[k] = (sp_batch_item){.session = b[k], .tokens = i ? &tok[k] : prompt,
                                       .n_tokens = i ? 1 : 6, .pick = &next[k],
                                       .sampling = k < 2 ? &g_params[k] : NULL,
                                       .u = k < 2 ? sp_rng_uniform(&rng[k]) : 0.0};
        }
        sp_error err = {0};
        if (sp_batch_eval(m, items, 3, &err) != SP_OK)
            fail_msg("%s: %s", name, err.msg);
        assert_int_equal(next[0], want[0][i]);
        assert_int_equal(next[1], want[1][i]);
        assert_int_equal(next[2], greedy[i]);
        memcpy(tok, next, sizeof tok);
    }
    for (int k = 0; k < 3; k++)
        sp_session_free(b[k]);
    /* refused: no params, a bad uniform, a bad temperature */
    sp_session *s;
    assert_int_equal(sp_session_new(m, &sp, &s, NULL), SP_OK);
    sp_error err = {0};
    int32_t t = -1;
    sp_sampling_params bad = g_params[0];
    bad.temperature = -1.0f;
    assert_int_equal(sp_session_eval_sample(s, prompt, 6, NULL, 0.5, &t, &err), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_session_eval_sample(s, prompt, 6, &g_params[0], 1.0, &t, &err), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_session_eval_sample(s, prompt, 6, &bad, 0.5, &t, &err), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_session_eval_sample(s, prompt, 6, &g_params[0], 0.5, NULL, &err), SP_ERR_INVALID_ARG);
    sp_batch_item it = {.session = s, .tokens = prompt, .n_tokens = 6, .pick = &t, .sampling = &bad, .u = 0.5};
    assert_int_equal(sp_batch_eval(m, &it, 1, &err), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_session_n_past(s), 0);
    sp_session_free(s);
    m->be->ops = own;
    sp_model_close(m);
}

static void test_draws_equal_host(void **state)
{
    (void)state;
    check_model("llama_gqa4_tied_f16", false);
    check_model("gptoss_mxfp4", false);
    if (strcmp(test_device(), "cpu") != 0)
        return; /* a GPU backend drew with its own kernel above */
    check_model("llama_gqa4_tied_f16", true);
    assert_true(g_shim.draw_calls > 0 && g_shim.draw_left > 0); /* drew, and left rows to the host */
    check_model("qwen3moe_mixed_bf16", true);
    assert_true(g_shim.draw_calls > 0 && g_shim.draw_left > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draws_equal_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
