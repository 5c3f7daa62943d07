/* test_api.c: the public API an embedder sees (include/specula.h only, as tools/ does):
 * sp_model_info against the fixtures' known dimensions, input scales by index, and the
 * diagnostics section (trace writing with a planted perturbation, reading back, comparing;
 * the checkpoint self-tests); the precision a model computes in; weights computed on the
 * mapping or on aligned copies. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sp_model *open_fixture_with(const char *name, const sp_model_params *mp)
{
    sp_model *m = NULL;
    sp_error err = {0};
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    if (sp_model_open(fixture_path(rel), mp, &m, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    return m;
}

static sp_model *open_fixture(const char *name)
{
    sp_model_params mp = sp_model_default_params();
    mp.device = "cpu";
    mp.n_threads = 1;
    return open_fixture_with(name, &mp);
}

/* sp_model_precision: what the backend computes in. Exact unless fast is asked for; fast
 * where the backend has fast products (the CPU always; CUDA on sm_80+, which every GPU the
 * tests run on is), so a precision a user asked for is never silently another one. */
static void test_precision(void **state)
{
    (void)state;
    const char *devices[2] = {"cpu", test_device()};
    for (int d = 0; d < 2; d++)
        for (int fast = 0; fast < 2; fast++) {
            sp_model_params mp = sp_model_default_params();
            mp.device = devices[d];
            mp.n_threads = 1;
            mp.precision = fast ? SP_PRECISION_FAST : SP_PRECISION_EXACT;
            sp_model *m = NULL;
            sp_error err = {0};
            if (sp_model_open(fixture_path("models/llama_mha_bf16"), &mp, &m, &err) != SP_OK)
                fail_msg("%s: %s", devices[d], err.msg);
            assert_int_equal(sp_model_precision(m), mp.precision);
            sp_model_close(m);
        }
}

/* The logits of 5 tokens with the weights on the checkpoint's mapping (map_weights) or on
 * the aligned copies the CPU makes of a misaligned checkpoint: only addresses differ, so
 * every bit must agree (in both precisions, on dense, sharded, MoE and MTP fixtures). A
 * checkpoint whose tensors mostly sit on 64-byte boundaries already (gptoss_mxfp4's) is
 * used in place either way. */
static void logits_of(const char *name, bool map, bool copies, sp_precision prec, float *out,
                      int64_t *n_vocab)
{
    sp_model_params mp = sp_model_default_params();
    mp.device = "cpu";
    mp.n_threads = 2;
    mp.precision = prec;
    mp.map_weights = map;
    sp_model *m = open_fixture_with(name, &mp);
    sp_session *s = NULL;
    sp_error err = {0};
    sp_model_info info;
    sp_model_get_info(m, &info);
    if (map || !copies ? info.host_copy_bytes != 0 : info.host_copy_bytes < info.weight_bytes)
        fail_msg("%s: %llu bytes copied with map_weights %d", name,
                 (unsigned long long)info.host_copy_bytes, map);
    sp_session_params sp = sp_session_default_params();
    sp.n_ctx = 16;
    if (sp_session_new(m, &sp, &s, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    *n_vocab = sp_model_n_vocab(m);
    const int32_t toks[5] = {1, 7, 3, 11, 2};
    if (sp_session_eval(s, toks, 5, out, &err) != SP_OK)
        fail_msg("%s: %s", name, err.msg);
    sp_session_free(s);
    sp_model_close(m);
}

static void test_mapped_or_copied(void **state)
{
    (void)state;
    const struct { const char *name; bool copies; } fx[] = {
        {"llama_mha_bf16", true}, {"llama_headdim32_bias_f32_sharded", true},
        {"gptoss_bf16", true},    {"deepseekv3_mtp", true},
        {"gptoss_mxfp4", false},
    };
    enum { MAX_V = 4096 };
    static float a[5 * MAX_V], b[5 * MAX_V];
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++)
        for (int fast = 0; fast < 2; fast++) {
            const char *name = fx[i].name;
            sp_precision prec = fast ? SP_PRECISION_FAST : SP_PRECISION_EXACT;
            int64_t va = 0, vb = 0;
            logits_of(name, true, fx[i].copies, prec, a, &va);
            assert_true(va <= MAX_V);
            logits_of(name, false, fx[i].copies, prec, b, &vb);
            assert_int_equal(va, vb);
            if (memcmp(a, b, (size_t)(5 * va) * sizeof(float)) != 0)
                fail_msg("%s (%s): logits differ between mapped and copied weights", name,
                         fast ? "fast" : "exact");
        }
}

static int64_t n_format(const sp_model_info *in, const char *name)
{
    for (size_t i = 0; i < in->n_formats; i++)
        if (!strcmp(in->formats[i].name, name))
            return in->formats[i].n_matrices;
    return 0;
}

static void test_info_dense(void **state)
{
    (void)state;
    sp_model *m = open_fixture("llama_mha_bf16");
    sp_model_info in;
    sp_model_get_info(m, &in);
    /* config.json: vocab 256, hidden 64, 2 layers, 4 heads / 4 kv, head_dim 16, untied */
    assert_string_equal(in.architecture, "LlamaForCausalLM");
    assert_int_equal(in.n_vocab, 256);
    assert_int_equal(in.n_embd, 64);
    assert_int_equal(in.n_layers, 2);
    assert_int_equal(in.n_moe_layers, 0);
    assert_int_equal(in.n_heads, 4);
    assert_int_equal(in.n_kv_heads, 4);
    assert_int_equal(in.head_dim, 16);
    assert_string_equal(in.rope_type, "default");
    assert_int_equal(in.rope_dim, 16);
    assert_false(in.quantized);
    assert_string_equal(in.quant_method, "none");
    assert_null(in.quant_algo);
    assert_null(in.quant_source);
    /* 7 matrices per layer + embedding + separate LM head, all BF16 */
    assert_int_equal(in.n_formats, 1);
    assert_int_equal(n_format(&in, "BF16"), 2 * 7 + 2);
    assert_int_equal(in.n_input_scales, 0);
    assert_false(sp_model_input_scale(m, 0, NULL, NULL));
    assert_int_equal(in.weight_bytes, sp_model_weight_bytes(m));
    assert_int_equal(in.packed_bytes, 0);
    assert_string_equal(in.device, sp_model_device(m));
    assert_int_equal(in.device_total_bytes, 0);
    assert_int_equal(in.default_n_ctx, sp_model_n_ctx_max(m) < 4096 ? sp_model_n_ctx_max(m) : 4096);
    assert_true(in.session_bytes > 0);
    sp_model_close(m);
}

static void test_info_moe_nvfp4(void **state)
{
    (void)state;
    sp_model *m = open_fixture("qwen3moe_nvfp4_modelopt");
    sp_model_info in;
    sp_model_get_info(m, &in);
    /* config.json: vocab 128, hidden 64, 3 layers with mlp_only_layers [0], 4 heads / 2 kv,
     * head_dim 16, 4 experts, top-2, moe_intermediate_size 32, ModelOpt NVFP4 */
    assert_string_equal(in.architecture, "Qwen3MoeForCausalLM");
    assert_int_equal(in.n_vocab, 128);
    assert_int_equal(in.n_embd, 64);
    assert_int_equal(in.n_layers, 3);
    assert_int_equal(in.n_moe_layers, 2);
    assert_int_equal(in.n_heads, 4);
    assert_int_equal(in.n_kv_heads, 2);
    assert_int_equal(in.head_dim, 16);
    assert_int_equal(in.n_experts, 4);
    assert_int_equal(in.n_experts_per_tok, 2);
    assert_int_equal(in.expert_width, 32);
    assert_true(in.quantized);
    assert_string_equal(in.quant_method, "NVFP4 (ModelOpt)");
    assert_string_equal(in.quant_source, "config.json");
    assert_true(in.packed_bytes > 0 && in.packed_bytes < in.weight_bytes);
    assert_int_equal(n_format(&in, "BF16"), 4);
    assert_int_equal(n_format(&in, "NVFP4"), 39);
    assert_true(in.act_quant_declared);
    assert_int_equal(in.n_input_scales, 39);
    const char *name;
    float v;
    assert_true(sp_model_input_scale(m, 0, &name, &v));
    assert_string_equal(name, "model.layers.0.self_attn.q_proj.input_scale");
    assert_true(v > 0);
    assert_true(sp_model_input_scale(m, 38, &name, &v));
    assert_false(sp_model_input_scale(m, 39, &name, &v));
    sp_model_close(m);
}

/* Writes a trace of 3 prompt + 2 generated tokens, perturbed at (layer, op) when op != NULL. */
static void write_trace(sp_model *m, const char *path, const char *op)
{
    sp_error err = {0};
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    sp_session *s;
    sp_session_params sp = {.n_ctx = 16};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_OK);
    sp_trace_writer *w;
    assert_int_equal(sp_trace_writer_new(f, "target", &w, &err), SP_OK);
    if (op)
        assert_int_equal(sp_trace_writer_set_perturb(w, 1, op, 1.01f, &err), SP_OK);
    sp_trace_writer_attach(w, s);
    int32_t prompt[] = {1, 2, 3};
    sp_generate_params gp = {.n_predict = 2, .ignore_eos = true,
                             .sampling = sp_sampling_default_params()};
    sp_generate_stats st;
    assert_int_equal(sp_generate(s, prompt, 3, &gp, NULL, NULL, NULL, &st, &err), SP_OK);
    assert_false(sp_trace_writer_failed(w));
    assert_true(sp_trace_writer_lines(w) > 0);
    fclose(f);
    sp_trace_writer_free(w);
    sp_session_free(s);
}

static void test_trace_compare(void **state)
{
    (void)state;
    sp_error err = {0};
    sp_model *m = open_fixture("llama_mha_bf16");
    char *dir = make_temp_dir(), a[512], b[512];
    snprintf(a, sizeof a, "%s/a.jsonl", dir);
    snprintf(b, sizeof b, "%s/b.jsonl", dir);
    assert_true(sp_trace_op_valid("attn_out"));
    assert_false(sp_trace_op_valid("no_such_op"));
    write_trace(m, a, NULL);
    write_trace(m, b, "attn_out");

    sp_trace *ta, *tb;
    assert_int_equal(sp_trace_open(a, &ta, &err), SP_OK);
    assert_int_equal(sp_trace_open(b, &tb, &err), SP_OK);
    assert_int_equal(sp_trace_n_records(ta), sp_trace_n_records(tb));
    sp_trace_record r;
    assert_true(sp_trace_get(ta, 0, &r));
    assert_string_equal(r.model, "target");
    assert_false(sp_trace_get(ta, sp_trace_n_records(ta), &r));

    sp_trace_report *rep;
    sp_trace_summary sum;
    assert_int_equal(sp_trace_compare(ta, ta, 0, &rep, &err), SP_OK);
    sp_trace_report_summary(rep, &sum);
    assert_true(sum.by_index);
    assert_false(sum.diverged);
    assert_int_equal(sum.n_compared, sp_trace_n_records(ta));
    sp_trace_report_free(rep);

    assert_int_equal(sp_trace_compare(ta, tb, 0, &rep, &err), SP_OK);
    sp_trace_report_summary(rep, &sum);
    assert_true(sum.diverged);
    sp_trace_record ra, rb;
    assert_true(sp_trace_get(ta, sum.first.a, &ra));
    assert_true(sp_trace_get(tb, sum.first.b, &rb));
    assert_int_equal(ra.layer, 1);
    assert_string_equal(ra.op, "attn_out");
    assert_true(ra.hash != rb.hash);
    assert_true(sum.first.rel_diff > 0);
    assert_true(sum.n_growth > 0);
    sp_trace_match g = sp_trace_report_growth(rep, sum.n_growth - 1);
    assert_true(g.a < sp_trace_n_records(ta) && g.b < sp_trace_n_records(tb));
    sp_trace_report_free(rep);
    sp_trace_close(ta);
    sp_trace_close(tb);

    sp_trace *none;
    snprintf(a, sizeof a, "%s/missing.jsonl", dir);
    assert_int_equal(sp_trace_open(a, &none, &err), SP_ERR_IO);
    assert_null(none);
    remove_tree(dir);
    free(dir);
    sp_model_close(m);
}

static void test_checks(void **state)
{
    (void)state;
    sp_error err = {0};
    sp_model *m = open_fixture("llama_mha_bf16");
    int32_t prompt[] = {1, 2, 3, 4};
    sp_check_inputs in = {m, fixture_path("models/llama_mha_bf16"), NULL, NULL, prompt, 4, false};
    sp_check_results *r;
    assert_int_equal(sp_check_model(&in, &r, &err), SP_OK);
    size_t n = sp_check_results_count(r);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        const char *name, *detail;
        sp_check_status st = sp_check_results_get(r, i, &name, &detail);
        assert_true(name[0]);
        if (st == SP_CHECK_FAIL)
            fail_msg("%s: %s %s", name, sp_check_status_name(st), detail);
    }
    sp_check_results_free(r);
    sp_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precision),
        cmocka_unit_test(test_mapped_or_copied),
        cmocka_unit_test(test_info_dense),
        cmocka_unit_test(test_info_moe_nvfp4),
        cmocka_unit_test(test_trace_compare),
        cmocka_unit_test(test_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
