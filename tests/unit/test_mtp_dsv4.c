/* test_mtp_dsv4.c: --draft mtp on DeepSeek-V4 (the MTPBlock of DeepSeek's inference code:
 * e_proj/h_proj over the main model's hyper-connection streams, a V4 layer, its own
 * hc_head; docs/DEEPSEEK_V4.md).
 *
 * No reference exists for V4's module (transformers ignores mtp.*), so this checks what
 * holds for any module weights, on a checkpoint made here: dsv4_sqrtsoftplus_bf16 plus an
 * mtp.0.* module (layer 2's attention and MoE renamed, without its compressor; random
 * e_proj/h_proj; the main hc_head and norm copied):
 *  - the module binds under its hub names and inspect reports it;
 *  - MTP rows one position at a time equal one pass, bit for bit;
 *  - greedy speculation with MTP drafts equals plain greedy decoding (k 1, 2, 4);
 *  - the target's truncation cuts the MTP session.
 * (Sampled losslessness is the loop's, tested on V3 in test_mtp.c.) */
#include "test_util.h"
#include "format/safetensors.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "util/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BASE "dsv4_sqrtsoftplus_bf16"
#define MAX_T 512

typedef struct made {
    char *dir;
    st_entry e[MAX_T];
    size_t n;
    char *names[MAX_T];
    uint16_t proj[2][64 * 64];
} made;

static void add(made *k, const char *name, const sp_st_tensor *t)
{
    assert_true(k->n < MAX_T);
    k->names[k->n] = strdup(name);
    st_entry *e = &k->e[k->n++];
    *e = (st_entry){.name = k->names[k->n - 1], .dtype = sp_dtype_name(t->dtype), .n_dims = t->n_dims,
                    .data = t->data, .n_bytes = t->n_bytes};
    for (int i = 0; i < t->n_dims; i++)
        e->shape[i] = t->shape[i];
}

/* The base fixture plus an mtp.0 module, in a temporary directory. */
static void make_checkpoint(made *k)
{
    char src[1024];
    snprintf(src, sizeof src, "%s", fixture_path("models/" BASE));
    k->dir = make_temp_dir();
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", src);
    cJSON *cfg = read_json(p);
    cJSON_ReplaceItemInObject(cfg, "num_nextn_predict_layers", cJSON_CreateNumber(1));
    char *text = cJSON_Print(cfg);
    write_text(k->dir, "config.json", text);
    free(text);
    cJSON_Delete(cfg);
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    sp_safetensors *st;
    sp_error err = {0};
    assert_int_equal(sp_safetensors_open(p, &st, &err), SP_OK);
    const char *layer = "model.layers.2.";
    for (size_t i = 0; i < st->n_tensors; i++) {
        const sp_st_tensor *t = &st->tensors[i];
        add(k, t->name, t);
        char n[256];
        if (!strncmp(t->name, layer, strlen(layer)) && !strstr(t->name, "compressor")) {
            snprintf(n, sizeof n, "mtp.0.%s", t->name + strlen(layer));
            add(k, n, t);
        }
    }
    const struct { const char *from, *to; } copies[] = {
        {"model.norm.weight", "mtp.0.enorm.weight"},    {"model.layers.2.attn_norm.weight", "mtp.0.hnorm.weight"},
        {"model.norm.weight", "mtp.0.norm.weight"},     {"model.hc_head.hc_fn", "mtp.0.hc_head_fn"},
        {"model.hc_head.hc_base", "mtp.0.hc_head_base"}, {"model.hc_head.hc_scale", "mtp.0.hc_head_scale"},
    };
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++) {
        const sp_st_tensor *t = sp_safetensors_find(st, copies[i].from);
        assert_non_null(t);
        add(k, copies[i].to, t);
    }
    const char *proj[2] = {"mtp.0.e_proj.weight", "mtp.0.h_proj.weight"};
    for (int j = 0; j < 2; j++) {
        for (int i = 0; i < 64 * 64; i++)
            k->proj[j][i] = sp_f32_to_bf16(test_frand() * 0.2f);
        sp_st_tensor t = {.dtype = SP_DTYPE_BF16, .n_dims = 2, .shape = {64, 64}, .data = (const unsigned char *)k->proj[j],
                          .n_bytes = sizeof k->proj[j]};
        add(k, proj[j], &t);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", k->dir);
    write_safetensors(p, k->e, k->n);
    sp_safetensors_close(st);
    for (size_t i = 0; i < k->n; i++)
        free(k->names[i]);
}

static void pair(sp_model *m, int64_t n_ctx, sp_session **t, sp_session **d)
{
    sp_error err = {0};
    sp_session_params sp = {.n_ctx = n_ctx};
    assert_int_equal(sp_session_new(m, &sp, t, &err), SP_OK);
    if (sp_session_new_mtp(*t, d, &err) != SP_OK)
        fail_msg("%s", err.msg);
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

static void test_v4_mtp(void **state)
{
    (void)state;
    if (strcmp(test_device(), "cpu"))
        return; /* V4 runs on the CPU backend only */
    static made k;
    memset(&k, 0, sizeof k);
    make_checkpoint(&k);
    sp_model *m = open_model_dir(k.dir, 2);
    sp_model_info info;
    sp_model_get_info(m, &info);
    assert_int_equal(info.n_mtp_layers, 1);
    int64_t V = sp_model_n_vocab(m);
    sp_error err = {0};

    /* one pass vs one position at a time */
    int32_t p[24];
    for (int i = 0; i < 24; i++)
        p[i] = (int32_t)((i * 37 + 11) % V);
    float *rows = malloc(23 * (size_t)V * sizeof *rows), *one = malloc((size_t)V * sizeof *one);
    sp_session *t, *d;
    pair(m, 64, &t, &d);
    assert_int_equal(sp_session_eval(t, p, 24, NULL, &err), SP_OK);
    assert_int_equal(sp_session_eval_mtp(d, p + 1, sp_session_hidden(t, 0), 23, rows, &err), SP_OK);
    assert_int_equal(sp_session_truncate(d, 0, &err), SP_OK);
    for (int i = 0; i < 23; i++) {
        assert_int_equal(sp_session_eval_mtp(d, p + i + 1, sp_session_hidden(t, i), 1, one, &err), SP_OK);
        if (memcmp(one, rows + (size_t)i * (size_t)V, (size_t)V * sizeof *one))
            fail_msg("MTP row %d: one position at a time differs from one pass", i);
    }
    assert_int_equal(sp_session_truncate(t, 10, &err), SP_OK);
    assert_int_equal(sp_session_n_past(d), 9);
    sp_session_free(d);
    sp_session_free(t);
    free(rows);
    free(one);

    /* greedy == plain */
    sp_generate_params gp = {.n_predict = 40, .ignore_eos = true, .sampling = sp_sampling_default_params()};
    int32_t plain[64], spec[64];
    sp_generate_stats st, st2;
    sp_spec_stats ss;
    int64_t drafted = 0, accepted = 0;
    for (int pi = 0; pi < 2; pi++) {
        size_t n = pi ? 1 : 24;
        run(m, false, 0, p, n, &gp, plain, &st, NULL);
        for (int kk = 1; kk <= 4; kk *= 2) {
            run(m, true, kk, p, n, &gp, spec, &st2, &ss);
            assert_int_equal(st.n_generated, st2.n_generated);
            for (int64_t i = 0; i < st.n_generated; i++)
                if (plain[i] != spec[i])
                    fail_msg("prompt %d, k %d: token %lld differs: plain %d, MTP-drafted %d", pi, kk,
                             (long long)i, plain[i], spec[i]);
            assert_true(ss.drafted > 0);
            drafted += ss.drafted;
            accepted += ss.accepted;
        }
    }
    print_message("  V4 greedy: %lld of %lld MTP draft tokens accepted (untrained module)\n",
                  (long long)accepted, (long long)drafted);
    sp_model_close(m);
    remove_tree(k.dir);
    free(k.dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_v4_mtp)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
