/* test_bad_input.c: malformed checkpoints, configs and requests give clear errors, never
 * crashes (the suite also runs under ASan/UBSan, which catches leaks on these paths).
 * Each case checks the status and that the message names the offending field, tensor
 * or value. */
#include "test_util.h"
#include "format/safetensors.h"
#include "format/hf_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- safetensors -------------------------------------------------------------------- */

static void expect_st_error(const char *header, const void *data, size_t n_data,
                            uint64_t len_override, const char *needle)
{
    char *dir = make_temp_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    write_raw_safetensors(path, header, data, n_data, len_override);
    sp_safetensors *st = NULL;
    sp_error err = {0};
    sp_status s = sp_safetensors_open(path, &st, &err);
    if (s == SP_OK)
        fail_msg("accepted a bad file: %s", header);
    assert_null(st);
    if (!strstr(err.msg, needle))
        fail_msg("message '%s' does not mention '%s'", err.msg, needle);
    remove_tree(dir);
    free(dir);
}

static void test_safetensors_malformed(void **state)
{
    (void)state;
    static const unsigned char d16[16] = {0};
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d16, 4, 0,
                    "tensors cover 8 bytes but the file holds 4");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d16, 12, 0,
                    "file holds 12");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d16, 8, 0,
                    "need 12");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                    d16, 12, 0, "gap or overlap");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                    d16, 8, 0, "gap or overlap");
    expect_st_error("{\"a\":{\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[0,4]}}", d16, 4, 0,
                    "unknown dtype 'Q9'");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", d16, 4, 0,
                    "shape");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", d16, 4, 0,
                    "shape");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", d16, 4, 0,
                    "data_offsets");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", d16, 4, 0,
                    "end before begin");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
                    "\"data_offsets\":[0,4]}}",
                    d16, 4, 0, "overflows");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                    "\"data_offsets\":[0,4]}}",
                    d16, 4, 0, "rank 9");
    expect_st_error("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", d16, 1, 0,
                    "whole bytes");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                    d16, 8, 0, "appears twice");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"\\u0061\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                    d16, 8, 0, "appears twice");
    expect_st_error("{\"__metadata__\":{\"k\":1}}", d16, 0, 0, "__metadata__");
    expect_st_error("{\"a\":", d16, 0, 0, "malformed JSON");
    expect_st_error("[1,2]", d16, 0, 0, "not a JSON object");
    expect_st_error("{\"a\":{}} trailing", d16, 0, 0, "trailing data");
    expect_st_error("{}", d16, 0, 1000, "runs past the end");
    expect_st_error("{}", d16, 0, 200000000ull, "exceeds the 100000000-byte limit");
    expect_st_error("{\"\xff\":1}", d16, 0, 0, "not valid UTF-8");
    /* a file shorter than the length prefix */
    char *dir = make_temp_dir();
    write_text(dir, "t.safetensors", "abc");
    char p[512];
    snprintf(p, sizeof p, "%s/t.safetensors", dir);
    sp_safetensors *st;
    sp_error err = {0};
    assert_int_equal(sp_safetensors_open(p, &st, &err), SP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "too small"));
    remove_tree(dir);
    free(dir);
}

static void test_safetensors_valid_edge_cases(void **state)
{
    (void)state;
    char *dir = make_temp_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/ok.safetensors", dir);
    float one = 1.0f;
    /* zero-size tensor, scalar, metadata, trailing header spaces */
    write_raw_safetensors(path,
                          "{\"__metadata__\":{\"format\":\"pt\"},"
                          "\"empty\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                          "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}   ",
                          &one, 4, 0);
    sp_safetensors *st;
    sp_error err = {0};
    if (sp_safetensors_open(path, &st, &err) != SP_OK)
        fail_msg("%s", err.msg);
    const sp_st_tensor *s = sp_safetensors_find(st, "s");
    assert_non_null(s);
    assert_int_equal(s->n_elements, 1);
    assert_int_equal(s->n_dims, 0);
    assert_non_null(sp_safetensors_find(st, "empty"));
    assert_null(sp_safetensors_find(st, "missing"));
    sp_safetensors_close(st);
    remove_tree(dir);
    free(dir);
}

/* ---- a tiny valid Llama checkpoint we can break piece by piece ---------------------- */

#define V 16
#define H 8
#define I 12
#define HD 4
static float wbuf[V * H * 4];

static const char *tiny_config =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":16,\"hidden_size\":8,"
    "\"intermediate_size\":12,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
    "\"num_key_value_heads\":1,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,"
    "\"eos_token_id\":2}";

/* Writes dir/model.safetensors with every Llama tensor; `skip` omits one, `bad_shape`
 * gives one a wrong shape, `bad_dtype` stores one as I32. */
static void write_tiny(const char *dir, const char *skip, const char *bad_shape,
                       const char *bad_dtype)
{
    for (size_t i = 0; i < sizeof wbuf / sizeof wbuf[0]; i++)
        wbuf[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
    st_entry all[] = {
        {"model.embed_tokens.weight", "F32", 2, {V, H}, wbuf, V * H * 4},
        {"lm_head.weight", "F32", 2, {V, H}, wbuf, V * H * 4},
        {"model.norm.weight", "F32", 1, {H}, wbuf, H * 4},
        {"model.layers.0.input_layernorm.weight", "F32", 1, {H}, wbuf, H * 4},
        {"model.layers.0.post_attention_layernorm.weight", "F32", 1, {H}, wbuf, H * 4},
        {"model.layers.0.self_attn.q_proj.weight", "F32", 2, {2 * HD, H}, wbuf, 2 * HD * H * 4},
        {"model.layers.0.self_attn.k_proj.weight", "F32", 2, {HD, H}, wbuf, HD * H * 4},
        {"model.layers.0.self_attn.v_proj.weight", "F32", 2, {HD, H}, wbuf, HD * H * 4},
        {"model.layers.0.self_attn.o_proj.weight", "F32", 2, {H, 2 * HD}, wbuf, H * 2 * HD * 4},
        {"model.layers.0.mlp.gate_proj.weight", "F32", 2, {I, H}, wbuf, I * H * 4},
        {"model.layers.0.mlp.up_proj.weight", "F32", 2, {I, H}, wbuf, I * H * 4},
        {"model.layers.0.mlp.down_proj.weight", "F32", 2, {H, I}, wbuf, H * I * 4},
    };
    st_entry keep[16];
    size_t n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (skip && strcmp(all[i].name, skip) == 0)
            continue;
        keep[n] = all[i];
        if (bad_shape && strcmp(all[i].name, bad_shape) == 0) {
            keep[n].shape[0] = keep[n].shape[1];
            keep[n].shape[1] = all[i].shape[0];
            if (keep[n].n_dims == 1) {
                keep[n].shape[0] = H / 2;
                keep[n].n_bytes = H / 2 * 4;
            }
        }
        if (bad_dtype && strcmp(all[i].name, bad_dtype) == 0)
            keep[n].dtype = "I32";
        n++;
    }
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_safetensors(p, keep, n);
}

static char *tiny_dir(const char *config, const char *skip, const char *bad_shape,
                      const char *bad_dtype)
{
    char *dir = make_temp_dir();
    write_text(dir, "config.json", config);
    write_tiny(dir, skip, bad_shape, bad_dtype);
    return dir;
}

static void expect_model_error(const char *dir, sp_status want, const char *needle)
{
    sp_model *m = NULL;
    sp_error err = {0};
    sp_status s = sp_model_open(dir, NULL, &m, &err);
    if (s == SP_OK) {
        sp_model_close(m);
        fail_msg("model opened, expected an error mentioning '%s'", needle);
    }
    assert_null(m);
    if (want != SP_OK && s != want)
        fail_msg("status %s, expected %s (%s)", sp_status_name(s), sp_status_name(want), err.msg);
    if (!strstr(err.msg, needle))
        fail_msg("message '%s' does not mention '%s'", err.msg, needle);
}

static void test_tiny_model_opens(void **state)
{
    (void)state;
    char *dir = tiny_dir(tiny_config, NULL, NULL, NULL);
    sp_model *m;
    sp_error err = {0};
    if (sp_model_open(dir, NULL, &m, &err) != SP_OK)
        fail_msg("%s", err.msg);
    sp_session *s;
    assert_int_equal(sp_session_new(m, NULL, &s, &err), SP_OK);
    int32_t toks[3] = {1, 5, 15};
    assert_int_equal(sp_session_eval(s, toks, 3, NULL, &err), SP_OK);
    /* token ids out of range, empty input, context overflow */
    int32_t bad[2] = {3, 16};
    assert_int_equal(sp_session_eval(s, bad, 2, NULL, &err), SP_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "id 16 is outside the vocabulary [0, 16)"));
    bad[1] = -1;
    assert_int_equal(sp_session_eval(s, bad, 2, NULL, &err), SP_ERR_INVALID_ARG);
    assert_int_equal(sp_session_eval(s, toks, 0, NULL, &err), SP_ERR_INVALID_ARG);
    int32_t many[80] = {0};
    assert_int_equal(sp_session_eval(s, many, 80, NULL, &err), SP_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "do not fit"));
    assert_int_equal(sp_session_n_past(s), 3);
    sp_session_free(s);
    sp_session_params sp = {.n_ctx = 65};
    assert_int_equal(sp_session_new(m, &sp, &s, &err), SP_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "max_position_embeddings 64"));
    sp_model_close(m);
    remove_tree(dir);
    free(dir);
}

static void test_missing_and_misshapen_tensors(void **state)
{
    (void)state;
    char *d = tiny_dir(tiny_config, "model.layers.0.mlp.up_proj.weight", NULL, NULL);
    expect_model_error(d, SP_ERR_FORMAT, "model.layers.0.mlp.up_proj.weight' is missing");
    remove_tree(d);
    free(d);
    d = tiny_dir(tiny_config, "lm_head.weight", NULL, NULL);
    expect_model_error(d, SP_ERR_FORMAT, "'lm_head.weight' is missing and tie_word_embeddings");
    remove_tree(d);
    free(d);
    d = tiny_dir(tiny_config, NULL, "model.layers.0.self_attn.k_proj.weight", NULL);
    expect_model_error(d, SP_ERR_FORMAT, "k_proj.weight' has shape [8, 4]; config.json implies [4, 8]");
    remove_tree(d);
    free(d);
    d = tiny_dir(tiny_config, NULL, "model.norm.weight", NULL);
    expect_model_error(d, SP_ERR_FORMAT, "'model.norm.weight' has shape [4]");
    remove_tree(d);
    free(d);
    d = tiny_dir(tiny_config, NULL, NULL, "model.layers.0.mlp.down_proj.weight");
    expect_model_error(d, SP_ERR_UNSUPPORTED, "down_proj.weight' has dtype I32");
    remove_tree(d);
    free(d);
}

static void test_bad_configs(void **state)
{
    (void)state;
    struct {
        const char *from, *to, *needle;
        sp_status st;
    } cases[] = {
        {"\"num_hidden_layers\":1", "\"num_hidden_layers\":-3", "num_hidden_layers", SP_ERR_FORMAT},
        {"\"num_hidden_layers\":1", "\"num_hidden_layers\":100000", "num_hidden_layers",
         SP_ERR_FORMAT},
        {"\"vocab_size\":16,", "", "required field 'vocab_size' is missing", SP_ERR_FORMAT},
        {"\"hidden_size\":8", "\"hidden_size\":\"8\"", "hidden_size", SP_ERR_FORMAT},
        {"\"num_key_value_heads\":1", "\"num_key_value_heads\":3", "num_key_value_heads",
         SP_ERR_FORMAT},
        {"LlamaForCausalLM", "BertModel", "'BertModel' is not supported", SP_ERR_UNSUPPORTED},
        {"\"rms_norm_eps\":1e-5", "\"rms_norm_eps\":0", "rms_norm_eps", SP_ERR_FORMAT},
        {"\"eos_token_id\":2", "\"eos_token_id\":2,\"rope_scaling\":{\"rope_type\":\"longrope\"}",
         "RoPE type 'longrope' is not supported", SP_ERR_UNSUPPORTED},
        {"\"eos_token_id\":2", "\"eos_token_id\":2,\"rope_scaling\":{\"rope_type\":\"llama3\"}",
         "llama3 RoPE needs", SP_ERR_FORMAT},
        {"\"eos_token_id\":2", "\"eos_token_id\":2,\"hidden_act\":\"gelu\"", "'gelu' is not supported",
         SP_ERR_UNSUPPORTED},
        {"\"eos_token_id\":2", "\"eos_token_id\":2,\"eos_token_id\":3", "appears twice", SP_ERR_FORMAT},
        {"\"max_position_embeddings\":64", "\"max_position_embeddings\":1e300",
         "max_position_embeddings", SP_ERR_FORMAT},
        {"}", ",}", "malformed JSON", SP_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cfg[2048];
        const char *at = strstr(tiny_config, cases[i].from);
        assert_non_null(at);
        size_t pre = (size_t)(at - tiny_config);
        snprintf(cfg, sizeof cfg, "%.*s%s%s", (int)pre, tiny_config, cases[i].to,
                 at + strlen(cases[i].from));
        char *d = tiny_dir(cfg, NULL, NULL, NULL);
        expect_model_error(d, cases[i].st, cases[i].needle);
        remove_tree(d);
        free(d);
    }
}

static void test_bad_directories(void **state)
{
    (void)state;
    expect_model_error("/nonexistent/specula", SP_ERR_IO, "config.json: cannot open");
    char *d = make_temp_dir();
    write_text(d, "config.json", tiny_config);
    expect_model_error(d, SP_ERR_IO, "no model.safetensors");
    /* an index that escapes the directory or names a tensor its shard lacks */
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\":{\"model.norm.weight\":\"../evil.safetensors\"}}");
    expect_model_error(d, SP_ERR_FORMAT, "not a plain shard file name");
    write_tiny(d, NULL, NULL, NULL);
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\":{\"model.nope\":\"model.safetensors\"}}");
    expect_model_error(d, SP_ERR_FORMAT, "weight_map puts tensor 'model.nope' in model.safetensors");
    /* a truncated shard */
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    remove(p);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    assert_int_equal(truncate(p, 600), 0);
    expect_model_error(d, SP_ERR_FORMAT, "model.safetensors");
    remove_tree(d);
    free(d);
}

static void test_memory_refusal(void **state)
{
    (void)state;
    char *d = tiny_dir(tiny_config, NULL, NULL, NULL);
    setenv("SPECULA_MEM_LIMIT_BYTES", "1000", 1);
    expect_model_error(d, SP_ERR_NOMEM, "only 0.0 MiB is available");
    sp_model *m;
    sp_model_params p = sp_model_default_params();
    p.device = test_device();
    p.skip_mem_check = true;
    assert_int_equal(sp_model_open(d, &p, &m, NULL), SP_OK);
    sp_model_close(m);
    unsetenv("SPECULA_MEM_LIMIT_BYTES");
    p.skip_mem_check = false;
    p.n_ctx = 65;
    sp_error err = {0};
    assert_int_equal(sp_model_open(d, &p, &m, &err), SP_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "exceeds max_position_embeddings 64"));
    remove_tree(d);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_malformed),
        cmocka_unit_test(test_safetensors_valid_edge_cases),
        cmocka_unit_test(test_tiny_model_opens),
        cmocka_unit_test(test_missing_and_misshapen_tensors),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_bad_directories),
        cmocka_unit_test(test_memory_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
