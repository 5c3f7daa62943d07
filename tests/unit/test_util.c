/* test_util.c: helpers shared by the cmocka tests (see test_util.h). */
#define _GNU_SOURCE
#include "test_util.h"
#include "format/safetensors.h"
#include "runtime/sampler.h"
#include "util/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *fixture_path(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", SPECULA_FIXTURES_DIR, rel);
    return buf;
}

char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    buf[sz] = 0;
    if (n)
        *n = (size_t)sz;
    return buf;
}

cJSON *read_json(const char *path)
{
    char *t = read_all(path, NULL);
    cJSON *j = cJSON_Parse(t);
    free(t);
    if (!j)
        fail_msg("bad JSON in %s", path);
    return j;
}

float *read_floats(const char *path, size_t *n)
{
    size_t bytes;
    char *b = read_all(path, &bytes);
    *n = bytes / sizeof(float);
    return (float *)b;
}

double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

char *make_temp_dir(void)
{
    char tmpl[] = "/tmp/specula-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

void remove_tree(const char *path)
{
    char cmd[4200];
    if (strncmp(path, "/tmp/specula-test-", 18) != 0)
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", path);
}

void write_text(const char *dir, const char *name, const char *text)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

void copy_file(const char *from, const char *to)
{
    size_t n;
    char *b = read_all(from, &n);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

static void put_u64(FILE *f, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    fwrite(b, 1, 8, f);
}

void write_safetensors(const char *path, const st_entry *e, size_t n)
{
    char *hdr = malloc(1 << 20);
    assert_non_null(hdr);
    size_t o = 0, off = 0;
    o += (size_t)sprintf(hdr + o, "{");
    for (size_t i = 0; i < n; i++) {
        o += (size_t)sprintf(hdr + o, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
                             e[i].name, e[i].dtype);
        for (int d = 0; d < e[i].n_dims; d++)
            o += (size_t)sprintf(hdr + o, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
        o += (size_t)sprintf(hdr + o, "],\"data_offsets\":[%zu,%zu]}", off, off + e[i].n_bytes);
        off += e[i].n_bytes;
    }
    o += (size_t)sprintf(hdr + o, "}");
    while (o % 8)
        hdr[o++] = ' ';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    put_u64(f, o);
    fwrite(hdr, 1, o, f);
    for (size_t i = 0; i < n; i++)
        fwrite(e[i].data, 1, e[i].n_bytes, f);
    fclose(f);
    free(hdr);
}

void write_raw_safetensors(const char *path, const char *header, const void *data,
                           size_t n_data, uint64_t header_len_override)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    put_u64(f, header_len_override ? header_len_override : strlen(header));
    fwrite(header, 1, strlen(header), f);
    if (n_data)
        fwrite(data, 1, n_data, f);
    fclose(f);
}

int run_cmd(const char *cmd)
{
    int st = system(cmd);
    if (st == -1)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

char *copy_fixture(const char *name, const tensor_edit *edits, size_t n_edits, const char *qcfg)
{
    char src[4200], path[4300];
    snprintf(src, sizeof src, "%s/%s", fixture_path("models"), name);
    char *dir = make_temp_dir();
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    sp_safetensors *st;
    sp_error err = {0};
    assert_int_equal(sp_safetensors_open(path, &st, &err), SP_OK);
    st_entry *e = calloc(st->n_tensors, sizeof *e);
    unsigned char **own = calloc(st->n_tensors, sizeof *own);
    size_t n = 0;
    for (size_t i = 0; i < st->n_tensors; i++) {
        const sp_st_tensor *t = &st->tensors[i];
        st_entry x = {t->name, sp_dtype_name(t->dtype), t->n_dims, {0}, t->data, t->n_bytes};
        for (int d = 0; d < t->n_dims; d++)
            x.shape[d] = t->shape[d];
        bool drop = false;
        for (size_t k = 0; k < n_edits; k++) {
            const tensor_edit *ed = &edits[k];
            if (strcmp(ed->name, "*") && strcmp(ed->name, t->name))
                continue;
            drop = ed->drop;
            if (ed->rename)
                x.name = ed->rename;
            if (ed->dtype)
                x.dtype = ed->dtype;
            if (ed->n_dims > 0) {
                x.n_dims = ed->n_dims;
                memcpy(x.shape, ed->shape, sizeof x.shape);
            }
            uint64_t el = 1;
            for (int d = 0; d < x.n_dims; d++)
                el *= (uint64_t)x.shape[d];
            x.n_bytes = (size_t)(el * sp_dtype_bits(sp_dtype_from_name(x.dtype)) / 8);
            own[i] = calloc(1, x.n_bytes ? x.n_bytes : 1);
            memcpy(own[i], t->data, x.n_bytes < t->n_bytes ? x.n_bytes : t->n_bytes);
            if (ed->patch)
                ed->patch(own[i], x.n_bytes, x.dtype, ed->patch_ctx);
            x.data = own[i];
        }
        if (!drop)
            e[n++] = x;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_safetensors(path, e, n);
    for (size_t i = 0; i < st->n_tensors; i++)
        free(own[i]);
    free(own);
    free(e);
    sp_safetensors_close(st);
    snprintf(path, sizeof path, "%s/generation_config.json", src);
    FILE *g = fopen(path, "rb");
    if (g) {
        fclose(g);
        char to[4300];
        snprintf(to, sizeof to, "%s/generation_config.json", dir);
        copy_file(path, to);
    }
    snprintf(path, sizeof path, "%s/config.json", src);
    cJSON *cfg = read_json(path);
    if (qcfg) {
        cJSON_DeleteItemFromObject(cfg, "quantization_config");
        if (*qcfg)
            cJSON_AddItemToObject(cfg, "quantization_config", cJSON_Parse(qcfg));
    }
    char *text = cJSON_Print(cfg);
    write_text(dir, "config.json", text);
    free(text);
    cJSON_Delete(cfg);
    return dir;
}

const char *test_device(void)
{
    const char *d = getenv("SPECULA_TEST_DEVICE");
    return d && *d ? d : "cpu";
}

static sp_model *open_on(const char *dir, int n_threads, const char *device)
{
    sp_model *m;
    sp_error err = {0};
    sp_model_params mp = sp_model_default_params();
    mp.n_threads = n_threads;
    mp.device = device;
    if (sp_model_open(dir, &mp, &m, &err) != SP_OK)
        fail_msg("%s: %s", dir, err.msg);
    return m;
}

sp_model *open_model_dir(const char *dir, int n_threads)
{
    return open_on(dir, n_threads, test_device());
}

sp_model *open_fixture_model_on(const char *name, int n_threads, const char *device)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", fixture_path("models"), name);
    return open_on(dir, n_threads, device);
}

sp_model *open_fixture_model(const char *name, int n_threads)
{
    return open_fixture_model_on(name, n_threads, test_device());
}

float test_frand(void)
{
    static uint64_t state = 88172645463325252ull;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (float)((double)(state >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

void expect_same(const char *what, const run_out *plain, const run_out *spec)
{
    if (plain->st.n_generated != spec->st.n_generated || strcmp(plain->st.stop_reason, spec->st.stop_reason))
        fail_msg("%s: plain generated %lld (%s), speculative %lld (%s)", what,
                 (long long)plain->st.n_generated, plain->st.stop_reason,
                 (long long)spec->st.n_generated, spec->st.stop_reason);
    for (int64_t i = 0; i < plain->st.n_generated; i++)
        if (plain->tokens[i] != spec->tokens[i])
            fail_msg("%s: token %lld differs: plain %d, speculative %d", what, (long long)i,
                     plain->tokens[i], spec->tokens[i]);
}

/* Chi-square critical value for df degrees of freedom at p = 1e-6 (Wilson-Hilferty). */
static double chi2_crit(int df)
{
    const double z = 4.753; /* upper 1e-6 quantile of N(0, 1) */
    double a = 2.0 / (9.0 * df);
    return df * pow(1 - a + z * sqrt(a), 3);
}

/* Chi-square of counts against probabilities; bins with expectation < 5 are pooled. */
void chi2_check(const char *what, const int64_t *count, const double *p, int64_t n, int64_t total)
{
    double chi = 0, pool_e = 0, pool_o = 0;
    int df = -1;
    double tv = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = p[i] * (double)total;
        tv += fabs((double)count[i] / (double)total - p[i]);
        if (e < 5) {
            pool_e += e;
            pool_o += (double)count[i];
            if (p[i] == 0 && count[i])
                fail_msg("%s: token %lld has probability 0 but was emitted %lld times", what,
                         (long long)i, (long long)count[i]);
            continue;
        }
        chi += ((double)count[i] - e) * ((double)count[i] - e) / e;
        df++;
    }
    if (pool_e >= 5) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        df++;
    }
    if (df < 1)
        df = 1;
    if (chi > chi2_crit(df))
        fail_msg("%s: chi-square %.1f exceeds %.1f (df %d), total variation %.4f", what, chi,
                 chi2_crit(df), df, tv / 2);
    print_message("  %-40s chi2 %.1f (crit %.1f, df %d), TV %.4f\n", what, chi, chi2_crit(df), df, tv / 2);
}

/* Scales every BF16/F32 value by (1 + amount * r), r uniform in [-1, 1]. */
static void perturb(unsigned char *d, size_t n, const char *dtype, void *ctx)
{
    float amount = *(const float *)ctx;
    static sp_rng rng;
    static bool seeded;
    if (!seeded) {
        sp_rng_seed(&rng, 99);
        seeded = true;
    }
    bool f32 = !strcmp(dtype, "F32");
    if (!f32 && strcmp(dtype, "BF16"))
        return;
    for (size_t k = 0; k < n; k += f32 ? 4 : 2) {
        float f = (float)(1.0 + amount * (2.0 * sp_rng_uniform(&rng) - 1.0));
        if (f32) {
            float v;
            memcpy(&v, d + k, 4);
            v *= f;
            memcpy(d + k, &v, 4);
        } else {
            uint16_t h;
            memcpy(&h, d + k, 2);
            h = sp_f32_to_bf16(sp_bf16_to_f32(h) * f);
            memcpy(d + k, &h, 2);
        }
    }
}

/* perturbed_fixture's edit. */
char *perturbed_fixture(const char *name, float amount)
{
    static float a;
    a = amount;
    tensor_edit all = {.name = "*", .patch = perturb, .patch_ctx = &a};
    return copy_fixture(name, &all, 1, NULL);
}
